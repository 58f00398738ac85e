"""Kafka's ``RemoteLogLeaderEpochState`` for every leader epoch in a KV, with the derived indexes the queries seek in.

Per (partition, leader epoch) Kafka keeps an offset index (the epoch's start offset in each COPY_SEGMENT_FINISHED
segment -> the segment), the unreferenced set (segments being copied, being deleted, or evicted from the offset
index) and the highest offset copied. ``EpochIndex`` keeps the same in the view's rows and, beside them:

* the epoch row's aggregates: the size and count of its members (referenced and unreferenced ids), how many of
  them have no metadata (Kafka's listing then fails), the offset index's first and last keys;
* membership: per segment, the epochs that track it and how (the reverse of the two sets), kept in the segment's row
  (rlmm/state/segment_rows.py);
* txn: the offset-index entries whose segment has a transaction index and whose previous entry's has none (the
  starts of the runs of such entries, which is where ``nextSegmentWithTxnIndex`` seeks from an entry without one);
* breaks: entries after which the offset chain does not continue at the next entry;
* the timestamp index (rlmm/state/timestamp_index.py): each epoch's tree of maxima over its offset index, the
  inversions of the offset index's order, the finished unreferenced segments.

The state machine changes it one transition at a time; a snapshot restore writes each epoch whole
(``write_epoch``) into the same rows.
"""

from __future__ import annotations

from typing import final

from rlmm.records.model import COPY_SEGMENT_FINISHED, SegmentMetadata
from rlmm.state import keys as K
from rlmm.state import timestamp_index as TI
from rlmm.state.kv import ReadKV, WriteKV
from rlmm.state.rows import REFERENCED, UNREFERENCED, EpochRow, RefEntry
from rlmm.state.segment_rows import SegmentRows
from rlmm.state.trees import TreeCache, new_tree_cache


def epoch_end(segment: SegmentMetadata, epoch: int) -> int:
    """Last offset of ``epoch`` inside the segment: next epoch's start - 1, or the segment's end."""
    epochs = segment.segment_leader_epochs
    for i, (e, _) in enumerate(epochs):
        if e == epoch:
            return epochs[i + 1][1] - 1 if i + 1 < len(epochs) else segment.end_offset
    raise KeyError(epoch)


def offset_entry(segment: SegmentMetadata, epoch: int, value: bytes) -> RefEntry:
    """A finished segment's entry in the offset index of one of its epochs (``value``: its topic value)."""
    return RefEntry(
        segment.segment_id,
        epoch_end(segment, epoch),
        segment.end_offset,
        segment.txn_index_empty,
        segment.segment_size_in_bytes,
        segment.start_offset,
        value,
    )


def ref_entry(kv: ReadKV, key: bytes) -> RefEntry:
    """An offset-index entry that the view's other indexes say exists."""
    raw = kv.get(K.OFFSETS, key)
    assert raw is not None, f"no offset-index entry {key.hex()}"
    return RefEntry.unpack(raw)


