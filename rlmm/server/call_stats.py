"""Per-call counts and latencies without a lock on the call's path: each thread adds to tables of its own,
which a scrape sums into the same families prometheus_client's Counter and Histogram expose
(``<name>_total``, ``_bucket``, ``_count``, ``_sum``, ``_created``). A labelled Counter and Histogram take
a lock per value on every call, which the threads answering calls then contend for."""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# (method, code) -> [calls in each bucket (the last: above every bound)..., sum of seconds]
Table = dict[tuple[str, str], list[float]]


class CallStats(Collector):
    def __init__(self, calls: tuple[str, str], latency: tuple[str, str], buckets: Sequence[float]) -> None:
        """``calls`` and ``latency``: (name, help) of the counter by method and code and of the histogram by
        method; ``buckets``: the histogram's upper bounds, ascending."""
        self._calls, self._latency = calls, latency
        self._bounds = tuple(float(b) for b in buckets)
        self._local = threading.local()
        self._tables: list[Table] = []  # every thread's, kept after the thread ends
        self._created: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()  # registers a thread's table or a new (method, code)

    def observe(self, method: str, code: str, seconds: float) -> None:
        table: Table | None = getattr(self._local, "table", None)
        if table is None:
            table = self._local.table = {}
            with self._lock:
                self._tables.append(table)
        row = table.get((method, code))
        if row is None:
            with self._lock:  # before the row: a scrape finds the creation time of every row it sums
                self._created.setdefault((method, code), time.time())
            row = table[(method, code)] = [0.0] * (len(self._bounds) + 2)
        row[bisect_left(self._bounds, seconds)] += 1
        row[-1] += seconds

    def _totals(self) -> dict[tuple[str, str], list[float]]:
        totals: dict[tuple[str, str], list[float]] = {}
        with self._lock:
            tables = list(self._tables)
        for table in tables:
            for key, row in list(table.items()):
                _add(totals, key, row)
        return totals

    def collect(self) -> Iterator[Metric]:
        totals = self._totals()
        with self._lock:
            created = dict(self._created)
        keys = sorted(totals, key=lambda key: created[key])  # in the order they first came, as the library's
        calls = CounterMetricFamily(*self._calls, labels=["method", "code"])
        for key in keys:
            calls.add_metric(list(key), sum(totals[key][:-1]), created=created[key])
        yield calls
        methods: dict[str, list[float]] = {}
        for key in keys:
            _add(methods, key[0], totals[key])
        latency = HistogramMetricFamily(*self._latency, labels=["method"])
        for method, row in methods.items():
            cumulative, buckets = 0.0, []
            for bound, count in zip((*self._bounds, float("inf")), row[:-1]):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            latency.add_metric([method], buckets, row[-1])
        for method in methods:
            first = min(when for (m, _), when in created.items() if m == method)
            latency.add_sample(f"{self._latency[0]}_created", {"method": method}, first)
        yield latency


def _add(totals: dict, key: object, row: list[float]) -> None:
    """Add ``row`` to the row of ``key`` in ``totals``, element by element (a copy of it where there is none)."""
    total = totals.get(key)
    totals[key] = list(row) if total is None else [a + b for a, b in zip(total, row)]
