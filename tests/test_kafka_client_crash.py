"""The Kafka client crashing under the service: librdkafka (confluent-kafka 2.16.1) dies of SIGSEGV when the
metadata topic is deleted while it fetches from the dev broker. The consumer's client runs in a child process
(``consumers/client_process.py``), so ``serve`` goes on answering, NOT_SERVING with the cause, ``consume`` exits
1 with it, nothing acknowledged is lost, and ``--reset`` gives what a clean replay gives. Real broker, real
processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from consumers.clients import ConfluentClients
from consumers.config import RlmmConfig
from consumers.consumer import CLIENT_RESTARTS_ALLOWED, MetadataConsumer
from consumers.topic import ensure_topic
from consumers.watcher import OffsetWatcher
from rlmm.client import RlmmClient
from rlmm.errors import KafkaClientCrashed, RlmmError
from rlmm.records import encode_value, metadata_partition
from rlmm.records.uuid import uuid_to_str
from rlmm.state.view import View
from tests.grpc_support import finished, new_tp, segment
from tests.kafka_broker import RawProducer
from tests.kafka_plugin_support import RlmmServe, topic_name
from tests.test_broker_topic_change import contents
from tests.test_cli_errors import RLMM

WAIT_S = 60.0
PARTITIONS = 2
AGAIN_PARTITIONS = 4  # Tansu creates a topic a producer names with 4 partitions

PLAIN_CONSUMER = """
import sys, time
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
servers, topic = sys.argv[1:]
consumer = Consumer({"bootstrap.servers": servers, "group.id": "repro", "logger": None, "log_level": 0})
consumer.assign([TopicPartition(topic, 0, 0)])
for _ in range(5):
    consumer.poll(0.2)
admin = AdminClient({"bootstrap.servers": servers})
for done in admin.delete_topics([topic]).values():
    done.result()
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    consumer.poll(0.2)
print("survived")
"""


def delete_topic(bootstrap_servers: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for done in admin.delete_topics([topic]).values():
        done.result()


def produce_again(config: RlmmConfig, records: list[tuple[int, bytes]]) -> None:
    """Produce into the topic as it is now, created if missing. Tansu sometimes refuses records ("Unknown broker
    error") on a topic it created for a producer right after a deletion: then the topic is made once more."""
    admin = AdminClient(config.admin_config())
    for attempt in range(3):
        ensure_topic(admin, config)
        try:
            RawProducer(config.bootstrap_servers, config.topic).produce(records)
            return
        except AssertionError:
            if attempt == 2:
                raise
            delete_topic(config.bootstrap_servers, config.topic)


def test_librdkafka_crashes_when_the_topic_is_deleted_under_a_plain_consumer(kafka) -> None:
    """The reproducer: a plain confluent-kafka consumer of a topic deleted under it dies of SIGSEGV (in
    librdkafka's KIP-951 metadata update: the dev broker answers the Fetch with the zero topic id and leader tags,
    and librdkafka looks the topic up by a name it never set). If this fails, the client was fixed: see
    docs/operations.md, "The Kafka client crashed"."""
    config = RlmmConfig(kafka.bootstrap_servers, topic=topic_name("crash"), num_partitions=1, replication_factor=1)
    ensure_topic(AdminClient(config.admin_config()), config)
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_CONSUMER, kafka.bootstrap_servers, config.topic],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stdout, done.stderr[-2000:])


def test_a_crashed_client_is_replaced_while_the_topic_stays_and_a_fourth_crash_stops(rlmm_config, tmp_path) -> None:
    """A crash of the client (here a SIGABRT sent to its process) on a topic that is still the view's: the consumer
    goes on with a new client from where the view stands, and applies what is produced after; the fourth crash
    within the window stops it with the cause, in this process, which goes on."""
    config = rlmm_config(num_partitions=PARTITIONS, assign_all=True)
    ensure_topic(AdminClient(config.admin_config()), config)
    clients = RecordingClients(config)
    tp = new_tp()
    mp = metadata_partition(tp.topic_id, tp.partition, PARTITIONS)
    with View(tmp_path / "view") as view:
        consumer = MetadataConsumer(view, config, OffsetWatcher(), clients, [tp])
        consumer.start()
        try:
            assert consumer.wait_ready(None, timeout=WAIT_S)
            for crash in range(1, CLIENT_RESTARTS_ALLOWED + 1):
                os.kill(clients.pids[-1], signal.SIGABRT)
                wait_for(lambda n=crash: len(clients.pids) > n, f"a new client after crash {crash}")
                assert consumer.wait_ready(None, timeout=WAIT_S), consumer.status()
                assert consumer.failure is None and consumer.client_restarts == crash
                seg = segment(tp, crash * 100, crash * 100 + 99)
                RawProducer(config.bootstrap_servers, config.topic).produce([(mp, encode_value(seg))])
                wait_for(lambda s=seg: s in view.queries.list_remote_log_segments(tp), "the segment applied")
            os.kill(clients.pids[-1], signal.SIGABRT)
            wait_for(lambda: consumer.failure is not None, "the consumer to stop")
            assert isinstance(consumer.failure, KafkaClientCrashed), consumer.failure
            assert "killed by SIGABRT" in str(consumer.failure)
            assert f"crashed {CLIENT_RESTARTS_ALLOWED + 1} times" in str(consumer.failure)
            assert not consumer.initialized
            assert consumer.status()["failure"] is not None
        finally:
            consumer.stop()


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        time.sleep(0.05)


class RecordingClients(ConfluentClients):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.pids: list[int] = []

    def consumer(self, on_error, on_stats):
        client = super().consumer(on_error, on_stats)
        self.pids.append(client.pid)
        return client


