"""rlmm.records against what Kafka 4.3.1 wrote and decoded (tests/compat/records.jsonl), plus the
corners of Kafka's reader that the corpus does not reach, built by patching well-formed records."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from rlmm.errors import DecodeError
from rlmm.records import (
    PartitionDelete,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    decode_value,
    encode_value,
    from_canonical,
    serde,
    to_canonical,
    uuid_from_str,
    uuid_to_str,
)
from rlmm.records.wire import uvarint
from tests import kafka_compat as compat

CASES = compat.params(compat.load_records, lambda row, _: row["case"])


def _decoded(case: dict[str, Any]) -> Any:
    return decode_value(bytes.fromhex(case["hex"]))


def _kafka_error(error: DecodeError) -> dict[str, str]:
    out = {"error": error.kafka_exception}
    if error.kafka_cause is not None:
        out["cause"] = error.kafka_cause
    return out


def _carries_only_unknown_tags(case: dict[str, Any]) -> bool:
    return bool(case.get("top_level_unknown_tags_seen")) or case["case"].startswith("unknown-tag-")


def test_corpus_is_present_and_named_uniquely() -> None:
    rows = compat.load_records()
    names = [row["case"] for row in rows]
    assert rows and len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES)
def test_decode_matches_kafka(case: dict[str, Any]) -> None:
    case = compat.require(case)
    data = bytes.fromhex(case["hex"])
    if case["deserialize_error"] is not None:
        with pytest.raises(DecodeError) as caught:
            decode_value(data)
        assert _kafka_error(caught.value) == case["deserialize_error"], str(caught.value)
        assert case["decoded"] is None
    else:
        decoded = to_canonical(decode_value(data))
        assert compat.same_json(decoded, case["decoded"]), (decoded, case["decoded"])


@pytest.mark.parametrize("case", CASES)
def test_encode_matches_kafka_reserialization(case: dict[str, Any]) -> None:
    case = compat.require(case)
    if case["decoded"] is None:
        return
    record = _decoded(case)
    expected = case.get("reserialized_hex") or case["hex"]
    assert encode_value(record, keep_unknown_tags=False).hex() == expected
    kept = encode_value(record)
    if _carries_only_unknown_tags(case):
        assert kept.hex() == case["hex"]
    again = decode_value(kept)
    assert again == record
    assert again.unknown_tags == record.unknown_tags


@pytest.mark.parametrize("case", CASES)
def test_canonical_round_trip(case: dict[str, Any]) -> None:
    case = compat.require(case)
    if case["decoded"] is None:
        return
    record = _decoded(case)
    assert from_canonical(to_canonical(record)) == record
    assert to_canonical(from_canonical(case["decoded"])) == case["decoded"]


@pytest.mark.parametrize("case", CASES)
def test_unknown_tags_are_kept_where_kafka_saw_them(case: dict[str, Any]) -> None:
    case = compat.require(case)
    if case["decoded"] is None:
        return
    tags = _decoded(case).unknown_tags
    seen = case.get("top_level_unknown_tags_seen") or []
    assert [[tag, raw.hex()] for path, tag, raw in tags if path == ""] == seen
    name = case["case"]
    if "-nested-" in name:
        nested = {path for path, _, _ in tags if path}
        assert nested, "nested unknown tags were dropped"
        if "epoch-entry" in name:
            assert all(path.startswith("epoch:") for path in nested)
        elif name.startswith("unknown-tag-del-"):
            assert nested == {"topic_id_partition"}
        elif "topic-id-partition" in name:
            assert nested == {"segment_id.topic_id_partition"}
        elif "segment-id" in name:
            assert nested == {"segment_id"}
    elif not seen:
        assert tags == ()


TAG_VARIANTS = compat.params(
    lambda: [row for row in compat.load_records() if "same_as_case" in row], lambda row, _: row["case"]
)


@pytest.mark.parametrize("case", TAG_VARIANTS)
def test_equals_same_as_case(case: dict[str, Any]) -> None:
    case = compat.require(case)
    by_name = {row["case"]: row for row in compat.load_records()}
    same = _decoded(case) == _decoded(by_name[case["same_as_case"]])
    assert same == case["equals_same_as_case"]


@pytest.mark.parametrize("case", CASES)
def test_fast_segment_path_agrees_with_general_reader(case: dict[str, Any]) -> None:
    case = compat.require(case)
    data = bytes.fromhex(case["hex"])
    fast = serde._read_common_segment(data) if data[:3] == b"\x01\x00\x00" else None
    if fast is not None:
        general = serde._read_segment(data, 3)
        assert (fast, fast.txn_index_empty, fast.unknown_tags) == (
            general,
            general.txn_index_empty,
            general.unknown_tags,
        )


def test_uuid_text_round_trips_every_corpus_uuid() -> None:
    texts = set()
    for row in compat.load_records():
        decoded = row["decoded"] or {}
        texts.update(decoded[key] for key in ("topic_id", "segment_id") if key in decoded)
    assert texts
    for text in texts:
        raw = uuid_from_str(text)
        assert len(raw) == 16 and uuid_to_str(raw) == text


@pytest.mark.parametrize(
    "text",
    ["", "AAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAA==",
     "AAAAAAAAAAAAAAAAAAAAAB", "AAAAAAAAAAAAAAAAAAAA+A", "AAAAAAAAAAAAAAAAAAAA/A",
     "AAAAAAAAAAAAAAAAAAAA A", "AAAAAAAAAAAAAAAAAAAAAé", None, b"AAAAAAAAAAAAAAAAAAAAAA"],
)  # fmt: skip
def test_uuid_from_str_refuses_anything_else(text: Any) -> None:
    with pytest.raises(ValueError):
        uuid_from_str(text)


# --- Kafka's reader beyond the corpus -------------------------------------------------------------

TOPIC_ID = bytes(range(16))
SEGMENT_ID = bytes(range(16, 32))
EPOCH = struct.Struct(">iq")
ONE_EPOCH = b"\x02" + EPOCH.pack(3, 0) + b"\x00"


def segment_bytes(
    *,
    header: bytes = b"\x01\x00\x00",
    name: bytes = b"\x07orders",
    tp_tags: bytes = b"\x00",
    segment_tags: bytes = b"\x00",
    start: int = 0,
    end: int = 10,
    epochs: bytes = ONE_EPOCH,
    custom: bytes = b"\x00",
    state: int = 1,
    tags: bytes = b"\x00",
) -> bytes:
    """A RemoteLogSegmentMetadataRecord assembled from raw pieces (defaults: a valid record)."""
    return b"".join(
        [
            header, name, TOPIC_ID, struct.pack(">i", 5), tp_tags, SEGMENT_ID, segment_tags,
            struct.pack(">qqiqq", start, end, 1, 1000, 2000), epochs, struct.pack(">i", 4096),
            custom, struct.pack(">b", state), tags,
        ]
    )  # fmt: skip


def snapshot_bytes(*, start: int = 0, end: int = 10, epochs: bytes = ONE_EPOCH, state: int = 1) -> bytes:
    return b"".join(
        [
            b"\x01\x03\x00", SEGMENT_ID, struct.pack(">qqiqq", start, end, 1, 1000, 2000), epochs,
            struct.pack(">i", 4096), b"\x00", struct.pack(">b", state), b"\x00",
        ]
    )  # fmt: skip


def delete_bytes(state: int) -> bytes:
    head = b"\x01\x02\x00\x07orders" + TOPIC_ID + struct.pack(">i", 5) + b"\x00"
    return head + struct.pack(">iqb", 1, 2, state) + b"\x00"


def update_bytes(state: int) -> bytes:
    return (
        b"\x01\x01\x00\x07orders" + TOPIC_ID + struct.pack(">i", 5) + b"\x00" + SEGMENT_ID + b"\x00"
        + struct.pack(">iq", 1, 2) + b"\x00" + struct.pack(">b", state) + b"\x00"
    )  # fmt: skip


FIVE_BYTE_MINUS_ONE = uvarint(-1)  # ff ff ff ff 0f
MPE = "MetadataParseException"

REFUSED = {
    "frame version 32768": (uvarint(32768) + b"\x00\x00", MPE, None),
    "frame version varint too long": (b"\xff\xff\xff\xff\xff", MPE, "IllegalArgumentException"),
    "frame version truncated varint": (b"\x81", MPE, "BufferUnderflowException"),
    "api key 4": (segment_bytes(header=b"\x01\x04\x00"), MPE, "UnsupportedVersionException"),
    "api key 65536 too large": (segment_bytes(header=b"\x01" + uvarint(65536) + b"\x00"), MPE, None),
    "unknown api key, version truncated": (b"\x01\x09", MPE, "BufferUnderflowException"),
    "version -1": (segment_bytes(header=b"\x01\x00" + uvarint(-1)), MPE, "UnsupportedVersionException"),
    "topic name null": (segment_bytes(name=b"\x00"), MPE, "RuntimeException"),
    "topic name longer than 0x7fff": (segment_bytes(name=uvarint(0x8001) + b"a" * 0x8000), MPE, "RuntimeException"),
    "topic name length wraps": (segment_bytes(name=uvarint(-(1 << 31))), MPE, "RuntimeException"),
    "topic name past the end": (b"\x01\x00\x00\x07ord", MPE, "RuntimeException"),
    "epochs null": (segment_bytes(epochs=b"\x00"), MPE, "RuntimeException"),
    "epoch count beyond remaining": (segment_bytes(epochs=b"\x7f"), MPE, "RuntimeException"),
    "custom metadata past the end": (segment_bytes(custom=b"\x7f"), MPE, "RuntimeException"),
    "custom metadata length wraps": (segment_bytes(custom=uvarint(-(1 << 31))), MPE, "RuntimeException"),
    "unknown tag past the end": (segment_bytes(tags=b"\x01\x07\x7f"), MPE, "RuntimeException"),
    "unknown tag negative size": (
        segment_bytes(tags=b"\x01\x07" + FIVE_BYTE_MINUS_ONE),
        MPE,
        "NegativeArraySizeException",
    ),
    "nested unknown tag past the end": (segment_bytes(segment_tags=b"\x01\x01\x7f"), MPE, "RuntimeException"),
    "tag count without tags": (segment_bytes(tags=b"\x02\x07\x00"), MPE, "BufferUnderflowException"),
    "txn tag without its byte": (segment_bytes(tags=b"\x01\x00\x01"), MPE, "BufferUnderflowException"),
    "tag varint too long": (segment_bytes(tags=b"\x01\x80\x80\x80\x80\x80"), MPE, "IllegalArgumentException"),
    "trailing byte": (segment_bytes() + b"\x00", MPE, None),
    "truncated mid-epochs": (segment_bytes()[:-10], MPE, "BufferUnderflowException"),
    "negative start before bad state": (segment_bytes(start=-1, state=9), "IllegalArgumentException", None),
    "end before start before bad state": (segment_bytes(start=5, end=4, state=9), "IllegalArgumentException", None),
    "no epochs before bad state": (segment_bytes(epochs=b"\x01", state=9), "IllegalArgumentException", None),
    "segment state -1": (segment_bytes(state=-1), "NullPointerException", None),
    "segment state 4": (segment_bytes(state=4), "NullPointerException", None),
    "snapshot bad state before no epochs": (snapshot_bytes(epochs=b"\x01", state=4), "NullPointerException", None),
    "snapshot no epochs": (snapshot_bytes(epochs=b"\x01"), "IllegalArgumentException", None),
    "update state 4": (update_bytes(4), "NullPointerException", None),
    "delete state 3": (delete_bytes(3), "NullPointerException", None),
    "delete state -1": (delete_bytes(-1), "NullPointerException", None),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_like_kafka(name: str) -> None:
    data, error, cause = REFUSED[name]
    with pytest.raises(DecodeError) as caught:
        decode_value(data)
    assert (caught.value.kafka_exception, caught.value.kafka_cause) == (error, cause), str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_parse_errors_say_where() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_value(segment_bytes()[:50])
    assert caught.value.position is not None and 0 <= caught.value.position <= 50
    assert f"byte {caught.value.position}" in str(caught.value)


def _segment(data: bytes) -> SegmentMetadata:
    record = decode_value(data)
    assert isinstance(record, SegmentMetadata)
    return record


def test_header_values_narrow_to_java_short() -> None:
    # (short) of a negative int: -65535 -> 1 (frame version), -65536 -> 0 (api key and version)
    data = segment_bytes(header=uvarint(-65535) + uvarint(-65536) + uvarint(-65536))
    assert _segment(data) == _segment(segment_bytes())


def test_negative_lengths_and_counts_follow_java() -> None:
    # bytes length -1 - 1 < 0: null; a negative tag count reads no tags
    record = _segment(segment_bytes(custom=FIVE_BYTE_MINUS_ONE, tags=FIVE_BYTE_MINUS_ONE))
    assert record.custom_metadata is None and record.unknown_tags == ()


def test_txn_index_empty_reads_one_byte_whatever_its_size() -> None:
    assert _segment(segment_bytes(tags=b"\x01\x00\x00\x01")).txn_index_empty
    assert _segment(segment_bytes(tags=b"\x02\x00\x05\x01\x07\x00")).txn_index_empty
    assert not _segment(segment_bytes(tags=b"\x02\x00\x01\x01\x00\x01\x00")).txn_index_empty  # last wins
    unknown = _segment(segment_bytes(tp_tags=b"\x01\x00\x01\x01")).unknown_tags  # nested: unknown
    assert unknown == (("segment_id.topic_id_partition", 0, b"\x01"),)


def test_epochs_sorted_last_duplicate_wins_with_its_tags() -> None:
    entry = EPOCH.pack
    tagged = b"\x01\x07\x01\xaa"
    wire_epochs = b"\x04" + entry(5, 1) + tagged + entry(2, 0) + b"\x00" + entry(5, 3) + b"\x00"
    record = _segment(segment_bytes(epochs=wire_epochs))
    assert record.segment_leader_epochs == ((2, 0), (5, 3)) and record.unknown_tags == ()
    record = _segment(segment_bytes(epochs=b"\x03" + entry(5, 1) + b"\x00" + entry(5, 3) + tagged))
    assert record.segment_leader_epochs == ((5, 3),)
    assert record.unknown_tags == (("epoch:5", 7, b"\xaa"),)


def test_malformed_utf8_is_replaced() -> None:
    assert _segment(segment_bytes(name=b"\x04a\xffb")).tp.topic == "a\ufffdb"


def test_snapshot_offsets_are_not_checked() -> None:
    record = decode_value(snapshot_bytes(start=-5, end=-9))
    assert isinstance(record, SegmentSnapshot) and (record.start_offset, record.end_offset) == (-5, -9)


def test_update_and_delete_states() -> None:
    assert decode_value(update_bytes(3)) == SegmentUpdate(
        decode_value(delete_bytes(0)).tp, SEGMENT_ID, 1, 2, None, SegmentState.DELETE_SEGMENT_FINISHED
    )
    assert isinstance(decode_value(delete_bytes(2)), PartitionDelete)


def test_bytes_like_input() -> None:
    data = segment_bytes()
    assert decode_value(bytearray(data)) == decode_value(memoryview(data)) == decode_value(data)


def test_encode_refuses_what_cannot_be_written() -> None:
    record = _segment(segment_bytes())
    bad = [
        dataclasses.replace(record, start_offset=1 << 63),
        dataclasses.replace(record, broker_id=1 << 31),
        dataclasses.replace(record, segment_id=b"short"),
        dataclasses.replace(record, tp=dataclasses.replace(record.tp, topic="x" * 0x8000)),
        dataclasses.replace(record, unknown_tags=(("", 0, b"\x01"),)),
        dataclasses.replace(record, unknown_tags=(("topic_id_partition", 1, b""),)),
        dataclasses.replace(record, unknown_tags=(("epoch:99", 1, b""),)),
    ]
    for value in bad:
        with pytest.raises(ValueError):
            encode_value(value)
    with pytest.raises(TypeError):
        encode_value("not a record")  # type: ignore[arg-type]


def test_unknown_tags_written_in_tag_order_with_txn() -> None:
    record = dataclasses.replace(
        _segment(segment_bytes()),
        txn_index_empty=True,
        unknown_tags=(("", 9, b"\x02"), ("", 3, b""), ("segment_id", 1, b"\x05")),
    )
    data = encode_value(record)
    assert data == segment_bytes(segment_tags=b"\x01\x01\x01\x05", tags=b"\x03\x00\x01\x01\x03\x00\x09\x01\x02")
    assert encode_value(record, keep_unknown_tags=False) == segment_bytes(tags=b"\x01\x00\x01\x01")
