"""Every call of the gRPC service over loopback, against a server whose manager consumes the test
broker: answers equal the view's own, writes are read-your-writes, and each error has its status."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from rlmm.client import convert
from rlmm.errors import (
    InvalidArgumentError,
    NotFoundError,
    RefusedError,
    RemoteResourceNotFound,
    ReplicaNotAvailable,
    ReplicaNotAvailableError,
    WriteTimeoutError,
)
from rlmm.records.model import PartitionDeleteState, SegmentState, SegmentUpdate
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import TS, client, finished, kafka_config, new_tp, partition_delete, segment, served, stub
from tests.kafka_broker import RawProducer

WAIT_MS = 2_000


@pytest.fixture(scope="module")
def service(kafka, tmp_path_factory):
    """One metadata partition (every user partition shares it), short write wait, tiny stream chunks."""
    config = kafka_config(kafka.bootstrap_servers, num_partitions=1, consume_wait_ms=WAIT_MS)
    with served(tmp_path_factory.mktemp("grpc-calls"), kafka.bootstrap_servers, config=config, stream_chunk=3) as (
        server,
        manager,
        view,
    ):
        assert manager.consumer.wait_initialized(30)
        with client(server, retry_for=1.0) as rlmm:
            yield server, manager, view, rlmm


def registered(rlmm, *partitions) -> None:
    rlmm.on_partition_leadership_changes(partitions[:1], partitions[1:])
    assert rlmm.wait_ready(partitions, timeout=30)


def ask(call, *args):
    try:
        answer = call(*args)
        return list(answer) if isinstance(answer, Iterator) else answer
    except RemoteResourceNotFound:
        return "NOT_FOUND"
    except ReplicaNotAvailable:
        return "UNAVAILABLE"


def test_every_read_answers_as_the_view(service) -> None:
    server, manager, view, rlmm = service
    tp, unknown = new_tp("orders", 3), new_tp("orders", 4)
    registered(rlmm, tp)
    segments = [
        segment(tp, 0, 99),
        segment(tp, 100, 199, txn_empty=False, custom=b"\x00rsm"),
        segment(tp, 200, 299, epoch=1),
        segment(tp, 300, 399, epoch=1),
    ]
    for seg in segments:
        rlmm.add_remote_log_segment_metadata(seg)
    for seg in segments[:3]:
        rlmm.update_remote_log_segment_metadata(finished(seg))  # the last stays COPY_SEGMENT_STARTED
    calls = [("is_ready", p) for p in (tp, unknown)]
    for p in (tp, unknown):
        calls += [("list_remote_log_segments", p), ("remote_log_size", p), ("max_timestamp", p)]
        for epoch in (0, 1, 2):
            calls += [
                ("highest_offset_for_epoch", p, epoch),
                ("list_epoch_segments", p, epoch),
                ("remote_log_size", p, epoch),
            ]
            calls += [
                (name, p, epoch, offset)
                for offset in (0, 99, 100, 150, 250, 350, 400)
                for name in ("remote_log_segment_metadata", "next_segment_with_txn_index")
            ]
            calls += [
                ("first_segment_with_max_timestamp_at_least", p, epoch, ts, offset)
                for ts in (0, TS + 99, TS + 150, TS + 299, TS + 400)
                for offset in (0, 150, 250, 400)
            ]
    for name, *args in calls:
        assert ask(getattr(rlmm, name), *args) == ask(getattr(view.queries, name), *args), (name, args)
    listed = rlmm.list_remote_log_segments(tp)
    assert sorted(s.segment_id for s in listed) == sorted(s.segment_id for s in segments)
    found = rlmm.remote_log_segment_metadata(tp, 0, 150)
    assert found.custom_metadata == b"\x00rsm" and not found.txn_index_empty
    assert found.state is SegmentState.COPY_SEGMENT_FINISHED
    assert rlmm.next_segment_with_txn_index(tp, 0, 0).segment_id == segments[1].segment_id
    by_timestamp = rlmm.first_segment_with_max_timestamp_at_least
    assert by_timestamp(tp, 0, TS + 100, 0).segment_id == segments[1].segment_id
    assert by_timestamp(tp, 1, 0, 0).segment_id == segments[2].segment_id  # the last one is still copying
    assert by_timestamp(tp, 1, TS + 300, 0) is None


def test_batch_lookups_answer_each_lookup_alone(service) -> None:
    server, manager, view, rlmm = service
    tp, unknown = new_tp("batch"), new_tp("batch", 1)
    registered(rlmm, tp)
    seg = segment(tp, 10, 19)
    rlmm.add_remote_log_segment_metadata(seg)
    rlmm.update_remote_log_segment_metadata(finished(seg))
    answers = rlmm.remote_log_segment_metadata_batch([(tp, 0, 15), (tp, 0, 5), (unknown, 0, 15), (tp, 1, 15)] * 3)
    assert [a.segment_id for a in answers[::4]] == [seg.segment_id] * 3
    assert answers[1::4] == [None] * 3 and answers[3::4] == [None] * 3
    assert all(
        isinstance(a, NotFoundError) and a.kafka_exception == "RemoteResourceNotFoundException" for a in answers[2::4]
    )
    assert rlmm.remote_log_segment_metadata_batch([]) == []


def test_listing_streams_in_chunks(service) -> None:
    server, manager, view, rlmm = service
    tp = new_tp("stream")
    registered(rlmm, tp)
    segments = [segment(tp, i * 10, i * 10 + 9) for i in range(8)]
    for seg in segments:
        rlmm.add_remote_log_segment_metadata(seg)
    channel, raw = stub(server)
    with channel:
        request = api.ListRemoteLogSegmentsRequest(topic_id_partition=convert.topic_id_partition_pb(tp))
        chunks = [len(c.remote_log_segment_metadata) for c in raw.ListRemoteLogSegments(request)]
        assert chunks == [3, 3, 2]
        empty = api.ListRemoteLogSegmentsRequest(topic_id_partition=convert.topic_id_partition_pb(tp), leader_epoch=7)
        assert list(raw.ListRemoteLogSegments(empty)) == []
    assert sorted(s.segment_id for s in rlmm.list_remote_log_segments(tp)) == sorted(s.segment_id for s in segments)


def test_writes_are_read_your_writes_and_kafkas_rules_refuse_some(service) -> None:
    server, manager, view, rlmm = service
    tp = new_tp("ryw")
    registered(rlmm, tp)
    seg = segment(tp, 0, 9)
    rlmm.add_remote_log_segment_metadata(seg)
    assert [s.segment_id for s in rlmm.list_remote_log_segments(tp)] == [seg.segment_id]
    assert rlmm.remote_log_segment_metadata(tp, 0, 5) is None
    rlmm.update_remote_log_segment_metadata(finished(seg))
    for _ in range(2):  # the second answer from the server's lookup memo
        assert rlmm.remote_log_segment_metadata(tp, 0, 5).segment_id == seg.segment_id
    replacing = segment(tp, 0, 19)  # the same start offset: replaces seg's entry in the epoch's offset index
    rlmm.add_remote_log_segment_metadata(replacing)
    rlmm.update_remote_log_segment_metadata(finished(replacing))
    for _ in range(2):
        assert rlmm.remote_log_segment_metadata(tp, 0, 5).segment_id == replacing.segment_id
    with pytest.raises(
        RefusedError, match="should have state as COPY_SEGMENT_STARTED but it contains state as: COPY_SEGMENT_FINISHED"
    ) as refused:
        rlmm.add_remote_log_segment_metadata(segment(tp, 10, 19, state=SegmentState.COPY_SEGMENT_FINISHED))
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.kafka_exception == "IllegalArgumentException"
    with pytest.raises(RefusedError, match="should not have the state as: COPY_SEGMENT_STARTED"):
        rlmm.update_remote_log_segment_metadata(
            SegmentUpdate(tp, seg.segment_id, 1, 1, None, SegmentState.COPY_SEGMENT_STARTED)
        )
    for state in PartitionDeleteState:
        rlmm.put_remote_partition_delete_metadata(partition_delete(tp, state))
    with pytest.raises(NotFoundError, match="No resource found for partition"):
        rlmm.remote_log_segment_metadata(tp, 0, 5)  # not the segment the memo held
    with pytest.raises(NotFoundError, match="No resource found for partition") as gone:
        rlmm.remote_log_size(tp)
    assert gone.value.code is grpc.StatusCode.NOT_FOUND
    assert gone.value.kafka_exception == "RemoteResourceNotFoundException"


def test_a_write_refused_when_applied_fails_with_kafkas_exception(kafka, tmp_path) -> None:
    """Its own service: a record that throws makes nothing of its metadata partition ready after it."""
    tp = new_tp("removed")
    with served(tmp_path, kafka.bootstrap_servers, [tp]) as (server, manager, view), client(server) as rlmm:
        assert rlmm.wait_ready([tp], timeout=30)
        rlmm.put_remote_partition_delete_metadata(partition_delete(tp, PartitionDeleteState.DELETE_PARTITION_FINISHED))
        with pytest.raises(RefusedError, match="was written, but it cannot be applied") as unapplied:
            rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9))  # Kafka's store refuses the removed partition's
        assert unapplied.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert unapplied.value.reason == "WRITE_REFUSED_WHEN_APPLIED"
        assert unapplied.value.kafka_exception == "IllegalStateException"


def test_a_write_larger_than_the_producer_takes_is_an_invalid_argument(service) -> None:
    """A record over the producer's message.max.bytes (custom metadata of 1.2 MB) is refused before it is sent,
    naming its size and the limit; nothing reaches the topic, and the next write goes through."""
    server, manager, view, rlmm = service
    tp = new_tp("oversized")
    registered(rlmm, tp)
    with pytest.raises(InvalidArgumentError, match=r"the record is \d+ bytes, larger than .*\(1000000 bytes") as big:
        rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9, custom=bytes(1_200_000)))
    assert big.value.code is grpc.StatusCode.INVALID_ARGUMENT and big.value.reason == "RECORD_TOO_LARGE"
    assert big.value.kafka_exception == "RecordTooLargeException" and "it was not written" in big.value.message
    assert rlmm.list_remote_log_segments(tp) == []
    rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9, custom=bytes(100)))
    assert len(rlmm.list_remote_log_segments(tp)) == 1


def test_stopped_partitions_are_forgotten(service) -> None:
    server, manager, view, rlmm = service
    tp = new_tp("stopped")
    registered(rlmm, tp)
    rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9))
    rlmm.on_stop_partitions([tp])
    deadline = time.monotonic() + 10
    while rlmm.is_ready(tp) and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(NotFoundError):
        rlmm.list_remote_log_segments(tp)


def _details(error: grpc.RpcError) -> tuple[error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo | None]:
    info, retry = None, None
    for detail in rpc_status.from_call(error).details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
    return info, retry


def test_a_loading_partition_is_unavailable_with_a_retry_hint_and_the_client_retries(service) -> None:
    server, manager, view, rlmm = service
    tp = new_tp("loading")
    assert manager.consumer.hold({0: 0}).wait(5)  # registering rewinds the metadata partition: it stops at 0
    try:
        rlmm.on_partition_leadership_changes([tp], [])
        channel, raw = stub(server)
        with channel:
            request = api.HighestOffsetForEpochRequest(topic_id_partition=convert.topic_id_partition_pb(tp))
            deadline = time.monotonic() + 10
            while True:  # until the registration is served (NOT_FOUND before)
                with pytest.raises(grpc.RpcError) as failed:
                    raw.HighestOffsetForEpoch(request)
                if failed.value.code() is grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "Remote log metadata cache is not initialized for partition" in failed.value.details()
        assert "retry in 0.5 s" in failed.value.details()
        info, retry = _details(failed.value)
        assert (
            info.reason == "REPLICA_NOT_AVAILABLE"
            and info.metadata["kafka_exception"] == "ReplicaNotAvailableException"
        )
        assert retry.retry_delay.ToMilliseconds() == 500
        with pytest.raises(ReplicaNotAvailableError):
            rlmm.highest_offset_for_epoch(tp, 0)  # retried for 1 s, then given up
        threading.Timer(0.7, manager.consumer.hold, [None]).start()
        with client(server, retry_for=20) as patient:
            assert patient.highest_offset_for_epoch(tp, 0) is None  # retried until ready
    finally:
        manager.consumer.hold(None)


def test_a_write_not_applied_in_time_is_deadline_exceeded(service) -> None:
    server, manager, view, rlmm = service
    tp = new_tp("late")
    registered(rlmm, tp)
    position = manager.watcher.applied()[0]
    assert manager.consumer.hold({0: position}).wait(5)
    late = segment(tp, 0, 9)
    try:
        with pytest.raises(
            WriteTimeoutError,
            match=rf"was written but not applied within remote.log.metadata.consume"
            rf".wait.ms \({WAIT_MS} ms\); it may still be applied later",
        ) as e:
            rlmm.add_remote_log_segment_metadata(late)
        assert e.value.code is grpc.StatusCode.DEADLINE_EXCEEDED and e.value.kafka_exception == "TimeoutException"
    finally:
        manager.consumer.hold(None)
    manager.wait_applied(0, position, timeout=10)
    assert [s.segment_id for s in rlmm.list_remote_log_segments(tp)] == [late.segment_id]


def test_status_tells_offsets_lag_and_quarantine(service, kafka) -> None:
    server, manager, view, rlmm = service
    before = rlmm.status()
    RawProducer(kafka.bootstrap_servers, manager.config.topic).produce([(0, b"\x00\x01 not a record")])
    deadline = time.monotonic() + 10
    while (status := rlmm.status())["quarantined"] == before["quarantined"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status["quarantined"] == before["quarantined"] + 1
    assert status["serving"] and status["consumes"] and status["failure"] == ""
    [mp] = status["metadata_partitions"]
    assert mp["partition"] == 0 and mp["applied_offset"] == manager.watcher.applied()[0] - 1
    assert mp["lag"] == 0 and mp["end_offset"] == mp["applied_offset"] + 1
    assert status["registered_partitions"] >= 1 and status["counters"]["quarantined"] == status["quarantined"]
