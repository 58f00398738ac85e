"""The snapshot format: export -> restore gives the same view; missing, truncated, tampered and
incompatible snapshots are refused with a clear error and nothing is loaded; verify reports
differences; the CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from consumers import view_state
from consumers.service import parse_partition
from rlmm.cli.main import main
from rlmm.errors import SnapshotError
from rlmm.state.view import View
from snapshots.archive import write_archive
from snapshots.format import FORMAT_VERSION, MANIFEST, _manifest_checksum, read_snapshot, write_snapshot
from snapshots.preflight import check_build_inputs
from snapshots.restore import export, restore, verify
from tests.snapshot_support import (
    SCENARIOS,
    live_view,
    non_partition_rows,
    replayed_view,
    view_answers,
    view_rows,
    workload_events,
)


@pytest.fixture
def snapshot(tmp_path):
    events, tps = workload_events(2500, seed=7)
    live_view(events, tps, tmp_path / "live").close()
    export(tmp_path / "live", tmp_path / "snap", 5)
    return tmp_path / "snap"


def assert_views_equal(a: View, b: View) -> None:
    assert view_rows(a.reader) == view_rows(b.reader)
    assert view_answers(a.queries, a.reader) == view_answers(b.queries, b.reader)
    assert non_partition_rows(a) == non_partition_rows(b)


def test_export_restore_round_trip(snapshot, tmp_path):
    manifest = json.loads((snapshot / MANIFEST).read_text())
    assert manifest["format_version"] == FORMAT_VERSION and manifest["num_metadata_partitions"] == 5
    assert manifest["counts"]["quarantined"] > 0 and manifest["counts"]["segments"] > 0
    result = restore(snapshot, tmp_path / "restored")
    assert result["partitions"] == manifest["counts"]["partitions"]
    with View(tmp_path / "restored") as restored, View(tmp_path / "live") as live:
        assert_views_equal(restored, live)
        assert restored.metadata_offsets() == {int(k): v for k, v in manifest["metadata_offsets"].items()}
        assert restored.counters() == {"quarantined": manifest["counts"]["quarantined"]}  # what the metric shows
    assert verify(snapshot, tmp_path / "restored") == []


def test_the_consumers_state_goes_with_an_exported_snapshot(snapshot, tmp_path):
    """The topic's id and partition count, and a reading again under way (a partition registered after its metadata
    partition was read): a view restored from the export checks the topic, consumes with its count and finishes the
    reading, instead of following any topic of the name and taking that partition as caught up after the highest
    offset read."""
    # the live view holds the topic id as rlmm 0.1 stored it, librdkafka's standard base64 ('+', '/'): the
    # snapshot, the restored view and verify name it in Kafka's form (URL-safe), the one id form of rlmm
    state = view_state.view_state("AaIbMzBQfiOdjsFwZ+WkJQ", {2: 15}, 5)
    with View(tmp_path / "live") as live, live.batch() as batch:
        for key, value in state.items():
            batch.put_consumer_state(key, value)
    manifest = export(tmp_path / "live", tmp_path / "snap-2", 5)
    assert manifest["topic_id"] == "AaIbMzBQfiOdjsFwZ-WkJQ" and manifest["rereads"] == {"2": 15}
    assert restore(tmp_path / "snap-2", tmp_path / "restored")["topic_id"] == "AaIbMzBQfiOdjsFwZ-WkJQ"
    with View(tmp_path / "restored") as restored:
        assert restored.consumer_state() == view_state.view_state("AaIbMzBQfiOdjsFwZ-WkJQ", {2: 15}, 5)
    assert verify(tmp_path / "snap-2", tmp_path / "restored") == []
    assert verify(tmp_path / "snap-2", tmp_path / "live") == []  # the same id, in either form
    with View(tmp_path / "restored") as restored, restored.batch() as batch:
        batch.put_consumer_state(view_state.TOPIC_ID, b"AaIbMzKOfBKhMTPA5x/jDw")
    assert verify(tmp_path / "snap-2", tmp_path / "restored") == [
        "topic id: snapshot AaIbMzBQfiOdjsFwZ-WkJQ, view AaIbMzKOfBKhMTPA5x_jDw"
    ]


def _base(tmp_path, kind: str, topic_id: str | None):
    write_snapshot(tmp_path / "base", [], [], {0: 4}, 5, topic="t", topic_id=topic_id, source={"kind": kind})
    return tmp_path / "base"


@pytest.mark.parametrize(
    ("kind", "base_id", "input_id", "refusal"),
    [
        ("export", "A", "A", "exported from a view, which holds only the partitions it served"),
        ("kafka", None, "A", "the older snapshot records no topic id"),
        ("kafka", "A", None, "the input records no topic id"),
        ("archive", "A", "B", "with id A, the input has id B: the topic was deleted and created again"),
        ("kafka", "A", "A", None),
    ],
)
def test_an_incremental_build_folds_only_onto_the_whole_topic_it_reads(kind, base_id, input_id, refusal, tmp_path):
    """Before Spark starts: a base that is an export (only the partitions its view served), or of a topic
    deleted and created again since, or that cannot be told apart from one, is refused."""
    write_archive(tmp_path / "archive", [(0, 5, None)], 5, topic="t", topic_id=input_id)
    check = lambda: check_build_inputs(  # noqa: E731
        tmp_path / "out",
        bootstrap=None,
        topic="t",
        archive_dir=tmp_path / "archive",
        base_dir=_base(tmp_path, kind, base_id),
    )
    if refusal is None:
        assert check() == input_id
    else:
        with pytest.raises(SnapshotError, match=re.escape(refusal)):
            check()


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_export_restore(name, tmp_path):
    replayed_view(name, tmp_path).close()
    export(tmp_path / "replayed", tmp_path / "snap", 50)
    restore(tmp_path / "snap", tmp_path / "restored")
    with View(tmp_path / "restored") as restored, View(tmp_path / "replayed") as replayed:
        assert_views_equal(restored, replayed)


def test_verify_reports_every_difference(snapshot, tmp_path):
    events, tps = workload_events(3000, seed=7)
    with live_view(events[:2500], tps, tmp_path / "more") as view:  # the same first records ...
        with view.batch() as batch:  # ... then more
            for mp, offset, value in events[2500:]:
                batch.apply(mp, offset, value)
    diffs = verify(snapshot, tmp_path / "more")
    assert diffs and any("metadata partition" in d for d in diffs)
    # partitions named as rlmm query takes them
    named = {d.split()[1].removesuffix(":") for d in diffs if d.startswith("partition ")}
    assert named and {parse_partition(name) for name in named} <= set(tps)


def _rewrite_manifest(snap, change):
    path = snap / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    manifest["manifest_sha256"] = _manifest_checksum(manifest)
    path.write_text(json.dumps(manifest))


def _flip_byte(path, pos):
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "no manifest": (lambda s: (s / MANIFEST).unlink(), "manifest missing"),
    "manifest not json": (lambda s: (s / MANIFEST).write_text("{"), "not valid JSON"),
    "manifest altered": (
        lambda s: (s / MANIFEST).write_text(
            (s / MANIFEST).read_text().replace('"num_metadata_partitions": 5', '"num_metadata_partitions": 6')
        ),
        "checksum mismatch",
    ),
    "newer format": (
        lambda s: _rewrite_manifest(s, lambda m: m.update(format_version=FORMAT_VERSION + 1)),
        "format version",
    ),
    "partition file missing": (lambda s: (s / "partitions-00000.avro").unlink(), "file missing"),
    "quarantine file missing": (lambda s: (s / "quarantine.avro").unlink(), "file missing"),
    "truncated": (
        lambda s: (s / "partitions-00000.avro").write_bytes((s / "partitions-00000.avro").read_bytes()[:-100]),
        "truncated",
    ),
    "byte flipped": (lambda s: _flip_byte(s / "partitions-00000.avro", 300), "SHA-256 mismatch"),
    "byte flipped, checksums forged": (
        lambda s: (_flip_byte(s / "partitions-00000.avro", 300), _forge(s)),
        "partitions-00000.avro",
    ),
    "counts forged": (lambda s: _rewrite_manifest(s, lambda m: m["counts"].update(segments=1)), "counts"),
    "foreign avro file": (lambda s: (_foreign(s), _forge(s)), "schema"),
}


def _forge(snap):
    """Recompute sizes and checksums in the manifest, as a careless tool would."""
    from snapshots.format import _sha256

    def change(m):
        for entry in m["partition_files"] + [m["quarantine_file"]]:
            path = snap / entry["name"]
            entry["bytes"], entry["sha256"] = path.stat().st_size, _sha256(path)

    _rewrite_manifest(snap, change)


def _foreign(snap):
    shutil.copy(snap / "quarantine.avro", snap / "partitions-00000.avro")


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_snapshot_refused(case, snapshot, tmp_path):
    corrupt, message = CORRUPTIONS[case]
    corrupt(snapshot)
    with pytest.raises(SnapshotError, match=message):
        read_snapshot(snapshot)
    with pytest.raises(SnapshotError):
        restore(snapshot, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
    assert not list(tmp_path.glob("restored*"))
    result = CliRunner().invoke(main, ["snapshot", "restore", str(snapshot), "--view", str(tmp_path / "restored")])
    assert result.exit_code == 1 and "error:" in result.output


def test_restore_refuses_a_non_empty_target(snapshot, tmp_path):
    restore(snapshot, tmp_path / "restored")
    with pytest.raises(SnapshotError, match="not empty"):
        restore(snapshot, tmp_path / "restored")


def test_cli_export_restore_verify(tmp_path):
    events, tps = workload_events(1500, seed=9)
    live_view(events, tps, tmp_path / "live").close()
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["snapshot", "export", "--view", str(tmp_path / "live"), "--out", str(tmp_path / "s"), "--num-partitions", "5"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"]["partitions"] > 0
    result = runner.invoke(main, ["snapshot", "restore", str(tmp_path / "s"), "--view", str(tmp_path / "r"), "--quiet"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["snapshot", "verify", str(tmp_path / "s"), "--view", str(tmp_path / "r")])
    assert result.exit_code == 0 and json.loads(result.output.splitlines()[-1]) == {"differences": 0}
    with View(tmp_path / "r") as view, view.batch() as batch:
        batch.apply(0, 10_000, b"\x00garbage")
    result = runner.invoke(main, ["snapshot", "verify", str(tmp_path / "s"), "--view", str(tmp_path / "r")])
    assert result.exit_code == 1 and "quarantine 0/10000" in result.output


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_restore_from_many_files(workers, tmp_path, monkeypatch):
    import snapshots.format as fmt

    monkeypatch.setattr(fmt, "SEGMENTS_PER_FILE", 8)
    events, tps = workload_events(3000, seed=13)
    live_view(events, tps, tmp_path / "live").close()
    manifest = export(tmp_path / "live", tmp_path / "snap", 5)
    assert len(manifest["partition_files"]) > 3
    result = restore(tmp_path / "snap", tmp_path / "restored", workers=workers)
    assert result["segments"] == manifest["counts"]["segments"]
    with View(tmp_path / "restored") as restored, View(tmp_path / "live") as live:
        assert_views_equal(restored, live)
    # a damaged file in the second run of files: refused, nothing left behind
    last = tmp_path / "snap" / manifest["partition_files"][-1]["name"]
    _flip_byte(last, 200)
    _forge(tmp_path / "snap")
    with pytest.raises(SnapshotError):
        restore(tmp_path / "snap", tmp_path / "again", workers=workers)
    assert not list(tmp_path.glob("again*"))


_KILLED_MIDWAY = """
import os, signal, sys
import snapshots.format as fmt, snapshots.restore as rst
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
fmt.partition_file_entry = die  # export dies while writing its first file
rst._partition_rows = die  # restore dies while building its first rows
if sys.argv[1] == "export":
    rst.export(sys.argv[2], sys.argv[3], 5)
