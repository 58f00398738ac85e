"""Prometheus metrics: per-method calls and latency (recorded by the servicer), and, read at scrape
time, what the view and the consumer say (records applied, lag, quarantine, view size)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Info, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rlmm.errors import TopicChangedError
from rlmm.server.backend import Backend
from rlmm.server.call_stats import CallStats
from rlmm.version import rlmm_version

# sub-millisecond resolution: a unary call takes a fraction of a millisecond here
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes...
        PlatformCollector(registry=self.registry)  # python_info
        Info("rlmm_build", "rlmm's version", registry=self.registry).info({"version": rlmm_version()})
        self._calls = CallStats(
            ("rlmm_grpc_requests", "gRPC calls handled, by method and status code"),
            ("rlmm_grpc_request_duration_seconds", "Time to handle a gRPC call, by method"),
            LATENCY_BUCKETS,
        )
        self.registry.register(self._calls)
        self.lookups = Counter("rlmm_batch_lookups", "Lookups answered by the batch calls", registry=self.registry)
        # records one call: its method, status code and seconds (the stats' own method: no frame between)
        self.observe: Callable[[str, str, float], None] = self._calls.observe

    def watch(self, backend: Backend) -> None:
        self.registry.register(_ViewCollector(backend))

    def serve_http(self, host: str, port: int) -> int:
        """Expose ``/metrics`` over HTTP; returns the bound port (``port`` 0 picks a free one)."""
        server, _ = start_http_server(port, host, registry=self.registry)
        return server.server_address[1]


class _ViewCollector(Collector):
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def collect(self) -> Iterator:
        status = self.backend.status()
        yield GaugeMetricFamily("rlmm_serving", "1 when the health service reports SERVING", value=status.serving)
        yield CounterMetricFamily(
            "rlmm_consumed_records",
            "Records this process read from the metadata topic "
            "(its rate is the consumption rate; what became of them: rlmm_view_records)",
            value=self.backend.records_applied(),
        )
        results = CounterMetricFamily(
            "rlmm_view_records", "Records the view handled since it was created, by result", labels=["result"]
        )
        for name, count in sorted(status.counters.items()):
            results.add_metric([name], count)
        yield results
        yield GaugeMetricFamily(
            "rlmm_quarantined_records", "Records kept aside in the view's quarantine", value=status.quarantined
        )
        lag = GaugeMetricFamily(
            "rlmm_metadata_partition_lag", "Records behind the end offset, per metadata partition", labels=["partition"]
        )
        applied = GaugeMetricFamily(
            "rlmm_metadata_partition_applied_offset",
            "Last offset applied to the view, per metadata partition",
            labels=["partition"],
        )
        for mp in status.metadata_partitions:
            if mp.lag is not None:
                lag.add_metric([str(mp.partition)], mp.lag)
            if mp.applied_offset is not None:
                applied.add_metric([str(mp.partition)], mp.applied_offset)
        yield lag
        yield applied
        yield GaugeMetricFamily(
            "rlmm_view_damaged",
            "1 once RocksDB found the view's files damaged (the server then refuses reads)",
            value=self.backend.view.fault is not None,
        )
        yield CounterMetricFamily(
            "rlmm_view_write_failures",
            "Times the view refused a write (a full disk) and the consumer waited until it took writes again",
            value=self.backend.view_write_failures(),
        )
        yield CounterMetricFamily(
            "rlmm_producer_recreations",
            "Producers of the writes replaced after a fatal error (e.g. fenced after a broker stall)",
            value=self.backend.producers_recreated(),
        )
        yield CounterMetricFamily(
            "rlmm_kafka_client_restarts",
            "Kafka clients of the consumer replaced after a crash while the metadata topic stayed the view's",
            value=self.backend.client_restarts(),
        )
        changes = CounterMetricFamily(
            "rlmm_metadata_topic_changes_detected",
            "Changes of the metadata topic under the view that stopped the consumer, by kind",
            labels=["kind"],
        )
        detected = self.backend.topic_changes()
        for kind in TopicChangedError.KINDS:
            changes.add_metric([kind], detected.get(kind, 0))
        yield changes
        overlapped, held_off = self.backend.view.reads_run_again()
        yield CounterMetricFamily(
            "rlmm_view_reads_run_again",
            "Reads run again because a commit of the view landed while they read (each answers one committed state)",
            value=overlapped,
        )
        yield CounterMetricFamily(
            "rlmm_view_reads_holding_commits",
            "Reads that, overlapping commits again and again, ran holding the next commit off",
            value=held_off,
        )
        stages = CounterMetricFamily(
            "rlmm_view_apply_seconds",
            "Time the view's batches spent in each stage of the apply: apply (decoding records, the state machine), "
            "flush (the batch's rows into its stage), encode (RocksDB's write batch), write (RocksDB's write, WAL "
            "included), caches (the read caches brought up to date)",
            labels=["stage"],
        )
        for stage, seconds in self.backend.view.apply_seconds().items():
            stages.add_metric([stage], seconds)
        yield stages
        yield GaugeMetricFamily("rlmm_view_segments", "Segments in the view", value=status.segments)
        partitions = GaugeMetricFamily("rlmm_view_partitions", "Registered user partitions, by state", labels=["state"])
        partitions.add_metric(["registered"], status.registered_partitions)
        partitions.add_metric(["loading"], status.loading_partitions)
        yield partitions
        yield GaugeMetricFamily(
            "rlmm_view_disk_bytes", "Size of the view's files on disk", value=_disk_bytes(self.backend.view.path)
        )
        memory = GaugeMetricFamily(
            "rlmm_view_memory_bytes",
            "Memory RocksDB holds for the view, by kind: block_cache (with the table files' indexes and filters), "
            "memtables, table_readers (kept beside the cache by open table files)",
            labels=["kind"],
        )
        for kind, size in self.backend.view.memory().items():
            memory.add_metric([kind], size)
        yield memory


def _disk_bytes(path: Path) -> int:
    total = 0
    for entry in os.scandir(path):
        try:
            total += entry.stat().st_size if entry.is_file() else 0
        except FileNotFoundError:  # compaction removed it meanwhile
            pass
    return total
