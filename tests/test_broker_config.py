"""Settings under Kafka's names and defaults; what rlmm's clients are always given; the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from consumers.config import RlmmConfig
from consumers.service import parse_partition
from consumers.topic import describe_topic
from rlmm.records import TopicIdPartition, uuid_from_str
from rlmm.records.uuid import uuid_to_str
from rlmm.state.view import View


def test_defaults_are_kafkas() -> None:
    config = RlmmConfig("broker:9092")
    assert (
        config.topic,
        config.num_partitions,
        config.replication_factor,
        config.retention_ms,
        config.consume_wait_ms,
        config.retry_interval_ms,
        config.retry_max_timeout_ms,
    ) == ("__remote_log_metadata", 50, 3, -1, 120_000, 100, 120_000)


def test_properties_use_kafkas_names_and_prefixes() -> None:
    config = RlmmConfig.from_properties(
        "b:1",
        {
            "remote.log.metadata.topic.num.partitions": "8",
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.consume.wait.ms": "5000",
            "remote.log.metadata.consume.all.partitions": "true",
            "remote.log.metadata.common.client.security.protocol": "PLAINTEXT",
            "remote.log.metadata.consumer.fetch.wait.max.ms": "100",
            "remote.log.metadata.consumer.enable.auto.commit": "true",
            "remote.log.metadata.producer.linger.ms": "0",
            "remote.log.metadata.producer.acks": "1",
        },
    )
    assert (config.num_partitions, config.replication_factor, config.consume_wait_ms, config.assign_all) == (
        8,
        1,
        5000,
        True,
    )
    consumer, producer = config.consumer_config(), config.producer_config()
    assert consumer["security.protocol"] == producer["security.protocol"] == "PLAINTEXT"
    assert consumer["fetch.wait.max.ms"] == "100" and producer["linger.ms"] == "0"
    # what the design depends on cannot be changed
    assert consumer["enable.auto.commit"] is False and consumer["enable.partition.eof"] is True
    assert producer["acks"] == "all" and producer["enable.idempotence"] is True
    assert producer["message.timeout.ms"] == 5000


@pytest.mark.parametrize(
    "properties, message",
    [
        ({"remote.log.metadata.topic.partitions": "8"}, "unknown setting 'remote.log.metadata.topic.partitions'"),
        (
            {"remote.log.metadata.topic.num.partitions": "many"},
            "num.partitions: Input should be a valid integer.*got 'many'",
        ),
        (
            {"remote.log.metadata.topic.num.partitions": "0"},
            "num.partitions: Input should be greater than or equal to 1",
        ),
        (
            {"remote.log.metadata.consume.all.partitions": "yes"},
            "all.partitions: must be true or false \\(got 'yes'\\)",
        ),
    ],
)
def test_bad_properties_are_refused(properties: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RlmmConfig.from_properties("b:1", properties)


def test_partition_arguments() -> None:
    topic_id = "7Im3pooKyYT3GrJH6It1kQ"
    assert parse_partition(f"{topic_id}:clicks-0:10") == TopicIdPartition(uuid_from_str(topic_id), "clicks-0", 10)
    with pytest.raises(ValueError):
        parse_partition("clicks-0:10")
    for bad in ("x", "-1", "2147483648", "1.0", "\u0663"):  # the last: an Arabic-Indic digit, which int() takes
        with pytest.raises(ValueError, match=f"is '{bad}': give a number from 0 to 2147483647"):
            parse_partition(f"{topic_id}:clicks-0:{bad}")
    assert parse_partition(f"{topic_id}:a:b:2147483647").partition == 2147483647


def test_a_bad_partition_is_refused_before_any_call() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "query", "--retry-for", "0", "ready", "7Im3pooKyYT3GrJH6It1kQ:clicks-0:-1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "give a number from 0 to 2147483647" in done.stderr
    assert "Traceback" not in done.stderr and "no answer from" not in done.stderr


def test_help_of_the_kafka_commands() -> None:
    for command in ("consume", "quarantine", "broker"):
        run = subprocess.run([sys.executable, "-m", "rlmm.cli", command, "--help"], capture_output=True, text=True)
        assert run.returncode == 0 and "Usage" in run.stdout


def test_consume_reads_the_settings_of_serve(rlmm_config, tmp_path) -> None:
    """One settings model: ``rlmm consume`` takes the TOML file and RLMM_ variables ``rlmm serve`` reads."""
    config = rlmm_config()
    topic_id = "7Im3pooKyYT3GrJH6It1kQ"
    settings = tmp_path / "rlmm.toml"
    settings.write_text(
        f'view = "{tmp_path / "view"}"\n'
        f'partitions = ["{topic_id}:clicks:0", "{topic_id}:clicks:1"]\n'
        'listen = "127.0.0.1:1"  # serve\'s own: consume leaves it\n'
        "[kafka]\n"
        f'"remote.log.metadata.topic.name" = "{config.topic}"\n'
        '"remote.log.metadata.topic.num.partitions" = 3\n'
        '"remote.log.metadata.topic.replication.factor" = 1\n'
        '"remote.log.metadata.topic.min.insync.replicas" = 1\n'
    )
    command = [sys.executable, "-m", "rlmm.cli", "consume", "--config", str(settings), "--exit-when-ready"]
    environment = {**os.environ, "RLMM_BOOTSTRAP_SERVERS": config.bootstrap_servers, "RLMM_LOG_FORMAT": "json"}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["event"] == "started" and lines[0]["registered"] == 2
    assert lines[-1]["event"] == "stopped"
    assert all(json.loads(line) for line in done.stderr.splitlines())  # RLMM_LOG_FORMAT=json: JSON log lines
    with View(tmp_path / "view", read_only=True) as view:
        assert sorted(tp.partition for tp, _, _ in view.partitions()) == [0, 1]

    refused = subprocess.run(
        [*command, "--set", "remote.log.metadata.topic.num.partitions=0"],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert refused.returncode == 2
    assert "remote.log.metadata.topic.num.partitions: Input should be greater than or equal to 1" in refused.stderr
    unset = subprocess.run(command[:4], capture_output=True, text=True, env={**os.environ, "RLMM_CONFIG": ""})
    assert unset.returncode == 2 and "view: Field required" in unset.stderr


def test_topic_ids_are_in_kafkas_text_form(kafka) -> None:
    """librdkafka prints a topic id in standard base64 ('+', '/'), Kafka (Uuid.toString) in URL-safe base64:
    rlmm stores, compares and shows Kafka's. About half of all ids hold a '+' or a '/': ten topics."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    topics = [f"rlmm-topic-id-{os.getpid()}-{i}" for i in range(10)]
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)
    try:
        for topic in topics:
            described = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
            raw = described.get_most_significant_bits().to_bytes(8, "big", signed=True)
            raw += described.get_least_significant_bits().to_bytes(8, "big", signed=True)
            identity = describe_topic(admin, topic, timeout=30)
            assert identity is not None and identity.topic_id == uuid_to_str(raw), (topic, str(described))
    finally:
        admin.delete_topics(topics)
