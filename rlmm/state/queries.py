"""The RLMM read calls, each a point get or one seek plus a scan bounded by its answer, each answering from
one committed state (``CommitClock.read``) however many reads it takes.

Errors follow Kafka's RemotePartitionMetadataStore: a partition without a cache (never assigned or
removed by DELETE_PARTITION_FINISHED) raises RemoteResourceNotFound, one not yet initialized raises
ReplicaNotAvailable.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from typing import TypeVar

from rlmm.errors import KafkaStateError, RemoteResourceNotFound, ReplicaNotAvailable
from rlmm.records.model import SegmentMetadata, TopicIdPartition
from rlmm.records.uuid import uuid_to_str
from rlmm.state import keys as K
from rlmm.state import max_timestamp, timestamp_index
from rlmm.state.commit_clock import CommitClock
from rlmm.state.epoch_index import ref_entry
from rlmm.state.kv import Item, ReadKV, scan
from rlmm.state.lookup_memo import LookupMemo, Name
from rlmm.state.offset_cache import OffsetCache
from rlmm.state.rows import EpochRow, PartitionRow, RefEntry, ref_epoch_end, ref_value, segment_row_value
from rlmm.state.segment_rows import decode_segment, load_segment

T = TypeVar("T")
ROWS_KEPT = 100_000  # partition rows kept parsed


class Queries:
    def __init__(
        self,
        kv: ReadKV,
        offset_cache: OffsetCache | None = None,
        memo: LookupMemo | None = None,
        clock: CommitClock | None = None,
    ) -> None:
        """``offset_cache`` (over the same state as ``kv``) speeds up lookups, ``memo`` single lookups asked again
        (with the offset cache only); ``clock``: the one inside which the writer of ``kv`` publishes its commits
        (none: nothing commits while this reads)."""
        self.kv = kv
        self._clock = CommitClock() if clock is None else clock
        self.offset_cache = offset_cache
        self.memo = memo if offset_cache is not None else None
        # the row last read for each partition, with its key and the stored bytes it came from: a read-through
        # cache below returns the same bytes object until the partition's row changes
        self._rows: dict[TopicIdPartition, tuple[bytes, bytes, PartitionRow]] = {}

    def partition_row(self, tp: TopicIdPartition) -> PartitionRow | None:
        """The partition's row (shared between calls: not to be changed)."""
        known = self._rows.get(tp)
        key = K.tp_identity(tp) if known is None else known[0]
        raw = self.kv.get(K.PARTITIONS, key)
        if raw is None:
            return None
        if known is not None and known[1] is raw:
            return known[2]
        row = PartitionRow.unpack(raw)
        if len(self._rows) >= ROWS_KEPT:
            self._rows.clear()
        self._rows[tp] = (key, raw, row)
        return row

    def _ready_tpid(self, tp: TopicIdPartition) -> bytes:
        row = self.partition_row(tp)
        if row is None or not row.assigned or row.removed:
            raise RemoteResourceNotFound(f"No resource found for partition: {_describe(tp)}")
        if not row.ready:
            raise ReplicaNotAvailable(f"Remote log metadata cache is not initialized for partition: {_describe(tp)}")
        return row.tpid

    def _epoch_row(self, tpid: bytes, epoch: int) -> EpochRow | None:
        return self._epoch_row_at(K.epoch_prefix(tpid, epoch))

    def _epoch_row_at(self, prefix: bytes) -> EpochRow | None:
        raw = self.kv.get(K.EPOCHS, prefix)
        return None if raw is None else EpochRow.unpack(raw)

    def _floor(self, prefix: bytes, offset: int, er: EpochRow | None) -> Item | None:
        """The offset index's floor entry of ``offset`` in the epoch of ``prefix``. Offsets below the
        epoch's first entry are answered from the epoch row, without a seek through deleted entries."""
        if er is None or er.first_key is None or offset < er.first_key:
            return None
        return self.kv.floor(K.OFFSETS, prefix + K.offset_bytes(offset), prefix)

    def _lookup(self, tpid: bytes, epoch: int, offset: int, er: EpochRow | None) -> tuple[bytes, RefEntry] | None:
        """Kafka's remoteLogSegmentMetadata(epoch, offset) on the offset index: the floor entry, if the
        offset is within that segment's part of the epoch. The floor comes from the offset cache when it can
        answer (a bisection and a point read), from a seek otherwise."""
        prefix = K.epoch_prefix(tpid, epoch)
        floor = None if self.offset_cache is None else self.offset_cache.floor_entry(prefix, offset)
        return self._sought(prefix, offset, er) if floor is None else _within(floor, offset)

    def _sought(self, prefix: bytes, offset: int, er: EpochRow | None) -> tuple[bytes, RefEntry] | None:
        """``_lookup`` by a seek."""
        item = self._floor(prefix, offset, er)
        return None if item is None else _within(item, offset)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        row = self.partition_row(tp)  # one read
        return row is not None and row.assigned and row.ready and not row.removed

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch: int, offset: int) -> SegmentMetadata | None:
        value = self.remote_log_segment_value(tp, epoch, offset)
        return None if value is None else decode_segment(value)

    def known_segment_value(self, name: Name, epoch: int, offset: int) -> bytes | None:
        """``remote_log_segment_value``'s segment, if the memo holds it for the partition ``name`` (the request's
        fields, which ``remote_log_segment_value`` was given with its partition); None when it does not."""
        return None if self.memo is None else self.memo.find(name, epoch, offset)

    def remote_log_segment_value(
        self, tp: TopicIdPartition, epoch: int, offset: int, name: Name | None = None
    ) -> bytes | None:
        """``remote_log_segment_metadata``'s segment as its topic value (undecoded). The floor entry comes from
        the offset cache when there is one (a bisection, then the entry it kept or a point read, instead of a
        seek); a segment found so is kept in the memo under ``name``, if given, the request's fields that
        named ``tp`` (see ``known_segment_value``)."""
        # ``self._clock.read``, its first run written out: a call of the compiled query, no bound method and no
        # arguments' tuple (1,300 of the lookup's 10,300 instructions, callgrind)
        clock = self._clock
        generation, changes = clock.generation, clock.changes()
        if not (generation | changes) & 1:
            try:
                value = self._segment_value(tp, epoch, offset, name)
            except Exception:
                if clock.stood(generation, changes):
                    raise
            else:
                if clock.stood(generation, changes):
                    return value
        return clock.read_again(self._segment_value, (tp, epoch, offset, name))

    def _segment_value(self, tp: TopicIdPartition, epoch: int, offset: int, name: Name | None) -> bytes | None:
        memo = None if name is None else self.memo
        generation = 0 if memo is None else memo.generation
        tpid = self._ready_tpid(tp)
        if self.offset_cache is not None:
            prefix = K.epoch_prefix(tpid, epoch)
            floor = self.offset_cache.floor_entry(prefix, offset)
            if floor is not None:
                key, raw = floor
                if raw is None:
                    return None
                epoch_end = ref_epoch_end(raw)
                if offset > epoch_end:
                    return None
                value = ref_value(raw)
                if memo is not None and name is not None:
                    start = K.read_offset(key, K.EPOCH_PREFIX_LEN)
                    memo.keep(name, K.tp_identity(tp), prefix, start, epoch_end, value, generation)
                return value
        found = self._sought(K.epoch_prefix(tpid, epoch), offset, self._epoch_row(tpid, epoch))
        return None if found is None else found[1].value

    def segment_values(
        self,
        partitions: Sequence[TopicIdPartition],
        indexes: Sequence[int],
        epochs: Sequence[int],
        offsets: Sequence[int],
    ) -> tuple[list[bytes | KafkaStateError], list[bytes | None | KafkaStateError]]:
        """``remote_log_segment_metadata`` of lookups given in columns: lookup i is (``partitions[indexes[i]]``,
        ``epochs[i]``, ``offsets[i]``). Returns each partition's key in the view or the error its lookups fail
        with, and each lookup's segment as its topic value (undecoded) or its partition's error, all from one
        committed state. The floor entries come from the offset cache when there is one (seeks otherwise)."""
        return self._clock.read(self._segment_values, partitions, indexes, epochs, offsets)

    def _segment_values(
        self,
        partitions: Sequence[TopicIdPartition],
        indexes: Sequence[int],
        epochs: Sequence[int],
        offsets: Sequence[int],
    ) -> tuple[list[bytes | KafkaStateError], list[bytes | None | KafkaStateError]]:
        tpids = [self._ready_tpid_or_error(tp) for tp in partitions]
        answers: list = [tpids[p] for p in indexes]
        epoch_prefix = K.epoch_prefix
        asked = [i for i, tpid in enumerate(answers) if type(tpid) is bytes]
        asks = [(epoch_prefix(answers[i], epochs[i]), offsets[i]) for i in asked]
        entries = None if self.offset_cache is None else self.offset_cache.floor_entries(asks)
        if entries is None:
            entries = self._floor_entries(asks)
        for i, (_, offset), raw in zip(asked, asks, entries):
            answers[i] = None if raw is None or offset > ref_epoch_end(raw) else ref_value(raw)
        return tpids, answers

    def _ready_tpid_or_error(self, tp: TopicIdPartition) -> bytes | KafkaStateError:
        try:
            return self._ready_tpid(tp)
        except KafkaStateError as exc:
            return exc

    def _floor_entries(self, asks: Sequence[tuple[bytes, int]]) -> list[bytes | None]:
        """The raw floor entry of each (epoch prefix, offset), by seeks; each epoch row is read once."""
        rows: dict[bytes, EpochRow | None] = {}
        entries: list[bytes | None] = []
        for prefix, offset in asks:
            if prefix not in rows:
                rows[prefix] = self._epoch_row_at(prefix)
            item = self._floor(prefix, offset, rows[prefix])
            entries.append(None if item is None else item[1])
        return entries

    def highest_offset_for_epoch(self, tp: TopicIdPartition, epoch: int) -> int | None:
        return self._clock.read(self._highest_offset_for_epoch, tp, epoch)

    def _highest_offset_for_epoch(self, tp: TopicIdPartition, epoch: int) -> int | None:
        er = self._epoch_row(self._ready_tpid(tp), epoch)
        return None if er is None else er.highest_offset

    def list_remote_log_segments(self, tp: TopicIdPartition) -> Iterator[SegmentMetadata]:
        """Every segment not yet DELETE_SEGMENT_FINISHED, in segment-id order (Kafka: hash order). The partition
        is checked where the scan starts, whose iterator then reads that state, however long it is read. (The rows of
        ids that epochs track without metadata are passed over.)"""
        return _decoded_segments(self._clock.read(self._segment_items, tp))

    def _segment_items(self, tp: TopicIdPartition) -> Iterator[Item]:
        items = scan(self.kv, K.SEGMENTS, self._ready_tpid(tp))
        first = next(items, None)  # the store's iterator is made here
        return iter(()) if first is None else chain((first,), items)

    def list_epoch_segments(self, tp: TopicIdPartition, epoch: int) -> list[SegmentMetadata]:
        """Referenced and unreferenced segments of the epoch in Kafka's order: the offset index's
        order, re-sorted by start offset (stable) when unreferenced ones exist."""
        return self._clock.read(self._list_epoch_segments, tp, epoch)

    def _list_epoch_segments(self, tp: TopicIdPartition, epoch: int) -> list[SegmentMetadata]:
        tpid = self._ready_tpid(tp)
        er = self._epoch_row(tpid, epoch)
        if er is None or er.members == 0:
            return []
        if er.dangling:
            raise _dangling(tp, epoch)
        prefix = K.epoch_prefix(tpid, epoch)
        # an offset-index entry holds its segment's value, the same bytes as the segment's row (a referenced
        # segment is finished, and leaves the index at its next transition): the rows are not read again
        segments = [decode_segment(ref_value(raw)) for _, raw in scan(self.kv, K.OFFSETS, prefix)]
        if er.unreferenced:
            for key, _ in scan(self.kv, K.UNREFERENCED, prefix):
                segments.append(_present(load_segment(self.kv, tpid, key[len(prefix) :])))
            segments.sort(key=lambda s: s.start_offset)
        return segments

    def remote_log_size(self, tp: TopicIdPartition, epoch: int | None = None) -> int:
        """Bytes of the partition's segments (all, or those tracked under one epoch, as Kafka sums them)."""
        return self._clock.read(self._remote_log_size, tp, epoch)

    def _remote_log_size(self, tp: TopicIdPartition, epoch: int | None) -> int:
        tpid = self._ready_tpid(tp)
        if epoch is None:
            return _present(self.partition_row(tp)).total_size
        er = self._epoch_row(tpid, epoch)
        if er is None:
            return 0
        if er.dangling:
            raise _dangling(tp, epoch)
        return er.size

    def next_segment_with_txn_index(self, tp: TopicIdPartition, epoch: int, offset: int) -> SegmentMetadata | None:
        """Kafka's walk from the segment holding ``offset`` along end+1 within the epoch to the first
        segment with a non-empty txn index. A run of contiguous entries is crossed with one seek in the
        txn index and one in the chain-break index; only a break (or the epoch's last entry) costs a
        step of Kafka's walk."""
        return self._clock.read(self._next_segment_with_txn_index, tp, epoch, offset)

    def _next_segment_with_txn_index(self, tp: TopicIdPartition, epoch: int, offset: int) -> SegmentMetadata | None:
        tpid = self._ready_tpid(tp)
        er = self._epoch_row(tpid, epoch)
        prefix = K.epoch_prefix(tpid, epoch)
        found = self._lookup(tpid, epoch, offset, er)
        while found is not None and er is not None and er.last_key is not None:
            key, entry = found
            if not entry.txn_index_empty:
                return decode_segment(entry.value)
            stop = K.offset_key(tpid, epoch, er.last_key)
            chain_break = self.kv.ceiling(K.BREAKS, key, prefix)
            if chain_break is not None and chain_break[0] < stop:
                stop = chain_break[0]
            with_txn = self.kv.ceiling(K.TXN, key, prefix)
            if with_txn is not None and with_txn[0] <= stop:
                return decode_segment(ref_entry(self.kv, with_txn[0]).value)
            last_of_run = ref_entry(self.kv, stop)
            if last_of_run.end_offset >= K.MAX_OFFSET:
                return None
            found = self._lookup(tpid, epoch, last_of_run.end_offset + 1, er)
            if found is not None and found[0] <= stop:
                # the segment again, whose part of the epoch (up to the next epoch's start) runs past its end:
                # Kafka's walk would ask for the same offset for ever; no segment follows it in the epoch
                return None
        return None

    def first_segment_with_max_timestamp_at_least(
        self, tp: TopicIdPartition, epoch: int, timestamp: int, starting_offset: int
    ) -> SegmentMetadata | None:
        """The segment Kafka's findOffsetByTimestamp picks in one epoch: the first COPY_SEGMENT_FINISHED
        segment of ``list_epoch_segments(tp, epoch)`` with max timestamp >= ``timestamp`` and end offset >=
        ``starting_offset``, failing as that listing fails. The offset index's part comes from a descent of
        the epoch's tree of maxima (a seek per branching level); the unreferenced segments, when there are
        any, are read (see rlmm/state/timestamp_index.py). (The broker's own check of the segment against
        its leader-epoch cache is not part of the metadata and stays with the broker.)"""
        return self._clock.read(self._first_segment_with_max_timestamp_at_least, tp, epoch, timestamp, starting_offset)

    def _first_segment_with_max_timestamp_at_least(
        self, tp: TopicIdPartition, epoch: int, timestamp: int, starting_offset: int
    ) -> SegmentMetadata | None:
        tpid = self._ready_tpid(tp)
        er = self._epoch_row(tpid, epoch)
        if er is None or er.members == 0:
            return None
        if er.dangling:
            raise _dangling(tp, epoch)
        prefix = K.epoch_prefix(tpid, epoch)
        if er.unreferenced and self.kv.ceiling(K.INVERSIONS, prefix, prefix) is not None:
            listed = self._list_epoch_segments(tp, epoch)  # the order by start offset is not the index's
            return next((s for s in listed if timestamp_index.qualifies(s, timestamp, starting_offset)), None)
        found = timestamp_index.first_referenced(self.kv, tpid, epoch, timestamp, starting_offset)
        referenced = None if found is None else ref_entry(self.kv, K.offset_key(tpid, epoch, found))
        unreferenced = None
        for segment_id in timestamp_index.finished_unreferenced(self.kv, tpid, epoch) if er.unreferenced else ():
            segment = _present(load_segment(self.kv, tpid, segment_id))
            if timestamp_index.qualifies(segment, timestamp, starting_offset):
                unreferenced = segment
                break
        if referenced is not None and (unreferenced is None or referenced.start_offset <= unreferenced.start_offset):
            return decode_segment(referenced.value)
        return unreferenced

    def max_timestamp(self, tp: TopicIdPartition) -> SegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment with the largest max timestamp (ties: larger end offset)."""
        return self._clock.read(self._max_timestamp, tp)

    def _max_timestamp(self, tp: TopicIdPartition) -> SegmentMetadata | None:
        tpid = self._ready_tpid(tp)
        segment_id = max_timestamp.last_segment_id(self.kv, tpid)
        return None if segment_id is None else load_segment(self.kv, tpid, segment_id)


def _within(floor: tuple[bytes, bytes | None], offset: int) -> tuple[bytes, RefEntry] | None:
    """The floor entry (key, packed entry; None: no entry) if ``offset`` is within its segment's part of the epoch."""
    key, raw = floor
    if raw is None:
        return None
    entry = RefEntry.unpack(raw)
    return None if offset > entry.epoch_end else (key, entry)


def _present(value: T | None) -> T:
    """A row or segment that the view's indexes say exists."""
    assert value is not None
    return value


def _dangling(tp: TopicIdPartition, epoch: int) -> RemoteResourceNotFound:
    """How Kafka's listing of an epoch fails when it names a segment whose metadata is gone."""
    return RemoteResourceNotFound(
        f"No remote log segment metadata found for a segment of epoch {epoch} of {_describe(tp)}"
    )


def _describe(tp: TopicIdPartition) -> str:
    return f"{uuid_to_str(tp.topic_id)}:{tp.topic}-{tp.partition}"


def _decoded_segments(items: Iterator[Item]) -> Iterator[SegmentMetadata]:
    """The segments of segment rows, as they are read (a generator function: the compiled core makes a generator
    expression a list, which would read a whole partition's rows at once)."""
    for _, raw in items:
        value = segment_row_value(raw)
        if value:
            yield decode_segment(value)
