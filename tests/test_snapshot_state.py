"""The logical state of a partition (``rlmm.state.export``) round-trips to byte-identical rows, and the
pure fold of the snapshot job gives the service's view."""

from __future__ import annotations

import pytest

from rlmm.state.export import partition_state, partitions, write_partition_state
from rlmm.state.kv import MemoryKV
from rlmm.state.queries import Queries
from snapshots.fold import fold_local, fold_stream
from tests.snapshot_support import (
    SCENARIOS,
    live_view,
    non_partition_rows,
    replayed_view,
    scenario_events,
    view_answers,
    view_rows,
    workload_events,
)


def rebuilt(view_kv) -> MemoryKV:
    kv = MemoryKV()
    for tp in reversed(partitions(view_kv)):  # other tpids than the original's
        write_partition_state(kv, partition_state(view_kv, tp))
    return kv


def assert_same(view, kv: MemoryKV) -> None:
    assert view_rows(kv) == view_rows(view.reader)
    assert view_answers(Queries(kv), kv) == view_answers(view.queries, view.reader)


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_state_round_trips(name, tmp_path):
    with replayed_view(name, tmp_path) as view:
        assert_same(view, rebuilt(view.reader))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_generated_state_round_trips(seed, tmp_path):
    events, tps = workload_events(3000, seed=seed)
    with live_view(events, tps, tmp_path / "v") as view:
        assert_same(view, rebuilt(view.reader))


def fold_into_kv(events, only=None) -> tuple[MemoryKV, list, dict]:
    states, quarantine, offsets = fold_local(events, only=only)
    kv = MemoryKV()
    for state in states:
        write_partition_state(kv, state)
    return kv, quarantine, offsets


@pytest.mark.parametrize("name", SCENARIOS)
def test_fold_equals_replay(name, tmp_path):
    from rlmm.replay import Scenario
    from tests.snapshot_support import scenario_dir

    only = {tp for tp, _ in Scenario.load(scenario_dir(name)).assigned}
    with replayed_view(name, tmp_path, all_ready=True) as view:
        kv, quarantine, offsets = fold_into_kv(scenario_events(name), only)
        # a partition without records is registered in the replay but never seen by the fold
        expected_rows = {tp: rows for tp, rows in view_rows(view.reader).items() if tp in set(partitions(kv))}
        assert view_rows(kv) == expected_rows
        assert {"metadata_offsets": offsets, "quarantine": quarantine} == non_partition_rows(view)


@pytest.mark.parametrize("seed", [5, 6])
def test_fold_equals_live_view(seed, tmp_path):
    events, tps = workload_events(4000, seed=seed)
    with live_view(events, tps, tmp_path / "v") as view:
        kv, quarantine, offsets = fold_into_kv(events)
        expected = {tp: rows for tp, rows in view_rows(view.reader).items() if tp in set(partitions(kv))}
        assert view_rows(kv) == expected
        assert {"metadata_offsets": offsets, "quarantine": quarantine} == non_partition_rows(view)
        assert view_answers(Queries(kv), kv) == {
            tp: a for tp, a in view_answers(view.queries, view.reader).items() if tp in expected
        }


@pytest.mark.parametrize("seed", [7, 8])
def test_the_streaming_fold_equals_the_grouped_fold(seed):
    """fold_stream (records as a topic holds them: each offset once, each metadata partition in order,
    partitions interleaved) gives the states and the quarantine of fold_local."""
    events, _ = workload_events(3000, seed=seed, metadata_partitions=4)
    offsets: dict[int, int] = {}
    topic = []
    for mp, _, value in events:
        topic.append((mp, offsets.get(mp, 0), value))
        offsets[mp] = offsets.get(mp, 0) + 1
    states, quarantine = fold_stream(topic)
    expected_states, expected_quarantine, _ = fold_local(topic)
    assert sorted(quarantine, key=lambda q: (q.metadata_partition, q.offset)) == expected_quarantine != []
    assert len({key for key, _ in states}) == len(states) == len(expected_states)
    assert sorted((state for _, state in states), key=lambda s: (s.tp.topic_id, s.tp.partition)) == sorted(
        expected_states, key=lambda s: (s.tp.topic_id, s.tp.partition)
    )
