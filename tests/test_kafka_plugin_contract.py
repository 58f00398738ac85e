"""The Kafka plugin against Kafka's own store, through the interface a broker calls.

Each public compat scenario (tests/compat/replay-public) is replayed through the plugin's WRITE methods, on a metadata
topic of its own (the scenario's number of metadata partitions) consumed by one real ``rlmm serve``. The harness
(plugins/kafka/src/test/java) decodes each event with Kafka's RemoteLogMetadataSerde and calls
add/update/putRemotePartitionDeleteMetadata; what the interface cannot write (undecodable bytes, snapshot records) is
skipped. Kafka's own RemotePartitionMetadataStore, in the same JVM, gets every record the plugin wrote, routed as
Kafka's ConsumerTask routes (assigned partitions only, the handler's exceptions caught). At each query's after_event
the plugin (through Kafka's ClassLoaderAwareRemoteLogMetadataManager) and Kafka's store answer the query:

* the plugin must equal Kafka's store on every query (answer, Optional.empty, or exception class);
* the scenario's ``expect`` must hold where the topic the plugin wrote carries the same records as the scenario's
  (see :func:`expect_applies`): a redelivery in a scenario (a record read twice at the same offset, which Kafka's
  consumer skips) is a new record when written again, applied again; so from a redelivery on, the expects of that
  user partition no longer describe what was written. Bootstrap scenarios are written live (their partitions
  registered first): their expects hold once the scenario made the partition ready (before, Kafka answered
  ReplicaNotAvailableException where a live partition answers), and their RemoteResourceNotFoundException expects
  hold throughout.

Then a second ``rlmm serve`` with a fresh view consumes the same topic from the start, and a second plugin on it must
answer every query, and every call at every offset and epoch the segments name, as a Kafka store filled the way a
broker's ConsumerTask fills it when the records already sit in the topic (bootstrap: a partition is ready once the last
record of its metadata partition was read, and a record whose handling threw is not read: p06's mp 0 ends with such a
record, so its partitions never get ready, in Kafka as in rlmm). The live plugin answers the same calls as the live
store at the end; then onStopPartitions, after which reads fail as Kafka's (RemoteResourceNotFoundException).

Negative epochs and offsets have a test of their own (Kafka answers them as any other value).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from rlmm.records.model import TopicIdPartition
from rlmm.records.serde import encode_value
from rlmm.records.uuid import uuid_from_str
from tests.grpc_support import segment
from tests.kafka_broker import RawProducer
from tests.kafka_compat import compat_dir, same_json
from tests.kafka_plugin_support import (  # noqa: F401 (built_plugin: a fixture)
    WAIT_S,
    Harness,
    RlmmServe,
    built_plugin,
    new_tp,
    topic_name,
    wait_until,
)

SCENARIOS = sorted(p for p in (compat_dir() / "replay-public").iterdir() if p.is_dir())
NOT_FOUND = "RemoteResourceNotFoundException"


@pytest.fixture(scope="module")
def harness(built_plugin, tmp_path_factory) -> Iterator[Harness]:  # noqa: F811
    with Harness(built_plugin, tmp_path_factory.mktemp("harness") / "harness.log") as jvm:
        yield jvm


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _key(tp: dict) -> tuple:
    return tp["topic_id"], tp["topic"], tp["partition"]


# ---- comparing answers -------------------------------------------------------------------------------------------


def _by_start(segments: list[dict]) -> list[dict]:
    return sorted(segments, key=lambda s: (s["start_offset"], s["segment_id"]))


def same_answer(call: dict, plugin: dict, kafka: dict) -> bool:
    """The plugin's answer equals Kafka's: the same exception class, or the same value. Listings: the whole listing
    in any order (Kafka's is hash order); an epoch's in Kafka's order, segments starting at the same offset in any
    order (Kafka's ties come in hash order)."""
    if "error" in plugin or "error" in kafka:
        return plugin.get("error") == kafka.get("error")
    got, want = plugin["value"], kafka["value"]
    if call["op"] == "listRemoteLogSegments" and isinstance(got, list) and isinstance(want, list):
        if call["leader_epoch"] is None:
            return same_json(_by_start(got), _by_start(want))
        if same_json(got, want):
            return True
        starts = [s["start_offset"] for s in want]
        return len(set(starts)) < len(starts) and same_json(_by_start(got), _by_start(want))
    return same_json(got, want)


def as_expect(query: dict, answer: dict) -> object:
    """An answer in the form of the scenario's ``expect`` (listings: segment ids)."""
    if "error" in answer:
        return {"error": answer["error"]}
    value = answer["value"]
    if query["op"] == "listRemoteLogSegments":
        return [s["segment_id"] for s in value]
    return value


def meets_expect(query: dict, answer: dict) -> bool:
    got, expect, order = as_expect(query, answer), query["expect"], query.get("order")
    if not (isinstance(got, list) and isinstance(expect, list)) or order not in ("any", "start_offset_ties_any"):
        return same_json(got, expect)
    if sorted(got) != sorted(expect):
        return False
    if order == "start_offset_ties_any":
        starts = {s["segment_id"]: s["start_offset"] for s in answer["value"]}
        return [starts[i] for i in got] == [starts[i] for i in expect]
    return True


def expect_applies(meta: dict, events: list[dict], outcomes: list[dict], query: dict) -> bool:
    """Whether the scenario's expect describes what the plugin wrote, at the query (see the module's doc)."""
    tp, after = _key(query["args"]), query["after_event"]
    seen = set()
    for event, outcome in zip(events[: after + 1], outcomes[: after + 1]):
        where = (event["metadata_partition"], event["offset"])
        if where in seen and "tp" in outcome and _key(outcome["tp"]) == tp:
            return False  # a redelivery, written as a new record
        seen.add(where)
    if meta["mode"] == "live" or query["expect"] == {"error": NOT_FOUND}:
        return True
    return tp in ready_in_scenario(meta, events, after)


def ready_in_scenario(meta: dict, events: list[dict], after: int) -> set[tuple]:
    """Bootstrap mode: the partitions the scenario made ready by event ``after``."""
    used = {e["metadata_partition"] for e in events}
    ready = {_key(a) for a in meta["assigned"] if a["metadata_partition"] not in used}
    for event in events[: after + 1]:
        ready |= {_key(p) for p in event["apply_result"].get("became_ready", []) if "error" not in p}
    return ready


def mismatches(answers: list[dict]) -> list[str]:
    return [
        f"query {a['query']} {a['call']}: plugin {a['plugin']} != Kafka {a['kafka']}"
        for a in answers
        if not same_answer(a["call"], a["plugin"], a["kafka"])
    ]


# ---- the writes --------------------------------------------------------------------------------------------------


def write_problems(events: list[dict], outcomes: list[dict]) -> list[str]:
    """What each write must have done: Kafka's synchronous refusals, and a future that fails exactly where Kafka's
    store could not apply the record."""
    problems = []
    for i, (event, outcome) in enumerate(zip(events, outcomes)):
        result = event["apply_result"]
        if (result.get("stage") == "deserialize") != (outcome.get("skipped") == "undecodable"):
            problems.append(f"event {i}: Kafka's serde decodes it differently here: {outcome}")
        if "type" not in outcome:
            continue
        refused = (outcome["type"] == "RemoteLogSegmentMetadata" and outcome["state"] != "COPY_SEGMENT_STARTED") or (
            outcome["type"] == "RemoteLogSegmentMetadataUpdate" and outcome["state"] == "COPY_SEGMENT_STARTED"
        )
        sync = outcome.get("sync_error")
        if refused:
            if sync is None or sync["class"] != "java.lang.IllegalArgumentException":
                problems.append(f"event {i}: {outcome['type']} {outcome['state']} not refused synchronously: {outcome}")
            continue
        if sync is not None:
            problems.append(f"event {i}: the write threw synchronously: {sync}")
            continue
        kafka_threw = outcome["assigned"] and "error" in outcome.get("kafka", {})
        if kafka_threw:
            error = outcome.get("write_error", {})
            if error.get("class") != "org.apache.kafka.server.log.remote.storage.RemoteStorageException":
                problems.append(
                    f"event {i}: Kafka's store threw {outcome['kafka']}; the write should fail with "
                    f"RemoteStorageException: {outcome}"
                )
        elif outcome.get("write") != "ok":
            problems.append(f"event {i}: the write failed: {outcome}")
    return problems


# ---- the scenarios -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_scenario_through_the_plugin_answers_as_kafka(scenario: Path, harness: Harness, kafka, tmp_path) -> None:
    meta = json.loads((scenario / "scenario.json").read_text())
    events, queries = _jsonl(scenario / "events.jsonl"), _jsonl(scenario / "queries.jsonl")
    name, topic = scenario.name, topic_name("rlmm-plugin-compat")
    partitions = meta["num_metadata_partitions"]
    problems: dict[str, list[str]] = {}  # by phase: every phase runs, the test fails at the end with all of them
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic, partitions, name="live") as live:
        harness.open(f"live-{name}", live.address, 1, write_timeout_ms=60_000)
        run = harness.call("contract", timeout=600, id=f"live-{name}", scenario=str(scenario), name=name)
        assert run["not_ready"] == [], f"registered partitions never ready: {run}"
        outcomes, answers = run["events"], run["queries"]
        assert len(outcomes) == len(events) and len(answers) == len(queries)

        problems["writes"] = write_problems(events, outcomes)
        problems["live, plugin != Kafka's store"] = mismatches(answers)
        expects = problems["live, plugin != the scenario's expect"] = []
        applied = 0
        for query, answer in zip(queries, answers):
            if not expect_applies(meta, events, outcomes, query):
                continue
            applied += 1
            if not meets_expect(query, answer["plugin"]):
                expects.append(f"query {answer['query']} {query}: the plugin answered {answer['plugin']}")
            if not meets_expect(query, answer["kafka"]):
                expects.append(
                    f"query {answer['query']} {query}: harness bug, Kafka's store answered {answer['kafka']}"
                )
        assert applied >= len(queries) // 3, f"only {applied} of {len(queries)} expects checked"

        with RlmmServe(tmp_path, kafka.bootstrap_servers, topic, partitions, name="bootstrap") as fresh:
            harness.open(f"boot-{name}", fresh.address, 2)
            boot = harness.call("contract_final", timeout=600, id=f"boot-{name}", name=name, bootstrap=True)
            assert boot["not_ready"] == [], f"a server consuming the topic from the start never got ready: {boot}"
            problems["bootstrap, plugin != Kafka's store"] = mismatches(boot["queries"])
            harness.call("close", id=f"boot-{name}")

        final = harness.call("contract_final", timeout=600, id=f"live-{name}", name=name)
        problems["live at the end, plugin != Kafka's store"] = mismatches(final["queries"])
        assert len(final["queries"]) > len(queries)
        ops = {a["call"]["op"] for a in final["queries"]}
        assert ops == {
            "remoteLogSegmentMetadata",
            "highestOffsetForEpoch",
            "listRemoteLogSegments",
            "remoteLogSize",
            "nextSegmentWithTxnIndex",
            "isReady",
        }

        stopped = harness.call("contract_stop", id=f"live-{name}", name=name)
        after_stop = problems["after onStopPartitions"] = []
        for partition in stopped["partitions"]:
            assert partition["kafka"].get("error") == NOT_FOUND
            if partition["plugin"].get("error") != NOT_FOUND:
                after_stop.append(f"listRemoteLogSegments after onStopPartitions: {partition}")
            for op, pair in partition.items():
                if isinstance(pair, dict) and {"plugin", "kafka"} <= pair.keys():
                    if not same_answer({"op": op, "leader_epoch": 0}, pair["plugin"], pair["kafka"]):
                        after_stop.append(f"{op} after onStopPartitions: {pair}")
        harness.call("close", id=f"live-{name}")
    found = {phase: lines for phase, lines in problems.items() if lines}
    assert not found, "\n".join(
        f"{phase}: {len(lines)} problems\n  " + "\n  ".join(lines[:10]) for phase, lines in found.items()
    )


def test_negative_epoch_or_offset_answers_as_kafka(harness: Harness, kafka, tmp_path) -> None:
    """Kafka's store takes a negative leader epoch or offset as any other (nothing found: empty, 0; an unknown partition
    still RemoteResourceNotFoundException); so must the plugin, whatever rlmm accepts on the wire."""
    scenario = next(s for s in SCENARIOS if s.name.startswith("p01"))
    meta = json.loads((scenario / "scenario.json").read_text())
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic_name(), meta["num_metadata_partitions"]) as server:
        harness.open("negative", server.address, 1)
        run = harness.call("contract", timeout=600, id="negative", scenario=str(scenario), name="negative")
        assert run["not_ready"] == []
        got = harness.call("contract_final", timeout=600, id="negative", name="negative", negative=True)
        harness.call("close", id="negative")
    calls = [a["call"] for a in got["queries"]]
    assert {c["op"] for c in calls} == {
        "remoteLogSegmentMetadata",
        "highestOffsetForEpoch",
        "listRemoteLogSegments",
        "remoteLogSize",
        "nextSegmentWithTxnIndex",
    }
    assert all(c["leader_epoch"] < 0 or c["offset"] < 0 for c in calls)
    problems = mismatches(got["queries"])
    assert not problems, f"{len(problems)} of {len(calls)} calls differ:\n" + "\n".join(problems[:12])


