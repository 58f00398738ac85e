"""Waits on the consumer say why, and end when it stops: a partition that is not ready says what it waits for
(the log, the status, GetStatus, ``rlmm query status``, ``rlmm consume --exit-when-ready --timeout``); ``rlmm
consume --connect-timeout`` gives up on a broker that does not answer; every wait ends at once when the consumer
stops, with its cause (the demo's waits on the service too); a server whose consumer stopped says so
(``consumes``, ``rlmm health``'s failure line)."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time

import grpc
import pytest
from confluent_kafka.admin import AdminClient
from rich.progress import Progress

from consumers.broker import free_port
from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from rlmm import demo
from rlmm.client.convert import topic_id_partition_pb
from rlmm.errors import ConsumerStoppedError, DemoError, ServiceStoppedError, TopicMismatchError
from rlmm.records import SegmentState, TopicIdPartition, encode_value, uuid_to_str
from rlmm.server.backend import Backend
from rlmm.state.view import View
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import client, running_server, served, stub
from tests.kafka_broker import RawProducer
from tests.test_broker_writes import segment, update

RLMM = [sys.executable, "-m", "rlmm.cli"]
TP = TopicIdPartition(bytes(range(16)), "orders", 3)
OTHER = TopicIdPartition(bytes(range(16)), "orders", 4)
UNDECODABLE = b"\xff\xfe not a remote log metadata record"
WAIT_S = 20  # a wait that ends at once ends well before this; one that waits it out answers otherwise


def text(tp: TopicIdPartition) -> str:
    return f"{uuid_to_str(tp.topic_id)}:{tp.topic}:{tp.partition}"


def eventually(condition, what: str) -> None:
    """Only so that a broken consumer fails the test instead of hanging it."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached"
        time.sleep(0.05)


def ending_with_a_quarantined_record(config: RlmmConfig) -> int:
    """Metadata partition 0 of a new topic: a segment, an undecodable record, the segment's update, another
    undecodable record. Returns the offset of the last one, which holds readiness back."""
    ensure_topic(AdminClient(config.admin_config()), config)
    seg = segment(TP, 0, 9)
    finished = update(seg, SegmentState.COPY_SEGMENT_FINISHED)
    values = [encode_value(seg), UNDECODABLE, encode_value(finished), UNDECODABLE]
    return RawProducer(config.bootstrap_servers, config.topic).produce([(0, v) for v in values])[-1]


def consume(config: RlmmConfig, view, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *RLMM,
            "consume",
            "--view",
            str(view),
            "-b",
            config.bootstrap_servers,
            f"--set=remote.log.metadata.topic.name={config.topic}",
            f"--set=remote.log.metadata.topic.num.partitions={config.num_partitions}",
            "--status-every",
            "0.5",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_partition_held_back_by_a_quarantined_record_says_what_it_waits_for(rlmm_config, tmp_path, caplog) -> None:
    config = rlmm_config(num_partitions=1)
    last = ending_with_a_quarantined_record(config)
    reason = f"waits for a record after offset {last} of metadata partition 0, which was quarantined (it does not"
    caplog.set_level(logging.INFO, logger="consumers.consumer")
    with served(tmp_path, config.bootstrap_servers, [TP], config=config) as (server, manager, _):
        consumer = manager.consumer
        eventually(lambda: consumer.not_ready() and consumer.not_ready()[0].stuck, "the partition waits")
        [waits] = consumer.not_ready()
        assert waits.partitions == [TP] and waits.reason.startswith(reason)
        status = manager.status()["metadata_partitions"]["0"]
        assert status["lag"] == 0  # all read: only the reason tells why it is not ready
        assert status["not_ready"] == {"partitions": 1, "reason": waits.reason, "examples": [text(TP)]}
        with client(server) as rlmm:
            assert not rlmm.is_ready(TP)
            [remote] = rlmm.status()["metadata_partitions"]
        assert (remote["lag"], remote["not_ready_partitions"], remote["not_ready_examples"]) == (
            0,
            1,
            [text(TP)],
        )
        assert remote["not_ready_reason"] == waits.reason
        queried = subprocess.run(
            [*RLMM, "query", "--target", f"127.0.0.1:{server.port}", "status"], capture_output=True, text=True
        )
        assert json.loads(queried.stdout)["metadata_partitions"] == [remote]
        logged = [r.getMessage() for r in caplog.records if "is not ready" in r.getMessage()]
        assert logged == [f"partition {text(TP)} is not ready: it {waits.reason}"]  # once, then each minute
        assert [r.levelname for r in caplog.records if "is not ready" in r.getMessage()] == ["WARNING"]

        RawProducer(config.bootstrap_servers, config.topic).produce([(0, encode_value(segment(TP, 10, 19)))])
        assert consumer.wait_ready([TP], timeout=WAIT_S)  # a later record read: ready, as the reason said
        assert consumer.not_ready() == [] and "not_ready" not in manager.status()["metadata_partitions"]["0"]


def test_consume_exits_when_ready_or_after_its_timeout_saying_why(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=1)
    last = ending_with_a_quarantined_record(config)
    done = consume(config, tmp_path / "view", "--partition", text(TP), "--exit-when-ready", "--timeout", "2")
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1].startswith(
        f"error: after --timeout (2 s), partition {text(TP)} is not ready: it waits for a record after "
        f"offset {last} of metadata partition 0, which was quarantined"
    )
    assert f"partition {text(TP)} is not ready: it waits" in done.stderr  # the log line too
    stopped = json.loads(done.stdout.splitlines()[-1])
    assert stopped["event"] == "stopped" and stopped["metadata_partitions"]["0"]["not_ready"]["partitions"] == 1

    RawProducer(config.bootstrap_servers, config.topic).produce([(0, encode_value(segment(TP, 10, 19)))])
    done = consume(config, tmp_path / "view", "--exit-when-ready", "--timeout", "60")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["pending_partitions"] == 0


