"""Malformed requests of every kind get INVALID_ARGUMENT with a message naming the field, and nothing a
request holds makes the server fail otherwise or stop serving."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmm.client import RlmmClient, convert
from rlmm.records.model import TopicIdPartition
from rlmm.server.servicer import SERVICE, SERVICE_NAME
from rlmm.state.view import View
from rlmm.v1 import metadata_pb2 as pb
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import fill_view, new_tp, running_server, segment, served

TP = new_tp("malformed")
GOOD = convert.topic_id_partition_pb(TP)
UUID = GOOD.topic_id


@pytest.fixture(scope="module")
def server(kafka, tmp_path_factory):
    with served(tmp_path_factory.mktemp("grpc-malformed"), kafka.bootstrap_servers, max_batch_lookups=50) as running:
        yield running[0]


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel


def call(channel, method: str, request) -> grpc.RpcError | object:
    """The method's answer (the list of messages for the stream), or the error."""
    descriptor = SERVICE.methods_by_name[method]
    path = f"/{SERVICE_NAME}/{method}"
    codec = {
        "request_serializer": request.SerializeToString if not isinstance(request, bytes) else None,
        "response_deserializer": GetMessageClass(descriptor.output_type).FromString,
    }
    try:
        if descriptor.server_streaming:
            return list(channel.unary_stream(path, **codec)(request, timeout=10))
        return channel.unary_unary(path, **codec)(request, timeout=10)
    except grpc.RpcError as exc:
        return exc


def tp(**fields) -> pb.TopicIdPartition:
    values = {"topic_id": UUID, "topic": "malformed", "partition": 0, **fields}
    return pb.TopicIdPartition(**values)


def seg(**fields) -> pb.RemoteLogSegmentMetadata:
    msg = convert.segment_metadata_pb(segment(TP, 0, 99))
    for name, value in fields.items():
        if name == "segment_leader_epochs":
            del msg.segment_leader_epochs[:]
            msg.segment_leader_epochs.extend(value)
        elif name == "remote_log_segment_id":
            msg.remote_log_segment_id.CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


def epochs(*pairs) -> list[pb.SegmentLeaderEpoch]:
    return [pb.SegmentLeaderEpoch(leader_epoch=e, start_offset=o) for e, o in pairs]


BAD_PARTITIONS = [
    (tp(topic_id="not-a-uuid"), "topic_id: not a Kafka uuid"),
    (tp(topic_id=""), "topic_id: not a Kafka uuid"),
    (tp(topic_id=UUID[:21] + "B"), "topic_id: not a Kafka uuid"),  # 22 characters, but 132 bits
    (tp(topic_id=UUID + "=="), "topic_id: not a Kafka uuid"),
    (tp(topic="t" * 40_000), "topic: is 40000 bytes in UTF-8, more than Kafka's 32767"),
    (tp(partition=-1), "partition: must not be negative, got -1"),
]

