"""SIGKILL a process applying a generated stream at random points, restart it on the same view until
the stream is applied, and require the view to equal a clean replay: every query answer and every
key of every column family (``scripts/crash_loop.py``; run it with more kills as a benchmark)."""

from __future__ import annotations

import pytest

from scripts.crash_loop import run_crash_loop

KILLS = 50


@pytest.mark.slow
def test_view_survives_kills_anywhere() -> None:
    report = run_crash_loop(kills=KILLS, events=5_000, partitions=20, seed=11)
    assert report["kills"] >= KILLS
    assert report["mismatches"] == [], report["mismatches"]
    for result in report["rounds"]:
        assert result["segments"] > 0  # the stream did build state
        assert result["runs"] == result["kills"] + 1  # every kill was followed by a restart, the last run finished
