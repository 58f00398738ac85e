"""The metadata topic, managed as Kafka's ``TopicBasedRemoteLogMetadataManager`` does: created with the
configured partitions, replication, retention and ``cleanup.policy=delete`` when it is missing; an
existing topic whose partition count differs from the configured one is refused, since the
partitioner would then put records where other readers and writers do not look."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from consumers.config import RlmmConfig
from rlmm.errors import TopicMismatchError
from rlmm.records.uuid import uuid_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicIdentity:
    topic_id: str | None  # Kafka's text form; None where the broker gives none
    partitions: int


_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID: the broker does not know topic ids


def describe_topic(admin: AdminClient, topic: str, timeout: float) -> TopicIdentity | None:
    """The topic's id and partition count; None when the broker does not know the topic. Raises
    ``KafkaException`` when the broker cannot be asked. (A describe never creates the topic, on Tansu either.)"""
    try:
        description = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise
    except TimeoutError:
        timed_out = KafkaError(KafkaError._TIMED_OUT, f"no description of {topic} within {timeout} s")
        raise KafkaException(timed_out) from None
    # librdkafka prints a Uuid in standard base64 ('+', '/'): Kafka's own form is URL-safe
    topic_id = uuid_text(str(description.topic_id)) if description.topic_id is not None else _NO_TOPIC_ID
    return TopicIdentity(None if topic_id == _NO_TOPIC_ID else topic_id, len(description.partitions))


def topic_configs(config: RlmmConfig) -> dict[str, str]:
    return {
        "retention.ms": str(config.retention_ms),
        "cleanup.policy": "delete",
        "min.insync.replicas": str(config.min_insync_replicas),
        "remote.storage.enable": "false",
    }


def existing_partition_count(admin: AdminClient, topic: str, timeout: float) -> int | None:
    # A metadata request that names the topic would create it on Tansu (with 4 partitions): list all.
    metadata = admin.list_topics(timeout=timeout).topics.get(topic)
    if metadata is None:
        return None
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return len(metadata.partitions)


def ensure_topic(admin: AdminClient, config: RlmmConfig, timeout: float = 10.0) -> None:
    """Create the metadata topic if it is missing, then check its partition count.

    Raises ``TopicMismatchError`` for a topic this configuration cannot use, ``KafkaException`` for
    what may pass (broker unreachable, topic not ready yet)."""
    count = existing_partition_count(admin, config.topic, timeout)
    if count is None:
        topic = NewTopic(config.topic, config.num_partitions, config.replication_factor, config=topic_configs(config))
        try:
            admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)[config.topic].result()
            log.info("created the metadata topic %s with %d partitions", config.topic, config.num_partitions)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        count = existing_partition_count(admin, config.topic, timeout)
        if count is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{config.topic} not listed yet"))
    if count != config.num_partitions:
        raise TopicMismatchError(
            f"the metadata topic {config.topic!r} has {count} partitions but remote.log.metadata.topic.num.partitions "
            f"is {config.num_partitions}: records would go to other partitions than the ones other brokers read and "
            f"write. Set remote.log.metadata.topic.num.partitions={count} (Kafka refuses to start here too)."
        )