else:
    rst.restore(sys.argv[2], sys.argv[3])
"""


_WORKERS_HELD = """
import os, sys, time
import snapshots.restore as rst
def held(job):  # each worker says it runs, then takes its time
    open(os.path.join(sys.argv[3], str(os.getpid())), "w").close()
    time.sleep(300)
rst._partition_rows = held
rst.restore(sys.argv[1], sys.argv[2], workers=2)
"""


def test_restore_workers_die_with_their_killed_parent(tmp_path, monkeypatch):
    """A restore killed (SIGKILL) while its two worker processes build rows: they end with it, rather than go on
    and then wait for work for ever."""
    import snapshots.format as fmt

    monkeypatch.setattr(fmt, "SEGMENTS_PER_FILE", 8)
    events, tps = workload_events(600, seed=5)
    live_view(events, tps, tmp_path / "live").close()
    assert len(export(tmp_path / "live", tmp_path / "snap", 5)["partition_files"]) >= 2
    running = tmp_path / "running"
    running.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", _WORKERS_HELD, str(tmp_path / "snap"), str(tmp_path / "restored"), str(running)]
    )
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while len(list(running.iterdir())) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
        workers = [psutil.Process(int(p.name)) for p in running.iterdir()]
        assert len(workers) == 2 and all(w.ppid() == parent.pid for w in workers)
        parent.kill()
        assert parent.wait(30) == -9
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == []
    finally:
        for worker in workers:
            if worker.is_running():
                worker.kill()
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_folders_of_killed_export_and_restore_are_removed_by_the_next_run(snapshot, tmp_path):
    for command, source, target, kind in [
        ("export", tmp_path / "live", tmp_path / "snap2", "partial"),
        ("restore", snapshot, tmp_path / "restored", "restoring"),
    ]:
        killed = subprocess.run([sys.executable, "-c", _KILLED_MIDWAY, command, str(source), str(target)])
        assert killed.returncode == -9
        left = list(tmp_path.glob(f"{target.name}.{kind}-*"))
        assert len(left) == 1  # the killed process's folder
        live = tmp_path / f"{target.name}.{kind}-{os.getppid()}"  # a running process's folder stays
        live.mkdir()
        if command == "export":
            export(source, target, 5)
        else:
            restore(source, target)
        assert sorted(p.name for p in tmp_path.glob(f"{target.name}.*")) == [live.name]
        shutil.rmtree(live)
