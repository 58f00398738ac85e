"""The metadata topic changing under a view: a broker that lost it (Tansu's memory engine, restarted), a
topic deleted and created again, a view whose offsets run past the topic's end. The consumer stops before
it applies anything of the other history, the server turns NOT_SERVING and refuses reads, the status says
what was seen and what to do, and ``reset_view`` (``--reset``) starts a fresh view with the same
registrations. Real brokers, real topics."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from consumers import view_state
from consumers.broker import free_port
from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from rlmm.errors import RefusedError, SnapshotError, TopicChangedError, ViewOfAnotherTopicError
from rlmm.records import SegmentState, TopicIdPartition, encode_value, metadata_partition
from rlmm.server.backend import Backend
from rlmm.state import keys as K
from rlmm.state.view import CONSUMER_STATE_PREFIX, View, reset_view
from snapshots.format import write_snapshot
from snapshots.preflight import check_build_inputs
from snapshots.restore import export, restore
from tests.grpc_support import client, running_server
from tests.kafka_broker import RawProducer, start_broker
from tests.test_broker_writes import segment, update
from tests.test_cli_errors import RLMM
from tests.test_grpc_workers import WAIT_S, serve

TP = TopicIdPartition(bytes(range(16)), "orders", 3)
PARTITIONS = 3
MP = metadata_partition(TP.topic_id, TP.partition, PARTITIONS)


def finished_records(tp: TopicIdPartition, segments: int, base: int = 0) -> list[tuple[int, bytes]]:
    """Records of ``segments`` contiguous segments, each added then finished, for ``tp``'s metadata partition."""
    records = []
    for i in range(segments):
        seg = segment(tp, base + i * 10, base + i * 10 + 9)
        records += [(MP, encode_value(seg)), (MP, encode_value(update(seg, SegmentState.COPY_SEGMENT_FINISHED)))]
    return records


def contents(view: View) -> dict[str, list]:
    """What the view holds, but the holders of its registrations (written when a partition is registered)."""
    holders = CONSUMER_STATE_PREFIX + view_state.HOLDERS
    return {cf: [(k, v) for k, v in view.items(cf) if not k.startswith(holders)] for cf in K.COLUMN_FAMILIES}


def view_applied_up_to(path, last_offset: int, segments: int) -> None:
    """A view that applied ``segments`` finished segments of TP at offsets ending at ``last_offset``, TP ready."""
    records = finished_records(TP, segments)
    with View(path) as view, view.batch() as batch:
        batch.assign(TP)
        for offset, (mp, value) in zip(range(last_offset - len(records) + 1, last_offset + 1), records):
            batch.apply(mp, offset, value)
        batch.mark_ready(TP)


def wait_failed(rlmm: RemoteLogMetadataManager, timeout: float = 30) -> BaseException | None:
    deadline = time.monotonic() + timeout
    while rlmm.consumer.failure is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return rlmm.consumer.failure


def assert_stopped_unmixed(rlmm: RemoteLogMetadataManager, view: View, before: dict, *kinds: str) -> None:
    failure = wait_failed(rlmm)
    assert isinstance(failure, TopicChangedError), failure
    assert failure.kind in kinds and dict(rlmm.consumer.topic_changes) == {failure.kind: 1}
    assert "rlmm serve --reset" in str(failure) and "rlmm snapshot restore" in str(failure)
    assert contents(view) == before  # nothing of the other history was applied
    backend = Backend(view, rlmm)
    assert not backend.serving()
    assert "TopicChangedError" in backend.status().failure and not backend.status().consumes
    with pytest.raises(ViewOfAnotherTopicError, match="answers no reads nor writes until its view is rebuilt"):
        backend.queries.is_ready(TP)
    with pytest.raises(ViewOfAnotherTopicError, match="TopicChangedError: .*rlmm serve --reset"):
        rlmm.add_remote_log_segment_metadata(segment(TP, 5000, 5009))  # not "not ready": retrying cannot help


def view_of_a_topic_created_again(config: RlmmConfig, path: Path) -> str | None:
    """A view that applied three segments of TP from the topic, which was then deleted and created again with six
    others (more records than the view applied: no offset goes backwards); returns the topic id the view keeps.
    (The topic is not deleted under a running consumer: on Tansu that crashes librdkafka 2.16.1 in its metadata
    cache.)"""
    admin = AdminClient(config.admin_config())
    with View(path) as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        RawProducer(config.bootstrap_servers, config.topic).produce(finished_records(TP, 3))
        rlmm.wait_applied(MP, 5, timeout=30)
        topic_id = view_state.topic_id_of(view.consumer_state())
    admin.delete_topics([config.topic])[config.topic].result(10)
    ensure_topic(admin, config)
    RawProducer(config.bootstrap_servers, config.topic).produce(finished_records(TP, 6, base=1000))
    return topic_id