CASES = [
    ("RemoteLogSegmentMetadata", api.RemoteLogSegmentMetadataRequest(), "topic_id_partition: is required"),
    (
        "RemoteLogSegmentMetadata",
        api.RemoteLogSegmentMetadataRequest(topic_id_partition=GOOD, offset=-5),
        "offset: must not be negative, got -5",
    ),
    (
        "RemoteLogSegmentMetadata",
        api.RemoteLogSegmentMetadataRequest(topic_id_partition=GOOD, leader_epoch=-1),
        "leader_epoch: must not be negative, got -1",
    ),
    (
        "HighestOffsetForEpoch",
        api.HighestOffsetForEpochRequest(topic_id_partition=GOOD, leader_epoch=-2),
        "leader_epoch: must not be negative",
    ),
    (
        "ListRemoteLogSegments",
        api.ListRemoteLogSegmentsRequest(topic_id_partition=GOOD, leader_epoch=-1),
        "leader_epoch: must not be negative",
    ),
    (
        "RemoteLogSize",
        api.RemoteLogSizeRequest(topic_id_partition=GOOD, leader_epoch=-1),
        "leader_epoch: must not be negative",
    ),
    (
        "NextSegmentWithTxnIndex",
        api.NextSegmentWithTxnIndexRequest(topic_id_partition=GOOD, offset=-1),
        "offset: must not be negative",
    ),
    ("MaxTimestamp", api.MaxTimestampRequest(), "topic_id_partition: is required"),
    (
        "FirstSegmentWithMaxTimestampAtLeast",
        api.FirstSegmentWithMaxTimestampAtLeastRequest(topic_id_partition=GOOD, timestamp_ms=5, starting_offset=-1),
        "starting_offset: must not be negative",
    ),
    ("IsReady", api.IsReadyRequest(), "topic_id_partition: is required"),
    (
        "BatchRemoteLogSegmentMetadata",
        api.BatchRemoteLogSegmentMetadataRequest(
            lookups=[api.RemoteLogSegmentMetadataRequest(topic_id_partition=GOOD)] * 51
        ),
        "lookups: 51 lookups, more than the 50 this server answers in one call",
    ),
    (
        "BatchRemoteLogSegmentMetadata",
        api.BatchRemoteLogSegmentMetadataRequest(
            lookups=[api.RemoteLogSegmentMetadataRequest(topic_id_partition=GOOD)] * 3
            + [api.RemoteLogSegmentMetadataRequest(topic_id_partition=tp(topic_id="x"))]
        ),
        "lookups[3].topic_id_partition.topic_id: not a Kafka uuid",
    ),
    (
        "BatchRemoteLogSegmentMetadata",
        api.BatchRemoteLogSegmentMetadataRequest(
            lookups=[api.RemoteLogSegmentMetadataRequest(topic_id_partition=GOOD, offset=-1)]
        ),
        "lookups[0].offset: must not be negative",
    ),
    (
        "ColumnarRemoteLogSegmentMetadata",
        api.ColumnarRemoteLogSegmentMetadataRequest(
            partitions=[GOOD], partition_indexes=[0] * 51, leader_epochs=[0] * 51, offsets=[0] * 51
        ),
        "partition_indexes: 51 lookups, more than the 50 this server answers in one call",
    ),
    (
        "ColumnarRemoteLogSegmentMetadata",
        api.ColumnarRemoteLogSegmentMetadataRequest(
            partitions=[GOOD], partition_indexes=[0, 0], leader_epochs=[0, 0], offsets=[0]
        ),
        "partition_indexes, leader_epochs and offsets must have one element per lookup, but have 2, 2 and 1",
    ),
    (
        "ColumnarRemoteLogSegmentMetadata",
        api.ColumnarRemoteLogSegmentMetadataRequest(
            partitions=[GOOD], partition_indexes=[0, 1], leader_epochs=[0, 0], offsets=[0, 0]
        ),
        "partition_indexes[1]: 1 is no index of the 1 partitions",
    ),
    (
        "ColumnarRemoteLogSegmentMetadata",
        api.ColumnarRemoteLogSegmentMetadataRequest(
            partitions=[GOOD, tp(topic_id="x")], partition_indexes=[0], leader_epochs=[0], offsets=[0]
        ),
        "partitions[1].topic_id: not a Kafka uuid",
    ),
    (
        "ColumnarRemoteLogSegmentMetadata",
        api.ColumnarRemoteLogSegmentMetadataRequest(
            partitions=[GOOD], partition_indexes=[0, 0, 0], leader_epochs=[0, 3, -1], offsets=[0, 0, 0]
        ),
        "leader_epochs[2]: must not be negative",
    ),
    (
        "ColumnarRemoteLogSegmentMetadata",
        api.ColumnarRemoteLogSegmentMetadataRequest(
            partitions=[GOOD], partition_indexes=[0, 0], leader_epochs=[0, 0], offsets=[5, -5]
        ),
        "offsets[1]: must not be negative",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(),
        "remote_log_segment_metadata: is required",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(remote_log_segment_metadata=seg(state=0)),
        "remote_log_segment_metadata.state: is required: one of COPY_SEGMENT_STARTED (1)",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(remote_log_segment_metadata=seg(state=9)),
        "remote_log_segment_metadata.state: unknown value 9",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata=seg(
                remote_log_segment_id=pb.RemoteLogSegmentId(topic_id_partition=GOOD, id="?")
            )
        ),
        "remote_log_segment_metadata.remote_log_segment_id.id: not a Kafka uuid",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata=seg(remote_log_segment_id=pb.RemoteLogSegmentId(id=UUID))
        ),
        "remote_log_segment_metadata.remote_log_segment_id.topic_id_partition: is required",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(remote_log_segment_metadata=seg(segment_leader_epochs=[])),
        "remote_log_segment_metadata.segment_leader_epochs: must hold at least one leader epoch",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata=seg(segment_leader_epochs=epochs((1, 0), (1, 50)))
        ),
        "leader epoch 1 is given twice",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(remote_log_segment_metadata=seg(start_offset=-1)),
        "start_offset: must not be negative",
    ),
    (
        "AddRemoteLogSegmentMetadata",
        api.AddRemoteLogSegmentMetadataRequest(remote_log_segment_metadata=seg(end_offset=-7)),
        "end_offset: -7 is below start_offset 0",
    ),
    (
        "UpdateRemoteLogSegmentMetadata",
        api.UpdateRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata_update=pb.RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=pb.RemoteLogSegmentId(topic_id_partition=GOOD, id=UUID), state=-3
            )
        ),
        "remote_log_segment_metadata_update.state: unknown value -3",
    ),
    (
        "PutRemotePartitionDeleteMetadata",
        api.PutRemotePartitionDeleteMetadataRequest(
            remote_partition_delete_metadata=pb.RemotePartitionDeleteMetadata(topic_id_partition=GOOD, state=4)
        ),
        "remote_partition_delete_metadata.state: unknown value 4: expected one of DELETE_PARTITION_MARKED (1)",
    ),
    (
        "OnPartitionLeadershipChanges",
        api.OnPartitionLeadershipChangesRequest(leader_partitions=[GOOD], follower_partitions=[GOOD, tp(partition=-4)]),
        "follower_partitions[1].partition: must not be negative",
    ),
    ("OnStopPartitions", api.OnStopPartitionsRequest(partitions=[tp(topic_id="")]), "partitions[0].topic_id: not a"),
]
for method, request_class in (
    ("RemoteLogSegmentMetadata", api.RemoteLogSegmentMetadataRequest),
    ("ListRemoteLogSegments", api.ListRemoteLogSegmentsRequest),
    ("IsReady", api.IsReadyRequest),
):
    CASES += [
        (method, request_class(topic_id_partition=bad), f"topic_id_partition.{problem}")
        for bad, problem in BAD_PARTITIONS
    ]


