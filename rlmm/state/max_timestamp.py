"""The max-timestamp index: per partition, its COPY_SEGMENT_FINISHED segments in the order of (max timestamp, end
offset, segment id), whose last is ``maxTimestamp``'s answer.

The entries are kept in buckets, a row each, whose value is their entries in order. The entries whose segment id
hashes to 0 modulo ``BUCKET`` (boundaries) cut them: a bucket holds the entries from one boundary (or the first entry)
up to the next boundary, and is keyed by the partition's tpid and that next boundary; the last bucket, from the last
boundary on, by the tpid and ``LAST`` (after every entry). So the buckets depend on the entries alone (a restore
writes the rows the transitions write), hold ``BUCKET`` entries on average, and the entries a batch adds to a
partition in order go to a row or two. ``maxTimestamp`` reads the last bucket with a point read (its last entry),
and a change finds its bucket with a forward seek (the first key after the entry) or a point read, never by
stepping back over the versions and deletions of the rows before it.

The bucket a seek found last in each partition is kept too (``found``): a bucket holds every entry from its first one
up to the boundary it is keyed by, so a change within those bounds finds it without a seek. Segments mostly leave a
partition oldest first (retention deletes them), each from the first bucket, which a seek then finds once for its
sixteen entries or so: on bench_core's cluster stream, the seeks had taken ~13,000 of ~72,000 instructions per event.

The writer keeps each partition's last bucket (``tails``, which its only writer may keep across batches): a segment
whose entry comes after the others (an upload) finds its bucket without a read. The other buckets' changes are
written to the KV at once; the last bucket's when the batch is flushed, or before a seek for another bucket, which
then reads every change of the batch. (Written at each change, the last bucket was joined and staged again at every
upload: an entry's addition took ~7,500 instructions on bench_core's uploads stream, ~4,000 after.)

This module is the reference. With the compiled core the fold writes through ``rlmm/state/max_timestamp_native.pyx``
(``new_index`` chooses), which takes the same steps over the same lists of entries in C: an upload's entry costs ~1,300
instructions there.
"""

from __future__ import annotations

import struct
import zlib
from bisect import insort
from collections.abc import Callable
from typing import Final, Protocol, final

from rlmm.compiled import native_module
from rlmm.state import keys as K
from rlmm.state.kv import ReadKV, WriteKV

_ENTRY: Final = struct.Struct(">QQ16s")  # max timestamp and end offset (sign-flipped), segment id
ENTRY_SIZE: Final = _ENTRY.size
LAST: Final = b"\xff" * (ENTRY_SIZE + 1)  # the last bucket's key after the tpid: after every entry
BUCKET: Final = 16  # entries per bucket, on average

# a partition's tpid -> its last bucket's entries, None while it has none
Tails = dict[bytes, list[bytes] | None]
# a partition's tpid -> the bucket (not the last) a seek found last: its key and entries, which a change takes and
# writes back as it does the last bucket's
Found = dict[bytes, tuple[bytes, list[bytes]]]


# built in C first (rlmm/state/keys_native.pyx), which leaves what it is not sure of (None) to the reference
_NATIVE: Final = native_module("rlmm.state.keys_native")
_NATIVE_INDEX: Final = native_module("rlmm.state.max_timestamp_native")  # the writer, chosen once (``new_index``)
_native_entry: Final[Callable[[int, int, bytes], bytes | None] | None] = (
    None if _NATIVE is None else _NATIVE.timestamp_entry
)


class Index(Protocol):
    """A batch's writer of the index: ``MaxTimestampIndex`` or its native twin (``new_index``)."""

    def add(self, tpid: bytes, entry: bytes) -> None: ...

    def remove(self, tpid: bytes, entry: bytes) -> None: ...

    def flush(self) -> None: ...

    def forget(self, tpid: bytes) -> None: ...


def new_index(kv: WriteKV, tails: Tails | None = None, found: Found | None = None) -> Index:
    """The index's writer over ``kv``: native (rlmm/state/max_timestamp_native.pyx) when the core runs compiled."""
    index: Index = (
        MaxTimestampIndex(kv, tails, found)
        if _NATIVE_INDEX is None
        else _NATIVE_INDEX.MaxTimestampIndex(kv, tails, found)
    )
    return index


def entry(max_timestamp_ms: int, end_offset: int, segment_id: bytes) -> bytes:
    if _native_entry is not None:
        packed = _native_entry(max_timestamp_ms, end_offset, segment_id)
        if packed is not None:
            return packed
    return reference_entry(max_timestamp_ms, end_offset, segment_id)


def reference_entry(max_timestamp_ms: int, end_offset: int, segment_id: bytes) -> bytes:
    return _ENTRY.pack(max_timestamp_ms + K.I64_FLIP, end_offset + K.I64_FLIP, segment_id)


def is_boundary(entry: bytes) -> bool:
    """Whether the entry starts a bucket (crc32 of the segment id: the same in every process)."""
    return zlib.crc32(entry[ENTRY_SIZE - 16 :]) % BUCKET == 0


def _entries(value: bytes) -> list[bytes]:
    return [value[i : i + ENTRY_SIZE] for i in range(0, len(value), ENTRY_SIZE)]


