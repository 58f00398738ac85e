"""The max-timestamp index's buckets depend on its entries alone: whatever adds and removes brought them there, batch
by batch, with the writer's caches of buckets kept or dropped, the rows are those ``write_index`` writes for the
entries, and the last bucket ends with the greatest."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.state import keys as K
from rlmm.state import max_timestamp as MT
from rlmm.state.kv import MemoryKV, StagedKV, scan
from tests.test_kv import commit

TPID = b"\x00\x00\x00\x07"
OTHER = b"\x00\x00\x00\x08"  # a partition beside it, whose rows must stay apart


def _ids(boundary: bool, count: int) -> list[bytes]:
    ids, n = [], 0
    while len(ids) < count:
        candidate = n.to_bytes(16, "big")
        if (zlib.crc32(candidate) % MT.BUCKET == 0) == boundary:
            ids.append(candidate)
        n += 1
    return ids


IDS = _ids(True, 12) + _ids(False, 24)  # a third of the segments cut buckets: a few entries make several
entries = st.builds(MT.entry, st.integers(0, 6), st.integers(0, 3), st.sampled_from(IDS))
# batches of operations: an entry to add (or to remove, if it is there), and whether the cache is dropped after
batches = st.lists(st.tuples(st.lists(entries, max_size=12), st.booleans()), max_size=12)


def rows(kv, tpid: bytes) -> list[tuple[bytes, bytes]]:
    return list(scan(kv, K.MAX_TIMESTAMP, tpid))


@settings(max_examples=300, deadline=None)
@given(batches)
def test_the_buckets_are_those_of_the_entries(batches) -> None:
    base = MemoryKV()
    MT.write_index(base, OTHER, sorted({MT.entry(1, 1, i) for i in IDS[:20]}))
    other_rows = rows(base, OTHER)
    tails: MT.Tails = {}
    found: MT.Found = {}
    held: set[bytes] = set()
    for changes, drop_cache in batches:
        stage = StagedKV(base)
        index = MT.MaxTimestampIndex(stage, tails, found)
        for entry in changes:
            if entry in held:
                index.remove(TPID, entry)
                held.discard(entry)
            else:
                index.add(TPID, entry)
                held.add(entry)
        index.flush()
        commit(stage, base)
        if drop_cache:
            tails.clear()
            found.clear()
        expected = MemoryKV()
        MT.write_index(expected, TPID, sorted(held))
        assert rows(base, TPID) == rows(expected, TPID)
        assert MT.last_segment_id(base, TPID) == (max(held)[-16:] if held else None)
        assert rows(base, OTHER) == other_rows


def test_a_bucket_made_and_emptied_in_one_batch_writes_no_row() -> None:
    """The last bucket is written once per batch: one that a batch creates and empties again leaves nothing to write,
    not a deletion of a row the store never held."""
    stage = StagedKV(MemoryKV())
    index = MT.MaxTimestampIndex(stage, {})
    entry = MT.entry(5, 9, IDS[0])
    index.add(TPID, entry)
    index.remove(TPID, entry)
    index.flush()
    assert not stage.pending.get(K.MAX_TIMESTAMP)
    index.add(TPID, entry)
    index.flush()
    assert stage.pending[K.MAX_TIMESTAMP] == {TPID + MT.LAST: entry}
