"""Lookups through the offset cache (batches, and single ones with the entries they keep) answer exactly as
lookups by seeks: across commits that add, replace and drop entries, when a partition's data is dropped and
comes back, with a cache too small for every epoch or entry (whose weights stay within their limits), and
whenever a commit lands during a batch's reads, a single lookup's read or an epoch's loading, between a
commit's write and its cache update, or while a writer commits concurrently."""

from __future__ import annotations

import threading
from bisect import bisect_right
from pathlib import Path

from rlmm.errors import KafkaStateError
from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate
from rlmm.records.serde import encode_value
from rlmm.state import keys as K
from rlmm.state import offset_cache
from rlmm.state import view as view_module
from rlmm.state.offset_cache import ENTRY_OVERHEAD, EPOCH_WEIGHT
from rlmm.state.queries import Queries
from rlmm.state.segment_rows import decode_segment
from rlmm.state.view import View
from tests.grpc_support import TS, fill_view, finished, new_tp, segment
from tests.view_seams import Intercepted, after_next_change

TP = new_tp("offset-cache")
NAME = ("the request's topic id", TP.topic, TP.partition)  # how a request names TP to the lookup memo


def lookups(epochs: int, last_offset: int, step: int = 7) -> list[tuple[int, int, int]]:
    return [(0, epoch, offset) for epoch in range(epochs) for offset in range(0, last_offset + 2, step)]


def batch(view: View, asked: list[tuple[int, int, int]]) -> list:
    queries = view.queries
    indexes, epochs, offsets = ([lookup[i] for lookup in asked] for i in range(3))
    return [
        a if a is None or isinstance(a, bytes) else a.kafka_exception
        for a in queries.segment_values([TP], indexes, epochs, offsets)[1]
    ]


def single(view: View, asked: list[tuple[int, int, int]], *, cached: bool = False, memo: bool = False) -> list:
    """Each lookup on its own: by a seek (the reference), ``cached`` through the view's offset cache, or ``memo`` as
    the server asks (the lookup memo's answer, else the view's, which the memo keeps)."""
    queries = view.queries if cached or memo else Queries(view.queries.kv)
    answers = []
    for _, epoch, offset in asked:
        try:
            if memo:
                value = queries.known_segment_value(NAME, epoch, offset)
                if value is None:
                    value = queries.remote_log_segment_value(TP, epoch, offset, NAME)
                found = None if value is None else decode_segment(value)
            else:
                found = queries.remote_log_segment_metadata(TP, epoch, offset)
        except KafkaStateError as exc:
            answers.append(exc.kafka_exception)
        else:
            answers.append(None if found is None else encode_value(found))
    return answers


def apply(view: View, *records) -> None:
    offset = max(view.metadata_offsets().get(0, -1) + 1, 0)
    with view.batch() as b:
        for i, record in enumerate(records):
            b.apply(0, offset + i, encode_value(record))


def commit_after_next(view: View, read: str, landing: SegmentMetadata) -> None:
    """The offset cache's next ``read`` of its store is followed at once by a commit of ``landing``, added and
    finished, as a commit landing while the cache reads."""
    cache = view.queries.offset_cache
    base = cache.base

    def read_then_commit(*args):
        result = getattr(base, read)(*args)
        cache.base = base
        apply(view, landing, finished(landing))
        return result

    cache.base = Intercepted(base, **{read: read_then_commit})


def test_commits_keep_the_cache_current(tmp_path: Path) -> None:
    asked = lookups(3, 400)
    with View(tmp_path / "view") as view:
        first = [segment(TP, i * 50, i * 50 + 49, epoch=i % 3) for i in range(6)]
        fill_view(view, TP, first)
        assert batch(view, asked) == single(view, asked) == single(view, asked, cached=True)
        assert view.queries.offset_cache._entries  # the single lookups kept their entries
        assert_memo_answers(view, asked)
        replacing = segment(TP, 0, 120)  # same start: replaces the first entry of epoch 0, evicts others
        apply(view, replacing, finished(replacing))
        assert single(view, asked, cached=True) == single(view, asked)
        assert_memo_answers(view, asked)
        later = segment(TP, 300, 349, epoch=1)
        apply(view, later, finished(later))
        assert batch(view, asked) == single(view, asked) == single(view, asked, cached=True)
        assert_memo_answers(view, asked)
        gone = first[1]
        apply(view, SegmentUpdate(TP, gone.segment_id, 1, TS, None, SegmentState.DELETE_SEGMENT_STARTED))
        assert batch(view, asked) == single(view, asked) == single(view, asked, cached=True)
        assert_memo_answers(view, asked)


