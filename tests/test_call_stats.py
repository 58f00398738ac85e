"""The servicer's per-call metrics (rlmm/server/call_stats.py) expose what prometheus_client's labelled
Counter and Histogram expose for the same calls, and lose no call to threads recording at once."""

from __future__ import annotations

import random
import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rlmm.server.metrics import LATENCY_BUCKETS, Metrics

CALLS = ("rlmm_grpc_requests", "gRPC calls handled, by method and status code")
LATENCY = ("rlmm_grpc_request_duration_seconds", "Time to handle a gRPC call, by method")


def _exposition(registry: CollectorRegistry) -> list[str]:
    """The call metrics' lines, creation times left out (they differ by when each was made) and sums to 12
    digits (added in another order)."""
    lines = []
    for line in generate_latest(registry).decode().splitlines():
        if "rlmm_grpc_request" not in line or line.startswith("#"):
            lines.append(line)
            continue
        sample, value = line.rsplit(" ", 1)
        lines.append(sample if "_created" in sample else f"{sample} {float(value):.12g}")
    return [line for line in lines if "rlmm_grpc_request" in line]


def test_the_same_exposition_as_prometheus_client() -> None:
    rng = random.Random(3)
    bounds = [*LATENCY_BUCKETS, 200]
    calls = [
        (rng.choice(["RemoteLogSegmentMetadata", "RemoteLogSize", "GetStatus"]), rng.choice(["OK", "NOT_FOUND"]), s)
        for s in [*LATENCY_BUCKETS, 0.0, *(rng.uniform(0, b) for b in bounds for _ in range(20))]
    ]
    metrics = Metrics()
    library = CollectorRegistry()
    counter = Counter(*CALLS, ["method", "code"], registry=library)
    histogram = Histogram(*LATENCY, ["method"], buckets=LATENCY_BUCKETS, registry=library)
    for method, code, seconds in calls:
        metrics.observe(method, code, seconds)
        counter.labels(method, code).inc()
        histogram.labels(method).observe(seconds)
    # the histograms' children in the order of their methods' first calls, as Metrics creates them
    assert sorted(_exposition(metrics.registry)) == sorted(_exposition(library))
    assert len(_exposition(metrics.registry)) == len(_exposition(library)) > 50


def test_threads_recording_at_once_lose_no_call() -> None:
    metrics = Metrics()
    per_thread, threads = 20_000, 8

    def record() -> None:
        for i in range(per_thread):
            metrics.observe("RemoteLogSegmentMetadata", "OK" if i % 3 else "NOT_FOUND", 0.0002)

    workers = [threading.Thread(target=record) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    text = generate_latest(metrics.registry).decode()
    ok = sum(1 for i in range(per_thread) if i % 3) * threads
    assert f'rlmm_grpc_requests_total{{code="OK",method="RemoteLogSegmentMetadata"}} {float(ok)}' in text
    total = float(per_thread * threads)
    assert f'rlmm_grpc_request_duration_seconds_count{{method="RemoteLogSegmentMetadata"}} {total}' in text
    bucket = 'rlmm_grpc_request_duration_seconds_bucket{le="0.00025",method="RemoteLogSegmentMetadata"}'
    assert f"{bucket} {total}" in text
