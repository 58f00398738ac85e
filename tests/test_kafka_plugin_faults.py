"""The Kafka plugin when rlmm fails: restarted in the middle of calls, down, one of two targets killed; two brokers
sharing one rlmm; bad settings; close() and its threads. Real ``rlmm serve`` processes, a real JVM."""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator

import pytest

from consumers import view_state
from consumers.broker import free_port
from rlmm.client import RlmmClient
from rlmm.errors import RefusedError
from rlmm.records.model import TopicIdPartition
from rlmm.records.uuid import uuid_from_str
from rlmm.state.view import View
from tests.kafka_plugin_support import (  # noqa: F401 (built_plugin: a fixture)
    WAIT_S,
    Harness,
    Pki,
    RlmmServe,
    built_plugin,
    new_tp,
    plugin_config,
    topic_name,
    wait_until,
)

STORAGE_EXCEPTION = "org.apache.kafka.server.log.remote.storage.RemoteStorageException"
REPLICA_NOT_AVAILABLE = "org.apache.kafka.common.errors.ReplicaNotAvailableException"
CONFIG_EXCEPTION = "org.apache.kafka.common.config.ConfigException"
MARGIN_MS = 2_500  # what a call may take beyond its deadline (the JVM, the last attempt's cancellation, a loaded box)


@pytest.fixture(scope="module")
def harness(built_plugin, tmp_path_factory) -> Iterator[Harness]:  # noqa: F811
    with Harness(built_plugin, tmp_path_factory.mktemp("harness") / "harness.log") as jvm:
        yield jvm


def _now_ms() -> float:
    return time.time() * 1000


def _segments(rlmm: RlmmClient, tps: list[dict]) -> int:
    """How many segments the server lists for the harness's partitions."""
    return sum(
        len(
            rlmm.list_remote_log_segments(TopicIdPartition(uuid_from_str(tp["topic_id"]), tp["topic"], tp["partition"]))
        )
        for tp in tps
    )


def _overlapping(calls: list[list], start_ms: float, end_ms: float) -> list[list]:
    """Calls ([start epoch ms, took ms, succeeded]) that were under way at some time within [start_ms, end_ms]."""
    return [c for c in calls if c[0] <= end_ms and c[0] + c[1] >= start_ms]


