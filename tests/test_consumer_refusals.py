"""Records the state machine refuses are logged with their partition, type, segment id and why, once per kind
and interval; records it applies or skips are not logged. The results come from a real view's batch, as the
consumer gets them."""

from __future__ import annotations

import logging

import pytest

from consumers.refusals import RefusalLog
from rlmm.records import (
    PartitionDelete,
    PartitionDeleteState,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
    encode_value,
    uuid_to_str,
)
from rlmm.state.view import View

TP = TopicIdPartition(bytes(range(16)), "orders", 3)
OTHER = TopicIdPartition(bytes(range(16)), "orders", 4)
SEGMENT_ID = bytes(range(100, 116))
SEGMENT = SegmentMetadata(
    TP,
    SEGMENT_ID,
    0,
    9,
    1,
    1_700_000_000_000,
    1_700_000_000_000,
    ((0, 0),),
    1024,
    None,
    SegmentState.COPY_SEGMENT_STARTED,
)
PARTITION = f"partition {uuid_to_str(TP.topic_id)}:orders-3"


def update(state: SegmentState, segment_id: bytes = SEGMENT_ID) -> SegmentUpdate:
    return SegmentUpdate(TP, segment_id, 1, 1_700_000_000_001, None, state)


@pytest.mark.parametrize(
    ("value", "logged"),
    [
        pytest.param(encode_value(SEGMENT), None, id="applied-not-logged"),
        pytest.param(encode_value(update(SegmentState.COPY_SEGMENT_FINISHED)), None, id="applied-update-not-logged"),
        pytest.param(
            encode_value(update(SegmentState.COPY_SEGMENT_FINISHED, bytes(16))),
            "record not applied (an update of a segment the partition does not hold; Kafka drops it): "
            f"RemoteLogSegmentMetadataUpdate COPY_SEGMENT_FINISHED of segment {uuid_to_str(bytes(16))} of {PARTITION}",
            id="unknown-segment",
        ),
        pytest.param(
            encode_value(update(SegmentState.DELETE_SEGMENT_FINISHED)),
            "record not applied (a segment state change Kafka's state machine refuses; Kafka drops it): "
            f"RemoteLogSegmentMetadataUpdate DELETE_SEGMENT_FINISHED of segment {uuid_to_str(SEGMENT_ID)} of "
            f"{PARTITION}",
            id="invalid-transition",
        ),
        pytest.param(
            encode_value(
                SegmentSnapshot(SEGMENT_ID, 0, 9, 1, 0, 0, ((0, 0),), 1024, None, SegmentState.COPY_SEGMENT_FINISHED)
            ),
            "record not applied (names no user partition: Kafka throws UnsupportedOperationException): "
            f"RemoteLogSegmentMetadataSnapshot COPY_SEGMENT_FINISHED of segment {uuid_to_str(SEGMENT_ID)}, "
            "which names no partition",
            id="snapshot-not-routed",
        ),
        pytest.param(
            encode_value(PartitionDelete(OTHER, 1, 0, PartitionDeleteState.DELETE_PARTITION_MARKED)),
            None,
            id="not-assigned-skipped-not-logged",
        ),
    ],
)
def test_a_refused_record_is_logged_with_what_it_was_and_why(
    value: bytes, logged: str | None, tmp_path, caplog
) -> None:
    refusals = RefusalLog(logging.getLogger("test.refusals"))
    caplog.set_level(logging.WARNING, logger="test.refusals")
    with View(tmp_path / "view") as view, view.batch() as batch:
        batch.assign(TP)
        assert batch.apply(2, 0, encode_value(SEGMENT)).status == "applied"
        refusals.log(2, 7, value, batch.apply(2, 7, value))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ([] if logged is None else [f"metadata partition 2, offset 7: {logged}"])


def test_refusals_are_logged_once_per_kind_and_interval(tmp_path, caplog) -> None:
    refusals = RefusalLog(logging.getLogger("test.refusals"))
    caplog.set_level(logging.WARNING, logger="test.refusals")
    strays = [encode_value(update(SegmentState.COPY_SEGMENT_FINISHED, bytes([i]) * 16)) for i in range(5)]
    values = [*strays, b"\x07", None, encode_value(update(SegmentState.COPY_SEGMENT_FINISHED, bytes(16)))]
    with View(tmp_path / "view") as view, view.batch() as batch:
        batch.assign(TP)
        for offset, value in enumerate(values):
            refusals.log(0, offset, value, batch.apply(0, offset, value))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "metadata partition 0, offset 0: record not applied (an update of a segment the partition does not hold; "
        f"Kafka drops it): RemoteLogSegmentMetadataUpdate COPY_SEGMENT_FINISHED of segment {uuid_to_str(bytes(16))} "
        f"of {PARTITION}",
        "metadata partition 0, offset 5: record not applied (does not decode; kept in the quarantine: Kafka throws "
        "MetadataParseException): a value that does not decode (1 B)",
        "metadata partition 0, offset 6: record not applied (does not decode; kept in the quarantine: Kafka throws "
        "NullPointerException): a null value (tombstone)",
    ]
