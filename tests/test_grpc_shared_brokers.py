"""Several brokers sharing rlmm servers, on the real broker and real gRPC servers: registrations kept per
broker (one broker's OnStopPartitions does not drop what another follows; kept across a restart; a full
registration ends the others), and read-your-writes across servers (a write answers its position, a read
carrying it in ``rlmm-read-after`` waits until the server applied it)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from consumers.manager import RemoteLogMetadataManager
from rlmm.client.convert import topic_id_partition_pb
from rlmm.errors import InvalidArgumentError, NotFoundError, UnavailableError
from rlmm.records import metadata_partition
from rlmm.state.view import View
from rlmm.v1 import metadata_pb2
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import (
    client,
    fill_view,
    finished,
    kafka_config,
    new_tp,
    running_server,
    segment,
    served,
    stub,
)

WAIT_S = 30.0


def test_one_brokers_stop_keeps_what_another_broker_follows(kafka, tmp_path) -> None:
    tp, other = new_tp("shared", 0), new_tp("mine", 0)
    config = kafka_config(kafka.bootstrap_servers)
    with served(tmp_path, kafka.bootstrap_servers, config=config) as (server, _, _), client(server) as rlmm:
        rlmm.on_partition_leadership_changes([tp, other], [], broker_id=1)
        rlmm.on_partition_leadership_changes([], [tp], broker_id=2)
        assert rlmm.wait_ready([tp, other], timeout=WAIT_S)
        seg = segment(tp, 0, 99)
        rlmm.add_remote_log_segment_metadata(seg)
        rlmm.update_remote_log_segment_metadata(finished(seg))

        rlmm.on_stop_partitions([tp, other], broker_id=1)
        assert _stopped(rlmm, other)  # broker 1 alone held it
        assert rlmm.is_ready(tp) and rlmm.remote_log_segment_metadata(tp, 0, 50) is not None  # broker 2 holds it
        rlmm.on_stop_partitions([tp], broker_id=3)  # a broker that never registered it ends nothing
        assert rlmm.is_ready(tp)
        assert rlmm.status()["registered_partitions"] == 1

    with View(tmp_path / "view") as view:  # the holders are kept in the view: broker 2's registration survives
        manager = RemoteLogMetadataManager(view, config).start()
        try:
            with running_server(view, manager) as server, client(server) as rlmm:
                assert rlmm.wait_ready([tp], timeout=WAIT_S)
                rlmm.on_stop_partitions([tp])  # no broker id: the registrations made without one, none here
                assert rlmm.is_ready(tp)
                rlmm.on_stop_partitions([tp], broker_id=2)
                assert _stopped(rlmm, tp)
        finally:
            manager.close()


def test_a_full_registration_ends_the_brokers_other_registrations(kafka, tmp_path) -> None:
    a, b, c = new_tp("full", 0), new_tp("full", 1), new_tp("full", 2)
    with served(tmp_path, kafka.bootstrap_servers) as (server, _, _), client(server) as rlmm:
        rlmm.on_partition_leadership_changes([a, b], [], broker_id=5)
        rlmm.on_partition_leadership_changes([b], [], broker_id=6)
        assert rlmm.wait_ready([a, b], timeout=WAIT_S)
        rlmm.on_partition_leadership_changes([c], [b], broker_id=5, full=True)
        assert rlmm.wait_ready([b, c], timeout=WAIT_S)
        assert _stopped(rlmm, a)
        rlmm.on_stop_partitions([b], broker_id=5)
        assert rlmm.is_ready(b)  # broker 6 still holds it
        assert rlmm.status()["registered_partitions"] == 2


def test_a_negative_broker_id_is_refused(kafka, tmp_path) -> None:
    with served(tmp_path, kafka.bootstrap_servers) as (server, _, _), client(server) as rlmm:
        with pytest.raises(InvalidArgumentError, match="broker_id"):
            rlmm.on_partition_leadership_changes([new_tp()], [], broker_id=-1)


def test_a_write_answers_where_it_landed(kafka, tmp_path) -> None:
    tp = new_tp("positions", 4)
    config = kafka_config(kafka.bootstrap_servers, num_partitions=3)
    with served(tmp_path, kafka.bootstrap_servers, config=config) as (server, _, view), client(server) as rlmm:
        rlmm.on_partition_leadership_changes([tp], [], broker_id=1)
        assert rlmm.wait_ready([tp], timeout=WAIT_S)
        seg = segment(tp, 0, 9)
        positions = [rlmm.add_remote_log_segment_metadata(seg), rlmm.update_remote_log_segment_metadata(finished(seg))]
        mp = metadata_partition(tp.topic_id, tp.partition, 3)
        assert [p.metadata_partition for p in positions] == [mp, mp]
        assert positions[1].offset == positions[0].offset + 1
        assert view.metadata_offsets()[mp] >= positions[1].offset


def test_a_read_after_a_position_waits_until_the_server_applied_it(kafka, tmp_path) -> None:
    """Two servers on one topic: every write acknowledged by the first is seen at once by a read at the second
    that carries its position."""
    tp = new_tp("failover", 1)
    config = kafka_config(kafka.bootstrap_servers)
    with (
        served(tmp_path / "a", kafka.bootstrap_servers, config=config) as (first, _, _),
        served(tmp_path / "b", kafka.bootstrap_servers, config=config) as (second, _, _),
        client(first) as writer,
        client(second) as reader,
    ):
        for rlmm in (writer, reader):
            rlmm.on_partition_leadership_changes([tp], [], broker_id=1)
            assert rlmm.wait_ready([tp], timeout=WAIT_S)
        channel, raw = stub(second)
        with channel:
            for i in range(20):
                seg = segment(tp, i * 10, i * 10 + 9)
                writer.add_remote_log_segment_metadata(seg)
                position = writer.update_remote_log_segment_metadata(finished(seg))
                header = (("rlmm-read-after", f"{position.metadata_partition}:{position.offset}"),)
                request = api.RemoteLogSegmentMetadataRequest(
                    topic_id_partition=topic_id_partition_pb(tp), leader_epoch=0, offset=i * 10 + 5
                )
                answer = raw.RemoteLogSegmentMetadata(request, metadata=header, timeout=WAIT_S)
                assert answer.HasField("remote_log_segment_metadata"), f"write {i} not seen at the second server"
                assert answer.remote_log_segment_metadata.state == metadata_pb2.COPY_SEGMENT_FINISHED


def test_a_read_after_a_position_never_reached_fails_unavailable_within_its_deadline(kafka, tmp_path) -> None:
    tp = new_tp("ahead", 0)
    with served(tmp_path, kafka.bootstrap_servers) as (server, _, _), client(server) as rlmm:
        rlmm.on_partition_leadership_changes([tp], [])
        assert rlmm.wait_ready([tp], timeout=WAIT_S)
        channel, raw = stub(server)
        with channel:
            request = api.IsReadyRequest(topic_id_partition=topic_id_partition_pb(tp))
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as caught:
                raw.IsReady(request, metadata=(("rlmm-read-after", "0:1000000"),), timeout=1.0)
            assert time.monotonic() - started < 1.5
            assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            if caught.value.code() is grpc.StatusCode.UNAVAILABLE:
                assert "rlmm-read-after" in caught.value.details()
            with pytest.raises(grpc.RpcError) as caught:
                raw.IsReady(request, metadata=(("rlmm-read-after", "0:x"),), timeout=5)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "METADATA_PARTITION:OFFSET" in caught.value.details()


def test_a_read_only_server_refuses_at_once_a_read_after_what_its_view_holds(tmp_path) -> None:
    tp = new_tp()
    with View(tmp_path / "view") as view:
        fill_view(view, tp, [segment(tp, 0, 9)])  # offsets 0 and 1 of metadata partition 0
        with running_server(view) as server:
            channel, raw = stub(server)
            with channel:
                request = api.IsReadyRequest(topic_id_partition=topic_id_partition_pb(tp))
                assert raw.IsReady(request, metadata=(("rlmm-read-after", "0:1"),), timeout=5).ready
                started = time.monotonic()
                with pytest.raises(grpc.RpcError) as caught:
                    raw.IsReady(request, metadata=(("rlmm-read-after", "0:2"),), timeout=5)
                assert time.monotonic() - started < 2
                assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
                assert "NOT_CAUGHT_UP" in str(caught.value.trailing_metadata())  # the ErrorInfo's reason


def test_a_read_waits_for_a_write_in_flight(kafka, tmp_path) -> None:
    """The position is known before the view applied the record only through the topic: a read carrying the
    next offset of the partition waits for a write made meanwhile by another server."""
    tp = new_tp("inflight", 0)
    config = kafka_config(kafka.bootstrap_servers)
    with (
        served(tmp_path / "a", kafka.bootstrap_servers, config=config) as (first, _, _),
        served(tmp_path / "b", kafka.bootstrap_servers, config=config) as (second, _, view_b),
        client(first) as writer,
        client(second) as reader,
    ):
        for rlmm in (writer, reader):
            rlmm.on_partition_leadership_changes([tp], [], broker_id=1)
            assert rlmm.wait_ready([tp], timeout=WAIT_S)
        seg = segment(tp, 0, 9)
        first_position = writer.add_remote_log_segment_metadata(seg)
        mp, next_offset = first_position.metadata_partition, first_position.offset + 1
        channel, raw = stub(second)
        answers: list = []

        def read() -> None:
            request = api.RemoteLogSegmentMetadataRequest(
                topic_id_partition=topic_id_partition_pb(tp), leader_epoch=0, offset=5
            )
            answers.append(
                raw.RemoteLogSegmentMetadata(request, metadata=(("rlmm-read-after", f"{mp}:{next_offset}"),))
            )

        with channel:
            waiting = threading.Thread(target=read)
            waiting.start()
            time.sleep(0.5)
            assert not answers  # nothing at that offset yet
            writer.update_remote_log_segment_metadata(finished(seg))
            waiting.join(WAIT_S)
        assert answers and answers[0].HasField("remote_log_segment_metadata")


def _stopped(rlmm, tp) -> bool:
    """The partition is no longer followed (the consumer carries a stop out between two batches, as Kafka's):
    its reads answer NOT_FOUND, as Kafka's for an unassigned one."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            rlmm.highest_offset_for_epoch(tp, 0)
        except NotFoundError:
            return not rlmm.is_ready(tp)
        except UnavailableError:
            pass
        time.sleep(0.05)
    return False
