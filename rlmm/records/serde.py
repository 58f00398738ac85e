"""Values of the ``__remote_log_metadata`` topic, read and written as Kafka's
``RemoteLogMetadataSerde`` does.

``decode_value`` accepts exactly what Kafka 4.3 accepts and returns the record Kafka's domain classes
would hold; everything Kafka refuses raises :class:`DecodeError` naming what Kafka throws.

This module is the reference for every rule. With the compiled core, the usual shapes of a segment and an update
are read, and a segment's written, in C first (``rlmm/records/wire_native.pyx``), which hands anything else back.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from rlmm.compiled import native_module
from rlmm.errors import DecodeError, WireError
from rlmm.records import wire
from rlmm.records.model import (
    LeaderEpochs,
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.wire import (
    DELETE_RUN_B,
    I8,
    I8_B,
    I32,
    I32_B,
    I32_I64,
    I32_I64_B,
    I32_I64_I8,
    SEGMENT_HEAD_B,
    SEGMENT_RUN,
    SEGMENT_RUN_B,
    SNAPSHOT_RUN_B,
    UUID_B,
    UUID_I32_B,
    compact_nullable_bytes,
    compact_string,
    read_array,
    read_array_count,
    read_nullable_bytes,
    read_string,
    read_tags,
    tags_section,
    uuid_bytes,
    uvarint,
)

API_KEYS: dict[type, int] = {SegmentMetadata: 0, SegmentUpdate: 1, PartitionDelete: 2, SegmentSnapshot: 3}

_PARSE: Final = "MetadataParseException"
_ILLEGAL_ARGUMENT: Final = "IllegalArgumentException"
_NULL_POINTER: Final = "NullPointerException"

_SEGMENT_STATES: Final = tuple(SegmentState)
_DELETE_STATES: Final = tuple(PartitionDeleteState)


_NATIVE: Final = native_module("rlmm.records.wire_native")
# the usual shapes in C, each returning None for what the reference must decide
_decode_common: Final[Callable[[bytes], RemoteLogMetadata | None] | None] = (
    None if _NATIVE is None else _NATIVE.decode_common
)
# a segment's fields, read here from the compiled record (the native side would look each one up by name)
_encode_segment_fields: Final[Callable[..., bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.encode_segment_fields
)


def _parse_error(error: WireError) -> DecodeError:
    return DecodeError(f"malformed record: {error}", _PARSE, error.kafka_exception, error.position)


def _check_end(data: bytes, p: int) -> None:
    if p != len(data):
        raise DecodeError(f"{len(data) - p} byte(s) of trailing data after the record (at byte {p})", _PARSE, None, p)


def _truncated(p: int) -> WireError:
    return wire.underflow("the record", p)


def _read_epochs(
    data: bytes, p: int, n: int, unknown: list[tuple[str, int, bytes]]
) -> tuple[list[tuple[int, int]], int]:
    """SegmentLeaderEpochs as on the wire (unsorted, duplicates kept); ``n`` is the byte at ``p``."""
    if 0 < n < 0x80 and n <= len(data) - p:
        count = n - 1
        p += 1
    else:
        count, p = read_array_count(data, p, "segment leader epochs")
    epochs = []
    epoch_tags: dict[int, list[tuple[str, int, bytes]]] = {}
    try:
        for _ in range(count):
            epoch, offset, n = I32_I64_B.unpack_from(data, p)
            p += 12
            if n:
                tags: list[tuple[str, int, bytes]] = []
                _, p = read_tags(data, p, f"epoch:{epoch}", tags)
                epoch_tags[epoch] = tags  # Kafka keeps the last entry of an epoch, tags go with it
            else:
                p += 1
                if epoch_tags:
                    epoch_tags.pop(epoch, None)
            epochs.append((epoch, offset))
    except struct.error:
        raise _truncated(p) from None
    for epoch in sorted(epoch_tags):
        unknown += epoch_tags[epoch]
    return epochs, p


def _epoch_map(epochs: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Kafka's TreeMap of the entries: sorted by epoch, the last entry of an epoch wins."""
    if len(epochs) == 1:
        return (epochs[0],)
    return tuple(sorted(dict(epochs).items()))


def _read_custom_metadata(data: bytes, p: int, n: int) -> tuple[bytes | None, int]:
    """Nullable bytes at ``p``, whose first byte ``n`` the caller has already unpacked."""
    if n == 0:
        return None, p + 1
    if n < 0x80:
        return read_array(data, p + 1, n - 1, "custom metadata")
    return read_nullable_bytes(data, p, "custom metadata")