def test_consume_gives_up_on_a_broker_that_does_not_answer_within_its_connect_timeout(rlmm_config, tmp_path) -> None:
    config = dataclasses.replace(rlmm_config(), bootstrap_servers=f"127.0.0.1:{free_port()}")
    done = consume(config, tmp_path / "view", "--connect-timeout", "3")
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [done.stderr.splitlines()[-1]] and errors[0].startswith(
        f"error: the metadata topic was not reached within --connect-timeout (3 s): no Kafka broker of "
        f"{config.bootstrap_servers} has answered for"
    )
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["event"] == "stopped"


def test_every_wait_ends_at_once_with_the_cause_when_the_consumer_failed(rlmm_config, tmp_path) -> None:
    """A topic of 3 partitions where 5 are configured: the consumer stops at its start. Waits begun before or
    after raise its failure at once, instead of waiting out their timeouts."""
    existing = rlmm_config(num_partitions=3)
    ensure_topic(AdminClient(existing.admin_config()), existing)
    config = dataclasses.replace(existing, num_partitions=5)
    with served(tmp_path, config.bootstrap_servers, [TP], config=config) as (server, manager, view):
        consumer = manager.consumer
        with pytest.raises(ConsumerStoppedError, match="has 3 partitions but") as stopped:
            consumer.wait_ready(None, timeout=WAIT_S)
        assert isinstance(stopped.value.__cause__, TopicMismatchError)
        for wait in (
            lambda: consumer.wait_ready([TP], timeout=WAIT_S),
            lambda: consumer.wait_initialized(WAIT_S),
            lambda: manager.on_partition_leadership_changes([OTHER], []),  # waited 5 s, then returned
            lambda: manager.wait_positions({0: 0}, WAIT_S),  # a read-after
        ):
            with pytest.raises(ConsumerStoppedError, match="has 3 partitions but"):
                wait()
        with pytest.raises(TopicMismatchError):  # a write's wait for its record
            manager.wait_applied(0, 0, WAIT_S)

        channel, raw = stub(server)
        with channel, pytest.raises(grpc.RpcError) as refused:
            request = api.IsReadyRequest(topic_id_partition=topic_id_partition_pb(TP))
            raw.IsReady(request, metadata=(("rlmm-read-after", "0:0"),), timeout=WAIT_S)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "CONSUMER_STOPPED" in str(refused.value.trailing_metadata())  # not NOT_CAUGHT_UP after waiting

        backend = Backend(view, manager)
        assert not backend.consumes and not backend.status().consumes  # what the "serving" line says
        health = subprocess.run(
            [*RLMM, "health", "--target", f"127.0.0.1:{server.port}"], capture_output=True, text=True, timeout=60
        )
        assert (health.returncode, health.stdout) == (1, "NOT_SERVING\n")
        assert health.stderr.startswith(
            f"error: 127.0.0.1:{server.port} is NOT_SERVING: TopicMismatchError: the metadata topic "
            f"{config.topic!r} has 3 partitions but remote.log.metadata.topic.num.partitions is 5"
        )
        assert len(health.stderr.splitlines()) == 1
        as_json = subprocess.run(
            [*RLMM, "health", "--target", f"127.0.0.1:{server.port}", "--json"], capture_output=True, text=True
        )
        assert json.loads(as_json.stdout)["failure"].startswith("TopicMismatchError: the metadata topic")

        with client(server) as rlmm:  # the demo's waits on such a service
            for wait in (
                lambda: demo._wait_topic(rlmm, config, 5, WAIT_S),
                lambda: demo._wait_ingest(Progress(), rlmm, 10, WAIT_S),
                lambda: demo._wait_ready(Progress(), rlmm, [TP], WAIT_S),
            ):
                with pytest.raises(DemoError, match="has 3 partitions but"):
                    wait()


def test_a_wait_under_way_ends_when_the_consumer_is_stopped_and_the_status_says_so(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=1)
    ensure_topic(AdminClient(config.admin_config()), config)
    RawProducer(config.bootstrap_servers, config.topic).produce([(0, encode_value(segment(TP, 0, 9)))])
    with View(tmp_path / "view") as view:
        manager = RemoteLogMetadataManager(view, config, [TP])
        manager.consumer.hold({0: 0})  # nothing is read: the partition never becomes ready
        manager.start()
        try:
            with running_server(view, manager) as server, client(server) as rlmm:
                outcome: list[object] = []

                def wait() -> None:
                    try:
                        outcome.append(manager.consumer.wait_ready([TP], timeout=WAIT_S))
                    except ServiceStoppedError as exc:
                        outcome.append(exc)

                waiter = threading.Thread(target=wait)
                waiter.start()
                assert manager.consumer.wait_initialized(WAIT_S)
                assert rlmm.status()["consumes"]
                manager.consumer.stop()
                waiter.join(WAIT_S * 2)
                assert [type(o) for o in outcome] == [ServiceStoppedError]  # not False, after its timeout
                with pytest.raises(ServiceStoppedError):
                    manager.wait_positions({0: 5}, WAIT_S)
                status = rlmm.status()
                assert not status["consumes"] and not status["serving"]
                assert status["failure"].startswith("ServiceStoppedError: the metadata consumer was stopped")
        finally:
            manager.close()