@pytest.mark.parametrize(("method", "request_", "problem"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_arguments_are_invalid_argument_with_the_field(channel, method, request_, problem) -> None:
    error = call(channel, method, request_)
    assert isinstance(error, grpc.RpcError), error
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert problem in error.details()


@pytest.mark.parametrize("method", [m.name for m in SERVICE.methods if m.name != "GetStatus"])
def test_undecodable_bytes_are_invalid_argument(channel, method) -> None:
    error = call(channel, method, b"\x0a\xff\xff\xff\xff\x0f")  # field 1, length past the end
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "request: not a valid rlmm.v1." in error.details()


def test_invalid_utf8_and_oversized_messages_are_refused(channel) -> None:
    utf8 = b"\x0a\x05\x12\x03\xff\xfe\xfd"  # topic_id_partition { topic: <3 bytes that are not UTF-8> }
    assert call(channel, "IsReady", utf8).code() is grpc.StatusCode.INVALID_ARGUMENT
    huge = api.IsReadyRequest(topic_id_partition=tp(topic="x" * (5 << 20)))
    assert call(channel, "IsReady", huge).code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # gRPC's 4 MB limit
    assert call(channel, "IsReady", api.IsReadyRequest(topic_id_partition=GOOD)).ready is False


@pytest.fixture(scope="module")
def view_server(tmp_path_factory):
    """A server without Kafka: writes pass the checks, then answer FAILED_PRECONDITION."""
    with View(tmp_path_factory.mktemp("grpc-fuzz") / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        with running_server(view) as server:
            yield server


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([m.name for m in SERVICE.methods]), st.binary(max_size=120))
def test_no_bytes_make_the_server_fail_or_stop(view_server, method, data) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{view_server.port}") as channel:
        answer = call(channel, method, data)
        if isinstance(answer, grpc.RpcError):
            assert answer.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.FAILED_PRECONDITION,
            ), (answer.code(), answer.details())
        assert call(channel, "IsReady", api.IsReadyRequest(topic_id_partition=GOOD)).ready


_INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_TPS = st.builds(
    pb.TopicIdPartition,
    topic_id=st.one_of(st.just(UUID), st.text(max_size=24)),
    topic=st.one_of(st.just("malformed"), st.text(max_size=8)),
    partition=st.one_of(st.just(0), _INT32),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tp=_TPS,
    epoch=_INT32,
    offset=_INT64,
    state=_INT32,
    start=_INT64,
    end=_INT64,
    size=_INT32,
    custom=st.one_of(st.none(), st.binary(max_size=8)),
)
def test_no_field_values_make_the_server_fail(view_server, tp, epoch, offset, state, start, end, size, custom) -> None:
    segment_id = pb.RemoteLogSegmentId(topic_id_partition=tp, id=UUID)
    requests = [
        (
            "RemoteLogSegmentMetadata",
            api.RemoteLogSegmentMetadataRequest(topic_id_partition=tp, leader_epoch=epoch, offset=offset),
        ),
        (
            "NextSegmentWithTxnIndex",
            api.NextSegmentWithTxnIndexRequest(topic_id_partition=tp, leader_epoch=epoch, offset=offset),
        ),
        ("RemoteLogSize", api.RemoteLogSizeRequest(topic_id_partition=tp, leader_epoch=epoch)),
        (
            "FirstSegmentWithMaxTimestampAtLeast",
            api.FirstSegmentWithMaxTimestampAtLeastRequest(
                topic_id_partition=tp, leader_epoch=epoch, timestamp_ms=offset, starting_offset=start
            ),
        ),
        (
            "ColumnarRemoteLogSegmentMetadata",
            api.ColumnarRemoteLogSegmentMetadataRequest(
                partitions=[tp], partition_indexes=[0, 0], leader_epochs=[epoch, 0], offsets=[offset, offset]
            ),
        ),
        (
            "AddRemoteLogSegmentMetadata",
            api.AddRemoteLogSegmentMetadataRequest(
                remote_log_segment_metadata=pb.RemoteLogSegmentMetadata(
                    remote_log_segment_id=segment_id,
                    start_offset=start,
                    end_offset=end,
                    state=state,
                    segment_size_in_bytes=size,
                    custom_metadata=custom,
                    segment_leader_epochs=epochs((epoch, offset)),
                )
            ),
        ),
        (
            "UpdateRemoteLogSegmentMetadata",
            api.UpdateRemoteLogSegmentMetadataRequest(
                remote_log_segment_metadata_update=pb.RemoteLogSegmentMetadataUpdate(
                    remote_log_segment_id=segment_id, state=state, custom_metadata=custom, event_timestamp_ms=offset
                )
            ),
        ),
        (
            "PutRemotePartitionDeleteMetadata",
            api.PutRemotePartitionDeleteMetadataRequest(
                remote_partition_delete_metadata=pb.RemotePartitionDeleteMetadata(topic_id_partition=tp, state=state)
            ),
        ),
    ]
    with grpc.insecure_channel(f"127.0.0.1:{view_server.port}") as channel:
        for method, request in requests:
            answer = call(channel, method, request)
            if isinstance(answer, grpc.RpcError):
                assert answer.code() in (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.NOT_FOUND,
                    grpc.StatusCode.FAILED_PRECONDITION,
                ), (method, answer.details())


class BrokenMaxTimestamp:
    """The view's queries, with a bug in ``max_timestamp``."""

    def __init__(self, queries) -> None:
        self._queries = queries

    def __getattr__(self, name: str):
        return getattr(self._queries, name)

    def max_timestamp(self, *args):
        raise RuntimeError("a bug")


def test_an_unexpected_error_is_internal_and_the_server_goes_on(view_server, monkeypatch) -> None:
    queries = BrokenMaxTimestamp(view_server.backend.queries)
    monkeypatch.setattr(type(view_server.backend), "queries", property(lambda backend: queries))
    with RlmmClient(f"127.0.0.1:{view_server.port}") as rlmm:
        with pytest.raises(Exception) as failed:
            rlmm.max_timestamp(TP)
        assert failed.value.code is grpc.StatusCode.INTERNAL
        assert "internal error (RuntimeError)" in failed.value.message and "a bug" not in failed.value.message
        assert rlmm.remote_log_size(TP) == segment(TP, 0, 99).segment_size_in_bytes
        assert rlmm.health() == "SERVING"


def test_a_server_without_kafka_refuses_writes(view_server) -> None:
    with RlmmClient(f"127.0.0.1:{view_server.port}") as rlmm:
        for write in (
            lambda: rlmm.add_remote_log_segment_metadata(segment(TP, 100, 199)),
            lambda: rlmm.on_stop_partitions([TopicIdPartition(TP.topic_id, TP.topic, 1)]),
        ):
            with pytest.raises(Exception, match="serves a view without Kafka") as refused:
                write()
            assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION and refused.value.reason == "NO_KAFKA"