@final
class EpochIndex:
    """The epochs' state over a ``WriteKV``. Epoch rows are read once, kept as objects while a batch runs and
    written back by ``flush``, memberships likewise through ``segments`` (which its owner flushes), and the
    unreferenced sets' rows with them; the other rows are written as they change."""

    def __init__(
        self,
        kv: WriteKV,
        segments: SegmentRows,
        rows: dict[bytes, EpochRow] | None = None,
        tree_cache: TreeCache | None = None,
    ) -> None:
        """``segments``: the segments' rows, which hold their memberships; ``rows`` and ``tree_cache`` may be caches
        kept across batches by the only writer of the KV."""
        self.kv = kv
        self.segments = segments
        self._rows = {} if rows is None else rows  # tpid|epoch -> row
        self._dirty_rows: set[bytes] = set()
        self._last: dict[bytes, tuple[int, EpochRow]] = {}  # tpid -> the epoch it last asked for, and its row
        self._tree_pages = (new_tree_cache() if tree_cache is None else tree_cache).pages_over(kv, K.TIMESTAMP_TREES)

    def flush(self) -> None:
        """Write the cached rows back to the KV (the memberships are the segments' rows' to write)."""
        kv = self.kv
        for key in self._dirty_rows:
            kv.put(K.EPOCHS, key, self._rows[key].pack())
        self._tree_pages.flush()
        self._dirty_rows.clear()
        self._forget_last()

    def forget(self, tpid: bytes) -> None:
        """Drop what is cached of a partition whose rows were deleted."""
        self._tree_pages.forget(tpid)
        for key in [k for k in self._rows if k.startswith(tpid)]:
            del self._rows[key]
        self._dirty_rows = {k for k in self._dirty_rows if not k.startswith(tpid)}
        self._forget_last()

    def _forget_last(self) -> None:
        self._last.clear()

    def row(self, tpid: bytes, epoch: int) -> EpochRow:
        """The epoch's row, to be changed (written back by ``flush``; a new epoch gets a row). A record's transition
        asks for the same row several times, and the records of a partition mostly fall in one epoch while those of
        several partitions interleave: each partition's last row asked for is kept (and marked changed) until
        ``flush``, and found again by its tpid, whose hash Python keeps, without building the epoch's key."""
        last = self._last.get(tpid)
        if last is not None and last[0] == epoch:
            return last[1]
        key = K.epoch_prefix(tpid, epoch)
        er = self._rows.get(key)
        if er is None:
            raw = self.kv.get(K.EPOCHS, key)
            er = self._rows[key] = EpochRow() if raw is None else EpochRow.unpack(raw)
        self._dirty_rows.add(key)
        self._last[tpid] = (epoch, er)
        return er

    # ---- RemoteLogLeaderEpochState's handlers: one segment in one of its epochs ----------------------------------

    def copy_started(self, tpid: bytes, epoch: int, segment_id: bytes, size: int) -> None:
        # not readable until copied, but listed, so that a partition delete cleans it up
        self._unreferenced_add(self.row(tpid, epoch), tpid, epoch, segment_id, size)

    def copy_finished(self, tpid: bytes, epoch: int, start: int, segment: SegmentMetadata, value: bytes) -> None:
        """``start``: the segment's first offset in the epoch; ``value``: its topic value."""
        er = self.row(tpid, epoch)
        entry = offset_entry(segment, epoch, value)
        # A new leader may upload again what an earlier one, lagging, had uploaded: while the epoch's highest offset
        # is not beyond the new segment's end in the epoch, entries from its start on are superseded, and stay listed
        # unreferenced so that they are cleaned up. Otherwise an entry at the same start is overwritten.
        while (
            er.last_key is not None
            and er.last_key >= start
            and er.highest_offset is not None
            and er.highest_offset <= entry.epoch_end
        ):
            evicted = ref_entry(self.kv, K.offset_key(tpid, epoch, er.last_key))
            self._referenced_remove(er, tpid, epoch, er.last_key, evicted)
            self._unreferenced_add(er, tpid, epoch, evicted.segment_id, evicted.size)
            if evicted.segment_id != segment.segment_id:  # still finished, now unreferenced (its own move is later)
                TI.add_finished_unreferenced(self.kv, tpid, epoch, evicted.start_offset, evicted.segment_id)
        # copied, so readable: the offset index maps the segment's start in the epoch to it
        self._referenced_put(er, tpid, epoch, start, entry, segment)
        self._unreferenced_remove(er, tpid, epoch, segment.segment_id, segment.segment_size_in_bytes)
        # the highest offset copied never goes down
        if er.highest_offset is None or entry.epoch_end > er.highest_offset:
            er.highest_offset = entry.epoch_end

    def delete_started(self, tpid: bytes, epoch: int, start: int, segment: SegmentMetadata) -> None:
        """``segment``: its metadata before the transition."""
        er = self.row(tpid, epoch)
        segment_id = segment.segment_id
        # being deleted, so no longer readable: out of the offset index if it is there (at its start in the epoch,
        # written from this same metadata: a finished segment's offsets, size and txn flag never change)...
        if self.memberships(tpid, segment_id).get(epoch, 0) & REFERENCED:
            self._referenced_remove(er, tpid, epoch, start, offset_entry(segment, epoch, b""))
        # ...but listed, so that a failed deletion is retried
        self._unreferenced_add(er, tpid, epoch, segment_id, segment.segment_size_in_bytes)

    def delete_finished(self, tpid: bytes, epoch: int, segment_id: bytes, size: int) -> None:
        # deleted: nothing is left to clean up
        self._unreferenced_remove(self.row(tpid, epoch), tpid, epoch, segment_id, size)

    # ---- what spans a segment's epochs ----------------------------------------------------------------------------

    def finished_unreferenced(self, tpid: bytes, segment: SegmentMetadata) -> list[int]:
        """The epochs where the segment is listed as finished and unreferenced (none while it is not finished)."""
        if segment.state is not COPY_SEGMENT_FINISHED:
            return []
        return [epoch for epoch, flags in self.memberships(tpid, segment.segment_id).items() if flags & UNREFERENCED]

    def move_finished_unreferenced(self, tpid: bytes, segment: SegmentMetadata, before: list[int]) -> None:
        """The segment's transition is applied: it was finished and unreferenced in the epochs ``before``. (The
        epochs where it is left so: evicted there, or tracked under an epoch that a re-add with other epochs left
        behind.)"""
        if before or segment.state is COPY_SEGMENT_FINISHED:
            TI.move_finished_unreferenced(self.kv, tpid, segment, before, self.finished_unreferenced(tpid, segment))

    def resize(self, tpid: bytes, segment_id: bytes, old_size: int | None, new_size: int | None) -> bool:
        """The segment's size changes (None: its metadata is absent), and with it the aggregates of the epochs that
        track it; returns whether any does."""
        members = self.memberships(tpid, segment_id)
        for epoch, flags in members.items():
            er = self.row(tpid, epoch)
            count = _flag_count(flags)
            _add_contribution(er, old_size, -count)
            _add_contribution(er, new_size, count)
        return bool(members)

    # ---- a whole epoch ---------------------------------------------------------------------------------------------

    def write_epoch(
        self,
        tpid: bytes,
        epoch: int,
        highest_offset: int | None,
        referenced: list[tuple[int, SegmentMetadata, bytes]],
        unreferenced: list[tuple[bytes, SegmentMetadata | None]],
    ) -> None:
        """Write an epoch that the KV does not hold, with the rows its transitions would have written, and nothing
        else (a restore's KV may be write-only: reads give nothing, and each key is written once).
        ``referenced``: its offset index (start in the epoch, finished segment, the segment's topic value);
        ``unreferenced``: its unreferenced set (id, metadata if any)."""
        kv = self.kv
        row_key = K.epoch_prefix(tpid, epoch)
        er = self._rows[row_key] = EpochRow(highest_offset)
        self._forget_last()  # the epoch's row, if it was the last one asked for, is replaced
        self._dirty_rows.add(row_key)
        ordered = sorted(referenced, key=_start)
        entries = [(start, offset_entry(segment, epoch, value)) for start, segment, value in ordered]
        for i, (start, entry) in enumerate(entries):
            key = K.offset_key(tpid, epoch, start)
            following = entries[i + 1] if i + 1 < len(entries) else None
            kv.put(K.OFFSETS, key, entry.pack())
            if txn_start(entries[i - 1][1] if i else None, entry):
                kv.put(K.TXN, key, b"")
            if is_break(entry, following):
                kv.put(K.BREAKS, key, b"")
            if is_inversion(entry, following):
                kv.put(K.INVERSIONS, key, b"")
            TI.reference(self._tree_pages, row_key, start, ordered[i][1])
            self._membership(er, tpid, epoch, entry.segment_id, REFERENCED, True, entry.size)
        if entries:
            er.first_key, er.last_key, er.last_end = entries[0][0], entries[-1][0], entries[-1][1].end_offset
            er.last_txn = not entries[-1][1].txn_index_empty
        for segment_id, segment in unreferenced:
            self._unreferenced_add(
                er, tpid, epoch, segment_id, None if segment is None else segment.segment_size_in_bytes
            )
            if segment is not None and segment.state is COPY_SEGMENT_FINISHED:
                TI.add_finished_unreferenced(kv, tpid, epoch, segment.start_offset, segment_id)

    # ---- membership and the unreferenced set -----------------------------------------------------------------------

    def memberships(self, tpid: bytes, segment_id: bytes) -> dict[int, int]:
        """Epoch -> membership flags of one segment (cached for the batch, written back with the segment's row)."""
        return self.segments.members(tpid, segment_id)

    def _membership(
        self, er: EpochRow, tpid: bytes, epoch: int, segment_id: bytes, flag: int, on: bool, size: int | None
    ) -> bool:
        """Set or clear one membership flag of a segment in an epoch; returns whether it changed."""
        members = self.segments.members(tpid, segment_id)
        flags = members.get(epoch, 0)
        new_flags = flags | flag if on else flags & ~flag
        if new_flags == flags:
            return False
        if new_flags:
            members[epoch] = new_flags
        else:
            del members[epoch]
        self.segments.members_changed(tpid, segment_id)
        _add_contribution(er, size, 1 if on else -1)
        return True

    def _unreferenced_add(self, er: EpochRow, tpid: bytes, epoch: int, segment_id: bytes, size: int | None) -> None:
        if self._membership(er, tpid, epoch, segment_id, UNREFERENCED, True, size):
            er.unreferenced += 1

    def _unreferenced_remove(self, er: EpochRow, tpid: bytes, epoch: int, segment_id: bytes, size: int) -> None:
        if self._membership(er, tpid, epoch, segment_id, UNREFERENCED, False, size):
            er.unreferenced -= 1

    # ---- the offset index ------------------------------------------------------------------------------------------

    # The offset index's neighbours are found through the epoch row's first and last keys whenever
    # possible: appends and retention (removal of the oldest entry) then need no seek. Index entries
    # (txn, breaks, inversions) are written or deleted only when they change, so seeks never wade through
    # tombstones of keys that were never there.

    def _referenced_put(
        self, er: EpochRow, tpid: bytes, epoch: int, start: int, entry: RefEntry, segment: SegmentMetadata
    ) -> None:
        key = K.offset_key(tpid, epoch, start)
        prefix = key[: K.EPOCH_PREFIX_LEN]
        old = None
        appended_after_txn: bool | None = None  # for an append: whether the entry before it has a txn index
        if er.first_key is None or er.last_key is None:
            prev = nxt = None
            er.first_key = er.last_key = start
        elif start > er.last_key:  # an append, the common case: the previous last entry was no break
            if not (start == er.last_end + 1 and start <= entry.epoch_end):
                self.kv.put_new(K.BREAKS, K.offset_key(tpid, epoch, er.last_key), b"")
            # (the last entry's segment starts at or before its end: a segment that starts after it cannot start
            # before that one; not its start in the epoch, which a segment's epochs may place below its start)
            if (
                entry.start_offset <= er.last_end
                and ref_entry(self.kv, K.offset_key(tpid, epoch, er.last_key)).start_offset > entry.start_offset
            ):
                self.kv.put_new(K.INVERSIONS, K.offset_key(tpid, epoch, er.last_key), b"")
            prev = nxt = None
            appended_after_txn = er.last_txn
            er.last_key = start
        elif start < er.first_key:
            prev, nxt = None, (er.first_key, ref_entry(self.kv, K.offset_key(tpid, epoch, er.first_key)))
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
            er.last_txn = not entry.txn_index_empty
        if old is None:
            self.kv.put_new(K.OFFSETS, key, entry.pack())
        else:
            self.kv.put(K.OFFSETS, key, entry.pack())
            TI.unreference(self._tree_pages, prefix, start)
        TI.reference(self._tree_pages, prefix, start, segment)
        prev_entry = None if prev is None else prev[1]
        if appended_after_txn is not None:
            self._update_index(K.TXN, key, False, not entry.txn_index_empty and not appended_after_txn)
        else:
            self._update_index(K.TXN, key, old is not None and txn_start(prev_entry, old), txn_start(prev_entry, entry))
        if nxt is not None:
            self._update_index(
                K.TXN,
                K.offset_key(tpid, epoch, nxt[0]),
                txn_start(prev_entry if old is None else old, nxt[1]),
                txn_start(entry, nxt[1]),
            )
        self._update_index(K.BREAKS, key, old is not None and is_break(old, nxt), is_break(entry, nxt))
        self._update_index(K.INVERSIONS, key, old is not None and is_inversion(old, nxt), is_inversion(entry, nxt))
        if prev is not None:
            prev_key = K.offset_key(tpid, epoch, prev[0])
            prev_next_before = nxt if old is None else (start, old)
            self._update_index(
                K.BREAKS, prev_key, is_break(prev[1], prev_next_before), is_break(prev[1], (start, entry))
            )
            self._update_index(
                K.INVERSIONS, prev_key, is_inversion(prev[1], prev_next_before), is_inversion(prev[1], (start, entry))
            )
        self._membership(er, tpid, epoch, entry.segment_id, REFERENCED, True, entry.size)

    def _referenced_remove(self, er: EpochRow, tpid: bytes, epoch: int, start: int, entry: RefEntry) -> None:
        key = K.offset_key(tpid, epoch, start)
        prefix = key[: K.EPOCH_PREFIX_LEN]
        prev = None if start == er.first_key else self._neighbour_below(prefix, start)
        nxt = None
        if start == er.last_key:
            next_start, was_break, was_inversion = None, False, False
        elif start == er.first_key and self.kv.get(K.BREAKS, key) is None:
            # the first entry (retention's case) and no break: the next entry starts right after it, no seek
            next_start, was_break = entry.end_offset + 1, False
            was_inversion = self.kv.get(K.INVERSIONS, key) is not None
            if entry.txn_index_empty:  # the next entry, first now, leaves the txn index if it was there
                next_key = K.offset_key(tpid, epoch, next_start)
                if self.kv.get(K.TXN, next_key) is not None:
                    self.kv.delete(K.TXN, next_key)
        else:
            nxt = self._neighbour_above(prefix, start)
            next_start, was_break = None if nxt is None else nxt[0], is_break(entry, nxt)
            was_inversion = is_inversion(entry, nxt)
        self.kv.delete(K.OFFSETS, key)
        TI.unreference(self._tree_pages, prefix, start)
        prev_entry = None if prev is None else prev[1]
        self._update_index(K.TXN, key, txn_start(prev_entry, entry), False)
        if nxt is not None:
            self._update_index(
                K.TXN, K.offset_key(tpid, epoch, nxt[0]), txn_start(entry, nxt[1]), txn_start(prev_entry, nxt[1])
            )
        self._update_index(K.BREAKS, key, was_break, False)
        self._update_index(K.INVERSIONS, key, was_inversion, False)
        if start == er.first_key:
            er.first_key = next_start
        if start == er.last_key:
            er.last_key = None if prev is None else prev[0]
            er.last_end = 0 if prev is None else prev[1].end_offset
            er.last_txn = prev is not None and not prev[1].txn_index_empty
        if prev is not None:
            prev_key = K.offset_key(tpid, epoch, prev[0])
            self._update_index(K.BREAKS, prev_key, is_break(prev[1], (start, entry)), is_break(prev[1], nxt))
            self._update_index(
                K.INVERSIONS, prev_key, is_inversion(prev[1], (start, entry)), is_inversion(prev[1], nxt)
            )
        self._membership(er, tpid, epoch, entry.segment_id, REFERENCED, False, entry.size)

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


