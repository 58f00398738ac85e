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
  is right; on Kafka both are right). As in Kafka, a record whose decoding or handling failed is not
  read: it does not count towards that end offset. A restarted consumer withdraws readiness until it
  has caught up.
* The topic must stay the one the view was built from (``consumers/topic_guard.py`` checks its id and
  partition count); a record below the position the consumer expects, or an end offset that stays below it,
  means the offsets went backwards. Any of these stops the consumer with a ``TopicChangedError`` before the
  batch that showed it is applied: a view never mixes two histories.
* Registration changes, holds and the Kafka client are handled by the consumer's own thread only. The
  consumer is given its Kafka clients (``consumers/clients.py``: a factory, as a restart builds new ones).
  Its bookkeeping per metadata partition (registrations, positions, end offsets, holds, readiness) is a
  ``ConsumerLedger`` (``consumers/ledger.py``, pure). Records the state machine refuses are logged,
  rate-limited, by ``consumers/refusals.py``.
* Partitions that wait for readiness are logged with what they wait for: at once when nothing the topic holds
  can make them ready (the records after the last one read all failed), and every ``WAIT_REPORT_S`` while they
  wait; ``status`` gives the same per metadata partition.
* Every wait (readiness, initialization, a registration) returns or raises at once when the consumer stops:
  ``ConsumerStoppedError`` with the failure as its cause, ``ServiceStoppedError`` after ``stop``.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from consumers import view_state
from consumers.broker_contact import BrokerContact
from consumers.client_process import ConsumerProcess, FetchedMessage
from consumers.clients import KafkaClients
from consumers.config import RlmmConfig
from consumers.ledger import BEGINNING, NO_BROKER, ConsumerLedger, FetchRead, NotReady, Progress
from consumers.ratelog import RateLimitedLog
from consumers.refusals import RefusalLog, what_failed, why
from consumers.topic import ensure_topic
from consumers.topic_guard import TopicGuard
from consumers.watcher import OffsetWatcher
from rlmm.errors import (
    ConsumerStoppedError,
    KafkaClientCrashed,
    KafkaSideError,
    ServiceStoppedError,
    ViewDamaged,
    ViewError,
    ViewStorageFailed,
    WriteNotAppliedError,
)
from rlmm.records.model import TopicIdPartition
from rlmm.state.results import ApplyResult
from rlmm.state.view import Batch, View

log = logging.getLogger(__name__)


POLL_TIMEOUT_S = 0.1  # longest wait for records before registration requests are looked at again
END_REFRESH_S = 0.5  # how often idle partitions' end offsets are read from the client's fetch state
MAX_RETRY_WAIT_S = 5.0
INIT_REQUEST_TIMEOUT_S = 5.0  # per admin request while initializing (bounds how long a stop may wait)
STORAGE_RETRY_S = 0.5  # first wait before writing a view that refused a write again; doubles up to:
MAX_STORAGE_RETRY_S = 30.0
# a Kafka client that crashes while the topic stays the view's is replaced by a new one, this many times within
# CLIENT_CRASH_WINDOW_S; one more crash in that window stops the consumer (a client that keeps crashing is a bug
# to report, not to loop on)
CLIENT_RESTARTS_ALLOWED = 3
CLIENT_CRASH_WINDOW_S = 600.0
WAIT_CHECK_S = 1.0  # how often the consumer looks at which partitions wait for readiness
WAIT_REPORT_S = 60.0  # how often partitions still waiting for readiness are logged again
_EOF = KafkaError._PARTITION_EOF
# errors after which nothing is applied before the topic is checked again (the broker may have lost it)
_CONNECTION_ERRORS = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
    }
)