def _segment_state(state_id: int) -> SegmentState:
    if 0 <= state_id <= 3:
        return _SEGMENT_STATES[state_id]
    raise DecodeError(f"unknown remote log segment state id {state_id}", _NULL_POINTER)


def _read_segment_id(data: bytes, p: int, unknown: list[tuple[str, int, bytes]]) -> tuple[str, bytes, int, bytes, int]:
    """RemoteLogSegmentIdEntry: (topic name, topic id, partition, segment id, next position)."""
    topic, p = read_string(data, p, "topic name")
    topic_id, partition, n = UUID_I32_B.unpack_from(data, p)
    p += 20
    if n:
        _, p = read_tags(data, p, "segment_id.topic_id_partition", unknown)
    else:
        p += 1
    segment_id, n = UUID_B.unpack_from(data, p)
    p += 16
    if n:
        _, p = read_tags(data, p, "segment_id", unknown)
    else:
        p += 1
    return topic, topic_id, partition, segment_id, p


def _read_segment_tail(
    data: bytes, p: int, unknown: list[tuple[str, int, bytes]]
) -> tuple[int, bytes | None, int, int | None, int]:
    """The fields after the leader epochs, common to segments and snapshots: (size, custom metadata,
    state id, TxnIndexEmpty's byte or None when absent, next position)."""
    size, n = I32_B.unpack_from(data, p)
    custom, p = _read_custom_metadata(data, p + 4, n)
    state_id, n = I8_B.unpack_from(data, p)
    p += 1
    if n:
        txn, p = read_tags(data, p, "", unknown, bool_tag0=True)
    else:
        txn = None
        p += 1
    return size, custom, state_id, txn, p


def _read_segment(data: bytes, p: int) -> SegmentMetadata:
    unknown: list[tuple[str, int, bytes]] = []
    try:
        topic, topic_id, partition, segment_id, p = _read_segment_id(data, p, unknown)
        start, end, broker, max_ts, event_ts, n = SEGMENT_RUN_B.unpack_from(data, p)
        epochs, p = _read_epochs(data, p + 36, n, unknown)
        size, custom, state_id, txn, p = _read_segment_tail(data, p, unknown)
    except (IndexError, struct.error):
        raise _truncated(p) from None
    _check_end(data, p)
    if start < 0:
        raise DecodeError(f"negative start offset {start}", _ILLEGAL_ARGUMENT)
    if end < start:
        raise DecodeError(f"end offset {end} is below start offset {start}", _ILLEGAL_ARGUMENT)
    if not epochs:
        raise DecodeError("empty segment leader epochs", _ILLEGAL_ARGUMENT)
    return SegmentMetadata(
        TopicIdPartition(topic_id, topic, partition),
        segment_id,
        start,
        end,
        broker,
        max_ts,
        event_ts,
        _epoch_map(epochs),
        size,
        custom,
        _segment_state(state_id),
        bool(txn),
        tuple(unknown) if unknown else (),
    )


_TXN_TRUE_SECTION: Final = b"\x01\x00\x01\x01"
_EPOCH_RUNS: Final = [struct.Struct(">" + "iqB" * count) for count in range(0x7F)]


def _two_byte_uvarint(data: bytes, p: int) -> tuple[int, int]:
    """The varint at ``p`` if it takes exactly two bytes, else ``(-1, p)``."""
    if p + 1 < len(data) and data[p + 1] < 0x80:
        return (data[p] & 0x7F) | (data[p + 1] << 7), p + 2
    return -1, p


