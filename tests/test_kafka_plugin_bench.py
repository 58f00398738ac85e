"""The Kafka plugin's benchmark runs: ``scripts/bench_kafka_plugin.py --smoke --json`` on the plugin and test classes
this session built (``built_plugin``: skipped outside CI where Java or Kafka's libs are missing, failed with CI=true)
and the session's broker. Its JSON must have the keys its docstring lists, every measure with sane values (rates and
latencies positive, the plugin's answers equal to Kafka's store's, no call failed) and the ratios computed from those
measures. Nothing is timed as pass or fail: the machine is shared."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from tests.bench_docs import documented_json_keys
from tests.kafka_plugin_support import REPO, built_plugin  # noqa: F401 (built_plugin: a fixture)

SCRIPT = REPO / "scripts" / "bench_kafka_plugin.py"
CASES = ("floor", "plugin", "kafka_store", "writes")
THREADS = ("1", "8")
SMOKE_EVENTS, PARTITIONS = 20_000, 100


pytestmark = pytest.mark.slow  # the plugin built, then its benchmark run


@pytest.fixture(scope="module")
def bench(built_plugin, kafka) -> dict:  # noqa: F811
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--smoke",
            "--json",
            "--plugin-dir",
            str(built_plugin.plugin_dir),
            "--tests-classes",
            str(built_plugin.tests_classes),
            "--kafka-libs",
            str(built_plugin.kafka_libs),
            "--bootstrap-server",
            kafka.bootstrap_servers,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 0, f"the benchmark failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_json_has_the_documented_keys(bench) -> None:
    assert set(bench) == documented_json_keys(SCRIPT)


def test_the_stream_and_the_answers(bench) -> None:
    assert bench["smoke"] is True
    assert bench["events"] == SMOKE_EVENTS and bench["user_partitions"] == PARTITIONS
    assert bench["query_partition_segments"] == SMOKE_EVENTS // 2 // PARTITIONS
    assert bench["threads"] == [1, 8] and bench["rounds"] == 1
    assert bench["jit_warm_up"]["calls"] > 0 and bench["jit_warm_up"]["floor_s"] > 0
    assert bench["answers"]["checked"] > PARTITIONS and bench["answers"]["differ"] == 0, bench["answers"]
    assert bench["rlmm_bootstrap_ms"] > 0 and bench["produce_s"] > 0


@pytest.mark.parametrize("case", CASES)
def test_every_case_measured(bench, case) -> None:
    by_threads = bench["cases"][case]
    assert sorted(by_threads) == sorted(THREADS)
    for threads, stats in by_threads.items():
        assert stats["threads"] == int(threads)
        assert stats["errors"] == 0, stats["first_error"]
        assert stats["calls"] > 0 and stats["seconds"] > 0
        assert stats["calls_per_s"] > 0
        # rounded to 0.1 by the benchmark: a loaded box's few writes a second are off by up to 0.05, more than 1 %
        assert stats["calls_per_s"] == pytest.approx(stats["calls"] / stats["seconds"], rel=0.01, abs=0.05)
        assert 0 < stats["p50_us"] <= stats["p99_us"] <= stats["max_us"] * 1.01
        assert stats["jvm_cpu_us_per_call"] >= 0 and stats["server_cpu_us_per_call"] >= 0
        split = stats["jvm_cpu_us_per_call_by_thread"]
        assert set(split) == {"callers", "event_loops", "executors", "other_threads", "jit_and_gc"}
        assert all(us >= 0 for us in split.values()) and split["callers"] > 0
        assert sum(split.values()) == pytest.approx(stats["jvm_cpu_us_per_call"], rel=0.1, abs=5)
        assert stats["windows"] == (bench["rounds"] if case in ("floor", "plugin") else 1)
        if case == "writes":
            for key in ("add_p50_us", "add_p99_us", "finish_p50_us", "finish_p99_us"):
                assert stats[key] > 0, key


def test_restart_and_kafkas_reread(bench) -> None:
    reread = bench["kafka_reread"]
    assert len(reread["passes_ms"]) == 2 and all(ms > 0 for ms in reread["passes_ms"])
    assert reread["cold_ms"] == reread["passes_ms"][0] and reread["warm_ms"] == reread["passes_ms"][1]
    assert len(reread["passes_jvm_cpu_ms"]) == len(reread["passes_gc_ms"]) == 2
    assert all(ms > 0 for ms in reread["passes_jvm_cpu_ms"]) and all(ms >= 0 for ms in reread["passes_gc_ms"])
    restart = bench["restart"]
    assert restart["partitions"] == PARTITIONS + 8  # and one empty partition per writing thread
    assert len(restart["runs"]) == 2 and restart["close_ms"] >= 0
    for run in restart["runs"]:
        parts = run["load_and_configure_ms"] + run["register_ms"] + run["until_ready_ms"]
        assert run["total_ms"] > 0 and parts == pytest.approx(run["total_ms"], abs=0.05)
        assert run["is_ready_rounds"] >= 1 and run["is_ready_sweep_again_ms"] > 0
        assert run["jvm_cpu_ms"] > 0 and run["server_cpu_ms"] >= 0
        assert set(run["jvm_cpu_ms_by_thread"]) == {
            "callers",
            "event_loops",
            "executors",
            "other_threads",
            "jit_and_gc",
        }
    assert restart["median_ms"] == pytest.approx(statistics.median(r["total_ms"] for r in restart["runs"]), abs=0.01)


def test_ratios_are_computed_from_the_measures(bench) -> None:
    cases, ratios = bench["cases"], bench["ratios"]
    plugin, floor, store = cases["plugin"], cases["floor"], cases["kafka_store"]
    restart, reread = bench["restart"]["median_ms"], bench["kafka_reread"]
    expected = {
        "plugin_p50_of_floor": plugin["1"]["p50_us"] / floor["1"]["p50_us"],
        "plugin_qps_of_floor": plugin["8"]["calls_per_s"] / floor["8"]["calls_per_s"],
        "plugin_p50_of_floor_8_threads": plugin["8"]["p50_us"] / floor["8"]["p50_us"],
        "plugin_qps_of_floor_1_thread": plugin["1"]["calls_per_s"] / floor["1"]["calls_per_s"],
        "plugin_p50_of_kafka_store": plugin["1"]["p50_us"] / store["1"]["p50_us"],
        "restart_of_kafka_reread_warm": restart / reread["warm_ms"],
        "restart_of_kafka_reread_cold": restart / reread["cold_ms"],
    }
    assert set(ratios) == set(expected)
    for name, value in expected.items():
        assert ratios[name] > 0
        assert ratios[name] == pytest.approx(value, rel=0.01, abs=0.001), name
    assert bench["targets"] == {"plugin_p50_of_floor": 1.5, "plugin_qps_of_floor": 0.8}
