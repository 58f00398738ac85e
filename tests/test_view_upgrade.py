"""A view written by an older rlmm (schema version 1, without the timestamp index; schema version 2, a row per
membership, per max timestamp, per txn entry and per tree slot) is upgraded when opened for writing, to the rows a
view of this version holds, going on where it stopped when the upgrade is killed; it is refused with a message
saying so when opened read-only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from rlmm.errors import ViewSchemaMismatch
from rlmm.state import keys as K
from rlmm.state.max_timestamp import ENTRY_SIZE
from rlmm.state.rocks import RocksKV
from rlmm.state.rows import RefEntry, segment_row_value, unpack_memberships
from rlmm.state.upgrade import UPGRADE_FROM_KEY, UPGRADED_KEY
from rlmm.state.view import SCHEMA_VERSION, View
from tests.snapshot_support import live_view, view_answers, view_rows, workload_events

MEMBERSHIP = "membership"  # schema 2's column family of memberships
TREE_SLOT_SIZE = 25  # a timestamp-tree slot: first, second, child level, child


def make_schema_2(path: Path) -> None:
    """What schema 2 is: a segment's row holds its topic value alone (rows only for segments with metadata), its
    memberships are in their own column family; every offset-index entry whose segment has a transaction index has a
    txn row; the max-timestamp index has a key per segment (and an empty value); a timestamp tree has a row per slot
    (its page's key and the slot number); epoch rows lack the last entry's txn flag; version 2 in the meta."""
    kv = RocksKV(path)
    membership = kv.db.create_column_family(MEMBERSHIP, Options(raw_mode=True))
    segments = kv.cfs[K.SEGMENTS]
    for key, row in list(segments.items()):
        membership[key] = b"".join(
            epoch.to_bytes(4, "big", signed=True) + bytes([flags])
            for epoch, flags in sorted(unpack_memberships(row).items())
        )
        value = segment_row_value(row)
        if value:
            segments[key] = value
        else:
            del segments[key]
    txn = kv.cfs[K.TXN]
    for key in list(txn.keys()):
        del txn[key]
    for key, value in kv.cfs[K.OFFSETS].items():
        if not RefEntry.unpack(value).txn_index_empty:
            txn[key] = b""
    max_timestamp = kv.cfs[K.MAX_TIMESTAMP]
    for key, value in list(max_timestamp.items()):
        del max_timestamp[key]
        for at in range(0, len(value), ENTRY_SIZE):
            max_timestamp[key[:4] + value[at : at + ENTRY_SIZE]] = b""
    trees = kv.cfs[K.TIMESTAMP_TREES]
    for key, value in list(trees.items()):
        if key.endswith(b"\xff") and len(key) == 9:  # a tree's top: tpid, epoch, 0xff
            continue
        del trees[key]
        used, at = int.from_bytes(value[:2], "big"), 2
        for slot in range(16):
            if used >> slot & 1:
                trees[key + bytes([slot])] = value[at : at + TREE_SLOT_SIZE]
                at += TREE_SLOT_SIZE
    epochs = kv.cfs[K.EPOCHS]
    for key, value in list(epochs.items()):
        epochs[key] = value[:-1]
    kv.cfs[K.META][K.SCHEMA_VERSION_KEY] = K.u32(2)
    del membership
    kv.close()


def make_schema_1(path: Path) -> None:
    """What schema 1 is, from schema 2: offset-index entries without their segment's start offset (the 8 bytes after
    the size), no timestamp index, inversions or finished-unreferenced index, and version 1 in the meta."""
    make_schema_2(path)
    kv = RocksKV(path)
    offsets = kv.cfs[K.OFFSETS]
    for key, value in list(offsets.items()):
        offsets[key] = value[:37] + value[45:]
    for cf in (K.TIMESTAMP_TREES, K.INVERSIONS, K.FINISHED_UNREFERENCED):
        kv.db.drop_column_family(cf)
    kv.cfs[K.META][K.SCHEMA_VERSION_KEY] = K.u32(1)
    kv.close()


def a_view(path: Path) -> tuple[dict, dict]:
    """A view of this version, and its rows and answers."""
    events, tps = workload_events(3_000, seed=11)
    with live_view(events, tps, path) as view:
        rows, answers = view_rows(view.reader), view_answers(view.queries, view.reader)
    assert any(r[K.TIMESTAMP_TREES] for r in rows.values()) and any(r[K.TXN] for r in rows.values())
    return rows, answers


def assert_upgraded(path: Path, rows: dict, answers: dict) -> None:
    with View(path) as upgraded:
        assert view_rows(upgraded.reader) == rows
        assert view_answers(upgraded.queries, upgraded.reader) == answers
        assert K.read_u32(upgraded.reader.get(K.META, K.SCHEMA_VERSION_KEY)) == SCHEMA_VERSION
        assert upgraded.reader.get(K.META, UPGRADE_FROM_KEY) is None
    assert MEMBERSHIP not in Rdict.list_cf(str(path))  # dropped once upgraded
    with View(path, read_only=True) as reader:
        assert view_answers(reader.queries, reader.reader) == answers


def test_a_schema_1_view_is_upgraded_to_the_same_rows_and_answers(tmp_path) -> None:
    path = tmp_path / "view"
    rows, answers = a_view(path)
    make_schema_1(path)
    with pytest.raises(ViewSchemaMismatch, match="older rlmm .*timestamp_trees.*open it once for writing"):
        View(path, read_only=True)
    assert_upgraded(path, rows, answers)


def test_a_schema_2_view_is_upgraded_to_the_same_rows_and_answers(tmp_path) -> None:
    path = tmp_path / "view"
    rows, answers = a_view(path)
    make_schema_2(path)
    assert MEMBERSHIP in Rdict.list_cf(str(path))
    with pytest.raises(ViewSchemaMismatch, match="schema version 2, written by an older rlmm: open it once"):
        View(path, read_only=True)
    assert_upgraded(path, rows, answers)


# opens a view for writing, which upgrades it, and is killed (SIGKILL) right after its n-th commit
_KILLED_AFTER_COMMIT = """
import os, signal, sys
from rlmm.state.view import View

