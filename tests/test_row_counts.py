"""``View(count_rows=True)`` counts the rows each batch writes, by column family and by the kind of event that last
changed them, without changing what the batches write."""

from __future__ import annotations

from pathlib import Path

from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.records.serde import encode_value
from rlmm.state import keys as K
from rlmm.state.view import View
from tests.grpc_support import finished, segment
from tests.snapshot_support import workload_events

TP = TopicIdPartition(b"\x01" * 16, "rows", 0)


def apply_stream(view: View, events, tps, batch_size: int = 50) -> None:
    with view.batch() as batch:
        for tp in tps:
            batch.assign(tp)
            batch.mark_ready(tp)
    for i in range(0, len(events), batch_size):
        with view.batch() as batch:
            for event in events[i : i + batch_size]:
                batch.apply(*event)


def test_counting_changes_no_row_and_counts_what_the_batches_wrote(tmp_path: Path) -> None:
    events, tps = workload_events(4_000, seed=5)
    with View(tmp_path / "plain") as plain, View(tmp_path / "counting", count_rows=True) as counting:
        apply_stream(plain, events, tps)
        apply_stream(counting, events, tps)
        for cf in K.COLUMN_FAMILIES:
            assert list(counting.items(cf)) == list(plain.items(cf)), cf
        assert counting.row_counts is not None and plain.row_counts is None
        counted = counting.row_counts.per_event()
    assert counted["events"] == len(events)
    assert counted["by_kind"]["COPY_SEGMENT_FINISHED"]["events"] > 0
    assert counted["by_kind"]["DELETE_SEGMENT_FINISHED"]["events"] > 0
    assert set(counted["by_kind"]["undecodable"]["by_column_family"]) == {K.QUARANTINE}
    assert counted["by_operation"]["range_delete"] > 0  # partition deletions
    by_kind = sum(k["rows"] * k["events"] for k in counted["by_kind"].values())  # "batch": per event of any kind
    assert abs(by_kind - counted["rows"] * len(events)) < 2  # every row is some kind's (to the rounding)


def test_counting_changes_no_row_of_uploads_in_a_row(tmp_path: Path) -> None:
    """Consecutive events of one epoch: the counting view writes the rows out after each event, and must still write
    the epoch's row as the last event left it."""
    added = [segment(TP, 10 * i, 10 * i + 9) for i in range(5)]
    records = [record for seg in added for record in (seg, finished(seg))]
    events = [(0, offset, encode_value(record)) for offset, record in enumerate(records)]
    with View(tmp_path / "plain") as plain, View(tmp_path / "counting", count_rows=True) as counting:
        apply_stream(plain, events, [TP])
        apply_stream(counting, events, [TP])
        for cf in K.COLUMN_FAMILIES:
            assert list(counting.items(cf)) == list(plain.items(cf)), cf
        assert counting.queries.remote_log_size(TP, 0) == sum(seg.segment_size_in_bytes for seg in added)


def test_an_upload_in_one_batch_writes_the_rows_of_its_layout(tmp_path: Path) -> None:
    segment = SegmentMetadata(
        TP, b"\x02" * 16, 0, 99, 0, 1_000, 1, ((0, 0),), 1_000, None, SegmentState.COPY_SEGMENT_STARTED
    )
    finished = SegmentUpdate(TP, segment.segment_id, 1, 2_000, None, SegmentState.COPY_SEGMENT_FINISHED)
    with View(tmp_path / "view", count_rows=True) as view:
        apply_stream(view, [(0, 0, encode_value(segment)), (0, 1, encode_value(finished))], [TP])
        assert view.row_counts is not None
        counted = view.row_counts.per_event()["by_kind"]
    assert counted["COPY_SEGMENT_STARTED"]["rows"] == 0  # its rows are the finished segment's
    # its row (with its membership), its offset-index entry, its max-timestamp bucket, its epoch's tree (a page and
    # the top); no txn row: the first entry of an epoch starts no run
    assert counted["COPY_SEGMENT_FINISHED"]["by_column_family"] == {
        K.SEGMENTS: 1.0,
        K.OFFSETS: 1.0,
        K.MAX_TIMESTAMP: 1.0,
        K.TIMESTAMP_TREES: 2.0,
    }