def test_scenarios_are_there() -> None:
    assert len(SCENARIOS) >= 5
    assert sum(json.loads((s / "scenario.json").read_text())["mode"] == "live" for s in SCENARIOS) >= 4


def test_wrong_arguments_are_refused_synchronously(harness: Harness, kafka, tmp_path) -> None:
    """As Kafka's TopicBasedRemoteLogMetadataManager: null arguments throw NullPointerException, an add not
    COPY_SEGMENT_STARTED and an update to COPY_SEGMENT_STARTED IllegalArgumentException, from the call itself."""
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic_name(), 1) as server:
        harness.open("arguments", server.address)
        tp = new_tp("arguments")
        got = harness.call("calls_without_arguments", id="arguments", tp=tp)
        for call in ("add_null", "update_null", "delete_null"):
            assert got[call].get("class") == "java.lang.NullPointerException", (call, got[call])
        for call in (
            "add_COPY_SEGMENT_FINISHED",
            "add_DELETE_SEGMENT_STARTED",
            "add_DELETE_SEGMENT_FINISHED",
            "update_COPY_SEGMENT_STARTED",
        ):
            assert got[call].get("class") == "java.lang.IllegalArgumentException", (call, got[call])
        # an unknown partition: isReady false, reads RemoteResourceNotFoundException, as Kafka's store
        assert harness.call("read", id="arguments", op="isReady", tp=tp)["value"] is False
        for op, epoch, offset in [
            ("remoteLogSegmentMetadata", 0, 0),
            ("highestOffsetForEpoch", 0, None),
            ("listRemoteLogSegments", None, None),
            ("listRemoteLogSegments", 0, None),
            ("remoteLogSize", 0, None),
            ("nextSegmentWithTxnIndex", 0, 0),
        ]:
            answer = harness.call("read", id="arguments", op=op, tp=tp, epoch=epoch, offset=offset)
            assert answer.get("class") == f"org.apache.kafka.server.log.remote.storage.{NOT_FOUND}", (op, answer)
            assert answer["thrown_by_plugin_loader"] is False  # Kafka's class, the broker's copy
            if op == "listRemoteLogSegments":
                assert answer["thrown_by"] == "call", answer  # as Kafka's: by the method, not by the iterator
        harness.call("close", id="arguments")