commits = 0

def commit() -> None:
    global commits
    commits += 1
    if commits == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)

View(sys.argv[1], on_commit=commit).close()
"""


def killed_after_commit(path: Path, commits: int) -> None:
    done = subprocess.run([sys.executable, "-c", _KILLED_AFTER_COMMIT, str(path), str(commits)], env=os.environ)
    assert done.returncode == -9


def upgraded_up_to(path: Path) -> bytes | None:
    kv = RocksKV(path, read_only=True)
    try:
        assert kv.get(K.META, UPGRADE_FROM_KEY) == K.u32(2)  # an upgrade from schema 2 is under way
        assert K.read_u32(kv.get(K.META, K.SCHEMA_VERSION_KEY) or b"") == SCHEMA_VERSION  # older rlmms refuse it
        return kv.get(K.META, UPGRADED_KEY)
    finally:
        kv.close()


def test_an_upgrade_killed_goes_on_where_it_stopped(tmp_path) -> None:
    path = tmp_path / "view"
    rows, answers = a_view(path)
    make_schema_2(path)
    killed_after_commit(path, 1)  # the upgrade recorded, no partition written again
    assert upgraded_up_to(path) is None
    with pytest.raises(ViewSchemaMismatch, match="upgrade .* from schema version 2 to .* was interrupted"):
        View(path, read_only=True)
    reached = []
    for commits in (4, 3, 5):  # the recording batch, then partitions; each run goes on after the last one's
        killed_after_commit(path, commits)
        reached.append(upgraded_up_to(path))
    assert None not in reached and reached == sorted(reached) and len(set(reached)) == 3
    assert len(rows) > 4 + 3 + 5 - 3  # partitions were left for the last run
    assert_upgraded(path, rows, answers)


def test_a_view_of_a_newer_schema_is_refused(tmp_path) -> None:
    path = tmp_path / "view"
    View(path).close()
    kv = RocksKV(path)
    kv.cfs[K.META][K.SCHEMA_VERSION_KEY] = K.u32(SCHEMA_VERSION + 1)
    kv.close()
    with pytest.raises(ViewSchemaMismatch, match=f"schema version {SCHEMA_VERSION + 1}, this rlmm reads"):
        View(path)
