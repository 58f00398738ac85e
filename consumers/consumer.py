"""The metadata-topic consumer: Kafka's ``ConsumerTask`` over the durable view.

* No consumer group: ``assign()`` of the metadata partitions that hold the registered user partitions
  (or of all of them), each started at the offset after the one the view last applied. History is
  never read again on a restart. A newly registered user partition is loaded as Kafka loads it: its
  metadata partition is read again from the beginning (records of partitions already loaded are
  skipped by the state machine, which knows each partition's last applied offset).
* Each polled batch is decoded and applied in one atomic view write, which also stores the consumed
  offsets; the offset watcher is told after the commit (read-your-writes).
* Readiness is Kafka's rule: a registered partition becomes ready once its metadata partition is
  applied up to the end offset seen at registration. That end offset is the high watermark of the
  first fetch after the (re)assignment (Tansu's ListOffsets answer is wrong, its fetch high watermark
  is right; on Kafka both are right). A restarted consumer withdraws readiness until it has caught up.
* Registration changes, holds and the Kafka client are handled by the consumer's own thread only.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from consumers.config import RlmmConfig
from consumers.topic import ensure_topic
from consumers.watcher import OffsetWatcher
from rlmm.records.model import TopicIdPartition
from rlmm.records.partitioner import metadata_partition
from rlmm.state.view import View

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 0.1  # longest wait for records before registration requests are looked at again
END_REFRESH_S = 0.5  # how often idle partitions' end offsets are read from the client's fetch state
MAX_RETRY_WAIT_S = 5.0
_EOF = KafkaError._PARTITION_EOF


@dataclass(frozen=True)
class Progress:
    """Where the consumer stands in one metadata partition."""

    position: int | None  # next offset to read (None: not known until the first fetch after a rewind)
    end: int | None  # end offset (high watermark) the broker last reported

    @property
    def lag(self) -> int | None:
        return None if self.position is None or self.end is None else max(0, self.end - self.position)


class MetadataConsumer:
    def __init__(self, view: View, config: RlmmConfig, watcher: OffsetWatcher,
                 partitions: Iterable[TopicIdPartition] = ()) -> None:
        self.view = view
        self.config = config
        self.watcher = watcher
        self.failure: BaseException | None = None
        self.records_applied = 0  # records applied (committed) by this process
        self.initial_positions: dict[int, int] = {}  # next offset per metadata partition when this process started
        self._initial = list(partitions)
        self._requests: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._initialized = threading.Event()
        self._ready_changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rlmm-consumer", daemon=True)
        self._client: Consumer | None = None
        self._broker: tuple[int, float | None] = (0, None)  # brokers up, ms since the last response
        # state of the consumer thread
        self._registered: dict[TopicIdPartition, int] = {}  # user partition -> its metadata partition
        self._pending: dict[int, dict[TopicIdPartition, int | None]] = {}  # mp -> not ready -> end offset to reach
        self._rewind: set[int] = set()  # metadata partitions to read again from the beginning
        self._assigned: set[int] = set()
        self._positions: dict[int, int | None] = {}
        self._ends: dict[int, int] = {}
        self._limits: dict[int, int] = {}
        self._held: set[int] = set()
        self._ends_refreshed = 0.0

    # ---- control (any thread) ---------------------------------------------------------------------

    def start(self) -> None:
        """Withdraw the readiness a previous run left in the view, register the initial partitions, then
        consume in the background (the broker need not be reachable yet)."""
        self._load_registry()
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def initialized(self) -> bool:
        """The topic is known good and the client runs (Kafka's ``isInitialized``)."""
        return self._initialized.is_set() and self.failure is None and not self._stopping.is_set()

    def wait_initialized(self, timeout: float | None = None) -> bool:
        return self._initialized.wait(timeout)

    def register(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Start following these user partitions (Kafka's ``onPartitionLeadershipChanges``)."""
        self._requests.put(("register", list(partitions)))

    def unregister(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop following them and forget their metadata (Kafka's ``onStopPartitions``)."""
        self._requests.put(("unregister", list(partitions)))

    def hold(self, limits: Mapping[int, int] | None) -> None:
        """Apply each listed metadata partition only below the given offset, and hold there; ``None``
        releases every hold. For a view at an exact position (a snapshot, a test)."""
        self._requests.put(("hold", dict(limits or {})))

    def metadata_partition_of(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp.topic_id, tp.partition, self.config.num_partitions)

    def progress(self) -> dict[int, Progress]:
        positions, ends = dict(self._positions), dict(self._ends)
        return {mp: Progress(positions.get(mp), ends.get(mp)) for mp in sorted(positions)}

    def wait_ready(self, partitions: Iterable[TopicIdPartition], timeout: float) -> bool:
        """Wait until every one of ``partitions`` is ready; False on timeout."""
        wanted = list(partitions)
        with self._ready_changed:
            return self._ready_changed.wait_for(lambda: all(map(self.view.queries.is_ready, wanted)), timeout)

    def status(self) -> dict:
        progress = self.progress()
        lags = [p.lag for p in progress.values()]
        brokers_up, idle_ms = self._broker
        return {
            "initialized": self.initialized,
            "failure": None if self.failure is None else repr(self.failure),
            "brokers_up": brokers_up,
            "ms_since_broker_response": idle_ms,
            "lag": None if None in lags else sum(lags),
            "metadata_partitions": {str(mp): {"position": p.position, "end": p.end, "lag": p.lag}
                                    for mp, p in progress.items()},
            "pending_partitions": sum(len(v) for v in dict(self._pending).values()),
            "records_applied": self.records_applied,
        }

    # ---- the consumer thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if not self._initialize():
                return
            self._client = Consumer({**self.config.consumer_config(), "error_cb": self._on_error,
                                     "stats_cb": self._on_stats, "logger": logging.getLogger("consumers.kafka")})
            self._reassign()
            self._initialized.set()
            while not self._stopping.is_set():
                self._serve_requests()
                self._poll()
        except BaseException as exc:
            self.failure = exc
            log.error("the metadata consumer stopped: %s", exc, exc_info=not isinstance(exc, KafkaException))
            self.watcher.fail_all(exc)
        finally:
            if self._client is not None:
                self._client.close()
            with self._ready_changed:
                self._ready_changed.notify_all()

    def _initialize(self) -> bool:
        """Ensure the metadata topic, retrying with backoff while the broker cannot be reached; a topic
        that cannot be used (``TopicMismatchError``) is fatal. False when stopped meanwhile."""
        admin = AdminClient({**self.config.admin_config(), "logger": logging.getLogger("consumers.kafka")})
        started = time.monotonic()

        def report(state: RetryCallState) -> None:
            overdue = (time.monotonic() - started) * 1000 > self.config.retry_max_timeout_ms
            log.log(logging.ERROR if overdue else logging.WARNING,
                    "metadata topic %s not ready (%s)%s; retrying in %.1f s", self.config.topic,
                    state.outcome.exception(), ", for longer than remote.log.metadata.initialization.retry.max."
                    "timeout.ms (Kafka would give up)" if overdue else "", state.next_action.sleep)

        retrying = Retrying(retry=retry_if_exception_type(KafkaException), before_sleep=report,
                            stop=lambda _: self._stopping.is_set(), sleep=self._stopping.wait, reraise=True,
                            wait=wait_exponential_jitter(initial=self.config.retry_interval_ms / 1000,
                                                         max=MAX_RETRY_WAIT_S))
        try:
            for attempt in retrying:
                with attempt:
                    try:
                        ensure_topic(admin, self.config)
                    finally:
                        admin.poll(0)  # serve the client's log lines
        except KafkaException:
            if self._stopping.is_set():
                return False
            raise
        return not self._stopping.is_set()

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise KafkaException(error)
        log.warning("Kafka client: %s", error)

    def _on_stats(self, stats_json: str) -> None:
        brokers = [b for b in json.loads(stats_json)["brokers"].values() if b["nodeid"] >= 0]
        idle = [b["rxidle"] for b in brokers if b["state"] == "UP" and b["rxidle"] >= 0]
        self._broker = (sum(b["state"] == "UP" for b in brokers), min(idle) / 1000 if idle else None)

    # ---- registrations ------------------------------------------------------------------------------

    def _load_registry(self) -> None:
        """Before the thread starts: every partition the view has assigned is registered again, not ready
        until caught up; one whose first load never finished (killed meanwhile) is loaded again."""
        for mp, offset in self.view.metadata_offsets().items():
            self.initial_positions[mp] = offset + 1
            self.watcher.applied_up_to(mp, offset + 1)
        withdraw = []
        for tp, assigned, ready in self.view.partitions():
            if not assigned:
                continue
            mp = self._registered[tp] = self.metadata_partition_of(tp)
            row = self.view.queries.partition_row(tp)
            if row.removed:
                continue
            self._pending.setdefault(mp, {})[tp] = None
            if ready:
                withdraw.append(tp)
            if not row.loaded:
                self._rewind.add(mp)
        with self.view.batch() as batch:
            for tp in withdraw:
                batch.mark_not_ready(tp)
            self._add(batch, self._initial)

    def _add(self, batch, partitions: Iterable[TopicIdPartition]) -> None:
        for tp in partitions:
            if tp in self._registered:
                continue
            batch.assign(tp)
            mp = self._registered[tp] = self.metadata_partition_of(tp)
            self._pending.setdefault(mp, {})[tp] = None
            self._rewind.add(mp)

    def _serve_requests(self) -> None:
        changed = False
        while True:
            try:
                kind, arg = self._requests.get_nowait()
            except queue.Empty:
                break
            if kind == "hold":
                self._set_limits(arg)
                continue
            changed = True
            with self.view.batch() as batch:
                if kind == "register":
                    self._add(batch, arg)
                else:
                    for tp in arg:
                        if self._registered.pop(tp, None) is not None:
                            batch.unassign(tp)
                            self._pending.get(self.metadata_partition_of(tp), {}).pop(tp, None)
        if changed:
            self._reassign()

    def _reassign(self) -> None:
        """Bring the client's assignment in line with the registrations and rewind what must be read
        again. Partitions waiting for readiness take their end offset from the next fetch."""
        topic, client = self.config.topic, self._client
        wanted = set(range(self.config.num_partitions)) if self.config.assign_all else set(self._registered.values())
        gone = self._assigned - wanted
        if gone:
            client.incremental_unassign([TopicPartition(topic, mp) for mp in sorted(gone)])
            for mp in gone:
                self._positions.pop(mp, None)
                self._ends.pop(mp, None)
                self._held.discard(mp)
        added = wanted - self._assigned
        starts = {}
        for mp in sorted(added):
            stored = None if mp in self._rewind else self.initial_positions.get(mp)
            starts[mp] = OFFSET_BEGINNING if stored is None else stored
            self._positions[mp] = stored
        if starts:
            client.incremental_assign([TopicPartition(topic, mp, offset) for mp, offset in starts.items()])
        for mp in sorted(self._rewind & (self._assigned - gone)):
            client.seek(TopicPartition(topic, mp, OFFSET_BEGINNING))
            self._positions[mp] = None
        for mp in sorted(self._rewind & wanted):
            log.info("reading metadata partition %d from the beginning to load newly registered partitions", mp)
        self._rewind.clear()
        self._assigned = wanted

    def _set_limits(self, limits: dict[int, int]) -> None:
        self._limits = limits
        release = [mp for mp in self._held if mp not in limits or limits[mp] > (self._positions.get(mp) or 0)]
        if release:
            self._client.resume([TopicPartition(self.config.topic, mp) for mp in release])
            self._held.difference_update(release)

    # ---- consuming ------------------------------------------------------------------------------------

    def _poll(self) -> None:
        client = self._client
        first = client.poll(POLL_TIMEOUT_S)
        if first is None:
            if time.monotonic() - self._ends_refreshed > END_REFRESH_S:
                self._refresh_ends(self._assigned)
            return
        messages = client.consume(self.config.max_batch_records - 1, timeout=0)
        messages.insert(0, first)
        positions, limits = self._positions, self._limits
        applied: dict[int, int] = {}
        held: dict[int, int] = {}
        seen: set[int] = set()
        count = 0
        with self.view.batch() as batch:
            apply = batch.apply
            for message in messages:
                mp = message.partition()
                error = message.error()
                if error is not None:
                    self._on_message_error(message, error, seen)
                    continue
                offset = message.offset()
                if limits and mp in limits and offset >= limits[mp]:
                    held.setdefault(mp, offset)
                    continue
                apply(mp, offset, message.value())
                positions[mp] = applied[mp] = offset + 1
                count += 1
            seen.update(applied)
            self._refresh_ends(seen)
            readied = self._mark_ready(batch, seen)
        self.records_applied += count
        for mp, next_offset in applied.items():
            self.watcher.applied_up_to(mp, next_offset)
        for mp, offset in held.items():
            tp = TopicPartition(self.config.topic, mp, offset)
            client.pause([tp])
            client.seek(tp)
            self._held.add(mp)
        if readied:
            with self._ready_changed:
                self._ready_changed.notify_all()

    def _on_message_error(self, message: Message, error: KafkaError, seen: set[int]) -> None:
        if error.code() == _EOF:
            self._positions[message.partition()] = message.offset()
            seen.add(message.partition())
        elif error.fatal():
            raise KafkaException(error)
        else:  # the client retries by itself (leader moves, broker away, offset reset)
            log.warning("metadata partition %s: %s", message.partition(), error)

    def _refresh_ends(self, mps: Iterable[int]) -> None:
        """End offsets from the client's last fetch responses (no request to the broker)."""
        client, topic = self._client, self.config.topic
        for mp in mps:
            high = client.get_watermark_offsets(TopicPartition(topic, mp), cached=True)[1]
            if high >= 0:
                self._ends[mp] = high
        self._ends_refreshed = time.monotonic()

    def _mark_ready(self, batch, seen: set[int]) -> list[TopicIdPartition]:
        """In the batch that reaches them: mark ready the waiting partitions of the metadata partitions
        read from. A partition waiting for its end offset takes the one this fetch reported."""
        readied = []
        for mp in seen:
            waiting = self._pending.get(mp)
            position = self._positions.get(mp)
            if not waiting or position is None:
                continue
            end = max(self._ends.get(mp, 0), position)
            for tp, target in list(waiting.items()):
                if target is None:
                    target = waiting[tp] = end
                if position >= target:
                    del waiting[tp]
                    error = batch.mark_ready(tp)
                    if error is None:
                        readied.append(tp)
                    else:
                        log.info("partition %s cannot be marked ready (%s): its metadata was removed", tp, error)
        return readied
