"""A view opened as a RocksDB secondary instance beside its writer (``rlmm serve --workers``): it answers
what the writer had committed when it was opened or last caught up, and after ``catch_up`` every batch
committed until then, through the query side's caches too, and a lookup during a catch-up answers the state
before or after it; ``on_commit`` tells each batch that wrote."""

from __future__ import annotations

from rlmm.records.model import SegmentState, SegmentUpdate
from rlmm.records.serde import encode_value
from rlmm.state.segment_rows import decode_segment
from rlmm.state.view import View
from tests.grpc_support import TS, fill_view, new_tp, segment
from tests.view_seams import after_next_change


def test_a_secondary_view_answers_what_the_writer_committed_once_caught_up(tmp_path) -> None:
    commits = []
    tp, loading = new_tp(), new_tp("loading")
    first, second = segment(tp, 0, 99), segment(tp, 100, 199)
    with View(tmp_path / "view", on_commit=lambda: commits.append(1)) as writer:
        opened = len(commits)  # a new view writes its schema version
        fill_view(writer, tp, [first])
        fill_view(writer, loading, [], ready=False)
        with writer.batch():
            pass  # nothing written: nothing to tell
        assert len(commits) == opened + 2
        with View(tmp_path / "view", secondary=tmp_path / "secondary") as reader:
            # read, and cached (the partition row, the epoch's start offsets), before the writer goes on
            assert not reader.queries.is_ready(loading)
            assert reader.queries.remote_log_segment_metadata(tp, 0, 150) is None
            fill_view(writer, tp, [second])
            with writer.batch() as batch:
                batch.mark_ready(loading)
            assert len(commits) == opened + 4
            assert not reader.queries.is_ready(loading)  # not caught up yet
            reader.catch_up()
            assert reader.queries.is_ready(loading)
            assert reader.queries.remote_log_segment_metadata(tp, 0, 150).segment_id == second.segment_id
            listed = list(reader.queries.list_remote_log_segments(tp))
            assert len(listed) == 2 and listed == list(writer.queries.list_remote_log_segments(tp))
            assert reader.queries.remote_log_size(tp) == writer.queries.remote_log_size(tp) == 2 * 1099


def test_a_lookup_while_a_secondary_catches_up_answers_the_state_before_or_after(tmp_path) -> None:
    tp = new_tp("catching-up")
    whole, tail = segment(tp, 0, 199), segment(tp, 100, 199)  # 150 finds tail's entry; whole's once tail's goes
    with View(tmp_path / "view") as writer:
        fill_view(writer, tp, [whole, tail])
        with View(tmp_path / "view", secondary=tmp_path / "secondary") as reader:
            queries = reader.queries
            assert queries.remote_log_segment_metadata(tp, 0, 50).segment_id == whole.segment_id  # start offsets held
            with writer.batch() as batch:
                update = SegmentUpdate(tp, tail.segment_id, 1, TS, None, SegmentState.DELETE_SEGMENT_STARTED)
                batch.apply(0, max(writer.metadata_offsets().values()) + 1, encode_value(update))
            answers: list = []

            def look_up() -> None:  # the store has caught up, the caches not yet
                # the lookup itself: the clock would hold it until the catch-up's end, the caches must decline
                answers.append(queries._segment_value(tp, 0, 150, ("id", tp.topic, tp.partition)))

            after_next_change(reader, look_up)
            reader.catch_up()
            assert answers[0] is not None  # the old start offsets with the new entries would find nothing
            assert decode_segment(answers[0]).segment_id in {whole.segment_id, tail.segment_id}
            assert queries.remote_log_segment_metadata(tp, 0, 150).segment_id == whole.segment_id
            assert queries.known_segment_value(("id", tp.topic, tp.partition), 0, 150) is None
