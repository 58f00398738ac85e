"""BatchRemoteLogSegmentMetadata with ``kafka_values`` and ColumnarRemoteLogSegmentMetadata, over a live
server: every found segment comes as Kafka's bytes of the segment the message answer holds, everything
else (not found, a partition's error, a malformed request) is answered alike, and the typed client
returns the same records either way, the view's own answers."""

from __future__ import annotations

import os

import grpc
import pytest

from rlmm.client import RlmmClient, convert
from rlmm.errors import CallError, KafkaStateError
from rlmm.records.model import SegmentMetadata, SegmentState
from rlmm.records.serde import decode_value, encode_value
from rlmm.state.view import View
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import TS, client, fill_view, new_tp, running_server, segment, stub

TP, LOADING, UNKNOWN = new_tp("batch-values"), new_tp("batch-values", 1), new_tp("batch-values", 2)
SEGMENTS = [
    segment(TP, 0, 99),
    segment(TP, 100, 199, txn_empty=False, custom=b"\x00rsm"),
    segment(TP, 200, 299, epoch=1),
    SegmentMetadata(
        TP,
        os.urandom(16),
        300,
        399,
        2,
        TS + 399,
        TS,
        ((1, 300), (2, 350)),
        4096,
        b"",
        SegmentState.COPY_SEGMENT_STARTED,
    ),
]
LOOKUPS = [
    (tp, epoch, offset)
    for tp in (TP, LOADING, UNKNOWN)
    for epoch in (0, 1, 2, 3)
    for offset in (0, 50, 99, 100, 150, 250, 320, 349, 350, 399, 400)
]


@pytest.fixture(scope="module")
def served_view(tmp_path_factory):
    with View(tmp_path_factory.mktemp("grpc-batch") / "view") as view:
        fill_view(view, TP, SEGMENTS)
        fill_view(view, LOADING, [segment(LOADING, 0, 99)], ready=False)
        with running_server(view) as server:
            yield server, view


def _request(kafka_values: bool, lookups=LOOKUPS) -> api.BatchRemoteLogSegmentMetadataRequest:
    return api.BatchRemoteLogSegmentMetadataRequest(
        lookups=[
            api.RemoteLogSegmentMetadataRequest(
                topic_id_partition=convert.topic_id_partition_pb(tp), leader_epoch=epoch, offset=offset
            )
            for tp, epoch, offset in lookups
        ],
        kafka_values=kafka_values,
    )


def test_kafka_values_are_the_segments_of_the_messages(served_view) -> None:
    server, view = served_view
    channel, raw = stub(server)
    with channel:
        messages = raw.BatchRemoteLogSegmentMetadata(_request(False)).results
        values = raw.BatchRemoteLogSegmentMetadata(_request(True)).results
    kinds = [m.WhichOneof("result") for m in messages]
    assert [v.WhichOneof("result") for v in values] == [
        "kafka_value" if kind == "remote_log_segment_metadata" else kind for kind in kinds
    ]
    assert set(kinds) == {"remote_log_segment_metadata", "error", None}
    assert {m.error.kafka_exception for m in messages if m.HasField("error")} == {
        "RemoteResourceNotFoundException",
        "ReplicaNotAvailableException",
    }
    for lookup, message, value in zip(LOOKUPS, messages, values):
        if message.HasField("remote_log_segment_metadata"):
            found = decode_value(value.kafka_value)
            assert found == convert.segment_metadata_from_pb(message.remote_log_segment_metadata)
            assert found == view.queries.remote_log_segment_metadata(*lookup)
            assert encode_value(found) == value.kafka_value  # Kafka's serialization of the segment
        elif message.HasField("error"):
            assert value.error == message.error
    found = {decode_value(v.kafka_value).segment_id for v in values if v.HasField("kafka_value")}
    assert found == {s.segment_id for s in SEGMENTS}


