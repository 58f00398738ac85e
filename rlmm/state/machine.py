"""Kafka's topic-based RLMM semantics as transitions over an ordered key-value store.

One ``StateMachine`` call handles one consumed record the way Kafka 4.3's ``ConsumerTask`` routes it
and ``RemotePartitionMetadataStore`` / ``RemoteLogMetadataCache`` / ``RemoteLogLeaderEpochState``
apply it, quirks included:

* an epoch's offset index maps the epoch's start offset in each COPY_SEGMENT_FINISHED segment to
  the segment; a finished segment evicts later-or-equal entries to the unreferenced set only while
  the epoch's highest offset is not above the new segment's epoch end, otherwise it silently
  overwrites an entry with the same start offset;
* the highest offset of an epoch never goes down;
* an update of an unknown segment and an invalid transition are dropped without error;
* an add of a segment whose metadata was deleted brings it back; ids left in an epoch whose metadata
  is gone make that epoch's listing fail.

Besides Kafka's own structures the machine keeps the derived indexes the queries seek in: per
epoch aggregates (size, members, members without metadata), the txn-index and chain-break indexes
for ``nextSegmentWithTxnIndex``, the max-timestamp index, and the timestamp index (a tree of maxima per
epoch, the inversions and the finished unreferenced segments: rlmm/state/timestamp_index.py). Every check
happens before the first write, so a refused record changes nothing.
"""

from __future__ import annotations

from typing import Final

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
from rlmm.records.serde import decode_value, encode_value
from rlmm.state import keys as K
from rlmm.state import timestamp_index as TI
from rlmm.state.kv import ReadKV, WriteKV
from rlmm.state.maxtree import Page, TreePages
from rlmm.state.results import (
    APPLIED,
    IGNORED_INVALID_TRANSITION,
    IGNORED_UNKNOWN_SEGMENT,
    SKIPPED_ALREADY_PROCESSED,
    SKIPPED_NOT_ASSIGNED,
    ApplyResult,
    handle_error,
)
from rlmm.state.rows import EpochRow, PartitionRow, RefEntry, pack_memberships, unpack_memberships

