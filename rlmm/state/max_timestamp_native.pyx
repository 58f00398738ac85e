# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The max-timestamp index's writer in C: ``rlmm/state/max_timestamp.py``'s ``MaxTimestampIndex`` (the reference,
whose docstring says what the buckets are), taking the same steps over the same Python lists of entries, so that
the buckets its owner keeps across batches (``tails``, ``found``) serve either. What it saves is the interpreter's
part of an upload's entry: the calls between its steps, the bucket test (crc32 of the segment id, computed here with
zlib's polynomial) and the comparisons of entries. ``tests/test_native_max_timestamp.py`` drives both through the
same random changes and compares every write.
"""

from bisect import insort

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_SetDefault
from libc.stdint cimport uint8_t, uint32_t
from libc.string cimport memcmp

from rlmm.state import keys as K

cdef enum:
    ENTRY_SIZE = 32  # max timestamp and end offset (sign-flipped), segment id
    SEGMENT_ID = 16
    BUCKET = 16

cdef bytes LAST = b"\xff" * (ENTRY_SIZE + 1)
cdef str CF = K.MAX_TIMESTAMP
cdef object _ABSENT = object()  # what ``tails`` gives for a partition it holds nothing of

cdef uint32_t _CRC_TABLE[256]


cdef void _fill_crc_table() noexcept:
    cdef uint32_t c
    cdef int n, k
    for n in range(256):
        c = n
        for k in range(8):
            c = (c >> 1) ^ (<uint32_t>0xEDB88320) if c & 1 else c >> 1
        _CRC_TABLE[n] = c


_fill_crc_table()


cdef inline uint32_t _crc32(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t c = ~(<uint32_t>0)
    cdef Py_ssize_t i
    for i in range(n):
        c = _CRC_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8)
    return ~c


cdef inline bint _boundary(bytes entry):
    return _crc32(<const uint8_t*>PyBytes_AS_STRING(entry) + ENTRY_SIZE - SEGMENT_ID, SEGMENT_ID) % BUCKET == 0


cdef inline int _compare(bytes a, bytes b):
    """Entries' order: both are ``ENTRY_SIZE`` bytes long."""
    return memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), ENTRY_SIZE)


cdef inline int _compare_to_key(bytes entry, bytes key, bytes tpid):
    """The entry's order against the boundary that keys a bucket (``key``: the partition's tpid, then the boundary)."""
    return memcmp(PyBytes_AS_STRING(entry), PyBytes_AS_STRING(key) + PyBytes_GET_SIZE(tpid), ENTRY_SIZE)


cdef inline bytes _checked(object entry):
    if type(entry) is not bytes or PyBytes_GET_SIZE(entry) != ENTRY_SIZE:
        raise ValueError(f"a max-timestamp entry is {ENTRY_SIZE} bytes, not {entry!r}")
    return <bytes>entry


def layout():
    """The entries' size, the buckets' average and the last bucket's key suffix, which the reference's must be."""
    return ENTRY_SIZE, BUCKET, LAST


def is_boundary(entry):
    """Whether the entry starts a bucket (``max_timestamp.is_boundary``)."""
    return _boundary(_checked(entry))


cdef list _entries(bytes value):
    cdef Py_ssize_t size = PyBytes_GET_SIZE(value)
    if size % ENTRY_SIZE:
        raise ValueError(f"a max-timestamp bucket of {size} bytes: not whole entries of {ENTRY_SIZE}")
    return [value[i : i + ENTRY_SIZE] for i in range(0, size, ENTRY_SIZE)]


