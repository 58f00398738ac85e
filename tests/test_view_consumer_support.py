"""What the view offers the consumer: readiness withdrawn on restart, consumer bookkeeping committed
with a batch, consumed offsets and outcomes of interleaved metadata partitions, a record read again quarantined and
counted once, a read-only view beside a writer."""

from __future__ import annotations

import pytest

from rlmm.errors import ReplicaNotAvailable, ViewNotFound
from rlmm.records import TopicIdPartition
from rlmm.records.serde import encode_value
from rlmm.state.view import View
from tests.grpc_support import finished, segment

TP = TopicIdPartition(bytes(16), "t", 0)


def test_mark_not_ready_withdraws_readiness_and_keeps_state(tmp_path) -> None:
    with View(tmp_path / "view") as view:
        with view.batch() as batch:
            batch.assign(TP)
            assert batch.mark_ready(TP) is None
        assert view.queries.is_ready(TP)
        with view.batch() as batch:
            batch.mark_not_ready(TP)
            batch.mark_not_ready(TopicIdPartition(bytes(16), "t", 1))  # unknown: nothing happens
        assert not view.queries.is_ready(TP)
        with pytest.raises(ReplicaNotAvailable):
            view.queries.remote_log_size(TP)
        assert [(tp, assigned) for tp, assigned, _ in view.partitions()] == [(TP, True)]


def test_consumer_state_is_committed_with_the_batch(tmp_path) -> None:
    with View(tmp_path / "view") as view:
        with pytest.raises(RuntimeError), view.batch() as batch:
            batch.put_consumer_state(b"k", b"lost")
            raise RuntimeError("the batch fails")
        assert view.consumer_state() == {}
        with view.batch() as batch:
            batch.put_consumer_state(b"k", b"v")
        assert view.consumer_state() == {b"k": b"v"}
        with view.batch() as batch:
            batch.put_consumer_state(b"k", None)
        assert view.consumer_state() == {}


def test_consumed_offsets_and_outcomes_of_interleaved_metadata_partitions(tmp_path) -> None:
    """Each metadata partition's consumed offset is the greatest of its records, whatever their order within a batch
    and across batches (a record read again never moves it back); each outcome is counted."""
    added = segment(TP, 0, 9)
    unassigned = TopicIdPartition(bytes(16), "t", 1)
    records = [
        (0, 5, encode_value(added)),  # applied
        (1, 9, encode_value(segment(unassigned, 0, 9))),  # skipped: not assigned
        (0, 7, encode_value(finished(added))),  # applied
        (2, 1, b"\x01"),  # quarantined
        (0, 8, encode_value(finished(segment(TP, 10, 19)))),  # ignored: unknown segment
        (1, 3, None),  # quarantined
        (0, 6, encode_value(finished(added))),  # skipped: already processed (TP's records came up to offset 8)
    ]
    with View(tmp_path / "view") as view:
        with view.batch() as batch:
            batch.assign(TP)
            batch.mark_ready(TP)
        with view.batch() as batch:
            for record in records:
                batch.apply(*record)
        assert view.metadata_offsets() == {0: 8, 1: 9, 2: 1}
        with view.batch() as batch:  # read again, and one more of partition 2
            batch.apply(1, 4, None)
            batch.apply(0, 2, None)
            batch.apply(2, 3, None)
        assert view.metadata_offsets() == {0: 8, 1: 9, 2: 3}
        assert view.counters() == {
            "applied": 2,
            "skipped:not_assigned": 1,
            "quarantined": 5,
            "ignored:unknown_segment": 1,
            "skipped:already_processed": 1,
        }


def test_a_record_read_again_is_quarantined_once(tmp_path) -> None:
    with View(tmp_path / "view") as view:
        for _ in range(2):
            with view.batch() as batch:
                batch.apply(3, 7, b"\x01")
                batch.apply(3, 8, None)
        assert view.counters() == {"quarantined": 2}
        assert [(q.metadata_partition, q.offset) for q in view.quarantine()] == [(3, 7), (3, 8)]


def test_read_only_view_beside_the_writer(tmp_path) -> None:
    with pytest.raises(ViewNotFound, match="no view"):
        View(tmp_path / "missing", read_only=True)
    with View(tmp_path / "view") as writer:
        with writer.batch() as batch:
            batch.apply(0, 0, b"\x01")
        with View(tmp_path / "view", read_only=True) as reader:
            assert [q.offset for q in reader.quarantine()] == [0]
