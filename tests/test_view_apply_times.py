"""The view adds up the time its committed batches spend in each stage (``View.apply_seconds``), on a real RocksDB
view: the caller's block counts as ``apply``, RocksDB's work as ``encode`` and ``write``, an aborted batch adds
nothing, and a batch that writes nothing adds no write."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlmm.state.apply_times import STAGES
from rlmm.state.view import View
from tests.grpc_support import fill_view, new_tp, segment

TP = new_tp("times")
PAUSE = 0.2


def test_each_stage_of_a_committed_batch_is_timed_at_its_borders(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        opened = view.apply_seconds()  # the batch that wrote the schema version
        fill_view(view, TP, [segment(TP, i * 100, i * 100 + 99) for i in range(50)])
        first = view.apply_seconds()
        assert all(first[stage] > opened[stage] for stage in STAGES), (opened, first)
        with view.batch() as batch:
            batch.mark_not_ready(TP)
            time.sleep(PAUSE)  # the caller's own time in its block is the apply stage's
        second = view.apply_seconds()
    spent = {stage: second[stage] - first[stage] for stage in STAGES}
    assert spent["apply"] >= PAUSE, spent
    assert all(0 < spent[stage] < PAUSE for stage in STAGES if stage != "apply"), spent


def test_an_aborted_batch_adds_nothing_and_an_empty_one_no_write(tmp_path: Path) -> None:
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        before = view.apply_seconds()
        with pytest.raises(RuntimeError), view.batch():
            raise RuntimeError("the caller failed")
        assert view.apply_seconds() == before
        with view.batch():
            pass
        after = view.apply_seconds()
    assert after["write"] == before["write"] and after["caches"] == before["caches"]
    assert after["encode"] > before["encode"]
