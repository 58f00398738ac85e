"""Faults: a broker that is not there at start or stops answering mid-run, bad records, restarts,
partitions registered late (Kafka reads their metadata partition again), a topic that does not fit, a
connection error inside a fetched batch."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from consumers import view_state
from consumers.broker import free_port
from consumers.clients import ConfluentClients
from consumers.consumer import MetadataConsumer
from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from consumers.watcher import OffsetWatcher
from rlmm.errors import NotInitializedError, ReplicaNotAvailable, TopicMismatchError
from rlmm.records import SegmentState, TopicIdPartition, encode_value, metadata_partition, uuid_to_str
from rlmm.server.backend import Backend
from rlmm.state.view import View
from tests.kafka_broker import RawProducer, start_broker
from tests.kafka_compat import load_records
from tests.test_broker_writes import segment, update

TP = TopicIdPartition(bytes(range(16)), "orders", 3)


def partner_of(tp: TopicIdPartition, partitions: int) -> TopicIdPartition:
    """Another user partition whose metadata lives in the same metadata partition as ``tp``'s."""
    mp = metadata_partition(tp.topic_id, tp.partition, partitions)
    return next(
        other
        for p in range(100)
        if (other := TopicIdPartition(tp.topic_id, tp.topic, p)) != tp
        and metadata_partition(other.topic_id, p, partitions) == mp
    )


def add_finished(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, start: int, end: int) -> bytes:
    seg = segment(tp, start, end)
    rlmm.add_remote_log_segment_metadata(seg)
    rlmm.update_remote_log_segment_metadata(update(seg, SegmentState.COPY_SEGMENT_FINISHED))
    return seg.segment_id


def test_broker_unreachable_at_start(rlmm_config, tmp_path, caplog) -> None:
    """Not ready, writes refused, the cause in the status, librdkafka's lines logged once per kind and 10 s."""
    port = free_port()
    config = rlmm_config(num_partitions=3, retry_interval_ms=50)
    config = dataclasses.replace(config, bootstrap_servers=f"127.0.0.1:{port}")
    caplog.set_level(logging.INFO, logger="consumers.kafka")
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        time.sleep(3)  # attempts fail meanwhile, each with a few connection failures
        assert rlmm.consumer.failure is None and not rlmm.consumer.initialized
        failure = Backend(view, rlmm).failure()
        assert failure is not None and failure.startswith(f"KafkaUnreachable: no Kafka broker of 127.0.0.1:{port}")
        kinds = [r.args[0] for r in caplog.records if r.name == "consumers.kafka"]
        assert kinds and len(kinds) == len(set(kinds)), kinds  # each kind once
        assert not rlmm.queries.is_ready(TP)
        with pytest.raises(ReplicaNotAvailable):
            rlmm.queries.highest_offset_for_epoch(TP, 0)
        with pytest.raises(NotInitializedError):
            rlmm.add_remote_log_segment_metadata(segment(TP, 0, 9))
        assert rlmm.status()["lag"] is None  # not known before the broker answered once
        broker = start_broker(tmp_path, port)
        try:
            assert rlmm.consumer.wait_ready([TP], timeout=30)
            seg = add_finished(rlmm, TP, 0, 9)
            assert rlmm.queries.remote_log_segment_metadata(TP, 0, 5).segment_id == seg
            assert rlmm.consumer.kafka_problem is None and Backend(view, rlmm).failure() is None
        finally:
            broker.stop()


def test_broker_paused_mid_run(kafka, rlmm_config, tmp_path) -> None:
    """SIGSTOP the broker: reads go on from the view and the status shows the broker silent; writes
    wait; after SIGCONT every record is applied once."""
    config = rlmm_config(num_partitions=3)
    mp = metadata_partition(TP.topic_id, TP.partition, 3)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        ids = [add_finished(rlmm, TP, i * 10, i * 10 + 9) for i in range(5)]
        written: list[bytes] = []
        kafka.pause()
        try:
            writer = threading.Thread(
                target=lambda: written.extend(add_finished(rlmm, TP, i * 10, i * 10 + 9) for i in range(5, 8))
            )
            writer.start()
            time.sleep(2.5)
            assert writer.is_alive()  # waiting for the broker
            assert rlmm.queries.is_ready(TP)
            assert rlmm.queries.remote_log_segment_metadata(TP, 0, 25).segment_id == ids[2]
            status = rlmm.status()
            assert status["metadata_partitions"][str(mp)] == {"position": 10, "end": 10, "lag": 0}
            assert status["ms_since_broker_response"] > 1000
        finally:
            kafka.resume()
        writer.join(30)
        assert not writer.is_alive() and len(written) == 3
        assert [s.segment_id for s in rlmm.queries.list_epoch_segments(TP, 0)] == ids + written
        assert view.metadata_offsets() == {mp: 15}
        assert rlmm.status()["counters"] == {"applied": 16}
        assert rlmm.consumer.records_applied == 16


