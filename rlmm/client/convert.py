"""Between the API's messages (``rlmm.v1``) and rlmm's records, with the argument checks of every request.

A malformed field raises :class:`ArgumentError`, which names the field by its path in the request
(``lookups[3].topic_id_partition.topic_id``) and says what is wrong; the server answers it with
INVALID_ARGUMENT. Enum values are Kafka's state ids plus one (zero is "unspecified").
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from rlmm.errors import ArgumentError
from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.uuid import uuid_from_str, uuid_to_str
from rlmm.records.wire import MAX_STRING_LENGTH
from rlmm.v1 import metadata_pb2 as pb

# ---- to rlmm -------------------------------------------------------------------------------------


def uuid(text: str, field: str) -> bytes:
    try:
        return uuid_from_str(text)
    except ValueError:
        raise ArgumentError(
            field,
            f"not a Kafka uuid (22 URL-safe base64 characters without padding, "
            f"as Uuid.toString() writes it): {text[:64]!r}",
        ) from None


def not_negative(value: int, field: str) -> int:
    if value < 0:
        raise ArgumentError(field, f"must not be negative, got {value}")
    return value


def required(message, name: str, field: str):
    """The sub-message ``name`` of ``message``; an unset one is an error."""
    if not message.HasField(name):
        raise ArgumentError(f"{field}.{name}" if field else name, "is required")
    return getattr(message, name)


def topic_id_partition(msg: pb.TopicIdPartition, field: str) -> TopicIdPartition:
    return _checked_partition(msg.topic_id, msg.topic, msg.partition, field)


def _checked_partition(topic_id: str, topic: str, partition: int, field: str) -> TopicIdPartition:
    # Kafka takes any topic name, the empty one too
    if len(topic) > MAX_STRING_LENGTH // 4 and len(topic.encode()) > MAX_STRING_LENGTH:
        raise ArgumentError(
            f"{field}.topic", f"is {len(topic.encode())} bytes in UTF-8, more than Kafka's {MAX_STRING_LENGTH}"
        )
    return TopicIdPartition(uuid(topic_id, f"{field}.topic_id"), topic, not_negative(partition, f"{field}.partition"))


# a request's own partition is kept checked for the partitions asked again (Kafka's topic names are at most
# 249 characters: longer ones, which Kafka's records may still carry, are checked each time)
KEPT_TOPIC_LENGTH = 249


def partition_of(request, field: str = "") -> TopicIdPartition:
    """The ``topic_id_partition`` of a request."""
    if field:
        return topic_id_partition(required(request, "topic_id_partition", field), f"{field}.topic_id_partition")
    msg = required(request, "topic_id_partition", field)
    topic = msg.topic
    if len(topic) > KEPT_TOPIC_LENGTH:
        return _checked_partition(msg.topic_id, topic, msg.partition, "topic_id_partition")
    return _request_partition(msg.topic_id, topic, msg.partition)


@functools.lru_cache(maxsize=16_384)
def _request_partition(topic_id: str, topic: str, partition: int) -> TopicIdPartition:
    """A request's ``topic_id_partition``, checked: a function of its fields alone (a failing check is not kept)."""
    return _checked_partition(topic_id, topic, partition, "topic_id_partition")


def partitions(messages: Iterable[pb.TopicIdPartition], field: str) -> list[TopicIdPartition]:
    return [topic_id_partition(msg, f"{field}[{i}]") for i, msg in enumerate(messages)]


def _enum(value: int, kind, field: str):
    names = ", ".join(f"{s.name} ({s.value + 1})" for s in kind)
    if value == 0:
        raise ArgumentError(field, f"is required: one of {names}")
    try:
        return kind(value - 1)
    except ValueError:
        raise ArgumentError(field, f"unknown value {value}: expected one of {names}") from None


def _custom(msg, field: str) -> bytes | None:
    return msg.custom_metadata if msg.HasField("custom_metadata") else None


def _segment_id(msg, field: str) -> tuple[TopicIdPartition, bytes]:
    sid = required(msg, "remote_log_segment_id", field)
    where = f"{field}.remote_log_segment_id"
    return partition_of(sid, where), uuid(sid.id, f"{where}.id")


