"""Settings of the metadata topic and of rlmm's Kafka clients, under the names Kafka's
``TopicBasedRemoteLogMetadataManagerConfig`` uses, with Kafka's defaults.

``SETTINGS`` lists them, with what each means and whether Kafka has it; ``docs/configuration.md`` is
generated from it and from ``CLIENT_SETTINGS``. Client settings pass through with Kafka's prefixes:
``remote.log.metadata.common.client.*`` (every client), ``remote.log.metadata.producer.*`` and
``remote.log.metadata.consumer.*``; they are librdkafka (confluent-kafka) settings, whose common names
(``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``) are the Java client's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

import pydantic
from pydantic import BeforeValidator, Field, ValidationError

from consumers.ratelog import RateLimitedLog


class _KafkaClientLog:
    """librdkafka's log lines (``logger`` of every client), each kind (its facility: FAIL, CONNECT...) at most
    once per 10 s: a broker that is down gives a line per connection attempt, many a second."""

    def __init__(self) -> None:
        self._lines = RateLimitedLog(logging.getLogger("consumers.kafka"))

    def log(self, level: int, msg: str, *args: object) -> None:
        self._lines.log(level, str(args[0]) if args else msg, msg, *args)


KAFKA_LOG = _KafkaClientLog()
COMMON_CLIENT_PREFIX = "remote.log.metadata.common.client."
PRODUCER_PREFIX = "remote.log.metadata.producer."
CONSUMER_PREFIX = "remote.log.metadata.consumer."


@dataclass(frozen=True)
class Setting:
    """A setting under a Kafka-style name (``--set NAME=VALUE``, ``[kafka]`` in ``rlmm serve``'s file)."""

    name: str
    field: str  # the RlmmConfig field it sets (the default is that field's)
    meaning: str
    in_kafka: bool  # Kafka's TopicBasedRemoteLogMetadataManagerConfig has this name, with this default


SETTINGS = (
    Setting(
        "remote.log.metadata.topic.name",
        "topic",
        "The metadata topic. Kafka hard-codes `__remote_log_metadata`.",
        False,
    ),
    Setting(
        "remote.log.metadata.topic.num.partitions",
        "num_partitions",
        "Partitions of the metadata topic. An existing topic with another count is refused (Kafka refuses it "
        "too): records would go where the other brokers do not look. Left out, a view (or the snapshot it was "
        "restored from) that records its topic's count gives it; set, it must be the view's.",
        True,
    ),
    Setting(
        "remote.log.metadata.topic.replication.factor",
        "replication_factor",
        "Replication factor of the metadata topic, when rlmm creates it.",
        True,
    ),
    Setting(
        "remote.log.metadata.topic.retention.ms",
        "retention_ms",
        "`retention.ms` of the metadata topic, when rlmm creates it; -1 keeps every record. Records retention "
        "removes are gone for a view rebuilt from the topic (`rlmm archive` keeps them).",
        True,
    ),
    Setting(
        "remote.log.metadata.topic.min.insync.replicas",
        "min_insync_replicas",
        "`min.insync.replicas` of the metadata topic, when rlmm creates it (Kafka leaves it to the broker default).",
        False,
    ),
    Setting(
        "remote.log.metadata.consume.wait.ms",
        "consume_wait_ms",
        "How long a write waits for the consumer to apply its record before failing with a timeout (it may "
        "still be applied later); also the producer's `message.timeout.ms`.",
        True,
    ),
    Setting(
        "remote.log.metadata.initialization.retry.interval.ms",
        "retry_interval_ms",
        "First delay between attempts to reach the broker and ensure the topic; the delays grow exponentially "
        "with jitter, at most 5 s apart.",
        True,
    ),
    Setting(
        "remote.log.metadata.initialization.retry.max.timeout.ms",
        "retry_max_timeout_ms",
        "After trying this long, each failed attempt is logged as an error. Kafka gives up and shuts the "
        "broker down; rlmm keeps trying.",
        True,
    ),
    Setting(
        "remote.log.metadata.consume.all.partitions",
        "assign_all",
        "Consume every metadata partition (a service shared by all brokers), not only those of the registered "
        "user partitions.",
        False,
    ),
    Setting(
        "remote.log.metadata.consume.max.batch.records",
        "max_batch_records",
        "Most records applied in one atomic view write.",
        False,
    ),
)
PROPERTIES = {setting.name: setting.field for setting in SETTINGS}


@dataclass(frozen=True)
class ClientSetting:
    """A librdkafka setting rlmm gives its consumer or producer: ``fixed`` ones cannot be overridden (the
    design depends on them), the others are defaults that the client prefixes may override."""

    client: str  # "consumer" or "producer"
    name: str
    value: object
    fixed: bool
    why: str


CLIENT_SETTINGS = (
    ClientSetting(
        "consumer",
        "group.id",
        "rlmm-assign-only",
        True,
        "the client wants one; rlmm assigns partitions itself and never joins the group",
    ),
    ClientSetting("consumer", "enable.auto.commit", False, True, "no committed offsets: the view holds the positions"),
    ClientSetting("consumer", "enable.auto.offset.store", False, True, "the view holds the positions"),
    ClientSetting(
        "consumer", "enable.partition.eof", True, True, "reaching a partition's end is how readiness is observed"
    ),
    ClientSetting(
        "consumer", "auto.offset.reset", "earliest", True, "an offset that retention removed: go on from the log start"
    ),
    ClientSetting("producer", "acks", "all", True, "as Kafka's own producer of the topic"),
    ClientSetting(
        "producer",
        "enable.idempotence",
        True,
        True,
        "as Kafka's own producer of the topic: a retried send is not written twice",
    ),
    ClientSetting(
        "consumer",
        "fetch.wait.max.ms",
        10,
        False,
        "Tansu answers a waiting fetch only when the wait ends (Kafka answers when a record arrives): a "
        "short wait keeps the write round trip short",
    ),
    ClientSetting(
        "consumer",
        "statistics.interval.ms",
        1000,
        False,
        "broker liveness (time since the last response) for the status",
    ),
    ClientSetting("producer", "linger.ms", 1, False, "a write waits at most 1 ms for others to share its batch"),
)


def _client_settings(client: str, fixed: bool) -> dict[str, object]:
    return {s.name: s.value for s in CLIENT_SETTINGS if s.client == client and s.fixed == fixed}


_CONSUMER_FIXED = _client_settings("consumer", fixed=True)
_PRODUCER_FIXED = _client_settings("producer", fixed=True)
_CONSUMER_DEFAULTS = _client_settings("consumer", fixed=False)
_PRODUCER_DEFAULTS = _client_settings("producer", fixed=False)


def _kafka_bool(value: object) -> object:
    """Kafka's BOOLEAN settings take true or false (any case), nothing else (pydantic would take yes, on, 1...)."""
    if isinstance(value, str):
        if value.lower() not in ("true", "false"):
            raise ValueError("must be true or false")
        return value.lower() == "true"
    return value


KafkaBool = Annotated[bool, BeforeValidator(_kafka_bool)]
Positive = Annotated[int, Field(ge=1)]


@pydantic.dataclasses.dataclass(frozen=True)
class RlmmConfig:
    bootstrap_servers: str
    topic: str = "__remote_log_metadata"
    num_partitions: Positive = 50
    replication_factor: Positive = 3
    retention_ms: int = -1
    min_insync_replicas: int = 2
    consume_wait_ms: Positive = 120_000
    retry_interval_ms: Positive = 100
    retry_max_timeout_ms: int = 120_000
    assign_all: KafkaBool = False
    max_batch_records: Positive = 5_000
    # False: num_partitions was not set (from_properties without it), and the count a view records is taken
    num_partitions_given: bool = True
    common_client: Mapping[str, object] = field(default_factory=dict)
    producer: Mapping[str, object] = field(default_factory=dict)
    consumer: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, bootstrap_servers: str, properties: Mapping[str, str]) -> RlmmConfig:
        """Build from Kafka-style ``name=value`` properties; an unknown name or a bad value is an error that
        names the setting as Kafka does."""
        values: dict[str, object] = {}
        clients: dict[str, dict[str, object]] = {"common_client": {}, "producer": {}, "consumer": {}}
        for name, raw in properties.items():
            if name in PROPERTIES:
                values[PROPERTIES[name]] = raw
            elif name.startswith(COMMON_CLIENT_PREFIX):
                clients["common_client"][name[len(COMMON_CLIENT_PREFIX) :]] = raw
            elif name.startswith(PRODUCER_PREFIX):
                clients["producer"][name[len(PRODUCER_PREFIX) :]] = raw
            elif name.startswith(CONSUMER_PREFIX):
                clients["consumer"][name[len(CONSUMER_PREFIX) :]] = raw
            else:
                raise ValueError(
                    f"unknown setting {name!r}; known: {', '.join(sorted(PROPERTIES))} and client "
                    f"settings under {COMMON_CLIENT_PREFIX}, {PRODUCER_PREFIX}, {CONSUMER_PREFIX}"
                )
        values["num_partitions_given"] = "num_partitions" in values
        try:
            return cls(bootstrap_servers, **values, **clients)
        except ValidationError as exc:
            raise ValueError(_problems(exc)) from None

    def _client(
        self, defaults: Mapping[str, object], specific: Mapping[str, object], fixed: Mapping[str, object]
    ) -> dict[str, object]:
        # the client's own log lines go to Python logging; they are handed over when the client is polled
        return {
            **defaults,
            "bootstrap.servers": self.bootstrap_servers,
            "logger": KAFKA_LOG,
            **self.common_client,
            **specific,
            **fixed,
        }

    def admin_config(self) -> dict[str, object]:
        return self._client({}, {}, {})

    def consumer_config(self) -> dict[str, object]:
        return self._client(_CONSUMER_DEFAULTS, self.consumer, _CONSUMER_FIXED)

    def producer_config(self) -> dict[str, object]:
        # a write gives up after consume.wait.ms, so the client need not hold the record longer
        defaults = {**_PRODUCER_DEFAULTS, "message.timeout.ms": self.consume_wait_ms}
        return self._client(defaults, self.producer, _PRODUCER_FIXED)


def parse_setting(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (a ``--set`` flag) -> (name, value)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--set expects NAME=VALUE, got {text!r}")
    return name, value


_KAFKA_NAMES = {setting.field: setting.name for setting in SETTINGS}


def _problems(exc: ValidationError) -> str:
    """pydantic's errors in one line, each under the setting's Kafka name."""
    problems = []
    for error in exc.errors():
        where = ".".join(_KAFKA_NAMES.get(str(part), str(part)) for part in error["loc"])
        problems.append(f"{where}: {error['msg'].removeprefix('Value error, ')} (got {error['input']!r})")
    return "; ".join(problems)
