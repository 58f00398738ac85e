"""``rlmm serve --workers 2`` as real processes on the test broker: every call answers as with one worker,
from each worker; a write through one worker is read at once from the other; a worker killed with
SIGKILL is restarted while the other answers; SIGTERM stops them all."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.watcher import Position
from rlmm.client import RlmmClient
from rlmm.client.convert import topic_id_partition_pb
from rlmm.errors import CallError
from rlmm.records.model import PartitionDeleteState, SegmentState, SegmentUpdate
from rlmm.state.view import View
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import TS, finished, new_tp, partition_delete, segment
from tests.test_cli_errors import one_error_line

RLMM = [sys.executable, "-m", "rlmm.cli"]
WAIT_S = 60  # only so that a broken server fails the test instead of hanging it


class Served:
    def __init__(self, process: subprocess.Popen, line: dict, log: Path) -> None:
        self.process, self.line, self.log = process, line, log
        self.runtime: Path | None = None  # where TMPDIR pointed the server, when a test chose it
        self.port, self.metrics_port = line["port"], line["metrics_port"]

    def client(self, **kwargs) -> RlmmClient:
        """A client on connections of its own (grpcio would otherwise share one between clients)."""
        return RlmmClient(f"127.0.0.1:{self.port}", options=[("grpc.use_local_subchannel_pool", 1)], **kwargs)

    def metrics(self) -> dict[tuple[str, tuple], float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30).read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def status_calls(self) -> dict[str, float]:
        """GetStatus calls answered, by worker."""
        return {
            dict(labels)["worker"]: value
            for (name, labels), value in self.metrics().items()
            if name == "rlmm_grpc_requests_total" and ("method", "GetStatus") in labels
        }

    @contextmanager
    def pinned_clients(self, workers: int = 2, **kwargs) -> Iterator[dict[str, RlmmClient]]:
        """One client per worker (by index), each on a connection the kernel gave to that worker."""
        found: dict[str, RlmmClient] = {}
        spare = []
        try:
            for _ in range(100):
                rlmm = self.client(retry_for=WAIT_S, **kwargs)
                before = self.status_calls()
                rlmm.status()
                after = self.status_calls()
                [worker] = [w for w, n in after.items() if n != before.get(w, 0)]
                (spare.append(rlmm) if worker in found else found.setdefault(worker, rlmm))
                if len(found) == workers:
                    break
            assert len(found) == workers, f"100 connections reached only the workers {sorted(found)}"
            yield found
        finally:
            for rlmm in [*found.values(), *spare]:
                rlmm.close()


@contextmanager
def serve(tmp: Path, kafka, topic: str, *flags: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    log = tmp / f"serve-{uuid.uuid4().hex[:6]}.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [
                *RLMM,
                "serve",
                "--view",
                str(tmp / "view"),
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "-b",
                kafka.bootstrap_servers,
                *(
                    f"--set=remote.log.metadata.{name}"
                    for name in (
                        f"topic.name={topic}",
                        "topic.num.partitions=1",
                        "topic.replication.factor=1",
                        "topic.min.insync.replicas=1",
                    )
                ),
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, **(env or {})},
        )
    try:
        line = process.stdout.readline()
        assert line, f"rlmm serve ended before serving: {log.read_text()[-3000:]}"
        yield Served(process, json.loads(line), log)
    finally:
        if process.poll() is None:  # stopped as an operator would, so that it removes its runtime directory
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def answer(call, *args) -> object:
    """The answer, or the error as the caller sees it."""
    try:
        result = call(*args)
    except CallError as exc:
        return _error(exc)
    if isinstance(result, Position):
        return "written"  # where the record landed: another offset at each write
    return [_error(r) if isinstance(r, CallError) else r for r in result] if isinstance(result, list) else result


def _error(exc: CallError) -> tuple:
    return (type(exc).__name__, exc.code.name, exc.reason, exc.message, exc.kafka_exception)


TP, GONE, UNKNOWN = new_tp("orders", 3), new_tp("orders", 4), new_tp("orders", 5)
SEGMENTS = [
    segment(TP, 0, 99),
    segment(TP, 100, 199, txn_empty=False, custom=b"\x00rsm"),
    segment(TP, 200, 299, epoch=1),
    segment(TP, 300, 399, epoch=1),
]


def reads() -> list[tuple]:
    calls: list[tuple] = [("is_ready", p) for p in (TP, GONE, UNKNOWN)]
    for p in (TP, GONE, UNKNOWN):
        calls += [("list_remote_log_segments", p), ("remote_log_size", p), ("max_timestamp", p)]
        lookups = [(p, e, o) for e in (0, 1) for o in (50, 150, 350)]
        calls += [("remote_log_segment_metadata_batch", lookups), ("batch_as_messages", lookups)]
        for epoch in (0, 1, 2):
            calls += [
                ("highest_offset_for_epoch", p, epoch),
                ("list_epoch_segments", p, epoch),
                ("remote_log_size", p, epoch),
            ]
            calls += [
                (name, p, epoch, offset)
                for offset in (0, 150, 250, 350, 400)
                for name in ("remote_log_segment_metadata", "next_segment_with_txn_index")
            ]
            calls += [
                ("first_segment_with_max_timestamp_at_least", p, epoch, ts, offset)
                for ts in (0, TS + 150, TS + 400)
                for offset in (0, 250)
            ]
    return calls


def writes() -> list[tuple]:
    """Writes Kafka's rules refuse, or that change no answer (a segment of a partition nobody registered)."""
    return [
        ("add_remote_log_segment_metadata", segment(TP, 500, 599, state=SegmentState.COPY_SEGMENT_FINISHED)),
        (
            "update_remote_log_segment_metadata",
            SegmentUpdate(TP, SEGMENTS[0].segment_id, 1, 1, None, SegmentState.COPY_SEGMENT_STARTED),
        ),
        ("update_remote_log_segment_metadata", finished(segment(UNKNOWN, 0, 9))),
    ]