def assert_memo_answers(view: View, asked: list[tuple[int, int, int]]) -> None:
    """Asked as the server asks, twice, the lookups answer as seeks do, and the second time the memo knows
    every segment found."""
    expected = single(view, asked)
    assert single(view, asked, memo=True) == expected
    assert [view.queries.known_segment_value(NAME, epoch, offset) for _, epoch, offset in asked] == [
        answer if isinstance(answer, bytes) else None for answer in expected
    ]
    assert single(view, asked, memo=True) == expected


def test_a_partition_dropped_and_registered_again(tmp_path: Path) -> None:
    asked = lookups(2, 300)
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 50, 99), segment(TP, 100, 199, epoch=1)])
        assert batch(view, asked) == single(view, asked) == single(view, asked, cached=True)
        assert_memo_answers(view, asked)
        with view.batch() as b:
            b.unassign(TP)
        assert set(batch(view, asked)) == {"RemoteResourceNotFoundException"}
        assert set(single(view, asked, memo=True)) == {"RemoteResourceNotFoundException"}
        assert not view.queries.offset_cache._entries
        fill_view(view, TP, [segment(TP, 10, 99), segment(TP, 90, 249, epoch=1)])  # earlier starts than before
        assert batch(view, asked) == single(view, asked) == single(view, asked, cached=True)
        assert_memo_answers(view, asked)


def test_a_small_cache_evicts_and_seeks_past_its_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(view_module, "OFFSET_CACHE_LIMIT", 2 * EPOCH_WEIGHT + 10)
    asked = lookups(4, 3_000, step=13)
    with View(tmp_path / "view") as view:
        sizes = {0: 2, 1: 3, 2: 8, 3: EPOCH_WEIGHT + 11}  # epoch 3 weighs more than the whole cache
        start, segments = 0, []
        for epoch, count in sizes.items():
            for _ in range(count):
                segments.append(segment(TP, start, start + 49, epoch=epoch))
                start += 50
        fill_view(view, TP, segments)
        cache = view.queries.offset_cache
        for epochs in ([0, 1], [1, 2], [2, 0], [3], [0, 1, 2, 3]):
            some = [lookup for lookup in asked if lookup[1] in epochs]
            assert batch(view, some) == single(view, some)
            held = [len(starts) + EPOCH_WEIGHT for starts in cache._starts.values()]
            assert cache._weight == sum(held) <= cache.limit
        more = segment(TP, start, start + 49, epoch=2)
        apply(view, more, finished(more))
        assert batch(view, asked) == single(view, asked)
        assert cache._weight == sum(len(starts) + EPOCH_WEIGHT for starts in cache._starts.values()) <= cache.limit


def test_single_lookups_seek_in_an_epoch_too_large_to_load_in_one_call(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(offset_cache, "SINGLE_LOAD_KEYS", 3)
    asked = lookups(2, 600, step=11)
    with View(tmp_path / "view") as view:
        small = [segment(TP, i * 50, i * 50 + 49) for i in range(3)]  # epoch 0: as many as a single lookup loads
        large = [segment(TP, 150 + i * 50, 199 + i * 50, epoch=1) for i in range(4)]  # epoch 1: one more
        fill_view(view, TP, small + large)
        cache = view.queries.offset_cache
        tpid = view.queries.partition_row(TP).tpid
        assert single(view, asked, cached=True) == single(view, asked)
        assert list(cache._starts) == [K.epoch_prefix(tpid, 0)] and cache._large == {K.epoch_prefix(tpid, 1)}
        assert batch(view, asked) == single(view, asked)  # a batch loads it
        assert list(cache._starts) == [K.epoch_prefix(tpid, 0), K.epoch_prefix(tpid, 1)]
        assert single(view, asked, cached=True) == single(view, asked)
        with view.batch() as b:  # the partition's data dropped, then back with a small epoch 1
            b.unassign(TP)
        assert not cache._large
        fill_view(view, TP, [segment(TP, 150, 199, epoch=1)])
        assert single(view, asked, cached=True) == single(view, asked)
        assert K.epoch_prefix(tpid, 1) in cache._starts


def test_kept_entries_stay_within_their_limit(tmp_path: Path) -> None:
    limit = 3 * (ENTRY_OVERHEAD + 300)
    asked = lookups(2, 1_000, step=11)
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, i * 50, i * 50 + 49, epoch=i % 2) for i in range(20)])
        cache = view.queries.offset_cache
        cache.entry_bytes = limit
        assert single(view, asked, cached=True) == single(view, asked)
        kept = cache._entries
        assert 0 < len(kept) < 20  # of the 20 segments asked
        assert cache._entries_size == sum(len(k) + len(v or b"") + ENTRY_OVERHEAD for k, v in kept.items()) <= limit


