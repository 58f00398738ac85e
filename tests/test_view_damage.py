"""A view whose files are damaged on disk never answers wrongly: every read either gives what the
undamaged view gives or fails with ``ViewDamaged``; the server then turns NOT_SERVING and refuses reads
(DATA_LOSS), the commands exit 1 saying the view is damaged, and ``rlmm view check`` finds it. Real
RocksDB files, damaged by overwriting bytes in the middle of a table file, as a bad disk would."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import grpc
import pytest

from rlmm.client import RlmmClient
from rlmm.errors import CallError, ViewDamaged, ViewSchemaMismatch
from rlmm.records.model import TopicIdPartition
from rlmm.state import keys as K
from rlmm.state.kv import StagedKV
from rlmm.state.rocks import RocksKV
from rlmm.state.view import SCHEMA_VERSION, View, reset_view
from rlmm.workload import Workload, WorkloadConfig
from tests.grpc_support import fill_view, new_tp, segment
from tests.snapshot_support import live_view
from tests.test_cli_errors import RLMM, invoke, one_error_line

KEYS = 30_000


def damage(path: Path, cf: str = K.OFFSETS, places: int = 3) -> Path:
    """Overwrite 64 bytes at ``places`` spots inside the largest table file of column family ``cf`` of the
    RocksDB at ``path`` (the offset index by default: every lookup seeks in it)."""
    kv = RocksKV(path, read_only=True)
    listing = kv.cfs[cf].property_value("rocksdb.sstables")  # lines " NUMBER:SIZE[...": the live table files
    kv.close()
    number, size = max(
        ((int(n), int(b)) for n, b in re.findall(r"^\s*(\d+):(\d+)\[", listing, re.MULTILINE)), key=lambda file: file[1]
    )
    table = path / f"{number:06d}.sst"
    with table.open("r+b") as f:
        for i in range(1, places + 1):
            f.seek(size * i // (places + 1))
            f.write(b"\xa5" * 64)
    return table


def same_or_damaged(clean: Callable[[], object], damaged: Callable[[], object]) -> bool:
    """Whether the damaged read failed (True); when it answered, its answer must be the clean one."""
    try:
        answer = damaged()
    except ViewDamaged:
        return True
    assert answer == clean()
    return False


@pytest.fixture(scope="module")
def kv_pair(tmp_path_factory) -> tuple[RocksKV, RocksKV]:
    """Two RocksDB stores with the same 30,000 offset-index keys, the second one damaged."""
    root = tmp_path_factory.mktemp("kv")
    kv = RocksKV(root / "clean")
    stage = StagedKV(kv)
    for i in range(KEYS):
        stage.put(K.OFFSETS, b"p" + (i * 10).to_bytes(8, "big"), i.to_bytes(8, "big") * 8)
    kv.commit(stage)
    kv.flush()
    kv.close()
    shutil.copytree(root / "clean", root / "damaged")
    damage(root / "damaged")
    return RocksKV(root / "clean", cache_mb=1), RocksKV(root / "damaged", cache_mb=1)


def test_range_reads_fail_on_a_damaged_block_instead_of_ending_early(kv_pair) -> None:
    clean, damaged = kv_pair
    failed = 0
    for i in range(0, KEYS * 10, 37):
        key = b"p" + i.to_bytes(8, "big")
        for read in ("floor", "ceiling"):
            failed += same_or_damaged(
                lambda: getattr(clean, read)(K.OFFSETS, key, b"p"), lambda: getattr(damaged, read)(K.OFFSETS, key, b"p")
            )
    assert failed > 0  # the damage was reached, and reported each time
    assert same_or_damaged(
        lambda: list(clean.iter_from(K.OFFSETS, b"p", b"p")), lambda: list(damaged.iter_from(K.OFFSETS, b"p", b"p"))
    )
    assert same_or_damaged(
        lambda: list(clean.iter_down_from(K.OFFSETS, b"q", b"p")),
        lambda: list(damaged.iter_down_from(K.OFFSETS, b"q", b"p")),
    )
    whole = [key for key, _ in clean.iter_from(K.OFFSETS, b"p", b"p")]
    assert clean.keys_with_prefix(K.OFFSETS, b"p", KEYS + 1) == whole
    assert clean.keys_with_prefix(K.OFFSETS, b"p", 100) == whole[:100]
    try:  # RocksDB's key iterator ends at the damage as if the keys ended there: never a shorter list
        assert damaged.keys_with_prefix(K.OFFSETS, b"p", KEYS + 1) is None
    except ViewDamaged:
        pass
    with pytest.raises(ViewDamaged, match="Corruption: block checksum mismatch"):
        damaged.count_keys(K.OFFSETS)
    assert clean.count_keys(K.OFFSETS) == KEYS
    assert isinstance(damaged.fault, ViewDamaged) and clean.fault is None


@pytest.fixture(scope="module")
def views(tmp_path_factory) -> tuple[Path, Path, list[TopicIdPartition]]:
    """A service's view of a generated workload, and a copy of it with a damaged table file."""
    root = tmp_path_factory.mktemp("views")
    load = Workload(WorkloadConfig(partitions=8, metadata_partitions=3, seed=9, retained_segments=2_000))
    events = [(e.metadata_partition, e.offset, e.value) for e in load.events(40_000)]
    tps = load.user_partitions()
    view = live_view(events, tps, root / "clean", batch_size=1_000)
    view.flush()
    view.close()
    shutil.copytree(root / "clean", root / "damaged")
    damage(root / "damaged")
    return root / "clean", root / "damaged", tps


