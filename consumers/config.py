"""Settings of the metadata topic and of rlmm's Kafka clients, under the names Kafka's
``TopicBasedRemoteLogMetadataManagerConfig`` uses, with Kafka's defaults.

Names Kafka does not have are marked "rlmm" below. Client settings pass through with Kafka's
prefixes: ``remote.log.metadata.common.client.*`` (every client), ``remote.log.metadata.producer.*``
and ``remote.log.metadata.consumer.*``; they are librdkafka (confluent-kafka) settings, whose common
names (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``) are the Java client's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

KAFKA_LOG = logging.getLogger("consumers.kafka")
COMMON_CLIENT_PREFIX = "remote.log.metadata.common.client."
PRODUCER_PREFIX = "remote.log.metadata.producer."
CONSUMER_PREFIX = "remote.log.metadata.consumer."

# property name -> dataclass field
PROPERTIES = {
    "remote.log.metadata.topic.name": "topic",  # rlmm: Kafka hard-codes the name
    "remote.log.metadata.topic.num.partitions": "num_partitions",
    "remote.log.metadata.topic.replication.factor": "replication_factor",
    "remote.log.metadata.topic.retention.ms": "retention_ms",
    "remote.log.metadata.topic.min.insync.replicas": "min_insync_replicas",  # rlmm: Kafka takes the broker default
    "remote.log.metadata.consume.wait.ms": "consume_wait_ms",
    "remote.log.metadata.initialization.retry.interval.ms": "retry_interval_ms",
    "remote.log.metadata.initialization.retry.max.timeout.ms": "retry_max_timeout_ms",
    "remote.log.metadata.consume.all.partitions": "assign_all",  # rlmm
    "remote.log.metadata.consume.max.batch.records": "max_batch_records",  # rlmm
}

# Fixed client settings: what the design depends on (no group membership, no committed offsets: the
# view holds the positions; acks=all and idempotence for writes).
_CONSUMER_FIXED = {
    "group.id": "rlmm-assign-only",  # the client wants one; rlmm never joins nor commits
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,  # reaching a partition's end is how readiness is observed
    "auto.offset.reset": "earliest",  # an offset that retention removed: go on from the log start
}
_PRODUCER_FIXED = {"acks": "all", "enable.idempotence": True}

# Defaults that may be overridden. fetch.wait.max.ms: Tansu answers a waiting fetch only when the wait
# ends, not when a record arrives (Kafka answers at once), so a short wait keeps the write round trip short.
_CONSUMER_DEFAULTS = {
    "fetch.wait.max.ms": 10,
    "statistics.interval.ms": 1000,  # broker liveness (time since the last response) for the status
}
_PRODUCER_DEFAULTS = {"linger.ms": 1}


@dataclass(frozen=True)
class RlmmConfig:
    bootstrap_servers: str
    topic: str = "__remote_log_metadata"
    num_partitions: int = 50
    replication_factor: int = 3
    retention_ms: int = -1
    min_insync_replicas: int = 2
    consume_wait_ms: int = 120_000
    retry_interval_ms: int = 100
    retry_max_timeout_ms: int = 120_000  # Kafka gives up initializing after this; rlmm logs an error and goes on
    assign_all: bool = False  # consume every metadata partition (a shared service), not only registered ones
    max_batch_records: int = 5_000  # records applied per atomic view write
    common_client: Mapping[str, object] = field(default_factory=dict)
    producer: Mapping[str, object] = field(default_factory=dict)
    consumer: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_partitions < 1:
            raise ValueError(f"remote.log.metadata.topic.num.partitions must be at least 1, got {self.num_partitions}")
        if self.replication_factor < 1:
            raise ValueError(f"remote.log.metadata.topic.replication.factor must be at least 1, got {self.replication_factor}")
        if self.consume_wait_ms < 1 or self.max_batch_records < 1 or self.retry_interval_ms < 1:
            raise ValueError("remote.log.metadata.consume.wait.ms, .initialization.retry.interval.ms and "
                             ".consume.max.batch.records must be positive")

    @classmethod
    def from_properties(cls, bootstrap_servers: str, properties: Mapping[str, str]) -> RlmmConfig:
        """Build from Kafka-style ``name=value`` properties; an unknown name is an error."""
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        clients: dict[str, dict[str, object]] = {"common_client": {}, "producer": {}, "consumer": {}}
        for name, raw in properties.items():
            if name in PROPERTIES:
                attr = PROPERTIES[name]
                values[attr] = _parse(raw, types[attr], name)
            elif name.startswith(COMMON_CLIENT_PREFIX):
                clients["common_client"][name[len(COMMON_CLIENT_PREFIX):]] = raw
            elif name.startswith(PRODUCER_PREFIX):
                clients["producer"][name[len(PRODUCER_PREFIX):]] = raw
            elif name.startswith(CONSUMER_PREFIX):
                clients["consumer"][name[len(CONSUMER_PREFIX):]] = raw
            else:
                raise ValueError(f"unknown setting {name!r}; known: {', '.join(sorted(PROPERTIES))} and client "
                                 f"settings under {COMMON_CLIENT_PREFIX}, {PRODUCER_PREFIX}, {CONSUMER_PREFIX}")
        return cls(bootstrap_servers, **values, **clients)

    def _client(self, defaults: Mapping[str, object], specific: Mapping[str, object],
                fixed: Mapping[str, object]) -> dict[str, object]:
        # the client's own log lines go to Python logging; they are handed over when the client is polled
        return {**defaults, "bootstrap.servers": self.bootstrap_servers, "logger": KAFKA_LOG, **self.common_client,
                **specific, **fixed}

    def admin_config(self) -> dict[str, object]:
        return self._client({}, {}, {})

    def consumer_config(self) -> dict[str, object]:
        return self._client(_CONSUMER_DEFAULTS, self.consumer, _CONSUMER_FIXED)

    def producer_config(self) -> dict[str, object]:
        # a write gives up after consume.wait.ms, so the client need not hold the record longer
        defaults = {**_PRODUCER_DEFAULTS, "message.timeout.ms": self.consume_wait_ms}
        return self._client(defaults, self.producer, _PRODUCER_FIXED)


def _parse(raw: str, kind: str, name: str) -> object:
    """``kind`` is the field's annotation (a string, as annotations are postponed here)."""
    if kind == "bool":
        if str(raw).lower() not in ("true", "false"):
            raise ValueError(f"{name} must be true or false, got {raw!r}")
        return str(raw).lower() == "true"
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    return str(raw)
