"""rlmm's ``RemoteLogMetadataManager``: the view, the consumer that keeps it, and the writes, which
return once the service has applied them (read-your-writes), as Kafka's topic-based manager does."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout

from confluent_kafka import KafkaError, KafkaException

from consumers import view_state
from consumers.clients import ConfluentClients
from consumers.config import RlmmConfig
from consumers.consumer import MetadataConsumer
from consumers.ledger import NO_BROKER
from consumers.producer import MetadataProducer
from consumers.watcher import OffsetWatcher, Position
from rlmm.errors import (
    ConsumerStoppedError,
    InvalidMetadataError,
    NotCaughtUpError,
    NotInitializedError,
    ServiceStoppedError,
    TopicChangedError,
    ViewOfAnotherTopicError,
    WriteFailedError,
    WriteNotAppliedError,
    WriteTimeoutError,
)
from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.serde import encode_value
from rlmm.state.queries import Queries
from rlmm.state.view import View

log = logging.getLogger(__name__)

REGISTRATION_WAIT_S = 5.0  # how long a registration waits for the consumer to carry it out


class RemoteLogMetadataManager:
    """``with RemoteLogMetadataManager(view, config, partitions) as rlmm:`` runs the consumer; reads go to
    ``rlmm.queries`` (the view), writes through the three Kafka calls below."""

    def __init__(self, view: View, config: RlmmConfig, partitions: Iterable[TopicIdPartition] = ()) -> None:
        self.view = view
        self.config = config = with_view_partition_count(config, view)
        self.watcher = OffsetWatcher()
        self.consumer = MetadataConsumer(view, config, self.watcher, ConfluentClients(config), partitions)
        self._producer: MetadataProducer | None = None

    @property
    def queries(self) -> Queries:
        return self.view.queries

    def start(self) -> RemoteLogMetadataManager:
        self.consumer.start()
        self._producer = MetadataProducer(self.config)  # connects in the background, ready for the first write
        return self

    def close(self) -> None:
        self.consumer.stop()
        if self._producer is not None:
            self._producer.close()
        self.watcher.fail_all(ServiceStoppedError("the metadata manager was closed"))

    def __enter__(self) -> RemoteLogMetadataManager:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- partition lifecycle ----------------------------------------------------------------------

    # Registrations are kept per broker (``broker_id``, None: a caller without one): a partition is followed
    # while any holder has it registered, so that brokers can share the service.

    def on_partition_leadership_changes(
        self,
        leaders: Iterable[TopicIdPartition],
        followers: Iterable[TopicIdPartition],
        broker_id: int | None = None,
        *,
        full: bool = False,
    ) -> None:
        """``full``: these are every partition the broker follows; its registrations of others end. Returns once
        the consumer registered them (reads then answer that they load, as Kafka's), or after
        ``REGISTRATION_WAIT_S`` while it cannot yet (the broker not reached): they stay queued."""
        registered = self.consumer.register([*leaders, *followers], _holder(broker_id), full=full)
        self.consumer.wait_done(registered, REGISTRATION_WAIT_S)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition], broker_id: int | None = None) -> None:
        self.consumer.wait_done(self.consumer.unregister(partitions, _holder(broker_id)), REGISTRATION_WAIT_S)

    # ---- writes -------------------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, segment: SegmentMetadata) -> Position:
        if not isinstance(segment, SegmentMetadata):
            raise TypeError(f"expected SegmentMetadata, got {type(segment).__name__}")
        if segment.state is not SegmentState.COPY_SEGMENT_STARTED:
            raise InvalidMetadataError(
                f"Given remoteLogSegmentMetadata should have state as COPY_SEGMENT_STARTED "
                f"but it contains state as: {segment.state.name}"
            )
        return self._store(segment)

    def update_remote_log_segment_metadata(self, update: SegmentUpdate) -> Position:
        if not isinstance(update, SegmentUpdate):
            raise TypeError(f"expected SegmentUpdate, got {type(update).__name__}")
        if update.state is SegmentState.COPY_SEGMENT_STARTED:
            raise InvalidMetadataError(
                "Given remoteLogSegmentMetadataUpdate should not have the state as: COPY_SEGMENT_STARTED"
            )
        return self._store(update)

    def put_remote_partition_delete_metadata(self, delete: PartitionDelete) -> Position:
        if not isinstance(delete, PartitionDelete):
            raise TypeError(f"expected PartitionDelete, got {type(delete).__name__}")
        return self._store(delete)

    def _store(self, record: RemoteLogMetadata) -> Position:
        """Write the record and wait until the view applied it; returns where it landed."""
        failure = self.consumer.failure
        if isinstance(failure, TopicChangedError):  # for good, unlike a topic not ready yet
            raise ViewOfAnotherTopicError(f"{type(failure).__name__}: {failure}")
        if not self.consumer.initialized:
            raise NotInitializedError(
                f"the metadata topic {self.config.topic!r} is not ready: "
                f"{self.consumer.failure or 'the broker has not been reached yet'}"
            )
        value = encode_value(record)  # refuses values that do not fit Kafka's wire types
        mp = self.consumer.metadata_partition_of(record.tp)
        deadline = time.monotonic() + self.config.consume_wait_ms / 1000
        expected = self.watcher.applied().get(mp, 0)  # a new record lands at or after what the view applied
        sent = self._producer.send(mp, value)
        try:
            offset = sent.result(timeout=self.config.consume_wait_ms / 1000)
        except FutureTimeout:
            raise WriteTimeoutError(
                f"the broker did not acknowledge the record for {self.config.topic}-{mp} within "
                f"remote.log.metadata.consume.wait.ms ({self.config.consume_wait_ms} ms); it may still be "
                f"written and applied later"
            ) from None
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError._MSG_TIMED_OUT or error.retriable():
                raise WriteTimeoutError(
                    f"the record for {self.config.topic}-{mp} was not acknowledged ({error}); "
                    f"it may still have been written and be applied later"
                ) from exc
            raise WriteFailedError(f"the broker refused the record for {self.config.topic}-{mp}: {error}") from exc
        if offset < expected:  # the view holds another history at this offset: never report it applied
            raise TopicChangedError(
                "offsets_backwards",
                self.config.topic,
                f"the record for metadata partition {mp} was written at offset {offset}, below "
                f"the next offset {expected} the view expects",
            )
        try:
            applied = self._applied_within(mp, offset, deadline - time.monotonic())
        except ServiceStoppedError:  # not "try again": the record is in the topic, and a retry would write it twice
            raise WriteTimeoutError(
                f"record {self.config.topic}-{mp}@{offset} was written, but this service stopped before it applied "
                f"it; it is applied when the topic is consumed again"
            ) from None
        except WriteNotAppliedError:
            if _removes_partition(record):  # removed already, as asked (a record written again: a retried write)
                return Position(mp, offset)
            raise
        if not applied:
            raise WriteTimeoutError(
                f"record {self.config.topic}-{mp}@{offset} was written but not applied within "
                f"remote.log.metadata.consume.wait.ms ({self.config.consume_wait_ms} ms); it may still be applied "
                f"later; {self._lag_summary(mp)}"
            )
        return Position(mp, offset)

    def wait_positions(self, positions: Mapping[int, int], timeout: float) -> None:
        """Return once the view has applied every position (metadata partition -> offset), a record that could not
        be applied included; else raise ``NotCaughtUpError`` after ``timeout`` s, or ``ConsumerStoppedError`` as soon
        as the consumer stopped for good before."""
        deadline = time.monotonic() + timeout
        for mp, offset in positions.items():
            try:
                applied = self._applied_within(mp, offset, deadline - time.monotonic())
            except WriteNotAppliedError:
                continue
            except ServiceStoppedError:
                raise
            except Exception as exc:  # the consumer's failure, which ended every wait
                raise ConsumerStoppedError(
                    f"the metadata consumer stopped ({exc}) before this server applied {self.config.topic}-{mp}@"
                    f"{offset}, which the read must see (rlmm-read-after)"
                ) from exc
            if not applied:
                raise NotCaughtUpError(
                    f"this server has not applied {self.config.topic}-{mp}@{offset}, which the read must see "
                    f"(rlmm-read-after), within {timeout:.3g} s; {self._lag_summary(mp)}"
                )

    def wait_applied(self, metadata_partition: int, offset: int, timeout: float) -> None:
        """Return once the view has applied ``offset`` of ``metadata_partition`` (or found that its record cannot
        be applied: a write of it fails), else raise ``WriteTimeoutError`` after ``timeout`` s."""
        try:
            applied = self._applied_within(metadata_partition, offset, timeout)
        except WriteNotAppliedError:
            return
        if not applied:
            raise WriteTimeoutError(
                f"record {self.config.topic}-{metadata_partition}@{offset} not applied within "
                f"{timeout} s; it may still be applied later; "
                f"{self._lag_summary(metadata_partition)}"
            )

    def _applied_within(self, metadata_partition: int, offset: int, timeout: float) -> bool:
        future: Future[None] = self.watcher.wait_for(metadata_partition, offset)
        try:
            future.result(max(0.0, timeout))
        except (FutureTimeout, CancelledError):
            future.cancel()
            return False
        return True

    def _lag_summary(self, mp: int) -> str:
        progress = self.consumer.progress().get(mp)
        if progress is None:
            return f"metadata partition {mp} is not consumed by this service (no registered partition uses it)"
        return f"consumer at offset {progress.position} of {progress.end} (lag {progress.lag})"

    # ---- operations ---------------------------------------------------------------------------------

    @property
    def producer(self) -> MetadataProducer | None:
        """The producer of the writes (None before ``start``): its ``failure`` and ``recreated`` count."""
        return self._producer

    def status(self) -> dict:
        return {
            **self.consumer.status(),
            "counters": self.view.counters(),
            "producer_failure": None if self._producer is None else self._producer.failure,
        }


def with_view_partition_count(config: RlmmConfig, view: View) -> RlmmConfig:
    """``config``, with the metadata topic's partition count the view records where the configuration does not set
    one (a view restored from a snapshot of a topic of 10 partitions is consumed with 10, not the default 50). A count
    that is set and differs is left for the consumer to refuse."""
    recorded = view_state.num_partitions_of(view.consumer_state())
    if config.num_partitions_given or recorded is None or recorded == config.num_partitions:
        return config
    log.info(
        "the view records a metadata topic of %d partitions: consuming with remote.log.metadata.topic.num.partitions "
        "= %d (not set)",
        recorded,
        recorded,
    )
    return dataclasses.replace(config, num_partitions=recorded)


def _holder(broker_id: int | None) -> int:
    return NO_BROKER if broker_id is None else broker_id


def _removes_partition(record: RemoteLogMetadata) -> bool:
    """A DELETE_PARTITION_FINISHED, which applying refuses only where the partition's metadata is removed already
    (Kafka's store throws; Kafka's writer, which waits for the consumer's offset alone, returns)."""
    return isinstance(record, PartitionDelete) and record.state is PartitionDeleteState.DELETE_PARTITION_FINISHED
