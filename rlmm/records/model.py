"""Domain records of the `__remote_log_metadata` topic, as Kafka's storage API defines them.

Offsets, epochs and ids are plain ints/bytes; unknown tagged fields read from the wire are kept
(``unknown_tags``) so that a record can be written back byte for byte, but they never take part in
equality, as in Kafka.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar


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


T = TypeVar("T")


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """Positional constructor of a frozen slotted dataclass, several times faster than its ``__init__``.

    The frozen ``__init__`` sets every field through ``object.__setattr__``; here the instance is
    built as a plain twin with the same slots and then given ``cls`` as its class. Every field must
    be passed.
    """
    names = cls.__slots__  # type: ignore[attr-defined]
    if names != tuple(f.name for f in dataclasses.fields(cls)) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} is not a plain slotted dataclass")
    namespace: dict[str, Any] = {"cls": cls}
    assignments = "".join(f"    self.{name} = {name}\n" for name in names)
    exec(f"def __init__(self, {', '.join(names)}):\n{assignments}    self.__class__ = cls\n", namespace)
    return type(f"_{cls.__name__}Twin", (), {"__slots__": names, "__init__": namespace["__init__"]})
