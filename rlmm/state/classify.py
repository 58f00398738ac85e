"""The one classification of the raw values of ``__remote_log_metadata``, shared by the view's apply path and
the snapshot fold: both quarantine a value for the same reason, in the same words, and route the others to
the same user partition. A value that decodes belongs to the user partition it names (a snapshot record, api
key 3, names none: Kafka's routing throws on it); one that does not, a tombstone included, goes to the
quarantine with the ``DecodeError`` that says why."""

from __future__ import annotations

from typing import Final

from rlmm.errors import DecodeError
from rlmm.records.model import RemoteLogMetadata, SegmentSnapshot, TopicIdPartition
from rlmm.records.serde import decode_value

TOMBSTONE: Final = "null record value (tombstone)"
TOMBSTONE_ERROR: Final = "NullPointerException"  # what Kafka's deserializer throws on a null value


def classify(value: bytes | None) -> RemoteLogMetadata | DecodeError:
    """The record a raw value holds, or why it goes to the quarantine."""
    if value is None:
        return DecodeError(TOMBSTONE, kafka_exception=TOMBSTONE_ERROR)
    try:
        return decode_value(value)
    except DecodeError as exc:
        return exc


def user_partition(record: RemoteLogMetadata) -> TopicIdPartition | None:
    """The user partition a decoded record is routed to; None for a snapshot record, whose
    ``topicIdPartition()`` throws in Kafka."""
    if isinstance(record, SegmentSnapshot):
        return None
    return record.tp
