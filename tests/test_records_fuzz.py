"""Property tests: decode_value never fails but with DecodeError, whatever the bytes; what it returns
re-encodes to itself; generated records round-trip through the wire and the canonical form."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    decode_value,
    encode_value,
    from_canonical,
    serde,
    to_canonical,
)
from tests import kafka_compat as compat

FUZZ = settings(
    max_examples=800,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)

KAFKA_ERRORS = {
    "MetadataParseException": {
        None,
        "BufferUnderflowException",
        "UnsupportedVersionException",
        "RuntimeException",
        "IllegalArgumentException",
        "NegativeArraySizeException",
    },
    "IllegalArgumentException": {None},
    "NullPointerException": {None},
}


def _corpus() -> list[bytes]:
    try:
        return [bytes.fromhex(row["hex"]) for row in compat.load_records()]
    except compat.CompatDataMissing:
        return []


CORPUS = _corpus()


def _require_corpus() -> None:
    if not CORPUS:
        compat.compat_dir()  # raises the explanation
        pytest.fail("records.jsonl holds no records")


def check_decode(data: bytes) -> None:
    """decode_value either refuses like Kafka or returns a record that re-encodes to itself."""
    try:
        record = decode_value(data)
    except DecodeError as error:
        assert error.kafka_cause in KAFKA_ERRORS[error.kafka_exception], str(error)
        _check_fast_path(data, None)
        return
    again = decode_value(encode_value(record))
    assert again == record
    assert again.unknown_tags == _ascending_per_struct(record.unknown_tags)
    assert decode_value(encode_value(record, keep_unknown_tags=False)) == record
    _check_fast_path(data, record)


def _ascending_per_struct(tags: tuple[tuple[str, int, bytes], ...]) -> tuple[tuple[str, int, bytes], ...]:
    """Unknown tags as a re-encoded record reads back: each struct's tags in ascending order."""
    first = {}
    for i, (path, _, _) in enumerate(tags):
        first.setdefault(path, i)
    return tuple(sorted(tags, key=lambda t: (first[t[0]], t[1])))


def _check_fast_path(data: bytes, record: RemoteLogMetadata | None) -> None:
    """The fast segment reader never disagrees with the general one."""
    if data[:3] != b"\x01\x00\x00":
        return
    fast = serde._read_common_segment(data)
    if fast is not None:
        assert record is not None and isinstance(record, SegmentMetadata)
        assert (fast, fast.txn_index_empty, fast.unknown_tags) == (
            record,
            record.txn_index_empty,
            record.unknown_tags,
        )
        assert serde._read_segment(data, 3) == fast


HEADERS = [bytes([1, api, 0]) for api in range(4)]


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    check_decode(data)


@FUZZ
@given(st.sampled_from(HEADERS), st.binary(max_size=300))
def test_random_bodies(header: bytes, body: bytes) -> None:
    check_decode(header + body)


def test_every_truncation_of_every_corpus_record() -> None:
    _require_corpus()
    for data in CORPUS:
        for end in range(len(data)):
            check_decode(data[:end])


corpus_records = st.integers(min_value=0).map(lambda i: CORPUS[i % len(CORPUS)] if CORPUS else b"")


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(corpus_records))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "splice"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and at < len(data):
            data[at] = draw(st.one_of(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]), st.integers(0, 255)))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "splice":
            other = draw(corpus_records)
            data[at:] = other[draw(st.integers(0, len(other))) :]
    return bytes(data)


@FUZZ
@given(mutated())
def test_mutated_corpus_records(data: bytes) -> None:
    _require_corpus()
    check_decode(data)


# --- generated valid records --------------------------------------------------------------------

int8 = st.integers(-(1 << 7), (1 << 7) - 1)
int32 = st.one_of(st.sampled_from([-(1 << 31), -1, 0, 1, (1 << 31) - 1]), st.integers(-(1 << 31), (1 << 31) - 1))
int64 = st.one_of(
    st.sampled_from([-(1 << 63), -1, 0, 1, (1 << 53) + 1, (1 << 62), (1 << 63) - 1]),
    st.integers(-(1 << 63), (1 << 63) - 1),
)
offset = st.one_of(st.sampled_from([0, 1, (1 << 62), (1 << 63) - 1]), st.integers(0, (1 << 63) - 1))
uuids = st.one_of(st.sampled_from([bytes(16), b"\xff" * 16, b"\x80" + bytes(15)]), st.binary(min_size=16, max_size=16))
topics = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
custom_metadata = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=300))
segment_states = st.sampled_from(list(SegmentState))
topic_partitions = st.builds(TopicIdPartition, uuids, topics, int32)
epochs = st.dictionaries(int32, int64, min_size=1, max_size=5).map(lambda d: tuple(sorted(d.items())))


@st.composite
def segments(draw: st.DrawFn) -> SegmentMetadata:
    start = draw(offset)
    return SegmentMetadata(
        draw(topic_partitions), draw(uuids), start, draw(st.integers(start, (1 << 63) - 1)), draw(int32),
        draw(int64), draw(int64), draw(epochs), draw(int32), draw(custom_metadata), draw(segment_states),
        draw(st.booleans()),
    )  # fmt: skip


updates = st.builds(SegmentUpdate, topic_partitions, uuids, int32, int64, custom_metadata, segment_states)
deletes = st.builds(PartitionDelete, topic_partitions, int32, int64, st.sampled_from(list(PartitionDeleteState)))
snapshots = st.builds(
    SegmentSnapshot, uuids, int64, int64, int32, int64, int64, epochs, int32, custom_metadata,
    segment_states, st.booleans(),
)  # fmt: skip
records = st.one_of(segments(), updates, deletes, snapshots)


@FUZZ
@given(records)
def test_generated_records_round_trip(record: RemoteLogMetadata) -> None:
    data = encode_value(record)
    assert data == encode_value(record, keep_unknown_tags=False)
    decoded = decode_value(data)
    assert decoded == record and decoded.unknown_tags == ()
    if isinstance(decoded, SegmentMetadata):
        assert decoded.txn_index_empty == record.txn_index_empty
    _check_fast_path(data, decoded)
    canonical = json.loads(json.dumps(to_canonical(record)))
    assert from_canonical(canonical) == record


def _paths(record: RemoteLogMetadata) -> list[str]:
    """The struct paths of a record's tagged sections, in the order decode_value reports them."""
    if isinstance(record, PartitionDelete):
        return ["topic_id_partition", ""]
    paths = [] if isinstance(record, SegmentSnapshot) else ["segment_id.topic_id_partition", "segment_id"]
    if not isinstance(record, SegmentUpdate):
        paths += [f"epoch:{epoch}" for epoch, _ in record.segment_leader_epochs]
    return paths + [""]


@st.composite
def records_with_unknown_tags(draw: st.DrawFn) -> RemoteLogMetadata:
    record = draw(records)
    tags = []
    for path in _paths(record):
        low = 1 if path == "" and isinstance(record, (SegmentMetadata, SegmentSnapshot)) else 0
        for tag in sorted(draw(st.sets(st.integers(low, 400), max_size=3))):
            tags.append((path, tag, draw(st.binary(max_size=20))))
    return dataclasses.replace(record, unknown_tags=tuple(tags))


@FUZZ
@given(records_with_unknown_tags())
def test_unknown_tags_round_trip(record: RemoteLogMetadata) -> None:
    decoded = decode_value(encode_value(record))
    assert decoded == record and decoded.unknown_tags == record.unknown_tags
    assert decode_value(encode_value(record, keep_unknown_tags=False)).unknown_tags == ()
