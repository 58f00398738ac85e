"""How ``rlmm snapshot verify`` names what differs, in the forms the other commands use: a partition as
``rlmm query`` takes it (``TOPIC_ID:TOPIC:PARTITION``), every id in Kafka's text form, each side's value as
JSON (records in Kafka's canonical form, quarantined records as ``rlmm quarantine`` prints them)."""

from __future__ import annotations

import json

from rlmm.records.canonical import to_canonical
from rlmm.records.model import PartitionDelete, SegmentMetadata, TopicIdPartition
from rlmm.records.uuid import uuid_to_str
from rlmm.state.export import EpochState
from rlmm.state.quarantine import QuarantinedRecord


def partition_name(tp: TopicIdPartition) -> str:
    return f"partition {uuid_to_str(tp.topic_id)}:{tp.topic}:{tp.partition}"


def segment_name(segment_id: bytes) -> str:
    return f"segment {uuid_to_str(segment_id)}"


def shown(value: object) -> str:
    """One side of a difference as JSON (``null``: that side has none)."""
    return json.dumps(_json(value))


def _json(value: object) -> object:
    if isinstance(value, (SegmentMetadata, PartitionDelete)):
        return to_canonical(value)
    if isinstance(value, QuarantinedRecord):
        return value.as_json()
    if isinstance(value, EpochState):
        return {
            "epoch": value.epoch,
            "highest_offset": value.highest_offset,
            "referenced": [[start, uuid_to_str(segment_id)] for start, segment_id in value.referenced],
            "unreferenced": [uuid_to_str(segment_id) for segment_id in value.unreferenced],
        }
    return value
