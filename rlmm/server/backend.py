"""What the server serves: a view, and, when the server consumes Kafka, the manager that keeps that view
current and takes the writes. Without a manager the view is served as it is, read-only (a snapshot,
a benchmark, a view copied off a service)."""

from __future__ import annotations

from dataclasses import dataclass, field

from consumers.manager import RemoteLogMetadataManager
from rlmm.state import keys as K
from rlmm.state.queries import Queries
from rlmm.state.rows import PartitionRow
from rlmm.state.view import View
from rlmm.server.errors import NoKafkaError


@dataclass(frozen=True, slots=True)
class MetadataPartitionStatus:
    partition: int
    applied_offset: int | None
    end_offset: int | None
    lag: int | None


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

    @property
    def quarantined(self) -> int:
        return self.counters.get("quarantined", 0)


class Backend:
    def __init__(self, view: View, manager: RemoteLogMetadataManager | None = None) -> None:
        self.view = view
        self._manager = manager

    @property
    def queries(self) -> Queries:
        return self.view.queries

    @property
    def consumes(self) -> bool:
        return self._manager is not None

    def manager(self) -> RemoteLogMetadataManager:
        """The manager, for writes and registrations; a server without Kafka refuses them."""
        if self._manager is None:
            raise NoKafkaError("this server serves a view without Kafka (started without bootstrap servers): "
                               "it takes no writes nor registrations")
        return self._manager

    def serving(self) -> bool:
        """The view is open and, with Kafka, the consumer runs on a known-good topic."""
        return self._manager is None or self._manager.consumer.initialized

    def records_applied(self) -> int:
        """Records this process applied from the topic (0 without Kafka)."""
        return 0 if self._manager is None else self._manager.consumer.records_applied

    def status(self) -> Status:
        rows = [PartitionRow.unpack(raw) for _, raw in self.view.items(K.PARTITIONS)]
        live = [row for row in rows if row.assigned and not row.removed]
        applied = self.view.metadata_offsets()
        progress = {} if self._manager is None else self._manager.consumer.progress()
        partitions = [MetadataPartitionStatus(mp, applied.get(mp), getattr(progress.get(mp), "end", None),
                                              getattr(progress.get(mp), "lag", None))
                      for mp in sorted(applied.keys() | progress.keys())]
        failure = None if self._manager is None else self._manager.consumer.failure
        return Status(serving=self.serving(), consumes=self.consumes,
                      failure=None if failure is None else f"{type(failure).__name__}: {failure}",
                      metadata_partitions=partitions,
                      registered_partitions=sum(row.assigned for row in rows),
                      loading_partitions=sum(not row.ready for row in live),
                      segments=sum(row.segment_count for row in live), counters=self.view.counters())
