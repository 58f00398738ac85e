"""Producer of metadata records: one idempotent ``acks=all`` client; each send gives a future of the
record's offset. A thread serves the client's delivery reports."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from confluent_kafka import KafkaException, Message, Producer

from consumers.config import RlmmConfig


class MetadataProducer:
    def __init__(self, config: RlmmConfig) -> None:
        self.topic = config.topic
        self._producer = Producer(config.producer_config())
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="rlmm-producer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(0.1)  # blocks until a delivery report (or 0.1 s) and runs its callback

    def send(self, metadata_partition: int, value: bytes) -> Future[int]:
        """Produce ``value`` to ``metadata_partition``; the future gives its offset once acknowledged."""
        future: Future[int] = Future()

        def delivered(error: object, message: Message) -> None:
            if error is not None:
                future.set_exception(KafkaException(error))
            else:
                future.set_result(message.offset())

        self._producer.produce(self.topic, value, partition=metadata_partition, on_delivery=delivered)
        return future

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)
        self._closing.set()
        self._thread.join()
