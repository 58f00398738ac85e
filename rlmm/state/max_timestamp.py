"""The max-timestamp index: per partition, its COPY_SEGMENT_FINISHED segments in the order of (max timestamp, end
offset, segment id), whose last is ``maxTimestamp``'s answer.

The entries are kept in buckets, a row each, whose value is their entries in order. A bucket starts at an entry
whose segment id hashes to 0 modulo ``BUCKET`` (a boundary), is keyed by the partition's tpid and that entry, and
holds the entries from it to the next boundary; the entries before the first boundary are the partition's head
bucket, keyed by the tpid alone. So the buckets depend on the entries alone (a restore writes the rows the
transitions write), hold ``BUCKET`` entries on average, and the entries a batch adds to a partition in order go to
a row or two. The partition's last bucket is read with one seek, as its last entry was when each had a row.

The writer keeps each partition's last bucket (``tails``, which its only writer may keep across batches): a segment
whose entry comes after the others (an upload) finds its bucket without a seek. Every change is written to the KV
at once, so that a seek for another bucket reads the batch's changes.
"""

from __future__ import annotations

import struct
import zlib
from bisect import insort
from typing import Final, final

from rlmm.state import keys as K
from rlmm.state.kv import ReadKV, WriteKV, last

_ENTRY: Final = struct.Struct(">QQ16s")  # max timestamp and end offset (sign-flipped), segment id
ENTRY_SIZE: Final = _ENTRY.size
BUCKET: Final = 16  # entries per bucket, on average
TPID_LEN: Final = 4

# a partition's tpid -> its last bucket (key, entries), None while it has none
Tails = dict[bytes, tuple[bytes, list[bytes]] | None]


def entry(max_timestamp_ms: int, end_offset: int, segment_id: bytes) -> bytes:
    return _ENTRY.pack(max_timestamp_ms + K.I64_FLIP, end_offset + K.I64_FLIP, segment_id)


def is_boundary(entry: bytes) -> bool:
    """Whether the entry starts a bucket (crc32 of the segment id: the same in every process)."""
    return zlib.crc32(entry[ENTRY_SIZE - 16 :]) % BUCKET == 0


def _entries(value: bytes) -> list[bytes]:
    return [value[i : i + ENTRY_SIZE] for i in range(0, len(value), ENTRY_SIZE)]


@final
class MaxTimestampIndex:
    def __init__(self, kv: WriteKV, tails: Tails | None = None) -> None:
        self.kv = kv
        self.tails: Tails = {} if tails is None else tails

    def _tail(self, tpid: bytes) -> tuple[bytes, list[bytes]] | None:
        if tpid in self.tails:
            return self.tails[tpid]
        found = last(self.kv, K.MAX_TIMESTAMP, tpid)
        tail = self.tails[tpid] = None if found is None else (found[0], _entries(found[1]))
        return tail

    def _holder(self, tpid: bytes, entry: bytes) -> tuple[bytes, list[bytes]] | None:
        """The bucket where ``entry`` is or would go (the last bucket keyed at or below it), if any."""
        tail = self._tail(tpid)
        if tail is not None and tpid + entry >= tail[0]:
            return tail
        found = self.kv.floor(K.MAX_TIMESTAMP, tpid + entry, tpid)
        return None if found is None else (found[0], _entries(found[1]))

    def _write(self, key: bytes, entries: list[bytes], stored: bool) -> None:
        if entries:
            value = b"".join(entries)
            if stored:
                self.kv.put(K.MAX_TIMESTAMP, key, value)
            else:
                self.kv.put_new(K.MAX_TIMESTAMP, key, value)
        elif stored:
            self.kv.delete(K.MAX_TIMESTAMP, key)

    def _new_tail(self, tpid: bytes, key: bytes, entries: list[bytes]) -> None:
        """A bucket was written: the partition's last if it is keyed after the last one known."""
        tail = self.tails.get(tpid)
        if tpid in self.tails and (tail is None or key >= tail[0]):
            self.tails[tpid] = (key, entries) if entries else None

    def add(self, tpid: bytes, entry: bytes) -> None:
        """Add an entry the partition does not hold."""
        holder = self._holder(tpid, entry)
        if is_boundary(entry):
            moved: list[bytes] = []
            if holder is not None:
                key, entries = holder
                moved = [e for e in entries if e > entry]
                kept = [e for e in entries if e < entry]
                self._write(key, kept, True)
                self._new_tail(tpid, key, kept)
            self._write(tpid + entry, [entry, *moved], False)
            self._new_tail(tpid, tpid + entry, [entry, *moved])
        elif holder is None:
            self._write(tpid, [entry], False)  # the head, which no entry before it needed
            self._new_tail(tpid, tpid, [entry])
        else:
            key, entries = holder
            insort(entries, entry)
            self._write(key, entries, True)
            self._new_tail(tpid, key, entries)

    def remove(self, tpid: bytes, entry: bytes) -> None:
        """Remove an entry the partition holds."""
        holder = self._holder(tpid, entry)
        assert holder is not None, f"max-timestamp entry {entry.hex()} is not in the index"
        key, entries = holder
        entries.remove(entry)
        if key != tpid + entry:  # not the entry its bucket starts at
            self._write(key, entries, True)
            self._new_tail(tpid, key, entries)
            return
        # its bucket goes: the entries after it join the bucket before (the head, if none is)
        self._write(key, [], True)
        was_tail = self._tail(tpid)
        before = self.kv.floor(K.MAX_TIMESTAMP, key, tpid)  # the bucket's own row is deleted in the KV already
        if before is None:
            self._write(tpid, entries, False)
            merged = (tpid, entries)
        else:
            merged = (before[0], _entries(before[1]) + entries)
            self._write(merged[0], merged[1], True)
        if was_tail is not None and was_tail[0] == key:
            self.tails[tpid] = merged if merged[1] else None

    def forget(self, tpid: bytes) -> None:
        """The partition's rows were deleted."""
        self.tails.pop(tpid, None)


def write_index(kv: WriteKV, tpid: bytes, entries: list[bytes]) -> None:
    """The buckets of a partition the KV holds none of, for its entries (in order)."""
    key = tpid
    bucket: list[bytes] = []
    for entry in entries:
        if is_boundary(entry):
            if bucket:
                kv.put(K.MAX_TIMESTAMP, key, b"".join(bucket))
            key, bucket = tpid + entry, []
        bucket.append(entry)
    if bucket:
        kv.put(K.MAX_TIMESTAMP, key, b"".join(bucket))


def last_segment_id(kv: ReadKV, tpid: bytes) -> bytes | None:
    """The segment id of the partition's last entry (one seek)."""
    found = last(kv, K.MAX_TIMESTAMP, tpid)
    return None if found is None else found[1][-16:]