class Writer(threading.Thread):
    """Writes segments one after another until stopped; keeps those whose write was acknowledged."""

    def __init__(self, address: str, tp) -> None:
        super().__init__(daemon=True)
        self.client = RlmmClient(address, write_timeout=20, retry_for=0)
        self.tp = tp
        self.acknowledged: list = []
        self.refused: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        offset = 0
        while not self.stop.is_set():
            seg = segment(self.tp, offset, offset + 9)
            offset += 10
            try:
                self.client.add_remote_log_segment_metadata(seg)
                self.client.update_remote_log_segment_metadata(finished(seg))
            except RlmmError as exc:
                self.refused.append(str(exc))
                time.sleep(0.1)
                continue
            self.acknowledged.append(seg)


STOPPED_BECAUSE = re.compile(
    r"the broker no longer knows the metadata topic|now has \d+ partitions|now has the topic id|"
    r"the Kafka client \(librdkafka\) crashed"
)


def consumer_errors(log: Path) -> list[dict]:
    """The ERROR lines of the consumer in a JSON log (a refused call's warning may quote its failure too)."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line["logger"] == "consumers.consumer" and line["level"] == "error"]


def initialized(consume: subprocess.Popen) -> bool:
    """Read ``rlmm consume``'s status lines until it says its consumer is initialized (False if it ends first)."""
    for line in consume.stdout:
        if json.loads(line).get("initialized"):
            return True
    return False


def consume_command(
    view: Path, bootstrap_servers: str, topic: str, *flags: str, partitions: int = PARTITIONS
) -> list[str]:
    return [
        *RLMM,
        "consume",
        "--view",
        str(view),
        "-b",
        bootstrap_servers,
        "--set",
        f"remote.log.metadata.topic.name={topic}",
        "--set",
        f"remote.log.metadata.topic.num.partitions={partitions}",
        "--set",
        "remote.log.metadata.topic.replication.factor=1",
        "--set",
        "remote.log.metadata.topic.min.insync.replicas=1",
        "--status-every",
        "0.5",
        *flags,
    ]


def test_serve_and_consume_outlive_the_topic_deleted_under_them(kafka, tmp_path) -> None:
    topic, tp = topic_name("deleted"), new_tp("crash", 0)
    partition = f"{uuid_to_str(tp.topic_id)}:{tp.topic}:{tp.partition}"
    with RlmmServe(tmp_path, kafka.bootstrap_servers, topic, PARTITIONS) as serve:
        rlmm = RlmmClient(serve.address)
        rlmm.on_partition_leadership_changes([tp], [])
        assert rlmm.wait_ready([tp], timeout=WAIT_S)
        consume = subprocess.Popen(
            consume_command(tmp_path / "consumed", kafka.bootstrap_servers, topic, "--partition", partition),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert initialized(consume), consume.stderr.read()
        writer = Writer(serve.address, tp)
        writer.start()
        try:
            while len(writer.acknowledged) < 5 and writer.is_alive():
                time.sleep(0.05)
            delete_topic(kafka.bootstrap_servers, topic)  # writes in flight (on Tansu they create it again)
            deadline = time.monotonic() + WAIT_S
            while rlmm.health() == "SERVING" and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            writer.stop.set()
            writer.join(WAIT_S)
        try:
            out, err = consume.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            consume.kill()
            out, err = consume.communicate()

        assert serve.process.poll() is None, serve.log_tail()  # it lives, and says why it does not serve
        assert rlmm.health() == "NOT_SERVING"
        failure = rlmm.status()["failure"]
        assert STOPPED_BECAUSE.search(failure), failure
        assert len(consumer_errors(serve.log)) == 1, serve.log_tail()  # one line says why
        rlmm.close()

        assert consume.returncode == 1, (consume.returncode, err[-3000:])  # not a silent -11
        assert err.splitlines()[-1].startswith("error: the metadata consumer stopped: "), err[-3000:]
        assert STOPPED_BECAUSE.search(err.splitlines()[-1]), err[-3000:]
        assert json.loads(out.splitlines()[-1])["event"] == "stopped"
    assert writer.acknowledged, writer.refused

    with View(serve.view, read_only=True) as view:  # what was acknowledged was applied
        held = {s.segment_id for s in view.queries.list_remote_log_segments(tp)}
    assert {s.segment_id for s in writer.acknowledged} <= held

    # the topic as it is now (Tansu created it again with 4 partitions for the writes in flight, or it is
    # missing and consume creates it), with records of another history: --reset equals a clean replay
    again = RlmmConfig(kafka.bootstrap_servers, topic=topic, num_partitions=AGAIN_PARTITIONS, replication_factor=1)
    seg = segment(tp, 500, 599)
    mp = metadata_partition(tp.topic_id, tp.partition, AGAIN_PARTITIONS)
    produce_again(again, [(mp, encode_value(seg)), (mp, encode_value(finished(seg)))])
    reset = subprocess.run(
        consume_command(
            serve.view, kafka.bootstrap_servers, topic, "--reset", "--exit-when-ready", partitions=AGAIN_PARTITIONS
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reset.returncode == 0, reset.stderr[-3000:]
    clean = subprocess.run(
        consume_command(
            tmp_path / "clean",
            kafka.bootstrap_servers,
            topic,
            "--partition",
            partition,
            "--exit-when-ready",
            partitions=AGAIN_PARTITIONS,
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    with View(serve.view, read_only=True) as after_reset, View(tmp_path / "clean", read_only=True) as replayed:
        assert contents(after_reset) == contents(replayed)
        assert 500 in [s.start_offset for s in replayed.queries.list_remote_log_segments(tp)]
