"""Primitives of Kafka's flexible-version message encoding, with the semantics of its Java reader.

Readers take ``(data, position)`` and return ``(value, next position)``. A read that Kafka's reader
would refuse raises :class:`WireError` naming the Java exception Kafka throws there. The hot paths of
:mod:`rlmm.records.serde` inline the one-byte cases and call these for everything else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

from rlmm.errors import WireError

JAVA_INT_MIN: Final = -(1 << 31)
JAVA_INT_MAX: Final = (1 << 31) - 1
MAX_STRING_LENGTH: Final = 0x7FFF

# Fixed runs of the four record bodies. A trailing "B" is the first byte of the varint that follows
# the run (tagged-field count, array count or bytes length): when it is a whole one-byte varint the
# reader goes on without a varint call.
UUID_I32_B: Final = struct.Struct(">16siB")  # topic id, partition, tagged-field count
UUID_B: Final = struct.Struct(">16sB")  # segment id, tagged-field count
SEGMENT_RUN_B: Final = struct.Struct(">qqiqqB")  # start, end, broker, max ts, event ts, epoch count
# topic id, partition, tagged-field count, segment id, tagged-field count + SEGMENT_RUN_B
SEGMENT_HEAD_B: Final = struct.Struct(">16siB16sBqqiqqB")
SNAPSHOT_RUN_B: Final = struct.Struct(">16sqqiqqB")  # segment id + SEGMENT_RUN_B
I32_I64_B: Final = struct.Struct(">iqB")  # epoch, offset, tagged-field count; broker, event ts, cm length
I32_B: Final = struct.Struct(">iB")  # segment size, custom metadata length
I8_B: Final = struct.Struct(">bB")  # state, tagged-field count
DELETE_RUN_B: Final = struct.Struct(">iqbB")  # broker id, event ts, state, tagged-field count

I32: Final = struct.Struct(">i")
I8: Final = struct.Struct(">b")
SEGMENT_RUN: Final = struct.Struct(">qqiqq")
I32_I64: Final = struct.Struct(">iq")  # leader epoch entry; broker id + event ts
I32_I64_I8: Final = struct.Struct(">iqb")


def underflow(what: str, position: int) -> WireError:
    return WireError("BufferUnderflowException", f"input ends inside {what}", position)


def read_uvarint(data: bytes, p: int, what: str) -> tuple[int, int]:
    """Unsigned varint as Java's ``ByteUtils.readUnsignedVarint``: an ``int``, at most 5 bytes."""
    result = 0
    for shift in (0, 7, 14, 21):
        if p >= len(data):
            raise underflow(what, p)
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
    if p >= len(data):
        raise underflow(what, p)
    b = data[p]
    if b >= 0x80:
        raise WireError("IllegalArgumentException", f"varint too long in {what}", p - 4)
    result = (result | (b << 28)) & 0xFFFFFFFF
    return (result - (1 << 32) if result > JAVA_INT_MAX else result), p + 1


def read_length(data: bytes, p: int, what: str) -> tuple[int, int]:
    """A compact length: the varint minus one, with Java's 32-bit wrap (-1 means null)."""
    n, p = read_uvarint(data, p, what)
    return (JAVA_INT_MAX if n == JAVA_INT_MIN else n - 1), p


def read_array(data: bytes, p: int, size: int, what: str) -> tuple[bytes, int]:
    """``size`` raw bytes, refused as ``ByteBufferAccessor.readArray`` refuses them."""
    remaining = len(data) - p
    if size > remaining:
        raise WireError(
            "RuntimeException",
            f"{what}: {size} byte(s) declared, only {remaining} available",
            p,
        )
    if size < 0:
        raise WireError("NegativeArraySizeException", f"{what}: negative size {size}", p)
    end = p + size
    return data[p:end], end


def read_string(data: bytes, p: int, what: str) -> tuple[str, int]:
    """Non-nullable compact string; malformed UTF-8 is replaced, as Java's ``new String`` does."""
    start = p
    n = data[p] if p < len(data) else -1
    if 0 < n < 0x80:
        length = n - 1
        p += 1
    else:
        length, p = read_length(data, p, what)
    if length < 0:
        raise WireError("RuntimeException", f"non-nullable {what} was serialized as null", start)
    if length > MAX_STRING_LENGTH:
        raise WireError("RuntimeException", f"{what} had invalid length {length}", start)
    raw, p = read_array(data, p, length, what)
    return raw.decode("utf-8", "replace"), p


def read_nullable_bytes(data: bytes, p: int, what: str) -> tuple[bytes | None, int]:
    length, p = read_length(data, p, what)
    if length < 0:
        return None, p
    return read_array(data, p, length, what)


def read_array_count(data: bytes, p: int, what: str) -> tuple[int, int]:
    """Element count of a non-nullable compact array, checked as Kafka's generated reader does."""
    start = p
    count, p = read_length(data, p, what)
    if count < 0:
        raise WireError("RuntimeException", f"non-nullable {what} was serialized as null", start)
    if count > len(data) - p:
        raise WireError(
            "RuntimeException",
            f"{what}: collection of size {count} but only {len(data) - p} byte(s) remain",
            start,
        )
    return count, p


def read_tags(
    data: bytes, p: int, path: str, unknown: list[tuple[str, int, bytes]], bool_tag0: bool = False
) -> tuple[int | None, int]:
    """A tagged-field section. Unknown fields are appended to ``unknown`` as ``(path, tag, data)``.

    With ``bool_tag0`` tag 0 is the known boolean field: Kafka reads exactly one byte for it whatever
    size is declared. Returns that byte (``None`` when absent; the last one wins) and the position.
    """
    where = f"tagged fields of {path or 'the record'}"
    count, p = read_uvarint(data, p, where)
    tag0 = None
    for _ in range(count):  # a negative count reads nothing, as Java's loop does
        tag, p = read_uvarint(data, p, where)
        size, p = read_uvarint(data, p, where)
        if bool_tag0 and tag == 0:
            if p >= len(data):
                raise underflow(where, p)
            tag0 = data[p]
            p += 1
        else:
            raw, p = read_array(data, p, size, f"tag {tag} of {where}")
            unknown.append((path, tag, raw))
    return tag0, p


_SMALL_UVARINTS: Final = tuple(bytes((i,)) for i in range(0x80))


def uvarint(value: int) -> bytes:
    """Java ``writeUnsignedVarint`` of an ``int`` (negative values take 5 bytes)."""
    if 0 <= value < 0x80:
        return _SMALL_UVARINTS[value]
    if not JAVA_INT_MIN <= value <= JAVA_INT_MAX:
        raise ValueError(f"{value} does not fit in a Java int")
    value &= 0xFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compact_string(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING_LENGTH:
        raise ValueError(f"{what} is {len(raw)} bytes in UTF-8, more than {MAX_STRING_LENGTH}")
    return uvarint(len(raw) + 1) + raw


def compact_nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x00"
    return uvarint(len(value) + 1) + bytes(value)


def uuid_bytes(value: bytes, what: str) -> bytes:
    if type(value) is not bytes or len(value) != 16:
        raise ValueError(f"{what} must be 16 bytes, got {value!r}")
    return value


def tags_section(fields: Iterable[tuple[int, bytes]]) -> bytes:
    """A tagged-field section holding ``(tag, data)`` fields, written in ascending tag order."""
    ordered = sorted(fields, key=lambda field: field[0])
    out = [uvarint(len(ordered))]
    for tag, raw in ordered:
        out += (uvarint(tag), uvarint(len(raw)), raw)
    return b"".join(out)
