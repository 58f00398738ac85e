# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The usual shapes of the topic's values, read and written in C: a segment (api key 0) or an update (api key 1)
as Kafka writes them, without unknown tags, with one- or two-byte lengths.

``rlmm/records/serde.py`` is the reference and holds every rule: these functions answer only what they are sure
of and return ``None`` for anything else (another record, an unusual shape, a value out of range, anything Kafka
refuses), which the reference then decodes, encodes or refuses. ``tests/test_native_wire.py`` checks that an answer
is always the reference's, field for field and byte for byte.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from rlmm.records.big_endian cimport exact_int, get_i32, get_i64, get_u32, put_u32, put_u64
from rlmm.records.model import SegmentMetadata, SegmentState, TopicIdPartition, new_segment, new_update

cdef enum:
    UUID = 16
    SEGMENT_RUN = 37  # start, end, broker, max ts, event ts, epoch count
    SEGMENT_HEAD = 75  # topic id, partition, tags, segment id, tags, then the segment's run
    EPOCH_ENTRY = 13  # leader epoch, start offset, tags
    MAX_STRING_LENGTH = 0x7FFF
    MAX_EPOCHS = 126  # whose count takes one byte
    PARTITION_SLOTS = 4096

cdef object _SEGMENT = SegmentMetadata
cdef object _NEW_SEGMENT = new_segment  # the constructors as compiled functions: a vectorcall, not a tuple to parse
cdef object _NEW_UPDATE = new_update
cdef object _TP = TopicIdPartition
cdef tuple _STATES = tuple(SegmentState)
cdef bytes _HEAD_SEGMENT = b"\x01\x00\x00"  # frame version 1, api key 0, version 0
# the partitions met last, as (their bytes on the wire: topic name, id, partition; their TopicIdPartition), in slots
# chosen by id and partition: the records of a partition share one TopicIdPartition while it keeps its slot (they are
# values, and a dict keyed by them finds the one it holds by identity). A slot is replaced whole, by one store.
cdef list _PARTITIONS = [(b"", None)] * PARTITION_SLOTS


cdef inline Py_ssize_t _length(const uint8_t* p, Py_ssize_t end, Py_ssize_t* at) noexcept nogil:
    """A compact length (the varint minus one) in one or two bytes at ``at[0]``, which it moves past; -1 for null,
    -2 for a varint that takes more bytes or runs past ``end``."""
    cdef Py_ssize_t i = at[0]
    if i >= end:
        return -2
    if p[i] < 0x80:
        at[0] = i + 1
        return <Py_ssize_t>p[i] - 1
    if i + 1 >= end or p[i + 1] >= 0x80:
        return -2
    at[0] = i + 2
    return ((<Py_ssize_t>p[i] & 0x7F) | (<Py_ssize_t>p[i + 1] << 7)) - 1


cdef object _partition(const uint8_t* p, Py_ssize_t end, Py_ssize_t* at):
    """The TopicIdPartitionEntry at ``at[0]`` (topic name, id, partition) without its tags, or None; ``at[0]``
    moves past it."""
    cdef Py_ssize_t start = at[0], length = _length(p, end, at)
    cdef Py_ssize_t name = at[0]
    if length < 0 or name + length + UUID + 4 > end:
        return None
    cdef const uint8_t* h = p + name + length  # the topic id, then the partition
    at[0] = name + length + UUID + 4
    cdef Py_ssize_t size = at[0] - start
    cdef Py_ssize_t slot = (get_u32(h) ^ (get_u32(h + UUID) * <uint32_t>0x9E3779B1)) % PARTITION_SLOTS
    cdef tuple known = _PARTITIONS[slot]
    cdef bytes wire = known[0]
    if PyBytes_GET_SIZE(wire) == size and memcmp(PyBytes_AS_STRING(wire), p + start, size) == 0:
        return known[1]
    tp = _TP(
        PyBytes_FromStringAndSize(<const char*>h, UUID),
        PyUnicode_DecodeUTF8(<const char*>p + name, length, "replace"),
        get_i32(h + UUID),
    )
    _PARTITIONS[slot] = (PyBytes_FromStringAndSize(<const char*>p + start, size), tp)
    return tp


cdef object _custom_metadata(const uint8_t* p, Py_ssize_t end, Py_ssize_t* at, bint* ok):
    """Nullable compact bytes; ``ok[0]`` false when they are not in the usual shape."""
    cdef Py_ssize_t n = _length(p, end, at)
    if n == -1:
        return None
    if n < 0 or at[0] + n > end:
        ok[0] = False
        return None
    cdef Py_ssize_t start = at[0]
    at[0] = start + n
    return PyBytes_FromStringAndSize(<const char*>p + start, n)