def txn_start(prev: RefEntry | None, entry: RefEntry) -> bool:
    """Whether an entry is in the txn index: its segment has a transaction index and the entry before it in the epoch
    has none. ``nextSegmentWithTxnIndex`` seeks there from an entry without one, and the first entry after that with
    one always starts such a run; an epoch whose segments all have one holds no row."""
    return prev is not None and prev.txn_index_empty and not entry.txn_index_empty


def is_break(entry: RefEntry, nxt: tuple[int, RefEntry] | None) -> bool:
    """Whether Kafka's txn walk, stepping from ``entry`` to the entry holding end+1, does not simply
    continue at the next entry. The last entry is no break: it ends every chain anyway."""
    return nxt is not None and not (nxt[0] == entry.end_offset + 1 and nxt[0] <= nxt[1].epoch_end)


def is_inversion(entry: RefEntry, nxt: tuple[int, RefEntry] | None) -> bool:
    """Whether the next entry's segment starts before this one's: the offset index's order is then not the
    order by start offset that Kafka's listing sorts into when the epoch has unreferenced segments."""
    return nxt is not None and nxt[1].start_offset < entry.start_offset


def _start(referenced: tuple[int, SegmentMetadata, bytes]) -> int:
    return referenced[0]


def _flag_count(flags: int) -> int:
    return (flags & REFERENCED) + ((flags & UNREFERENCED) >> 1)


def _add_contribution(er: EpochRow, size: int | None, count: int) -> None:
    """Add ``count`` members of the given size (None: members whose metadata is gone)."""
    er.members += count
    if size is None:
        er.dangling += count
    else:
        er.size += count * size
