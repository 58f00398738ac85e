"""The native reader and writer of the topic's usual values (rlmm/records/wire_native.pyx) against the reference
(rlmm/records/serde.py): what the native side answers is the reference's answer, field for field and byte for
byte, and whatever the reference refuses it does not answer (None), leaving the reference to refuse it.

CI installs the compiled core, so the native module is required here: a missing one fails, it does not skip.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmm.compiled import core_build
from rlmm.errors import DecodeError
from rlmm.records import (
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
    serde,
    wire_native,  # type: ignore[attr-defined]
)
from tests.test_records_fuzz import CORPUS, FUZZ, _require_corpus, mutated, records, records_with_unknown_tags

TOPIC_ID, SEGMENT_ID = bytes(range(16)), bytes(range(16, 32))


def assert_same(native: RemoteLogMetadata, reference: RemoteLogMetadata) -> None:
    """Equal in every field, unknown tags included (equality skips them), and of the same types."""
    assert type(native) is type(reference)
    for field in dataclasses.fields(reference):
        mine, theirs = getattr(native, field.name), getattr(reference, field.name)
        assert mine == theirs and type(mine) is type(theirs), field.name
    if not isinstance(reference, SegmentSnapshot):
        assert [type(getattr(native.tp, f.name)) for f in dataclasses.fields(TopicIdPartition)] == [
            type(getattr(reference.tp, f.name)) for f in dataclasses.fields(TopicIdPartition)
        ]


def check_decode(data: bytes) -> RemoteLogMetadata | None:
    """The native answer for ``data`` (None when it leaves it to the reference), checked against the reference."""
    native = wire_native.decode_common(data)
    try:
        reference = serde._reference_decode(data)
    except DecodeError:
        assert native is None, f"the reference refuses {data.hex()}, the native reader decoded {native}"
        return None
    if native is not None:
        assert_same(native, reference)
    return native


def check_encode(record: Any) -> bytes | None:
    native = serde._native_encode(record)
    try:
        reference = serde._reference_encode(record)
    except (ValueError, TypeError):
        assert native is None, f"the reference cannot encode {record}, the native writer did"
        return None
    assert native is None or native == reference
    return native


def segment(**changes: Any) -> SegmentMetadata:
    fields: dict[str, Any] = dict(
        tp=TopicIdPartition(TOPIC_ID, "orders", 3),
        segment_id=SEGMENT_ID,
        start_offset=100,
        end_offset=199,
        broker_id=1,
        max_timestamp_ms=1_700_000_000_000,
        event_timestamp_ms=1_700_000_000_500,
        segment_leader_epochs=((0, 100), (2, 150)),
        segment_size_in_bytes=4096,
        custom_metadata=None,
        state=SegmentState.COPY_SEGMENT_STARTED,
        txn_index_empty=False,
        unknown_tags=(),
    )
    fields.update(changes)
    return SegmentMetadata(**fields)


def test_serde_reads_and_writes_through_the_native_side_with_the_compiled_core() -> None:
    compiled = core_build() == "compiled"
    assert (serde._decode_common is wire_native.decode_common) == compiled
    assert (serde._encode_segment_fields is wire_native.encode_segment_fields) == compiled
    record = segment()
    assert (check_encode(record) is not None) == compiled


def test_corpus_records_and_every_truncation_of_them() -> None:
    _require_corpus()
    answered = 0
    for data in CORPUS:
        answered += check_decode(data) is not None
        for end in range(len(data)):
            check_decode(data[:end])
    assert answered >= 3, f"the native reader answered {answered} of the {len(CORPUS)} records Kafka wrote"


@FUZZ
@given(records)
def test_generated_records(record: RemoteLogMetadata) -> None:
    """Every generated segment and update is in a usual shape (few epochs, short names and metadata): the native
    side must answer it."""
    data = serde._reference_encode(record)
    native = check_decode(data)
    if isinstance(record, (SegmentMetadata, SegmentUpdate)):
        assert native is not None
    else:
        assert native is None
    encoded = check_encode(record)
    assert (encoded is not None) == isinstance(record, SegmentMetadata)


@FUZZ
@given(records_with_unknown_tags())
def test_records_with_unknown_tags_are_left_to_the_reference(record: RemoteLogMetadata) -> None:
    data = serde._reference_encode(record)
    native = check_decode(data)
    if record.unknown_tags:
        assert native is None
        assert check_encode(record) is None


@FUZZ
@given(mutated())
def test_mutated_corpus_records(data: bytes) -> None:
    _require_corpus()
    check_decode(data)


@FUZZ
@given(st.sampled_from([b"\x01\x00\x00", b"\x01\x01\x00"]), st.binary(max_size=200))
def test_random_bodies(header: bytes, body: bytes) -> None:
    check_decode(header + body)


@pytest.mark.parametrize(
    "changes",
    [
        {"start_offset": -1},  # Kafka refuses it on reading
        {"end_offset": 99},
        {"segment_leader_epochs": ()},
        {"segment_leader_epochs": ((2, 150), (0, 100))},  # unsorted on the wire: the reference sorts
        {"segment_leader_epochs": ((0, 100), (0, 120))},  # a duplicate: the last wins
        {"segment_leader_epochs": tuple((e, 100 + e) for e in range(127))},  # a two-byte count
        {"custom_metadata": b"x" * 200},  # a two-byte length: answered
        {"custom_metadata": b"x" * 20_000},  # a three-byte length
        {"tp": TopicIdPartition(TOPIC_ID, "t" * 200, 3)},  # a two-byte name length: answered
        {"tp": TopicIdPartition(TOPIC_ID, "t" * 20_000, 3)},  # a three-byte name length
        {"tp": TopicIdPartition(TOPIC_ID, "\u00e9\u4e2d\U0001f600", 3)},
        {"state": SegmentState.DELETE_SEGMENT_FINISHED, "txn_index_empty": True},
    ],
)
def test_segment_shapes(changes: dict[str, Any]) -> None:
    record = segment(**changes)
    data = serde._reference_encode(record)
    check_decode(data)
    check_encode(record)


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("0100"),
        serde._reference_encode(segment())[:-1] + b"\x02",  # TxnIndexEmpty's section written otherwise
        serde._reference_encode(segment(txn_index_empty=True))[:-1] + b"\x00",  # TxnIndexEmpty false, written
        serde._reference_encode(segment())[:-2] + b"\x04\x00",  # no such state
        serde._reference_encode(segment()) + b"\x00",  # trailing data
    ],
)
def test_values_left_to_the_reference(data: bytes) -> None:
    assert wire_native.decode_common(data) is None
    check_decode(data)


@pytest.mark.parametrize(
    "changes",
    [
        {"tp": TopicIdPartition(TOPIC_ID, "orders", 1 << 31)},
        {"tp": TopicIdPartition(TOPIC_ID[:15], "orders", 3)},
        {"tp": TopicIdPartition(TOPIC_ID, "\ud800", 3)},  # not encodable in UTF-8
        {"tp": TopicIdPartition(TOPIC_ID, "t" * 0x8000, 3)},
        {"start_offset": 1 << 63},
        {"end_offset": -(1 << 63) - 1},
        {"broker_id": -(1 << 31) - 1},
        {"segment_size_in_bytes": 1 << 31},
        {"segment_leader_epochs": ((0, 100, 1),)},
        {"segment_leader_epochs": ((1 << 31, 100),)},
        {"segment_leader_epochs": ((0, "100"),)},
        {"segment_leader_epochs": tuple((e, 100) for e in range(127))},
        {"unknown_tags": (("", 5, b"x"),)},
    ],
)
def test_segments_left_to_the_reference_writer(changes: dict[str, Any]) -> None:
    """Values out of the format's range, or in a shape the native writer does not write (the compiled records
    refuse values of other types when they are made)."""
    record = segment(**changes)
    assert serde._native_encode(record) is None
    check_encode(record)


def test_only_segments_are_written() -> None:
    update = SegmentUpdate(
        TopicIdPartition(TOPIC_ID, "orders", 3), SEGMENT_ID, 1, 5, None, SegmentState.COPY_SEGMENT_FINISHED
    )
    delete = PartitionDelete(
        TopicIdPartition(TOPIC_ID, "orders", 3), 1, 5, PartitionDeleteState.DELETE_PARTITION_MARKED
    )
    for record in (update, delete, object(), None):
        assert serde._native_encode(record) is None


def test_the_records_of_a_partition_share_its_topic_partition() -> None:
    """Partitions are remembered by their bytes on the wire: one met again is the same object, and one in the same
    slot as another (thousands of partitions) is still told apart."""
    values = [
        serde._reference_encode(segment(tp=TopicIdPartition(TOPIC_ID, name, partition)))
        for name in ("orders", "payments")
        for partition in range(5_000)
    ]
    first = [wire_native.decode_common(value) for value in values]
    again = [wire_native.decode_common(value) for value in values]
    for value, a, b in zip(values, first, again, strict=True):
        reference = serde._reference_decode(value)
        assert a.tp == reference.tp and b.tp == reference.tp
    assert wire_native.decode_common(values[0]).tp is wire_native.decode_common(values[0]).tp


@pytest.mark.parametrize("path", ["segment_id.topic_id_partition", "segment_id"])
def test_tags_inside_the_segment_id_are_left_to_the_reference(path: str) -> None:
    """A tag section inside the segment id, of every size up to 23 bytes and every byte value: a reader that took
    its count for an empty section would read the fields after it shifted, and some of them (a length byte that
    happens to fit) parse whole."""
    tp = TopicIdPartition(TOPIC_ID, "orders", 3)
    for size in range(24):
        for byte in range(256):
            tags = ((path, 5, bytes([byte]) * size),)
            update = SegmentUpdate(tp, SEGMENT_ID, 1, 5, None, SegmentState.COPY_SEGMENT_FINISHED, tags)
            for record in (update, segment(unknown_tags=tags)):
                assert check_decode(serde._reference_encode(record)) is None