cdef object _epochs(const uint8_t* p, Py_ssize_t count):
    """``count`` entries without tags and with strictly rising epochs, as a tuple; else None."""
    cdef tuple epochs = PyTuple_New(count)
    cdef Py_ssize_t i
    cdef int32_t epoch, previous = 0
    for i in range(count):
        if p[EPOCH_ENTRY - 1]:
            return None
        epoch = get_i32(p)
        if i and epoch <= previous:
            return None
        previous = epoch
        entry = (epoch, get_i64(p + 4))
        Py_INCREF(entry)
        PyTuple_SET_ITEM(epochs, i, entry)
        p += EPOCH_ENTRY
    return epochs


cdef object _segment_id_entry(const uint8_t* p, Py_ssize_t end, Py_ssize_t* at, Py_ssize_t* segment_id):
    """The RemoteLogSegmentIdEntry at ``at[0]`` (a TopicIdPartitionEntry, a segment id), both without tags: its
    partition, or None. ``at[0]`` moves past it; ``segment_id[0]`` is where its segment id is."""
    tp = _partition(p, end, at)
    cdef Py_ssize_t i = at[0]
    if tp is None or i + 1 + UUID + 1 > end or p[i] or p[i + 1 + UUID]:
        return None
    segment_id[0] = i + 1
    at[0] = i + 1 + UUID + 1
    return tp


cdef object _segment(const uint8_t* p, Py_ssize_t end):
    cdef Py_ssize_t at = 3, segment_id
    tp = _segment_id_entry(p, end, &at, &segment_id)
    if tp is None or at + SEGMENT_RUN > end:
        return None
    cdef const uint8_t* r = p + at
    cdef int64_t start = get_i64(r), stop = get_i64(r + 8)
    cdef Py_ssize_t count = <Py_ssize_t>r[36] - 1
    if not 0 < count < 0x7F or start < 0 or stop < start:
        return None
    at += SEGMENT_RUN
    if at + EPOCH_ENTRY * count + 7 > end:  # the epochs, size, custom metadata, state, tags
        return None
    epochs = _epochs(p + at, count)
    if epochs is None:
        return None
    at += EPOCH_ENTRY * count
    cdef int32_t size = get_i32(p + at)
    at += 4
    cdef bint ok = True
    custom = _custom_metadata(p, end, &at, &ok)
    if not ok:
        return None
    cdef Py_ssize_t rest = end - at  # the state and the tags: none, or TxnIndexEmpty true as Kafka writes it
    if rest == 2 and p[at + 1] == 0:
        txn_index_empty = False
    elif rest == 5 and p[at + 1] == 1 and p[at + 2] == 0 and p[at + 3] == 1 and p[at + 4] == 1:
        txn_index_empty = True
    else:
        return None
    if p[at] > 3:
        return None
    return _NEW_SEGMENT(
        tp,
        PyBytes_FromStringAndSize(<const char*>p + segment_id, UUID),
        start,
        stop,
        get_i32(r + 16),
        get_i64(r + 20),
        get_i64(r + 28),
        epochs,
        size,
        custom,
        _STATES[p[at]],
        txn_index_empty,
    )


cdef object _update(const uint8_t* p, Py_ssize_t end):
    cdef Py_ssize_t at = 3, segment_id
    tp = _segment_id_entry(p, end, &at, &segment_id)
    if tp is None or at + 12 + 3 > end:  # broker, event ts, then at least custom metadata, state, tags
        return None
    cdef int32_t broker = get_i32(p + at)
    cdef int64_t event_ts = get_i64(p + at + 4)
    at += 12
    cdef bint ok = True
    custom = _custom_metadata(p, end, &at, &ok)
    if not ok or at + 2 != end or p[at] > 3 or p[at + 1]:
        return None
    return _NEW_UPDATE(
        tp,
        PyBytes_FromStringAndSize(<const char*>p + segment_id, UUID),
        broker,
        event_ts,
        custom,
        _STATES[p[at]],
    )