def answers(rlmm: RlmmClient) -> list:
    as_messages = functools.partial(rlmm.remote_log_segment_metadata_batch, kafka_values=False)
    return [
        answer(as_messages if name == "batch_as_messages" else getattr(rlmm, name), *args)
        for name, *args in reads() + writes()
    ]


@pytest.fixture(scope="module")
def workers(kafka, tmp_path_factory) -> Iterator[tuple[Served, list]]:
    """The answers of one worker over a view it wrote, then two workers serving that view."""
    tmp = tmp_path_factory.mktemp("workers")
    topic = f"rlmm-workers-{uuid.uuid4().hex[:12]}"
    with serve(tmp, kafka, topic) as one:
        assert "workers" not in one.line  # --workers 1: today's single process
        with one.client(retry_for=WAIT_S) as rlmm:
            rlmm.on_partition_leadership_changes([TP, GONE], [])
            assert rlmm.wait_ready([TP, GONE], timeout=WAIT_S)
            for seg in SEGMENTS:
                rlmm.add_remote_log_segment_metadata(seg)
            for seg in SEGMENTS[:3]:
                rlmm.update_remote_log_segment_metadata(finished(seg))  # the last stays COPY_SEGMENT_STARTED
            rlmm.add_remote_log_segment_metadata(segment(GONE, 0, 9))
            for state in PartitionDeleteState:
                rlmm.put_remote_partition_delete_metadata(partition_delete(GONE, state))
            expected = answers(rlmm)
        one.process.send_signal(signal.SIGTERM)
        assert one.process.wait(WAIT_S) == 0
    runtime = tmp / "runtime"  # the temporary directory of the workers' supervisor
    runtime.mkdir()
    with serve(tmp, kafka, topic, "--workers", "2", env={"TMPDIR": str(runtime)}) as two:
        assert len(two.line["workers"]) == 2 and two.line["pid"] == two.process.pid
        assert [p.name[: len("rlmm-serve-")] for p in runtime.iterdir()] == ["rlmm-serve-"]
        two.runtime = runtime
        yield two, expected


