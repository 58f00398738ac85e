"""``rlmm broker``: it reports the broker it started, and only that one, and fails when that broker dies."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path


def _run_broker(tmp_path: Path, *args: str) -> subprocess.Popen:
    """``rlmm broker``, its temporary files (Tansu's log) in the test's directory."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


def test_a_taken_port_is_an_error_not_someone_elses_broker(kafka, tmp_path) -> None:
    port = kafka.bootstrap_servers.rsplit(":", 1)[1]
    run = _run_broker(tmp_path, "--port", port)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 1 and out == ""
    assert f"port {port} is taken" in err and "Traceback" not in err


def test_the_command_fails_when_its_broker_dies(tmp_path) -> None:
    run = _run_broker(tmp_path)
    try:
        started = json.loads(run.stdout.readline())
        os.kill(started["pid"], signal.SIGKILL)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1
    assert f"the broker (pid {started['pid']}) exited with status -9" in err and "Traceback" not in err


def test_the_command_logs_as_json_when_asked(tmp_path) -> None:
    """Every command logs through one setup: ``--log-format json`` gives one JSON object per stderr line."""
    run = _run_broker(tmp_path, "--log-format", "json")
    try:
        started = json.loads(run.stdout.readline())
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    lines = [json.loads(line) for line in err.splitlines()]
    assert run.returncode == 0 and lines
    assert any(line["logger"] == "consumers.broker" and f"pid {started['pid']}" in line["message"] for line in lines)
    # ISO-8601 in UTC to the millisecond, as log pipelines parse it: 2026-11-28T05:10:46.123Z
    for line in lines:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"]), line
        assert datetime.fromisoformat(line["ts"]).utcoffset() == timedelta(0)