def test_refused_records_are_logged_once_per_kind_and_interval(rlmm_config, tmp_path, caplog) -> None:
    """Each record the state machine refuses is logged with what it got, at most once per 10 s and kind."""
    config = rlmm_config(num_partitions=1)
    stray = [
        encode_value(update(segment(TP, i * 10, i * 10 + 9), SegmentState.COPY_SEGMENT_FINISHED)) for i in range(40)
    ]  # updates of segments never added
    seg = segment(TP, 0, 9)
    values = [*stray, encode_value(seg), encode_value(update(seg, SegmentState.DELETE_SEGMENT_FINISHED)), b"\x07"]
    caplog.set_level(logging.WARNING, logger="consumers.consumer")
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        RawProducer(config.bootstrap_servers, config.topic).produce([(0, v) for v in values])
        rlmm.wait_applied(0, len(values) - 1, timeout=30)
    refused = [r.getMessage() for r in caplog.records if "record not applied" in r.getMessage()]
    assert len(refused) == 3, refused  # 40 unknown segments in one line, then each other kind once
    assert refused[0].startswith("metadata partition 0, offset 0: record not applied (an update of a segment")
    assert "offset 41: record not applied (a segment state change Kafka's state machine refuses" in refused[1]
    assert (
        "offset 42: record not applied (does not decode; kept in the quarantine: Kafka throws "
        "MetadataParseException" in refused[2]
    )


def test_a_refused_record_is_logged_with_its_partition_and_segment(rlmm_config, tmp_path, caplog) -> None:
    config = rlmm_config(num_partitions=1)
    seg = segment(TP, 0, 9)
    caplog.set_level(logging.WARNING, logger="consumers.consumer")
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        RawProducer(config.bootstrap_servers, config.topic).produce(
            [(0, encode_value(seg)), (0, encode_value(update(seg, SegmentState.COPY_SEGMENT_STARTED)))]
        )
        rlmm.wait_applied(0, 1, timeout=30)
    refused = [r.getMessage() for r in caplog.records if "record not applied" in r.getMessage()]
    assert refused == [
        "metadata partition 0, offset 1: record not applied (the partition's store refused it: Kafka throws "
        f"IllegalArgumentException): RemoteLogSegmentMetadataUpdate COPY_SEGMENT_STARTED of segment "
        f"{uuid_to_str(seg.segment_id)} of partition {uuid_to_str(TP.topic_id)}:orders-3"
    ]


def test_bad_records_are_quarantined_and_consumption_goes_on(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=1)
    corpus = {r["case"]: r["hex"] for r in load_records()}
    truncated, future_version = corpus["invalid-truncated-1"], corpus["invalid-version-1-segment"]
    seg = segment(TP, 0, 9)
    values = [
        encode_value(seg),
        bytes.fromhex(truncated),
        None,
        bytes.fromhex(future_version),
        encode_value(update(seg, SegmentState.COPY_SEGMENT_FINISHED)),
    ]
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        assert RawProducer(config.bootstrap_servers, config.topic).produce([(0, v) for v in values]) == [0, 1, 2, 3, 4]
        rlmm.wait_applied(0, 4, timeout=30)
        assert rlmm.queries.remote_log_segment_metadata(TP, 0, 5).segment_id == seg.segment_id
        assert rlmm.status()["counters"] == {"applied": 2, "quarantined": 3}
        listed = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "quarantine", "--view", str(tmp_path / "view")],
            capture_output=True,
            text=True,
            check=True,
        )  # beside the running service
    lines = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(q["offset"], q["error"], q["cause"], q["null"]) for q in lines] == [
        (1, "MetadataParseException", "BufferUnderflowException", False),
        (2, "NullPointerException", None, True),
        (3, "MetadataParseException", "UnsupportedVersionException", False),
    ]
    assert [q["hex"] for q in lines] == [truncated, None, future_version]
    assert all(q["metadata_partition"] == 0 and q["reason"] for q in lines)
    assert "3 quarantined record(s)" in listed.stderr


