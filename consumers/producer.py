"""Producer of metadata records: one idempotent ``acks=all`` client; each send gives a future of the
record's offset. A thread serves the client's delivery reports.

An idempotent producer whose producer id the broker no longer takes refuses every later record: after
a broker stall longer than ``message.timeout.ms``, the epoch bump that follows a timed-out record is
answered ``PRODUCER_FENCED`` (Tansu), and librdkafka fails each record so without calling the error
fatal. Such an error, or a fatal one, makes the serving thread replace the client; sends meanwhile
fail with ``ProducerRecoveringError``, which is retriable.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from consumers.config import RlmmConfig
from rlmm.errors import ProducerRecoveringError, RecordTooLargeError

log = logging.getLogger(__name__)

# errors of a record that mean the client's producer id is no longer good: every later record would fail so
_PRODUCER_ID_REFUSED = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.INVALID_PRODUCER_ID_MAPPING,
    }
)
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes


class MetadataProducer:
    def __init__(self, config: RlmmConfig) -> None:
        self.topic = config.topic
        self._config = config
        self._fatal: KafkaError | None = None  # the error that broke the client; the serving thread replaces it
        self.failure: str | None = None  # why records cannot be sent now (a client that could not be made)
        self.recreated = 0  # clients replaced after a fatal error
        self._producer = self._new_client()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="rlmm-producer", daemon=True)
        self._thread.start()

    def _new_client(self) -> Producer:
        return Producer({**self._config.producer_config(), "error_cb": self._on_error})

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error

    def _serve(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(0.1)  # blocks until a delivery report (or 0.1 s) and runs its callback
            if self._fatal is not None:
                self._heal()

    def _heal(self) -> None:
        """Replace a client that met a fatal error; records it still holds fail (purged)."""
        error, old = self._fatal, self._producer
        log.error(
            "the metadata producer cannot send any more (%s): replacing it; writes meanwhile fail with a "
            "retriable error",
            error,
        )
        try:
            self._producer = self._new_client()
        except KafkaException as exc:
            self.failure = f"the metadata producer cannot send any more ({error}) and cannot be made again ({exc})"
            log.error("%s; retrying", self.failure)
            self._closing.wait(1.0)
            return
        self._fatal = None
        self.failure = None
        self.recreated += 1
        old.purge()
        old.poll(0)  # fail the purged records' futures
        log.info("the metadata producer was replaced; writes go on")

    def send(self, metadata_partition: int, value: bytes) -> Future[int]:
        """Produce ``value`` to ``metadata_partition``; the future gives its offset once acknowledged."""
        if self._fatal is not None or self.failure is not None:
            raise ProducerRecoveringError(self._recovering(self._fatal))
        future: Future[int] = Future()

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                future.set_result(message.offset())
            elif error.fatal() or error.code() in _PRODUCER_ID_REFUSED or error.code() in _PURGED:
                if error.code() not in _PURGED:
                    self._fatal = error
                future.set_exception(ProducerRecoveringError(self._recovering(error)))
            else:
                future.set_exception(KafkaException(error))

        try:
            self._producer.produce(self.topic, value, partition=metadata_partition, on_delivery=delivered)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise self._too_large(len(value)) from None
            if not exc.args[0].fatal():
                raise
            self._fatal = exc.args[0]
            raise ProducerRecoveringError(self._recovering(exc.args[0])) from None
        return future

    def _too_large(self, size: int) -> RecordTooLargeError:
        limit = self._config.producer_config().get("message.max.bytes", MESSAGE_MAX_BYTES)
        return RecordTooLargeError(
            f"the record is {size} bytes, larger than the producer's message.max.bytes ({limit} bytes, framing "
            f"included): it was not written; write less custom metadata, or raise "
            f"remote.log.metadata.producer.message.max.bytes (and the broker's message.max.bytes)"
        )

    def _recovering(self, error: KafkaError | None) -> str:
        return self.failure or (
            f"the metadata producer cannot send any more ({error}) and is being replaced; the "
            f"record was not acknowledged: retry"
        )

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)
        self._closing.set()
        self._thread.join()