def decode_common(bytes data):
    """The record of a value in a usual shape, or None (the reference decides)."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(data)
    if end < 3 or p[0] != 1 or p[2] != 0:
        return None
    if p[1] == 0:
        return _segment(p, end)
    if p[1] == 1:
        return _update(p, end)
    return None


cdef inline Py_ssize_t _uvarint_size(uint32_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint8_t* _put_uvarint(uint8_t* q, uint32_t v) noexcept nogil:
    while v >= 0x80:
        q[0] = (v & 0x7F) | 0x80
        v >>= 7
        q += 1
    q[0] = v
    return q + 1


cdef inline bint _uuid(object value):
    return type(value) is bytes and PyBytes_GET_SIZE(value) == UUID


def encode_segment_fields(
    topic,
    topic_id,
    tp_partition,
    segment_id,
    start_offset,
    end_offset,
    broker_id,
    max_timestamp_ms,
    event_timestamp_ms,
    epochs,
    segment_size_in_bytes,
    custom,
    state,
    txn_index_empty,
):
    """The value of a segment without unknown tags in the usual shape, from its fields, or None (the reference
    decides). Its caller reads the fields from a compiled record directly, where this module would look each one up
    by name (~2,600 instructions of ~4,800 per segment)."""
    if type(topic) is not str:
        return None
    try:
        name = (<str>topic).encode("utf-8")
    except UnicodeEncodeError:
        return None
    if PyBytes_GET_SIZE(name) > MAX_STRING_LENGTH or not _uuid(topic_id) or not _uuid(segment_id):
        return None
    if not (custom is None or type(custom) is bytes) or (txn_index_empty is not True and txn_index_empty is not False):
        return None
    if type(epochs) is not tuple or PyTuple_GET_SIZE(epochs) > MAX_EPOCHS:
        return None
    cdef Py_ssize_t state_id
    for state_id in range(4):
        if state is _STATES[state_id]:
            break
    else:
        return None
    cdef int64_t partition, start, stop, broker, max_ts, event_ts, size, epoch, offset
    if not (
        exact_int(tp_partition, INT32_MIN, INT32_MAX, &partition)
        and exact_int(start_offset, INT64_MIN, INT64_MAX, &start)
        and exact_int(end_offset, INT64_MIN, INT64_MAX, &stop)
        and exact_int(broker_id, INT32_MIN, INT32_MAX, &broker)
        and exact_int(max_timestamp_ms, INT64_MIN, INT64_MAX, &max_ts)
        and exact_int(event_timestamp_ms, INT64_MIN, INT64_MAX, &event_ts)
        and exact_int(segment_size_in_bytes, INT32_MIN, INT32_MAX, &size)
    ):
        return None
    cdef Py_ssize_t count = PyTuple_GET_SIZE(epochs), name_size = PyBytes_GET_SIZE(name), custom_size = 0, i
    for i in range(count):
        entry = <object>PyTuple_GET_ITEM(epochs, i)
        if type(entry) is not tuple or PyTuple_GET_SIZE(entry) != 2:
            return None
        if not (
            exact_int(<object>PyTuple_GET_ITEM(entry, 0), INT32_MIN, INT32_MAX, &epoch)
            and exact_int(<object>PyTuple_GET_ITEM(entry, 1), INT64_MIN, INT64_MAX, &offset)
        ):
            return None
    if custom is not None:
        custom_size = PyBytes_GET_SIZE(custom)
        if custom_size >= INT32_MAX:
            return None
    cdef Py_ssize_t total = (
        3
        + _uvarint_size(<uint32_t>(name_size + 1))
        + name_size
        + SEGMENT_HEAD
        + EPOCH_ENTRY * count
        + 4
        + (1 if custom is None else _uvarint_size(<uint32_t>(custom_size + 1)) + custom_size)
        + 1
        + (4 if txn_index_empty else 1)
    )
    value = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* q = <uint8_t*>PyBytes_AS_STRING(value)
    memcpy(q, PyBytes_AS_STRING(_HEAD_SEGMENT), 3)
    q = _put_uvarint(q + 3, <uint32_t>(name_size + 1))
    memcpy(q, PyBytes_AS_STRING(name), name_size)
    q += name_size
    memcpy(q, PyBytes_AS_STRING(topic_id), UUID)
    q = put_u32(q + UUID, <uint32_t>partition)
    q[0] = 0
    memcpy(q + 1, PyBytes_AS_STRING(segment_id), UUID)
    q += 1 + UUID
    q[0] = 0
    q = put_u64(q + 1, <uint64_t>start)
    q = put_u64(q, <uint64_t>stop)
    q = put_u32(q, <uint32_t>broker)
    q = put_u64(q, <uint64_t>max_ts)
    q = put_u64(q, <uint64_t>event_ts)
    q[0] = <uint8_t>(count + 1)
    q += 1
    for i in range(count):
        entry = <object>PyTuple_GET_ITEM(epochs, i)
        exact_int(<object>PyTuple_GET_ITEM(entry, 0), INT32_MIN, INT32_MAX, &epoch)
        exact_int(<object>PyTuple_GET_ITEM(entry, 1), INT64_MIN, INT64_MAX, &offset)
        q = put_u32(q, <uint32_t>epoch)
        q = put_u64(q, <uint64_t>offset)
        q[0] = 0
        q += 1
    q = put_u32(q, <uint32_t>size)
    if custom is None:
        q[0] = 0
        q += 1
    else:
        q = _put_uvarint(q, <uint32_t>(custom_size + 1))
        memcpy(q, PyBytes_AS_STRING(custom), custom_size)
        q += custom_size
    q[0] = <uint8_t>state_id
    if txn_index_empty:
        q[1], q[2], q[3], q[4] = 1, 0, 1, 1
    else:
        q[1] = 0
    return value