@final
class MaxTimestampIndex:
    def __init__(self, kv: WriteKV, tails: Tails | None = None, found: Found | None = None) -> None:
        self.kv = kv
        self.tails: Tails = {} if tails is None else tails
        self.found: Found = {} if found is None else found
        # partitions whose last bucket changed since it was last written -> whether the KV held it then
        self._unwritten_tails: dict[bytes, bool] = {}

    def flush(self) -> None:
        """Write the last buckets that changed."""
        for tpid in list(self._unwritten_tails):
            self._write_tail(tpid)

    def _write_tail(self, tpid: bytes) -> None:
        self._store(tpid + LAST, self.tails[tpid] or [], self._unwritten_tails.pop(tpid))

    def _tail(self, tpid: bytes) -> list[bytes] | None:
        if tpid in self.tails:
            return self.tails[tpid]
        raw = self.kv.get(K.MAX_TIMESTAMP, tpid + LAST)
        tail = self.tails[tpid] = None if raw is None else _entries(raw)
        return tail

    def _holder(self, tpid: bytes, entry: bytes) -> tuple[bytes, list[bytes], bool] | None:
        """The bucket where ``entry`` is or would go: its key, its entries and whether the KV holds it (the bucket
        before the first boundary has no row while it has no entry); None while the partition has no entry."""
        tail = self._tail(tpid)
        if tail is None:
            return None
        if entry >= tail[0] or not is_boundary(tail[0]):  # (without a boundary, the last bucket is the only one)
            return tpid + LAST, tail, True
        known = self.found.get(tpid)
        if known is not None and known[1][0] <= entry < known[0][len(tpid) :]:
            return known[0], known[1], True
        if tpid in self._unwritten_tails:  # the seek may reach the last bucket's row
            self._write_tail(tpid)
        found = self.kv.ceiling(K.MAX_TIMESTAMP, tpid + entry + b"\x00", tpid)  # keyed by the next boundary
        assert found is not None, f"no max-timestamp bucket after {entry.hex()}"
        key, entries = found[0], _entries(found[1])
        if entries[0] > entry and is_boundary(entries[0]):  # it comes before every entry, and no bucket does
            return tpid + entries[0], [], False
        if len(key) == len(tpid) + ENTRY_SIZE:  # (the last bucket is in ``tails``)
            self.found[tpid] = key, entries
        return key, entries, True

    def _write(self, tpid: bytes, key: bytes, entries: list[bytes], stored: bool) -> None:
        if len(key) > len(tpid) + ENTRY_SIZE:  # the last bucket: kept, and written by ``flush``
            self.tails[tpid] = entries if entries else None
            if tpid not in self._unwritten_tails:
                self._unwritten_tails[tpid] = stored
            return
        known = self.found.get(tpid)
        if known is not None and known[0] == key:
            if entries:
                self.found[tpid] = key, entries
            else:
                del self.found[tpid]
        self._store(key, entries, stored)

    def _store(self, key: bytes, entries: list[bytes], stored: bool) -> None:
        """Write a bucket (``stored``: whether the KV holds its row)."""
        if entries:
            value = b"".join(entries)
            if stored:
                self.kv.put(K.MAX_TIMESTAMP, key, value)
            else:
                self.kv.put_new(K.MAX_TIMESTAMP, key, value)
        elif stored:
            self.kv.delete(K.MAX_TIMESTAMP, key)

    def add(self, tpid: bytes, entry: bytes) -> None:
        """Add an entry the partition does not hold."""
        holder = self._holder(tpid, entry)
        if holder is None:
            self._write(tpid, tpid + LAST, [entry], False)
            return
        key, entries, stored = holder
        if is_boundary(entry):  # the bucket is cut at the entry: those before it are keyed by it
            before = [e for e in entries if e < entry]
            if before:
                self._write(tpid, tpid + entry, before, False)
            self._write(tpid, key, [entry, *(e for e in entries if e > entry)], stored)
        else:
            insort(entries, entry)
            self._write(tpid, key, entries, stored)

    def remove(self, tpid: bytes, entry: bytes) -> None:
        """Remove an entry the partition holds."""
        holder = self._holder(tpid, entry)
        assert holder is not None, f"max-timestamp entry {entry.hex()} is not in the index"
        key, entries, _ = holder
        entries.remove(entry)
        if is_boundary(entry):  # no longer a cut: the bucket before it (keyed by it) joins
            before = self.kv.get(K.MAX_TIMESTAMP, tpid + entry)
            if before is not None:
                self._write(tpid, tpid + entry, [], True)
                entries = _entries(before) + entries
        self._write(tpid, key, entries, True)

    def forget(self, tpid: bytes) -> None:
        """The partition's rows were deleted."""
        self.tails.pop(tpid, None)
        self.found.pop(tpid, None)
        self._unwritten_tails.pop(tpid, None)


def write_index(kv: WriteKV, tpid: bytes, entries: list[bytes]) -> None:
    """The buckets of a partition the KV holds none of, for its entries (in order)."""
    bucket: list[bytes] = []
    for entry in entries:
        if is_boundary(entry) and bucket:
            kv.put(K.MAX_TIMESTAMP, tpid + entry, b"".join(bucket))
            bucket = []
        bucket.append(entry)
    if bucket:
        kv.put(K.MAX_TIMESTAMP, tpid + LAST, b"".join(bucket))


def last_segment_id(kv: ReadKV, tpid: bytes) -> bytes | None:
    """The segment id of the partition's last entry (one point read)."""
    raw = kv.get(K.MAX_TIMESTAMP, tpid + LAST)
    return None if raw is None else raw[-16:]