def test_every_call_answers_from_each_worker_as_with_one_worker(workers) -> None:
    served, expected = workers
    assert any(isinstance(a, tuple) and a[0] == "RefusedError" for a in expected)  # errors are compared too
    assert any(isinstance(a, tuple) and a[0] == "NotFoundError" for a in expected)
    with served.pinned_clients() as pinned:
        assert pinned["0"].wait_ready([TP], timeout=WAIT_S)  # the restarted primary loads the partition again
        for worker, rlmm in pinned.items():
            assert answers(rlmm) == expected, f"worker {worker}"
        statuses = [rlmm.status() for rlmm in pinned.values()]
        assert statuses[0] == statuses[1] and statuses[0]["serving"] and statuses[0]["consumes"]
        assert [rlmm.health() for rlmm in pinned.values()] == ["SERVING", "SERVING"]


def test_a_write_through_one_worker_is_read_at_once_from_the_other(workers) -> None:
    served, _ = workers
    with served.pinned_clients() as pinned:
        for writer, reader in (("1", "0"), ("0", "1"), ("1", "1")):
            tp = new_tp(f"ryw-{writer}-{reader}")
            pinned[writer].on_partition_leadership_changes([tp], [])
            assert pinned[reader].wait_ready([tp], timeout=WAIT_S)
            seg = segment(tp, 0, 9)
            pinned[writer].add_remote_log_segment_metadata(seg)
            assert [s.segment_id for s in pinned[reader].list_remote_log_segments(tp)] == [seg.segment_id]
            assert pinned[reader].remote_log_segment_metadata(tp, 0, 5) is None
            pinned[writer].update_remote_log_segment_metadata(finished(seg))
            assert pinned[reader].remote_log_segment_metadata(tp, 0, 5).segment_id == seg.segment_id
            later = segment(tp, 10, 19)
            pinned[writer].add_remote_log_segment_metadata(later)
            pinned[writer].update_remote_log_segment_metadata(finished(later))
            for _ in range(2):  # the second time from the reader's lookup memo
                assert [pinned[reader].remote_log_segment_metadata(tp, 0, o).segment_id for o in (5, 15)] == [
                    seg.segment_id,
                    later.segment_id,
                ]
            replacing = segment(tp, 0, 9)  # the same start offset: replaces seg's offset-index entry
            pinned[writer].add_remote_log_segment_metadata(replacing)
            pinned[writer].update_remote_log_segment_metadata(finished(replacing))
            assert pinned[reader].remote_log_segment_metadata(tp, 0, 15).segment_id == later.segment_id
            assert pinned[reader].remote_log_segment_metadata(tp, 0, 5).segment_id == replacing.segment_id
            pinned[writer].put_remote_partition_delete_metadata(
                partition_delete(tp, PartitionDeleteState.DELETE_PARTITION_FINISHED)
            )
            assert answer(pinned[reader].remote_log_size, tp)[0] == "NotFoundError"
            assert answer(pinned[reader].remote_log_segment_metadata, tp, 0, 5)[0] == "NotFoundError"
    assert served.metrics()[("rlmm_view_catch_ups_total", (("worker", "1"),))] > 0


