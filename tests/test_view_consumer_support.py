"""What the view offers the consumer: readiness withdrawn on restart, consumer bookkeeping committed
with a batch, a record read again quarantined and counted once, a read-only view beside a writer."""

from __future__ import annotations

import pytest

from rlmm.errors import ReplicaNotAvailable, ViewNotFound
from rlmm.records import TopicIdPartition
from rlmm.state.view import View

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