def _read_common_segment(data: bytes) -> SegmentMetadata | None:
    """Fast path of :func:`_read_segment` for the shape Kafka writes: no unknown tags, lengths in
    one- or two-byte varints, under 127 epochs, a valid state and TxnIndexEmpty written as Kafka does.

    Returns ``None`` for anything else, which the general reader then decodes or refuses.
    """
    size = len(data)
    if size < 4:
        return None
    n, p = data[3], 4
    if n >= 0x80:
        n, p = _two_byte_uvarint(data, 3)
    name_start = p
    p += n - 1
    if n < 1 or p + 75 > size:
        return None
    topic_id, partition, t1, segment_id, t2, start, end, broker, max_ts, event_ts, count = SEGMENT_HEAD_B.unpack_from(
        data, p
    )
    topic_end = p
    p += 75
    count -= 1
    if t1 or t2 or not 0 < count < 0x7F or p + 13 * count + 7 > size or start < 0 or end < start:
        return None
    if count == 1:  # the usual case, then two: spelled out as they are much faster so
        epoch, offset, t = I32_I64_B.unpack_from(data, p)
        if t:
            return None
        epochs: tuple[tuple[int, int], ...] = ((epoch, offset),)
    elif count == 2:
        epoch, offset, t, epoch2, offset2, t2 = _EPOCH_RUNS[2].unpack_from(data, p)
        if t or t2:
            return None
        epochs = ((epoch, offset), (epoch2, offset2))
        if epoch >= epoch2:
            epochs = _epoch_map(epochs)
    else:
        flat = _EPOCH_RUNS[count].unpack_from(data, p)
        if any(flat[2::3]):
            return None
        ids = flat[0::3]
        epochs = tuple(zip(ids, flat[1::3]))
        if not all(map(operator.lt, ids, ids[1:])):
            epochs = _epoch_map(epochs)
    p += 13 * count
    segment_size, n = I32_B.unpack_from(data, p)
    p += 5
    if n:
        if n >= 0x80:
            n, p = _two_byte_uvarint(data, p - 1)
        if n < 1 or p + n + 1 > size:
            return None
        custom: bytes | None = data[p : p + n - 1]
        p += n - 1
    else:
        custom = None
    state_id = data[p]
    rest = data[p + 1 :]
    if state_id > 3 or (rest != b"\x00" and rest != _TXN_TRUE_SECTION):
        return None
    return SegmentMetadata(
        TopicIdPartition(topic_id, data[name_start:topic_end].decode("utf-8", "replace"), partition),
        segment_id,
        start,
        end,
        broker,
        max_ts,
        event_ts,
        epochs,
        segment_size,
        custom,
        _SEGMENT_STATES[state_id],
        rest != b"\x00",
        (),
    )


def _read_update(data: bytes, p: int) -> SegmentUpdate:
    unknown: list[tuple[str, int, bytes]] = []
    try:
        topic, topic_id, partition, segment_id, p = _read_segment_id(data, p, unknown)
        broker, event_ts, n = I32_I64_B.unpack_from(data, p)
        custom, p = _read_custom_metadata(data, p + 12, n)
        state_id, n = I8_B.unpack_from(data, p)
        p += 1
        if n:
            _, p = read_tags(data, p, "", unknown)
        else:
            p += 1
    except (IndexError, struct.error):
        raise _truncated(p) from None
    _check_end(data, p)
    return SegmentUpdate(
        TopicIdPartition(topic_id, topic, partition),
        segment_id,
        broker,
        event_ts,
        custom,
        _segment_state(state_id),
        tuple(unknown) if unknown else (),
    )


def _read_delete(data: bytes, p: int) -> PartitionDelete:
    unknown: list[tuple[str, int, bytes]] = []
    try:
        topic, p = read_string(data, p, "topic name")
        topic_id, partition, n = UUID_I32_B.unpack_from(data, p)
        p += 20
        if n:
            _, p = read_tags(data, p, "topic_id_partition", unknown)
        else:
            p += 1
        broker, event_ts, state_id, n = DELETE_RUN_B.unpack_from(data, p)
        p += 13
        if n:
            _, p = read_tags(data, p, "", unknown)
        else:
            p += 1
    except (IndexError, struct.error):
        raise _truncated(p) from None
    _check_end(data, p)
    if not 0 <= state_id <= 2:
        raise DecodeError(f"unknown remote partition delete state id {state_id}", _NULL_POINTER)
    return PartitionDelete(
        TopicIdPartition(topic_id, topic, partition),
        broker,
        event_ts,
        _DELETE_STATES[state_id],
        tuple(unknown) if unknown else (),
    )


def _read_snapshot(data: bytes, p: int) -> SegmentSnapshot:
    unknown: list[tuple[str, int, bytes]] = []
    try:
        segment_id, start, end, broker, max_ts, event_ts, n = SNAPSHOT_RUN_B.unpack_from(data, p)
        epochs, p = _read_epochs(data, p + 52, n, unknown)
        size, custom, state_id, txn, p = _read_segment_tail(data, p, unknown)
    except (IndexError, struct.error):
        raise _truncated(p) from None
    _check_end(data, p)
    # RemoteLogSegmentMetadataSnapshot checks the state first and, unlike a segment, not the offsets.
    state = _segment_state(state_id)
    if not epochs:
        raise DecodeError("empty segment leader epochs", _ILLEGAL_ARGUMENT)
    return SegmentSnapshot(
        segment_id,
        start,
        end,
        broker,
        max_ts,
        event_ts,
        _epoch_map(epochs),
        size,
        custom,
        state,
        bool(txn),
        tuple(unknown) if unknown else (),
    )


_READERS: dict[int, Callable[[bytes, int], RemoteLogMetadata]] = {
    0: _read_segment,
    1: _read_update,
    2: _read_delete,
    3: _read_snapshot,
}