def live_partitions(view: View, tps: list[TopicIdPartition]) -> list[TopicIdPartition]:
    """The partitions whose metadata the workload did not delete."""
    return [tp for tp in tps if not view.queries.partition_row(tp).removed]


def lookups(view: View, tps: list[TopicIdPartition]) -> list[tuple[TopicIdPartition, int, int]]:
    """(partition, epoch, offset) at the start, middle and end of every segment the view lists."""
    out = []
    for tp in live_partitions(view, tps):
        for seg in view.queries.list_remote_log_segments(tp):
            for epoch, start in seg.segment_leader_epochs:
                for offset in {start, (start + seg.end_offset) // 2, seg.end_offset}:
                    out.append((tp, epoch, offset))
    return out


def test_every_query_answers_as_the_undamaged_view_or_fails(views) -> None:
    clean_dir, damaged_dir, tps = views
    with View(clean_dir, read_only=True) as clean, View(damaged_dir, read_only=True, cache_mb=1) as damaged:
        asked = lookups(clean, tps)
        assert len(asked) > 10_000
        failed = sum(
            same_or_damaged(
                lambda: clean.queries.remote_log_segment_metadata(*lookup),
                lambda: damaged.queries.remote_log_segment_metadata(*lookup),
            )
            for lookup in asked
        )
        for tp in live_partitions(clean, tps):
            failed += same_or_damaged(
                lambda: list(clean.queries.list_remote_log_segments(tp)),
                lambda: list(damaged.queries.list_remote_log_segments(tp)),
            )
        for cf in K.COLUMN_FAMILIES:
            failed += same_or_damaged(lambda: list(clean.items(cf)), lambda: list(damaged.items(cf)))
        assert failed > 0
        assert damaged.fault is not None and clean.fault is None


def test_view_check_and_export_exit_1_on_a_damaged_view(views, tmp_path) -> None:
    clean_dir, damaged_dir, _ = views
    result = invoke("view", "check", "--view", str(clean_dir))
    assert result.exit_code == 0, result.output
    checked = json.loads(result.stdout)
    assert checked["view"] == str(clean_dir) and checked["entries"][K.SEGMENTS] > 1_000
    assert set(checked["entries"]) == set(K.COLUMN_FAMILIES)

    result = invoke("view", "check", "--view", str(damaged_dir))
    assert result.exit_code == 1 and result.stdout == ""
    one_error_line(
        result.stderr, f"the view {damaged_dir} is damaged", "block checksum mismatch", "rlmm snapshot restore"
    )
    assert "in use" not in result.stderr  # "block" holds "lock": errors are told apart by type

    result = invoke(
        "snapshot", "export", "--view", str(damaged_dir), "--out", str(tmp_path / "s"), "--num-partitions", "3"
    )
    assert result.exit_code == 1
    one_error_line(result.stderr, "is damaged", "block checksum mismatch")
    result = invoke(
        "snapshot", "export", "--view", str(clean_dir), "--out", str(tmp_path / "s"), "--num-partitions", "3"
    )
    assert result.exit_code == 0


def test_the_server_stops_serving_a_damaged_view(views, tmp_path) -> None:
    """``rlmm serve`` over the damaged view: SERVING until a read meets the damage; that read gets
    DATA_LOSS, health turns NOT_SERVING, every read from then on is refused, and the status and the
    metrics say why. No answer differs from the undamaged view's."""
    clean_dir, damaged_dir, tps = views
    served = tmp_path / "served"
    shutil.copytree(damaged_dir, served)
    server = subprocess.Popen(
        [
            *RLMM,
            "serve",
            "--view",
            str(served),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-level",
            "warning",
            "--log-format",
            "text",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLMM_CACHE_MB": "1", "RLMM_CHECK_MB_PER_S": "0"},  # damage found by a read
    )
    try:
        started = json.loads(server.stdout.readline())
        with (
            RlmmClient(f"127.0.0.1:{started['port']}", retry_for=0) as client,
            View(clean_dir, read_only=True) as clean,
        ):
            assert client.health() == "SERVING"
            codes = []
            for lookup in lookups(clean, tps):
                try:
                    answer = client.remote_log_segment_metadata(*lookup)
                except CallError as exc:
                    codes.append(exc.code)
                    break
                assert answer == clean.queries.remote_log_segment_metadata(*lookup)
            assert codes == [grpc.StatusCode.DATA_LOSS]
            deadline = time.monotonic() + 5
            while client.health() != "NOT_SERVING" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.health() == "NOT_SERVING"
            with pytest.raises(CallError) as refused:
                client.is_ready(tps[0])
            assert refused.value.code == grpc.StatusCode.DATA_LOSS and refused.value.reason == "VIEW_DAMAGED"
            assert "rlmm serve --reset" in refused.value.message
            status = client.status()
            assert not status["serving"] and "Corruption: block checksum mismatch" in status["failure"]
        metrics = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, urllib.request; sys.stdout.write(urllib.request."
                f"urlopen('http://127.0.0.1:{started['metrics_port']}/metrics').read().decode())",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "rlmm_view_damaged 1.0" in metrics and "rlmm_serving 0.0" in metrics
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert "NOT_SERVING" in stderr and "Corruption" in stderr  # logged once, with RocksDB's message


# a column family no read of these tests' servers touches, compacted by RocksDB's default from four level-0 files on
# (not one of the seek indexes, which are compacted from one on)
COLD: Final = K.TIMESTAMP_TREES


def damaged_cold_rows(path: Path) -> None:
    """A view whose ``COLD`` column family holds three table files of 20,000 rows, the largest of them damaged."""
    with View(path) as view:
        for table in range(3):
            with view.batch() as batch:
                for i in range(20_000):
                    batch.stage.put(COLD, b"p" + (i * 3 + table).to_bytes(8, "big"), i.to_bytes(8, "big") * 8)
            view.flush()
    damage(path, COLD)


def test_damage_a_compaction_meets_is_reported_by_the_close_as_damage(tmp_path) -> None:
    """A fourth table file makes RocksDB compact the four, which reads the damaged one: the close that follows
    reports it as ``ViewDamaged`` (the commands' one line "the view ... is damaged ...: restore it"), not as
    RocksDB's raw exception (a traceback)."""
    damaged_cold_rows(tmp_path / "view")
    kv = RocksKV(tmp_path / "view")
    stage = StagedKV(kv)
    stage.put(COLD, b"q", b"x")
    kv.commit(stage)
    kv.flush()
    deadline = time.monotonic() + 60
    while not kv.db.property_int_value("rocksdb.background-errors") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kv.db.property_int_value("rocksdb.background-errors") == 1  # the compaction met the damage
    with pytest.raises(ViewDamaged, match="Corruption: block checksum mismatch"):
        kv.close()
    assert isinstance(kv.fault, ViewDamaged)


def test_the_background_check_finds_damage_that_no_read_meets(tmp_path) -> None:
    """``rlmm serve`` over a view damaged where no read goes: its background check reads the whole view at its
    pace, meets the damage, and the server turns NOT_SERVING with the cause in its status, refusing reads
    (DATA_LOSS), without any read having met it."""
    damaged_cold_rows(tmp_path / "view")
    server = subprocess.Popen(
        [*RLMM, "serve", "--view", str(tmp_path / "view"), "--listen", "127.0.0.1:0", "--log-format", "text"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLMM_CHECK_MB_PER_S": "64"},
    )
    try:
        started = json.loads(server.stdout.readline())
        with RlmmClient(f"127.0.0.1:{started['port']}", retry_for=0) as client:
            deadline = time.monotonic() + 60
            while client.health() != "NOT_SERVING" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.health() == "NOT_SERVING"
            status = client.status()
            assert not status["serving"] and "Corruption: block checksum mismatch" in status["failure"]
            with pytest.raises(CallError) as refused:
                client.is_ready(new_tp())
            assert refused.value.code == grpc.StatusCode.DATA_LOSS and refused.value.reason == "VIEW_DAMAGED"
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=60)
    assert "health: NOT_SERVING (ViewDamaged: Corruption" in stderr


@pytest.mark.parametrize("kind", ["damaged", "another schema version"])
def test_a_reset_sets_aside_a_view_it_cannot_read(kind, tmp_path, caplog) -> None:
    """``rlmm serve --reset``, which the errors of a damaged view recommend, sets aside a view it cannot read
    too (it opened it to read its registrations, and failed), saying that its partitions must be registered
    again; the fresh view opens."""
    tps = [new_tp(f"reset-{i}") for i in range(200)]
    with View(tmp_path / "view") as view:
        for tp in tps:
            fill_view(view, tp, [segment(tp, 0, 99)])
        if kind == "another schema version":
            with view.batch() as batch:
                batch.stage.put(K.META, K.SCHEMA_VERSION_KEY, K.u32(SCHEMA_VERSION + 1))
        view.flush()
    if kind == "damaged":
        damage(tmp_path / "view", K.PARTITIONS)
    with pytest.raises((ViewDamaged, ViewSchemaMismatch)):
        with View(tmp_path / "view") as view:
            list(view.partitions())
    assert reset_view(tmp_path / "view") == []
    assert "register its partitions again" in caplog.text
    assert [p.name.startswith("view.reset-") for p in tmp_path.iterdir()].count(True) == 1
    with View(tmp_path / "view") as fresh:
        assert list(fresh.partitions()) == []
