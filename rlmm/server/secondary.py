"""A secondary worker of ``rlmm serve --workers N``: it serves the public port beside the primary, reads a
RocksDB secondary instance of the view (caught up whenever the primary committed, ``sharing.Freshness``),
and forwards writes, registrations and GetStatus to the primary over its private unix socket, after
checking the caller's write authorization itself. While the primary does not answer, it answers reads
UNAVAILABLE with a retry hint and its health is NOT_SERVING."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from consumers.watcher import Position
from rlmm.client import RlmmClient
from rlmm.errors import CallError, NotCaughtUpError, PrimaryUnavailableError, UnavailableError
from rlmm.records.model import PartitionDelete, SegmentMetadata, SegmentUpdate, TopicIdPartition
from rlmm.server.app import HEALTH_POLL_S, RlmmServer
from rlmm.server.backend import Backend, MetadataPartitionStatus, Status, consumer_stopped, not_applied
from rlmm.server.metrics import Metrics
from rlmm.server.sharing import CommitCounter, Freshness, RuntimeDir
from rlmm.settings import Settings
from rlmm.state.queries import Queries
from rlmm.state.view import View

log = logging.getLogger(__name__)
T = TypeVar("T")

HEALTH_TIMEOUT_S = 1.0
CALL_TIMEOUT_S = 30.0
READ_AFTER_POLL_S = 0.01  # how often a read that must see a position looks at the view again
# reconnect to a restarted primary within a poll or so (grpcio's backoff grows to 2 minutes otherwise)
RECONNECT = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500))


@dataclass(frozen=True, slots=True)
class PrimaryState:
    reachable: bool
    serving: bool
    consumes: bool
    failure: str | None


class Primary:
    """The primary worker as a secondary sees it: its health, polled, and a client for what is forwarded."""

    def __init__(self, socket: Path, kafka: bool, write_timeout: float) -> None:
        target = f"unix:{socket}"
        self.kafka = kafka
        self.client = RlmmClient(
            target, timeout=CALL_TIMEOUT_S, write_timeout=write_timeout, retry_for=0, options=RECONNECT
        )
        self._health = RlmmClient(target, timeout=HEALTH_TIMEOUT_S, retry_for=0, options=RECONNECT)
        self.state = PrimaryState(False, False, False, "PrimaryUnavailableError: not asked yet")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rlmm-primary", daemon=True)

    def start(self) -> Primary:
        self.poll()
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._health.close()
        self.client.close()

    def _watch(self) -> None:
        while not self._stopping.wait(HEALTH_POLL_S):
            self.poll()

    def poll(self) -> None:
        """Ask the primary's health (and, when it is not SERVING, its status: why not, and whether it consumes)."""
        try:
            serving = self._health.health() == "SERVING"
            status = None if serving else self._health.status()
        except CallError as exc:
            state = PrimaryState(
                False, False, False, f"PrimaryUnavailableError: the primary worker does not answer ({exc.code.name})"
            )
        else:
            if status is None:
                state = PrimaryState(True, True, self.kafka, None)
            else:
                state = PrimaryState(True, False, status["consumes"], status["failure"] or None)
        if state.reachable != self.state.reachable:
            log.log(
                logging.INFO if state.reachable else logging.WARNING,
                "the primary worker %s",
                "answers" if state.reachable else "does not answer",
                extra={"primary_reachable": state.reachable},
            )
        self.state = state


class PrimaryManager:
    """The manager's writes and registrations, done by the primary: its answers, errors included, come back
    as they are (``CallError``s, which the server answers with the primary's status)."""

    def __init__(self, client: RlmmClient) -> None:
        self._client = client

    def add_remote_log_segment_metadata(self, segment: SegmentMetadata) -> Position | None:
        return self._forward(self._client.add_remote_log_segment_metadata, segment)

    def update_remote_log_segment_metadata(self, update: SegmentUpdate) -> Position | None:
        return self._forward(self._client.update_remote_log_segment_metadata, update)

    def put_remote_partition_delete_metadata(self, delete: PartitionDelete) -> Position | None:
        return self._forward(self._client.put_remote_partition_delete_metadata, delete)

    def on_partition_leadership_changes(
        self,
        leaders: Iterable[TopicIdPartition],
        followers: Iterable[TopicIdPartition],
        broker_id: int | None = None,
        *,
        full: bool = False,
    ) -> None:
        self._forward(self._client.on_partition_leadership_changes, leaders, followers, broker_id, full=full)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition], broker_id: int | None = None) -> None:
        self._forward(self._client.on_stop_partitions, partitions, broker_id)

    @staticmethod
    def _forward(call: Callable[..., T], *args: object, **kwargs: object) -> T:
        try:
            return call(*args, **kwargs)
        except UnavailableError as exc:
            if exc.reason is not None:
                raise
            raise PrimaryUnavailableError(
                f"the primary worker does not answer ({exc.message}): the call may not have been done"
            ) from None


