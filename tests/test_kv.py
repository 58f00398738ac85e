"""StagedKV: reads through pending writes, ordered merges, prefix deletions, dropped fresh keys."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.state.kv import MemoryKV, StagedKV, last, scan

keys = st.binary(min_size=1, max_size=3)
prefixes = st.binary(min_size=1, max_size=2).filter(lambda p: p.strip(b"\xff"))  # the view's prefixes always end
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, st.binary(max_size=2)),
        st.tuples(st.just("put_new"), keys, st.binary(max_size=2)),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("delete_prefix"), prefixes),
    ),
    max_size=40,
)


def apply(kv, op) -> None:
    name, *args = op
    if name == "put_new" and kv.get("cf", args[0]) is not None:
        name = "put"  # put_new is only for keys the store does not hold
    getattr(kv, name)("cf", *args)


def commit(stage: StagedKV, base: MemoryKV) -> None:
    for cf, prefixes in stage.deleted_prefixes.items():
        for prefix in prefixes:
            base.delete_prefix(cf, prefix)
    for cf, table in stage.pending.items():
        for key, value in table.items():
            if value is None:
                base.delete(cf, key)
            else:
                base.put(cf, key, value)


@settings(max_examples=300, deadline=None)
@given(ops, ops, keys, st.one_of(st.just(b""), prefixes))
def test_stage_reads_and_commits_like_direct_writes(before, staged_ops, probe, prefix) -> None:
    base, direct = MemoryKV(), MemoryKV()
    for op in before:
        apply(base, op)
        apply(direct, op)
    stage = StagedKV(base)
    for op in staged_ops:
        apply(direct, op)
        apply(stage, op)
        assert stage.get("cf", probe) == direct.get("cf", probe)
        assert list(scan(stage, "cf", prefix)) == list(scan(direct, "cf", prefix))
        assert stage.floor("cf", probe, prefix) == direct.floor("cf", probe, prefix)
        assert stage.ceiling("cf", probe, prefix) == direct.ceiling("cf", probe, prefix)
        if prefix:
            assert last(stage, "cf", prefix) == last(direct, "cf", prefix)
    commit(stage, base)
    assert list(scan(base, "cf", b"")) == list(scan(direct, "cf", b""))


def test_a_fresh_key_deleted_in_the_same_stage_leaves_no_tombstone() -> None:
    stage = StagedKV(MemoryKV())
    stage.put_new("cf", b"k", b"v")
    stage.delete("cf", b"k")
    assert stage.pending["cf"] == {}
    stage.put("cf", b"j", b"v")
    stage.delete("cf", b"j")
    assert stage.pending["cf"] == {b"j": None}  # not known to be absent from the base: a real deletion
