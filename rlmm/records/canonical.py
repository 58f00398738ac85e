"""The canonical decoded form of the compat data (``tests/compat``): a JSON-ready dict per record, as the Kafka oracle
prints ``RemoteLogMetadataSerde.deserialize`` results (uuids as Kafka text, custom metadata as hex)."""

from __future__ import annotations

from typing import Any

from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.uuid import uuid_from_str, uuid_to_str

_TYPES: dict[type, str] = {
    SegmentMetadata: "RemoteLogSegmentMetadata",
    SegmentUpdate: "RemoteLogSegmentMetadataUpdate",
    PartitionDelete: "RemotePartitionDeleteMetadata",
    SegmentSnapshot: "RemoteLogSegmentMetadataSnapshot",
}

_SEGMENT_KEYS = (
    "type", "topic_id", "topic", "partition", "segment_id", "start_offset", "end_offset",
    "max_timestamp_ms", "broker_id", "event_timestamp_ms", "segment_size_in_bytes",
    "custom_metadata", "state", "state_id", "segment_leader_epochs", "txn_index_empty",
)  # fmt: skip
_KEYS: dict[str, tuple[str, ...]] = {
    "RemoteLogSegmentMetadata": _SEGMENT_KEYS,
    "RemoteLogSegmentMetadataUpdate": (
        "type", "topic_id", "topic", "partition", "segment_id", "broker_id",
        "event_timestamp_ms", "custom_metadata", "state", "state_id",
    ),
    "RemotePartitionDeleteMetadata": (
        "type", "topic_id", "topic", "partition", "broker_id", "event_timestamp_ms", "state",
        "state_id",
    ),
    "RemoteLogSegmentMetadataSnapshot": tuple(
        key for key in _SEGMENT_KEYS if key not in ("topic_id", "topic", "partition")
    ),
}  # fmt: skip


def to_canonical(record: RemoteLogMetadata) -> dict[str, Any]:
    type_name = _TYPES.get(type(record))
    if type_name is None:
        raise TypeError(f"not a remote log metadata record: {type(record).__name__}")
    states = PartitionDeleteState if isinstance(record, PartitionDelete) else SegmentState
    state = states(record.state)
    values: dict[str, Any] = {"type": type_name, "state": state.name, "state_id": int(state)}
    if not isinstance(record, SegmentSnapshot):
        tp = record.tp
        values.update(topic_id=uuid_to_str(tp.topic_id), topic=tp.topic, partition=tp.partition)
    if not isinstance(record, PartitionDelete):
        custom = record.custom_metadata
        values["segment_id"] = uuid_to_str(record.segment_id)
        values["custom_metadata"] = None if custom is None else custom.hex()
    if isinstance(record, (SegmentMetadata, SegmentSnapshot)):
        values.update(
            start_offset=record.start_offset,
            end_offset=record.end_offset,
            max_timestamp_ms=record.max_timestamp_ms,
            segment_size_in_bytes=record.segment_size_in_bytes,
            segment_leader_epochs=[[epoch, offset] for epoch, offset in record.segment_leader_epochs],
            txn_index_empty=record.txn_index_empty,
        )
    values.update(broker_id=record.broker_id, event_timestamp_ms=record.event_timestamp_ms)
    return {key: values[key] for key in _KEYS[type_name]}


def _state(d: dict[str, Any], states: type[SegmentState] | type[PartitionDeleteState]) -> Any:
    state = states(d["state_id"])
    if state.name != d["state"]:
        raise ValueError(f"state {d['state']!r} does not match state_id {d['state_id']}")
    return state


def _custom(d: dict[str, Any]) -> bytes | None:
    custom = d["custom_metadata"]
    return None if custom is None else bytes.fromhex(custom)


def _tp(d: dict[str, Any]) -> TopicIdPartition:
    return TopicIdPartition(uuid_from_str(d["topic_id"]), d["topic"], d["partition"])


def _epochs(d: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    return tuple((epoch, offset) for epoch, offset in d["segment_leader_epochs"])


def from_canonical(d: dict[str, Any]) -> RemoteLogMetadata:
    """The record of a canonical dict (with no unknown tags). Raises ``ValueError`` for a bad dict."""
    type_name = d.get("type")
    keys = _KEYS.get(type_name)  # type: ignore[arg-type]
    if keys is None:
        raise ValueError(f"unknown record type {type_name!r}")
    if set(d) != set(keys):
        raise ValueError(f"{type_name} keys differ: missing {set(keys) - set(d)}, extra {set(d) - set(keys)}")
    if type_name == "RemoteLogSegmentMetadataUpdate":
        return SegmentUpdate(
            _tp(d), uuid_from_str(d["segment_id"]), d["broker_id"], d["event_timestamp_ms"],
            _custom(d), _state(d, SegmentState),
        )  # fmt: skip
    if type_name == "RemotePartitionDeleteMetadata":
        return PartitionDelete(_tp(d), d["broker_id"], d["event_timestamp_ms"], _state(d, PartitionDeleteState))
    common = (
        uuid_from_str(d["segment_id"]), d["start_offset"], d["end_offset"], d["broker_id"],
        d["max_timestamp_ms"], d["event_timestamp_ms"], _epochs(d), d["segment_size_in_bytes"],
        _custom(d), _state(d, SegmentState), d["txn_index_empty"],
    )  # fmt: skip
    if type_name == "RemoteLogSegmentMetadata":
        return SegmentMetadata(_tp(d), *common)
    return SegmentSnapshot(*common)
