"""The fold's native timestamp-tree pages (rlmm/state/maxtree_native.pyx) against their reference
(rlmm/state/maxtree.py): the same changes, batch after batch over a cache kept between them, must give the same
writes, put for put.

CI installs the compiled core, so the native module is required here: a missing one fails, it does not skip.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.state import maxtree, maxtree_native  # type: ignore[attr-defined]
from rlmm.state.kv import scan
from tests.recording_kv import RecordingKV

CF = "trees"
I64 = 1 << 63


class Side:
    """One implementation: its KV, its cache kept across batches, the batch's pages."""

    def __init__(self, new_cache: Callable[[], object]) -> None:
        self.kv = RecordingKV(CF)
        self.cache = new_cache()
        self.pages = self.cache.pages_over(self.kv, CF)

    def next_batch(self) -> None:
        self.pages = self.cache.pages_over(self.kv, CF)


def tree(tpid: int, epoch: int) -> bytes:
    return tpid.to_bytes(4, "big") + epoch.to_bytes(4, "big")


def run(rng: random.Random, steps: int, spread: int) -> int:
    """Random inserts, removes, flushes, forgotten partitions and cleared caches on both sides; returns the writes
    compared."""
    reference, native = Side(maxtree.TreeCache), Side(maxtree_native.TreeCache)
    held: dict[bytes, dict[int, tuple[int, int]]] = {}
    compared = 0

    def both(call: Callable[[Side], object]) -> None:
        outcomes = []
        for side in (reference, native):
            try:
                call(side)
                outcomes.append(None)
            except AssertionError:
                outcomes.append("AssertionError")
        assert outcomes[0] == outcomes[1]

    def flush() -> None:
        nonlocal compared
        both(lambda side: side.pages.flush())
        writes = sorted(reference.kv.taken(), key=repr)
        assert sorted(native.kv.taken(), key=repr) == writes
        assert native.kv.rows() == reference.kv.rows()
        compared += len(writes)
        for side in (reference, native):
            side.next_batch()
        if rng.random() < 0.3:
            _check_first(reference.kv, held, rng)

    for _ in range(steps):
        roll = rng.random()
        t = tree(rng.randrange(3), rng.randrange(3))
        positions = held.setdefault(t, {})
        if roll < 0.55 or not positions:
            position = _position(rng, spread, positions)
            if position in positions:
                both(lambda side: side.pages.insert(t, position, 1, 1))  # refused by both
                continue
            first, second = rng.randrange(-(10**12), 10**12), rng.randrange(-I64, I64)
            positions[position] = (first, second)
            both(lambda side: side.pages.insert(t, position, first, second))
        elif roll < 0.9:
            position = rng.choice(list(positions))
            del positions[position]
            both(lambda side: side.pages.remove(t, position))
        elif roll < 0.97:
            flush()
        elif roll < 0.99:
            tpid = t[:4]
            flush()
            for side in (reference, native):  # as the view does: the partition's rows go, then its cached pages
                for key, _ in list(scan(side.kv.base, CF, tpid)):
                    side.kv.base.delete(CF, key)
                side.pages.forget(tpid)
            for key in [k for k in held if k.startswith(tpid)]:
                del held[key]
        else:
            flush()
            for side in (reference, native):
                side.cache.clear()
                side.next_batch()
    flush()
    _check_first(reference.kv, held, rng)
    return compared


def _position(rng: random.Random, spread: int, positions: dict[int, tuple[int, int]]) -> int:
    if spread == 0:  # anywhere in u64: the highest levels, shifts by 64 bits included
        return rng.choice([0, (1 << 64) - 1, rng.getrandbits(64), rng.getrandbits(rng.randrange(1, 65))])
    if positions and rng.random() < 0.5:  # an append: the common case of the fold
        return max(positions) + rng.randrange(1, 3)
    return I64 + rng.randrange(spread)


def _check_first(kv: RecordingKV, held: dict[bytes, dict[int, tuple[int, int]]], rng: random.Random) -> None:
    """The flushed trees answer ``first`` as a scan of the positions they hold."""
    for t, positions in held.items():
        for _ in range(3):
            min_first, min_second = rng.randrange(-(10**12), 10**12), rng.randrange(-I64, I64)
            expected = min(
                (p for p, (f, s) in positions.items() if f >= min_first and s >= min_second),
                default=None,
            )
            assert maxtree.first(kv.base, CF, t, min_first, min_second) == expected


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("spread", [40, 5_000, 0])
def test_native_and_reference_pages_write_the_same_rows(seed: int, spread: int) -> None:
    assert run(random.Random(seed), 3_000, spread) > 100


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([3, 20, 300, 0]), st.integers(1, 120))
def test_short_runs_agree(seed: int, spread: int, steps: int) -> None:
    run(random.Random(seed), steps, spread)


def test_a_cleared_cache_stops_the_batch_pages_made_before() -> None:
    kv = RecordingKV(CF)
    cache = maxtree_native.TreeCache()
    pages = cache.pages_over(kv, CF)
    pages.insert(tree(1, 1), 5, 1, 1)
    pages.flush()
    cache.clear()
    with pytest.raises(RuntimeError, match="cleared"):
        pages.insert(tree(1, 1), 6, 1, 1)
    again = cache.pages_over(kv, CF)
    again.insert(tree(1, 1), 6, 2, 2)  # read through from the KV
    again.flush()
    assert maxtree.first(kv.base, CF, tree(1, 1), 2, 2) == 6
    assert len(cache) == 2  # the level-1 page and the tree's top


def test_a_tree_prefix_longer_than_the_native_key_is_refused() -> None:
    pages = maxtree_native.TreeCache().pages_over(RecordingKV(CF), CF)
    with pytest.raises(ValueError, match="at most 32 bytes"):
        pages.insert(b"x" * 33, 1, 1, 1)
