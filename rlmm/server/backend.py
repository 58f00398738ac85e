"""What the server serves: a view, and, when the server consumes Kafka, the manager that keeps that view
current and takes the writes. Without a manager the view is served as it is, read-only (a snapshot,
a benchmark, a view copied off a service)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from consumers.ledger import NotReady, Progress
from consumers.manager import RemoteLogMetadataManager
from rlmm.errors import (
    ConsumerStoppedError,
    NoKafkaError,
    NotCaughtUpError,
    RlmmError,
    TopicChangedError,
    ViewDamaged,
    ViewError,
    ViewOfAnotherTopicError,
)
from rlmm.state import keys as K
from rlmm.state.queries import Queries
from rlmm.state.rows import PartitionRow
from rlmm.state.view import View
from rlmm.version import rlmm_version


@dataclass(frozen=True, slots=True)
class MetadataPartitionStatus:
    partition: int
    applied_offset: int | None
    end_offset: int | None
    lag: int | None
    not_ready_partitions: int = 0  # registered partitions of it that are not ready
    not_ready_reason: str = ""  # what they wait for
    not_ready_examples: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Status:
    serving: bool
    consumes: bool
    failure: str | None
    metadata_partitions: list[MetadataPartitionStatus]
    registered_partitions: int
    loading_partitions: int
    segments: int
    counters: dict[str, int] = field(default_factory=dict)
    version: str = field(default_factory=rlmm_version)

    @property
    def quarantined(self) -> int:
        return self.counters.get("quarantined", 0)

    @classmethod
    def unreadable(cls, failure: str, consumes: bool) -> Status:
        """A status without rows: what holds them (the view, the primary worker) could not be read."""
        return cls(
            serving=False,
            consumes=consumes,
            failure=failure,
            metadata_partitions=[],
            registered_partitions=0,
            loading_partitions=0,
            segments=0,
        )


def not_applied(view: View, positions: Mapping[int, int]) -> str | None:
    """The first of ``positions`` the view has not applied, described; None when it holds them all."""
    applied = view.metadata_offsets()
    for mp, offset in positions.items():
        if applied.get(mp, -1) < offset:
            return f"metadata partition {mp} offset {offset} (applied up to {applied.get(mp)})"
    return None


def consumer_stopped(failure: str) -> RlmmError:
    """What a read gets from a server whose consumer stopped for good (``failure``: "ERROR: MESSAGE"): after the
    metadata topic changed under the view, a refusal that only a reset or a restore lifts; else the server is
    down for good, and another may answer."""
    if failure.startswith(f"{TopicChangedError.__name__}: "):
        return ViewOfAnotherTopicError(failure)
    return ConsumerStoppedError(
        f"the metadata consumer stopped ({failure}): this server is NOT_SERVING and answers no more reads, which "
        f"would be stale"
    )


class Backend:
    def __init__(self, view: View, manager: RemoteLogMetadataManager | None = None) -> None:
        self.view = view
        self._manager = manager

    @property
    def queries(self) -> Queries:
        """The view's queries, while its answers can be trusted: not once RocksDB found the view damaged, nor
        once the consumer that kept it current has stopped (its answers would be silently stale)."""
        self._check_trusted()
        return self.view.queries

    def _check_trusted(self) -> None:
        fault = self.view.fault
        if fault is not None:
            raise ViewDamaged(
                f"the view is damaged ({fault}): this server is NOT_SERVING; restore the view from a "
                f"snapshot or rebuild it from the topic (rlmm serve --reset)"
            )
        failure = None if self._manager is None else self._manager.consumer.failure
        if failure is not None:
            raise consumer_stopped(f"{type(failure).__name__}: {failure}")

    def wait_applied(self, positions: Mapping[int, int], timeout: float) -> None:
        """Return once the view holds every position (metadata partition -> offset) a read must see; else raise
        ``NotCaughtUpError`` (after ``timeout`` s when a consumer may still get there)."""
        if self._manager is not None:
            self._manager.wait_positions(positions, timeout)
            return
        behind = not_applied(self.view, positions)
        if behind:
            raise NotCaughtUpError(f"this server serves a view without Kafka, which has not applied {behind}")

    @property
    def consumes(self) -> bool:
        """The consumer runs now (not without Kafka, nor once it stopped or failed)."""
        return self._manager is not None and self._manager.consumer.running

    def manager(self) -> RemoteLogMetadataManager:
        """The manager, for writes and registrations; a server without Kafka refuses them."""
        if self._manager is None:
            raise NoKafkaError(
                "this server serves a view without Kafka (started without bootstrap servers): "
                "it takes no writes nor registrations"
            )
        return self._manager

    def serving(self) -> bool:
        """The view is open and undamaged and, with Kafka, the consumer runs on a known-good topic and the
        producer can send."""
        return self.view.fault is None and (
            self._manager is None or (self._manager.consumer.initialized and self._producer_failure() is None)
        )

    def _producer_failure(self) -> str | None:
        producer = None if self._manager is None else self._manager.producer
        return None if producer is None else producer.failure

    def failure(self) -> str | None:
        """Why the server does not serve, or does not keep up: for good (the view is damaged, the consumer
        stopped), until the view takes writes again (a full disk), or while no Kafka broker answers."""
        consumer = None if self._manager is None else self._manager.consumer
        failure = self.view.fault or (None if consumer is None else consumer.failure)
        if failure is not None:
            return f"{type(failure).__name__}: {failure}"
        if consumer is not None and consumer.stopped:
            return "ServiceStoppedError: the metadata consumer was stopped (the server stops)"
        if consumer is not None and consumer.storage_failure is not None:
            return f"ViewStorageFailed: {consumer.storage_failure}"
        producer_failure = self._producer_failure()
        if producer_failure is not None:
            return f"ProducerRecoveringError: {producer_failure}"
        problem = None if consumer is None else consumer.kafka_problem
        return None if problem is None else f"KafkaUnreachable: {problem}"

    def producers_recreated(self) -> int:
        """Producers replaced after a fatal error."""
        producer = None if self._manager is None else self._manager.producer
        return 0 if producer is None else producer.recreated

    def view_write_failures(self) -> int:
        """Times the view refused a write and the consumer waited until it took writes again."""
        return 0 if self._manager is None else self._manager.consumer.storage_failures

    def client_restarts(self) -> int:
        """Kafka clients of the consumer replaced after a crash."""
        return 0 if self._manager is None else self._manager.consumer.client_restarts

    def topic_changes(self) -> dict[str, int]:
        """Changes of the metadata topic under the view that the consumer detected, by kind."""
        return {} if self._manager is None else dict(self._manager.consumer.topic_changes)

    def records_applied(self) -> int:
        """Records this process applied from the topic (0 without Kafka)."""
        return 0 if self._manager is None else self._manager.consumer.records_applied

    def status(self) -> Status:
        """What the view and the consumer say; a view that fails to read gives its failure and no rows."""
        consumer = None if self._manager is None else self._manager.consumer
        progress = {} if consumer is None else consumer.progress()
        waiting = {} if consumer is None else {waits.metadata_partition: waits for waits in consumer.not_ready()}
        consumes = self.consumes
        try:
            rows = [PartitionRow.unpack(raw) for _, raw in self.view.items(K.PARTITIONS)]
            applied = self.view.metadata_offsets()
            counters = self.view.counters()
        except ViewError as exc:
            return Status.unreadable(f"{type(exc).__name__}: {exc}", consumes)
        live = [row for row in rows if row.assigned and not row.removed]
        partitions = [
            _partition_status(mp, applied.get(mp), progress.get(mp), waiting.get(mp))
            for mp in sorted(applied.keys() | progress.keys() | waiting.keys())
        ]
        return Status(
            serving=self.serving(),
            consumes=consumes,
            failure=self.failure(),
            metadata_partitions=partitions,
            registered_partitions=sum(row.assigned for row in rows),
            loading_partitions=sum(not row.ready for row in live),
            segments=sum(row.segment_count for row in live),
            counters=counters,
        )


def _partition_status(
    mp: int, applied: int | None, progress: Progress | None, waits: NotReady | None
) -> MetadataPartitionStatus:
    end, lag = (None, None) if progress is None else (progress.end, progress.lag)
    if waits is None:
        return MetadataPartitionStatus(mp, applied, end, lag)
    return MetadataPartitionStatus(mp, applied, end, lag, len(waits.partitions), waits.reason, waits.examples)
