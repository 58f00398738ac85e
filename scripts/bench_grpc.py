"""Benchmark of the gRPC service over loopback, clients in separate processes.

    python scripts/bench_grpc.py [--segments 1000000] [--workers 1,2] [--json] [--smoke]

A view with ``--segments`` COPY_SEGMENT_FINISHED segments (100 partitions, 10 leader epochs each, a
fifth with a transaction index) is built once with ``View.batch()`` (no broker) and kept in
``--view-dir``. ``rlmm serve`` serves it (read-only: no Kafka) in its own process. Measured:

* unary ``RemoteLogSegmentMetadata`` at random existing offsets: p50/p99 latency and calls/s with 1 and
  8 concurrent clients (``--clients``), each a process making one call at a time over its own 2,000 lookups,
  each of which it asked once before the measure starts (a server in its steady state, that has served these
  lookups before: ``unary_*``);
* the same calls at lookups never asked before (``unary_first_*``, the most clients): each brings an entry, maybe
  an epoch's start offsets, into the server's caches and builds its answer;
* the unary floor: the standard health service's ``Check`` (no view behind it) on the same server with
  the same clients, the most a unary call can do with grpcio on this machine (``unary_floor_*``), and the
  unary calls against it (``unary_qps_of_floor``, ``unary_p99_of_floor``, ``unary_first_qps_of_floor``);
* the server's CPU time (user + system, all its threads) per unary call while the clients measure (their
  warm-up excluded), for both, and their ratio (``*_server_cpu_us_per_call``, ``unary_server_cpu_of_floor``):
  on a machine whose cores the clients share, calls/s compare the server's share of the cores as much as
  its work, CPU per call the work;
* batch lookups/s with batches of ``--batch`` random lookups over the whole view (500
  distinct batches per client): ``ColumnarRemoteLogSegmentMetadata`` (the fastest call:
  ``batch_lookups_per_s``), ``BatchRemoteLogSegmentMetadata`` with found segments as Kafka's bytes
  (``batch_lookups_per_s_values``) and as messages (``batch_lookups_per_s_messages``); measured after a
  lookup of every segment, so that the server's caches are as warm as those of a server that has
  served fetchers for a while;
* ``ListRemoteLogSegments`` of a partition of 10,000 segments: time to receive the whole stream.

``--workers 1,2`` measures the unary calls (and their floor) once per server started with ``rlmm serve
--workers N``, the server's CPU summed over all its processes (``by_workers``), and their calls/s and CPU
per call relative to the first (``workers_qps_ratio``, ``workers_cpu_ratio``); the batch calls and the
stream are measured on the first. Clients and workers share the machine's cores.

Clients use the generated stubs directly, so what is measured is the server and the transport.

``--smoke``: 2,000 segments, 1 and 2 clients, 0.5 s runs, fewer and smaller batches: to show that the benchmark runs
(each run's client processes starting take most of it).

``--json`` prints one object with these keys (figures of unary calls by client count):

* ``segments``: segments in the view;
* ``smoke``: whether ``--smoke`` chose the sizes;
* ``cache_mb``, ``row_cache_mb``: the served view's block cache and row cache;
* ``unary_p50_ms``, ``unary_p99_ms``, ``unary_qps``, ``unary_server_cpu_us_per_call``: unary at lookups asked before;
* ``unary_first_p50_ms``, ``unary_first_p99_ms``, ``unary_first_qps``, ``unary_first_server_cpu_us_per_call``: unary
  at lookups never asked;
* ``unary_floor_p50_ms``, ``unary_floor_p99_ms``, ``unary_floor_qps``, ``unary_floor_server_cpu_us_per_call``: the
  health service's ``Check``;
* ``unary_qps_of_floor``, ``unary_p99_of_floor``, ``unary_server_cpu_of_floor``, ``unary_first_qps_of_floor``: unary
  against the floor;
* ``by_workers``: the unary figures above by ``--workers`` count (the first count's are the top-level ones);
* ``workers_qps_ratio``, ``workers_cpu_ratio``: each worker count's unary calls/s and CPU per call over the first's;
* ``batch_lookups_per_s``, ``batch_lookups_per_s_values``, ``batch_lookups_per_s_messages``: lookups/s of the batch
  calls, by the way they ask (``batch_modes``);
* ``batch_modes``: each batch key's way of asking;
* ``batch_size``, ``batch_clients``: lookups per batch call, clients making them;
* ``stream_10k_ms``, ``stream_segments``: ``ListRemoteLogSegments`` of partition 0 (10,000 segments at the
  default size): ms to receive it, segments received;
* ``targets``, ``met``: the targets and whether each was met (null: not measured, e.g. 8 clients);
* ``cpus``: the machine's CPUs.
"""

