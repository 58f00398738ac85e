"""Key layout of the view: one column family per index, big-endian keys that sort like the values.

A user partition (topic id, name, partition) is interned as a 4-byte ``tpid`` that prefixes every
per-partition key, so that removing a partition is one range delete per column family.
Signed ints are stored with the sign bit flipped so that byte order equals numeric order.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Callable
from typing import Final

from rlmm.compiled import native_module
from rlmm.records.model import TopicIdPartition

# column family names
META: Final = "meta"  # singletons: schema version, tpid counter, counters
PARTITIONS: Final = "partitions"  # tp identity -> PartitionRow
TP_BY_ID: Final = "tp_by_id"  # tpid -> tp identity
# tpid|segment id -> the epochs tracking the segment (the reverse of the offset index and the unreferenced set) and
# its topic value (api key 0 encoding; empty while it has no metadata): rlmm/state/rows.py, pack_segment_row
SEGMENTS: Final = "segments"
EPOCHS: Final = "epochs"  # tpid|epoch -> EpochRow
OFFSETS: Final = "offsets"  # tpid|epoch|epoch start offset -> RefEntry (Kafka's offsetToId)
UNREFERENCED: Final = "unreferenced"  # tpid|epoch|segment id -> b""
# tpid|epoch|epoch start offset -> b"" for the entries whose segment has a txn index and whose previous entry's has none
TXN: Final = "txn"
# tpid|epoch|epoch start offset -> b"" where the offset chain does not continue to the next entry
BREAKS: Final = "breaks"
# tpid[|max ts|end offset|segment id] -> a bucket of the (max ts, end offset, segment id) of the COPY_SEGMENT_FINISHED
# segments, from that one on (rlmm/state/max_timestamp.py)
MAX_TIMESTAMP: Final = "max_timestamp"
# tpid|epoch|level|node -> a page of the epoch's tree of maxima (rlmm/state/maxtree.py) over its offset index
# (max timestamp and end offset of each entry's segment); tpid|epoch|0xff -> the tree's top
TIMESTAMP_TREES: Final = "timestamp_trees"
# tpid|epoch|epoch start offset -> b"" where the next entry's segment starts before this entry's
INVERSIONS: Final = "inversions"
# tpid|epoch|start offset|segment id -> b"" for the unreferenced segments of an epoch that are COPY_SEGMENT_FINISHED
FINISHED_UNREFERENCED: Final = "finished_unreferenced"
METADATA_OFFSETS: Final = "metadata_offsets"  # metadata partition -> last consumed offset
QUARANTINE: Final = "quarantine"  # metadata partition|offset -> QuarantineEntry

COLUMN_FAMILIES: Final = (
    META,
    PARTITIONS,
    TP_BY_ID,
    SEGMENTS,
    EPOCHS,
    OFFSETS,
    UNREFERENCED,
    TXN,
    BREAKS,
    MAX_TIMESTAMP,
    TIMESTAMP_TREES,
    INVERSIONS,
    FINISHED_UNREFERENCED,
    METADATA_OFFSETS,
    QUARANTINE,
)
# column families whose keys start with a tpid and that a partition removal clears
PER_PARTITION: Final = (
    SEGMENTS,
    EPOCHS,
    OFFSETS,
    UNREFERENCED,
    TXN,
    BREAKS,
    MAX_TIMESTAMP,
    TIMESTAMP_TREES,
    INVERSIONS,
    FINISHED_UNREFERENCED,
)
# small indexes that queries seek in (nextSegmentWithTxnIndex, the listings, the timestamp descent's unreferenced
# segments): RocksDB compacts their level-0 files sooner (rlmm/state/rocks.py)
SEEK_INDEXES: Final = (UNREFERENCED, TXN, BREAKS, INVERSIONS, FINISHED_UNREFERENCED)
# column families whose table files hold their bloom filters whole, beside the block cache: the apply path's point
# reads there are mostly of keys not there (a new segment's id), which a partitioned filter makes dearer
# (rlmm/state/rocks.py, table_format)
HELD_FILTERS: Final = (SEGMENTS,)
# column families of older schema versions, opened to upgrade a view and dropped once it is
LEGACY_COLUMN_FAMILIES: Final = ("membership",)

_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_I32_FLIP: Final = 1 << 31
I64_FLIP: Final = 1 << 63
MAX_OFFSET: Final = (1 << 63) - 1
MIN_OFFSET: Final = -(1 << 63)
_TP_IDENTITY: Final = struct.Struct(">16si")
_EPOCH_KEY: Final = struct.Struct(">4sI")
_OFFSET_KEY: Final = struct.Struct(">4sIQ")
EPOCH_PREFIX_LEN: Final = _EPOCH_KEY.size  # an offset key is its epoch prefix and the offset

# the most frequent keys built in C first (rlmm/state/keys_native.pyx), which leaves what it is not sure of (None)
# to the reference below
_NATIVE: Final = native_module("rlmm.state.keys_native")
_native_epoch_prefix: Final[Callable[[bytes, int], bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.epoch_prefix
)
_native_offset_key: Final[Callable[[bytes, int, int], bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.offset_key
)
_native_floor_key: Final[Callable[[bytes, array, int], bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.floor_key
)

SCHEMA_VERSION_KEY: Final = b"schema_version"
NEXT_TPID_KEY: Final = b"next_tpid"


def tp_identity(tp: TopicIdPartition) -> bytes:
    return _TP_IDENTITY.pack(tp.topic_id, tp.partition) + tp.topic.encode("utf-8", "surrogatepass")


def tp_from_identity(data: bytes) -> TopicIdPartition:
    topic_id, partition = _TP_IDENTITY.unpack_from(data)
    return TopicIdPartition(topic_id, data[_TP_IDENTITY.size :].decode("utf-8", "surrogatepass"), partition)


def u32(value: int) -> bytes:
    return _U32.pack(value)


def read_u32(data: bytes, pos: int = 0) -> int:
    return _U32.unpack_from(data, pos)[0]


def offset_bytes(offset: int) -> bytes:
    return _U64.pack(offset + I64_FLIP)


def floor_key(prefix: bytes, starts: array, offset: int) -> bytes:
    """The offset-index key at or below ``offset`` in the epoch of ``prefix``, whose sorted start offsets are ``starts``
    (an ``array('q')``); the bare prefix, which is no key, where there is none."""
    if _native_floor_key is not None:
        key = _native_floor_key(prefix, starts, offset)
        if key is not None:
            return key
    return reference_floor_key(prefix, starts, offset)


def reference_floor_key(prefix: bytes, starts: array, offset: int) -> bytes:
    at = bisect_right(starts, offset)
    return prefix + offset_bytes(starts[at - 1]) if at else prefix


def read_offset(data: bytes, pos: int) -> int:
    return _U64.unpack_from(data, pos)[0] - I64_FLIP


def read_epoch(data: bytes, pos: int) -> int:
    return _U32.unpack_from(data, pos)[0] - _I32_FLIP


def epoch_prefix(tpid: bytes, epoch: int) -> bytes:
    if _native_epoch_prefix is not None:
        key = _native_epoch_prefix(tpid, epoch)
        if key is not None:
            return key
    return reference_epoch_prefix(tpid, epoch)


def reference_epoch_prefix(tpid: bytes, epoch: int) -> bytes:
    return _EPOCH_KEY.pack(tpid, epoch + _I32_FLIP)


def offset_key(tpid: bytes, epoch: int, offset: int) -> bytes:
    if _native_offset_key is not None:
        key = _native_offset_key(tpid, epoch, offset)
        if key is not None:
            return key
    return reference_offset_key(tpid, epoch, offset)


def reference_offset_key(tpid: bytes, epoch: int, offset: int) -> bytes:
    return _OFFSET_KEY.pack(tpid, epoch + _I32_FLIP, offset + I64_FLIP)


def quarantine_key(metadata_partition: int, offset: int) -> bytes:
    return _U32.pack(metadata_partition) + offset_bytes(offset)


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("a prefix of only 0xff bytes has no end")
    return stripped[:-1] + bytes([stripped[-1] + 1])
