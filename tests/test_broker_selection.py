"""Which broker the broker tests use: ``RLMM_TEST_KAFKA`` selects Tansu (default) or a testcontainers
Kafka. Without a Docker engine the testcontainers mode fails with a clear message; it never skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = "tests/test_broker_faults.py::test_the_topic_is_created_as_kafka_creates_it"


def docker_engine_answers() -> bool:
    try:
        import docker

        return bool(docker.from_env().ping())
    except Exception:
        return False


def run_probe(kind: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLMM_TEST_KAFKA": kind}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", PROBE],  # one test: no workers
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_testcontainers_mode_runs_or_fails_loudly() -> None:
    run = run_probe("testcontainers")
    if docker_engine_answers():
        assert run.returncode == 0, run.stdout
    else:
        assert run.returncode != 0
        assert "RLMM_TEST_KAFKA=testcontainers, but no Docker engine can be used here" in run.stdout
        assert "1 error" in run.stdout and "skipped" not in run.stdout


def test_an_unknown_broker_kind_fails() -> None:
    run = run_probe("redpanda")
    assert run.returncode != 0
    assert "RLMM_TEST_KAFKA='redpanda': expected one of tansu, testcontainers" in run.stdout
