"""Domain records of the `__remote_log_metadata` topic, as Kafka's storage API defines them.

Offsets, epochs and ids are plain ints/bytes; unknown tagged fields read from the wire are kept
(``unknown_tags``) so that a record can be written back byte for byte, but they never take part in
equality, as in Kafka.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final


class SegmentState(IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


# The members as constants: in Python 3.11 a member read from its class (``SegmentState.COPY_SEGMENT_FINISHED``) goes
# through ``EnumType.__getattr__``, interpreted, ~200 ns; the compiled core reads a constant as a C static.
COPY_SEGMENT_STARTED: Final = SegmentState.COPY_SEGMENT_STARTED
COPY_SEGMENT_FINISHED: Final = SegmentState.COPY_SEGMENT_FINISHED
DELETE_SEGMENT_STARTED: Final = SegmentState.DELETE_SEGMENT_STARTED
DELETE_SEGMENT_FINISHED: Final = SegmentState.DELETE_SEGMENT_FINISHED
DELETE_PARTITION_FINISHED: Final = PartitionDeleteState.DELETE_PARTITION_FINISHED


# (struct path, tag, raw data) for every unknown tagged field seen on the wire. Paths: "" for the
# record itself, "segment_id" / "segment_id.topic_id_partition" / "topic_id_partition" for the
# nested id structs, "epoch:<leader epoch>" for a SegmentLeaderEpochEntry.
UnknownTags = tuple[tuple[str, int, bytes], ...]

# (leader epoch, start offset of that epoch in the segment), sorted by epoch, epochs unique.
LeaderEpochs = tuple[tuple[int, int], ...]


# The records are values: nothing changes them after construction. Their constructors are written out
# (``init=False``) because a dataclass's generated ``__init__`` stays interpreted Python even when the
# module is compiled (rlmm/compiled.py), and decoding builds a record per event.


@dataclass(slots=True, init=False, eq=False)
class TopicIdPartition:
    topic_id: bytes  # 16 bytes, most significant byte first
    topic: str
    partition: int
    # the fold looks a partition up by it a few times per event: computed once
    _hash: int = field(init=False, repr=False, compare=False)

    def __init__(self, topic_id: bytes, topic: str, partition: int) -> None:
        self.topic_id = topic_id
        self.topic = topic
        self.partition = partition
        self._hash = hash((topic_id, topic, partition))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TopicIdPartition)
            and self.topic_id == other.topic_id
            and self.partition == other.partition
            and self.topic == other.topic
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce(self)


@dataclass(slots=True, init=False, unsafe_hash=True)
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

    def __init__(
        self,
        tp: TopicIdPartition,
        segment_id: bytes,
        start_offset: int,
        end_offset: int,
        broker_id: int,
        max_timestamp_ms: int,
        event_timestamp_ms: int,
        segment_leader_epochs: LeaderEpochs,
        segment_size_in_bytes: int,
        custom_metadata: bytes | None,
        state: SegmentState,
        txn_index_empty: bool = False,
        unknown_tags: UnknownTags = (),
    ) -> None:
        self.tp = tp
        self.segment_id = segment_id
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.broker_id = broker_id
        self.max_timestamp_ms = max_timestamp_ms
        self.event_timestamp_ms = event_timestamp_ms
        self.segment_leader_epochs = segment_leader_epochs
        self.segment_size_in_bytes = segment_size_in_bytes
        self.custom_metadata = custom_metadata
        self.state = state
        self.txn_index_empty = txn_index_empty
        self.unknown_tags = unknown_tags

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce(self)


@dataclass(slots=True, init=False, unsafe_hash=True)
class SegmentUpdate:
    """RemoteLogSegmentMetadataUpdate (api key 1)."""

    tp: TopicIdPartition
    segment_id: bytes
    broker_id: int
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: SegmentState
    unknown_tags: UnknownTags = field(default=(), compare=False)

    def __init__(
        self,
        tp: TopicIdPartition,
        segment_id: bytes,
        broker_id: int,
        event_timestamp_ms: int,
        custom_metadata: bytes | None,
        state: SegmentState,
        unknown_tags: UnknownTags = (),
    ) -> None:
        self.tp = tp
        self.segment_id = segment_id
        self.broker_id = broker_id
        self.event_timestamp_ms = event_timestamp_ms
        self.custom_metadata = custom_metadata
        self.state = state
        self.unknown_tags = unknown_tags

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce(self)


@dataclass(slots=True, init=False, unsafe_hash=True)
class PartitionDelete:
    """RemotePartitionDeleteMetadata (api key 2)."""

    tp: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: PartitionDeleteState
    unknown_tags: UnknownTags = field(default=(), compare=False)

    def __init__(
        self,
        tp: TopicIdPartition,
        broker_id: int,
        event_timestamp_ms: int,
        state: PartitionDeleteState,
        unknown_tags: UnknownTags = (),
    ) -> None:
        self.tp = tp
        self.broker_id = broker_id
        self.event_timestamp_ms = event_timestamp_ms
        self.state = state
        self.unknown_tags = unknown_tags

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce(self)


@dataclass(slots=True, init=False, unsafe_hash=True)
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

    def __init__(
        self,
        segment_id: bytes,
        start_offset: int,
        end_offset: int,
        broker_id: int,
        max_timestamp_ms: int,
        event_timestamp_ms: int,
        segment_leader_epochs: LeaderEpochs,
        segment_size_in_bytes: int,
        custom_metadata: bytes | None,
        state: SegmentState,
        txn_index_empty: bool = False,
        unknown_tags: UnknownTags = (),
    ) -> None:
        self.segment_id = segment_id
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.broker_id = broker_id
        self.max_timestamp_ms = max_timestamp_ms
        self.event_timestamp_ms = event_timestamp_ms
        self.segment_leader_epochs = segment_leader_epochs
        self.segment_size_in_bytes = segment_size_in_bytes
        self.custom_metadata = custom_metadata
        self.state = state
        self.txn_index_empty = txn_index_empty
        self.unknown_tags = unknown_tags

    def __reduce__(self) -> tuple[object, ...]:
        return _reduce(self)


# The records the native reader (rlmm/records/wire_native.pyx) builds, by compiled functions: such a call passes its
# arguments as a vector, where calling the class packs them in a tuple that the constructor then parses
# (~1,100 instructions more per segment)


def new_segment(
    tp: TopicIdPartition,
    segment_id: bytes,
    start_offset: int,
    end_offset: int,
    broker_id: int,
    max_timestamp_ms: int,
    event_timestamp_ms: int,
    segment_leader_epochs: LeaderEpochs,
    segment_size_in_bytes: int,
    custom_metadata: bytes | None,
    state: SegmentState,
    txn_index_empty: bool,
) -> SegmentMetadata:
    return SegmentMetadata(
        tp,
        segment_id,
        start_offset,
        end_offset,
        broker_id,
        max_timestamp_ms,
        event_timestamp_ms,
        segment_leader_epochs,
        segment_size_in_bytes,
        custom_metadata,
        state,
        txn_index_empty,
    )


def new_update(
    tp: TopicIdPartition,
    segment_id: bytes,
    broker_id: int,
    event_timestamp_ms: int,
    custom_metadata: bytes | None,
    state: SegmentState,
) -> SegmentUpdate:
    return SegmentUpdate(tp, segment_id, broker_id, event_timestamp_ms, custom_metadata, state)


def _reduce(record: Any) -> tuple[object, ...]:
    """Pickling by constructor arguments (a compiled class cannot be built without them)."""
    return type(record), tuple(getattr(record, f.name) for f in dataclasses.fields(record) if f.init)


RemoteLogMetadata = SegmentMetadata | SegmentUpdate | PartitionDelete | SegmentSnapshot
