"""The Kafka clients the metadata consumer is given. It asks for new ones each time it starts consuming (again,
after the view refused a write), so it takes a factory, not a client; ``ConfluentClients`` builds the real
confluent-kafka ones from the service's configuration, the consumer in a child process
(``consumers/client_process.py``: librdkafka can crash the process it runs in)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from consumers.client_process import ConsumerProcess
from consumers.config import RlmmConfig

OnError = Callable[[KafkaError], None]
OnStats = Callable[[str], None]  # librdkafka's statistics, JSON


class KafkaClients(Protocol):
    def consumer(self, on_error: OnError, on_stats: OnStats) -> ConsumerProcess: ...

    def admin(self, on_error: OnError) -> AdminClient: ...


class ConfluentClients:
    def __init__(self, config: RlmmConfig) -> None:
        self.config = config

    def consumer(self, on_error: OnError, on_stats: OnStats) -> ConsumerProcess:
        return ConsumerProcess(self.config.consumer_config(), on_error, on_stats)

    def admin(self, on_error: OnError) -> AdminClient:
        return AdminClient({**self.config.admin_config(), "error_cb": on_error})
