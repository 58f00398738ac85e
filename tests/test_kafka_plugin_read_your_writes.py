"""Read-your-writes through the Kafka plugin: 8 Java threads add and finish segments of their own partitions and,
right after each future completes, read through the plugin (listings, lookup, highest offset)."""

from __future__ import annotations

import pytest

from tests.kafka_plugin_support import Harness, RlmmServe, built_plugin, new_tp, topic_name  # noqa: F401

THREADS, ITERATIONS = 8, 50


@pytest.fixture
def harness(built_plugin, tmp_path):  # noqa: F811
    with Harness(built_plugin, tmp_path / "harness.log") as jvm:
        yield jvm


def test_each_thread_reads_its_own_writes_at_once(harness: Harness, kafka, tmp_path) -> None:
    partitions = [new_tp(f"ryw-{t}", p) for p in range(2) for t in range(THREADS)]  # thread t: t and t + THREADS
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic_name(), 3) as server:
        harness.open("ryw", server.address, 4, write_timeout_ms=60_000)
        assert "error" not in harness.call("register", id="ryw", leaders=partitions)
        assert harness.call("wait_ready", id="ryw", partitions=partitions)["ready"]
        got = harness.call(
            "read_your_writes", timeout=600, id="ryw", partitions=partitions, threads=THREADS, iterations=ITERATIONS
        )
        harness.call("close", id="ryw")
    assert got["failure_count"] == 0, got["failures"]
    assert got["checks"] >= THREADS * ITERATIONS * 4, got
    assert got["violations"] == 0, got["violation_examples"]
    # the calls return at once, their futures complete once rlmm answered, on the plugin's threads: a call that blocked
    # until then would return its future complete every time (a thread of the caller's may be preempted between the
    # call and the check now and then: hence a majority, not all)
    assert got["futures"] == THREADS * ITERATIONS * 2, got
    assert got["futures_done_at_return"] < got["futures"] / 2, got