def test_columns_answer_what_the_batch_answers(served_view) -> None:
    server, _ = served_view
    partitions = [TP, LOADING, UNKNOWN, TP]  # a partition may be listed twice
    lookups = [
        (index, epoch, offset)
        for index in (3, 1, 0, 2)
        for epoch, offset in ((0, 50), (0, 100), (1, 250), (2, 320), (2, 400), (3, 0))
    ]
    columns = api.ColumnarRemoteLogSegmentMetadataRequest(
        partitions=[convert.topic_id_partition_pb(tp) for tp in partitions],
        partition_indexes=[i for i, _, _ in lookups],
        leader_epochs=[e for _, e, _ in lookups],
        offsets=[o for _, _, o in lookups],
    )
    channel, raw = stub(server)
    with channel:
        answer = raw.ColumnarRemoteLogSegmentMetadata(columns)
        batch = raw.BatchRemoteLogSegmentMetadata(_request(True, [(partitions[i], e, o) for i, e, o in lookups]))
        assert (
            raw.ColumnarRemoteLogSegmentMetadata(api.ColumnarRemoteLogSegmentMetadataRequest())
            == api.ColumnarRemoteLogSegmentMetadataResponse()
        )
    assert list(answer.kafka_values) == [r.kafka_value for r in batch.results]
    assert sum(bool(v) for v in answer.kafka_values) == 6  # three finished segments, through each of TP's listings
    errors = {e.partition_index: e.error for e in answer.partition_errors}
    assert sorted(errors) == [1, 2]
    assert {e.kafka_exception for e in errors.values()} == {
        "RemoteResourceNotFoundException",
        "ReplicaNotAvailableException",
    }
    for (index, _, _), result in zip(lookups, batch.results):
        assert (result.error == errors[index]) if index in errors else not result.HasField("error")


def _ask_view(view: View, lookup):
    try:
        return view.queries.remote_log_segment_metadata(*lookup)
    except KafkaStateError as exc:
        return exc


def test_the_client_answers_the_same_in_both_modes(served_view) -> None:
    server, view = served_view
    with client(server) as rlmm:
        plain = rlmm.remote_log_segment_metadata_batch(LOOKUPS, kafka_values=False)
        values = rlmm.remote_log_segment_metadata_batch(LOOKUPS)
        assert rlmm.remote_log_segment_metadata_batch([]) == []
    assert [type(a) for a in values] == [type(a) for a in plain]
    assert (
        [_describe(a) for a in values]
        == [_describe(a) for a in plain]
        == [_describe(_ask_view(view, lookup)) for lookup in LOOKUPS]
    )


def _describe(answer) -> object:
    """A segment or None as it is, an error as what it says and the Kafka exception it stands for."""
    if isinstance(answer, CallError):
        return answer.message, answer.kafka_exception
    if isinstance(answer, KafkaStateError):
        return str(answer), answer.kafka_exception
    return answer


@pytest.mark.parametrize(
    "lookups, problem",
    [
        ([(TP, 0, 5), (TP, -1, 5)], "lookups[1].leader_epoch: must not be negative"),
        ([(TP, 0, -5)], "lookups[0].offset: must not be negative"),
    ],
)
def test_malformed_requests_are_refused_alike(served_view, lookups, problem) -> None:
    server, _ = served_view
    channel, raw = stub(server)
    with channel:
        for kafka_values in (False, True):
            with pytest.raises(grpc.RpcError) as failed:
                raw.BatchRemoteLogSegmentMetadata(_request(kafka_values, lookups))
            assert failed.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert problem in failed.value.details()


def test_a_full_batch_of_large_segments_reaches_the_client(tmp_path) -> None:
    """10,000 lookups (the server's limit) of a segment as large as Kafka lets it be (a topic name of 249
    characters, 128 bytes of custom metadata) answer ~5 MB: above gRPC's default receive limit of 4 MB."""
    tp = new_tp("t" * 249)
    with View(tmp_path / "view") as view:
        fill_view(view, tp, [segment(tp, 0, 9_999, custom=b"c" * 128)])
        with running_server(view) as server, client(server) as asking:
            for kafka_values in (True, False):
                answers = asking.remote_log_segment_metadata_batch(
                    [(tp, 0, offset) for offset in range(10_000)], kafka_values=kafka_values
                )
                assert len(answers) == 10_000 and {a.custom_metadata for a in answers} == {b"c" * 128}


def test_the_clients_writes_refuse_tagged_fields_the_api_does_not_carry() -> None:
    """A decoded record may hold tagged fields unknown to Kafka; written through the API it would lose them
    silently. The client refuses it before calling (it never connects here)."""
    tp = new_tp("tags")
    tagged = segment(tp, 0, 99)
    tagged.unknown_tags = (("", 7, b"future-field"),)
    with RlmmClient("127.0.0.1:9") as asking, pytest.raises(ValueError, match="1 tagged field"):
        asking.add_remote_log_segment_metadata(tagged)
