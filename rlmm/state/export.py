"""A user partition's state as logical data, and back: the two directions of a snapshot.

``partition_state(kv, tp)`` reads what Kafka's structures hold for one partition (the partition row,
its segments, and per leader epoch the highest offset, the referenced entries and the unreferenced
set) from any ``ReadKV``. ``write_partition_state(kv, tp, state)`` writes exactly the rows the state
machine would have written for that state, derived indexes included: the partition's (segments, max timestamp,
orphans) here, each epoch's (offset-index entries, txn, breaks, inversions, timestamp trees, memberships, epoch
aggregates) by the machine's own ``EpochIndex``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rlmm.errors import StateError
from rlmm.records.model import COPY_SEGMENT_FINISHED, PartitionDelete, SegmentMetadata, TopicIdPartition
from rlmm.records.serde import decode_value, encode_value
from rlmm.state import keys as K
from rlmm.state import max_timestamp as MT
from rlmm.state.epoch_index import EpochIndex
from rlmm.state.kv import ReadKV, WriteKV, scan
from rlmm.state.machine import segment_max_timestamp_entry
from rlmm.state.quarantine import QuarantinedRecord
from rlmm.state.rows import PartitionRow, RefEntry, epoch_row_highest_offset, segment_row_value
from rlmm.state.segment_rows import SegmentRows, decode_segment


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


def partition_state(
    kv: ReadKV, tp: TopicIdPartition, segment_value: Callable[[bytes], bytes] = segment_row_value
) -> PartitionState | None:
    """``segment_value``: the topic value in a row of ``SEGMENTS`` (empty: none), which the rows of schema versions
    before 3 are (``rlmm.state.upgrade``)."""
    raw = kv.get(K.PARTITIONS, K.tp_identity(tp))
    if raw is None:
        return None
    row = PartitionRow.unpack(raw)
    tpid = row.tpid
    segments = [decode_segment(v) for v in (segment_value(raw) for _, raw in scan(kv, K.SEGMENTS, tpid)) if v]
    epochs: dict[int, EpochState] = {}
    for key, value in scan(kv, K.EPOCHS, tpid):
        epoch = K.read_epoch(key, 4)
        epochs[epoch] = EpochState(epoch, epoch_row_highest_offset(value))
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
    segment_rows = SegmentRows(kv)
    max_timestamps: list[bytes] = []
    for segment in state.segments:
        if segment.tp != tp:
            raise StateError(f"segment of {segment.tp} in partition {tp}")
        if segment.segment_id in by_id:
            raise StateError(f"segment {segment.segment_id.hex()} twice in partition {tp}")
        by_id[segment.segment_id] = segment
        segment_rows.set_metadata(tpid, segment.segment_id, segment)
        encoded[segment.segment_id] = segment_rows.encode(tpid, segment.segment_id, segment)
        max_timestamp = segment_max_timestamp_entry(segment)
        if max_timestamp is not None:
            max_timestamps.append(max_timestamp)
    MT.write_index(kv, tpid, sorted(max_timestamps))
    epochs = EpochIndex(kv, segment_rows)
    tracked: set[bytes] = set()
    for es in state.epochs:
        referenced: list[tuple[int, SegmentMetadata, bytes]] = []
        for start, segment_id in es.referenced:
            finished = by_id.get(segment_id)
            if finished is None or finished.state is not COPY_SEGMENT_FINISHED:
                raise StateError(
                    f"epoch {es.epoch} of {tp} references segment {segment_id.hex()}, which is not a "
                    f"finished segment of the partition"
                )
            if (es.epoch, start) not in finished.segment_leader_epochs:
                raise StateError(
                    f"epoch {es.epoch} of {tp} references segment {segment_id.hex()} at {start}, where the segment "
                    f"does not start that epoch"
                )
            referenced.append((start, finished, encoded[segment_id]))
        if len({s for _, s in es.referenced}) < len(es.referenced) or len(set(es.unreferenced)) < len(es.unreferenced):
            raise StateError(f"a segment twice in the offset index or the unreferenced set of epoch {es.epoch} of {tp}")
        epochs.write_epoch(tpid, es.epoch, es.highest_offset, referenced, [(s, by_id.get(s)) for s in es.unreferenced])
        tracked.update(segment_id for _, segment_id in es.referenced)
        tracked.update(es.unreferenced)
    epochs.flush()
    segment_rows.flush()
    row = PartitionRow(
        tpid,
        state.assigned,
        state.ready,
        state.removed,
        state.last_applied_offset,
        sum(s.segment_size_in_bytes for s in state.segments),
        len(state.segments),
        len(tracked - by_id.keys()),  # orphans: tracked segments without metadata
        b"" if state.delete_record is None else encode_value(state.delete_record),
    )
    kv.put(K.PARTITIONS, K.tp_identity(tp), row.pack())
    return tpid


def write_view_rows(
    kv: WriteKV, next_tpid: int, metadata_offsets: Mapping[int, int], quarantine: Iterable[QuarantinedRecord]
) -> None:
    """A restored view's rows besides its partitions': the next tpid, the consumed offsets, the quarantine."""
    kv.put(K.META, K.NEXT_TPID_KEY, K.u32(next_tpid))
    for mp, offset in metadata_offsets.items():
        kv.put(K.METADATA_OFFSETS, K.u32(mp), K.offset_bytes(offset))
    for q in quarantine:
        kv.put(K.QUARANTINE, K.quarantine_key(q.metadata_partition, q.offset), q.pack())
