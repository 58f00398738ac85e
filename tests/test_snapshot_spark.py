"""Spark rebuild -> restore against the service's view and ``rlmm replay``: one local Spark session for
the whole run (``local[2]``), the real test broker, small data."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from rlmm.records.partitioner import metadata_partition
from rlmm.replay import Scenario
from rlmm.state.view import View
from snapshots.archive import write_archive
from snapshots.format import read_snapshot
from snapshots.job import build, spark_session
from snapshots.restore import restore, verify
from tests.snapshot_support import (
    SCENARIOS,
    ending_in_failure,
    live_view,
    non_partition_rows,
    replayed_view,
    scenario_dir,
    scenario_events,
    view_answers,
    view_rows,
    workload_events,
)


@pytest.fixture(scope="session")
def spark():
    java = shutil.which("java")
    if java is None:
        pytest.fail("the Spark tests need Java 17 on PATH (`java -version` found nothing)", pytrace=False)
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    assert "version" in version, f"`java -version` gave {version!r}"
    session = spark_session("local[2]")
    yield session
    session.stop()


def produce(config, events) -> None:
    """Produce records at their own offsets (each metadata partition's offsets are 0..n-1 in order)."""
    ensure_topic(AdminClient(config.admin_config()), config)
    producer = Producer(
        {"bootstrap.servers": config.bootstrap_servers, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    delivered = []
    for mp, offset, value in events:
        producer.produce(
            config.topic,
            value=value,
            partition=mp,
            on_delivery=lambda err, msg, want=(mp, offset): delivered.append((err, msg.offset(), want)),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(err is None and got == want[1] for err, got, want in delivered), "records must land at their offsets"


def dense(events):
    """Events renumbered so that each metadata partition's offsets are 0, 1, 2, ... (as a topic has them);
    redeliveries become records of their own at a later offset."""
    nxt: dict[int, int] = {}
    out = []
    for mp, _, value in events:
        out.append((mp, nxt.get(mp, 0), value))
        nxt[mp] = nxt.get(mp, 0) + 1
    return out


def assert_view_equal(restored: View, expected: View, only=None) -> None:
    rows, exp_rows = view_rows(restored.reader), view_rows(expected.reader)
    if only is not None:
        exp_rows = {tp: r for tp, r in exp_rows.items() if tp in only}
    assert rows == exp_rows
    answers = view_answers(restored.queries, restored.reader)
    exp_answers = {tp: a for tp, a in view_answers(expected.queries, expected.reader).items() if tp in rows}
    assert answers == exp_answers
    assert non_partition_rows(restored) == non_partition_rows(expected)


def test_archive_rebuild_restore_equals_live_view(spark, tmp_path):
    events, tps = workload_events(3000, seed=11)
    events = dense(events)
    write_archive(tmp_path / "archive", events, 5)
    reports: list[tuple[int, int]] = []
    manifest = build(
        spark, tmp_path / "snap", archive_dir=tmp_path / "archive", records_read=lambda *read: reports.append(read)
    )
    assert manifest["counts"]["quarantined"] > 0
    # the records read, as the tasks read them: never backwards, all of them at the end, nothing left behind
    assert reports[-1] == (len(events), len(events)) and reports == sorted(reports)
    assert "records-read" not in {p.name for p in (tmp_path / "snap").iterdir()}
    restore(tmp_path / "snap", tmp_path / "restored")
    with View(tmp_path / "restored") as restored, live_view(events, tps, tmp_path / "live") as live:
        assert_view_equal(restored, live, only=set(tps))
    assert verify(tmp_path / "snap", tmp_path / "live") == []


def unique_stream(name):
    """A scenario's records as the topic holds them: each (partition, offset) once."""
    seen, out = set(), []
    for mp, offset, value in scenario_events(name):
        if (mp, offset) not in seen:
            seen.add((mp, offset))
            out.append((mp, offset, value))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_kafka_rebuild_equals_replay(name, spark, rlmm_config, kafka, tmp_path):
    import json

    meta = json.loads((scenario_dir(name) / "scenario.json").read_text())
    config = rlmm_config(num_partitions=meta["num_metadata_partitions"])
    produce(config, unique_stream(name))
    manifest = build(spark, tmp_path / "snap", bootstrap=kafka.bootstrap_servers, topic=config.topic)
    assert manifest["num_metadata_partitions"] == meta["num_metadata_partitions"]
    restore(tmp_path / "snap", tmp_path / "restored")
    assigned = {tp for tp, _ in Scenario.load(scenario_dir(name)).assigned}
    with View(tmp_path / "restored") as restored, replayed_view(name, tmp_path, all_ready=True) as replayed:
        rows = view_rows(restored.reader)
        expected = view_rows(replayed.reader)
        for tp in assigned & rows.keys():
            assert rows[tp] == expected[tp]
        answers = view_answers(restored.queries, restored.reader)
        expected_answers = view_answers(replayed.queries, replayed.reader)
        for tp in assigned & rows.keys():
            assert answers[tp] == expected_answers[tp]
        # every assigned partition the replay applied a record to is in the snapshot
        applied = {tp for tp in assigned if replayed.queries.partition_row(tp).last_applied_offset is not None}
        assert applied <= rows.keys()
        assert non_partition_rows(restored) == non_partition_rows(replayed)


def test_generated_kafka_snapshot_tail_incremental(spark, rlmm_config, kafka, tmp_path):
    """Kafka rebuild = the service's view; snapshot at X + the service tailing from X = a full replay;
    an incremental build from X = a full build."""
    events, tps = workload_events(4000, seed=21, metadata_partitions=4)
    events = dense(events)
    cut = len(events) * 6 // 10
    config = rlmm_config(num_partitions=4)
    produce(config, events[:cut])
    build(spark, tmp_path / "snap-x", bootstrap=kafka.bootstrap_servers, topic=config.topic)
    produce(config, events[cut:])
    build(spark, tmp_path / "snap-full", bootstrap=kafka.bootstrap_servers, topic=config.topic)
    build(
        spark,
        tmp_path / "snap-incr",
        bootstrap=kafka.bootstrap_servers,
        topic=config.topic,
        base_dir=tmp_path / "snap-x",
    )

    full, incr = read_snapshot(tmp_path / "snap-full"), read_snapshot(tmp_path / "snap-incr")
    key = lambda s: (s.tp.topic_id, s.tp.partition)  # noqa: E731
    assert sorted(incr.states, key=key) == sorted(full.states, key=key)
    assert incr.quarantine == full.quarantine
    assert incr.metadata_offsets == full.metadata_offsets
    assert full.manifest["counts"]["quarantined"] > 0

    with live_view(events, tps, tmp_path / "live") as live:
        restore(tmp_path / "snap-full", tmp_path / "restored-full")
        with View(tmp_path / "restored-full") as restored:
            assert_view_equal(restored, live, only=set(view_rows(restored.reader)))
        assert verify(tmp_path / "snap-full", tmp_path / "live") == []

        # snapshot at X, restored, then the service tails the topic from X
        restore(tmp_path / "snap-x", tmp_path / "tailed")
        with View(tmp_path / "tailed") as view:
            start = view.metadata_offsets()
            rlmm = RemoteLogMetadataManager(view, config, tps)
            # Kafka's rule: a metadata partition whose last record fails makes its partitions wait
            failing = ending_in_failure(events, tps, tmp_path / "scratch")
            ready = [
                tp
                for tp in tps
                if metadata_partition(tp.topic_id, tp.partition, 4) not in failing
                and not live.queries.partition_row(tp).removed
            ]  # (a removed partition is never ready)
            with rlmm:
                assert {mp: p - 1 for mp, p in rlmm.consumer.initial_positions.items()} == start
                assert rlmm.consumer.wait_ready(ready, timeout=60)
                ends: dict[int, int] = {}
                for mp, offset, _ in events:
                    ends[mp] = offset
                for mp, offset in ends.items():
                    rlmm.wait_applied(mp, offset, timeout=60)
                assert rlmm.consumer.wait_ready(ready, timeout=60)
                assert [tp for tp in tps if rlmm.queries.is_ready(tp)] == ready
            with view.batch() as batch:  # as live_view marks them, to compare the rest
                for tp in tps:
                    batch.mark_ready(tp)
            assert view_rows(view.reader) == view_rows(live.reader)
            assert view_answers(view.queries, view.reader) == view_answers(live.queries, live.reader)
            assert non_partition_rows(view) == non_partition_rows(live)


def test_cli_archive_then_build_from_archive_equals_kafka_build(spark, rlmm_config, kafka, tmp_path):
    from click.testing import CliRunner

    from rlmm.cli.main import main

    events, tps = workload_events(1500, seed=31, metadata_partitions=3)
    events = dense(events)
    config = rlmm_config(num_partitions=3)
    produce(config, events)
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "archive",
            "-b",
            kafka.bootstrap_servers,
            "--topic",
            config.topic,
            "--out",
            str(tmp_path / "archive"),
            "--records-per-file",
            "400",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["records"] == len(events)
    result = runner.invoke(
        main,
        [
            "snapshot",
            "build",
            "--archive",
            str(tmp_path / "archive"),
            "--out",
            str(tmp_path / "from-archive"),
            "--master",
            "local[2]",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "snapshot written" in result.output  # progress (stderr is mixed in by the runner)
    result = runner.invoke(
        main,
        [
            "snapshot",
            "build",
            "-b",
            kafka.bootstrap_servers,
            "--topic",
            config.topic,
            "--out",
            str(tmp_path / "from-kafka"),
            "--split",
            "300",
            "--quiet",
            "--conf",
            "spark.sql.shuffle.partitions=3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    a, k = read_snapshot(tmp_path / "from-archive"), read_snapshot(tmp_path / "from-kafka")
    key = lambda s: (s.tp.topic_id, s.tp.partition)  # noqa: E731
    assert sorted(a.states, key=key) == sorted(k.states, key=key)
    assert a.quarantine == k.quarantine and a.metadata_offsets == k.metadata_offsets
    assert spark.range(3).count() == 3  # the session survived the in-process command
    result = runner.invoke(
        main, ["snapshot", "restore", str(tmp_path / "from-kafka"), "--view", str(tmp_path / "v"), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    with live_view(events, tps, tmp_path / "live"):
        pass
    result = runner.invoke(main, ["snapshot", "verify", str(tmp_path / "from-kafka"), "--view", str(tmp_path / "live")])
    assert result.exit_code == 0, result.output


def test_cli_build_refuses_a_conf_that_is_not_key_value(tmp_path):
    from click.testing import CliRunner

    from rlmm.cli.main import main

    result = CliRunner().invoke(
        main,
        [
            "snapshot",
            "build",
            "--archive",
            str(tmp_path),
            "--out",
            str(tmp_path / "s"),
            "--conf",
            "spark.sql.shuffle.partitions",
        ],
    )
    assert result.exit_code == 2
    assert "'spark.sql.shuffle.partitions' is not KEY=VALUE" in result.output
    assert not (tmp_path / "s").exists()


def test_a_partition_with_records_in_two_metadata_partitions_is_refused(spark, tmp_path):
    """Kafka's partitioner puts all of a user partition's records in one metadata partition; a topic that
    does otherwise cannot say in which order they apply, and the build says so instead of guessing."""
    from rlmm.errors import SnapshotError
    from rlmm.records.model import SegmentMetadata
    from rlmm.records.serde import decode_value

    events, _ = workload_events(600, seed=41, metadata_partitions=3)
    mp, _, value = next(e for e in events if isinstance(decode_value(e[2]), SegmentMetadata))
    write_archive(tmp_path / "archive", dense([*events, ((mp + 1) % 3, 0, value)]), 3)
    tp = decode_value(value).tp
    with pytest.raises(
        SnapshotError, match=f"user partition {tp.topic}-{tp.partition} has records in more than one metadata partition"
    ):
        build(spark, tmp_path / "snap", archive_dir=tmp_path / "archive")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive"]


@pytest.mark.slow
def test_the_command_shows_its_own_progress_not_the_jvms(tmp_path):
    """What `rlmm snapshot build` prints on stderr is its own: its progress lines and the bar of the records read,
    not the JVM's (incubator modules, log4j's setup, Hadoop's native library), which go to a log of the build's
    own, removed when the build succeeds."""
    events, _ = workload_events(600, seed=43)
    write_archive(tmp_path / "archive", dense(events), 5)
    command = ["snapshot", "build", "--archive", str(tmp_path / "archive"), "--out", str(tmp_path / "snap")]
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *command, "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith(("[", "records read ")) for line in lines), done.stderr
    assert lines[-1].split()[-2] == f"{len(events)}/{len(events)}"  # the bar, at its end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive", "snap"]  # the JVM's log removed


def _records_read(out) -> int:
    """What the reading tasks of a build into ``out`` counted so far (snapshots/progress.py)."""
    read = 0
    for path in out.parent.glob(f"{out.name}.partial-*/records-read/[!.]*"):
        with contextlib.suppress(FileNotFoundError):  # the build ended meanwhile
            read += int(path.read_text())
    return read


@pytest.mark.slow
def test_ctrl_c_during_a_build_cancels_it_quietly(tmp_path):
    """A real SIGINT while Spark runs the build's job: exit 130, one line saying so, no tracebacks, nothing
    written (before: ~60 lines of py4j and Spark tracebacks)."""
    import signal
    import time

    # over 200 partitions, few of the generator's steps fall on deleted ones: four times quicker to make
    events, _ = workload_events(60_000, seed=31, partitions_=200)
    write_archive(tmp_path / "archive", dense(events), 5)
    (tmp_path / "tmp").mkdir()
    build = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmm.cli",
            "snapshot",
            "build",
            "--archive",
            str(tmp_path / "archive"),
            "--out",
            str(tmp_path / "snap"),
            "--master",
            "local[2]",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},  # where the JVM's log goes, and is removed from
    )
    while not _records_read(tmp_path / "snap") and build.poll() is None:  # until the job reads records
        time.sleep(0.1)
    build.send_signal(signal.SIGINT)
    out, err = build.communicate(timeout=120)
    lines = err.splitlines(keepends=True)
    assert build.returncode == 130, "".join(lines)
    assert lines[-1] == "interrupted: Spark's jobs cancelled, nothing written\n" and out == ""
    assert "Traceback" not in "".join(lines) and " ERROR " not in "".join(lines)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.parent.name != "archive") == [
        "archive",
        "tmp",
    ]
