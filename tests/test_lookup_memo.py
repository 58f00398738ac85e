"""The lookup memo answers only what a lookup of the current state answers: a commit that changes a partition's
row or offset index forgets that partition (and only it), a range deletion forgets all, a commit landing while
a lookup reads keeps its result out, one landing while the memo answers sends the lookup to the view, and the
memo stays within its bytes; readers racing a writer never get a segment already replaced. (That lookups
through it answer as seeks across commits: test_offset_cache.)"""

from __future__ import annotations

import sys
import threading
from array import array
from pathlib import Path

from rlmm.records.model import SegmentState, SegmentUpdate
from rlmm.state import keys as K
from rlmm.state import lookup_memo
from rlmm.state import view as view_module
from rlmm.state.kv import StagedKV
from rlmm.state.lookup_memo import ENTRY_OVERHEAD, EPOCH_OVERHEAD, NAME_OVERHEAD, PARTITION_OVERHEAD, LookupMemo
from rlmm.state.segment_rows import decode_segment
from rlmm.state.view import View
from tests.grpc_support import TS, fill_view, finished, new_tp, segment
from tests.test_offset_cache import NAME, TP, apply, single

TPID = b"\x00\x00\x00\x07"


class HeldStarts:
    """The offset cache's part the memo reads: every epoch's start offsets are 10, 100, 200."""

    def held_starts(self, prefix: bytes) -> array:
        return array("q", [10, 100, 200])


def memo_of(limit: int = 1 << 20) -> LookupMemo:
    return LookupMemo(HeldStarts(), limit)  # type: ignore[arg-type]


def kept(memo: LookupMemo, name=("id", "t", 0), tpid: bytes = TPID, identity: bytes = b"identity") -> None:
    """Keep the segment at start 100 (epoch end 199) of epoch 3."""
    memo.keep(name, identity, K.epoch_prefix(tpid, 3), 100, 199, b"value", memo.generation)


def committed(memo: LookupMemo, cf: str, key: bytes, *, prefix: bool = False) -> None:
    stage = StagedKV(None)
    if prefix:
        stage.deleted_prefixes[cf] = [key]
    else:
        stage.pending[cf] = {key: b"changed"}
    memo.committing(stage)
    memo.committed(stage)


def test_the_memo_answers_offsets_within_the_kept_entry_only() -> None:
    memo = memo_of()
    kept(memo)
    name = ("id", "t", 0)
    assert [memo.find(name, 3, offset) for offset in (99, 100, 150, 199, 200, 250)] == [
        None,
        *[b"value"] * 3,
        None,
        None,
    ]
    assert memo.find(name, 2, 150) is None and memo.find(("id", "t", 1), 3, 150) is None
    memo.keep(name, b"identity", K.epoch_prefix(TPID, 3), 200, 299, b"last", memo.generation)
    assert memo.find(name, 3, 250) == b"last"
    assert memo.find(name, 3, 5) is None and memo.find(name, 3, -1) is None  # below every start: asks the view


def test_a_commit_forgets_the_partitions_whose_row_or_offset_index_it_changes() -> None:
    for cf, key in ((K.PARTITIONS, b"identity"), (K.OFFSETS, K.offset_key(TPID, 3, 100))):
        memo = memo_of()
        kept(memo)
        kept(memo, ("other", "u", 0), b"\x00\x00\x00\x08", b"other identity")
        committed(memo, cf, key)
        assert memo.find(("id", "t", 0), 3, 150) is None, cf
        assert len(memo._entries) == 1 and memo._size == memo._by_identity[b"other identity"].size, cf
        assert memo.find(("other", "u", 0), 3, 150) == b"value", cf  # another partition stays
        committed(memo, K.EPOCHS, K.epoch_prefix(b"\x00\x00\x00\x08", 3))  # no row a lookup reads
        assert memo.find(("other", "u", 0), 3, 150) == b"value", cf


def test_a_range_deletion_forgets_every_partition() -> None:
    for cf in (K.PARTITIONS, K.OFFSETS):
        memo = memo_of()
        kept(memo)
        committed(memo, cf, b"\x00\x00\x00\x09", prefix=True)
        assert memo.find(("id", "t", 0), 3, 150) is None, cf
        assert memo._size == 0


