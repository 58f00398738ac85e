"""Benchmark of the gRPC service over loopback, clients in separate processes.

    python scripts/bench_grpc.py [--segments 1000000] [--json]

A view with ``--segments`` COPY_SEGMENT_FINISHED segments (100 partitions, 10 leader epochs each, a
fifth with a transaction index) is built once with ``View.batch()`` (no broker) and kept in
``--view-dir``. ``rlmm serve`` serves it (read-only: no Kafka) in its own process. Measured:

* unary ``RemoteLogSegmentMetadata`` at random existing offsets: p50/p99 latency and calls/s with 1 and
  8 concurrent clients, each a process making one call at a time;
* ``BatchRemoteLogSegmentMetadata``: lookups/s with batches of ``--batch`` random lookups;
* ``ListRemoteLogSegments`` of a partition of 10,000 segments: time to receive the whole stream.

Clients use the generated stubs directly, so what is measured is the server and the transport.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.records.serde import encode_value
from rlmm.state.view import View

PARTITIONS = 100
EPOCHS = 10
SEGMENT_OFFSETS = 1_000  # offsets per segment
BATCH_RECORDS = 20_000
TARGETS = {"unary_p99_ms@8": 2.0, "unary_qps": 5_000, "batch_lookups_per_s": 200_000}


def partition(i: int) -> TopicIdPartition:
    return TopicIdPartition(random.Random(i).randbytes(16), f"bench-{i % 10}", i)


def build_view(path: Path, segments: int) -> None:
    """``segments`` finished segments over ``PARTITIONS`` partitions; segment j of a partition holds
    offsets [j * 1000, j * 1000 + 999] of leader epoch j * EPOCHS // per_partition."""
    per_partition = segments // PARTITIONS
    rng = random.Random(7)
    shutil.rmtree(path, ignore_errors=True)
    with View(path, write_buffer_mb=128) as view:
        tps = [partition(i) for i in range(PARTITIONS)]
        with view.batch() as batch:
            for tp in tps:
                batch.assign(tp)
        offsets = [0] * 50
        records = []
        for j in range(per_partition):
            for i, tp in enumerate(tps):
                start = j * SEGMENT_OFFSETS
                segment = SegmentMetadata(
                    tp, rng.randbytes(16), start, start + SEGMENT_OFFSETS - 1, 1, 1_700_000_000_000 + start,
                    1_700_000_000_000 + start, ((j * EPOCHS // per_partition, start),), 1 << 20, None,
                    SegmentState.COPY_SEGMENT_STARTED, rng.random() >= 0.2)
                mp = i % 50
                records.append((mp, encode_value(segment)))
                records.append((mp, encode_value(SegmentUpdate(tp, segment.segment_id, 1, segment.event_timestamp_ms,
                                                               None, SegmentState.COPY_SEGMENT_FINISHED))))
            if len(records) >= BATCH_RECORDS or j == per_partition - 1:
                with view.batch() as batch:
                    for mp, value in records:
                        batch.apply(mp, offsets[mp], value)
                        offsets[mp] += 1
                records = []
        with view.batch() as batch:
            for tp in tps:
                batch.mark_ready(tp)
        view.flush()


# ---- clients (each in a process of its own) ----------------------------------------------------------


def _request(rng: random.Random, per_partition: int):
    from rlmm.server.convert import topic_id_partition_pb
    from rlmm.v1 import service_pb2 as api

    i, j = rng.randrange(PARTITIONS), rng.randrange(per_partition)
    return api.RemoteLogSegmentMetadataRequest(topic_id_partition=topic_id_partition_pb(partition(i)),
                                               leader_epoch=j * EPOCHS // per_partition,
                                               offset=j * SEGMENT_OFFSETS + rng.randrange(SEGMENT_OFFSETS))


def _stub(port: int):
    import grpc

    from rlmm.v1 import service_pb2_grpc

    return service_pb2_grpc.RemoteLogMetadataServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


def unary_client(port: int, per_partition: int, seed: int, go, seconds: float, results) -> None:
    """One call at a time for ``seconds`` after ``go``; sends back every call's latency."""
    rng = random.Random(seed)
    stub = _stub(port)
    requests = [_request(rng, per_partition) for _ in range(2_000)]
    for request in requests[:200]:  # connect and warm up
        assert stub.RemoteLogSegmentMetadata(request).HasField("remote_log_segment_metadata")
    go.wait()
    latencies = []
    clock = time.perf_counter
    end = clock() + seconds
    n = 0
    while (start := clock()) < end:
        stub.RemoteLogSegmentMetadata(requests[n % len(requests)])
        latencies.append(clock() - start)
        n += 1
    results.put(latencies)


def batch_client(port: int, per_partition: int, seed: int, go, seconds: float, batch: int, results) -> None:
    from rlmm.v1 import service_pb2 as api

    rng = random.Random(seed)
    stub = _stub(port)
    requests = [api.BatchRemoteLogSegmentMetadataRequest(lookups=[_request(rng, per_partition) for _ in range(batch)])
                for _ in range(8)]
    answer = stub.BatchRemoteLogSegmentMetadata(requests[0])
    assert all(r.HasField("remote_log_segment_metadata") for r in answer.results)
    go.wait()
    end = time.perf_counter() + seconds
    lookups = n = 0
    while time.perf_counter() < end:
        lookups += len(stub.BatchRemoteLogSegmentMetadata(requests[n % len(requests)]).results)
        n += 1
    results.put((lookups, time.perf_counter() - end + seconds))


def run_clients(target, count: int, args: tuple) -> list:
    context = multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    processes = [context.Process(target=target, args=(*args[:2], seed, go, *args[2:], results))
                 for seed in range(count)]
    for p in processes:
        p.start()
    time.sleep(3.0)  # spawned interpreters import grpc, connect and warm up
    go.set()
    out = [results.get(timeout=120) for _ in processes]
    for p in processes:
        p.join()
    return out


def stream_ms(port: int, runs: int = 7) -> tuple[float, int]:
    """Median time to receive every segment of partition 0, and how many it has."""
    from rlmm.server.convert import topic_id_partition_pb
    from rlmm.v1 import service_pb2 as api

    stub = _stub(port)
    request = api.ListRemoteLogSegmentsRequest(topic_id_partition=topic_id_partition_pb(partition(0)))
    times, count = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        count = sum(len(chunk.remote_log_segment_metadata) for chunk in stub.ListRemoteLogSegments(request))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, count


# ---- the run --------------------------------------------------------------------------------------------


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def serve(view_dir: Path, cache_mb: int) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-m", "rlmm.cli", "serve", "--view", str(view_dir), "--listen",
                                "127.0.0.1:0", "--log-level", "warning"], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "RLMM_CACHE_MB": str(cache_mb)})
    line = json.loads(process.stdout.readline())
    return process, line["port"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--view-dir", type=Path, help="Where the view is kept between runs (default: a directory "
                                                      "under the system's temporary directory).")
    parser.add_argument("--rebuild", action="store_true", help="Build the view even when one is there.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Measuring time of each client run.")
    parser.add_argument("--batch", type=int, default=1_000, help="Lookups per batch call.")
    parser.add_argument("--batch-clients", type=int, default=2)
    parser.add_argument("--cache-mb", type=int, default=256, help="The served view's block cache (the offset "
                                                                  "index of 1M segments is ~150 MB).")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()
    per_partition = args.segments // PARTITIONS
    view_dir = args.view_dir or Path(tempfile.gettempdir()) / f"rlmm-bench-grpc-{args.segments}"
    stamp = view_dir / "BENCH_COMPLETE"
    if args.rebuild or not stamp.exists():
        log(f"building a view of {args.segments:,} segments in {view_dir} ...")
        started = time.perf_counter()
        build_view(view_dir, args.segments)
        stamp.write_text(str(args.segments))
        log(f"built in {time.perf_counter() - started:.0f} s")
    server, port = serve(view_dir, args.cache_mb)
    try:
        report: dict = {"segments": args.segments, "cache_mb": args.cache_mb, "unary_p50_ms": {}, "unary_p99_ms": {},
                        "unary_qps": {}}
        for clients in (1, 8):
            runs = run_clients(unary_client, clients, (port, per_partition, args.seconds))
            latencies = sorted(x for run in runs for x in run)
            report["unary_p50_ms"][str(clients)] = round(_percentile(latencies, 0.5) * 1000, 3)
            report["unary_p99_ms"][str(clients)] = round(_percentile(latencies, 0.99) * 1000, 3)
            report["unary_qps"][str(clients)] = round(len(latencies) / args.seconds)
            log(f"unary, {clients} client(s): {report['unary_qps'][str(clients)]} calls/s, "
                f"p50 {report['unary_p50_ms'][str(clients)]} ms, p99 {report['unary_p99_ms'][str(clients)]} ms")
        runs = run_clients(batch_client, args.batch_clients, (port, per_partition, args.seconds, args.batch))
        report["batch_lookups_per_s"] = round(sum(n for n, _ in runs) / max(t for _, t in runs))
        report["batch_size"] = args.batch
        report["batch_clients"] = args.batch_clients
        log(f"batch lookups: {report['batch_lookups_per_s']:,}/s ({args.batch_clients} clients, {args.batch} per call)")
        report["stream_10k_ms"], report["stream_segments"] = stream_ms(port)
        report["stream_10k_ms"] = round(report["stream_10k_ms"], 1)
        log(f"stream of {report['stream_segments']:,} segments: {report['stream_10k_ms']} ms")
    finally:
        server.terminate()
        server.wait(60)
    report["targets"] = TARGETS
    report["met"] = {"unary_p99_ms@8": report["unary_p99_ms"]["8"] <= TARGETS["unary_p99_ms@8"],
                     "unary_qps": max(report["unary_qps"].values()) >= TARGETS["unary_qps"],
                     "batch_lookups_per_s": report["batch_lookups_per_s"] >= TARGETS["batch_lookups_per_s"]}
    report["cpus"] = os.cpu_count()
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
