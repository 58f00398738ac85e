"""``rlmm demo`` end to end: a real broker, ``rlmm serve``, the workload, every query; the summary must
hold real numbers, not just exit code 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from rlmm import demo as demo_module
from rlmm.state.view import View

QUERY_KINDS = {
    "remote_log_segment_metadata",
    "batch_remote_log_segment_metadata",
    "highest_offset_for_epoch",
    "list_remote_log_segments",
    "list_epoch_segments",
    "remote_log_size",
    "remote_log_size_epoch",
    "next_segment_with_txn_index",
    "max_timestamp",
    "is_ready",
    "status",
    "health",
}


def test_demo_json_summary() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlmm.cli",
            "demo",
            "--events",
            "2000",
            "--partitions",
            "20",
            "--json",
            "--timeout",
            "45",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
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
    answers = {name: query["answer"] for name, query in summary["queries"].items()}
    listed = answers["list_remote_log_segments"]
    assert listed and all(s["topic"] == summary["query_partition"].split(":")[1] for s in listed)
    assert answers["remote_log_size"] == sum(s["segment_size_in_bytes"] for s in listed)  # real values agree
    found = answers["remote_log_segment_metadata"]
    assert found in listed and found["state"] == "COPY_SEGMENT_FINISHED"
    assert answers["batch_remote_log_segment_metadata"] == [found] * 10
    assert answers["is_ready"] is True and answers["health"] == "SERVING"
    assert answers["status"]["quarantined"] == summary["quarantined"]
    # the quarantine holds every undecodable record sent, the workload's and the one the demo adds, and no other
    assert summary["quarantined"] == summary["undecodable_sent"] > 1
    assert summary["partitions"] == 20
    # every partition the workload did not delete is ready (seed 1 at this size deletes none)
    assert summary["partitions_deleted"] == 0 and summary["partitions_ready"] == 20
    assert summary["health"] == "SERVING"


def test_the_summary_is_the_output(tmp_path) -> None:
    """For people too, the summary goes to stdout (it is what the command answers), the progress to stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "demo", "--events", "200", "--partitions", "5"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("rlmm demo: 201 of 201 records applied") and "max_timestamp" in done.stdout
    assert "rlmm demo:" not in done.stderr and "one round of every query" in done.stderr


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_demo_stops_everything() -> None:
    """After the demo, its broker and service processes are gone."""
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "demo", "--events", "200", "--partitions", "5", "--json"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert _gone(summary["broker"]["pid"]) and _gone(summary["service"]["pid"])


def test_health_command_against_a_server(tmp_path) -> None:
    """``rlmm health`` (the Docker HEALTHCHECK): 0 and SERVING on a running server, 1 when none answers."""
    View(tmp_path / "view").close()  # served read-only
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmm.cli",
            "serve",
            "--view",
            str(tmp_path / "view"),
            "--listen",
            "127.0.0.1:0",
            "--grace-s",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = json.loads(serve.stdout.readline())["port"]
        done = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "health", "--target", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (done.returncode, done.stdout.strip()) == (0, "SERVING")
    finally:
        serve.terminate()
        serve.wait(15)
    down = subprocess.run(
        [sys.executable, "-m", "rlmm.server.healthcheck", "--target", f"127.0.0.1:{port}", "--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert down.returncode == 1 and down.stdout.startswith("UNREACHABLE")


def _demo(*args: str, tmp: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    return subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", "demo", "--events", "200", "--partitions", "5", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_demo_keep_serves_queries_until_ctrl_c() -> None:
    demo = _demo("--keep")
    try:
        summary = json.loads(demo.stdout.readline())
        target = summary["service"]["address"]
        status = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "query", "--target", target, "status"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["quarantined"] == summary["quarantined"] >= 1
        ready = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "query", "--target", target, "ready", summary["query_partition"]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (ready.returncode, ready.stdout.strip()) == (0, "true")
        assert demo.poll() is None  # still running
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(60)
    assert demo.returncode == 0
    assert _gone(summary["broker"]["pid"]) and _gone(summary["service"]["pid"])


def test_demo_ctrl_c_while_working_stops_everything(tmp_path) -> None:
    demo = _demo("--events", "200000", tmp=tmp_path)  # far more than it can send before the signal
    deadline = time.monotonic() + 60
    children: list[int] = []
    while len(children) < 2 and time.monotonic() < deadline:  # until the broker and the service run
        time.sleep(0.5)
        children = [p.pid for p in psutil.Process(demo.pid).children(recursive=True)]
    time.sleep(2)  # the workload under way
    assert [p.name[:10] for p in tmp_path.iterdir()] == ["rlmm-demo-"]
    demo.send_signal(signal.SIGINT)
    time.sleep(0.2)
    demo.send_signal(signal.SIGINT)  # impatient: a second Ctrl-C while it stops the service
    demo.wait(60)
    stderr = demo.stderr.read()
    assert demo.returncode == 130, stderr[-2000:]
    assert "interrupted: broker and service stopped" in stderr
    assert len(children) >= 2 and all(_gone(pid) for pid in children)
    left = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    assert left == [], stderr[-2000:]  # its temporary directory is gone too


def test_a_demo_directory_that_stays_is_reported(tmp_path, monkeypatch, capsys) -> None:
    workdir = tmp_path / "rlmm-demo-y"
    (workdir / "view").mkdir(parents=True)
    monkeypatch.setattr(demo_module.shutil, "rmtree", lambda path, ignore_errors=False: None)
    demo_module._remove(workdir)
    assert f"could not remove {workdir}: view left" in capsys.readouterr().err


def test_a_ctrl_c_during_the_cleanup_waits_for_its_end() -> None:
    calls = []

    def interrupt(signum, _frame) -> None:
        calls.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    finished = []
    try:
        try:
            with demo_module._signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)  # the signal is delivered meanwhile, and held
                finished.append(True)
        except KeyboardInterrupt:
            pass
        assert finished == [True] and calls == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is interrupt  # the handler is back
    finally:
        signal.signal(signal.SIGINT, previous)
