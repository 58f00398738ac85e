"""The fold's native max-timestamp index (rlmm/state/max_timestamp_native.pyx) against its reference
(rlmm/state/max_timestamp.py): the same adds and removes, batch after batch over buckets kept between them (or
dropped), must give the same writes, put for put, and the rows ``write_index`` writes for the entries held.

CI installs the compiled core, so the native module is required here: a missing one fails, it does not skip.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.compiled import core_build
from rlmm.state import keys as K
from rlmm.state import max_timestamp as MT
from rlmm.state import max_timestamp_native  # type: ignore[attr-defined]
from rlmm.state.kv import MemoryKV, scan
from tests.recording_kv import RecordingKV


class Side:
    """One implementation: its KV, its buckets kept across batches, the batch's index."""

    def __init__(self, new_index: Callable[[RecordingKV, MT.Tails, MT.Found], MT.Index]) -> None:
        self.new_index = new_index
        self.kv = RecordingKV(K.MAX_TIMESTAMP)
        self.tails: MT.Tails = {}
        self.found: MT.Found = {}
        self.index = new_index(self.kv, self.tails, self.found)

    def next_batch(self) -> None:
        self.index = self.new_index(self.kv, self.tails, self.found)


def run(rng: random.Random, steps: int, ids: int) -> int:
    """Random adds, removes, flushes, forgotten partitions and dropped caches on both sides; returns the writes
    compared."""
    reference, native = Side(MT.MaxTimestampIndex), Side(max_timestamp_native.MaxTimestampIndex)
    segment_ids = [rng.randbytes(16) for _ in range(ids)]
    held: dict[bytes, set[bytes]] = {}
    compared = 0

    def flush() -> None:
        nonlocal compared
        for side in (reference, native):
            side.index.flush()
        writes = reference.kv.taken()
        assert native.kv.taken() == writes
        assert native.kv.rows() == reference.kv.rows()
        compared += len(writes)
        for tpid, entries in held.items():
            expected = MemoryKV()
            MT.write_index(expected, tpid, sorted(entries))
            assert list(scan(reference.kv.base, K.MAX_TIMESTAMP, tpid)) == list(scan(expected, K.MAX_TIMESTAMP, tpid))
        for side in (reference, native):
            side.next_batch()

    for _ in range(steps):
        roll = rng.random()
        tpid = rng.randrange(3).to_bytes(4, "big")
        entries = held.setdefault(tpid, set())
        if roll < 0.6 or not entries:
            if entries and rng.random() < 0.6:  # an upload: after the others
                top = max(entries)
                timestamp = int.from_bytes(top[:8], "big") - K.I64_FLIP + rng.randrange(0, 3)
            else:
                timestamp = rng.randrange(-5, 50)
            entry = MT.entry(timestamp, rng.randrange(0, 40), rng.choice(segment_ids))
            if entry in entries:
                continue
            entries.add(entry)
            for side in (reference, native):
                side.index.add(tpid, entry)
        elif roll < 0.9:  # retention takes the oldest, mostly
            entry = min(entries) if rng.random() < 0.5 else rng.choice(sorted(entries))
            entries.discard(entry)
            for side in (reference, native):
                side.index.remove(tpid, entry)
        elif roll < 0.96:
            flush()
        elif roll < 0.98:
            flush()
            for side in (reference, native):  # as the view does: the partition's rows go, then what is cached
                for key, _ in list(scan(side.kv.base, K.MAX_TIMESTAMP, tpid)):
                    side.kv.base.delete(K.MAX_TIMESTAMP, key)
                side.index.forget(tpid)
            del held[tpid]
        else:
            flush()
            for side in (reference, native):
                side.tails.clear()
                side.found.clear()
    flush()
    assert native.found == reference.found
    return compared


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("ids", [8, 60, 2_000])
def test_native_and_reference_indexes_write_the_same_rows(seed: int, ids: int) -> None:
    assert run(random.Random(seed), 2_500, ids) > 100


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([2, 10, 100]), st.integers(1, 150))
def test_short_runs_agree(seed: int, ids: int, steps: int) -> None:
    run(random.Random(seed), steps, ids)


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_the_bucket_cuts_are_the_references(entry: bytes) -> None:
    assert max_timestamp_native.is_boundary(entry) == MT.is_boundary(entry)
    assert MT.is_boundary(entry) == (zlib.crc32(entry[16:]) % MT.BUCKET == 0)


class SeekCountingKV(RecordingKV):
    def __init__(self, cf: str) -> None:
        super().__init__(cf)
        self.seeks = 0

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        self.seeks += 1
        return super().ceiling(cf, key, prefix)


@pytest.mark.parametrize("index_class", [MT.MaxTimestampIndex, max_timestamp_native.MaxTimestampIndex])
def test_the_oldest_entries_leave_with_a_seek_per_bucket(index_class) -> None:
    """Retention: 2,000 segments, deleted oldest first over 20 batches, take one seek per bucket (the first
    bucket's, found again from its entries), not one per segment; the rows stay those of the entries left."""
    rng = random.Random(7)
    tpid = b"\x00\x00\x00\x05"
    entries = sorted(MT.entry(i * 10, i, rng.randbytes(16)) for i in range(2_000))
    kv = SeekCountingKV(K.MAX_TIMESTAMP)
    MT.write_index(kv.base, tpid, entries)
    buckets = len(kv.rows())
    tails: MT.Tails = {}
    found: MT.Found = {}
    for batch in range(20):
        index = index_class(kv, tails, found)
        for entry in entries[batch * 90 : (batch + 1) * 90]:
            index.remove(tpid, entry)
        index.flush()
    expected = MemoryKV()
    MT.write_index(expected, tpid, entries[1_800:])
    assert kv.rows() == list(scan(expected, K.MAX_TIMESTAMP, b""))
    assert 50 < buckets and kv.seeks <= buckets  # one per bucket emptied, at most
    assert found and next(iter(found.values()))[1][0] == entries[1_800]


def test_entries_of_another_size_are_refused() -> None:
    index = max_timestamp_native.MaxTimestampIndex(RecordingKV(K.MAX_TIMESTAMP), {})
    for entry in (bytes(31), bytes(33), bytearray(32)):
        with pytest.raises(ValueError, match="32 bytes"):
            index.add(b"\x00\x00\x00\x01", entry)
    kv = RecordingKV(K.MAX_TIMESTAMP)
    kv.base.put(K.MAX_TIMESTAMP, b"\x00\x00\x00\x01" + MT.LAST, bytes(40))  # a damaged bucket
    with pytest.raises(ValueError, match="not whole entries"):
        max_timestamp_native.MaxTimestampIndex(kv, {}).add(b"\x00\x00\x00\x01", bytes(32))


def test_the_compiled_core_folds_with_the_native_index() -> None:
    index = MT.new_index(RecordingKV(K.MAX_TIMESTAMP))
    native = isinstance(index, max_timestamp_native.MaxTimestampIndex)
    assert native == (core_build() == "compiled")
    assert max_timestamp_native.layout() == (MT.ENTRY_SIZE, MT.BUCKET, MT.LAST)