def test_restart_resumes_from_the_view(rlmm_config, tmp_path) -> None:
    """A restarted service seeks to the view's offsets (history is not read again) and is not ready
    until it has caught up with the records written while it was down."""
    config = rlmm_config(num_partitions=3)
    mp = metadata_partition(TP.topic_id, TP.partition, 3)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        for i in range(10):
            add_finished(rlmm, TP, i * 10, i * 10 + 9)
    down = segment(TP, 100, 109)
    RawProducer(config.bootstrap_servers, config.topic).produce(
        [(mp, encode_value(down)), (mp, encode_value(update(down, SegmentState.COPY_SEGMENT_FINISHED)))]
    )
    with View(tmp_path / "view") as view:
        rlmm = RemoteLogMetadataManager(view, config)
        rlmm.consumer.hold({mp: 20})
        with rlmm:
            assert rlmm.consumer.initial_positions == {mp: 20}
            assert rlmm.consumer.wait_initialized(30)
            time.sleep(0.5)
            assert not rlmm.queries.is_ready(TP)  # the two records written meanwhile are not applied yet
            with pytest.raises(ReplicaNotAvailable):
                rlmm.queries.highest_offset_for_epoch(TP, 0)
            rlmm.consumer.hold(None)
            assert rlmm.consumer.wait_ready([TP], timeout=30)
            assert rlmm.queries.highest_offset_for_epoch(TP, 0) == 109
            assert rlmm.consumer.records_applied == 2  # only the tail was read


def test_a_partition_registered_later_is_loaded_from_the_beginning(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=3)
    other = partner_of(TP, 3)
    mp = metadata_partition(TP.topic_id, TP.partition, 3)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        mine = [add_finished(rlmm, TP, 0, 9), add_finished(rlmm, TP, 10, 19)]
        theirs = [add_finished(rlmm, other, 0, 99)]  # consumed, skipped: not registered here
        assert rlmm.status()["counters"] == {"applied": 4, "skipped:not_assigned": 2}
        assert rlmm.consumer.register([other]).wait(10)
        assert rlmm.consumer.wait_ready([other], timeout=30)
        assert [s.segment_id for s in rlmm.queries.list_epoch_segments(other, 0)] == theirs
        assert [s.segment_id for s in rlmm.queries.list_epoch_segments(TP, 0)] == mine
        assert rlmm.queries.is_ready(TP)  # stays ready while its metadata partition is read again
        assert rlmm.status()["counters"] == {"applied": 6, "skipped:not_assigned": 2, "skipped:already_processed": 4}
        # the reading again is finished
        assert _without_holders(view.consumer_state()) == [b"num_partitions", b"topic_id"]
        assert view.metadata_offsets() == {mp: 5}


def test_a_reading_again_cut_short_starts_over_after_a_restart(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=3)
    other = partner_of(TP, 3)
    mp = metadata_partition(TP.topic_id, TP.partition, 3)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        theirs = [add_finished(rlmm, other, i * 10, i * 10 + 9) for i in range(3)]
    with View(tmp_path / "view") as view:
        rlmm = RemoteLogMetadataManager(view, config, [other])
        rlmm.consumer.hold({mp: 2})  # stopped (or killed) after two records of the six
        with rlmm:
            rlmm.wait_applied(mp, 1, timeout=30)
            assert not rlmm.queries.is_ready(other)
        assert any(key.startswith(b"reread:") for key in view.consumer_state())  # the unfinished reading again
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config) as rlmm:
        assert rlmm.consumer.wait_ready([other], timeout=30)
        assert [s.segment_id for s in rlmm.queries.list_epoch_segments(other, 0)] == theirs
        assert _without_holders(view.consumer_state()) == [b"num_partitions", b"topic_id"]


def test_a_topic_with_another_partition_count_is_refused(rlmm_config, tmp_path) -> None:
    existing = rlmm_config(num_partitions=3)
    ensure_topic(AdminClient(existing.admin_config()), existing)
    config = dataclasses.replace(existing, num_partitions=5)
    with pytest.raises(TopicMismatchError, match="has 3 partitions but remote.log.metadata.topic.num.partitions is 5"):
        ensure_topic(AdminClient(config.admin_config()), config)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        rlmm.consumer.stop(timeout=30)
        assert isinstance(rlmm.consumer.failure, TopicMismatchError)
        with pytest.raises(NotInitializedError, match="has 3 partitions"):
            rlmm.add_remote_log_segment_metadata(segment(TP, 0, 9))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlmm.cli",
            "consume",
            "--view",
            str(tmp_path / "cli-view"),
            "-b",
            config.bootstrap_servers,
            "--set",
            f"remote.log.metadata.topic.name={config.topic}",
            "--set",
            "remote.log.metadata.topic.num.partitions=5",
            "--status-every",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "has 3 partitions but remote.log.metadata.topic.num.partitions is 5" in run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["event"] == "stopped"