def test_calls_recover_when_rlmm_restarts(harness: Harness, kafka, tmp_path) -> None:
    """SIGTERM, then rlmm started again on the same view and port, while a writer and two readers call: every call
    waits for it (the plugin retries within call.timeout.ms) and succeeds, but for reads that reach it before it has
    caught up again (ReplicaNotAvailableException), and every acknowledged write is visible after."""
    tps = [new_tp("restart", p) for p in range(3)]
    restarted = tmp_path / "restarted"
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic_name(), 3) as server:
        harness.open(
            "restart", server.address, call_timeout_ms=30_000, write_timeout_ms=60_000, retry_backoff_max_ms=500
        )
        harness.call("register", id="restart", leaders=tps)
        assert harness.call("wait_ready", id="restart", partitions=tps)["ready"]
        harness.send("loop", id="restart", partitions=tps, readers=2, until_file=str(restarted))
        # the writer starts a segment once the write before was acknowledged: five writes ended before the restart
        with RlmmClient(server.address) as asking:
            assert wait_until(lambda: _segments(asking, tps) > 5, WAIT_S), "the loop did not write"
        down_ms = _now_ms()
        server.terminate()
        time.sleep(0.5)  # down for a while: calls must wait for it, not fail
        starting_ms = _now_ms()
        server.start()
        up_ms = _now_ms()
        # the loop goes on until a write and a read that started 0.5 s after the restart succeeded
        (tmp_path / "restarted.new").write_text(f"{math.ceil(up_ms + 500)}")
        (tmp_path / "restarted.new").rename(restarted)
        got = harness.receive(timeout=300)
        harness.call("close", id="restart")
    window = f"rlmm down from {down_ms:.0f} to {up_ms:.0f} (epoch ms)"
    # A read that reached the restarted server before it had caught up got ReplicaNotAvailableException, as Kafka's
    # store answers for a partition it has not loaded: a restarted rlmm withdraws readiness until it has caught up
    # again (docs/architecture.md), and a loaded machine makes that moment long enough to be met. Nothing else may
    # fail, and nothing before the server was started again: calls wait for it.
    failures = f"{window}: {got['read_failure_count']} failed, {json.dumps(got['read_failures'])}"
    assert set(got["read_failure_classes"]) <= {REPLICA_NOT_AVAILABLE}, failures
    assert all(start + took >= starting_ms for start, took, ok in got["reads"] if not ok), failures
    assert got["write_failures"] == [], f"{window}: {json.dumps(got['write_failures'])}"
    assert got["read_violation_count"] == 0, got["read_violations"]
    assert got["missing_count"] == 0, got["missing"]
    assert got["acked"] >= 5
    reads, writes = got["reads"], got["writes"]
    during = _overlapping(reads, down_ms + 100, up_ms - 100)
    assert during, f"no read was under way while rlmm was down ({down_ms}..{up_ms}): the test proved nothing"
    assert all(ok or start + took >= starting_ms for start, took, ok in during), failures  # (failed: answered after)
    # the writer checks each acknowledged write before the next one, so it may be between writes while rlmm is
    # down (a read always overlaps): writes on both sides of the restart
    assert [w for w in writes if w[0] + w[1] < down_ms] and [w for w in writes if w[0] > up_ms and w[2]], writes
    assert [r for r in reads if r[0] > up_ms + 500], "no read after the restart"


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port whose connections the kernel accepts but nobody ever answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.mark.parametrize("where", ["nothing-listens", "black-hole"])
def test_rlmm_down_fails_within_the_deadline(where: str, harness: Harness, black_hole: int) -> None:
    """No rlmm (connection refused), or one that never answers: reads fail with RemoteStorageException once
    call.timeout.ms is over (retried until then), writes once write.timeout.ms is over; isReady says false and the
    partition calls return; nothing hangs."""
    port = free_port() if where == "nothing-listens" else black_hole
    timeout = 1_000
    name = f"down-{where}"
    harness.open(name, f"127.0.0.1:{port}", call_timeout_ms=timeout, write_timeout_ms=timeout, retry_backoff_ms=50)
    tp = new_tp("down")
    for op, epoch, offset in [
        ("remoteLogSegmentMetadata", 0, 0),
        ("highestOffsetForEpoch", 0, None),
        ("listRemoteLogSegments", None, None),
        ("listRemoteLogSegments", 0, None),
        ("remoteLogSize", 0, None),
        ("nextSegmentWithTxnIndex", 0, 0),
    ]:
        answer = harness.call("read", id=name, op=op, tp=tp, epoch=epoch, offset=offset)
        assert answer.get("class") == STORAGE_EXCEPTION, (op, answer)
        assert "call.timeout.ms" in answer["message"], answer["message"]
        assert timeout / 2 <= answer["ms"] <= timeout + MARGIN_MS, (op, answer)
    ready = harness.call("read", id=name, op="isReady", tp=tp)
    assert ready.get("value") is False and ready["ms"] <= timeout + MARGIN_MS, ready
    for call in ("register", "stop"):
        args = {"leaders": [tp]} if call == "register" else {"partitions": [tp]}
        answer = harness.call(call, id=name, **args)
        assert "error" not in answer and answer["ms"] <= timeout + MARGIN_MS, (call, answer)
    write = harness.call("write", id=name, op="add", tp=tp, wait_ms=timeout + 10_000)
    assert "sync_error" not in write, write
    assert write.get("write_error", {}).get("class") == STORAGE_EXCEPTION, write
    assert write["ms"] <= timeout + MARGIN_MS, write
    closed = harness.call("close", id=name)
    assert "error" not in closed["first"] and closed["ms"] < 10_000, closed


