"""Domain records of the `__remote_log_metadata` topic, as Kafka's storage API defines them.

Offsets, epochs and ids are plain ints/bytes; unknown tagged fields read from the wire are kept
(``unknown_tags``) so that a record can be written back byte for byte, but they never take part in
equality, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class SegmentState(IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


# (struct path, tag, raw data) for every unknown tagged field seen on the wire. Paths: "" for the
# record itself, "segment_id" / "segment_id.topic_id_partition" / "topic_id_partition" for the
# nested id structs, "epoch:<leader epoch>" for a SegmentLeaderEpochEntry.
UnknownTags = tuple[tuple[str, int, bytes], ...]

# (leader epoch, start offset of that epoch in the segment), sorted by epoch, epochs unique.
LeaderEpochs = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: bytes  # 16 bytes, most significant byte first
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class SegmentMetadata:
    """RemoteLogSegmentMetadata (api key 0)."""

    tp: TopicIdPartition
    segment_id: bytes
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: LeaderEpochs
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    state: SegmentState
    txn_index_empty: bool = False
    unknown_tags: UnknownTags = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class SegmentUpdate:
    """RemoteLogSegmentMetadataUpdate (api key 1)."""

    tp: TopicIdPartition
    segment_id: bytes
    broker_id: int
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: SegmentState
    unknown_tags: UnknownTags = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class PartitionDelete:
    """RemotePartitionDeleteMetadata (api key 2)."""

    tp: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: PartitionDeleteState
    unknown_tags: UnknownTags = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """RemoteLogSegmentMetadataSnapshot (api key 3): a segment without its partition."""

    segment_id: bytes
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: LeaderEpochs
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    state: SegmentState
    txn_index_empty: bool = False
    unknown_tags: UnknownTags = field(default=(), compare=False)


RemoteLogMetadata = SegmentMetadata | SegmentUpdate | PartitionDelete | SegmentSnapshot