cdef class MaxTimestampIndex:
    """``max_timestamp.MaxTimestampIndex``: a bucket's key is None here for a partition's last bucket."""

    cdef readonly object kv
    cdef readonly dict tails
    cdef readonly dict found  # partitions -> the bucket (not the last) a seek found last: (key, entries)
    cdef dict _unwritten_tails  # partitions whose last bucket changed since it was last written -> whether stored

    def __init__(self, kv, tails=None, found=None):
        self.kv = kv
        self.tails = {} if tails is None else tails
        self.found = {} if found is None else found
        self._unwritten_tails = {}

    def flush(self):
        """Write the last buckets that changed."""
        for tpid in list(self._unwritten_tails):
            self._write_tail(tpid)

    cdef _write_tail(self, bytes tpid):
        tail = self.tails[tpid]
        self._store(tpid + LAST, [] if tail is None else tail, self._unwritten_tails.pop(tpid))

    cdef object _tail(self, bytes tpid):
        tail = self.tails.get(tpid, _ABSENT)
        if tail is not _ABSENT:
            return tail
        raw = self.kv.get(CF, tpid + LAST)
        tail = None if raw is None else _entries(raw)
        self.tails[tpid] = tail
        return tail

    cdef tuple _holder(self, bytes tpid, bytes entry):
        """The bucket where ``entry`` is or would go (key, entries, whether stored); None without entries."""
        tail = self._tail(tpid)
        if tail is None:
            return None
        first = <bytes>(<list>tail)[0]
        if _compare(entry, first) >= 0 or not _boundary(first):
            return None, tail, True
        known = self.found.get(tpid)
        if known is not None:
            key = (<tuple>known)[0]
            entries = (<tuple>known)[1]
            if _compare(<bytes>(<list>entries)[0], entry) <= 0 and _compare_to_key(entry, key, tpid) < 0:
                return key, entries, True
        if tpid in self._unwritten_tails:
            self._write_tail(tpid)
        found = self.kv.ceiling(CF, tpid + entry + b"\x00", tpid)
        assert found is not None, f"no max-timestamp bucket after {entry.hex()}"
        key, value = found
        entries = _entries(value)
        first = <bytes>entries[0]
        if _compare(first, entry) > 0 and _boundary(first):
            return tpid + first, [], False
        if PyBytes_GET_SIZE(key) > PyBytes_GET_SIZE(tpid) + ENTRY_SIZE:
            return None, entries, True
        self.found[tpid] = (key, entries)
        return key, entries, True

    cdef _write(self, bytes tpid, object key, list entries, bint stored):
        if key is None:  # the last bucket: kept, and written by ``flush``
            self.tails[tpid] = entries if entries else None
            if tpid not in self._unwritten_tails:
                self._unwritten_tails[tpid] = stored
            return
        known = self.found.get(tpid)
        if known is not None and (<tuple>known)[0] == key:
            if entries:
                self.found[tpid] = (key, entries)
            else:
                del self.found[tpid]
        self._store(key, entries, stored)

    cdef _store(self, bytes key, list entries, bint stored):
        if entries:
            value = b"".join(entries)
            if stored:
                self.kv.put(CF, key, value)
            else:
                self.kv.put_new(CF, key, value)
        elif stored:
            self.kv.delete(CF, key)

    def add(self, bytes tpid not None, entry):
        """Add an entry the partition does not hold."""
        cdef bytes e = _checked(entry)
        cdef list entries
        tail = self._tail(tpid)
        if tail is not None and self._appends(<list>tail, e):  # an upload: the last bucket, after the others
            (<list>tail).append(e)
            PyDict_SetDefault(self._unwritten_tails, tpid, True)
            return
        holder = self._holder(tpid, e)
        if holder is None:
            self._write(tpid, None, [e], False)
            return
        key, entries, stored = holder
        if _boundary(e):  # the bucket is cut at the entry: those before it are keyed by it
            before = [x for x in entries if _compare(x, e) < 0]
            if before:
                self._write(tpid, tpid + e, before, False)
            self._write(tpid, key, [e] + [x for x in entries if _compare(x, e) > 0], stored)
            return
        insort(entries, e)
        self._write(tpid, key, entries, stored)

    cdef bint _appends(self, list tail, bytes entry):
        """Whether the entry goes at the end of the partition's last bucket (``tail``, in order), without cutting it:
        after its last entry, it is after its first."""
        return _compare(<bytes>tail[len(tail) - 1], entry) < 0 and not _boundary(entry)

    def remove(self, bytes tpid not None, entry):
        """Remove an entry the partition holds."""
        cdef bytes e = _checked(entry)
        cdef list entries
        holder = self._holder(tpid, e)
        assert holder is not None, f"max-timestamp entry {e.hex()} is not in the index"
        key, entries, _ = holder
        entries.remove(e)
        if _boundary(e):  # no longer a cut: the bucket before it (keyed by it) joins
            before = self.kv.get(CF, tpid + e)
            if before is not None:
                self._write(tpid, tpid + e, [], True)
                entries = _entries(before) + entries
        self._write(tpid, key, entries, True)

    def forget(self, tpid):
        """The partition's rows were deleted."""
        self.tails.pop(tpid, None)
        self.found.pop(tpid, None)
        self._unwritten_tails.pop(tpid, None)