def test_a_read_worker_answers_a_read_after_a_position_once_its_view_holds_it(workers) -> None:
    served, _ = workers
    with served.pinned_clients() as pinned:
        tp = new_tp("read-after")
        pinned["0"].on_partition_leadership_changes([tp], [], broker_id=1)
        assert pinned["1"].wait_ready([tp], timeout=WAIT_S)
        seg = segment(tp, 0, 9)
        pinned["0"].add_remote_log_segment_metadata(seg)
        position = pinned["0"].update_remote_log_segment_metadata(finished(seg))
        request = api.RemoteLogSegmentMetadataRequest(
            topic_id_partition=topic_id_partition_pb(tp), leader_epoch=0, offset=5
        )
        reader = pinned["1"]._stub  # the raw call, to set the header
        header = (("rlmm-read-after", f"{position.metadata_partition}:{position.offset}"),)
        assert reader.RemoteLogSegmentMetadata(request, metadata=header, timeout=WAIT_S).HasField(
            "remote_log_segment_metadata"
        )
        ahead = (("rlmm-read-after", f"{position.metadata_partition}:{position.offset + 1000}"),)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            reader.RemoteLogSegmentMetadata(request, metadata=ahead, timeout=1.0)
        assert time.monotonic() - started < 2.0
        assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_each_worker_checks_write_authorization(kafka, tmp_path) -> None:
    topic = f"rlmm-workers-{uuid.uuid4().hex[:12]}"
    tokens = {"RLMM_WRITE_TOKENS": json.dumps(["s3cret"])}  # a secret setting, handed to the workers
    with serve(tmp_path, kafka, topic, "--workers", "2", "--write-tokens-over-plaintext", env=tokens) as served:
        with (
            served.pinned_clients() as anonymous,
            served.pinned_clients(token="wrong") as strangers,
            served.pinned_clients(token="s3cret") as writers,
        ):
            for worker, other in (("0", "1"), ("1", "0")):
                tp = new_tp(f"auth-{worker}")
                assert answer(anonymous[worker].on_partition_leadership_changes, [tp], [])[:2] == (
                    "AccessDeniedError",
                    "UNAUTHENTICATED",
                )
                seg = segment(tp, 0, 9)
                assert answer(strangers[worker].add_remote_log_segment_metadata, seg)[:2] == (
                    "AccessDeniedError",
                    "PERMISSION_DENIED",
                )
                writers[worker].on_partition_leadership_changes([tp], [])
                assert writers[other].wait_ready([tp], timeout=WAIT_S)
                writers[worker].add_remote_log_segment_metadata(seg)
                assert [s.segment_id for s in anonymous[other].list_remote_log_segments(tp)] == [seg.segment_id]


def _wait_restarted(served: Served, worker: str, restarts: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        metrics = served.metrics()
        if (
            metrics.get(("rlmm_worker_restarts_total", (("worker", worker),))) == restarts
            and metrics.get(("rlmm_worker_up", (("worker", worker),))) == 1
        ):
            return
        time.sleep(0.1)
    pytest.fail(f"worker {worker} was not restarted: {served.log.read_text()[-3000:]}")


def test_a_worker_killed_is_restarted_and_the_service_answers_meanwhile(workers) -> None:
    served, expected = workers
    for worker in ("1", "0"):  # a secondary, then the primary (each for the first time: its pid is the first)
        os.kill(served.line["workers"][int(worker)], signal.SIGKILL)
        with served.client(retry_for=WAIT_S) as rlmm:  # new connections reach a living worker
            assert rlmm.wait_ready([TP], timeout=WAIT_S)  # a restarted primary loads the partition again
            assert answers(rlmm) == expected
        _wait_restarted(served, worker, 1)
        with served.pinned_clients() as pinned:
            assert pinned["0"].wait_ready([TP], timeout=WAIT_S)
            for rlmm in pinned.values():
                assert answers(rlmm) == expected
            tp = new_tp(f"after-restart-{worker}")
            pinned["1"].on_partition_leadership_changes([tp], [])
            assert pinned["0"].wait_ready([tp], timeout=WAIT_S)
            seg = segment(tp, 0, 9)
            pinned["1"].add_remote_log_segment_metadata(seg)
            assert [s.segment_id for s in pinned["0"].list_remote_log_segments(tp)] == [seg.segment_id]


def test_sigterm_stops_every_worker(workers) -> None:
    served, _ = workers
    children = psutil.Process(served.process.pid).children()
    assert len(children) >= 2
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(WAIT_S) == 0
    _, alive = psutil.wait_procs(children, timeout=WAIT_S)
    assert not alive
    assert list(served.runtime.iterdir()) == []  # the supervisor's runtime directory is gone with it


def _serve_without_kafka(view: Path, runtime: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*RLMM, "serve", "--view", str(view), "--listen", "127.0.0.1:0", "--workers", "2", "--grace-s", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(runtime)},
    )


