"""Kafka's topic-based RLMM semantics as transitions over an ordered key-value store.

One ``StateMachine`` call handles one consumed record the way Kafka 4.3's ``ConsumerTask`` routes it and
``RemotePartitionMetadataStore`` / ``RemoteLogMetadataCache`` apply it, quirks included: an update of an unknown
segment and an invalid transition are dropped without error; an add of a segment whose metadata was deleted brings
it back; ids left in an epoch whose metadata is gone make that epoch's listing fail. Each target state has its
handler, as in Kafka's cache; what a transition does in each of the segment's leader epochs (Kafka's
``RemoteLogLeaderEpochState``, and the indexes derived from it) is the ``EpochIndex``'s (rlmm/state/epoch_index.py).

Here are kept the partition rows, the segments' metadata (in the segments' rows, beside their memberships:
rlmm/state/segment_rows.py) and what depends on it alone: the partitions' sizes, segment counts and orphans (segments
without metadata that epochs still track), the max-timestamp index (rlmm/state/max_timestamp.py). Every check
happens before the first write, so a refused record changes nothing.
"""

from __future__ import annotations

from typing import Final

from rlmm.records.model import (
    COPY_SEGMENT_FINISHED,
    COPY_SEGMENT_STARTED,
    DELETE_PARTITION_FINISHED,
    DELETE_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    PartitionDelete,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.serde import encode_value
from rlmm.state import keys as K
from rlmm.state import max_timestamp as MT
from rlmm.state.epoch_index import EpochIndex
from rlmm.state.kv import WriteKV
from rlmm.state.results import (
    APPLIED,
    IGNORED_INVALID_TRANSITION,
    IGNORED_UNKNOWN_SEGMENT,
    SKIPPED_ALREADY_PROCESSED,
    SKIPPED_NOT_ASSIGNED,
    ApplyResult,
    handle_error,
)
from rlmm.state.rows import EpochRow, PartitionRow
from rlmm.state.segment_rows import SegmentRows
from rlmm.state.trees import TreeCache

# RemoteLogSegmentState.isValidTransition: source state (None = unknown segment) -> allowed targets
VALID_TRANSITIONS: dict[SegmentState | None, frozenset[SegmentState]] = {
    None: frozenset({COPY_SEGMENT_STARTED}),
    COPY_SEGMENT_STARTED: frozenset({COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED}),
    COPY_SEGMENT_FINISHED: frozenset({COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED}),
    DELETE_SEGMENT_STARTED: frozenset({DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED}),
    DELETE_SEGMENT_FINISHED: frozenset({DELETE_SEGMENT_FINISHED}),
}

MARK_READY_ERROR: Final = "NullPointerException"  # Kafka's markInitialized on a partition without a cache


class StateMachine:
    """Applies records to a ``WriteKV`` (normally a ``StagedKV`` committed once per batch).

    A unit of work: partition rows, epoch rows, segments' rows and consumed offsets are read once, kept as
    objects while the batch runs, and written back by ``flush`` (each once, however often it
    changed). The indexes (offsets, unreferenced, txn, breaks, max timestamp, ...) are written
    to the KV as they change.
    """

    def __init__(
        self,
        kv: WriteKV,
        rows: dict[TopicIdPartition, PartitionRow] | None = None,
        epochs: dict[bytes, EpochRow] | None = None,
        tree_cache: TreeCache | None = None,
        max_timestamp_tails: MT.Tails | None = None,
        max_timestamp_found: MT.Found | None = None,
    ) -> None:
        """``rows``, ``epochs``, ``tree_cache``, ``max_timestamp_tails`` and ``max_timestamp_found`` may be caches
        kept across batches by the only writer of the KV."""
        self.kv = kv
        self._segments = SegmentRows(kv)
        self._epochs = EpochIndex(kv, self._segments, epochs, tree_cache)
        self._max_timestamps = MT.new_index(kv, max_timestamp_tails, max_timestamp_found)
        self._rows = {} if rows is None else rows
        self._dirty_rows: set[TopicIdPartition] = set()
        self._consumed: dict[int, int] = {}  # metadata partition -> greatest offset consumed in this batch

    def flush(self) -> None:
        """Write the cached objects back to the KV."""
        kv = self.kv
        for tp in self._dirty_rows:
            kv.put(K.PARTITIONS, K.tp_identity(tp), self._rows[tp].pack())
        self._segments.flush()
        self._epochs.flush()
        self._max_timestamps.flush()
        for mp, offset in self._consumed.items():
            key = K.u32(mp)
            raw = kv.get(K.METADATA_OFFSETS, key)
            if raw is None or K.read_offset(raw, 0) < offset:
                kv.put(K.METADATA_OFFSETS, key, K.offset_bytes(offset))
        self._dirty_rows.clear()
        self._consumed.clear()

    # ---- partition registry -------------------------------------------------------------------

    def _changing(self, tp: TopicIdPartition) -> PartitionRow | None:
        row = self.partition(tp)
        if row is not None:
            self._dirty_rows.add(tp)
        return row

    def partition(self, tp: TopicIdPartition) -> PartitionRow | None:
        row = self._rows.get(tp)
        if row is None:
            raw = self.kv.get(K.PARTITIONS, K.tp_identity(tp))
            if raw is None:
                return None
            row = self._rows[tp] = PartitionRow.unpack(raw)
        return row

    def _new_partition(self, tp: TopicIdPartition) -> PartitionRow:
        raw = self.kv.get(K.META, K.NEXT_TPID_KEY)
        tpid_int = 0 if raw is None else K.read_u32(raw)
        tpid = K.u32(tpid_int)
        self.kv.put(K.META, K.NEXT_TPID_KEY, K.u32(tpid_int + 1))
        self.kv.put(K.TP_BY_ID, tpid, K.tp_identity(tp))
        row = self._rows[tp] = PartitionRow(tpid)
        self._dirty_rows.add(tp)
        return row

    def assign(self, tp: TopicIdPartition) -> PartitionRow:
        """Kafka's maybeLoadPartition. Assigning a partition again keeps its state (a removed one stays
        removed): the view already holds what the consumed records made of it."""
        row = self._changing(tp) or self._new_partition(tp)
        if not row.assigned:
            row.assigned, row.ready, row.removed = True, False, False
        return row

    def unassign(self, tp: TopicIdPartition) -> None:
        """Kafka's clearTopicPartition: forget the partition's metadata and its consumed position."""
        row = self._changing(tp)
        if row is None:
            return
        self._drop_partition_data(row)
        row.assigned, row.ready, row.removed, row.last_applied_offset = False, False, False, None
        row.delete_record = b""

    def mark_ready(self, tp: TopicIdPartition) -> str | None:
        """Kafka's markInitialized; returns the Kafka exception name when Kafka's call would throw."""
        row = self._changing(tp)
        if row is None or not row.assigned or row.removed:
            return MARK_READY_ERROR
        row.ready = True
        return None

    def mark_not_ready(self, tp: TopicIdPartition) -> None:
        """Withdraw readiness until the partition is caught up again (a restarted consumer). Its state stays
        as it is: complete up to its last applied offset."""
        row = self.partition(tp)
        if row is not None and row.ready:
            row.ready = False
            self._dirty_rows.add(tp)

    def record_consumed(self, metadata_partition: int, offset: int) -> None:
        """Advance the metadata partition's consumed offset (a redelivered record never moves it back)."""
        if offset > self._consumed.get(metadata_partition, -1):
            self._consumed[metadata_partition] = offset

    # ---- routing (ConsumerTask, RemotePartitionMetadataStore) ------------------------------------------------------

    def handle(self, record: RemoteLogMetadata, offset: int) -> ApplyResult:
        if isinstance(record, SegmentSnapshot):
            # RemoteLogSegmentMetadataSnapshot.topicIdPartition() throws: the record cannot be routed
            return ApplyResult("error", stage="route", error="UnsupportedOperationException")
        tp = record.tp
        row = self.partition(tp)
        if row is None or not row.assigned:
            return SKIPPED_NOT_ASSIGNED
        if row.last_applied_offset is not None and offset <= row.last_applied_offset:
            return SKIPPED_ALREADY_PROCESSED
        result = self._store(row, record)
        if result.status != "error":
            row.last_applied_offset = offset
            self._dirty_rows.add(tp)
        return result

    def _store(self, row: PartitionRow, record: SegmentMetadata | SegmentUpdate | PartitionDelete) -> ApplyResult:
        if row.removed:  # DELETE_PARTITION_FINISHED removed the partition's metadata: Kafka refuses any record of it
            return handle_error("IllegalStateException")
        if isinstance(record, SegmentMetadata):
            return self._add_copy_in_progress(row, record)
        if isinstance(record, SegmentUpdate):
            return self._update(row, record)
        return self._partition_delete(row, record)

    # ---- RemoteLogMetadataCache: one handler per target state --------------------------------------------------------

    def _add_copy_in_progress(self, row: PartitionRow, segment: SegmentMetadata) -> ApplyResult:
        # an add only brings a segment in (COPY_SEGMENT_STARTED): later states come as updates of it
        if segment.state is not COPY_SEGMENT_STARTED:
            return handle_error("IllegalArgumentException")
        existing = self._segment(row.tpid, segment.segment_id)
        if COPY_SEGMENT_STARTED not in VALID_TRANSITIONS[existing.state if existing else None]:
            return IGNORED_INVALID_TRANSITION
        self._put_segment(row, existing, segment)
        for epoch, _ in segment.segment_leader_epochs:
            self._epochs.copy_started(row.tpid, epoch, segment.segment_id, segment.segment_size_in_bytes)
        return APPLIED

    def _update(self, row: PartitionRow, update: SegmentUpdate) -> ApplyResult:
        existing = self._segment(row.tpid, update.segment_id)
        if existing is None:  # Kafka drops it (before its cache is initialized) or logs RemoteResourceNotFound
            return IGNORED_UNKNOWN_SEGMENT
        target = update.state
        if target not in VALID_TRANSITIONS[existing.state]:  # logged and dropped
            return IGNORED_INVALID_TRANSITION
        if target is COPY_SEGMENT_STARTED:  # only an add may start a segment
            return handle_error("IllegalArgumentException")
        updated = SegmentMetadata(  # RemoteLogSegmentMetadata.createWithUpdates
            existing.tp,
            existing.segment_id,
            existing.start_offset,
            existing.end_offset,
            update.broker_id,
            existing.max_timestamp_ms,
            update.event_timestamp_ms,
            existing.segment_leader_epochs,
            existing.segment_size_in_bytes,
            update.custom_metadata,
            target,
            existing.txn_index_empty,
            existing.unknown_tags,
        )
        if target is COPY_SEGMENT_FINISHED:
            self._copy_segment_finished(row, existing, updated)
        elif target is DELETE_SEGMENT_STARTED:
            self._delete_segment_started(row, existing, updated)
        else:
            self._delete_segment_finished(row, existing, updated)
        return APPLIED

    def _copy_segment_finished(self, row: PartitionRow, existing: SegmentMetadata, updated: SegmentMetadata) -> None:
        # copied, so readable: each of its epochs maps the segment's start in it to the segment
        tpid = row.tpid
        finished_unreferenced_before = self._epochs.finished_unreferenced(tpid, existing)
        value = self._encode(tpid, updated)
        for epoch, start in updated.segment_leader_epochs:
            self._epochs.copy_finished(tpid, epoch, start, updated, value)
        self._epochs.move_finished_unreferenced(tpid, updated, finished_unreferenced_before)
        self._put_segment(row, existing, updated)

    def _delete_segment_started(self, row: PartitionRow, existing: SegmentMetadata, updated: SegmentMetadata) -> None:
        # being deleted, so no longer readable, but still listed so that a failed deletion is retried
        tpid = row.tpid
        finished_unreferenced_before = self._epochs.finished_unreferenced(tpid, existing)
        for epoch, start in updated.segment_leader_epochs:
            self._epochs.delete_started(tpid, epoch, start, existing)
        self._epochs.move_finished_unreferenced(tpid, updated, finished_unreferenced_before)
        self._put_segment(row, existing, updated)

    def _delete_segment_finished(self, row: PartitionRow, existing: SegmentMetadata, updated: SegmentMetadata) -> None:
        # deleted, the terminal state: the segment's metadata goes, and its ids with it from its epochs (ids that
        # other epochs still track, left there by a re-add with other epochs, remain without metadata)
        for epoch, _ in updated.segment_leader_epochs:
            self._epochs.delete_finished(row.tpid, epoch, updated.segment_id, updated.segment_size_in_bytes)
        self._put_segment(row, existing, None)

    # ---- RemotePartitionMetadataStore ----------------------------------------------------------

    def _partition_delete(self, row: PartitionRow, record: PartitionDelete) -> ApplyResult:
        if record.state is DELETE_PARTITION_FINISHED:
            # the partition's segments are all deleted: its cache and delete marker go
            self._drop_partition_data(row)
            row.removed, row.ready, row.delete_record = True, False, b""
        else:
            # the marker that a deletion of the partition is under way, kept for its cleanup
            row.delete_record = encode_value(record)
        return APPLIED

    def _drop_partition_data(self, row: PartitionRow) -> None:
        for cf in K.PER_PARTITION:
            self.kv.delete_prefix(cf, row.tpid)
        row.total_size = row.segment_count = row.orphans = 0
        self._epochs.forget(row.tpid)
        self._segments.forget(row.tpid)
        self._max_timestamps.forget(row.tpid)

    # ---- segments ------------------------------------------------------------------------------

    def _encode(self, tpid: bytes, segment: SegmentMetadata) -> bytes:
        """The segment's topic value, encoded once per version of the segment."""
        return self._segments.encode(tpid, segment.segment_id, segment)

    def _segment(self, tpid: bytes, segment_id: bytes) -> SegmentMetadata | None:
        return self._segments.metadata(tpid, segment_id)

    def _put_segment(self, row: PartitionRow, old: SegmentMetadata | None, new: SegmentMetadata | None) -> None:
        """Replace a segment's metadata (None = absent) and keep every aggregate that depends on it."""
        tpid = row.tpid
        some = old if old is not None else new
        assert some is not None
        segment_id = some.segment_id
        self._segments.set_metadata(tpid, segment_id, new)
        old_size = None if old is None else old.segment_size_in_bytes
        new_size = None if new is None else new.segment_size_in_bytes
        row.total_size += (new_size or 0) - (old_size or 0)
        row.segment_count += (new is not None) - (old is not None)
        old_entry = segment_max_timestamp_entry(old)
        new_entry = segment_max_timestamp_entry(new)
        if old_entry != new_entry:
            if old_entry is not None:
                self._max_timestamps.remove(tpid, old_entry)
            if new_entry is not None:
                self._max_timestamps.add(tpid, new_entry)
        if old_size == new_size:
            return
        if old is None and not row.orphans:  # a segment without metadata is tracked only as an orphan
            return
        if self._epochs.resize(tpid, segment_id, old_size, new_size) and (old is None) != (new is None):
            row.orphans += 1 if new is None else -1


def segment_max_timestamp_entry(segment: SegmentMetadata | None) -> bytes | None:
    """The segment's entry in the max-timestamp index, which holds the COPY_SEGMENT_FINISHED segments."""
    if segment is None or segment.state is not COPY_SEGMENT_FINISHED:
        return None
    return MT.entry(segment.max_timestamp_ms, segment.end_offset, segment.segment_id)
