# cython: language_level=3
# The byte-level helpers the native modules share (rlmm/compiled.py's NATIVE_MODULES cimport them): Kafka's
# fixed-width integers and the view's keys are big-endian. Inline, so each module compiles its own copy of the one
# definition. An edit here makes every native module stale until rebuilt (rlmm/compiled.py's NATIVE_HEADERS).

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline bint exact_int(object value, int64_t low, int64_t high, int64_t* out):
    """An exact int within [low, high] into ``out``; false for anything else."""
    cdef int overflow = 0
    if not PyLong_CheckExact(value):
        return False
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or v < low or v > high:
        return False
    out[0] = v
    return True


cdef inline uint32_t get_u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline uint64_t get_u64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>get_u32(p) << 32) | <uint64_t>get_u32(p + 4)


cdef inline int32_t get_i32(const uint8_t* p) noexcept nogil:
    return <int32_t>get_u32(p)


cdef inline int64_t get_i64(const uint8_t* p) noexcept nogil:
    return <int64_t>get_u64(p)


cdef inline uint8_t* put_u32(uint8_t* q, uint32_t v) noexcept nogil:
    q[0] = v >> 24
    q[1] = v >> 16
    q[2] = v >> 8
    q[3] = v
    return q + 4


cdef inline uint8_t* put_u64(uint8_t* q, uint64_t v) noexcept nogil:
    put_u32(q, <uint32_t>(v >> 32))
    return put_u32(q + 4, <uint32_t>v)
