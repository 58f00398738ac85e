"""The view's apply path and the snapshot fold classify raw records with one function (rlmm/state/classify.py):
the same records are quarantined, for the same reasons in the same words; a snapshot record (api key 3) is
routed nowhere; every other record goes to the user partition it names."""

from __future__ import annotations

from pathlib import Path

from rlmm.errors import DecodeError
from rlmm.records.serde import decode_value
from rlmm.state.classify import TOMBSTONE, classify, user_partition
from rlmm.state.view import View
from snapshots.fold import (
    QUARANTINE_KEY,
    UNROUTABLE_KEY,
    fold_stream,
    group_events,
    partition_key,
    quarantined,
    route_key,
)
from tests import kafka_compat as compat

MP = 7


def _raw_values() -> list[tuple[str, bytes | None]]:
    """Kafka's corpus (records it wrote, and bytes it refuses), then values that break each check of the frame."""
    rows = compat.load_records()
    values: list[tuple[str, bytes | None]] = [(row["case"], bytes.fromhex(row["hex"])) for row in rows]
    segment = next(bytes.fromhex(r["hex"]) for r in rows if r["api_key"] == 0 and r["deserialize_error"] is None)
    values += [
        ("tombstone", None),
        ("empty", b""),
        ("garbage", b"\xff" * 9),
        ("frame version 2", b"\x02" + segment[1:]),
        ("api key 9", segment[:1] + b"\x09" + segment[2:]),
        ("version 1", segment[:2] + b"\x01" + segment[3:]),
        ("api key too large", b"\x01\xff\xff\x03\x00"),
        ("truncated", segment[:-5]),
        ("trailing byte", segment + b"\x00"),
    ]
    return values


VALUES = _raw_values()
EVENTS = [(MP, offset, value) for offset, (_, value) in enumerate(VALUES)]


def test_the_table_covers_every_outcome() -> None:
    """Valid records of each kind, and refusals of each kind Kafka's deserializer has."""
    decoded = [classify(value) for _, value in VALUES]
    errors = {(d.kafka_exception, d.kafka_cause) for d in decoded if isinstance(d, DecodeError)}
    assert errors >= {
        ("NullPointerException", None),
        ("IllegalArgumentException", None),
        ("MetadataParseException", None),
        ("MetadataParseException", "BufferUnderflowException"),
        ("MetadataParseException", "UnsupportedVersionException"),
    }
    records = [d for d in decoded if not isinstance(d, DecodeError)]
    assert {type(r).__name__ for r in records} == {
        "SegmentMetadata",
        "SegmentUpdate",
        "PartitionDelete",
        "SegmentSnapshot",
    }
    assert any(user_partition(r) is None for r in records)


def test_classify_is_the_decoder_with_tombstones_refused() -> None:
    for name, value in VALUES:
        decoded = classify(value)
        if value is None:
            assert isinstance(decoded, DecodeError) and str(decoded).startswith(TOMBSTONE), name
            continue
        try:
            expected = decode_value(value)
        except DecodeError as exc:
            assert isinstance(decoded, DecodeError) and str(decoded) == str(exc), name
            assert (decoded.kafka_exception, decoded.kafka_cause) == (exc.kafka_exception, exc.kafka_cause), name
        else:
            assert decoded == expected, name


def test_apply_and_fold_quarantine_the_same_records_for_the_same_reasons(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        with view.batch() as batch:
            results = [batch.apply(mp, offset, value) for mp, offset, value in EVENTS]
        applied = list(view.quarantine())
    groups, grouped, _ = group_events(EVENTS)
    _, streamed = fold_stream(EVENTS)
    one_by_one = [quarantined(mp, offset, value) for mp, offset, value in EVENTS if route_key(value) == QUARANTINE_KEY]
    assert applied == grouped == streamed == one_by_one
    assert len(applied) == sum(r.stage == "deserialize" for r in results) >= 10
    by_offset = {q.offset: q for q in applied}
    for offset, ((name, value), result) in enumerate(zip(VALUES, results)):
        key = route_key(value)
        if result.stage == "deserialize":
            q = by_offset[offset]
            assert key == QUARANTINE_KEY, name
            assert (q.kafka_error, q.kafka_cause) == (result.error, result.cause), name
            assert q.value == value, name
        elif result.stage == "route":
            assert key == UNROUTABLE_KEY, name
        else:
            assert key == partition_key(decode_value(value).tp), name
            assert (offset, value) in groups[key], name