from __future__ import annotations

import argparse
import functools
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
from collections.abc import Callable
from pathlib import Path

import psutil

from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.records.serde import encode_value
from rlmm.state.view import View

PARTITIONS = 100
EPOCHS = 10
SEGMENT_OFFSETS = 1_000  # offsets per segment
BATCH_RECORDS = 20_000
# unary against the floor of the same run (issue 15), 8 clients; batch lookups
TARGETS = {"unary_qps_of_floor@8": 0.9, "unary_p99_of_floor@8": 1.25, "batch_lookups_per_s": 200_000}
# batch_calls: distinct batches per client, enough random lookups that caches see the whole view, not a few
# thousand segments asked again and again; lookups: per unary client, asked once before the measure (the
# first-lookups run's clients have ten times as many, more than one asks in a run: ~800/s)
FULL = {
    "segments": 1_000_000,
    "clients": "1,8",
    "seconds": 5.0,
    "lookups": 2_000,
    "batch": 1_000,
    "batch_calls": 500,
    "batch_clients": 2,
}
SMOKE = {
    "segments": 2_000,
    "clients": "1,2",
    "seconds": 0.5,
    "lookups": 200,
    "batch": 100,
    "batch_calls": 20,
    "batch_clients": 1,
}
FIRST_SEEDS = 1_000  # added to the first-lookups clients' seeds: lookups other than the warm clients'
# report key -> how batch lookups are asked: the fastest call the API offers first
BATCH_MODES = {
    "batch_lookups_per_s": "columns",
    "batch_lookups_per_s_values": "kafka_values",
    "batch_lookups_per_s_messages": "messages",
}


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
                    tp,
                    rng.randbytes(16),
                    start,
                    start + SEGMENT_OFFSETS - 1,
                    1,
                    1_700_000_000_000 + start,
                    1_700_000_000_000 + start,
                    ((j * EPOCHS // per_partition, start),),
                    1 << 20,
                    None,
                    SegmentState.COPY_SEGMENT_STARTED,
                    rng.random() >= 0.2,
                )
                mp = i % 50
                records.append((mp, encode_value(segment)))
                records.append(
                    (
                        mp,
                        encode_value(
                            SegmentUpdate(
                                tp,
                                segment.segment_id,
                                1,
                                segment.event_timestamp_ms,
                                None,
                                SegmentState.COPY_SEGMENT_FINISHED,
                            )
                        ),
                    )
                )
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


@functools.cache
def _partition_pb(i: int):
    from rlmm.client.convert import topic_id_partition_pb

    return topic_id_partition_pb(partition(i))


def _request(rng: random.Random, per_partition: int):
    from rlmm.v1 import service_pb2 as api

    i, j = rng.randrange(PARTITIONS), rng.randrange(per_partition)
    return api.RemoteLogSegmentMetadataRequest(
        topic_id_partition=_partition_pb(i),
        leader_epoch=j * EPOCHS // per_partition,
        offset=j * SEGMENT_OFFSETS + rng.randrange(SEGMENT_OFFSETS),
    )


def _stub(port: int, service=None):
    """A stub of ``service`` (default: rlmm's) on a new channel."""
    import grpc

    from rlmm.v1 import service_pb2_grpc

    stub = service or service_pb2_grpc.RemoteLogMetadataServiceStub
    return stub(grpc.insecure_channel(f"127.0.0.1:{port}"))


def unary_client(
    port: int, per_partition: int, seed: int, go, seconds: float, kind: str, lookups: int, results
) -> None:
    """One call at a time for ``seconds`` after ``go``; sends back every call's latency. ``kind``: "floor" calls
    the health service's Check; "warm" asks each of its ``lookups`` once before ``go``, then asks them again
    in turn; "first" asks lookups it never asked (ten times as many: more than it can ask in ``seconds``)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    rng = random.Random(seed + FIRST_SEEDS if kind == "first" else seed)
    if kind == "floor":
        call, requests = _stub(port, health_pb2_grpc.HealthStub).Check, [health_pb2.HealthCheckRequest()]
        assert call(requests[0]).status == health_pb2.HealthCheckResponse.SERVING
        warm_up = requests * 200
    else:
        count = lookups if kind == "warm" else 10 * lookups
        call, requests = _stub(port).RemoteLogSegmentMetadata, [_request(rng, per_partition) for _ in range(count)]
        warm_up = requests if kind == "warm" else [_request(rng, per_partition) for _ in range(200)]
    for request in warm_up:  # connect, and fill the caches as the kind asks
        answer = call(request)
        assert kind == "floor" or answer.HasField("remote_log_segment_metadata")
    go.wait()
    latencies = []
    clock = time.perf_counter
    end = clock() + seconds
    n = 0
    while (start := clock()) < end:
        call(requests[n % len(requests)])
        latencies.append(clock() - start)
        n += 1
    results.put(latencies)


def _columns(lookups):
    from rlmm.v1 import service_pb2 as api

    return api.ColumnarRemoteLogSegmentMetadataRequest(
        partitions=[_partition_pb(i) for i in range(PARTITIONS)],
        partition_indexes=[lookup.topic_id_partition.partition for lookup in lookups],
        leader_epochs=[lookup.leader_epoch for lookup in lookups],
        offsets=[lookup.offset for lookup in lookups],
    )


def batch_client(
    port: int, per_partition: int, seed: int, go, seconds: float, batch: int, calls: int, mode: str, results
) -> None:
    """``calls`` distinct batches of random lookups, one call at a time, asked as ``mode`` says (see
    ``BATCH_MODES``); every answer is received and parsed."""
    from rlmm.client.convert import segment_metadata_from_pb
    from rlmm.records.serde import decode_value
    from rlmm.v1 import service_pb2 as api

    rng = random.Random(seed)
    stub = _stub(port)
    lookups = [[_request(rng, per_partition) for _ in range(batch)] for _ in range(calls)]
    if mode == "columns":
        call, requests = stub.ColumnarRemoteLogSegmentMetadata, [_columns(one) for one in lookups]
        answers = lambda response: response.kafka_values  # noqa: E731
    else:
        call, answers = stub.BatchRemoteLogSegmentMetadata, lambda response: response.results  # noqa: E731
        requests = [
            api.BatchRemoteLogSegmentMetadataRequest(lookups=one, kafka_values=mode == "kafka_values")
            for one in lookups
        ]
    # every lookup finds its segment, the same in every mode
    messages = stub.BatchRemoteLogSegmentMetadata(api.BatchRemoteLogSegmentMetadataRequest(lookups=lookups[0]))
    expected = [segment_metadata_from_pb(r.remote_log_segment_metadata) for r in messages.results]
    found = answers(call(requests[0]))
    if mode == "columns":
        assert [decode_value(value) for value in found] == expected
    elif mode == "kafka_values":
        assert [decode_value(r.kafka_value) for r in found] == expected
    assert None not in expected and len(found) == batch
    go.wait()
    end = time.perf_counter() + seconds
    lookups_done = n = 0
    while time.perf_counter() < end:
        lookups_done += len(answers(call(requests[n % len(requests)])))
        n += 1
    results.put((lookups_done, time.perf_counter() - end + seconds))


def run_clients(target, count: int, args: tuple, at_go: Callable[[], object] | None = None) -> list:
    """Run ``count`` client processes; ``at_go`` is called once they have all warmed up, when they start measuring."""
    context = multiprocessing.get_context("spawn")
    go, results = context.Barrier(count + 1), context.Queue()  # passed once every client is ready
    processes = [
        context.Process(target=target, args=(*args[:2], seed, go, *args[2:], results)) for seed in range(count)
    ]
    for p in processes:
        p.start()
    go.wait(timeout=300)  # spawned interpreters import grpc, prepare their requests, connect and warm up
    if at_go is not None:
        at_go()
    out = [results.get(timeout=120) for _ in processes]
    for p in processes:
        p.join()
    return out


def warm_up(port: int, per_partition: int, batch: int) -> float:
    """Look every segment up once (in batches), as a server that has served for a while has: its block
    and row caches then hold the offset index. Returns the seconds it took."""
    from rlmm.v1 import service_pb2 as api

    stub = _stub(port)
    lookups = [
        api.RemoteLogSegmentMetadataRequest(
            topic_id_partition=_partition_pb(i), leader_epoch=j * EPOCHS // per_partition, offset=j * SEGMENT_OFFSETS
        )
        for i in range(PARTITIONS)
        for j in range(per_partition)
    ]
    started = time.perf_counter()
    for at in range(0, len(lookups), batch):
        request = api.BatchRemoteLogSegmentMetadataRequest(lookups=lookups[at : at + batch], kafka_values=True)
        assert all(r.HasField("kafka_value") for r in stub.BatchRemoteLogSegmentMetadata(request).results)
    return time.perf_counter() - started


def stream_ms(port: int, runs: int = 7) -> tuple[float, int]:
    """Median time to receive every segment of partition 0, and how many it has."""
    from rlmm.client.convert import topic_id_partition_pb
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


def serve(view_dir: Path, cache_mb: int, row_cache_mb: int, workers: int = 1) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "RLMM_CACHE_MB": str(cache_mb), "RLMM_ROW_CACHE_MB": str(row_cache_mb)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmm.cli",
            "serve",
            "--view",
            str(view_dir),
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "warning",
            "--workers",
            str(workers),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = json.loads(process.stdout.readline())
    return process, line["port"]


def server_cpu_s(server: subprocess.Popen) -> float:
    """CPU time (user + system) of the server: every thread of every process (the workers of --workers)."""
    root = psutil.Process(server.pid)
    return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])


UNARY_RUNS = {
    "first": "unary at lookups never asked",
    "warm": "unary at lookups asked before",
    "floor": "health Check (the floor)",
}


def measure_unary(
    server: subprocess.Popen, port: int, per_partition: int, sizes: dict, clients: tuple[int, ...], workers: int
) -> dict:
    """The unary runs, lookups never asked first (the server just started, the most clients), then the steady state
    and the floor."""
    report: dict = {}
    seconds = sizes["seconds"]
    runs = (("unary_first", "first", clients[-1:]), ("unary", "warm", clients), ("unary_floor", "floor", clients))
    for prefix, kind, client_counts in runs:
        for name in ("p50_ms", "p99_ms", "qps", "server_cpu_us_per_call"):
            report[f"{prefix}_{name}"] = {}
        for clients in client_counts:
            cpu_at_go: list[float] = []
            latencies = sorted(
                x
                for run in run_clients(
                    unary_client,
                    clients,
                    (port, per_partition, seconds, kind, sizes["lookups"]),
                    at_go=lambda: cpu_at_go.append(server_cpu_s(server)),
                )
                for x in run
            )
            cpu_spent = server_cpu_s(server) - cpu_at_go[0]
            key = str(clients)
            report[f"{prefix}_server_cpu_us_per_call"][key] = round(cpu_spent / len(latencies) * 1e6, 1)
            report[f"{prefix}_p50_ms"][key] = round(_percentile(latencies, 0.5) * 1000, 3)
            report[f"{prefix}_p99_ms"][key] = round(_percentile(latencies, 0.99) * 1000, 3)
            report[f"{prefix}_qps"][key] = round(len(latencies) / seconds)
            log(
                f"{workers} worker(s), {UNARY_RUNS[kind]}, {clients} client(s): {report[f'{prefix}_qps'][key]} "
                f"calls/s, p50 {report[f'{prefix}_p50_ms'][key]} ms, p99 {report[f'{prefix}_p99_ms'][key]} ms, "
                f"server CPU {report[f'{prefix}_server_cpu_us_per_call'][key]} us per call"
            )
    for ratio, measured, floor in (
        ("unary_server_cpu_of_floor", "unary_server_cpu_us_per_call", "unary_floor_server_cpu_us_per_call"),
        ("unary_qps_of_floor", "unary_qps", "unary_floor_qps"),
        ("unary_p99_of_floor", "unary_p99_ms", "unary_floor_p99_ms"),
        ("unary_first_qps_of_floor", "unary_first_qps", "unary_floor_qps"),
    ):
        report[ratio] = {c: round(value / report[floor][c], 2) for c, value in report[measured].items()}
    return report


def measure_batches(report: dict, port: int, per_partition: int, sizes: dict) -> None:
    batch, clients = sizes["batch"], sizes["batch_clients"]
    log(f"warmed up with a lookup of every segment in {warm_up(port, per_partition, batch):.0f} s")
    for key, mode in BATCH_MODES.items():
        runs = run_clients(
            batch_client, clients, (port, per_partition, sizes["seconds"], batch, sizes["batch_calls"], mode)
        )
        report[key] = round(sum(n for n, _ in runs) / max(t for _, t in runs))
        log(f"batch lookups, {mode}: {report[key]:,}/s ({clients} clients, {batch} per call)")
    report["batch_modes"] = BATCH_MODES
    report["batch_size"] = batch
    report["batch_clients"] = clients
    report["stream_10k_ms"], report["stream_segments"] = stream_ms(port)
    report["stream_10k_ms"] = round(report["stream_10k_ms"], 1)
    log(f"stream of {report['stream_segments']:,} segments: {report['stream_10k_ms']} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, help=f"[{FULL['segments']:,}; smoke {SMOKE['segments']:,}]")
    parser.add_argument(
        "--view-dir",
        type=Path,
        help="Where the view is kept between runs (default: a directory under the system's temporary directory).",
    )
    parser.add_argument("--rebuild", action="store_true", help="Build the view even when one is there.")
    parser.add_argument(
        "--clients",
        help=f"Comma-separated counts of concurrent unary clients [{FULL['clients']}; smoke {SMOKE['clients']}].",
    )
    parser.add_argument(
        "--seconds", type=float, help=f"Measuring time of each client run [{FULL['seconds']}; smoke {SMOKE['seconds']}]"
    )
    parser.add_argument("--batch", type=int, help=f"Lookups per batch call [{FULL['batch']:,}; smoke {SMOKE['batch']}]")
    parser.add_argument("--batch-clients", type=int, help=f"[{FULL['batch_clients']}; smoke {SMOKE['batch_clients']}]")
    parser.add_argument(
        "--cache-mb",
        type=int,
        default=256,
        help="The served view's block cache (the offset index of 1M segments is ~150 MB).",
    )
    parser.add_argument(
        "--row-cache-mb",
        type=int,
        default=320,
        help="The served view's row cache (the offset index entries of 1M segments take ~260 MB).",
    )
    parser.add_argument(
        "--workers",
        default="1",
        help="Comma-separated worker counts (rlmm serve --workers) to measure the unary calls with, e.g. 1,2.",
    )
    parser.add_argument("--smoke", action="store_true", help="A tiny run, seconds: does the benchmark run.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()
    sizes = dict(SMOKE if args.smoke else FULL)
    sizes.update({key: getattr(args, key) for key in sizes if getattr(args, key, None) is not None})
    segments = sizes["segments"]
    clients = tuple(sorted(int(n) for n in sizes["clients"].split(",")))
    per_partition = segments // PARTITIONS
    view_dir = args.view_dir or Path(tempfile.gettempdir()) / f"rlmm-bench-grpc-{segments}"
    stamp = view_dir / "BENCH_COMPLETE"
    if args.rebuild or not stamp.exists():
        log(f"building a view of {segments:,} segments in {view_dir} ...")
        started = time.perf_counter()
        build_view(view_dir, segments)
        stamp.write_text(str(segments))
        log(f"built in {time.perf_counter() - started:.0f} s")
    report: dict = {
        "segments": segments,
        "smoke": args.smoke,
        "cache_mb": args.cache_mb,
        "row_cache_mb": args.row_cache_mb,
    }
    workers = [int(n) for n in args.workers.split(",")]
    report["by_workers"] = {}
    for n in workers:
        server, port = serve(view_dir, args.cache_mb, args.row_cache_mb, n)
        try:
            unary = report["by_workers"][str(n)] = measure_unary(server, port, per_partition, sizes, clients, n)
            if n == workers[0]:
                report.update(unary)
                measure_batches(report, port, per_partition, sizes)
        finally:
            server.terminate()
            server.wait(60)
    first = report["by_workers"][str(workers[0])]
    report["workers_qps_ratio"] = {
        n: {c: round(qps / first["unary_qps"][c], 2) for c, qps in run["unary_qps"].items()}
        for n, run in report["by_workers"].items()
    }
    report["workers_cpu_ratio"] = {
        n: {
            c: round(us / first["unary_server_cpu_us_per_call"][c], 2)
            for c, us in run["unary_server_cpu_us_per_call"].items()
        }
        for n, run in report["by_workers"].items()
    }
    report["targets"] = TARGETS
    qps_of_floor, p99_of_floor = report["unary_qps_of_floor"].get("8"), report["unary_p99_of_floor"].get("8")
    report["met"] = {
        "unary_qps_of_floor@8": None if qps_of_floor is None else qps_of_floor >= TARGETS["unary_qps_of_floor@8"],
        "unary_p99_of_floor@8": None if p99_of_floor is None else p99_of_floor <= TARGETS["unary_p99_of_floor@8"],
        "batch_lookups_per_s": report["batch_lookups_per_s"] >= TARGETS["batch_lookups_per_s"],
    }
    report["cpus"] = os.cpu_count()
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
