"""Kafka's ``RemoteLogMetadataTopicPartitioner``: which ``__remote_log_metadata`` partition holds the
metadata of a user partition. The topic name takes no part in the choice."""

from __future__ import annotations

import struct

_MASK = 0xFFFFFFFF
_TWO_LONGS = struct.Struct(">qq")
_UINT = struct.Struct(">I")


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit value."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    tail = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:tail]):
        k = (k * m) & _MASK
        k ^= k >> 24
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    return h ^ (h >> 15)


def _long_hash(v: int) -> int:
    """Java ``Long.hashCode`` as an unsigned 32-bit value."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return (u ^ (u >> 32)) & _MASK


def metadata_partition(topic_id: bytes, partition: int, num_metadata_partitions: int) -> int:
    if num_metadata_partitions < 1:
        raise ValueError(f"num_metadata_partitions must be at least 1, got {num_metadata_partitions}")
    if len(topic_id) != 16:
        raise ValueError(f"a topic id is 16 bytes, got {len(topic_id)}")
    if not -(1 << 31) <= partition < 1 << 31:
        raise ValueError(f"partition {partition} is not a Java int")
    msb, lsb = _TWO_LONGS.unpack(topic_id)
    # Objects.hash(lsb, msb, partition), 32-bit wrap
    h = (31 * (31 * (31 + _long_hash(lsb)) + _long_hash(msb)) + partition) & _MASK
    return (murmur2(_UINT.pack(h)) & 0x7FFFFFFF) % num_metadata_partitions
