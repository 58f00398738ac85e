"""``rlmm demo`` end to end: a real broker, ``rlmm serve``, the workload, every query; the summary must
hold real numbers, not just exit code 0."""

from __future__ import annotations

import json
import subprocess
import sys

QUERY_KINDS = {"remote_log_segment_metadata", "batch_remote_log_segment_metadata", "highest_offset_for_epoch",
               "list_remote_log_segments", "list_epoch_segments", "remote_log_size", "remote_log_size_epoch",
               "next_segment_with_txn_index", "max_timestamp", "is_ready", "status", "health"}


def test_demo_json_summary() -> None:
    done = subprocess.run([sys.executable, "-m", "rlmm.cli", "demo", "--events", "2000", "--partitions", "20",
                           "--json", "--timeout", "45"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["events_sent"] == 2001  # the workload's 2000 and one undecodable record
    assert summary["events_applied"] == summary["events_sent"]
    assert summary["events_per_second"] > 0
    assert summary["counters"]["applied"] > 0
    assert set(summary["queries"]) == QUERY_KINDS
    for name, query in summary["queries"].items():
        assert "error" not in query, (name, query)
        assert query["ms"] is not None and query["ms"] > 0, (name, query)
    assert summary["queries"]["list_remote_log_segments"]["answer"] > 0
    assert summary["queries"]["remote_log_size"]["answer"] > 0
    assert summary["queries"]["is_ready"]["answer"] is True
    assert summary["quarantined"] >= 1
    assert summary["partitions"] == 20
    # every partition the workload did not delete is ready (seed 1 at this size deletes none)
    assert summary["partitions_deleted"] == 0 and summary["partitions_ready"] == 20
    assert summary["health"] == "SERVING"


def test_demo_stops_everything() -> None:
    """After the demo, its broker and service processes are gone."""
    import psutil

    done = subprocess.run([sys.executable, "-m", "rlmm.cli", "demo", "--events", "200", "--partitions", "5", "--json"],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    for pid in (summary["broker"]["pid"], summary["service"]["pid"]):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_health_command_against_a_server(tmp_path) -> None:
    """``rlmm health`` (the Docker HEALTHCHECK): 0 and SERVING on a running server, 1 when none answers."""
    serve = subprocess.Popen([sys.executable, "-m", "rlmm.cli", "serve", "--view", str(tmp_path / "view"),
                              "--listen", "127.0.0.1:0", "--grace-s", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        port = json.loads(serve.stdout.readline())["port"]
        done = subprocess.run([sys.executable, "-m", "rlmm.cli", "health", "--address", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stdout.strip()) == (0, "SERVING")
    finally:
        serve.terminate()
        serve.wait(15)
    down = subprocess.run([sys.executable, "-m", "rlmm.server.healthcheck", "--address", f"127.0.0.1:{port}",
                           "--timeout", "1"], capture_output=True, text=True, timeout=30)
    assert down.returncode == 1 and down.stdout.startswith("UNREACHABLE")
