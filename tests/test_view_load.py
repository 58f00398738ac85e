"""``View.load``, the bulk load restore fills a fresh view with: what it loads reads back row for row and answer for
answer, durably; a view that holds anything refuses it; a load that fails before its batch is refused again,
rather than loaded over."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmm.errors import ViewNotEmpty, ViewStorageFailed
from rlmm.records.model import TopicIdPartition
from rlmm.state import keys as K
from rlmm.state.view import View, write_load_file
from tests.snapshot_support import live_view, non_partition_rows, view_answers, view_rows, workload_events


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[View]:
    events, tps = workload_events(800)
    with live_view(events, tps, tmp_path_factory.mktemp("source") / "view") as view:
        yield view


def _load_args(source: View, files_dir: Path) -> dict:
    """The source's content as ``View.load`` takes it: its per-partition column families as files, its partitions
    as rows."""
    files_dir.mkdir(exist_ok=True)
    files: dict[str, list[str]] = {}
    for cf in K.PER_PARTITION:
        items = list(source.items(cf))
        if items:
            files[cf] = [str(files_dir / f"{cf}.sst")]
            write_load_file(files[cf][0], cf, items)
    rows = [(cf, key, value) for cf in (K.PARTITIONS, K.TP_BY_ID) for key, value in source.items(cf)]
    return {
        "rows": rows,
        "files": files,
        "next_tpid": K.read_u32(dict(source.items(K.META))[K.NEXT_TPID_KEY]),
        "metadata_offsets": source.metadata_offsets(),
        "quarantine": list(source.quarantine()),
    }


def _assert_same(view: View, source: View) -> None:
    assert view_rows(view.reader) == view_rows(source.reader)
    assert view_answers(view.queries, view.reader) == view_answers(source.queries, source.reader)
    assert non_partition_rows(view) == non_partition_rows(source)


def _cf_sizes(view: View) -> dict[str, int]:
    return {cf: count for cf, count in view.check()}


def test_a_loaded_view_reads_as_its_source_and_stays_so(source: View, tmp_path: Path) -> None:
    args = _load_args(source, tmp_path / "files")
    assert args["files"] and args["quarantine"] and args["rows"]
    with View(tmp_path / "view") as view:
        view.load(**args)
        _assert_same(view, source)
    with View(tmp_path / "view") as reopened:  # what load wrote is on disk
        _assert_same(reopened, source)
        with reopened.batch() as batch:  # the tpid counter: a new partition gets a tpid of its own
            batch.assign(TopicIdPartition(b"\x01" * 16, "new", 0))
        tpids = [key for key, _ in reopened.items(K.TP_BY_ID)]
        assert len(set(tpids)) == len(tpids) == len(list(source.items(K.TP_BY_ID))) + 1


def test_a_view_that_holds_state_refuses_a_load(source: View, tmp_path: Path) -> None:
    args = _load_args(source, tmp_path / "files")
    with View(tmp_path / "view") as view:
        with view.batch() as batch:
            batch.apply(0, 0, None)  # a quarantined tombstone is state
        before = _cf_sizes(view)
        with pytest.raises(ViewNotEmpty):
            view.load(**args)
        assert _cf_sizes(view) == before


def test_a_load_whose_rows_fail_writes_nothing(source: View, tmp_path: Path) -> None:
    args = _load_args(source, tmp_path / "files")

    def failing_rows() -> Iterator[tuple[str, bytes, bytes]]:
        yield from args["rows"][:3]
        raise RuntimeError("the snapshot's rows ran out")

    with View(tmp_path / "view") as view:
        empty = _cf_sizes(view)
        with pytest.raises(RuntimeError):
            view.load(**{**args, "rows": failing_rows()})
        assert _cf_sizes(view) == empty
        view.load(**args)
        _assert_same(view, source)


def test_a_load_that_fails_after_ingesting_files_is_refused_again(source: View, tmp_path: Path) -> None:
    args = _load_args(source, tmp_path / "files")
    files = {K.SEGMENTS: args["files"][K.SEGMENTS], K.EPOCHS: [str(tmp_path / "missing.sst")]}
    with View(tmp_path / "view") as view:
        with pytest.raises(ViewStorageFailed):
            view.load(**{**args, "files": files})
        sizes = _cf_sizes(view)
        assert sizes[K.SEGMENTS] > 0 and sizes[K.PARTITIONS] == sizes[K.METADATA_OFFSETS] == 0  # the batch never came
        with pytest.raises(ViewNotEmpty):
            view.load(**args)


def test_loaded_files_have_the_bloom_filters_and_index_partitions_of_the_views_own(
    source: View, tmp_path: Path
) -> None:
    # without them, a restored view's reads went through the whole index of its largest files, and read a block
    # for each key that a file does not hold (applying a new segment checks that its id is new)
    args = _load_args(source, tmp_path / "files")
    with View(tmp_path / "view") as view:
        view.load(**args)
        segments = sum(1 for _ in view.items(K.SEGMENTS))
        table = _table_properties(view, K.SEGMENTS)
    assert table["# entries for filter"] == segments > 0
    assert table["filter block size"] > 0 and table["# index partitions"] > 0


def test_loaded_segments_files_have_whole_filters_as_the_views_own(tmp_path: Path) -> None:
    """``K.HELD_FILTERS``. By partitions, each filter partition also ends an index partition: the same rows laid out
    for another column family make more of them."""
    rng = random.Random(3)
    rows = sorted((rng.randbytes(20), bytes(100)) for _ in range(20_000))
    with View(tmp_path / "view") as view:
        for cf in (K.SEGMENTS, K.OFFSETS):
            write_load_file(tmp_path / f"{cf}.sst", cf, rows)
            view._kv.ingest(cf, [str(tmp_path / f"{cf}.sst")])
        partitions = {cf: _table_properties(view, cf)["# index partitions"] for cf in (K.SEGMENTS, K.OFFSETS)}
    assert 0 < partitions[K.SEGMENTS] < partitions[K.OFFSETS], partitions


def _table_properties(view: View, cf: str) -> dict[str, int]:
    properties = view._kv.cfs[cf].property_value("rocksdb.aggregated-table-properties")
    return {name.strip(): int(value) for name, value in re.findall(r"([^;=]+)=(\d+)", properties)}
