"""Key layout of the view: one column family per index, big-endian keys that sort like the values.

A user partition (topic id, name, partition) is interned as a 4-byte ``tpid`` that prefixes every
per-partition key, so that removing a partition is one range delete per column family.
Signed ints are stored with the sign bit flipped so that byte order equals numeric order.
"""

from __future__ import annotations

import struct

from rlmm.records.model import TopicIdPartition

# column family names
META = "meta"  # singletons: schema version, tpid counter, counters
PARTITIONS = "partitions"  # tp identity -> PartitionRow
TP_BY_ID = "tp_by_id"  # tpid -> tp identity
SEGMENTS = "segments"  # tpid|segment id -> topic value of the segment (api key 0 encoding)
EPOCHS = "epochs"  # tpid|epoch -> EpochRow
OFFSETS = "offsets"  # tpid|epoch|epoch start offset -> RefEntry (Kafka's offsetToId)
UNREFERENCED = "unreferenced"  # tpid|epoch|segment id -> b""
MEMBERSHIP = "membership"  # tpid|segment id -> the epochs tracking the segment (reverse of the two above)
TXN = "txn"  # tpid|epoch|epoch start offset -> b"" for referenced segments with a txn index
BREAKS = "breaks"  # tpid|epoch|epoch start offset -> b"" where the offset chain does not continue to the next entry
MAX_TIMESTAMP = "max_timestamp"  # tpid|max ts|end offset|segment id -> b"" for COPY_SEGMENT_FINISHED segments
METADATA_OFFSETS = "metadata_offsets"  # metadata partition -> last consumed offset
QUARANTINE = "quarantine"  # metadata partition|offset -> QuarantineEntry

COLUMN_FAMILIES = (
    META, PARTITIONS, TP_BY_ID, SEGMENTS, EPOCHS, OFFSETS, UNREFERENCED, MEMBERSHIP, TXN, BREAKS,
    MAX_TIMESTAMP, METADATA_OFFSETS, QUARANTINE,
)
# column families whose keys start with a tpid and that a partition removal clears
PER_PARTITION = (SEGMENTS, EPOCHS, OFFSETS, UNREFERENCED, MEMBERSHIP, TXN, BREAKS, MAX_TIMESTAMP)

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I32_FLIP = 1 << 31
_I64_FLIP = 1 << 63
MAX_OFFSET = (1 << 63) - 1
MIN_OFFSET = -(1 << 63)
_TP_IDENTITY = struct.Struct(">16si")
_EPOCH_KEY = struct.Struct(">4sI")
_OFFSET_KEY = struct.Struct(">4sIQ")
EPOCH_PREFIX_LEN = _EPOCH_KEY.size  # an offset key is its epoch prefix and the offset

SCHEMA_VERSION_KEY = b"schema_version"
NEXT_TPID_KEY = b"next_tpid"


def tp_identity(tp: TopicIdPartition) -> bytes:
    return _TP_IDENTITY.pack(tp.topic_id, tp.partition) + tp.topic.encode("utf-8", "surrogatepass")


def tp_from_identity(data: bytes) -> TopicIdPartition:
    topic_id, partition = _TP_IDENTITY.unpack_from(data)
    return TopicIdPartition(topic_id, data[_TP_IDENTITY.size:].decode("utf-8", "surrogatepass"), partition)


def u32(value: int) -> bytes:
    return _U32.pack(value)


def read_u32(data: bytes, pos: int = 0) -> int:
    return _U32.unpack_from(data, pos)[0]


def offset_bytes(offset: int) -> bytes:
    return _U64.pack(offset + _I64_FLIP)


def read_offset(data: bytes, pos: int) -> int:
    return _U64.unpack_from(data, pos)[0] - _I64_FLIP


def read_epoch(data: bytes, pos: int) -> int:
    return _U32.unpack_from(data, pos)[0] - _I32_FLIP


def epoch_prefix(tpid: bytes, epoch: int) -> bytes:
    return _EPOCH_KEY.pack(tpid, epoch + _I32_FLIP)


def offset_key(tpid: bytes, epoch: int, offset: int) -> bytes:
    return _OFFSET_KEY.pack(tpid, epoch + _I32_FLIP, offset + _I64_FLIP)


def max_timestamp_key(tpid: bytes, max_timestamp_ms: int, end_offset: int, segment_id: bytes) -> bytes:
    return tpid + offset_bytes(max_timestamp_ms) + offset_bytes(end_offset) + segment_id


def quarantine_key(metadata_partition: int, offset: int) -> bytes:
    return _U32.pack(metadata_partition) + offset_bytes(offset)


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("a prefix of only 0xff bytes has no end")
    return stripped[:-1] + bytes([stripped[-1] + 1])
