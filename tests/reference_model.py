"""A deliberately naive in-memory model of Kafka's RLMM cache, for differential tests.

It keeps Kafka's structures as plain Python containers (segment map, per-epoch offset map,
unreferenced set, highest offset) and answers queries by walking them, including the linear
``nextSegmentWithTxnIndex`` walk. The view's indexes must give the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sortedcontainers import SortedDict

from rlmm.errors import RemoteResourceNotFound, ReplicaNotAvailable
from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.state.epoch_index import epoch_end
from rlmm.state.machine import VALID_TRANSITIONS
from rlmm.state.results import ApplyResult

S = SegmentState


@dataclass
class EpochState:
    offset_to_id: SortedDict = field(default_factory=SortedDict)
    unreferenced: set = field(default_factory=set)
    highest: int | None = None


@dataclass
class Cache:
    segments: dict = field(default_factory=dict)
    epochs: dict = field(default_factory=dict)
    ready: bool = False

    def epoch(self, e: int) -> EpochState:
        return self.epochs.setdefault(e, EpochState())


class ReferenceModel:
    def __init__(self) -> None:
        self.assigned: set[TopicIdPartition] = set()
        self.caches: dict[TopicIdPartition, Cache] = {}
        self.last_offset: dict[TopicIdPartition, int] = {}

    def assign(self, tp: TopicIdPartition) -> None:
        self.assigned.add(tp)
        self.caches.setdefault(tp, Cache())

    def mark_ready(self, tp: TopicIdPartition) -> None:
        self.caches[tp].ready = True

    # ---- apply --------------------------------------------------------------------------------

    def handle(self, record, offset: int) -> ApplyResult:
        if isinstance(record, SegmentSnapshot):
            return ApplyResult("error", stage="route", error="UnsupportedOperationException")
        tp = record.tp
        if tp not in self.assigned:
            return ApplyResult("skipped", reason="not_assigned")
        if tp in self.last_offset and offset <= self.last_offset[tp]:
            return ApplyResult("skipped", reason="already_processed")
        cache = self.caches.get(tp)
        if cache is None:
            return ApplyResult("error", stage="handle", error="IllegalStateException")
        if isinstance(record, SegmentMetadata):
            result = self._add(cache, record)
        elif isinstance(record, SegmentUpdate):
            result = self._update(cache, record)
        else:
            result = self._partition_delete(tp, record)
        if result.status != "error":
            self.last_offset[tp] = offset
        return result

    def _add(self, cache: Cache, m: SegmentMetadata) -> ApplyResult:
        if m.state is not S.COPY_SEGMENT_STARTED:
            return ApplyResult("error", stage="handle", error="IllegalArgumentException")
        existing = cache.segments.get(m.segment_id)
        if S.COPY_SEGMENT_STARTED not in VALID_TRANSITIONS[existing.state if existing else None]:
            return ApplyResult("ignored", reason="invalid_transition")
        for e, _ in m.segment_leader_epochs:
            cache.epoch(e).unreferenced.add(m.segment_id)
        cache.segments[m.segment_id] = m
        return ApplyResult("applied")

    def _update(self, cache: Cache, u: SegmentUpdate) -> ApplyResult:
        existing = cache.segments.get(u.segment_id)
        if existing is None:
            return ApplyResult("ignored", reason="unknown_segment")
        if u.state not in VALID_TRANSITIONS[existing.state]:
            return ApplyResult("ignored", reason="invalid_transition")
        if u.state is S.COPY_SEGMENT_STARTED:
            return ApplyResult("error", stage="handle", error="IllegalArgumentException")
        new = replace(
            existing,
            broker_id=u.broker_id,
            event_timestamp_ms=u.event_timestamp_ms,
            custom_metadata=u.custom_metadata,
            state=u.state,
        )
        for e, start in new.segment_leader_epochs:
            es = cache.epoch(e)
            if u.state is S.COPY_SEGMENT_FINISHED:
                end = epoch_end(new, e)
                while es.offset_to_id and es.offset_to_id.peekitem(-1)[0] >= start and es.highest <= end:
                    _, evicted = es.offset_to_id.popitem(-1)
                    es.unreferenced.add(evicted)
                es.offset_to_id[start] = new.segment_id
                es.unreferenced.discard(new.segment_id)
                if es.highest is None or end > es.highest:
                    es.highest = end
            elif u.state is S.DELETE_SEGMENT_STARTED:
                if es.offset_to_id.get(start) == new.segment_id:
                    del es.offset_to_id[start]
                es.unreferenced.add(new.segment_id)
            else:
                es.unreferenced.discard(new.segment_id)
        if u.state is S.DELETE_SEGMENT_FINISHED:
            del cache.segments[new.segment_id]
        else:
            cache.segments[new.segment_id] = new
        return ApplyResult("applied")

    def _partition_delete(self, tp: TopicIdPartition, record: PartitionDelete) -> ApplyResult:
        if record.state is PartitionDeleteState.DELETE_PARTITION_FINISHED:
            del self.caches[tp]
        return ApplyResult("applied")

    # ---- queries (the names and results of rlmm.state.queries.Queries) -------------------------

    def _cache(self, tp: TopicIdPartition) -> Cache:
        cache = self.caches.get(tp)
        if cache is None:
            raise RemoteResourceNotFound(str(tp))
        if not cache.ready:
            raise ReplicaNotAvailable(str(tp))
        return cache

    def is_ready(self, tp: TopicIdPartition) -> bool:
        cache = self.caches.get(tp)
        return cache is not None and cache.ready

    def _lookup(self, cache: Cache, epoch: int, offset: int) -> SegmentMetadata | None:
        es = cache.epochs.get(epoch)
        if es is None:
            return None
        index = es.offset_to_id.bisect_right(offset) - 1
        if index < 0:
            return None
        segment = cache.segments[es.offset_to_id.peekitem(index)[1]]
        return None if offset > epoch_end(segment, epoch) else segment

    def remote_log_segment_metadata(self, tp, epoch, offset):
        return self._lookup(self._cache(tp), epoch, offset)

    def highest_offset_for_epoch(self, tp, epoch):
        es = self._cache(tp).epochs.get(epoch)
        return None if es is None else es.highest

    def list_remote_log_segments(self, tp):
        return iter(list(self._cache(tp).segments.values()))

    def list_epoch_segments(self, tp, epoch):
        cache = self._cache(tp)
        es = cache.epochs.get(epoch)
        if es is None:
            return []
        ids = list(es.offset_to_id.values()) + sorted(es.unreferenced)
        if any(i not in cache.segments for i in ids):
            raise RemoteResourceNotFound(str(tp))
        segments = [cache.segments[i] for i in ids]
        if es.unreferenced:
            segments.sort(key=lambda s: s.start_offset)
        return segments

    def remote_log_size(self, tp, epoch=None):
        if epoch is None:
            return sum(s.segment_size_in_bytes for s in self._cache(tp).segments.values())
        return sum(s.segment_size_in_bytes for s in self.list_epoch_segments(tp, epoch))

    def next_segment_with_txn_index(self, tp, epoch, offset):
        cache = self._cache(tp)
        segment = self._lookup(cache, epoch, offset)
        while segment is not None and segment.txn_index_empty:
            segment = self._lookup(cache, epoch, segment.end_offset + 1)
        return segment

    def first_segment_with_max_timestamp_at_least(self, tp, epoch, timestamp, starting_offset):
        """RemoteLogManager.findOffsetByTimestamp's scan of one epoch's listing."""
        return next(
            (
                s
                for s in self.list_epoch_segments(tp, epoch)
                if s.max_timestamp_ms >= timestamp
                and s.end_offset >= starting_offset
                and s.state is S.COPY_SEGMENT_FINISHED
            ),
            None,
        )

    def max_timestamp(self, tp):
        finished = [s for s in self._cache(tp).segments.values() if s.state is S.COPY_SEGMENT_FINISHED]
        return max(finished, key=lambda s: (s.max_timestamp_ms, s.end_offset, s.segment_id), default=None)
