"""Records the state machine refuses (ignored as Kafka ignores them, or failed as Kafka's handler throws): each
logged with what it was and why, at most once per interval and kind (a stream of them is one line)."""

from __future__ import annotations

import logging

from consumers.ratelog import RateLimitedLog
from rlmm.errors import DecodeError
from rlmm.records.model import PartitionDelete, RemoteLogMetadata, SegmentMetadata, SegmentSnapshot, SegmentUpdate
from rlmm.records.serde import decode_value
from rlmm.records.uuid import uuid_to_str
from rlmm.state.results import ApplyResult

REFUSED = frozenset({"ignored", "error"})  # ApplyResult statuses of a record the state machine refused


class RefusalLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self._lines = RateLimitedLog(logger, interval_s)

    def log(self, metadata_partition: int, offset: int, value: bytes | None, result: ApplyResult) -> None:
        """Log the record at ``offset`` of ``metadata_partition`` if ``result`` says it was refused (the value is
        decoded again to say what it held: refusals are rare)."""
        if result.status not in REFUSED:
            return
        self._lines.log(
            logging.WARNING,
            result.counter,
            "metadata partition %d, offset %d: record not applied (%s): %s",
            metadata_partition,
            offset,
            why(result),
            describe_value(value),
        )


def why(result: ApplyResult) -> str:
    """What a refused record got, in Kafka's terms."""
    if result.status == "ignored":
        return {
            "unknown_segment": "an update of a segment the partition does not hold; Kafka drops it",
            "invalid_transition": "a segment state change Kafka's state machine refuses; Kafka drops it",
        }.get(result.reason or "", result.counter)
    where = {
        "deserialize": "does not decode; kept in the quarantine",
        "route": "names no user partition",
        "handle": "the partition's store refused it",
    }.get(result.stage or "", result.stage or "")
    cause = f", caused by {result.cause}" if result.cause else ""
    return f"{where}: Kafka throws {result.error}{cause}"


def what_failed(result: ApplyResult) -> str:
    """What became of a record whose decoding, routing or handling threw, said after "which"."""
    cause = f", caused by {result.cause}" if result.cause else ""
    if result.stage == "deserialize":
        return f"was quarantined (it does not decode: Kafka throws {result.error}{cause}; rlmm quarantine lists it)"
    return f"could not be applied ({why(result)})"


def describe_value(value: bytes | None) -> str:
    """The record a consumed value holds: its type, state, segment id and user partition."""
    if value is None:
        return "a null value (tombstone)"
    try:
        record = decode_value(value)
    except DecodeError:
        return f"a value that does not decode ({len(value)} B)"
    return describe(record)


def describe(record: RemoteLogMetadata) -> str:
    if isinstance(record, SegmentMetadata):
        return f"RemoteLogSegmentMetadata {_segment(record)} of {_partition(record)}"
    if isinstance(record, SegmentUpdate):
        return f"RemoteLogSegmentMetadataUpdate {_segment(record)} of {_partition(record)}"
    if isinstance(record, PartitionDelete):
        return f"RemotePartitionDeleteMetadata {record.state.name} of {_partition(record)}"
    return f"RemoteLogSegmentMetadataSnapshot {_segment(record)}, which names no partition"


def _segment(record: SegmentMetadata | SegmentUpdate | SegmentSnapshot) -> str:
    return f"{record.state.name} of segment {uuid_to_str(record.segment_id)}"


def _partition(record: SegmentMetadata | SegmentUpdate | PartitionDelete) -> str:
    tp = record.tp
    return f"partition {uuid_to_str(tp.topic_id)}:{tp.topic}-{tp.partition}"
