"""Fixed-layout values stored in the view's column families."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from rlmm.compiled import native_module

_PARTITION_ROW: Final = struct.Struct(">4sBqqqq")
_EPOCH_ROW: Final = struct.Struct(">qqqqqIII?")
_REF_ENTRY: Final = struct.Struct(">16sqq?iq")
_REF_ENTRY_SIZE: Final = _REF_ENTRY.size  # where a RefEntry's value starts (a constant: no attribute read per lookup)
_NONE: Final = -(1 << 63)  # stands for "absent" in optional int64 fields (Kafka never stores Long.MIN_VALUE here)


def _opt(value: int | None) -> int:
    return _NONE if value is None else value


def _unopt(value: int) -> int | None:
    return None if value == _NONE else value


# Constructors are written out (``init=False``): a dataclass's own stays interpreted when compiled.


@dataclass(slots=True, init=False)
class PartitionRow:
    """Per user partition: Kafka's cache existence/readiness, ConsumerTask's last applied offset,
    the partition delete marker, and aggregates over the partition's segments."""

    tpid: bytes
    assigned: bool = False
    ready: bool = False
    removed: bool = False  # metadata dropped by DELETE_PARTITION_FINISHED
    last_applied_offset: int | None = None
    total_size: int = 0  # sum of segment_size_in_bytes over the partition's segments
    segment_count: int = 0
    orphans: int = 0  # segments without metadata that epochs still track (Kafka's dangling ids)
    delete_record: bytes = b""  # topic value of the latest RemotePartitionDeleteMetadata, if any

    def __init__(
        self,
        tpid: bytes,
        assigned: bool = False,
        ready: bool = False,
        removed: bool = False,
        last_applied_offset: int | None = None,
        total_size: int = 0,
        segment_count: int = 0,
        orphans: int = 0,
        delete_record: bytes = b"",
    ) -> None:
        self.tpid = tpid
        self.assigned = assigned
        self.ready = ready
        self.removed = removed
        self.last_applied_offset = last_applied_offset
        self.total_size = total_size
        self.segment_count = segment_count
        self.orphans = orphans
        self.delete_record = delete_record

    def pack(self) -> bytes:
        flags = self.assigned | self.ready << 1 | self.removed << 2
        return (
            _PARTITION_ROW.pack(
                self.tpid, flags, _opt(self.last_applied_offset), self.total_size, self.segment_count, self.orphans
            )
            + self.delete_record
        )

    @classmethod
    def unpack(cls, data: bytes) -> PartitionRow:
        tpid, flags, last, total, count, orphans = _PARTITION_ROW.unpack_from(data)
        return cls(
            tpid,
            bool(flags & 1),
            bool(flags & 2),
            bool(flags & 4),
            _unopt(last),
            total,
            count,
            orphans,
            data[_PARTITION_ROW.size :],
        )


@dataclass(slots=True, init=False)
class EpochRow:
    """Per (partition, leader epoch): Kafka's RemoteLogLeaderEpochState summary.

    ``size`` and ``dangling`` aggregate over the epoch's members (referenced and unreferenced segment
    ids): the summed size of members whose metadata exists, and how many have none (Kafka then fails
    the epoch's listing)."""

    highest_offset: int | None = None
    first_key: int | None = None  # smallest epoch start offset in the offset index
    last_key: int | None = None  # greatest epoch start offset in the offset index
    last_end: int = 0  # end offset of the segment at last_key
    size: int = 0
    members: int = 0
    dangling: int = 0
    unreferenced: int = 0  # size of the unreferenced set
    last_txn: bool = False  # whether the segment at last_key has a transaction index

    def __init__(
        self,
        highest_offset: int | None = None,
        first_key: int | None = None,
        last_key: int | None = None,
        last_end: int = 0,
        size: int = 0,
        members: int = 0,
        dangling: int = 0,
        unreferenced: int = 0,
        last_txn: bool = False,
    ) -> None:
        self.highest_offset = highest_offset
        self.first_key = first_key
        self.last_key = last_key
        self.last_end = last_end
        self.size = size
        self.members = members
        self.dangling = dangling
        self.unreferenced = unreferenced
        self.last_txn = last_txn

    def pack(self) -> bytes:
        return _EPOCH_ROW.pack(
            _opt(self.highest_offset),
            _opt(self.first_key),
            _opt(self.last_key),
            self.last_end,
            self.size,
            self.members,
            self.dangling,
            self.unreferenced,
            self.last_txn,
        )

    @classmethod
    def unpack(cls, data: bytes) -> EpochRow:
        highest, first, last, last_end, size, members, dangling, unreferenced, last_txn = _EPOCH_ROW.unpack(data)
        return cls(
            _unopt(highest), _unopt(first), _unopt(last), last_end, size, members, dangling, unreferenced, last_txn
        )


def epoch_row_highest_offset(data: bytes) -> int | None:
    """``highest_offset`` of a packed EpochRow of any schema version (its first field in each)."""
    return _unopt(struct.unpack_from(">q", data)[0])


