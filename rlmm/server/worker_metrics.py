"""One Prometheus scrape for every worker of ``rlmm serve --workers N``: the supervisor serves
``metrics_listen`` and, at each scrape, reads each worker's own exposition (served on a loopback port of
its own) and gives every sample a ``worker`` label (0: the primary, which alone reports the view and the
consumer), plus whether each worker answered and how often it was restarted."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class WorkerMetrics:
    worker: int
    metrics_port: int | None  # None while it does not serve
    restarts: int


class WorkersCollector(Collector):
    def __init__(self, workers: Callable[[], Sequence[WorkerMetrics]]) -> None:
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        up = GaugeMetricFamily("rlmm_worker_up", "1 when the worker answered this scrape", labels=["worker"])
        restarts = CounterMetricFamily(
            "rlmm_worker_restarts", "Times the supervisor restarted the worker after it died", labels=["worker"]
        )
        for worker in self.workers():
            label = str(worker.worker)
            exposition = None if worker.metrics_port is None else _scrape(worker.metrics_port)
            for family in text_string_to_metric_families(exposition or ""):
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                merged.samples += [s._replace(labels={**s.labels, "worker": label}) for s in family.samples]
            up.add_metric([label], exposition is not None)
            restarts.add_metric([label], worker.restarts)
        yield from families.values()
        yield up
        yield restarts


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=SCRAPE_TIMEOUT_S) as response:
            return response.read().decode()
    except OSError:  # the worker died or is restarting
        return None


def serve_workers_metrics(host: str, port: int, workers: Callable[[], Sequence[WorkerMetrics]]) -> int:
    """Expose every worker's ``/metrics`` on ``host:port``; returns the bound port."""
    registry = CollectorRegistry()
    registry.register(WorkersCollector(workers))
    server, _ = start_http_server(port, host, registry=registry)
    return server.server_address[1]
