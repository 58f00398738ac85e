"""A user partition's state as logical data, and back: the two directions of a snapshot.

``partition_state(kv, tp)`` reads what Kafka's structures hold for one partition (the partition row,
its segments, and per leader epoch the highest offset, the referenced entries and the unreferenced
set) from any ``ReadKV``. ``write_partition_state(kv, tp, state)`` writes exactly the rows the state
machine would have written for that state, derived indexes included (offset-index entries, txn,
breaks, inversions, max timestamp, timestamp trees, membership, epoch aggregates, orphans). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlmm.errors import StateError
from rlmm.records.model import PartitionDelete, SegmentMetadata, SegmentState, TopicIdPartition
from rlmm.records.serde import decode_value, encode_value
from rlmm.state import keys as K
from rlmm.state import timestamp_index
from rlmm.state.epoch_index import REFERENCED, UNREFERENCED, epoch_end, is_break, is_inversion
from rlmm.state.kv import ReadKV, WriteKV, scan
from rlmm.state.machine import decode_segment
from rlmm.state.maxtree import TreePages
from rlmm.state.rows import EpochRow, PartitionRow, RefEntry, pack_memberships


@dataclass(slots=True)
class EpochState:
    epoch: int
    highest_offset: int | None
    referenced: list[tuple[int, bytes]] = field(default_factory=list)  # (epoch start offset, segment id), ascending
    unreferenced: list[bytes] = field(default_factory=list)  # segment ids, ascending


@dataclass(slots=True)
class PartitionState:
    tp: TopicIdPartition
    assigned: bool
    ready: bool
    removed: bool
    last_applied_offset: int | None
    delete_record: PartitionDelete | None
    segments: list[SegmentMetadata] = field(default_factory=list)  # by segment id
    epochs: list[EpochState] = field(default_factory=list)  # by epoch

    def segment_count(self) -> int:
        return len(self.segments)


def partition_state(kv: ReadKV, tp: TopicIdPartition) -> PartitionState | None:
    raw = kv.get(K.PARTITIONS, K.tp_identity(tp))
    if raw is None:
        return None
    row = PartitionRow.unpack(raw)
    tpid = row.tpid
    segments = [decode_segment(v) for _, v in scan(kv, K.SEGMENTS, tpid)]
    epochs: dict[int, EpochState] = {}
    for key, value in scan(kv, K.EPOCHS, tpid):
        epoch = K.read_epoch(key, 4)
        epochs[epoch] = EpochState(epoch, EpochRow.unpack(value).highest_offset)
    for key, value in scan(kv, K.OFFSETS, tpid):
        epochs[K.read_epoch(key, 4)].referenced.append((K.read_offset(key, 8), RefEntry.unpack(value).segment_id))
    for key, _ in scan(kv, K.UNREFERENCED, tpid):
        epochs[K.read_epoch(key, 4)].unreferenced.append(key[8:])
    delete = decode_value(row.delete_record) if row.delete_record else None
    assert delete is None or isinstance(delete, PartitionDelete)
    return PartitionState(
        tp,
        row.assigned,
        row.ready,
        row.removed,
        row.last_applied_offset,
        delete,
        segments,
        [epochs[e] for e in sorted(epochs)],
    )


def partitions(kv: ReadKV) -> list[TopicIdPartition]:
    """Every partition a KV holds a row for, in key order."""
    return [K.tp_from_identity(k) for k, _ in scan(kv, K.PARTITIONS, b"")]


def allocate_tpid(kv: WriteKV) -> bytes:
    raw = kv.get(K.META, K.NEXT_TPID_KEY)
    tpid_int = 0 if raw is None else K.read_u32(raw)
    kv.put(K.META, K.NEXT_TPID_KEY, K.u32(tpid_int + 1))
    return K.u32(tpid_int)


def write_partition_state(kv: WriteKV, state: PartitionState, tpid: bytes | None = None) -> bytes:
    """Write the rows of a partition the KV does not hold yet; returns its tpid (allocated as the
    machine allocates it unless given)."""
    tp = state.tp
    if kv.get(K.PARTITIONS, K.tp_identity(tp)) is not None:
        raise StateError(f"partition {tp} is already in the view")
    if tpid is None:
        tpid = allocate_tpid(kv)
    kv.put(K.TP_BY_ID, tpid, K.tp_identity(tp))
    by_id: dict[bytes, SegmentMetadata] = {}
    encoded: dict[bytes, bytes] = {}
    for segment in state.segments:
        if segment.tp != tp:
            raise StateError(f"segment of {segment.tp} in partition {tp}")
        if segment.segment_id in by_id:
            raise StateError(f"segment {segment.segment_id.hex()} twice in partition {tp}")
        by_id[segment.segment_id] = segment
        value = encoded[segment.segment_id] = encode_value(segment)
        kv.put(K.SEGMENTS, tpid + segment.segment_id, value)
        if segment.state is SegmentState.COPY_SEGMENT_FINISHED:
            kv.put(
                K.MAX_TIMESTAMP,
                K.max_timestamp_key(tpid, segment.max_timestamp_ms, segment.end_offset, segment.segment_id),
                b"",
            )
    members: dict[bytes, dict[int, int]] = {}
    trees = TreePages(kv, K.TIMESTAMP_TREES)
    for es in state.epochs:
        epoch = es.epoch
        er = EpochRow(highest_offset=es.highest_offset)
        entries: list[tuple[int, RefEntry]] = []
        for start, segment_id in es.referenced:
            referenced = by_id.get(segment_id)
            if referenced is None or referenced.state is not SegmentState.COPY_SEGMENT_FINISHED:
                raise StateError(
                    f"epoch {epoch} of {tp} references segment {segment_id.hex()}, which is not a "
                    f"finished segment of the partition"
                )
            try:
                end = epoch_end(referenced, epoch)
            except KeyError:
                raise StateError(
                    f"epoch {epoch} of {tp} references segment {segment_id.hex()} outside its epochs"
                ) from None
            entries.append(
                (
                    start,
                    RefEntry(
                        segment_id,
                        end,
                        referenced.end_offset,
                        referenced.txn_index_empty,
                        referenced.segment_size_in_bytes,
                        referenced.start_offset,
                        encoded[segment_id],
                    ),
                )
            )
            flags = members.setdefault(segment_id, {})
            flags[epoch] = flags.get(epoch, 0) | REFERENCED
        entries.sort(key=lambda e: e[0])
        for i, (start, entry) in enumerate(entries):
            key = K.offset_key(tpid, epoch, start)
            kv.put(K.OFFSETS, key, entry.pack())
            if not entry.txn_index_empty:
                kv.put(K.TXN, key, b"")
            following = entries[i + 1] if i + 1 < len(entries) else None
            if is_break(entry, following):
                kv.put(K.BREAKS, key, b"")
            if is_inversion(entry, following):
                kv.put(K.INVERSIONS, key, b"")
            timestamp_index.reference(trees, tpid, epoch, start, by_id[entry.segment_id])
        if entries:
            er.first_key, er.last_key, er.last_end = entries[0][0], entries[-1][0], entries[-1][1].end_offset
        prefix = K.epoch_prefix(tpid, epoch)
        for segment_id in es.unreferenced:
            kv.put(K.UNREFERENCED, prefix + segment_id, b"")
            unreferenced = by_id.get(segment_id)
            if unreferenced is not None and unreferenced.state is SegmentState.COPY_SEGMENT_FINISHED:
                timestamp_index.add_finished_unreferenced(kv, tpid, epoch, unreferenced.start_offset, segment_id)
            flags = members.setdefault(segment_id, {})
            flags[epoch] = flags.get(epoch, 0) | UNREFERENCED
        er.unreferenced = len(es.unreferenced)
        for segment_id in [s for _, s in es.referenced] + list(es.unreferenced):
            er.members += 1
            member = by_id.get(segment_id)
            if member is None:
                er.dangling += 1
            else:
                er.size += member.segment_size_in_bytes
        kv.put(K.EPOCHS, prefix, er.pack())
    trees.flush()
    orphans = 0
    for segment_id, flags in members.items():
        kv.put(K.MEMBERSHIP, tpid + segment_id, pack_memberships(flags))
        orphans += segment_id not in by_id
    row = PartitionRow(
        tpid,
        state.assigned,
        state.ready,
        state.removed,
        state.last_applied_offset,
        sum(s.segment_size_in_bytes for s in state.segments),
        len(state.segments),
        orphans,
        b"" if state.delete_record is None else encode_value(state.delete_record),
    )
    kv.put(K.PARTITIONS, K.tp_identity(tp), row.pack())
    return tpid
