# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The fold's most frequent keys built in C: an epoch's prefix, an offset-index key, a lookup's floor key
(``rlmm/state/keys.py``) and a max-timestamp entry (``rlmm/state/max_timestamp.py``), the references, which call
these first when the core runs compiled; an offset-index entry's row, written and read (``rlmm/state/rows.py``'s
``RefEntry.pack`` and ``ref_epoch_end``), and a segment's row of one membership (its ``pack_segment_row``). Each
answers only a 4-byte tpid, an 8-byte epoch prefix, a 16-byte segment id, an ``array('q')``, a dict of one item,
bytes long enough, bools and ints in their ranges, and returns None for anything else, which the reference then
packs, reads or refuses. ``tests/test_native_keys.py`` checks that an answer is always the reference's.
"""

from cpython.array cimport array
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject
from libc.stdint cimport INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from rlmm.records.big_endian cimport exact_int, get_i64, put_u32, put_u64

cdef enum:
    TPID = 4
    SEGMENT_ID = 16
    EPOCH_PREFIX = 8  # tpid, epoch (sign-flipped)
    OFFSET_KEY = 16  # the epoch's prefix, offset (sign-flipped)
    TIMESTAMP_ENTRY = 32  # max timestamp and end offset (sign-flipped), segment id
    REF_ENTRY = 45  # segment id, epoch end, end offset, txn index empty, size (int32), start offset; then the value
    ONE_MEMBERSHIP = 9  # a segment row's count of memberships (1), its epoch (int32) and flags (uint8); then the value


cdef inline uint8_t* _put_flipped(uint8_t* q, int64_t v) noexcept nogil:
    """A signed 64-bit value with its sign bit flipped, big-endian: its bytes sort as the values."""
    return put_u64(q, <uint64_t>v ^ (<uint64_t>1 << 63))


cdef inline bint _sized(object value, Py_ssize_t size):
    return type(value) is bytes and PyBytes_GET_SIZE(value) == size


cdef inline uint8_t* _put_prefix(uint8_t* q, object tpid, int64_t epoch) noexcept:
    memcpy(q, PyBytes_AS_STRING(tpid), TPID)
    return put_u32(q + TPID, <uint32_t>epoch ^ (<uint32_t>1 << 31))


def epoch_prefix(tpid, epoch):
    cdef int64_t e
    if not (_sized(tpid, TPID) and exact_int(epoch, INT32_MIN, INT32_MAX, &e)):
        return None
    key = PyBytes_FromStringAndSize(NULL, EPOCH_PREFIX)
    _put_prefix(<uint8_t*>PyBytes_AS_STRING(key), tpid, e)
    return key


def offset_key(tpid, epoch, offset):
    cdef int64_t e, o
    if not (
        _sized(tpid, TPID)
        and exact_int(epoch, INT32_MIN, INT32_MAX, &e)
        and exact_int(offset, INT64_MIN, INT64_MAX, &o)
    ):
        return None
    key = PyBytes_FromStringAndSize(NULL, OFFSET_KEY)
    _put_flipped(_put_prefix(<uint8_t*>PyBytes_AS_STRING(key), tpid, e), o)
    return key


def timestamp_entry(max_timestamp_ms, end_offset, segment_id):
    cdef int64_t t, o
    if not (
        _sized(segment_id, SEGMENT_ID)
        and exact_int(max_timestamp_ms, INT64_MIN, INT64_MAX, &t)
        and exact_int(end_offset, INT64_MIN, INT64_MAX, &o)
    ):
        return None
    entry = PyBytes_FromStringAndSize(NULL, TIMESTAMP_ENTRY)
    cdef uint8_t* q = _put_flipped(_put_flipped(<uint8_t*>PyBytes_AS_STRING(entry), t), o)
    memcpy(q, PyBytes_AS_STRING(segment_id), SEGMENT_ID)
    return entry


def ref_entry(segment_id, epoch_end, end_offset, txn_index_empty, size, start_offset, value):
    cdef int64_t e, o, z, b
    if not (
        _sized(segment_id, SEGMENT_ID)
        and exact_int(epoch_end, INT64_MIN, INT64_MAX, &e)
        and exact_int(end_offset, INT64_MIN, INT64_MAX, &o)
        and type(txn_index_empty) is bool
        and exact_int(size, INT32_MIN, INT32_MAX, &z)
        and exact_int(start_offset, INT64_MIN, INT64_MAX, &b)
        and type(value) is bytes
    ):
        return None
    cdef Py_ssize_t length = PyBytes_GET_SIZE(value)
    row = PyBytes_FromStringAndSize(NULL, REF_ENTRY + length)
    cdef uint8_t* q = <uint8_t*>PyBytes_AS_STRING(row)
    memcpy(q, PyBytes_AS_STRING(segment_id), SEGMENT_ID)
    q = put_u64(put_u64(q + SEGMENT_ID, <uint64_t>e), <uint64_t>o)
    q[0] = 1 if txn_index_empty else 0
    q = put_u64(put_u32(q + 1, <uint32_t>z), <uint64_t>b)
    memcpy(q, PyBytes_AS_STRING(value), length)
    return row


def segment_row(members, value):
    """A segment's row whose memberships are one (epoch -> flags)."""
    cdef int64_t e, f
    cdef Py_ssize_t position = 0
    cdef PyObject* epoch
    cdef PyObject* flags
    if not (type(members) is dict and len(members) == 1 and type(value) is bytes):
        return None
    PyDict_Next(members, &position, &epoch, &flags)
    if not (exact_int(<object>epoch, INT32_MIN, INT32_MAX, &e) and exact_int(<object>flags, 0, 255, &f)):
        return None
    cdef Py_ssize_t length = PyBytes_GET_SIZE(value)
    row = PyBytes_FromStringAndSize(NULL, ONE_MEMBERSHIP + length)
    cdef uint8_t* q = put_u32(put_u32(<uint8_t*>PyBytes_AS_STRING(row), 1), <uint32_t>e)
    q[0] = <uint8_t>f
    memcpy(q + 1, PyBytes_AS_STRING(value), length)
    return row


def floor_key(prefix, starts, offset):
    """The search holds the GIL throughout, so no other thread changes ``starts`` during it."""
    cdef int64_t o
    if not (
        _sized(prefix, EPOCH_PREFIX)
        and type(starts) is array
        and (<array>starts).ob_descr.typecode == b"q"
        and exact_int(offset, INT64_MIN, INT64_MAX, &o)
    ):
        return None
    cdef const long long* values = (<array>starts).data.as_longlongs
    cdef Py_ssize_t low = 0, high = len(starts), middle
    while low < high:  # the first start above the offset
        middle = (low + high) >> 1
        if values[middle] > o:
            high = middle
        else:
            low = middle + 1
    if low == 0:
        return prefix
    cdef int64_t floor = values[low - 1]  # read before the allocation, which may run other code
    key = PyBytes_FromStringAndSize(NULL, OFFSET_KEY)
    cdef uint8_t* q = <uint8_t*>PyBytes_AS_STRING(key)
    memcpy(q, PyBytes_AS_STRING(prefix), EPOCH_PREFIX)
    _put_flipped(q + EPOCH_PREFIX, floor)
    return key


def read_int64(data, pos):
    """The big-endian signed 64-bit field at ``pos`` of ``data``."""
    cdef int64_t p
    if not (type(data) is bytes and exact_int(pos, 0, PyBytes_GET_SIZE(data) - 8, &p)):
        return None
    cdef const uint8_t* q = <const uint8_t*>PyBytes_AS_STRING(data) + p
    return get_i64(q)
