"""A read worker of ``rlmm serve --workers`` whose primary died (SIGKILL, batches only in RocksDB's log) and was
started again: the new primary withdraws readiness, applies a batch and flushes. A RocksDB secondary instance
keeps in memory what it replayed of the dead primary's log, and a catch-up leaves it there, where point reads
still found it: the partition ready, its old size and highest offset. The new primary counts its opening in the
workers' shared counters, and ``Freshness`` then opens the secondary's view again. Real processes, real RocksDB."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlmm.errors import ReplicaNotAvailable
from rlmm.records import TopicIdPartition
from rlmm.server.sharing import CommitCounter, Freshness
from rlmm.state.view import View

TP = TopicIdPartition(bytes(range(16)), "restarted", 0)
WRITER = """
import os, signal, sys
from rlmm.server.sharing import CommitCounter
from rlmm.state.view import View
from tests.grpc_support import fill_view, segment
from tests.test_secondary_after_primary_restart import TP

view_path, counter_path, step = sys.argv[1:]
counter = CommitCounter(counter_path)
view = View(view_path, on_commit=counter.bump)
counter.primary_opened()  # as rlmm.server.app does once its view is open
if step == "first":  # loads the partition, then dies with its batches in the log only
    fill_view(view, TP, [segment(TP, 0, 99)])
    os.kill(os.getpid(), signal.SIGKILL)
with view.batch() as batch:  # the new primary: not ready until caught up again, as the consumer does at start
    batch.mark_not_ready(TP)
fill_view(view, TP, [segment(TP, 100, 199)], ready=False)
view.flush()  # as at a clean shutdown
view.close()
"""


def run_writer(tmp_path: Path, step: str) -> int:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    command = [sys.executable, str(script), str(tmp_path / "view"), str(tmp_path / "commits"), step]
    return subprocess.run(command, cwd=Path(__file__).parents[1], timeout=60).returncode


def test_a_secondary_opens_its_view_again_once_its_primary_was_started_again(tmp_path) -> None:
    assert run_writer(tmp_path, "first") == -9
    counter = CommitCounter(tmp_path / "commits")
    seen, openings = counter.read(), counter.openings()
    with View(tmp_path / "view", secondary=tmp_path / "secondary") as reader:
        freshness = Freshness(reader, counter, seen, openings)
        freshness.ensure()
        assert reader.queries.is_ready(TP) and reader.queries.highest_offset_for_epoch(TP, 0) == 99
        assert run_writer(tmp_path, "again") == 0
        freshness.ensure()
        assert freshness.reopenings == 1
        assert not reader.queries.is_ready(TP)
        with pytest.raises(ReplicaNotAvailable):
            reader.queries.highest_offset_for_epoch(TP, 0)
        row = reader.queries.partition_row(TP)
        assert (row.last_applied_offset, row.segment_count, row.total_size) == (3, 2, 2 * 1099)
    counter.close()