def _serving(process: subprocess.Popen) -> dict:
    """The process's serving line; its exit code and stderr if it ended without one."""
    line = process.stdout.readline()
    if not line:
        _, stderr = process.communicate(timeout=WAIT_S)
        pytest.fail(f"serve --workers ended ({process.returncode}) without serving:\n{stderr[-3000:]}")
    return json.loads(line)


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A TMPDIR for ``serve --workers``, where its runtime folder holds the primary's unix socket, whose path must fit
    in 107 bytes: a short folder in the system's temporary one (a pytest-xdist worker's tmp_path is too long)."""
    with tempfile.TemporaryDirectory(prefix="rlmm-") as folder:
        yield Path(folder)


def test_the_runtime_folder_of_a_killed_supervisor_is_removed_by_the_next_start(tmp_path, runtime: Path) -> None:
    """SIGKILL leaves the supervisor no time to remove its runtime folder; the next ``serve --workers`` beside it
    removes it, as it no longer has a process, and makes its own."""
    View(tmp_path / "view").close()
    first = _serve_without_kafka(tmp_path / "view", runtime)
    try:
        assert _serving(first)["pid"] == first.pid
        children = psutil.Process(first.pid).children()
        left = list(runtime.iterdir())
        assert len(left) == 1
    finally:
        first.kill()
        first.communicate(timeout=WAIT_S)
    _, alive = psutil.wait_procs(children, timeout=WAIT_S)  # the workers stop with their supervisor
    assert not alive
    assert list(runtime.iterdir()) == left  # left behind
    second = _serve_without_kafka(tmp_path / "view", runtime)
    try:
        assert _serving(second)["pid"] == second.pid
        now = list(runtime.iterdir())
        assert left[0] not in now and len(now) == 1
        assert left[0].name == f"rlmm-serve-{first.pid}" and now[0].name == f"rlmm-serve-{second.pid}"
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = second.communicate(timeout=WAIT_S)
    assert second.returncode == 0, stderr
    assert f"removing {left[0]}, left by process {first.pid} which no longer runs" in stderr
    assert list(runtime.iterdir()) == []


def test_a_view_in_use_is_said_in_one_line_as_with_one_worker(tmp_path, runtime: Path) -> None:
    """``serve --workers 2`` on a view another process holds: the line one process prints, not RocksDB's lock
    error."""
    with View(tmp_path / "held"):
        done = _serve_without_kafka(tmp_path / "held", runtime)
        _, stderr = done.communicate(timeout=WAIT_S)
    assert done.returncode == 1, stderr
    one_error_line(stderr, f"the view {tmp_path / 'held'} is in use by another process", "stop it")
    assert "LOCK" not in stderr.strip().splitlines()[-1]


def test_a_temporary_folder_too_deep_for_the_socket_is_said_in_one_line(tmp_path) -> None:
    """The primary's unix socket lives in the runtime folder under TMPDIR: a TMPDIR too deep for a socket path
    (107 bytes) is refused in one line that says what to do, before any worker starts."""
    deep = tmp_path.joinpath(*["d" * 40] * 3)
    deep.mkdir(parents=True)
    View(tmp_path / "view").close()
    done = _serve_without_kafka(tmp_path / "view", deep)
    _, stderr = done.communicate(timeout=WAIT_S)
    assert done.returncode == 1, stderr
    one_error_line(stderr, "is too deep: the primary's socket in it would have a path of", "set TMPDIR to a shorter")
