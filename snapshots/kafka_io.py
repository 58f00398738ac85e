"""Reading the metadata topic with confluent-kafka: end offsets fixed at job start, and offset ranges.

End offsets come from the high watermark of a fetch (reading each partition to ``PARTITION_EOF`` from
its reported end), not from ListOffsets alone: Tansu's ListOffsets answer is the last batch's base
offset + 1; on Kafka both agree."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition

EOF_CODE = KafkaError._PARTITION_EOF  # noqa: SLF001  (librdkafka names its local error codes so)
log = logging.getLogger(__name__)


class _DebugLog:
    """librdkafka's log lines, at DEBUG: a broker that cannot be reached would otherwise print a line per
    connection attempt; the command fails with one error that says so."""

    def log(self, level: int, msg: str, *args: object) -> None:
        log.debug(msg, *args)


def _consumer(bootstrap: str, extra: dict | None = None) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"rlmm-snapshot-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 10,
        "socket.timeout.ms": 10000,
        "logger": _DebugLog(),
    }
    conf.update(extra or {})
    return Consumer(conf)


def num_partitions(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    """Partitions of an existing topic (a plain listing: naming the topic would create it on Tansu)."""
    consumer = _consumer(bootstrap)
    try:
        topics = consumer.list_topics(timeout=timeout).topics
        if topic not in topics:
            raise ValueError(f"topic {topic!r} does not exist at {bootstrap}")
        return len(topics[topic].partitions)
    finally:
        consumer.close()


def topic_id(bootstrap: str, topic: str, timeout: float = 10.0) -> str | None:
    """Kafka's id of an existing topic, None where the broker keeps no ids. A topic deleted and created again
    under the same name has a new id: a snapshot records it so that nothing folds one topic's records on
    another's state."""
    from confluent_kafka.admin import AdminClient

    from consumers.topic import describe_topic

    identity = describe_topic(AdminClient({"bootstrap.servers": bootstrap, "logger": _DebugLog()}), topic, timeout)
    if identity is None:
        raise ValueError(f"topic {topic!r} does not exist at {bootstrap}")
    return identity.topic_id


def refuse_changed_topic(bootstrap: str, topic: str, read_from: str | None) -> None:
    """Raises ``SnapshotError`` when the topic read from (id ``read_from``, described before reading it) was
    deleted and created again while it was read: what was read may mix the two."""
    from rlmm.errors import SnapshotError

    now = topic_id(bootstrap, topic)
    if now != read_from:
        raise SnapshotError(
            f"the topic {topic!r} at {bootstrap} changed while it was read (topic id {read_from}, now {now}): "
            f"it was deleted and created again; read it again"
        )


def end_offsets(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, int]:
    """The end offset (next offset to be written) of every partition, now."""
    consumer = _consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, mp, OFFSET_END) for mp in range(partitions)])
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while len(ends) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no end offset for partitions {sorted(set(range(partitions)) - ends.keys())}")
            for message in consumer.consume(1000, timeout=0.2):
                error = message.error()
                if error is None:
                    continue
                if error.code() == EOF_CODE:
                    ends[message.partition()] = message.offset()
                elif error.fatal():
                    raise RuntimeError(str(error))
        return ends
    finally:
        consumer.close()


def read_range(
    bootstrap: str, topic: str, mp: int, start: int, end: int, *, with_timestamp: bool = False, timeout: float = 120.0
) -> Iterator[tuple]:
    """Records of one partition with ``start <= offset < end``: (partition, offset, value[, timestamp])."""
    return read_ranges(bootstrap, topic, [(mp, start, end)], with_timestamp=with_timestamp, timeout=timeout)


def read_ranges(
    bootstrap: str,
    topic: str,
    ranges: list[tuple[int, int, int]],
    *,
    with_timestamp: bool = False,
    timeout: float = 120.0,
) -> Iterator[tuple]:
    """Records of every (partition, start, end) range with ``start <= offset < end``, through one consumer:
    (partition, offset, value[, timestamp]), each partition's in offset order, partitions interleaved."""
    pending = {mp: (start, end) for mp, start, end in ranges if end > start}
    if not pending:
        return
    consumer = _consumer(bootstrap)

    def done(mp: int) -> None:
        del pending[mp]
        consumer.pause([TopicPartition(topic, mp)])

    try:
        consumer.assign([TopicPartition(topic, mp, start) for mp, (start, _) in pending.items()])
        deadline = time.monotonic() + timeout
        while pending:
            messages = consumer.consume(5000, timeout=0.1)
            if messages:
                deadline = time.monotonic() + timeout
            elif time.monotonic() > deadline:
                missing = ", ".join(f"{mp} before offset {end}" for mp, (_, end) in sorted(pending.items()))
                raise TimeoutError(f"{topic}: no record for {timeout} s from partitions {missing}")
            for message in messages:
                mp = message.partition()
                bounds = pending.get(mp)
                if bounds is None:
                    continue
                start, end = bounds
                error = message.error()
                if error is not None:
                    if error.code() == EOF_CODE:
                        if message.offset() >= end:
                            done(mp)
                    elif error.fatal():
                        raise RuntimeError(str(error))
                    continue
                offset = message.offset()
                if offset >= end:
                    done(mp)
                    continue
                if offset < start:
                    continue
                if with_timestamp:
                    yield mp, offset, message.value(), message.timestamp()[1]
                else:
                    yield mp, offset, message.value()
                if offset == end - 1:
                    done(mp)
    finally:
        consumer.close()