def segment_metadata(msg: pb.RemoteLogSegmentMetadata, field: str) -> SegmentMetadata:
    """Kafka's constructor checks too: offsets not negative and ordered, at least one leader epoch."""
    tp, segment_id = _segment_id(msg, field)
    start = not_negative(msg.start_offset, f"{field}.start_offset")
    if msg.end_offset < start:
        raise ArgumentError(f"{field}.end_offset", f"{msg.end_offset} is below start_offset {start}")
    epochs = sorted((e.leader_epoch, e.start_offset) for e in msg.segment_leader_epochs)
    if not epochs:
        raise ArgumentError(f"{field}.segment_leader_epochs", "must hold at least one leader epoch")
    for (a, _), (b, _) in zip(epochs, epochs[1:]):
        if a == b:
            raise ArgumentError(f"{field}.segment_leader_epochs", f"leader epoch {a} is given twice")
    return SegmentMetadata(
        tp,
        segment_id,
        start,
        msg.end_offset,
        msg.broker_id,
        msg.max_timestamp_ms,
        msg.event_timestamp_ms,
        tuple(epochs),
        msg.segment_size_in_bytes,
        _custom(msg, field),
        _enum(msg.state, SegmentState, f"{field}.state"),
        msg.txn_index_empty,
    )


def segment_update(msg: pb.RemoteLogSegmentMetadataUpdate, field: str) -> SegmentUpdate:
    tp, segment_id = _segment_id(msg, field)
    return SegmentUpdate(
        tp,
        segment_id,
        msg.broker_id,
        msg.event_timestamp_ms,
        _custom(msg, field),
        _enum(msg.state, SegmentState, f"{field}.state"),
    )


def partition_delete(msg: pb.RemotePartitionDeleteMetadata, field: str) -> PartitionDelete:
    return PartitionDelete(
        partition_of(msg, field),
        msg.broker_id,
        msg.event_timestamp_ms,
        _enum(msg.state, PartitionDeleteState, f"{field}.state"),
    )


# ---- from rlmm -----------------------------------------------------------------------------------


def topic_id_partition_pb(tp: TopicIdPartition) -> pb.TopicIdPartition:
    return pb.TopicIdPartition(topic_id=uuid_to_str(tp.topic_id), topic=tp.topic, partition=tp.partition)


@functools.lru_cache(maxsize=16_384)
def _shared_topic_id_partition_pb(tp: TopicIdPartition) -> pb.TopicIdPartition:
    """Only ever copied from, never changed."""
    return topic_id_partition_pb(tp)


def fill_segment_metadata(msg: pb.RemoteLogSegmentMetadata, s: SegmentMetadata) -> None:
    """Write ``s`` into the empty message ``msg`` in place (a sub-message of a response): about half the
    cost of building a message and copying it in."""
    sid = msg.remote_log_segment_id
    sid.topic_id_partition.CopyFrom(_shared_topic_id_partition_pb(s.tp))
    sid.id = uuid_to_str(s.segment_id)
    msg.start_offset = s.start_offset
    msg.end_offset = s.end_offset
    msg.broker_id = s.broker_id
    msg.max_timestamp_ms = s.max_timestamp_ms
    msg.event_timestamp_ms = s.event_timestamp_ms
    add = msg.segment_leader_epochs.add
    for epoch, offset in s.segment_leader_epochs:
        add(leader_epoch=epoch, start_offset=offset)
    msg.segment_size_in_bytes = s.segment_size_in_bytes
    if s.custom_metadata is not None:
        msg.custom_metadata = s.custom_metadata
    msg.state = s.state + 1
    msg.txn_index_empty = s.txn_index_empty


def with_segment(response, segment: SegmentMetadata | None):
    """``response`` with its ``remote_log_segment_metadata`` set to ``segment`` (left unset for None)."""
    if segment is not None:
        fill_segment_metadata(response.remote_log_segment_metadata, segment)
    return response


def segment_metadata_pb(s: SegmentMetadata) -> pb.RemoteLogSegmentMetadata:
    msg = pb.RemoteLogSegmentMetadata()
    fill_segment_metadata(msg, s)
    return msg


def segment_update_pb(u: SegmentUpdate) -> pb.RemoteLogSegmentMetadataUpdate:
    return pb.RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=pb.RemoteLogSegmentId(
            topic_id_partition=topic_id_partition_pb(u.tp), id=uuid_to_str(u.segment_id)
        ),
        event_timestamp_ms=u.event_timestamp_ms,
        custom_metadata=u.custom_metadata,
        state=u.state + 1,
        broker_id=u.broker_id,
    )


def partition_delete_pb(d: PartitionDelete) -> pb.RemotePartitionDeleteMetadata:
    return pb.RemotePartitionDeleteMetadata(
        topic_id_partition=topic_id_partition_pb(d.tp),
        state=d.state + 1,
        event_timestamp_ms=d.event_timestamp_ms,
        broker_id=d.broker_id,
    )


def segment_metadata_from_pb(msg: pb.RemoteLogSegmentMetadata) -> SegmentMetadata:
    """For clients: an answer's segment (answers are well-formed; no checks beyond the conversions)."""
    return segment_metadata(msg, "remote_log_segment_metadata")