@dataclass(slots=True, init=False, unsafe_hash=True)
class RefEntry:
    """A referenced segment in an epoch's offset index, with what lookups and the txn chain need and
    the segment's topic value itself, so that a lookup is one seek. (A referenced segment is
    COPY_SEGMENT_FINISHED; its entry is rewritten whenever its metadata changes.)"""

    segment_id: bytes
    epoch_end: int  # last offset of this epoch inside the segment
    end_offset: int
    txn_index_empty: bool
    size: int  # segment_size_in_bytes
    start_offset: int  # the segment's (for the listing's order by start offset)
    value: bytes = b""

    def __init__(
        self,
        segment_id: bytes,
        epoch_end: int,
        end_offset: int,
        txn_index_empty: bool,
        size: int,
        start_offset: int,
        value: bytes = b"",
    ) -> None:
        self.segment_id = segment_id
        self.epoch_end = epoch_end
        self.end_offset = end_offset
        self.txn_index_empty = txn_index_empty
        self.size = size
        self.start_offset = start_offset
        self.value = value

    def pack(self) -> bytes:
        if _native_ref_entry is not None:
            packed = _native_ref_entry(
                self.segment_id,
                self.epoch_end,
                self.end_offset,
                self.txn_index_empty,
                self.size,
                self.start_offset,
                self.value,
            )
            if packed is not None:
                return packed
        return reference_ref_entry(
            self.segment_id,
            self.epoch_end,
            self.end_offset,
            self.txn_index_empty,
            self.size,
            self.start_offset,
            self.value,
        )

    @classmethod
    def unpack(cls, data: bytes) -> RefEntry:
        segment_id, epoch_end, end_offset, txn_index_empty, size, start_offset = _REF_ENTRY.unpack_from(data)
        return cls(segment_id, epoch_end, end_offset, txn_index_empty, size, start_offset, data[_REF_ENTRY_SIZE:])


_INT64: Final = struct.Struct(">q")
_REF_EPOCH_END_AT: Final = 16  # after the segment id
_NATIVE: Final = native_module("rlmm.state.keys_native")  # read in C first, when the core runs compiled
_native_read_int64: Final[Callable[[bytes, int], int | None] | None] = None if _NATIVE is None else _NATIVE.read_int64
_native_segment_row: Final[Callable[[dict[int, int], bytes], bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.segment_row
)
_native_ref_entry: Final[Callable[[bytes, int, int, bool, int, int, bytes], bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.ref_entry
)


def reference_ref_entry(
    segment_id: bytes,
    epoch_end: int,
    end_offset: int,
    txn_index_empty: bool,
    size: int,
    start_offset: int,
    value: bytes,
) -> bytes:
    return _REF_ENTRY.pack(segment_id, epoch_end, end_offset, txn_index_empty, size, start_offset) + value


def ref_epoch_end(data: bytes) -> int:
    """``epoch_end`` of a packed RefEntry, without unpacking the rest."""
    if _native_read_int64 is not None:
        value = _native_read_int64(data, _REF_EPOCH_END_AT)
        if value is not None:
            return value
    return reference_ref_epoch_end(data)


def reference_ref_epoch_end(data: bytes) -> int:
    return _INT64.unpack_from(data, _REF_EPOCH_END_AT)[0]


def ref_value(data: bytes) -> bytes:
    """``value`` of a packed RefEntry, without unpacking the rest."""
    return data[_REF_ENTRY_SIZE:]


REFERENCED: Final = 1  # membership flag: the id is in the epoch's offset index
UNREFERENCED: Final = 2  # membership flag: the id is in the epoch's unreferenced set
_MEMBERSHIP: Final = struct.Struct(">iB")
_MEMBERSHIP_COUNT: Final = struct.Struct(">I")
_ONE_MEMBERSHIP: Final = struct.Struct(">IiB")


def pack_segment_row(members: dict[int, int], value: bytes) -> bytes:
    """A segment's row: its memberships, (epoch, flags) pairs after their count (flags ``REFERENCED``,
    ``UNREFERENCED``), then its topic value (empty: an id that epochs track without metadata)."""
    if _native_segment_row is not None:
        row = _native_segment_row(members, value)
        if row is not None:
            return row
    return reference_segment_row(members, value)


def reference_segment_row(members: dict[int, int], value: bytes) -> bytes:
    if len(members) == 1:  # most segments lie in one epoch
        for epoch, flags in members.items():
            return _ONE_MEMBERSHIP.pack(1, epoch, flags) + value
    return (
        _MEMBERSHIP_COUNT.pack(len(members))
        + b"".join(_MEMBERSHIP.pack(epoch, flags) for epoch, flags in sorted(members.items()))
        + value
    )


def unpack_memberships(data: bytes) -> dict[int, int]:
    """The memberships of a packed segment row."""
    count = _MEMBERSHIP_COUNT.unpack_from(data)[0]
    if count == 1:
        _, epoch, flags = _ONE_MEMBERSHIP.unpack_from(data)
        return {epoch: flags}
    return {
        epoch: flags for epoch, flags in _MEMBERSHIP.iter_unpack(data[_MEMBERSHIP_COUNT.size : _value_start(count)])
    }


def segment_row_value(data: bytes) -> bytes:
    """The topic value of a packed segment row (empty: the segment has no metadata)."""
    return data[_value_start(_MEMBERSHIP_COUNT.unpack_from(data)[0]) :]


def _value_start(count: int) -> int:
    return _MEMBERSHIP_COUNT.size + count * _MEMBERSHIP.size
