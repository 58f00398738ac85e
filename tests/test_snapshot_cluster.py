"""``rlmm snapshot build`` on a real Spark standalone cluster: a master and a worker started on loopback with
the ``spark-class`` script the pyspark package ships, the build run by the command line against
``spark://127.0.0.1:PORT``, from the topic and from an archive; each snapshot verifies equal to the service's view
of the same records (as tests/test_snapshot_spark.py requires of a ``local[2]`` build)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from consumers.broker import free_port
from tests.snapshot_support import live_view, workload_events
from tests.test_snapshot_spark import dense, produce

RLMM = [sys.executable, "-m", "rlmm.cli"]
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1"  # the quick compiler only, as snapshots/job.py runs local masters
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"

pytestmark = pytest.mark.slow  # a Spark master, a worker and two applications


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )  # its own group: stopped with the JVM it execs


def _wait_for(predicate, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout} s; its log ends with:\n{log.read_text()[-3000:]}", pytrace=False)
        time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[str]:
    """A standalone master and one worker (1 core, 1 GB) on loopback; yields the master URL."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_HOME": str(SPARK_CLASS.parent.parent),
        "SPARK_DAEMON_JAVA_OPTS": SHORT_LIVED_JVM,
    }
    port = free_port()
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        ],
        logs / "master.log",
        env,
    )
    worker = None
    try:
        _wait_for(lambda: _listening(port), 90, "the Spark master did not listen", logs / "master.log")
        url = f"spark://127.0.0.1:{port}"
        worker = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(logs / "work"),
            ],
            logs / "worker.log",
            env,
        )
        _wait_for(
            lambda: "Registering worker" in (logs / "master.log").read_text(),
            90,
            "no worker registered with the master",
            logs / "master.log",
        )
        yield url
    finally:
        for process in (worker, master):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def _rlmm(*args: str) -> dict:
    done = subprocess.run([*RLMM, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_build_on_a_standalone_cluster_equals_the_services_view(cluster, rlmm_config, kafka, tmp_path) -> None:
    events, tps = workload_events(3000, seed=41, metadata_partitions=3)
    events = dense(events)
    config = rlmm_config(num_partitions=3)
    produce(config, events)
    with live_view(events, tps, tmp_path / "view"):  # what the service makes of the topic's records
        pass
    topic = ["--bootstrap-server", kafka.bootstrap_servers, "--topic", config.topic]
    _rlmm("archive", *topic, "--out", str(tmp_path / "archive"), "--quiet")
    for source, out in ((topic, "from-topic"), (["--archive", str(tmp_path / "archive")], "from-archive")):
        jvms = [f"--conf=spark.{jvm}.extraJavaOptions={SHORT_LIVED_JVM}" for jvm in ("driver", "executor")]
        built = _rlmm("snapshot", "build", *source, "--out", str(tmp_path / out), "--master", cluster, *jvms, "--quiet")
        assert built["counts"]["segments"] > 0
        assert _rlmm("snapshot", "verify", str(tmp_path / out), "--view", str(tmp_path / "view"), "--json") == {
            "differences": 0,
            "details": [],
        }