def test_two_names_of_one_partition_are_forgotten_together() -> None:
    memo = memo_of()
    kept(memo)
    kept(memo, ("ID", "t", 0))  # the same partition (row key) as another request spells it
    assert memo.find(("ID", "t", 0), 3, 150) == memo.find(("id", "t", 0), 3, 150) == b"value"
    committed(memo, K.PARTITIONS, b"identity")
    assert memo.find(("ID", "t", 0), 3, 150) is None and memo.find(("id", "t", 0), 3, 150) is None
    assert memo._size == 0


def test_what_was_read_before_a_commit_is_not_kept() -> None:
    memo = memo_of()
    before = memo.generation
    committed(memo, K.OFFSETS, K.offset_key(b"\x00\x00\x00\x08", 0, 0))  # any partition's
    memo.keep(("id", "t", 0), b"identity", K.epoch_prefix(TPID, 3), 100, 199, b"value", before)
    assert memo.find(("id", "t", 0), 3, 150) is None
    stage = StagedKV(None)
    stage.pending[K.OFFSETS] = {K.offset_key(TPID, 0, 0): None}
    memo.committing(stage)  # while a commit is written, the memo neither answers nor keeps
    kept(memo)
    assert memo.find(("id", "t", 0), 3, 150) is None
    memo.committed(stage)
    kept(memo)
    assert memo.find(("id", "t", 0), 3, 150) == b"value"


def test_the_memo_stays_within_its_bytes_dropping_the_oldest_segments() -> None:
    entry = ENTRY_OVERHEAD + len(b"value")
    partition = PARTITION_OVERHEAD + NAME_OVERHEAD + len("0d") + len("t") + EPOCH_OVERHEAD
    memo = memo_of(2 * partition + 3 * entry)
    for i in range(2):  # two partitions, with a segment at start 100 and one at start 200 each
        for start in (100, 200):
            memo.keep(
                (f"{i}d", "t", 0), b"identity %d" % i, K.epoch_prefix(bytes([0, 0, 0, i]), 3), start, 299, b"value", 0
            )
            assert memo._size == sum(p.size for p in memo._by_identity.values()) <= memo.limit
    # the first partition's first segment made room for the second's last
    assert [memo.find((f"{i}d", "t", 0), 3, offset) for i in range(2) for offset in (150, 250)] == [
        None,
        *[b"value"] * 3,
    ]
    memo.keep(("2d", "t", 0), b"identity 2", K.epoch_prefix(b"\x00\x00\x00\x02", 3), 100, 299, b"value", 0)
    assert list(memo._by_identity) == [b"identity 1", b"identity 2"]  # the first partition left with its last
    assert set(memo._by_name) == {("1d", "t", 0), ("2d", "t", 0)}
    assert memo._size == sum(p.size for p in memo._by_identity.values()) <= memo.limit


