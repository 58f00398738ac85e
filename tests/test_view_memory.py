"""The view's memory outside its caches grows with its segments alone: the indexes and bloom filters of its table
files are read through the block cache (by partitions) instead of being held beside it while the file is open,
where they took ~1.8 bytes per row (10 bits of filter per key, and an index entry per block), but for the bloom
filters of the segments' files, held whole (10 bits per segment), which the apply path probes for each new segment.
Its memtables keep to their budget."""

from __future__ import annotations

import random
from pathlib import Path

from rlmm.state import keys as K
from rlmm.state import view as view_module
from rlmm.state.rocks import COMPACTION_READAHEAD_KB, FILE_WRITE_BUFFER_KB
from rlmm.state.view import RELEASE_AFTER_ROWS, View

ROWS_PER_FILE = 20_000
FILES = 3
SMALL_COLUMN_FAMILIES = (K.META, K.PARTITIONS, K.EPOCHS, K.METADATA_OFFSETS)


def _files_of_rows(view: View, cf: str) -> tuple[int, int]:
    """``FILES`` table files of ``ROWS_PER_FILE`` random rows each in ``cf``: the memtables' bytes before the last
    flush, and the bytes the open table files hold beside the block cache."""
    rng = random.Random(7)
    for _ in range(FILES):
        with view.batch() as batch:
            for _ in range(ROWS_PER_FILE):
                batch.stage.put(cf, rng.randbytes(20), bytes(100))
        unflushed = view.memory()["memtables"]
        assert unflushed > ROWS_PER_FILE * 120  # the rows, before the flush
        view.flush()  # a table file each
    assert view._kv.cfs[cf].property_int_value("rocksdb.num-files-at-level0") == FILES
    assert sum(1 for _ in view.items(cf)) == ROWS_PER_FILE * FILES  # and every row reads back
    return unflushed, view.memory()["table_readers"]


def test_table_files_hold_their_indexes_and_filters_in_the_block_cache(tmp_path: Path) -> None:
    with View(tmp_path / "view", write_buffer_mb=64) as view:  # a memtable holds each batch whole
        unflushed, held = _files_of_rows(view, K.OFFSETS)
        assert held < ROWS_PER_FILE * FILES // 4, f"{held} bytes held beside the block cache"
        memory = view.memory()
        assert memory["memtables"] < unflushed // 10 and memory["block_cache"] > 0


def test_the_segments_files_hold_their_whole_bloom_filters(tmp_path: Path) -> None:
    """10 bits per row, and less than the ~1.8 bytes per row that filters and indexes held whole took (the indexes
    stay in the cache)."""
    assert K.HELD_FILTERS == (K.SEGMENTS,)
    with View(tmp_path / "view", write_buffer_mb=64) as view:
        _, held = _files_of_rows(view, K.SEGMENTS)
        rows = ROWS_PER_FILE * FILES
        assert rows * 10 // 8 <= held < rows * 7 // 4, f"{held} bytes held beside the block cache for {rows} rows"


def test_a_column_familys_memtable_is_written_out_at_its_share_of_the_budget(tmp_path: Path) -> None:
    """RocksDB keeps the database's memtable budget by writing out one column family's memtable at a time, not the
    largest: each column family's own limit is what keeps a large one within a share of the budget."""
    budget_mb, batches, rows = 8, 12, 5_000  # ~8 MB of rows into one column family
    half = (budget_mb << 20) // 2
    rng = random.Random(11)
    with View(tmp_path / "view", write_buffer_mb=budget_mb) as view:
        for _ in range(batches):
            with view.batch() as batch:
                for _ in range(rows):
                    batch.stage.put(K.SEGMENTS, rng.randbytes(20), bytes(100))
                for cf in SMALL_COLUMN_FAMILIES:  # a row or two in others at each batch, as a partition's rows are
                    batch.stage.put(cf, rng.randbytes(20), bytes(10))
            active = view._kv.cfs[K.SEGMENTS].property_int_value("rocksdb.cur-size-active-mem-table")
            assert active < half, f"{active} bytes in the active memtable, of a {budget_mb} MB budget"
        assert sum(1 for _ in view.items(K.SEGMENTS)) == batches * rows


def _options_taken(view_dir: Path) -> dict[str, dict[str, str]]:
    """The options RocksDB took, as it records them in the database's OPTIONS file, by section."""
    (options_file,) = sorted(view_dir.glob("OPTIONS-*"))[-1:]
    sections: dict[str, dict[str, str]] = {}
    section = sections.setdefault("", {})
    for line in options_file.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = sections.setdefault(line, {})
        elif "=" in line:
            key, value = line.split("=", 1)
            section[key] = value
    return sections


def test_the_background_works_buffers_are_what_the_view_chose(tmp_path: Path) -> None:
    """RocksDB's own defaults are 2 MB of compaction readahead and 1 MB of file write buffer."""
    with View(tmp_path / "view"):
        pass
    taken = _options_taken(tmp_path / "view")["[DBOptions]"]
    assert int(taken["compaction_readahead_size"]) == COMPACTION_READAHEAD_KB << 10 < 2 << 20
    assert int(taken["writable_file_max_buffer_size"]) == FILE_WRITE_BUFFER_KB << 10 < 1 << 20


def test_only_the_segments_filters_are_whole_and_outside_the_cache(tmp_path: Path) -> None:
    with View(tmp_path / "view"):
        pass
    taken = _options_taken(tmp_path / "view")
    for cf in K.COLUMN_FAMILIES:
        table = taken[f'[TableOptions/BlockBasedTable "{cf}"]']
        held = cf in K.HELD_FILTERS
        assert table["partition_filters"] == str(not held).lower(), cf
        assert table["cache_index_and_filter_blocks"] == str(not held).lower(), cf
        assert table["index_type"] == "kTwoLevelIndexSearch", cf
        assert "bloomfilter" in table["filter_policy"], cf


def test_glibcs_free_pages_are_given_back_after_so_many_rows(tmp_path: Path, monkeypatch) -> None:
    releases: list[int] = []
    monkeypatch.setattr(view_module, "release_free_memory", lambda: releases.append(1))
    rng = random.Random(5)
    batches, rows = 6, RELEASE_AFTER_ROWS // 4 + 1  # a release at the fourth batch, none before
    with View(tmp_path / "view") as view:
        for done in range(1, batches + 1):
            with view.batch() as batch:
                for _ in range(rows):
                    batch.stage.put(K.SEGMENTS, rng.randbytes(20), bytes(10))
            assert len(releases) == done // 4, f"{len(releases)} releases after {done * rows} rows"