def test_a_broker_that_lost_the_topic(rlmm_config, tmp_path) -> None:
    """The broker restarts empty; the topic comes back with two records where the view had applied six."""
    port = free_port()
    config = dataclasses.replace(rlmm_config(num_partitions=PARTITIONS), bootstrap_servers=f"127.0.0.1:{port}")
    broker = start_broker(tmp_path, port)
    try:
        with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
            assert rlmm.consumer.wait_ready([TP], timeout=30)
            for record in finished_records(TP, 3):
                RawProducer(config.bootstrap_servers, config.topic).produce([record])
            rlmm.wait_applied(MP, 5, timeout=30)
            before = contents(view)
            broker.stop()
            broker = start_broker(tmp_path, port)
            ensure_topic(AdminClient(config.admin_config()), config)
            RawProducer(config.bootstrap_servers, config.topic).produce(finished_records(TP, 1, base=1000))
            assert_stopped_unmixed(
                rlmm, view, before, "topic_id_changed", "partition_count_changed", "offsets_backwards"
            )
    finally:
        broker.stop()


def test_a_topic_deleted_and_created_again_with_more_records(rlmm_config, tmp_path) -> None:
    """While the service was down, the topic was deleted and created again, and now holds more records
    than the view applied: only the topic id tells the histories apart (the consumer would otherwise apply
    the new records past its position on top of the old ones)."""
    config = rlmm_config(num_partitions=PARTITIONS)
    view_of_a_topic_created_again(config, tmp_path / "view")
    with View(tmp_path / "view") as view:
        before = contents(view)
        with RemoteLogMetadataManager(view, config, [TP]) as rlmm:
            assert_stopped_unmixed(
                rlmm, view, before | {K.PARTITIONS: list(view.items(K.PARTITIONS))}, "topic_id_changed"
            )

    # --reset: the view is set aside, a fresh one reads the new topic from the start, registrations kept
    assert reset_view(tmp_path / "view") == [TP]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("view.reset-")]
    assert len(aside) == 1 and (aside[0] / "CURRENT").is_file()
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        segments = rlmm.queries.list_remote_log_segments(TP)
        assert sorted(s.start_offset for s in segments) == [1000 + i * 10 for i in range(6)]
        assert rlmm.consumer.failure is None and view.metadata_offsets() == {MP: 11}


def test_a_snapshot_of_the_topic_before_it_was_created_again(rlmm_config, tmp_path) -> None:
    """A snapshot records the id of the topic it was built from. A view restored from it, on the topic deleted
    and created again since with more records than the snapshot (so that no offset goes backwards), stops
    instead of folding the new topic's records onto the snapshot's state; an incremental build on it is
    refused before Spark starts."""
    config = rlmm_config(num_partitions=PARTITIONS)
    topic_id = view_of_a_topic_created_again(config, tmp_path / "view")
    assert topic_id is not None and export(tmp_path / "view", tmp_path / "snap", PARTITIONS)["topic_id"] == topic_id
    assert restore(tmp_path / "snap", tmp_path / "restored")["topic_id"] == topic_id
    with View(tmp_path / "restored") as view:
        before = contents(view)
        with RemoteLogMetadataManager(view, config, [TP]) as rlmm:
            assert_stopped_unmixed(
                rlmm, view, before | {K.PARTITIONS: list(view.items(K.PARTITIONS))}, "topic_id_changed"
            )
    write_snapshot(tmp_path / "built", [], [], {MP: 5}, PARTITIONS, topic=config.topic, topic_id=topic_id)
    with pytest.raises(SnapshotError, match=f"with id {re.escape(topic_id)}, the input has id"):
        check_build_inputs(
            tmp_path / "out",
            bootstrap=config.bootstrap_servers,
            topic=config.topic,
            archive_dir=None,
            base_dir=tmp_path / "built",
        )


def test_a_view_past_the_end_of_the_topic(rlmm_config, tmp_path) -> None:
    """A view that applied offsets up to 100 (a snapshot of a longer history, no topic id on record) on a
    topic that ends at 4: the end offset stays below the view's position, so the offsets went backwards."""
    config = rlmm_config(num_partitions=PARTITIONS)
    view_applied_up_to(tmp_path / "view", 100, segments=5)
    ensure_topic(AdminClient(config.admin_config()), config)
    RawProducer(config.bootstrap_servers, config.topic).produce(finished_records(TP, 2, base=1000))
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_initialized(30)
        while b"topic_id" not in view.consumer_state():  # the topic's first check, before any fetch is applied
            time.sleep(0.01)
        before = contents(view)
        assert_stopped_unmixed(rlmm, view, before, "offsets_backwards")
        assert f"metadata partition {MP} ends at offset 4, below the next offset 101" in str(rlmm.consumer.failure)
        with running_server(view, rlmm) as server, client(server, retry_for=30) as asking:
            assert asking.health() == "NOT_SERVING"
            started = time.monotonic()
            for call, args in ((asking.is_ready, TP), (asking.add_remote_log_segment_metadata, segment(TP, 0, 9))):
                with pytest.raises(RefusedError) as refused:
                    call(args)
                assert refused.value.code.name == "FAILED_PRECONDITION", refused.value
                assert refused.value.reason == "METADATA_TOPIC_CHANGED" and refused.value.retry_after_s is None
                assert f"metadata partition {MP} ends at offset 4" in refused.value.message
            assert time.monotonic() - started < 5  # not retried: this server will not answer again
            status = asking.status()
            assert not status["consumes"] and status["failure"].startswith("TopicChangedError: metadata partition")