class MetadataConsumer:
    def __init__(
        self,
        view: View,
        config: RlmmConfig,
        watcher: OffsetWatcher,
        clients: KafkaClients,
        partitions: Iterable[TopicIdPartition] = (),
    ) -> None:
        self.view = view
        self.config = config
        self.watcher = watcher
        self.clients = clients
        self.failure: BaseException | None = None
        self.records_applied = 0  # records applied (committed) by this process
        self._initial = list(partitions)
        self._requests: queue.SimpleQueue[tuple[str, object, threading.Event]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._stopped = threading.Event()  # the consumer thread ended
        self._initialized = threading.Event()
        self._ready_changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rlmm-consumer", daemon=True)
        self._client: ConsumerProcess | None = None
        self._contact = BrokerContact(config.bootstrap_servers)
        self._admin: AdminClient | None = None
        self._refusals = RefusalLog(log)
        self._client_errors = RateLimitedLog(log)
        self.storage_failure: str | None = None  # why the view cannot be written now (the consumer waits)
        self.storage_failures = 0  # times writing the view failed and the consumer waited for it
        self.client_restarts = 0  # Kafka clients replaced after a crash
        self._client_crashes: deque[float] = deque(maxlen=CLIENT_RESTARTS_ALLOWED + 1)
        self._ledger = ConsumerLedger(config.num_partitions, config.assign_all)
        self._topic = TopicGuard(view, config)
        self.topic_changes = self._topic.changes  # changes of the topic detected, by kind
        self._reset_state()

    def _reset_state(self) -> None:
        """The consumer thread's own state, as a start (or a restart after the view failed) finds it."""
        self._ledger = self._ledger.restarted()
        self._ends_refreshed = 0.0
        self._topic.reset()
        self._waits_checked = 0.0
        self._waits_logged: dict[int, tuple[float, bool]] = {}  # mp -> when its waits were logged, whether stuck

    # ---- control (any thread) ---------------------------------------------------------------------

    def start(self) -> None:
        """Withdraw the readiness a previous run left in the view, register the initial partitions, then
        consume in the background (the broker need not be reachable yet)."""
        self._load_registry()
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self.wake()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        """Stopped (or stopping), or failed: it consumes no more."""
        return self._stopping.is_set() or self._stopped.is_set()

    @property
    def running(self) -> bool:
        """Started, not stopped and not failed: it consumes, or tries to reach the broker."""
        return self._thread.is_alive() and not self.stopped and self.failure is None

    @property
    def initialized(self) -> bool:
        """The topic is known good and the client runs (Kafka's ``isInitialized``), on a view it can write."""
        return (
            self._initialized.is_set()
            and self.failure is None
            and self.storage_failure is None
            and not self._stopping.is_set()
        )

    def wait_initialized(self, timeout: float | None = None) -> bool:
        """Wait until the consumer was initialized once; False on timeout. Raises at once when it stops before."""
        return self.wait_until(self._initialized.is_set, timeout)

    def wait_done(self, request: threading.Event, timeout: float) -> bool:
        """Wait until the consumer carried out a request (``register``...); False on timeout (it is still queued).
        Raises at once when the consumer stops first."""
        return self.wait_until(request.is_set, timeout)

    def wait_until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``done()``, looked at whenever the consumer changed something (``wake``); False on timeout;
        ``ConsumerStoppedError`` (the failure its cause) or ``ServiceStoppedError`` as soon as the consumer stops
        before."""
        with self._ready_changed:
            self._ready_changed.wait_for(lambda: done() or self.stopped, timeout)
        if done():
            return True
        failure = self.failure
        if failure is not None:
            raise ConsumerStoppedError(f"the metadata consumer stopped: {failure}") from failure
        if self.stopped:
            raise ServiceStoppedError("the metadata consumer was stopped")
        return False

    def wake(self) -> None:
        """Have every ``wait_until`` look at its condition again (one that changed outside the consumer)."""
        with self._ready_changed:
            self._ready_changed.notify_all()

    # Requests are carried out by the consumer thread, between two batches; the event each returns is
    # set once that happened.

    def register(
        self, partitions: Iterable[TopicIdPartition], holder: int = NO_BROKER, *, full: bool = False
    ) -> threading.Event:
        """Start following these user partitions for broker ``holder`` (Kafka's ``onPartitionLeadershipChanges``);
        ``full``: they are all the partitions it follows, its registrations of any other one end."""
        return self._request("replace" if full else "register", (list(partitions), holder))

    def unregister(self, partitions: Iterable[TopicIdPartition], holder: int = NO_BROKER) -> threading.Event:
        """End broker ``holder``'s registrations of these partitions (Kafka's ``onStopPartitions``); a partition
        no other broker holds is no longer followed and its metadata is forgotten."""
        return self._request("unregister", (list(partitions), holder))

    def hold(self, limits: Mapping[int, int] | None) -> threading.Event:
        """Apply each listed metadata partition only below the given offset, and hold there; ``None``
        releases every hold. For a view at an exact position (a snapshot, a test)."""
        return self._request("hold", dict(limits or {}))

    def _request(self, kind: str, arg: object) -> threading.Event:
        done = threading.Event()
        self._requests.put((kind, arg, done))
        return done

    def metadata_partition_of(self, tp: TopicIdPartition) -> int:
        return self._ledger.metadata_partition_of(tp)

    @property
    def initial_positions(self) -> dict[int, int]:
        """Next offset per metadata partition when the view was opened (by this process, or again)."""
        return self._ledger.initial_positions

    def progress(self) -> dict[int, Progress]:
        return self._ledger.progress()

    def wait_ready(self, partitions: Iterable[TopicIdPartition] | None, timeout: float) -> bool:
        """Wait until every one of ``partitions`` is ready (None: every registered partition that can be,
        i.e. not removed by a partition deletion); False on timeout (``not_ready`` says what they wait for).
        Raises at once when the consumer stops (``wait_until``)."""
        if partitions is None:
            return self.wait_until(lambda: self.all_ready, timeout)
        wanted = list(partitions)
        return self.wait_until(lambda: all(map(self.view.queries.is_ready, wanted)), timeout)

    @property
    def all_ready(self) -> bool:
        """Initialized, and every registered partition that can be is ready (not one removed by a deletion)."""
        return self.initialized and not self._ledger.waiting()

    def not_ready(self) -> list[NotReady]:
        """The registered partitions waiting for readiness, by metadata partition, and what they wait for."""
        return self._ledger.not_ready()

    def registered(self) -> list[TopicIdPartition]:
        return self._ledger.registered_partitions()

    def status(self) -> dict:
        progress = self.progress()
        lags = [p.lag for p in progress.values()]
        partitions: dict[str, dict] = {
            str(mp): {"position": p.position, "end": p.end, "lag": p.lag} for mp, p in progress.items()
        }
        for waits in self.not_ready():
            partitions.setdefault(str(waits.metadata_partition), {})["not_ready"] = {
                "partitions": len(waits.partitions),
                "reason": waits.reason,
                "examples": waits.examples,
            }
        return {
            "initialized": self.initialized,
            "failure": None if self.failure is None else repr(self.failure),
            "brokers_up": self._contact.brokers_up,
            "ms_since_broker_response": self._contact.ms_since_response,
            "lag": None if not lags or None in lags else sum(lags),
            "metadata_partitions": partitions,
            "pending_partitions": self._ledger.waiting(),
            "records_applied": self.records_applied,
        }

    # ---- the consumer thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if not self._initialize():
                return
            while not self._stopping.is_set():
                try:
                    self._consume()
                    continue
                except KafkaClientCrashed as crash:
                    self._restart_client(crash)
                    continue
                except ViewStorageFailed as exc:
                    if isinstance(exc, ViewDamaged):
                        raise
                    problem = str(exc)
                self._wait_for_storage(problem)  # out of the except block: its traceback refers to the old database
        except BaseException as exc:
            self.failure = exc
            log.error(
                "the metadata consumer stopped: %s",
                exc,
                exc_info=not isinstance(exc, (KafkaException, KafkaSideError, ViewError)),
            )
            self.watcher.fail_all(exc)
        finally:
            self.watcher.fail_all(ServiceStoppedError("the metadata consumer was stopped"))  # kept: a failure first
            self._stopped.set()
            self.wake()

    def _consume(self) -> None:
        self._client = self.clients.consumer(self._on_error, self._contact.on_stats)
        try:
            self._reassign()
            self._initialized.set()
            self.wake()
            while not self._stopping.is_set():
                self._serve_requests()
                if self._topic.checked(self._admin, self._stopping):
                    self._poll()
                self._report_waits()
        except KafkaClientCrashed as crash:
            self._topic.explain(self._admin, crash)
            raise
        finally:
            self._client.close()
            self._client = None

    def _restart_client(self, crash: KafkaClientCrashed) -> None:
        """The Kafka client crashed and the broker did not show the topic changed: consume with a new client
        from where the view stands, as a restarted consumer would (partitions ready again once caught up). Raise
        the crash when it is one too many within ``CLIENT_CRASH_WINDOW_S``."""
        now = time.monotonic()
        crashes = self._client_crashes
        crashes.append(now)
        if len(crashes) > CLIENT_RESTARTS_ALLOWED and now - crashes[0] < CLIENT_CRASH_WINDOW_S:
            raise KafkaClientCrashed(
                f"{crash}; the Kafka client crashed {len(crashes)} times within {CLIENT_CRASH_WINDOW_S:.0f} s: "
                f"the consumer stops (restart the service)"
            ) from crash
        self.client_restarts += 1
        log.error("%s; the topic is unchanged: consuming with a new client from where the view stands", crash)
        self._reset_state()
        self._load_registry()

    def _wait_for_storage(self, problem: str) -> None:
        """The view refused a write (a full disk...): nothing was applied of the batch. Try to open and write
        it again, with backoff, then consume from where the view stands, as a restarted consumer would."""
        self.storage_failure = f"{problem}; retrying"
        self.storage_failures += 1
        log.error("the view cannot be written (%s): nothing is applied until it can; retrying", problem)
        delay = STORAGE_RETRY_S
        while not self._stopping.wait(delay):
            gc.collect()  # what still refers to the old database (failed batches) holds the view's lock
            try:
                self.view.reopen()
                self._reset_state()
                self._load_registry()
            except ViewStorageFailed as exc:
                if isinstance(exc, ViewDamaged):
                    raise
                log.info("the view still cannot be written: %s", exc)
                delay = min(delay * 2, MAX_STORAGE_RETRY_S)
                continue
            log.info("the view can be written again: consuming from offsets %s", self.initial_positions)
            self.storage_failure = None
            return

    def _initialize(self) -> bool:
        """Ensure the metadata topic, retrying with backoff while the broker cannot be reached; a topic
        that cannot be used (``TopicMismatchError``) is fatal. False when stopped meanwhile."""
        self._topic.check_configured_count()
        admin = self._admin = self.clients.admin(self._on_error)
        started = time.monotonic()
        self._contact.trying()

        def report(state: RetryCallState) -> None:
            self._contact.trying(str(state.outcome.exception()))
            overdue = (time.monotonic() - started) * 1000 > self.config.retry_max_timeout_ms
            log.log(
                logging.ERROR if overdue else logging.WARNING,
                "metadata topic %s not ready (%s)%s; retrying in %.1f s",
                self.config.topic,
                state.outcome.exception(),
                ", for longer than remote.log.metadata.initialization.retry.max.timeout.ms (Kafka would give up)"
                if overdue
                else "",
                state.next_action.sleep,
            )

        retrying = Retrying(
            retry=retry_if_exception_type(KafkaException),
            before_sleep=report,
            stop=lambda _: self._stopping.is_set(),
            sleep=self._stopping.wait,
            reraise=True,
            wait=wait_exponential_jitter(multiplier=self.config.retry_interval_ms / 1000, max=MAX_RETRY_WAIT_S),
        )
        try:
            for attempt in retrying:
                with attempt:
                    try:
                        ensure_topic(admin, self.config, timeout=INIT_REQUEST_TIMEOUT_S)
                    finally:
                        admin.poll(0)  # serve the client's log lines
        except KafkaException:
            if self._stopping.is_set():
                return False
            raise
        self._contact.reached()
        return not self._stopping.is_set()

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise KafkaException(error)
        if error.code() in _CONNECTION_ERRORS:
            self._topic.connection_broke()
            self._contact.trying(str(error))
        self._client_errors.log(logging.WARNING, str(error.code()), "Kafka client: %s", error)

    @property
    def connection_problem(self) -> str | None:
        """Why the consumer cannot read the topic now: no broker has answered for a while (the last error)."""
        return self._contact.problem

    @property
    def kafka_problem(self) -> str | None:
        """``connection_problem``, as a server that answers from its view says it."""
        problem = self.connection_problem
        return None if problem is None else f"{problem}; reads are answered from the view as it stands"

    # ---- registrations ------------------------------------------------------------------------------

    def _load_registry(self) -> None:
        """Before the thread starts (and once a view that refused a write takes writes again): every
        partition the view has assigned is registered again, not ready until caught up; a reading again
        from the beginning that a killed run left unfinished starts over."""
        ledger = self._ledger
        offsets = self.view.metadata_offsets()
        ledger.load_offsets(offsets)
        for mp, offset in offsets.items():
            self.watcher.applied_up_to(mp, offset + 1)
        state = self.view.consumer_state()
        self._topic.load(state)
        for mp, until in view_state.rereads_of(state).items():  # readings again a previous run did not finish
            ledger.resume_reread(mp, until)
        ledger.holders = view_state.holders_of(state)
        withdraw = []
        for tp, assigned, ready in self.view.partitions():
            if not assigned:
                continue
            waits = not self.view.queries.partition_row(tp).removed
            ledger.restore(tp, waits)
            if waits and ready:
                withdraw.append(tp)
        with self.view.batch() as batch:
            for tp in withdraw:
                batch.mark_not_ready(tp)
            self._add(batch, self._initial, NO_BROKER)
        ledger.loaded()

    def _add(self, batch: Batch, partitions: Iterable[TopicIdPartition], holder: int) -> None:
        """Register partitions for ``holder``: assign new ones in the view and plan to read their metadata
        partitions from the beginning. Where that partition was read before, the offset the reading again
        must pass is committed with the assignment, so that a run killed before it gets there starts it over."""
        applied = self.watcher.applied()
        for tp in partitions:
            registration = self._ledger.register(tp, applied, holder)
            batch.put_consumer_state(view_state.holders_key(tp), view_state.holders_value(self._ledger.holders[tp]))
            if registration is None:
                continue
            batch.assign(tp)
            if registration.reread_until is not None:
                batch.put_consumer_state(
                    view_state.reread_key(registration.metadata_partition),
                    view_state.reread_value(registration.reread_until),
                )

    def _serve_requests(self) -> None:
        served = []
        while True:
            try:
                kind, arg, done = self._requests.get_nowait()
            except queue.Empty:
                break
            served.append(done)
            if kind == "hold":
                self._set_limits(arg)
                continue
            partitions, holder = arg
            with self.view.batch() as batch:
                if kind == "replace":
                    self._remove(batch, set(self._ledger.held_by(holder)).difference(partitions), holder)
                if kind == "unregister":
                    self._remove(batch, partitions, holder)
                else:
                    self._add(batch, partitions, holder)
        if served:
            self._reassign()
            for done in served:
                done.set()
            self.wake()

    def _remove(self, batch: Batch, partitions: Iterable[TopicIdPartition], holder: int) -> None:
        """End ``holder``'s registrations of partitions; unassign those no holder is left for."""
        for tp in partitions:
            stopped = self._ledger.unregister(tp, holder)
            batch.put_consumer_state(
                view_state.holders_key(tp), view_state.holders_value(self._ledger.holders.get(tp, ()))
            )
            if stopped:
                batch.unassign(tp)

    def _reassign(self) -> None:
        """Bring the client's assignment in line with the registrations and rewind what must be read
        again. Partitions waiting for readiness take their end offset from the next fetch."""
        topic, client = self.config.topic, self._client
        change = self._ledger.reassign()
        if change.unassign:
            client.incremental_unassign([TopicPartition(topic, mp) for mp in change.unassign])
        if change.assign:
            client.incremental_assign([TopicPartition(topic, mp, offset) for mp, offset in change.assign.items()])
        if change.resume:
            client.resume([TopicPartition(topic, mp) for mp in change.resume])
        for mp in change.rewind:
            client.seek(TopicPartition(topic, mp, BEGINNING))
        for mp, until in change.rereading.items():
            log.info(
                "reading metadata partition %d again from the beginning (up to offset %d at least) to load "
                "newly registered partitions",
                mp,
                until,
            )

    def _set_limits(self, limits: dict[int, int]) -> None:
        release = self._ledger.set_limits(limits)
        if release:
            self._client.resume([TopicPartition(self.config.topic, mp) for mp in release])

    # ---- consuming: fetch, check, apply in a view batch, record offsets, mark ready, hold ---------------

    def _poll(self) -> None:
        messages = self._fetch()
        if not messages:
            return
        if self._topic.unverified:  # the connection broke while these were fetched: check the topic first
            self._read_again(messages)
            return
        with self.view.batch() as batch:
            fetch, unread = self._apply(batch, messages)
            self._refresh_ends(fetch.seen | fetch.held.keys())
            now_ready = self._mark_ready(batch, fetch.seen)
            self._finish_rereads(batch, fetch.seen)
        self._record_applied(fetch)
        self._read_again(unread)
        self._hold(fetch.held)
        if now_ready:
            self.wake()

    def _fetch(self) -> list[FetchedMessage]:
        """The next records (and partition ends) the client has, up to a batch; none after a wait. While
        idle, the end offsets are read again now and then."""
        client = self._client
        first = client.poll(POLL_TIMEOUT_S)
        if first is None:
            if time.monotonic() - self._ends_refreshed > END_REFRESH_S:
                self._refresh_ends(self._ledger.assigned)
                self._ends_refreshed = time.monotonic()
            return []
        if self.config.max_batch_records > 1:
            return [first, *client.consume(self.config.max_batch_records - 1, timeout=0)]
        return [first]

    def _apply(self, batch: Batch, messages: list[FetchedMessage]) -> tuple[FetchRead, list[FetchedMessage]]:
        """Check and apply each record in the batch, note where each partition's reading stands. An error after
        which the topic must be checked again (the broker may have lost it) ends the batch there: the messages
        after it are returned, not applied."""
        fetch = FetchRead()
        for i, message in enumerate(messages):
            error = message.error()
            if error is None:
                self._apply_record(batch, fetch, message)
            elif error.code() == _EOF:
                self._reach_end(fetch, message.partition(), message.offset())
            else:
                self._on_message_error(message.partition(), error)
                if self._topic.unverified:
                    return fetch, messages[i + 1 :]
        return fetch, []

    def _apply_record(self, batch: Batch, fetch: FetchRead, message: FetchedMessage) -> None:
        mp, offset = message.partition(), message.offset()
        self._check_not_below(mp, offset)
        if self._ledger.hold_at(fetch, mp, offset):
            return
        value = message.value()
        result = batch.apply(mp, offset, value)
        if result.status == "error":
            fetch.failed.setdefault(mp, {})[offset] = result
            self._ledger.read(fetch, mp, offset, failed=True, what=what_failed(result))
        else:
            self._ledger.read(fetch, mp, offset, failed=False)
        self._refusals.log(mp, offset, value, result)

    def _reach_end(self, fetch: FetchRead, mp: int, offset: int) -> None:
        """The end of a partition: the position and end offset of this fetch (not past a hold)."""
        if mp not in fetch.held:
            self._check_not_below(mp, offset)
            self._ledger.reached_end(fetch, mp, offset)

    def _check_not_below(self, mp: int, offset: int) -> None:
        """A record (or a partition's end) below the next offset the consumer expects: the offsets went back."""
        expected = self._ledger.below_position(mp, offset)
        if expected is not None:
            self._topic.changed(
                "offsets_backwards",
                f"metadata partition {mp} gave offset {offset}, below the next "
                f"offset {expected} the view expects (it applied up to {expected - 1})",
            )

    def _read_again(self, messages: list[FetchedMessage]) -> None:
        """Seek each partition back to the first record of ``messages``, which are not applied."""
        firsts: dict[int, int] = {}
        for message in messages:
            if message.error() is None:
                firsts.setdefault(message.partition(), message.offset())
        for mp, offset in firsts.items():
            self._client.seek(TopicPartition(self.config.topic, mp, offset))

    def _on_message_error(self, mp: int, error: KafkaError) -> None:
        if error.fatal():
            raise KafkaException(error)
        if error.code() in _CONNECTION_ERRORS:
            self._topic.connection_broke()
        log.warning("metadata partition %d: %s", mp, error)  # the client retries by itself

    def _refresh_ends(self, mps: Iterable[int]) -> None:
        """End offsets from the client's last fetch responses (no request to the broker). An end that stays
        below the position the view reached means the partition lost records: ``TopicChangedError``."""
        client, topic, now = self._client, self.config.topic, time.monotonic()
        for mp in mps:
            high = client.get_watermark_offsets(TopicPartition(topic, mp), cached=True)[1]
            if high < 0:
                continue
            position = self._ledger.end_reported(mp, high, now)
            if position is not None:
                self._topic.changed(
                    "offsets_backwards",
                    f"metadata partition {mp} ends at offset {high}, below the next "
                    f"offset {position} the view expects (it applied up to {position - 1})",
                )

    def _mark_ready(self, batch: Batch, seen: set[int]) -> bool:
        """In the batch that reaches them: mark ready the waiting partitions of the metadata partitions
        read from. Returns whether any partition stopped waiting."""
        now_ready = self._ledger.now_ready(seen)
        for tp in now_ready:
            error = batch.mark_ready(tp)
            if error is not None:
                log.info("partition %s cannot be marked ready (%s): its metadata was removed", tp, error)
        return bool(now_ready)

    def _finish_rereads(self, batch: Batch, seen: set[int]) -> None:
        """Readings again from the beginning that passed their offset are done: forget them with the batch."""
        for mp in self._ledger.rereads_done(seen):
            batch.put_consumer_state(view_state.reread_key(mp), None)

    def _record_applied(self, fetch: FetchRead) -> None:
        """After the commit: count the records and wake the writers waiting for their offsets (those of records
        that failed with the error they failed with)."""
        self.records_applied += fetch.records
        for mp, next_offset in fetch.read.items():
            failed = fetch.failed.get(mp, {})
            self.watcher.applied_up_to(
                mp, next_offset, {offset: self._not_applied(mp, offset, result) for offset, result in failed.items()}
            )

    def _not_applied(self, mp: int, offset: int, result: ApplyResult) -> WriteNotAppliedError:
        return WriteNotAppliedError(
            f"record {self.config.topic}-{mp}@{offset} was written, but it cannot be applied ({why(result)}): "
            f"the view will not hold it",
            result.error,
        )

    def _hold(self, held: dict[int, int]) -> None:
        """Pause each partition that reached its limit, at the first offset not applied."""
        for mp, offset in held.items():
            tp = TopicPartition(self.config.topic, mp, offset)
            self._client.pause([tp])
            self._client.seek(tp)
            self._ledger.held_at(mp)

    # ---- partitions waiting for readiness, logged --------------------------------------------------------

    def _report_waits(self) -> None:
        """Log the partitions that wait for readiness: at once when they are stuck (a later record must come),
        then every ``WAIT_REPORT_S`` while they wait (those still reading too)."""
        now = time.monotonic()
        if now - self._waits_checked < WAIT_CHECK_S:
            return
        self._waits_checked = now
        waiting = self._ledger.not_ready()
        logged, self._waits_logged = self._waits_logged, {}
        for waits in waiting:
            mp = waits.metadata_partition
            last = logged.get(mp)
            newly_stuck = waits.stuck and (last is None or not last[1])
            if newly_stuck or (last is not None and now - last[0] >= WAIT_REPORT_S):
                log.log(logging.WARNING if waits.stuck else logging.INFO, "%s", waits.describe())
                last = now, waits.stuck
            self._waits_logged[mp] = last or (now, False)