def test_failover_to_the_second_target_keeps_acknowledged_writes_visible(harness: Harness, kafka, tmp_path) -> None:
    """Two rlmm on the same topic, each with its own view. The second misses a registration (it is down), comes
    back, and the first is killed (SIGKILL) at once: the plugin turns to the second, which must answer every write
    the first acknowledged (the plugin's rlmm-read-after positions make it wait until it applied them), including
    those of the partition it missed (the plugin re-sends it all its partitions before calling it again)."""
    topic = topic_name()
    first, second = new_tp("failover", 0), new_tp("failover", 1)
    with (
        RlmmServe(tmp_path, kafka.bootstrap_servers, topic, 3, name="one") as one,
        RlmmServe(tmp_path, kafka.bootstrap_servers, topic, 3, name="two") as two,
    ):
        harness.open("failover", f"{one.address},{two.address}", call_timeout_ms=20_000, write_timeout_ms=60_000)
        harness.open("probe-two", two.address, 99, call_timeout_ms=20_000)  # reads from the second alone
        harness.call("register", id="failover", leaders=[first])
        assert harness.call("wait_ready", id="failover", partitions=[first])["ready"]
        assert harness.call("wait_ready", id="probe-two", partitions=[first])["ready"], "registered at one target only"

        two.terminate()
        registered = harness.call("register", id="failover", leaders=[second])
        assert "error" not in registered and registered["ms"] < 20_000 + MARGIN_MS, registered
        assert harness.call("wait_ready", id="failover", partitions=[second])["ready"]
        written = {}
        for tp in (first, second):
            got = harness.call("write_segments", timeout=300, id="failover", tp=tp, count=15)
            assert got["failures"] == [] and len(got["acked"]) == 15, got
            written[tp["topic_id"], tp["partition"]] = (tp, got["acked"])

        two.start()  # behind the topic: it has to catch up on what the first acknowledged meanwhile
        one.kill()
        visible = harness.call("check_visible", id="failover", tp=first, segments=written[first["topic_id"], 0][1])
        assert visible["errors"] == [] and visible["violations"] == [], visible
        assert harness.call("wait_ready", id="failover", partitions=[second], timeout_ms=30_000)["ready"], (
            "the second rlmm never got the partition registered while it was down"
        )
        visible = harness.call("check_visible", id="failover", tp=second, segments=written[second["topic_id"], 1][1])
        assert visible["errors"] == [] and visible["violations"] == [], visible

        more = harness.call("write_segments", timeout=300, id="failover", tp=first, count=3)
        assert more["failures"] == [] and len(more["acked"]) == 3, more
        everything = written[first["topic_id"], 0][1] + more["acked"]
        for reader in ("failover", "probe-two"):
            visible = harness.call("check_visible", id=reader, tp=first, segments=everything)
            assert visible["errors"] == [] and visible["violations"] == [], (reader, visible)
        harness.call("close", id="failover")
        harness.call("close", id="probe-two")


def test_a_server_whose_view_is_of_another_topic_hands_calls_to_the_next_target(
    harness: Harness, kafka, tmp_path
) -> None:
    """Two rlmm on one topic; the first serves a view built from a topic of another id, so its consumer stops and
    it refuses reads and writes with FAILED_PRECONDITION (METADATA_TOPIC_CHANGED), which only rebuilding its view
    lifts. The plugin hands each call to the second target, which answers, rather than failing it."""
    topic, tp = topic_name(), new_tp("changed")
    stale = RlmmServe(tmp_path, kafka.bootstrap_servers, topic, 3, name="stale")
    with View(stale.view) as view, view.batch() as batch:
        batch.put_consumer_state(view_state.TOPIC_ID, b"AAAAAAAAAAAAAAAAAAAAAA")
    with stale, RlmmServe(tmp_path, kafka.bootstrap_servers, topic, 3, name="good") as good:
        with RlmmClient(stale.address, retry_for=0) as asking:
            deadline = time.monotonic() + 60
            while not (asking.status()["failure"] or "").startswith("TopicChangedError: ") and (
                time.monotonic() < deadline
            ):
                time.sleep(0.1)
            with pytest.raises(RefusedError) as refused:
                asking.is_ready(TopicIdPartition(bytes(16), "x", 0))
            assert refused.value.reason == "METADATA_TOPIC_CHANGED", refused.value
        harness.open("changed", f"{stale.address},{good.address}", call_timeout_ms=20_000, write_timeout_ms=60_000)
        harness.call("register", id="changed", leaders=[tp])
        assert harness.call("wait_ready", id="changed", partitions=[tp])["ready"]
        written = harness.call("write_segments", id="changed", tp=tp, count=3)
        assert written["failures"] == [] and len(written["acked"]) == 3, written
        visible = harness.call("check_visible", id="changed", tp=tp, segments=written["acked"])
        assert visible["errors"] == [] and visible["violations"] == [], visible
        harness.call("close", id="changed")


def test_two_brokers_share_one_rlmm(harness: Harness, kafka, tmp_path) -> None:
    """Two plugins with different broker.id register the same partition; one stops it: the other still reads it.
    Once both stopped it, it is gone."""
    tp, barrier = new_tp("shared"), new_tp("barrier")
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic_name(), 1) as server:
        harness.open("broker-1", server.address, 1)
        harness.open("broker-2", server.address, 2)
        for broker in ("broker-1", "broker-2"):
            assert "error" not in harness.call("register", id=broker, leaders=[tp])
        assert harness.call("wait_ready", id="broker-1", partitions=[tp])["ready"]
        written = harness.call("write_segments", id="broker-1", tp=tp, count=3)
        assert written["failures"] == [], written

        assert "error" not in harness.call("stop", id="broker-1", partitions=[tp])
        # the server handles registrations in order: once a later one is ready, the stop was handled
        harness.call("register", id="broker-1", leaders=[barrier])
        assert harness.call("wait_ready", id="broker-1", partitions=[barrier])["ready"]
        assert harness.call("read", id="broker-2", op="isReady", tp=tp)["value"] is True
        visible = harness.call("check_visible", id="broker-2", tp=tp, segments=written["acked"])
        assert visible["errors"] == [] and visible["violations"] == [], visible

        assert "error" not in harness.call("stop", id="broker-2", partitions=[tp])
        deadline = time.monotonic() + WAIT_S
        while True:
            answer = harness.call("read", id="broker-2", op="listRemoteLogSegments", tp=tp)
            if answer.get("error") == "RemoteResourceNotFoundException" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert answer.get("error") == "RemoteResourceNotFoundException", answer
        for broker in ("broker-1", "broker-2"):
            harness.call("close", id=broker)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


