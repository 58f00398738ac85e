"""Deterministic generator of ``__remote_log_metadata`` traffic shaped like a tiered-storage cluster.

Many user partitions, each with a leader that uploads contiguous segments (copy started, then
finished), leader changes where the new leader re-uploads an overlapping range, segments spanning a
leader change, failed copies cleaned up, retention deleting the oldest segments, a share of segments
with a transaction index, redelivered records, partition deletions, and a few invalid records
(undecodable bytes, illegal transitions, updates of unknown segments).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.partitioner import metadata_partition
from rlmm.records.serde import encode_value

BASE_TIMESTAMP_MS = 1_718_000_000_000


@dataclass(frozen=True, slots=True)
class Event:
    metadata_partition: int
    offset: int
    value: bytes | None


@dataclass
class _Partition:
    tp: TopicIdPartition
    epoch: int = 0
    next_offset: int = 0
    live: list[SegmentMetadata] = field(default_factory=list)  # finished, oldest first
    copying: SegmentMetadata | None = None
    deleting: list[SegmentMetadata] = field(default_factory=list)
    deleted: bool = False


@dataclass
class WorkloadConfig:
    partitions: int = 100
    metadata_partitions: int = 50
    seed: int = 1
    txn_share: float = 0.2  # segments with a non-empty transaction index
    retained_segments: int = 40  # retention keeps about this many finished segments per partition
    invalid_share: float = 0.001
    redelivery_share: float = 0.001
    partition_delete_share: float = 0.00002  # per event: chance that some partition gets deleted


class Workload:
    """Iterates events; ``partitions`` lists every user partition the stream mentions."""

    def __init__(self, config: WorkloadConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.partitions = [
            _Partition(TopicIdPartition(self.rng.randbytes(16), f"topic-{i % 17}", i)) for i in range(config.partitions)
        ]
        self._next_offset = [0] * config.metadata_partitions
        self._clock = BASE_TIMESTAMP_MS
        self._recent: list[Event] = []

    def user_partitions(self) -> list[TopicIdPartition]:
        return [p.tp for p in self.partitions]

    def metadata_partition_of(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp.topic_id, tp.partition, self.config.metadata_partitions)

    def events(self, count: int) -> Iterator[Event]:
        emitted = 0
        while emitted < count:
            for event in self._step():
                yield event
                emitted += 1
                if emitted == count:
                    return

    def _emit(self, tp: TopicIdPartition, value: bytes | None) -> Event:
        mp = self.metadata_partition_of(tp)
        event = Event(mp, self._next_offset[mp], value)
        self._next_offset[mp] += 1
        self._recent.append(event)
        if len(self._recent) > 64:
            del self._recent[:32]
        return event

    def _record(self, record: RemoteLogMetadata) -> Event:
        return self._emit(record.tp, encode_value(record))

    def _step(self) -> list[Event]:
        rng, config = self.rng, self.config
        self._clock += rng.randint(1, 50)
        roll = rng.random()
        if roll < config.redelivery_share and self._recent:
            return [rng.choice(self._recent)]  # the same (partition, offset) delivered again
        if roll < config.redelivery_share + config.invalid_share:
            return [self._invalid(rng.choice(self.partitions))]
        if roll < config.redelivery_share + config.invalid_share + config.partition_delete_share:
            return self._delete_partition(rng.choice(self.partitions))
        part = rng.choice(self.partitions)
        if part.deleted:
            return []
        if part.copying is not None:
            return self._finish_copy(part)
        if part.deleting:
            return [self._update(part.deleting.pop(0), SegmentState.DELETE_SEGMENT_FINISHED)]
        if len(part.live) > config.retained_segments:
            oldest = part.live.pop(0)
            part.deleting.append(oldest)
            return [self._update(oldest, SegmentState.DELETE_SEGMENT_STARTED)]
        if rng.random() < 0.03:
            self._change_leader(part)
        return [self._start_copy(part)]

    def _start_copy(self, part: _Partition) -> Event:
        rng = self.rng
        start = part.next_offset
        end = start + rng.randint(1_000, 100_000)
        epochs: tuple[tuple[int, int], ...] = ((part.epoch, start),)
        if rng.random() < 0.02:  # the leader changed inside this segment
            part.epoch += 1
            epochs = ((part.epoch - 1, start), (part.epoch, rng.randint(start + 1, end)))
        segment = SegmentMetadata(
            tp=part.tp,
            segment_id=rng.randbytes(16),
            start_offset=start,
            end_offset=end,
            broker_id=part.epoch % 5,
            max_timestamp_ms=self._clock - rng.randint(0, 5_000),
            event_timestamp_ms=self._clock,
            segment_leader_epochs=epochs,
            segment_size_in_bytes=rng.randint(1 << 20, 1 << 30),
            custom_metadata=None,
            state=SegmentState.COPY_SEGMENT_STARTED,
            txn_index_empty=rng.random() >= self.config.txn_share,
        )
        part.copying = segment
        part.next_offset = end + 1
        return self._record(segment)

    def _finish_copy(self, part: _Partition) -> list[Event]:
        segment, part.copying = part.copying, None
        if self.rng.random() < 0.02:  # failed copy: the leader cleans it up
            part.next_offset = segment.start_offset
            return [
                self._update(segment, SegmentState.DELETE_SEGMENT_STARTED),
                self._update(segment, SegmentState.DELETE_SEGMENT_FINISHED),
            ]
        part.live.append(segment)
        return [self._update(segment, SegmentState.COPY_SEGMENT_FINISHED)]

    def _change_leader(self, part: _Partition) -> None:
        part.epoch += 1
        if part.live and self.rng.random() < 0.5:
            # the new leader lags and uploads again from inside the last finished segment
            last = part.live[-1]
            part.next_offset = self.rng.randint(last.start_offset, last.end_offset)

    def _update(self, segment: SegmentMetadata, state: SegmentState) -> Event:
        update = SegmentUpdate(
            tp=segment.tp,
            segment_id=segment.segment_id,
            broker_id=segment.broker_id,
            event_timestamp_ms=self._clock,
            custom_metadata=None,
            state=state,
        )
        return self._record(update)

    def _invalid(self, part: _Partition) -> Event:
        kind = self.rng.randrange(3)
        if kind == 0:
            return self._emit(part.tp, self.rng.randbytes(self.rng.randint(0, 40)))
        if kind == 1 and part.live:  # illegal transition: finished -> copy started
            return self._update(part.live[-1], SegmentState.COPY_SEGMENT_STARTED)
        unknown = SegmentUpdate(
            tp=part.tp,
            segment_id=self.rng.randbytes(16),
            broker_id=0,
            event_timestamp_ms=self._clock,
            custom_metadata=b"x",
            state=SegmentState.COPY_SEGMENT_FINISHED,
        )
        return self._record(unknown)

    def _delete_partition(self, part: _Partition) -> list[Event]:
        if part.deleted:
            return []
        part.deleted = True
        events = [
            self._record(PartitionDelete(part.tp, 0, self._clock, PartitionDeleteState.DELETE_PARTITION_MARKED)),
            self._record(PartitionDelete(part.tp, 0, self._clock, PartitionDeleteState.DELETE_PARTITION_STARTED)),
        ]
        for segment in part.live + part.deleting:
            events.append(self._update(segment, SegmentState.DELETE_SEGMENT_STARTED))
            events.append(self._update(segment, SegmentState.DELETE_SEGMENT_FINISHED))
        finished = PartitionDelete(part.tp, 0, self._clock, PartitionDeleteState.DELETE_PARTITION_FINISHED)
        events.append(self._record(finished))
        part.live, part.deleting, part.copying = [], [], None
        return events