def test_a_commit_during_a_single_lookups_read_keeps_its_entry_out(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        first = segment(TP, 0, 99)
        fill_view(view, TP, [first])
        cache = view.queries.offset_cache
        base = cache.base
        commit_after_next(view, "get", segment(TP, 0, 149))  # the same offset-index key, another entry
        assert single(view, [(0, 0, 50)], cached=True) == single(view, [(0, 0, 50)])
        assert cache.base is base
        # the entry read before the commit was not kept (the lookup, run again after it, kept the one after it)
        assert all(value == view.reader.get(K.OFFSETS, key) for key, value in cache._entries.items())
        assert single(view, [(0, 0, 120)], cached=True) == single(view, [(0, 0, 120)]) != [None]


def test_an_epoch_two_readers_load_at_once_is_held_once(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99), segment(TP, 100, 199)])
        cache = view.queries.offset_cache
        prefix = K.epoch_prefix(view.queries.partition_row(TP).tpid, 0)
        first = cache._load(prefix, cache._generation, None)  # both readers missed it in the cache
        assert cache._load(prefix, cache._generation, None) is first
        assert cache._weight == len(first) + EPOCH_WEIGHT


def test_an_epoch_shrinking_under_a_bisection_sends_the_batch_to_seeks(tmp_path: Path, monkeypatch) -> None:
    asked = [(0, 0, 50)]
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        assert batch(view, asked) == single(view, asked)

        shrunk: list[bytes] = []

        def bisect_then_shrink(prefix, starts, offset):  # as a commit that removes the epoch's entry right then
            at = bisect_right(starts, offset)
            del starts[:]
            shrunk.append(prefix)
            return prefix + K.offset_bytes(starts[at - 1]) if at else prefix

        # the reference's bisection and read (the native search reads the start offsets while holding the GIL); the
        # batch path reads ``floor_key`` from the module at each call, compiled or not
        monkeypatch.setattr(K, "floor_key", bisect_then_shrink)
        assert batch(view, asked) == single(view, asked) != [None]
        assert shrunk  # the batch bisected through the replacement


def test_a_commit_during_the_reads_sends_the_batch_to_seeks(tmp_path: Path) -> None:
    asked = lookups(1, 300)
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        assert batch(view, asked) == single(view, asked)
        cache = view.queries.offset_cache
        base = cache.base
        commit_after_next(view, "get_many", segment(TP, 100, 199))
        answers = batch(view, asked)
        assert cache.base is base
        assert answers == single(view, asked)
        assert answers[asked.index((0, 0, 140))] is not None
        assert batch(view, asked) == single(view, asked)


def test_a_batch_between_a_commits_write_and_its_cache_update_reads_the_written_state(tmp_path: Path) -> None:
    asked = lookups(1, 300)
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        assert batch(view, asked) == single(view, asked)
        written, release = threading.Event(), threading.Event()

        def pause() -> None:  # the stage is written, the caches not yet updated
            written.set()
            release.wait(10)

        after_next_change(view, pause)
        landing = segment(TP, 100, 199)
        writer = threading.Thread(target=apply, args=(view, landing, finished(landing)))
        writer.start()
        try:
            assert written.wait(10)
            answers, expected = batch(view, asked), single(view, asked)
        finally:
            release.set()
            writer.join(10)
        assert answers == expected
        assert answers[asked.index((0, 0, 140))] is not None


def test_a_commit_while_an_epoch_loads_keeps_it_out_of_the_cache(tmp_path: Path) -> None:
    asked = lookups(1, 300)
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        cache = view.queries.offset_cache
        base = cache.base
        landing = segment(TP, 100, 199)

        def read_while_committing(cf, prefix, limit):
            keys = base.keys_with_prefix(cf, prefix, limit)  # the keys of this moment
            cache.base = base
            apply(view, landing, finished(landing))
            return keys

        cache.base = Intercepted(base, keys_with_prefix=read_while_committing)
        assert batch(view, asked) == single(view, asked)
        assert cache.base is base
        assert batch(view, asked) == single(view, asked)
        assert batch(view, asked)[asked.index((0, 0, 140))] is not None


def test_readers_find_every_committed_segment_while_a_writer_commits(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [])
        committed = [0]  # segments whose commit has returned
        failures: list[str] = []
        done = threading.Event()

        def write() -> None:
            for i in range(200):
                seg = segment(TP, i * 10, i * 10 + 9)
                apply(view, seg, finished(seg))
                committed[0] = i + 1
            done.set()

        def read() -> None:
            while not done.is_set():
                count = committed[0]
                asked = [(0, 0, i * 10 + 5) for i in range(count)]
                answers = batch(view, asked) + single(view, asked[-20:], cached=True)
                missing = [
                    lookup for lookup, answer in zip(asked + asked[-20:], answers) if not isinstance(answer, bytes)
                ]
                if missing:
                    failures.append(f"{missing[:3]} of {count} committed")
                    return

        threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not failures, failures
        asked = lookups(1, 2_000, step=3)
        assert batch(view, asked) == single(view, asked) == single(view, asked, cached=True)