def test_replica_not_available_while_the_server_loads(harness: Harness, kafka, tmp_path) -> None:
    """A partition registered while its metadata partition is still being read: the plugin throws Kafka's
    ReplicaNotAvailableException at once (not retried until the deadline), as Kafka's store does for a partition that
    is not ready, then answers once the partition is ready."""
    topic = topic_name()
    tp = new_tp("loading")
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic, 1) as server:
        # its consumer creates the topic (one partition) after the server serves: produced to before, the broker
        # would create it itself, with its own partition count, which the consumer then refuses
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        assert wait_until(lambda: topic in admin.list_topics(timeout=10).topics, WAIT_S), server.log_tail()
        model_tp = TopicIdPartition(uuid_from_str(tp["topic_id"]), tp["topic"], tp["partition"])
        backlog = [(0, encode_value(segment(model_tp, 10 * i, 10 * i + 9))) for i in range(30_000)]
        RawProducer(kafka.bootstrap_servers, topic).produce(backlog)
        harness.open("loading", server.address, call_timeout_ms=30_000)
        got = harness.call("poll_until_ready", timeout=300, id="loading", tp=tp, timeout_ms=120_000)
        assert got["kafka_not_ready"]["class"] == "org.apache.kafka.common.errors.ReplicaNotAvailableException"
        kinds = [kind for kind, _, _, _ in got["sequence"]]
        assert kinds[-1] == "answer+ready", f"{got['sequence']}\nthe server's log:\n{server.log_tail()}"
        assert "ReplicaNotAvailableException" in kinds, f"never seen loading: {got['sequence']}"
        for i, (kind, _count, max_ms, example) in enumerate(got["sequence"]):
            # isReady is asked before each lookup: "answer" alone is a lookup right after the partition became ready
            if kind == "answer":
                assert i == len(got["sequence"]) - 2, got["sequence"]
                continue
            assert kind in ("RemoteResourceNotFoundException", "ReplicaNotAvailableException", "answer+ready"), example
            if kind == "ReplicaNotAvailableException":
                assert example["class"] == got["kafka_not_ready"]["class"]
                # thrown at once, not retried until call.timeout.ms (30 s); loose, for a loaded machine
                assert max_ms < 15_000, f"ReplicaNotAvailableException took {max_ms} ms: retried instead of thrown"
        # once loaded, its 30,000 segments come in many chunks of the stream, each exactly once
        listed = harness.call("read", id="loading", op="listRemoteLogSegments", tp=tp, count=True)
        assert listed.get("value") == len(backlog), listed
        # registration came first: never NOT_FOUND after the partition was seen loading
        assert kinds.index("ReplicaNotAvailableException") > max(
            (i for i, k in enumerate(kinds) if k == NOT_FOUND), default=-1
        )
        harness.call("close", id="loading")
        # iterated for longer than a stream lives (its attempt's deadline: call.timeout.ms), as a retention pass
        # that deletes segment after segment: it goes on in new streams, each segment once, in order
        # (a stream lives 3 s: a new stream passes the segments already returned again, which a loaded machine
        # must manage within its deadline; two pauses of 2 s outlive it)
        harness.open("slow", server.address, call_timeout_ms=3_000)
        slow = harness.call("list_slowly", timeout=300, id="slow", tp=tp, pause_every=10_000, pause_ms=2_000)
        assert slow.get("value") == {"count": len(backlog), "distinct": len(backlog), "ordered": True}, slow
        assert slow["ms"] > 4_000  # past the deadline of the first stream at least once
        harness.call("close", id="slow")