def _header_short(data: bytes, p: int, what: str) -> tuple[int, int]:
    """A header varint narrowed to a Java short as ``AbstractApiMessageSerde`` does."""
    try:
        value, end = wire.read_uvarint(data, p, what)
    except WireError as error:
        raise DecodeError(f"cannot read {what}: {error}", _PARSE, error.kafka_exception, p) from None
    if value > 0x7FFF:
        raise DecodeError(f"{what} {value} is too large (at byte {p})", _PARSE, None, p)
    return ((value + 0x8000) & 0xFFFF) - 0x8000, end


def _read_header(data: bytes) -> tuple[int, int]:
    frame_version, p = _header_short(data, 0, "frame version")
    if frame_version != 1:
        raise DecodeError(f"unsupported frame version {frame_version} (only 1 is)", _PARSE)
    api_key, p = _header_short(data, p, "api key")
    version, p = _header_short(data, p, "version")
    if api_key not in _READERS:
        raise DecodeError(f"unknown api key {api_key}", _PARSE, "UnsupportedVersionException")
    if version != 0:
        raise DecodeError(f"unsupported version {version} of api key {api_key}", _PARSE, "UnsupportedVersionException")
    return api_key, p


def decode_value(value: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """Decode one value of ``__remote_log_metadata``; raises only :class:`DecodeError`."""
    data = value if isinstance(value, bytes) else bytes(memoryview(value))
    if _decode_common is not None:
        record = _decode_common(data)
        if record is not None:
            return record
    return _reference_decode(data)


def _reference_decode(data: bytes) -> RemoteLogMetadata:
    """``decode_value`` without the native reader: what it is tested against."""
    if len(data) > 2 and data[0] == 1 and data[1] < 4 and data[2] == 0:
        if data[1] == 0:
            record = _read_common_segment(data)
            if record is not None:
                return record
        reader, p = _READERS[data[1]], 3
    else:
        api_key, p = _read_header(data)
        reader = _READERS[api_key]
    try:
        return reader(data, p)
    except WireError as error:
        raise _parse_error(error) from None


# unknown tags to write, by struct path: [(tag, data)]
_Tags = dict[str, list[tuple[int, bytes]]]

_EMPTY_TAGS: Final = b"\x00"
_TXN_TRUE: Final = (0, b"\x01")


def _tags(tags: _Tags, path: str) -> bytes:
    fields = tags.pop(path, None) if tags else None
    return tags_section(fields) if fields else _EMPTY_TAGS


def _top_tags(tags: _Tags, txn_index_empty: bool) -> bytes:
    if not tags:  # the common case, without unknown tags
        return _TXN_TRUE_SECTION if txn_index_empty else _EMPTY_TAGS
    fields = tags.pop("", [])
    if any(tag == 0 for tag, _ in fields):
        raise ValueError("tag 0 of the record is TxnIndexEmpty, it cannot be an unknown tag")
    if txn_index_empty:
        fields = [_TXN_TRUE, *fields]
    return tags_section(fields) if fields else _EMPTY_TAGS


def _write_epochs(parts: list[bytes], epochs: LeaderEpochs, tags: _Tags) -> None:
    parts.append(uvarint(len(epochs) + 1))
    for epoch, offset in epochs:
        parts.append(I32_I64.pack(epoch, offset))
        parts.append(_tags(tags, f"epoch:{epoch}") if tags else _EMPTY_TAGS)


def _segment_id_parts(r: SegmentMetadata | SegmentUpdate, tags: _Tags) -> list[bytes]:
    """RemoteLogSegmentIdEntry with its nested TopicIdPartitionEntry."""
    tp = r.tp
    return [
        compact_string(tp.topic, "topic name"),
        uuid_bytes(tp.topic_id, "topic id"),
        I32.pack(tp.partition),
        _tags(tags, "segment_id.topic_id_partition"),
        uuid_bytes(r.segment_id, "segment id"),
        _tags(tags, "segment_id"),
    ]


def _add_segment_fields(parts: list[bytes], r: SegmentMetadata | SegmentSnapshot, tags: _Tags) -> list[bytes]:
    """The fields from StartOffset to the end, common to segments and snapshots."""
    parts.append(SEGMENT_RUN.pack(r.start_offset, r.end_offset, r.broker_id, r.max_timestamp_ms, r.event_timestamp_ms))
    _write_epochs(parts, r.segment_leader_epochs, tags)
    parts += (
        I32.pack(r.segment_size_in_bytes),
        compact_nullable_bytes(r.custom_metadata),
        I8.pack(r.state),
        _top_tags(tags, r.txn_index_empty),
    )
    return parts


def _write_segment(r: SegmentMetadata, tags: _Tags) -> list[bytes]:
    epochs = r.segment_leader_epochs
    if tags or len(epochs) >= 0x7F:
        return _add_segment_fields([b"\x01\x00\x00", *_segment_id_parts(r, tags)], r, tags)
    # the common case, packed as the reader unpacks it: no unknown tags, a one-byte epoch count
    tp = r.tp
    parts = [
        b"\x01\x00\x00",
        compact_string(tp.topic, "topic name"),
        SEGMENT_HEAD_B.pack(
            uuid_bytes(tp.topic_id, "topic id"),
            tp.partition,
            0,
            uuid_bytes(r.segment_id, "segment id"),
            0,
            r.start_offset,
            r.end_offset,
            r.broker_id,
            r.max_timestamp_ms,
            r.event_timestamp_ms,
            len(epochs) + 1,
        ),
    ]
    for epoch, offset in epochs:
        parts.append(I32_I64_B.pack(epoch, offset, 0))
    parts += (
        I32.pack(r.segment_size_in_bytes),
        compact_nullable_bytes(r.custom_metadata),
        I8.pack(r.state),
        _TXN_TRUE_SECTION if r.txn_index_empty else _EMPTY_TAGS,
    )
    return parts


def _write_update(r: SegmentUpdate, tags: _Tags) -> list[bytes]:
    return [
        b"\x01\x01\x00",
        *_segment_id_parts(r, tags),
        I32_I64.pack(r.broker_id, r.event_timestamp_ms),
        compact_nullable_bytes(r.custom_metadata),
        I8.pack(r.state),
        _tags(tags, ""),
    ]


def _write_delete(r: PartitionDelete, tags: _Tags) -> list[bytes]:
    tp = r.tp
    return [
        b"\x01\x02\x00",
        compact_string(tp.topic, "topic name"),
        uuid_bytes(tp.topic_id, "topic id"),
        I32.pack(tp.partition),
        _tags(tags, "topic_id_partition"),
        I32_I64_I8.pack(r.broker_id, r.event_timestamp_ms, r.state),
        _tags(tags, ""),
    ]


def _write_snapshot(r: SegmentSnapshot, tags: _Tags) -> list[bytes]:
    return _add_segment_fields([b"\x01\x03\x00", uuid_bytes(r.segment_id, "segment id")], r, tags)


_WRITERS: dict[type, Callable[[Any, _Tags], list[bytes]]] = {
    SegmentMetadata: _write_segment,
    SegmentUpdate: _write_update,
    PartitionDelete: _write_delete,
    SegmentSnapshot: _write_snapshot,
}


def encode_value(record: RemoteLogMetadata, *, keep_unknown_tags: bool = True) -> bytes:
    """The topic value of ``record`` as Kafka writes it.

    With ``keep_unknown_tags`` the record's unknown tagged fields are written back into their
    structs (ascending tag order); without, the bytes are exactly Kafka's own serialization.
    Raises ``ValueError`` for a value the format cannot hold.
    """
    value = _native_encode(record)
    return _reference_encode(record, keep_unknown_tags) if value is None else value


def _native_encode(record: object) -> bytes | None:
    """The value of a segment in the usual shape, written in C; None for anything else (the reference writes it)."""
    if _encode_segment_fields is None or not isinstance(record, SegmentMetadata) or record.unknown_tags:
        return None
    tp = record.tp
    return _encode_segment_fields(
        tp.topic,
        tp.topic_id,
        tp.partition,
        record.segment_id,
        record.start_offset,
        record.end_offset,
        record.broker_id,
        record.max_timestamp_ms,
        record.event_timestamp_ms,
        record.segment_leader_epochs,
        record.segment_size_in_bytes,
        record.custom_metadata,
        record.state,
        record.txn_index_empty,
    )


def _reference_encode(record: RemoteLogMetadata, keep_unknown_tags: bool = True) -> bytes:
    """``encode_value`` without the native writer: what it is tested against."""
    writer = _WRITERS.get(type(record))
    if writer is None:
        raise TypeError(f"not a remote log metadata record: {type(record).__name__}")
    tags: _Tags = {}
    if keep_unknown_tags:
        for path, tag, raw in record.unknown_tags:
            tags.setdefault(path, []).append((tag, raw))
    try:
        parts = writer(record, tags)
    except struct.error as error:
        raise ValueError(f"cannot encode {type(record).__name__}: {error}") from None
    if tags:
        raise ValueError(f"{type(record).__name__} has no struct at unknown tag path(s) {sorted(tags)}")
    return b"".join(parts)