def test_the_topic_is_created_as_kafka_creates_it(rlmm_config) -> None:
    from confluent_kafka.admin import ConfigResource

    config = rlmm_config(num_partitions=7)
    admin = AdminClient(config.admin_config())
    ensure_topic(admin, config)
    ensure_topic(admin, config)  # an existing topic is used as it is
    assert len(admin.list_topics(timeout=10).topics[config.topic].partitions) == 7
    resource = ConfigResource("topic", config.topic)
    described = admin.describe_configs([resource])[resource].result()
    values = {name: described[name].value for name in ("retention.ms", "cleanup.policy", "min.insync.replicas")}
    assert values == {"retention.ms": "-1", "cleanup.policy": "delete", "min.insync.replicas": "1"}


class ErrorInsideABatch:
    """A real consumer whose next fetched batch of several records gets a connection error after its first
    record (as when the broker lost the topic while the batch was fetched); ``applied_after`` is what the view
    had applied of that partition when the consumer fetched again."""

    def __init__(self, real, view: View, mp: int) -> None:
        self._real, self._view, self._mp = real, view, mp
        self.armed = False
        self.injected: list[int] = []  # offsets of the records after the error
        self.applied_after: int | None = None

    def consume(self, num_messages: int, timeout: float):
        if self.injected and self.applied_after is None:
            self.applied_after = self._view.metadata_offsets().get(self._mp)
        rest = self._real.consume(num_messages, timeout)
        if self.armed and rest and all(m.error() is None for m in rest):
            self.armed = False
            self.injected = [m.offset() for m in rest]
            return [_ConnectionError(self._mp), *rest]
        return rest

    def __getattr__(self, name: str):
        return getattr(self._real, name)


class _ConnectionError:
    def __init__(self, mp: int) -> None:
        self._mp = mp

    def error(self) -> KafkaError:
        return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "injected: the broker lost the topic")

    def partition(self) -> int:
        return self._mp


class InjectingClients(ConfluentClients):
    def __init__(self, config, view: View, mp: int) -> None:
        super().__init__(config)
        self._view, self._mp = view, mp
        self.consumers: list[ErrorInsideABatch] = []

    def consumer(self, on_error, on_stats):
        self.consumers.append(ErrorInsideABatch(super().consumer(on_error, on_stats), self._view, self._mp))
        return self.consumers[-1]


def test_nothing_after_a_connection_error_in_a_batch_is_applied_before_the_topic_is_checked(
    rlmm_config, tmp_path
) -> None:
    """The records fetched after the error are not applied with the batch: they are read again once the topic was
    checked (here it is the same topic, so each is then applied once)."""
    config = rlmm_config(num_partitions=1)
    ensure_topic(AdminClient(config.admin_config()), config)
    producer = RawProducer(config.bootstrap_servers, config.topic)
    segments = [segment(TP, i * 10, i * 10 + 9) for i in range(20)]
    with View(tmp_path / "view") as view:
        clients = InjectingClients(config, view, 0)
        consumer = MetadataConsumer(view, config, OffsetWatcher(), clients, [TP])
        consumer.start()
        try:
            assert consumer.wait_ready([TP], timeout=30)
            clients.consumers[-1].armed = True
            producer.produce([(0, encode_value(s)) for s in segments])
            deadline = time.monotonic() + 30
            while view.metadata_offsets().get(0) != len(segments) - 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            fetched = clients.consumers[-1]
            assert fetched.injected, "no batch of several records was fetched"
            assert fetched.applied_after is not None and fetched.applied_after < fetched.injected[0]
            assert view.metadata_offsets() == {0: len(segments) - 1}
            assert view.counters() == {"applied": len(segments)}  # each record applied once
        finally:
            consumer.stop()


def _without_holders(state: dict[bytes, bytes]) -> list[bytes]:
    """The consumer's bookkeeping but the holders of the registrations (one key per registered partition)."""
    return [key for key in state if not key.startswith(view_state.HOLDERS)]