def test_a_commit_between_a_lookups_read_and_what_it_keeps(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        first = segment(TP, 0, 99)
        fill_view(view, TP, [first])
        memo = view.queries.memo
        keep = memo.keep
        landing = segment(TP, 0, 149)  # the same offset-index key, another entry

        def commit_then_keep(*args):  # the lookup has read its answer, and a commit lands before it keeps it
            del memo.keep
            apply(view, landing, finished(landing))
            keep(*args)

        memo.keep = commit_then_keep
        value = view.queries._segment_value(TP, 0, 50, NAME)  # the lookup itself, which the clock runs again
        assert decode_segment(value).end_offset == 99  # the state it read
        assert view.queries.known_segment_value(NAME, 0, 50) is None  # not kept: the commit replaced it
        assert single(view, [(0, 0, 120)], memo=True) == single(view, [(0, 0, 120)]) != [None]


def test_a_commit_while_the_memo_answers_sends_the_lookup_to_the_view(tmp_path: Path, monkeypatch) -> None:
    with View(tmp_path / "view") as view:
        first = segment(TP, 0, 99)
        fill_view(view, TP, [first])
        assert single(view, [(0, 0, 50)], memo=True) == single(view, [(0, 0, 50)]) != [None]
        bisect = lookup_memo.bisect_right

        def commit_then_bisect(starts, offset):  # a commit that replaces the segment lands mid-answer
            monkeypatch.setattr(lookup_memo, "bisect_right", bisect)
            apply(view, landing, finished(landing))
            return bisect(starts, offset)

        landing = segment(TP, 0, 149)  # the same start offset: the epoch's start offsets stay as they are
        monkeypatch.setattr(lookup_memo, "bisect_right", commit_then_bisect)
        assert view.queries.known_segment_value(NAME, 0, 50) is None
        assert single(view, [(0, 0, 50)], memo=True) == single(view, [(0, 0, 50)])
        assert decode_segment(view.queries.known_segment_value(NAME, 0, 50)).end_offset == 149


def test_the_views_memo_stays_within_its_bytes(tmp_path: Path) -> None:
    partitions = [new_tp(f"memo-{i}") for i in range(6)]
    with View(tmp_path / "view") as view:
        for tp in partitions:
            fill_view(view, tp, [segment(tp, i * 50, i * 50 + 49, epoch=i % 2) for i in range(6)])
        queries, memo = view.queries, view.queries.memo
        assert memo.limit == view_module.LOOKUP_MEMO_BYTES
        memo.limit = 6_000

        def ask(tp, epoch: int, offset: int) -> bytes | None:
            name = ("id", tp.topic, tp.partition)
            return queries.known_segment_value(name, epoch, offset) or queries.remote_log_segment_value(
                tp, epoch, offset, name
            )

        asked = [(tp, epoch, offset) for tp in partitions for epoch in (0, 1) for offset in range(0, 320, 7)]
        expected = [queries.remote_log_segment_value(*lookup) for lookup in asked]
        for _ in range(2):
            assert [ask(*lookup) for lookup in asked] == expected
            assert 0 < memo._size == sum(p.size for p in memo._by_identity.values()) <= 6_000
        assert 1 < len(memo._by_identity) < len(partitions)


def test_between_a_commits_write_and_the_memos_update_the_memo_does_not_answer(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        whole, tail = segment(TP, 0, 199), segment(TP, 100, 199)  # a lookup of 150 finds tail's entry
        fill_view(view, TP, [whole, tail])
        assert single(view, [(0, 0, 50), (0, 0, 150)], memo=True) == single(view, [(0, 0, 50), (0, 0, 150)])
        memo = view.queries.memo
        written, release = threading.Event(), threading.Event()
        update = memo.committed

        def pause_then_update(stage) -> None:  # the offset cache is updated, the memo not yet
            written.set()
            release.wait(10)
            update(stage)

        memo.committed = pause_then_update
        shorter = segment(TP, 0, 149)  # replaces whole's entry, while tail's goes: 150 is then in no segment
        gone = SegmentUpdate(TP, tail.segment_id, 1, TS, None, SegmentState.DELETE_SEGMENT_STARTED)
        writer = threading.Thread(target=apply, args=(view, shorter, finished(shorter), gone))
        writer.start()
        try:
            assert written.wait(10)
            during = memo.find(NAME, 0, 150)  # whole's entry kept, with the start offsets of after the commit
        finally:
            release.set()
            writer.join(10)
        assert during is None
        assert single(view, [(0, 0, 50), (0, 0, 150)], memo=True) == single(view, [(0, 0, 50), (0, 0, 150)])
        assert single(view, [(0, 0, 150)]) == [None]


def test_lookups_racing_commits_never_answer_a_replaced_segment(tmp_path: Path) -> None:
    """Readers ask the memo (and the view, which keeps in it) while a writer replaces the segment they ask,
    commit after commit: each answer is a version committed no earlier than when the lookup began."""
    versions = [segment(TP, 0, 99 + i) for i in range(300)]  # one start offset: each replaces the one before
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [versions[0], segment(TP, 1000, 1099)])
        committed, stop, stale = [0], threading.Event(), []

        def write() -> None:
            try:
                for i, version in enumerate(versions[1:], 1):
                    apply(view, version, finished(version))
                    committed[0] = i
            finally:
                stop.set()

        def read() -> None:
            while not stop.is_set():
                first = committed[0]
                answer = single(view, [(0, 0, 50)], memo=True)[0]
                version = decode_segment(answer).end_offset - 99
                if version < first:
                    stale.append((version, first))

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # threads switch often, in the middle of lookups and commits
        try:
            threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        finally:
            sys.setswitchinterval(interval)
        assert not stale
        assert single(view, [(0, 0, 50)], memo=True) == single(view, [(0, 0, 50)])
        assert decode_segment(single(view, [(0, 0, 50)], memo=True)[0]).segment_id == versions[-1].segment_id
