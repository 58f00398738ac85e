"""Every benchmark in scripts/ runs as a user runs it, at its ``--smoke`` size (``python scripts/bench_x.py --smoke
--json``), and prints one JSON object with exactly the keys its docstring lists. Nothing is timed as pass or fail:
these show that a benchmark still runs and still reports what it says it does. (bench_kafka_plugin.py's run, which
needs the plugin built, is tests/test_kafka_plugin_bench.py's.) A benchmark waiting for the service to be ready stops
with the consumer's cause when the consumer stops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from rlmm.errors import TopicChangedError
from rlmm.state.view import View
from scripts.bench_ingest import METADATA_PARTITIONS, ingest, produce_workload, wait_until_ready
from tests.bench_docs import documented_json_keys

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
RUNS = {  # id -> the script and its arguments besides --smoke --json
    "core": ("bench_core.py",),
    "core-uploads": ("bench_core.py", "--stream", "uploads", "--kafka"),  # Kafka's own store beside it, in a JVM
    "grpc": ("bench_grpc.py", "--view-dir", "{tmp}/view"),  # not a view kept in the system's temporary directory
    "ingest": ("bench_ingest.py",),
    "snapshot": ("bench_snapshot.py",),
}
TESTED_ELSEWHERE = {"bench_kafka_plugin.py"}


def test_every_benchmark_has_a_smoke_run() -> None:
    benchmarks = {path.name for path in SCRIPTS.glob("bench_*.py")}
    assert benchmarks == {run[0] for run in RUNS.values()} | TESTED_ELSEWHERE


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
def test_the_smoke_run_prints_the_documented_keys(run: tuple[str, ...], tmp_path: Path) -> None:
    script, *arguments = run
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--smoke", "--json", *(a.format(tmp=tmp_path) for a in arguments)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # as from anywhere: the script finds what it needs without the checkout's folder
        timeout=600,
    )
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["smoke"] is True
    assert set(result) == documented_json_keys(SCRIPTS / script)
    if "--kafka" in arguments:  # the ratios are of Kafka's figures from this run, on the same events
        assert result["kafka"]["measured"] == "this run" and len(result["kafka"]["apply_events_per_s"]) >= 1
        assert result["of_kafka"]["apply"][0] == round(
            result["apply_events_per_s"] / max(result["kafka"]["apply_events_per_s"]), 3
        )


def test_a_wait_for_readiness_fails_with_the_consumers_cause(kafka, rlmm_config, tmp_path: Path) -> None:
    """A consumer that stops (here: on a topic other than its view's) fails the benchmarks' wait with its cause, where
    the wait once ran out its 30 minutes."""
    built, other = rlmm_config(METADATA_PARTITIONS), rlmm_config(METADATA_PARTITIONS)
    for config in (built, other):
        ensure_topic(AdminClient(config.admin_config()), config)
    workload = produce_workload(kafka.bootstrap_servers, {built.topic: range(500), other.topic: range(500)}, 500, 1)
    ingest(tmp_path / "view", built, workload)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, other, workload.user_partitions()) as rlmm:
        with pytest.raises(RuntimeError, match="the metadata consumer stopped") as stopped:
            wait_until_ready(rlmm, 600)
    assert isinstance(stopped.value.__cause__, TopicChangedError)
