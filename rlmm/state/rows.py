"""Fixed-layout values stored in the view's column families."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rlmm.records.model import fast_constructor

_NONE = -(1 << 63)  # stands for "absent" in optional int64 fields (Kafka never stores Long.MIN_VALUE here)


def _opt(value: int | None) -> int:
    return _NONE if value is None else value


def _unopt(value: int) -> int | None:
    return None if value == _NONE else value


@dataclass(slots=True)
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

    _LAYOUT = struct.Struct(">4sBqqqq")

    def pack(self) -> bytes:
        flags = self.assigned | self.ready << 1 | self.removed << 2
        return self._LAYOUT.pack(
            self.tpid, flags, _opt(self.last_applied_offset), self.total_size, self.segment_count, self.orphans
        ) + self.delete_record

    @classmethod
    def unpack(cls, data: bytes) -> PartitionRow:
        tpid, flags, last, total, count, orphans = cls._LAYOUT.unpack_from(data)
        return cls(tpid, bool(flags & 1), bool(flags & 2), bool(flags & 4), _unopt(last), total, count, orphans,
                   data[cls._LAYOUT.size:])


@dataclass(slots=True)
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

    _LAYOUT = struct.Struct(">qqqqqIII")

    def pack(self) -> bytes:
        return self._LAYOUT.pack(_opt(self.highest_offset), _opt(self.first_key), _opt(self.last_key), self.last_end,
                                 self.size, self.members, self.dangling, self.unreferenced)

    @classmethod
    def unpack(cls, data: bytes) -> EpochRow:
        highest, first, last, last_end, size, members, dangling, unreferenced = cls._LAYOUT.unpack(data)
        return cls(_unopt(highest), _unopt(first), _unopt(last), last_end, size, members, dangling, unreferenced)


@dataclass(frozen=True, slots=True)
class RefEntry:
    """A referenced segment in an epoch's offset index, with what lookups and the txn chain need and
    the segment's topic value itself, so that a lookup is one seek. (A referenced segment is
    COPY_SEGMENT_FINISHED; its entry is rewritten whenever its metadata changes.)"""

    segment_id: bytes
    epoch_end: int  # last offset of this epoch inside the segment
    end_offset: int
    txn_index_empty: bool
    size: int  # segment_size_in_bytes
    value: bytes = b""

    _LAYOUT = struct.Struct(">16sqq?i")

    def pack(self) -> bytes:
        return self._LAYOUT.pack(self.segment_id, self.epoch_end, self.end_offset, self.txn_index_empty,
                                 self.size) + self.value

    @classmethod
    def unpack(cls, data: bytes) -> RefEntry:
        return new_ref_entry(*_REF_ENTRY.unpack_from(data), data[_REF_ENTRY.size:])


_REF_ENTRY = RefEntry._LAYOUT
_REF_EPOCH_END = struct.Struct(">16xq")  # after the segment id
new_ref_entry = fast_constructor(RefEntry)  # positional, every field: the hot paths' constructor


def ref_epoch_end(data: bytes) -> int:
    """``epoch_end`` of a packed RefEntry, without unpacking the rest."""
    return _REF_EPOCH_END.unpack_from(data)[0]


def ref_value(data: bytes) -> bytes:
    """``value`` of a packed RefEntry, without unpacking the rest."""
    return data[_REF_ENTRY.size:]


_MEMBERSHIP = struct.Struct(">iB")


def pack_memberships(members: dict[int, int]) -> bytes:
    """A segment's memberships: (epoch, flags) pairs, flags 1 = referenced, 2 = unreferenced."""
    return b"".join(_MEMBERSHIP.pack(epoch, flags) for epoch, flags in sorted(members.items()))


def unpack_memberships(data: bytes | None) -> dict[int, int]:
    return {} if data is None else dict(_MEMBERSHIP.iter_unpack(data))