def test_a_write_below_the_view_position_is_not_reported_applied(rlmm_config, tmp_path) -> None:
    """The view applied offsets up to 100; the topic is empty, so a write lands at offset 0. It was written,
    but to another history: the write fails instead of being reported applied (which the offset watcher
    alone would do at once), and the consumer stops too."""
    config = rlmm_config(num_partitions=PARTITIONS)
    view_applied_up_to(tmp_path / "view", 100, segments=1)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_initialized(30)
        with pytest.raises(TopicChangedError, match="written at offset 0, below the next offset 101") as refused:
            rlmm.add_remote_log_segment_metadata(segment(TP, 2000, 2009))
        assert refused.value.kind == "offsets_backwards"
        assert isinstance(wait_failed(rlmm), TopicChangedError)


def test_every_worker_refuses_reads_and_writes_for_good_once_the_topic_changed(kafka, tmp_path) -> None:
    """``rlmm serve --workers 2`` over a view built from a topic of another id: the primary's consumer stops at its
    first check of the topic, and both workers refuse reads and writes with FAILED_PRECONDITION (reason
    METADATA_TOPIC_CHANGED, no retry hint), which clients do not retry, rather than UNAVAILABLE, which they do."""
    with View(tmp_path / "view") as view, view.batch() as batch:
        batch.assign(TP)
        batch.put_consumer_state(view_state.TOPIC_ID, b"AAAAAAAAAAAAAAAAAAAAAA")
    with serve(tmp_path, kafka, f"rlmm-test-changed-{uuid.uuid4().hex[:12]}", "--workers", "2") as served:
        with served.pinned_clients() as pinned:
            for worker, rlmm in pinned.items():
                # the primary stops at its first check of the topic; a secondary learns it at its next poll of
                # the primary's health (every 0.2 s), and until then answers as the primary did: not ready
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    try:
                        assert not rlmm.is_ready(TP), worker
                    except RefusedError:
                        break
                    time.sleep(0.1)
                for call, args in ((rlmm.is_ready, TP), (rlmm.add_remote_log_segment_metadata, segment(TP, 0, 9))):
                    with pytest.raises(RefusedError) as refused:
                        call(args)
                    assert refused.value.code.name == "FAILED_PRECONDITION", (worker, refused.value)
                    assert refused.value.reason == "METADATA_TOPIC_CHANGED" and refused.value.retry_after_s is None
                    assert "now has the topic id" in refused.value.message and "--reset" in refused.value.message


def test_reset_from_the_command_line(kafka, tmp_path) -> None:
    """``rlmm consume --reset`` sets the view aside and loads the topic into a fresh one with the view's
    registrations; ``rlmm serve --reset`` without Kafka is a usage error."""
    topic = f"rlmm-test-reset-{time.monotonic_ns()}"
    config = rlmm_config_for(kafka, topic)
    ensure_topic(AdminClient(config.admin_config()), config)
    RawProducer(config.bootstrap_servers, topic).produce(finished_records(TP, 2))
    with View(tmp_path / "view") as view:
        with view.batch() as batch:
            batch.assign(TP)
            batch.apply(MP, 500, finished_records(TP, 1, base=7000)[0][1])
    command = [
        *RLMM,
        "consume",
        "--view",
        str(tmp_path / "view"),
        "-b",
        kafka.bootstrap_servers,
        "--reset",
        "--set",
        f"remote.log.metadata.topic.name={topic}",
        "--set",
        f"remote.log.metadata.topic.num.partitions={PARTITIONS}",
        "--exit-when-ready",
        "--log-level",
        "warning",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "was set aside as" in done.stderr and json.loads(done.stdout.splitlines()[0])["registered"] == 1
    with View(tmp_path / "view", read_only=True) as view:
        assert sorted(s.start_offset for s in view.queries.list_remote_log_segments(TP)) == [0, 10]
        assert view.metadata_offsets() == {MP: 3}
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("view.reset-")]) == 1

    done = subprocess.run(
        [*RLMM, "serve", "--view", str(tmp_path / "view"), "--reset"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--reset consumes the topic again" in done.stderr


def rlmm_config_for(kafka, topic: str) -> RlmmConfig:
    return RlmmConfig(
        kafka.bootstrap_servers, topic=topic, num_partitions=PARTITIONS, replication_factor=1, min_insync_replicas=1
    )
