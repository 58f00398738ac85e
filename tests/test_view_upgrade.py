"""A view written by rlmm 0.x with schema version 1 (no timestamp index) is upgraded when opened for writing,
and refused with a message saying so when opened read-only."""

from __future__ import annotations

import pytest

from rlmm.errors import ViewSchemaMismatch
from rlmm.state import keys as K
from rlmm.state.rocks import RocksKV
from rlmm.state.view import SCHEMA_VERSION, View
from tests.snapshot_support import live_view, view_answers, view_rows, workload_events


def make_schema_1(path) -> None:
    """What schema 1 is: offset-index entries without their segment's start offset (the 8 bytes after the
    size), no timestamp index, inversions or finished-unreferenced index, and version 1 in the meta."""
    kv = RocksKV(path)
    offsets = kv.cfs[K.OFFSETS]
    for key, value in list(offsets.items()):
        offsets[key] = value[:37] + value[45:]
    for cf in (K.TIMESTAMP_TREES, K.INVERSIONS, K.FINISHED_UNREFERENCED):
        kv.db.drop_column_family(cf)
    kv.cfs[K.META][K.SCHEMA_VERSION_KEY] = K.u32(1)
    kv.close()


def test_a_schema_1_view_is_upgraded_to_the_same_rows_and_answers(tmp_path) -> None:
    events, tps = workload_events(3_000, seed=11)
    path = tmp_path / "view"
    with live_view(events, tps, path) as view:
        rows, answers = view_rows(view.reader), view_answers(view.queries, view.reader)
    assert any(r[K.TIMESTAMP_TREES] for r in rows.values())
    make_schema_1(path)

    with pytest.raises(ViewSchemaMismatch, match="older rlmm .*timestamp_trees.*open it once for writing"):
        View(path, read_only=True)

    with View(path) as upgraded:
        assert view_rows(upgraded.reader) == rows
        assert view_answers(upgraded.queries, upgraded.reader) == answers
        assert K.read_u32(upgraded.reader.get(K.META, K.SCHEMA_VERSION_KEY)) == SCHEMA_VERSION
    with View(path, read_only=True) as reader:
        assert view_answers(reader.queries, reader.reader) == answers


def test_a_view_of_a_newer_schema_is_refused(tmp_path) -> None:
    path = tmp_path / "view"
    View(path).close()
    kv = RocksKV(path)
    kv.cfs[K.META][K.SCHEMA_VERSION_KEY] = K.u32(SCHEMA_VERSION + 1)
    kv.close()
    with pytest.raises(ViewSchemaMismatch, match=f"schema version {SCHEMA_VERSION + 1}, this rlmm reads"):
        View(path)
