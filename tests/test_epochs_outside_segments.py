"""Segments whose leader epochs start below their start offset, or run past their end: brokers do not write them,
but Kafka's store takes them (it checks no epoch against the segment's offsets), so the view must answer as Kafka
answers on them, on a real RocksDB view. (``tests/test_state_differential.py`` draws the first epoch at the
segment's start.)"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate
from rlmm.records.serde import encode_value
from rlmm.state.view import View
from tests.grpc_support import TS, new_tp
from tests.test_timestamp_index import kafka_scan

TP = new_tp("epochs-outside")


def finished(view: View, *segments: tuple[int, int, tuple[tuple[int, int], ...], bool]) -> list[SegmentMetadata]:
    """Apply each (start, end, epochs, txn index empty) as added then finished, in one batch."""
    added = [
        SegmentMetadata(
            TP, os.urandom(16), start, end, 1, TS + end, TS, epochs, 100, None, SegmentState.COPY_SEGMENT_STARTED, empty
        )
        for start, end, epochs, empty in segments
    ]
    offset = max(view.metadata_offsets().get(0, -1) + 1, 0)
    with view.batch() as batch:
        batch.assign(TP)
        for segment in added:
            update = SegmentUpdate(TP, segment.segment_id, 1, TS + 1, None, SegmentState.COPY_SEGMENT_FINISHED)
            for record in (segment, update):
                batch.apply(0, offset, encode_value(record))
                offset += 1
        batch.mark_ready(TP)
    return added


def test_the_timestamp_lookup_follows_the_listing_when_an_epoch_starts_below_a_segment(tmp_path: Path) -> None:
    """S1 [20, 30] in epoch 0 from 10, then S2 [15, 40] from 20: the offset index holds S1 before S2, the listing
    (sorted by start offset, since the epoch has an unreferenced segment) S2 before S1, and Kafka's scan of the
    listing picks S2."""
    with View(tmp_path / "view") as view:
        first, second = finished(view, (20, 30, ((0, 10),), True), (15, 40, ((0, 20),), True))
        offset = max(view.metadata_offsets()[0] + 1, 0)
        copying = SegmentMetadata(
            TP, os.urandom(16), 50, 60, 1, TS, TS, ((0, 50),), 100, None, SegmentState.COPY_SEGMENT_STARTED, True
        )
        with view.batch() as batch:
            batch.apply(0, offset, encode_value(copying))
        q = view.queries
        assert [s.segment_id for s in q.list_epoch_segments(TP, 0)][:2] == [second.segment_id, first.segment_id]
        picked = q.first_segment_with_max_timestamp_at_least(TP, 0, 0, 0)
        assert picked == kafka_scan(q, TP, 0, 0, 0) and picked.segment_id == second.segment_id


def test_the_txn_walk_ends_on_a_segment_whose_epoch_runs_past_its_end(tmp_path: Path) -> None:
    """S1 [0, 9] with epochs 0 from 0 and 1 from 100: in epoch 0 it holds offsets up to 99 (Kafka's lookup of
    offset 10 finds it), so Kafka's walk from it asks for offset 10 again and again and never answers. No segment
    follows it in the epoch: the answer is none, at once."""
    with View(tmp_path / "view") as view:
        (only,) = finished(view, (0, 9, ((0, 0), (1, 100)), True))
        assert view.queries.remote_log_segment_metadata(TP, 0, 10).segment_id == only.segment_id
        answers: list[object] = []
        walk = threading.Thread(
            target=lambda: answers.append(view.queries.next_segment_with_txn_index(TP, 0, 0)), daemon=True
        )
        walk.start()
        walk.join(30)
        assert answers == [None], "the walk did not end"
