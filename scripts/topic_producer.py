"""How the benchmarks fill a metadata topic before they measure: one producer, with the settings of a broker's
RLMM writes (acks=all, idempotent: each partition's records land in the order sent) and batched for throughput."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Producer

PRODUCER_SETTINGS = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
}


class ProduceError(RuntimeError):
    """Records were not delivered."""


def produce(bootstrap: str, records: Iterable[tuple[str, int, bytes | None]], flush_timeout_s: float = 300) -> None:
    """Produce each (topic, partition, value) in order; returns once the broker acknowledged them all, else
    raises ``ProduceError``."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
    errors: list[object] = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(error)

    for i, (topic, partition, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value, partition=partition, on_delivery=delivered)
                break
            except BufferError:  # the queue is full: let deliveries drain it
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(flush_timeout_s)
    if remaining or errors:
        raise ProduceError(f"{remaining} records not delivered, errors {errors[:3]}")