class SecondaryBackend(Backend):
    def __init__(self, view: View, primary: Primary, freshness: Freshness) -> None:
        super().__init__(view)
        self.primary = primary
        self.freshness = freshness
        self._writes = PrimaryManager(primary.client)

    @property
    def queries(self) -> Queries:
        """The view's queries, caught up with every batch the primary committed before this call."""
        self._check_trusted()
        self.freshness.ensure()
        return self.view.queries

    def _check_trusted(self) -> None:
        super()._check_trusted()
        state = self.primary.state
        if not state.reachable:
            raise PrimaryUnavailableError(f"{state.failure}: this worker answers no reads, which could be stale")
        if self.primary.kafka and not state.consumes:
            raise consumer_stopped(state.failure or "the primary worker gave no cause")

    def wait_applied(self, positions: Mapping[int, int], timeout: float) -> None:
        """Catch up until the view holds every position the primary has committed, within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_trusted()  # the primary's consumer stopped (or the primary is gone): no use waiting
            self.freshness.ensure()
            behind = not_applied(self.view, positions)
            if behind is None:
                return
            if time.monotonic() >= deadline:
                raise NotCaughtUpError(
                    f"this server has not applied {behind}, which the read must see (rlmm-read-after), "
                    f"within {timeout:.3g} s"
                )
            time.sleep(READ_AFTER_POLL_S)

    @property
    def consumes(self) -> bool:
        """The primary's consumer runs now."""
        return self.primary.kafka and self.primary.state.consumes

    def manager(self) -> PrimaryManager:  # type: ignore[override]  # the manager's writes, forwarded
        if not self.primary.kafka:
            return super().manager()  # raises NoKafkaError
        return self._writes

    def serving(self) -> bool:
        return self.view.fault is None and self.primary.state.serving

    def failure(self) -> str | None:
        fault = self.view.fault
        return f"{type(fault).__name__}: {fault}" if fault is not None else self.primary.state.failure

    def status(self) -> Status:
        """The primary's status (it consumes and writes the view)."""
        try:
            status = self.primary.client.status()
        except CallError as exc:
            return Status.unreadable(
                f"PrimaryUnavailableError: the primary worker does not answer ({exc.code.name})", consumes=False
            )
        return Status(
            serving=status["serving"] and self.view.fault is None,
            consumes=status["consumes"],
            failure=self.failure() if self.view.fault is not None else status["failure"] or None,
            metadata_partitions=[MetadataPartitionStatus(**mp) for mp in status["metadata_partitions"]],
            registered_partitions=status["registered_partitions"],
            loading_partitions=status["loading_partitions"],
            segments=status["segments"],
            counters=status["counters"],
            version=status["version"],
        )


class CatchUps(Collector):
    def __init__(self, freshness: Freshness) -> None:
        self.freshness = freshness

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "rlmm_view_catch_ups",
            "Times this secondary worker caught its view up with the primary's commits before a read",
            value=self.freshness.catch_ups,
        )
        yield CounterMetricFamily(
            "rlmm_view_reopenings",
            "Times this secondary worker opened its view again because the primary was started again",
            value=self.freshness.reopenings,
        )


def run_secondary(settings: Settings, runtime: RuntimeDir, worker: int, started: Callable[[dict], None]) -> None:
    """Serve as secondary worker ``worker`` until SIGTERM/SIGINT, then drain the calls in flight."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    config = settings.rlmm_config()
    write_timeout = CALL_TIMEOUT_S + (0 if config is None else config.consume_wait_ms / 1000)
    counter = CommitCounter(runtime.commits)
    seen, openings = counter.read(), counter.openings()
    with View(
        settings.view,
        secondary=runtime.secondary(worker),
        cache_mb=settings.cache_mb,
        row_cache_mb=settings.row_cache_mb,
        write_buffer_mb=settings.write_buffer_mb,
    ) as view:
        primary = Primary(runtime.primary_socket, config is not None, write_timeout).start()
        try:
            freshness = Freshness(view, counter, seen, openings)
            metrics = Metrics()
            metrics.registry.register(CatchUps(freshness))
            backend = SecondaryBackend(view, primary, freshness)
            server = RlmmServer(backend, settings, metrics, reuse_port=True).start()
            metrics_port = None if settings.metrics_listen is None else metrics.serve_http("127.0.0.1", 0)
            started({"event": "serving", "port": server.port, "metrics_port": metrics_port, "pid": os.getpid()})
            stop.wait()
            log.info("stopping: draining calls in flight", extra={"grace_s": settings.grace_s})
            server.stop()
        finally:
            primary.close()
            counter.close()
