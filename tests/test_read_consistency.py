"""A read that reads the view more than once answers one committed state, the state before a commit landing
while it reads or the state after it, never a mix of both: a listing of an epoch, the segment with the
greatest max timestamp, a single lookup and a batch of lookups racing the commit that changes what they read
(each commit lands synchronously inside one of the query's reads, so the race happens on every run), and
readers racing a writer on threads."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rlmm.errors import KafkaStateError
from rlmm.records.model import PartitionDeleteState, SegmentState, SegmentUpdate
from rlmm.state import commit_clock
from rlmm.state import keys as K
from rlmm.state.view import View
from tests.grpc_support import TS, fill_view, new_tp, partition_delete, segment
from tests.test_offset_cache import apply
from tests.view_seams import after_next_change, intercept_reads

TP = new_tp("consistent")


def commit_inside_next(view: View, method: str, cf: str, commit: Callable[[], None]) -> list[int]:
    """The queries' next ``method`` read (``get``, ``iter_from``...) of column family ``cf`` is followed at once by
    ``commit``, once; returns the list where the number of such commits is counted."""
    cache = intercept_reads(view)
    read = getattr(cache, method)
    landed: list[int] = []

    def read_then_commit(*args):
        result = read(*args)
        if args[0] == cf and not landed:
            if method == "iter_from":
                result = list(result)  # the read is done (an iterator reads as it is consumed)
            landed.append(1)
            commit()
        return result

    setattr(cache, method, read_then_commit)
    return landed


def answer(call: Callable[[], object]) -> object:
    try:
        result = call()
    except KafkaStateError as exc:
        return type(exc).__name__
    return list(result) if isinstance(result, list) else result


def before_or_after(view: View, call: Callable[[], object], commit: Callable[[], None], race) -> None:
    """``call`` answers as it does before ``commit`` or after it when the commit lands inside its read ``race``
    (method, column family), and the state after differs from the state before."""
    before = answer(call)
    landed = commit_inside_next(view, *race, commit)
    reran = view.reads_run_again()
    raced = answer(call)
    assert landed, "the commit did not land inside the read"
    assert view.reads_run_again() == (reran[0] + 1, reran[1])  # run again once, without holding commits off
    del view.queries.kv.__dict__[race[0]]
    after = answer(call)
    assert before != after
    assert raced in (before, after), (raced, before, after)


def test_an_epoch_listing_racing_a_copy_finished_lists_each_segment_once(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        first = segment(TP, 0, 99)
        fill_view(view, TP, [first])
        copying = segment(TP, 100, 199)
        apply(view, copying)  # unreferenced until finished: listed after the offset index's entries
        finish = SegmentUpdate(TP, copying.segment_id, 1, TS, None, SegmentState.COPY_SEGMENT_FINISHED)
        before_or_after(
            view,
            lambda: [(s.segment_id, s.state) for s in view.queries.list_epoch_segments(TP, 0)],
            lambda: apply(view, finish),
            ("iter_from", K.OFFSETS),  # read before the unreferenced set, which the commit empties
        )


def test_an_epoch_listing_racing_a_deletion_fails_not_for_the_metadata_gone_meanwhile(tmp_path: Path) -> None:
    """The offset index named a segment whose metadata the commit deleted before the listing read it: an error
    of reading two states, which neither state gives."""
    with View(tmp_path / "view") as view:
        first, deleted = segment(TP, 0, 99), segment(TP, 100, 199)
        fill_view(view, TP, [first, deleted])
        delete = [
            SegmentUpdate(TP, deleted.segment_id, 1, TS, None, state)
            for state in (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED)
        ]
        before_or_after(
            view,
            lambda: [s.segment_id for s in view.queries.list_epoch_segments(TP, 0)],
            lambda: apply(view, *delete),
            ("iter_from", K.OFFSETS),
        )


def test_a_listing_between_a_write_and_the_caches_update_reads_the_rows_written(tmp_path: Path) -> None:
    """The write is visible, the epoch row kept in the read cache is not updated yet: the listing must not read
    that row (its segments were all referenced) beside the offset index written (the first segment left it for
    the unreferenced set, as it is being deleted)."""
    with View(tmp_path / "view") as view:
        first, second = segment(TP, 0, 99), segment(TP, 100, 199)
        fill_view(view, TP, [first, second])
        listing = view.queries.list_epoch_segments
        before = [(s.segment_id, s.state) for s in listing(TP, 0)]  # reads, and caches, the epoch row
        raced: list = []
        after_next_change(view, lambda: raced.append([(s.segment_id, s.state) for s in listing(TP, 0)]))
        apply(view, SegmentUpdate(TP, first.segment_id, 1, TS, None, SegmentState.DELETE_SEGMENT_STARTED))
        after = [(s.segment_id, s.state) for s in listing(TP, 0)]
        assert after == [(first.segment_id, SegmentState.DELETE_SEGMENT_STARTED), before[1]]
        assert raced == [after]


def test_the_max_timestamp_racing_a_delete_started_is_a_finished_segment(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        older, newest = segment(TP, 0, 99), segment(TP, 100, 199)
        fill_view(view, TP, [older, newest])
        delete = SegmentUpdate(TP, newest.segment_id, 1, TS, None, SegmentState.DELETE_SEGMENT_STARTED)
        before_or_after(
            view,
            lambda: (lambda s: None if s is None else (s.segment_id, s.state))(view.queries.max_timestamp(TP)),
            lambda: apply(view, delete),
            ("get", K.MAX_TIMESTAMP),  # the last bucket, read with a point read
        )


@pytest.mark.parametrize("kind", ["single", "batch"])
def test_lookups_racing_a_partition_delete_answer_the_segment_or_the_error(tmp_path: Path, kind: str) -> None:
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        queries = view.queries

        def lookup() -> object:
            if kind == "single":
                return queries.remote_log_segment_value(TP, 0, 50)
            tpids, answers = queries.segment_values([TP], [0], [0], [50])
            return answers[0] if type(answers[0]) is bytes else type(answers[0]).__name__

        before_or_after(
            view,
            lookup,
            lambda: apply(view, partition_delete(TP, PartitionDeleteState.DELETE_PARTITION_FINISHED)),
            ("get", K.PARTITIONS),  # the partition's check, before its entry is read
        )


def test_a_read_overlapping_commits_again_and_again_runs_holding_them_off(tmp_path: Path, monkeypatch) -> None:
    """Past ``ATTEMPTS`` reads that each overlapped a commit, the read runs while no commit can land: a commit
    that tries meanwhile waits for it, and the read still answers a state before or after."""
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        copying = [segment(TP, 100 * i, 100 * i + 99) for i in range(1, 10)]
        apply(view, copying[0])
        queries, cache = view.queries, intercept_reads(view)
        scan = cache.iter_from
        landed: list[str] = []
        writers: list[threading.Thread] = []

        def scan_while_committing(cf: str, key: bytes, prefix: bytes):
            items = list(scan(cf, key, prefix))
            if cf == K.OFFSETS:
                writer = threading.Thread(target=apply, args=(view, copying[len(landed) + 1]))  # one more unreferenced
                writers.append(writer)
                writer.start()
                writer.join(0.5)
                landed.append("landed" if not writer.is_alive() else "held off")
            return items

        cache.iter_from = scan_while_committing
        listed = queries.list_epoch_segments(TP, 0)
        del cache.iter_from
        for writer in writers:
            writer.join()
        assert landed == ["landed"] * commit_clock.ATTEMPTS + ["held off"]
        assert view.reads_run_again() == (1, 1)
        ids = [s.segment_id for s in listed]
        # the read that held the last commit off answers the state with every commit before it
        assert ids[0] != copying[0].segment_id and set(ids[1:]) == {s.segment_id for s in copying[: len(landed)]}


def test_readers_racing_a_writer_list_each_segment_once_in_a_state_it_had(tmp_path: Path) -> None:
    """Readers list the epoch while a writer adds and finishes segments: every listing holds the segments
    added before it began, each once, and at most one of them not yet finished (the writer finishes a segment
    before it adds the next)."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        with View(tmp_path / "view") as view:
            fill_view(view, TP, [segment(TP, 0, 99)])
            added = [1]
            failures: list[BaseException] = []
            done = threading.Event()

            def write() -> None:
                try:
                    for i in range(1, 150):
                        copying = segment(TP, 100 * i, 100 * i + 99)
                        apply(view, copying)
                        added[0] = i + 1
                        finish = SegmentUpdate(TP, copying.segment_id, 1, TS, None, SegmentState.COPY_SEGMENT_FINISHED)
                        apply(view, finish)
                except BaseException as exc:
                    failures.append(exc)
                finally:
                    done.set()

            def read() -> None:
                try:
                    while not done.is_set():
                        at_least = added[0]  # segments applied before the listing began
                        listed = view.queries.list_epoch_segments(TP, 0)
                        starts = [s.start_offset for s in listed]
                        assert starts == sorted(set(starts)) and len(starts) >= at_least, starts
                        assert starts == list(range(0, 100 * len(starts), 100)), starts
                        assert sum(s.state is not SegmentState.COPY_SEGMENT_FINISHED for s in listed) <= 1
                except BaseException as exc:
                    failures.append(exc)

            threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failures, failures[0]
    finally:
        sys.setswitchinterval(switch)