CONFIG_CASES = {
    "targets-missing": ({"targets": None}, ["targets"]),
    "targets-empty": ({"targets": ""}, ["targets"]),
    "target-without-port": ({"targets": "localhost"}, ["targets"]),
    "target-port-not-a-number": ({"targets": "localhost:http"}, ["targets"]),
    "target-port-out-of-range": ({"targets": "localhost:70000"}, ["targets"]),
    "one-bad-target-of-two": ({"targets": "localhost:50051,:50052"}, ["targets"]),
    "call-timeout-negative": ({"call.timeout.ms": "-1"}, ["call.timeout.ms"]),
    "call-timeout-not-a-number": ({"call.timeout.ms": "soon"}, ["call.timeout.ms"]),
    "write-timeout-negative": ({"write.timeout.ms": "-5"}, ["write.timeout.ms"]),
    "cert-without-key": ({"tls.cert.file": "CERT"}, ["tls.cert.file", "tls.key.file"]),
    "key-without-cert": ({"tls.key.file": "KEY"}, ["tls.cert.file", "tls.key.file"]),
    "broker-id-missing": ({"broker.id": None}, ["broker.id"]),
    "broker-id-not-a-number": ({"broker.id": "one"}, ["broker.id"]),
}


@pytest.mark.parametrize("case", CONFIG_CASES, ids=list(CONFIG_CASES))
def test_a_bad_setting_is_a_config_exception_naming_the_key(case: str, harness: Harness, pki: Pki) -> None:
    changes, keys = CONFIG_CASES[case]
    cert, key = pki.client("broker")
    config = plugin_config("127.0.0.1:50051", 1)
    for name, value in changes.items():
        value = {"CERT": str(cert), "KEY": str(key)}.get(value, value)
        if value is None:
            config.pop(name, None)
        else:
            config[name] = value
    answer = harness.call("open", id=f"bad-{case}", config=config)
    assert answer["ok"] is False, f"the plugin took a bad setting: {config}"
    assert answer["class"] == CONFIG_EXCEPTION, answer
    assert any(k in answer["message"] for k in keys), f"the message names none of {keys}: {answer['message']}"


def test_broker_id_as_a_numeric_string_is_accepted(harness: Harness) -> None:
    answer = harness.call("open", id="numeric-string", config=plugin_config(f"127.0.0.1:{free_port()}", "7"))
    assert answer["ok"], answer
    harness.call("close", id="numeric-string")


@pytest.mark.parametrize("where", ["serving", "down"])
def test_close_leaves_no_plugin_thread(where: str, built_plugin, kafka, tmp_path) -> None:  # noqa: F811
    """Every kind of call, a listing left unfinished, then close(): no thread the plugin started is left (JVM
    threads aside), and a second close() is harmless. In a JVM of its own, so that no other plugin's threads count."""
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic_name(), 1) as server:
        target = server.address if where == "serving" else f"127.0.0.1:{free_port()}"
        with Harness(built_plugin, tmp_path / "threads.log") as jvm:
            got = jvm.call(
                "thread_check",
                timeout=300,
                config=plugin_config(
                    target, 1, **({} if where == "serving" else {"call_timeout_ms": 1_000, "write_timeout_ms": 1_000})
                ),
                tp=new_tp("threads"),
                ready_timeout_ms=20_000 if where == "serving" else 1_000,
            )
    if where == "serving":
        failed = {name: call for name, call in got["calls"].items() if isinstance(call, dict) and "error" in call}
        assert not failed, failed
    assert got["started"], "the plugin started no thread: nothing was checked"
    assert "error" not in got["close"] and "error" not in got["close_again"], got
    assert got["left"] == [], f"threads left after close(): {got['left_stacks']}"
