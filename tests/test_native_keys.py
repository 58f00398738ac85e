"""The keys built in C (rlmm/state/keys_native.pyx) against their references (rlmm/state/keys.py,
rlmm/state/max_timestamp.py), and the offset-index entry's field read in C (rlmm/state/rows.py): what the native side
answers is the reference's key or field, byte for byte, and whatever the reference refuses or the native side is not
sure of, it leaves (None).

CI installs the compiled core, so the native module is required here: a missing one fails, it does not skip.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmm.compiled import core_build
from rlmm.state import keys as K
from rlmm.state import (
    keys_native,  # type: ignore[attr-defined]
    rows,
)
from rlmm.state import max_timestamp as MT

FUZZ = settings(
    max_examples=500,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)
I32, I64 = 1 << 31, 1 << 63
# ints at and beyond the bounds of the fields, and any other
ints = st.one_of(
    st.sampled_from([-I64 - 1, -I64, -I32 - 1, -I32, -1, 0, 1, I32 - 1, I32, I64 - 1, I64, 1 << 64]),
    st.integers(-(1 << 70), 1 << 70),
    st.integers(-I32, I32 - 1),
)
blobs = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16), st.binary(max_size=20))
others = st.sampled_from([True, 1.0, "abcd", None, bytearray(4)])

CASES: list[tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = [
    (keys_native.epoch_prefix, K.reference_epoch_prefix, (blobs, ints)),
    (keys_native.offset_key, K.reference_offset_key, (blobs, ints, ints)),
    (keys_native.timestamp_entry, MT.reference_entry, (ints, ints, blobs)),
    (
        keys_native.ref_entry,
        rows.reference_ref_entry,
        (
            blobs,
            ints,
            ints,
            st.one_of(st.booleans(), st.sampled_from([0, 1, 2, None])),
            ints,
            ints,
            st.binary(max_size=40),
        ),
    ),
    (
        keys_native.segment_row,
        rows.reference_segment_row,
        (
            st.dictionaries(st.one_of(ints, st.integers(-3, 3)), st.one_of(st.integers(-2, 300), ints), max_size=3),
            st.binary(max_size=40),
        ),
    ),
]


def check(native: Callable[..., Any], reference: Callable[..., Any], args: tuple[Any, ...]) -> bytes | None:
    answer = native(*args)
    try:
        expected = reference(*args)
    except Exception:  # noqa: BLE001  # whatever the reference refuses, the native side leaves
        assert answer is None, f"the reference refuses {args}, the native side built {answer!r}"
        return None
    assert answer is None or answer == expected, args
    return answer


@pytest.mark.parametrize(
    "native, reference, strategies",
    CASES,
    ids=["epoch_prefix", "offset_key", "timestamp_entry", "ref_entry", "segment_row"],
)
@FUZZ
@given(data=st.data())
def test_native_keys_are_the_references(
    native: Callable[..., Any], reference: Callable[..., Any], strategies: tuple[Any, ...], data: st.DataObject
) -> None:
    args = tuple(
        data.draw(st.one_of(strategy, others) if data.draw(st.integers(0, 9)) == 0 else strategy)
        for strategy in strategies
    )
    check(native, reference, args)


int64s = st.integers(-I64, I64 - 1)
# an epoch's start offsets: sorted as the offset cache holds them, or in any order (both sides bisect alike)
start_offsets = st.one_of(
    st.lists(int64s, max_size=40).map(sorted),
    st.lists(int64s, max_size=40),
    st.lists(st.integers(-3, 3), max_size=10).map(sorted),
    st.integers(0, 5_000).map(lambda n: list(range(0, 100 * n, 100))),
).map(lambda values: array("q", values))
not_start_offsets = st.one_of(
    st.lists(st.integers(-100, 100), max_size=5).map(lambda v: array("l", v)),
    st.lists(st.integers(-100, 100), max_size=5).map(lambda v: array("i", v)),
    st.lists(st.integers(-100, 100), max_size=5),
    st.lists(st.integers(-100, 100), max_size=5).map(tuple),
)


@FUZZ
@given(
    prefix=st.one_of(st.binary(min_size=8, max_size=8), blobs, others),
    starts=st.one_of(start_offsets, start_offsets, not_start_offsets),
    offset=st.one_of(ints, int64s, st.integers(-400, 500_100), others),
)
def test_the_native_floor_key_is_the_references(prefix: Any, starts: Any, offset: Any) -> None:
    before = array("q", starts) if isinstance(starts, array) and starts.typecode == "q" else None
    check(keys_native.floor_key, K.reference_floor_key, (prefix, starts, offset))
    assert before is None or starts == before  # neither side changes the start offsets


def test_the_usual_floor_keys_are_answered() -> None:
    prefix = K.reference_epoch_prefix(b"\x00\x00\x01\x02", 7)
    for starts in (array("q"), array("q", [0]), array("q", [-I64, 5, 9, I64 - 1]), array("q", range(0, 10_000, 100))):
        for offset in (-I64, -1, 0, 1, 4, 5, 6, 9, 10, 99, 100, 101, 9_900, 9_999, 10_000, I64 - 1):
            assert check(keys_native.floor_key, K.reference_floor_key, (prefix, starts, offset)) is not None


def read_int64(data: bytes, pos: int) -> int:
    return struct.unpack_from(">q", data, pos)[0]


@FUZZ
@given(data=st.one_of(st.binary(max_size=40), others), pos=st.one_of(st.integers(-12, 44), ints, others))
def test_the_native_int64_field_is_the_references(data: Any, pos: Any) -> None:
    check(keys_native.read_int64, read_int64, (data, pos))


def test_an_entrys_row_is_written_natively() -> None:
    for number in (-I64, -1, 0, 1, 123_456_789, I64 - 1):
        for txn_index_empty in (True, False):
            for size, value in ((-I32, b""), (7, b"value"), (I32 - 1, bytes(range(256)))):
                fields = (bytes(range(16)), number, -number - 1, txn_index_empty, size, number, value)
                raw = check(keys_native.ref_entry, rows.reference_ref_entry, fields)
                assert raw is not None
                assert rows.RefEntry(*fields).pack() == raw
                assert rows.RefEntry.unpack(raw).pack() == raw


def test_a_segments_row_of_one_membership_is_written_natively() -> None:
    for epoch in (-I32, -1, 0, 1, I32 - 1):
        for flags in (1, 2, 3):
            for value in (b"", b"value", bytes(range(256))):
                raw = check(keys_native.segment_row, rows.reference_segment_row, ({epoch: flags}, value))
                assert raw is not None
                assert rows.pack_segment_row({epoch: flags}, value) == raw
                assert rows.unpack_memberships(raw) == {epoch: flags} and rows.segment_row_value(raw) == value
    assert keys_native.segment_row({1: 1, 2: 2}, b"") is None  # two memberships: the reference sorts them


def test_an_entrys_epoch_end_is_read_natively() -> None:
    for epoch_end in (-I64, -1, 0, 1, 123_456_789, I64 - 1):
        raw = rows.RefEntry(bytes(range(16)), epoch_end, I64 - 1, True, 7, -I64, b"value").pack()
        assert rows.reference_ref_epoch_end(raw) == epoch_end
        assert check(keys_native.read_int64, read_int64, (raw, 16)) == epoch_end
        assert rows.ref_epoch_end(raw) == epoch_end
        assert check(keys_native.read_int64, read_int64, (raw, len(raw) - 8)) is not None


def test_the_usual_keys_are_answered() -> None:
    tpid, segment_id = b"\x00\x00\x01\x02", bytes(range(16))
    for epoch in (-I32, -1, 0, 1, 7, I32 - 1):
        assert check(keys_native.epoch_prefix, K.reference_epoch_prefix, (tpid, epoch)) is not None
        for offset in (-I64, -1, 0, 1, 123_456_789, I64 - 1):
            assert check(keys_native.offset_key, K.reference_offset_key, (tpid, epoch, offset)) is not None
            assert check(keys_native.timestamp_entry, MT.reference_entry, (epoch, offset, segment_id)) is not None


@pytest.mark.parametrize(
    "native, args",
    [
        (keys_native.epoch_prefix, (b"abc", 1)),  # the reference pads a short tpid
        (keys_native.epoch_prefix, (b"abcde", 1)),  # and cuts a long one
        (keys_native.epoch_prefix, (b"abcd", I32)),
        (keys_native.epoch_prefix, (b"abcd", True)),
        (keys_native.offset_key, (b"abcd", 1, I64)),
        (keys_native.offset_key, (b"abcd", 1, -I64 - 1)),
        (keys_native.timestamp_entry, (1, 2, bytes(15))),
        (keys_native.timestamp_entry, (1, 2, bytearray(16))),
        (keys_native.timestamp_entry, (1 << 64, 2, bytes(16))),
        (
            keys_native.ref_entry,
            (bytes(16), 1, 2, 1, 3, 4, b""),
        ),  # the reference packs any truth value
        (keys_native.ref_entry, (bytes(16), 1, 2, True, 3, 4, bytearray(1))),
        (keys_native.ref_entry, (bytes(16), 1, 2, True, I32, 4, b"")),
        (keys_native.floor_key, (bytes(7), array("q", [1]), 1)),
        (keys_native.floor_key, (bytes(8), array("l", [1]), 1)),  # an array of another type, even of 8-byte items
        (keys_native.floor_key, (bytes(8), [1], 1)),
        (keys_native.floor_key, (bytes(8), array("q", [1]), I64)),
        (keys_native.floor_key, (bytes(8), array("q", [1]), True)),
    ],
)
def test_unusual_keys_are_left_to_the_reference(native: Callable[..., Any], args: tuple[Any, ...]) -> None:
    assert native(*args) is None


def test_the_references_call_the_native_side_with_the_compiled_core() -> None:
    compiled = core_build() == "compiled"
    assert (K._native_epoch_prefix is keys_native.epoch_prefix) == compiled
    assert (K._native_offset_key is keys_native.offset_key) == compiled
    assert (MT._native_entry is keys_native.timestamp_entry) == compiled
    assert (K._native_floor_key is keys_native.floor_key) == compiled
    assert (rows._native_read_int64 is keys_native.read_int64) == compiled
    assert (rows._native_segment_row is keys_native.segment_row) == compiled
    assert (rows._native_ref_entry is keys_native.ref_entry) == compiled
    assert K.epoch_prefix(b"abcd", 3) == K.reference_epoch_prefix(b"abcd", 3)
    assert K.offset_key(b"abcd", 3, 9) == K.reference_offset_key(b"abcd", 3, 9)
    assert MT.entry(5, 9, bytes(16)) == MT.reference_entry(5, 9, bytes(16))
    starts = array("q", [0, 100])
    expected = bytes(8) + K.offset_bytes(100)
    assert K.floor_key(bytes(8), starts, 150) == K.reference_floor_key(bytes(8), starts, 150) == expected