_S: Final = SegmentState
# RemoteLogSegmentState.isValidTransition: source state (None = unknown segment) -> allowed targets
VALID_TRANSITIONS: dict[SegmentState | None, frozenset[SegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset({_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}

REFERENCED: Final = 1  # membership flag: the id is in the epoch's offset index
UNREFERENCED: Final = 2  # membership flag: the id is in the epoch's unreferenced set

MARK_READY_ERROR: Final = "NullPointerException"  # Kafka's markInitialized on a partition without a cache


def epoch_end(segment: SegmentMetadata, epoch: int) -> int:
    """Last offset of ``epoch`` inside the segment: next epoch's start - 1, or the segment's end."""
    epochs = segment.segment_leader_epochs
    for i, (e, _) in enumerate(epochs):
        if e == epoch:
            return epochs[i + 1][1] - 1 if i + 1 < len(epochs) else segment.end_offset
    raise KeyError(epoch)


class StateMachine:
    """Applies records to a ``WriteKV`` (normally a ``StagedKV`` committed once per batch).

    A unit of work: partition rows, epoch rows, segments and consumed offsets are read once, kept as
    objects while the batch runs, and written back by ``flush`` (each once, however often it
    changed). The indexes (offsets, unreferenced, membership, txn, breaks, max timestamp) are written
    to the KV as they change.
    """

    def __init__(
        self,
        kv: WriteKV,
        rows: dict[TopicIdPartition, PartitionRow] | None = None,
        epochs: dict[bytes, EpochRow] | None = None,
        tree_pages: dict[bytes, Page] | None = None,
        tree_tops: dict[bytes, tuple[int, int] | None] | None = None,
    ) -> None:
        """``rows``, ``epochs``, ``tree_pages`` and ``tree_tops`` may be caches kept across batches by the only
        writer of the KV."""
        self.kv = kv
        self._tree_pages = TreePages(kv, K.TIMESTAMP_TREES, tree_pages, tree_tops)
        self._rows = {} if rows is None else rows
        self._epochs = {} if epochs is None else epochs  # tpid|epoch -> row
        self._dirty_rows: set[TopicIdPartition] = set()
        self._dirty_epochs: set[bytes] = set()
        self._segments: dict[bytes, SegmentMetadata | None] = {}  # tpid|segment id -> metadata (None: absent)
        self._dirty_segments: set[bytes] = set()
        self._encoded: dict[bytes, tuple[SegmentMetadata, bytes]] = {}  # tpid|segment id -> latest encoding
        self._members: dict[bytes, dict[int, int]] = {}  # tpid|segment id -> {epoch: membership flags}
        self._dirty_members: set[bytes] = set()
        self._consumed: dict[int, int] = {}  # metadata partition -> greatest offset consumed in this batch

    def flush(self) -> None:
        """Write the cached objects back to the KV."""
        kv = self.kv
        for tp in self._dirty_rows:
            kv.put(K.PARTITIONS, K.tp_identity(tp), self._rows[tp].pack())
        for key in self._dirty_epochs:
            kv.put(K.EPOCHS, key, self._epochs[key].pack())
        for key in self._dirty_segments:
            segment = self._segments[key]
            if segment is None:
                kv.delete(K.SEGMENTS, key)
            else:
                kv.put(K.SEGMENTS, key, self._encode(key[:4], segment))
        for key in self._dirty_members:
            members = self._members[key]
            if members:
                kv.put(K.MEMBERSHIP, key, pack_memberships(members))
            else:
                kv.delete(K.MEMBERSHIP, key)
        self._tree_pages.flush()
        for mp, offset in self._consumed.items():
            key = K.u32(mp)
            raw = kv.get(K.METADATA_OFFSETS, key)
            if raw is None or K.read_offset(raw, 0) < offset:
                kv.put(K.METADATA_OFFSETS, key, K.offset_bytes(offset))
        self._dirty_rows.clear()
        self._dirty_epochs.clear()
        self._segments.clear()
        self._dirty_segments.clear()
        self._encoded.clear()
        self._members.clear()
        self._dirty_members.clear()
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

    # ---- routing (ConsumerTask) ----------------------------------------------------------------

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
        if row.removed:
            return handle_error("IllegalStateException")
        if isinstance(record, SegmentMetadata):
            return self._add(row, record)
        if isinstance(record, SegmentUpdate):
            return self._update(row, record)
        return self._partition_delete(row, record)

    # ---- RemoteLogMetadataCache ----------------------------------------------------------------

    def _add(self, row: PartitionRow, segment: SegmentMetadata) -> ApplyResult:
        if segment.state is not _S.COPY_SEGMENT_STARTED:
            return handle_error("IllegalArgumentException")
        existing = self._segment(row.tpid, segment.segment_id)
        if _S.COPY_SEGMENT_STARTED not in VALID_TRANSITIONS[existing.state if existing else None]:
            return IGNORED_INVALID_TRANSITION
        self._put_segment(row, existing, segment)
        tpid = row.tpid
        for epoch, _ in segment.segment_leader_epochs:
            self._unreferenced_add(
                self._epoch(tpid, epoch), tpid, epoch, segment.segment_id, segment.segment_size_in_bytes
            )
        return APPLIED

    def _update(self, row: PartitionRow, update: SegmentUpdate) -> ApplyResult:
        existing = self._segment(row.tpid, update.segment_id)
        if existing is None:
            return IGNORED_UNKNOWN_SEGMENT
        target = update.state
        if target not in VALID_TRANSITIONS[existing.state]:
            return IGNORED_INVALID_TRANSITION
        if target is _S.COPY_SEGMENT_STARTED:
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
        tpid, segment_id, size = row.tpid, updated.segment_id, updated.segment_size_in_bytes
        was_finished = existing.state is _S.COPY_SEGMENT_FINISHED
        unreferenced_before = self._unreferenced_epochs(tpid, segment_id) if was_finished else []
        for epoch, start in updated.segment_leader_epochs:
            er = self._epoch(tpid, epoch)
            if target is _S.COPY_SEGMENT_FINISHED:
                self._copy_finished(er, tpid, epoch, start, updated)
            elif target is _S.DELETE_SEGMENT_STARTED:
                if self._memberships(tpid, segment_id).get(epoch, 0) & REFERENCED:
                    # the epoch's index holds the segment at its start in the epoch, as written from this
                    # same metadata: a FINISHED segment's offsets, size and txn flag never change
                    self._referenced_remove(
                        er,
                        tpid,
                        epoch,
                        start,
                        RefEntry(
                            segment_id,
                            epoch_end(existing, epoch),
                            existing.end_offset,
                            existing.txn_index_empty,
                            size,
                            existing.start_offset,
                        ),
                    )
                self._unreferenced_add(er, tpid, epoch, segment_id, size)
            else:
                self._unreferenced_remove(er, tpid, epoch, segment_id, size)
        if was_finished or target is _S.COPY_SEGMENT_FINISHED:
            # the epochs listing the segment unreferenced while it is finished: evicted there, or tracked under an
            # epoch that a re-add with other epochs left behind
            unreferenced_after = (
                self._unreferenced_epochs(tpid, segment_id) if target is _S.COPY_SEGMENT_FINISHED else []
            )
            TI.move_finished_unreferenced(self.kv, tpid, updated, unreferenced_before, unreferenced_after)
        self._put_segment(row, existing, None if target is _S.DELETE_SEGMENT_FINISHED else updated)
        return APPLIED

    def _unreferenced_epochs(self, tpid: bytes, segment_id: bytes) -> list[int]:
        return [epoch for epoch, flags in self._memberships(tpid, segment_id).items() if flags & UNREFERENCED]

    def _copy_finished(self, er: EpochRow, tpid: bytes, epoch: int, start: int, segment: SegmentMetadata) -> None:
        """RemoteLogLeaderEpochState.handleSegmentWithCopySegmentFinishedState."""
        end = epoch_end(segment, epoch)
        while (
            er.last_key is not None
            and er.last_key >= start
            and er.highest_offset is not None
            and er.highest_offset <= end
        ):
            evicted = self._ref(tpid, epoch, er.last_key)
            self._referenced_remove(er, tpid, epoch, er.last_key, evicted)
            self._unreferenced_add(er, tpid, epoch, evicted.segment_id, evicted.size)
            if evicted.segment_id != segment.segment_id:  # still finished, now unreferenced (_update moves its own)
                TI.add_finished_unreferenced(self.kv, tpid, epoch, evicted.start_offset, evicted.segment_id)
        entry = RefEntry(
            segment.segment_id,
            end,
            segment.end_offset,
            segment.txn_index_empty,
            segment.segment_size_in_bytes,
            segment.start_offset,
            self._encode(tpid, segment),
        )
        self._referenced_put(er, tpid, epoch, start, entry, segment)
        self._unreferenced_remove(er, tpid, epoch, segment.segment_id, segment.segment_size_in_bytes)
        if er.highest_offset is None or end > er.highest_offset:
            er.highest_offset = end

    # ---- RemotePartitionMetadataStore ----------------------------------------------------------

    def _partition_delete(self, row: PartitionRow, record: PartitionDelete) -> ApplyResult:
        if record.state is PartitionDeleteState.DELETE_PARTITION_FINISHED:
            self._drop_partition_data(row)
            row.removed, row.ready, row.delete_record = True, False, b""
        else:
            row.delete_record = encode_value(record)
        return APPLIED

    def _drop_partition_data(self, row: PartitionRow) -> None:
        for cf in K.PER_PARTITION:
            self.kv.delete_prefix(cf, row.tpid)
        row.total_size = row.segment_count = row.orphans = 0
        self._tree_pages.forget(row.tpid)
        for cache in (self._epochs, self._segments, self._members):
            for key in [k for k in cache if k.startswith(row.tpid)]:
                del cache[key]
        self._dirty_epochs = {k for k in self._dirty_epochs if not k.startswith(row.tpid)}
        self._dirty_segments = {k for k in self._dirty_segments if not k.startswith(row.tpid)}
        self._dirty_members = {k for k in self._dirty_members if not k.startswith(row.tpid)}

    # ---- segments ------------------------------------------------------------------------------

    def _encode(self, tpid: bytes, segment: SegmentMetadata) -> bytes:
        """The segment's topic value, encoded once per version of the segment."""
        key = tpid + segment.segment_id
        cached = self._encoded.get(key)
        if cached is None or cached[0] is not segment:
            cached = self._encoded[key] = (segment, encode_value(segment))
        return cached[1]

    def _segment(self, tpid: bytes, segment_id: bytes) -> SegmentMetadata | None:
        key = tpid + segment_id
        segments = self._segments
        if key in segments:  # (not try/except KeyError: a compiled raise costs a traceback)
            return segments[key]
        segment = segments[key] = load_segment(self.kv, tpid, segment_id)
        return segment

    def _put_segment(self, row: PartitionRow, old: SegmentMetadata | None, new: SegmentMetadata | None) -> None:
        """Replace a segment's metadata (None = absent) and keep every aggregate that depends on it."""
        tpid = row.tpid
        some = old if old is not None else new
        assert some is not None
        segment_id = some.segment_id
        self._segments[tpid + segment_id] = new
        self._dirty_segments.add(tpid + segment_id)
        old_size = None if old is None else old.segment_size_in_bytes
        new_size = None if new is None else new.segment_size_in_bytes
        row.total_size += (new_size or 0) - (old_size or 0)
        row.segment_count += (new is not None) - (old is not None)
        old_ts_key = _max_timestamp_key(tpid, old)
        new_ts_key = _max_timestamp_key(tpid, new)
        if old_ts_key != new_ts_key:
            if old_ts_key is not None:
                self.kv.delete(K.MAX_TIMESTAMP, old_ts_key)
            if new_ts_key is not None:
                self.kv.put_new(K.MAX_TIMESTAMP, new_ts_key, b"")
        if old_size == new_size:
            return
        if old is None and not row.orphans:
            self._members[tpid + segment_id] = {}  # a segment without metadata is tracked only as an orphan
            return
        members = self._memberships(tpid, segment_id)
        for epoch, flags in members.items():
            er = self._epoch(tpid, epoch)
            count = _flag_count(flags)
            _add_contribution(er, old_size, -count)
            _add_contribution(er, new_size, count)
        if members and (old is None) != (new is None):
            row.orphans += 1 if new is None else -1

    # ---- epoch state ---------------------------------------------------------------------------

    def _epoch(self, tpid: bytes, epoch: int) -> EpochRow:
        """The epoch's row, to be changed (it is written back by ``flush``)."""
        key = K.epoch_prefix(tpid, epoch)
        er = self._epochs.get(key)
        if er is None:
            raw = self.kv.get(K.EPOCHS, key)
            er = self._epochs[key] = EpochRow() if raw is None else EpochRow.unpack(raw)
        self._dirty_epochs.add(key)
        return er

    def _memberships(self, tpid: bytes, segment_id: bytes) -> dict[int, int]:
        """Epoch -> membership flags of one segment (cached for the batch, written back by ``flush``)."""
        key = tpid + segment_id
        members = self._members.get(key)
        if members is None:
            members = self._members[key] = unpack_memberships(self.kv.get(K.MEMBERSHIP, key))
        return members

    def _membership(
        self, er: EpochRow, tpid: bytes, epoch: int, segment_id: bytes, flag: int, on: bool, size: int | None
    ) -> bool:
        """Set or clear one membership flag of a segment in an epoch; returns whether it changed."""
        members = self._memberships(tpid, segment_id)
        flags = members.get(epoch, 0)
        new_flags = flags | flag if on else flags & ~flag
        if new_flags == flags:
            return False
        if new_flags:
            members[epoch] = new_flags
        else:
            del members[epoch]
        self._dirty_members.add(tpid + segment_id)
        _add_contribution(er, size, 1 if on else -1)
        return True

    def _unreferenced_add(self, er: EpochRow, tpid: bytes, epoch: int, segment_id: bytes, size: int) -> None:
        if self._membership(er, tpid, epoch, segment_id, UNREFERENCED, True, size):
            self.kv.put_new(K.UNREFERENCED, K.epoch_prefix(tpid, epoch) + segment_id, b"")
            er.unreferenced += 1

    def _unreferenced_remove(self, er: EpochRow, tpid: bytes, epoch: int, segment_id: bytes, size: int) -> None:
        if self._membership(er, tpid, epoch, segment_id, UNREFERENCED, False, size):
            self.kv.delete(K.UNREFERENCED, K.epoch_prefix(tpid, epoch) + segment_id)
            er.unreferenced -= 1

    # The offset index's neighbours are found through the epoch row's first and last keys whenever
    # possible: appends and retention (removal of the oldest entry) then need no seek. Index entries
    # (txn, breaks) are written or deleted only when they change, so seeks never wade through
    # tombstones of keys that were never there.

    def _referenced_put(
        self, er: EpochRow, tpid: bytes, epoch: int, start: int, entry: RefEntry, segment: SegmentMetadata
    ) -> None:
        prefix = K.epoch_prefix(tpid, epoch)
        key = K.offset_key(tpid, epoch, start)
        old = None
        if er.first_key is None or er.last_key is None:
            prev = nxt = None
            er.first_key = er.last_key = start
        elif start > er.last_key:  # an append, the common case: the previous last entry was no break
            if not (start == er.last_end + 1 and start <= entry.epoch_end):
                self.kv.put_new(K.BREAKS, K.offset_key(tpid, epoch, er.last_key), b"")
            # (the last entry's segment starts at or before its start in the epoch)
            if (
                entry.start_offset <= er.last_key
                and self._ref(tpid, epoch, er.last_key).start_offset > entry.start_offset
            ):
                self.kv.put_new(K.INVERSIONS, K.offset_key(tpid, epoch, er.last_key), b"")
            prev = nxt = None
            er.last_key = start
        elif start < er.first_key:
            prev, nxt = None, (er.first_key, self._ref(tpid, epoch, er.first_key))
            er.first_key = start
        else:
            raw = self.kv.get(K.OFFSETS, key)
            old = None if raw is None else RefEntry.unpack(raw)
            if old is not None and old.segment_id != entry.segment_id:
                self._membership(er, tpid, epoch, old.segment_id, REFERENCED, False, old.size)
            prev = None if start == er.first_key else self._neighbour_below(prefix, start)
            nxt = None if start == er.last_key else self._neighbour_above(prefix, start)
        if start == er.last_key:
            er.last_end = entry.end_offset
        if old is None:
            self.kv.put_new(K.OFFSETS, key, entry.pack())
        else:
            self.kv.put(K.OFFSETS, key, entry.pack())
            TI.unreference(self._tree_pages, tpid, epoch, start)
        TI.reference(self._tree_pages, tpid, epoch, start, segment)
        self._update_index(K.TXN, key, old is not None and not old.txn_index_empty, not entry.txn_index_empty)
        self._update_index(K.BREAKS, key, old is not None and _is_break(old, nxt), _is_break(entry, nxt))
        self._update_index(K.INVERSIONS, key, old is not None and _is_inversion(old, nxt), _is_inversion(entry, nxt))
        if prev is not None:
            prev_key = K.offset_key(tpid, epoch, prev[0])
            prev_next_before = nxt if old is None else (start, old)
            self._update_index(
                K.BREAKS, prev_key, _is_break(prev[1], prev_next_before), _is_break(prev[1], (start, entry))
            )
            self._update_index(
                K.INVERSIONS, prev_key, _is_inversion(prev[1], prev_next_before), _is_inversion(prev[1], (start, entry))
            )
        self._membership(er, tpid, epoch, entry.segment_id, REFERENCED, True, entry.size)

    def _referenced_remove(self, er: EpochRow, tpid: bytes, epoch: int, start: int, entry: RefEntry) -> None:
        prefix = K.epoch_prefix(tpid, epoch)
        key = K.offset_key(tpid, epoch, start)
        prev = None if start == er.first_key else self._neighbour_below(prefix, start)
        nxt = None
        if start == er.last_key:
            next_start, was_break, was_inversion = None, False, False
        elif start == er.first_key and self.kv.get(K.BREAKS, key) is None:
            # the first entry (retention's case) and no break: the next entry starts right after it, no seek
            next_start, was_break = entry.end_offset + 1, False
            was_inversion = self.kv.get(K.INVERSIONS, key) is not None
        else:
            nxt = self._neighbour_above(prefix, start)
            next_start, was_break = None if nxt is None else nxt[0], _is_break(entry, nxt)
            was_inversion = _is_inversion(entry, nxt)
        self.kv.delete(K.OFFSETS, key)
        TI.unreference(self._tree_pages, tpid, epoch, start)
        self._update_index(K.TXN, key, not entry.txn_index_empty, False)
        self._update_index(K.BREAKS, key, was_break, False)
        self._update_index(K.INVERSIONS, key, was_inversion, False)
        if start == er.first_key:
            er.first_key = next_start
        if start == er.last_key:
            er.last_key = None if prev is None else prev[0]
            er.last_end = 0 if prev is None else prev[1].end_offset
        if prev is not None:
            prev_key = K.offset_key(tpid, epoch, prev[0])
            self._update_index(K.BREAKS, prev_key, _is_break(prev[1], (start, entry)), _is_break(prev[1], nxt))
            self._update_index(
                K.INVERSIONS, prev_key, _is_inversion(prev[1], (start, entry)), _is_inversion(prev[1], nxt)
            )
        self._membership(er, tpid, epoch, entry.segment_id, REFERENCED, False, entry.size)

    def _ref(self, tpid: bytes, epoch: int, start: int) -> RefEntry:
        return ref_entry(self.kv, K.offset_key(tpid, epoch, start))

    def _neighbour_below(self, prefix: bytes, start: int) -> tuple[int, RefEntry] | None:
        if start == K.MIN_OFFSET:
            return None
        found = self.kv.floor(K.OFFSETS, prefix + K.offset_bytes(start - 1), prefix)
        return None if found is None else (K.read_offset(found[0], 8), RefEntry.unpack(found[1]))

    def _neighbour_above(self, prefix: bytes, start: int) -> tuple[int, RefEntry] | None:
        if start == K.MAX_OFFSET:
            return None
        found = self.kv.ceiling(K.OFFSETS, prefix + K.offset_bytes(start + 1), prefix)
        return None if found is None else (K.read_offset(found[0], 8), RefEntry.unpack(found[1]))

    def _update_index(self, cf: str, key: bytes, was: bool, now: bool) -> None:
        if now and not was:
            self.kv.put_new(cf, key, b"")
        elif was and not now:
            self.kv.delete(cf, key)


def _is_break(entry: RefEntry, nxt: tuple[int, RefEntry] | None) -> bool:
    """Whether Kafka's txn walk, stepping from ``entry`` to the entry holding end+1, does not simply
    continue at the next entry. The last entry is no break: it ends every chain anyway."""
    return nxt is not None and not (nxt[0] == entry.end_offset + 1 and nxt[0] <= nxt[1].epoch_end)


def _is_inversion(entry: RefEntry, nxt: tuple[int, RefEntry] | None) -> bool:
    """Whether the next entry's segment starts before this one's: the offset index's order is then not the
    order by start offset that Kafka's listing sorts into when the epoch has unreferenced segments."""
    return nxt is not None and nxt[1].start_offset < entry.start_offset


def _flag_count(flags: int) -> int:
    return (flags & REFERENCED) + ((flags & UNREFERENCED) >> 1)


def _add_contribution(er: EpochRow, size: int | None, count: int) -> None:
    """Add ``count`` members of the given size (None: members whose metadata is gone)."""
    er.members += count
    if size is None:
        er.dangling += count
    else:
        er.size += count * size


def _max_timestamp_key(tpid: bytes, segment: SegmentMetadata | None) -> bytes | None:
    if segment is None or segment.state is not _S.COPY_SEGMENT_FINISHED:
        return None
    return K.max_timestamp_key(tpid, segment.max_timestamp_ms, segment.end_offset, segment.segment_id)


def ref_entry(kv: ReadKV, key: bytes) -> RefEntry:
    """An offset-index entry that the view's other indexes say exists."""
    raw = kv.get(K.OFFSETS, key)
    assert raw is not None, f"no offset-index entry {key.hex()}"
    return RefEntry.unpack(raw)


def load_segment(kv: ReadKV, tpid: bytes, segment_id: bytes) -> SegmentMetadata | None:
    raw = kv.get(K.SEGMENTS, tpid + segment_id)
    return None if raw is None else decode_segment(raw)


def decode_segment(value: bytes) -> SegmentMetadata:
    """A segment's topic value as the view stores it."""
    segment = decode_value(value)
    assert isinstance(segment, SegmentMetadata)
    return segment
