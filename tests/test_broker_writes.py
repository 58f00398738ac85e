"""Writes through the manager: Kafka's validation, read-your-writes, the timeout, and the bytes that
reach the topic (Kafka's own serialization, decoded back to Kafka's canonical form)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from rlmm.errors import (
    InvalidMetadataError,
    NotInitializedError,
    RemoteResourceNotFound,
    WriteNotAppliedError,
    WriteTimeoutError,
)
from rlmm.records import (
    PartitionDelete,
    PartitionDeleteState,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
    decode_value,
    metadata_partition,
    to_canonical,
)
from rlmm.state.view import View
from tests.kafka_compat import load_records

TP = TopicIdPartition(bytes(range(16)), "payments", 7)


def segment(
    tp: TopicIdPartition, start: int, end: int, epoch: int = 0, state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
) -> SegmentMetadata:
    return SegmentMetadata(
        tp, os.urandom(16), start, end, 1, 1_700_000_000_000, 1_700_000_000_000, ((epoch, start),), 1 << 20, None, state
    )


def update(seg: SegmentMetadata, state: SegmentState) -> SegmentUpdate:
    return SegmentUpdate(seg.tp, seg.segment_id, 1, 1_700_000_000_001, None, state)


def test_writes_are_validated_as_kafka_does(tmp_path) -> None:
    with View(tmp_path / "view") as view:
        rlmm = RemoteLogMetadataManager(view, RlmmConfig("127.0.0.1:9"))  # never started
        finished = segment(TP, 0, 99, state=SegmentState.COPY_SEGMENT_FINISHED)
        with pytest.raises(
            InvalidMetadataError,
            match="should have state as COPY_SEGMENT_STARTED but it contains state as: COPY_SEGMENT_FINISHED",
        ):
            rlmm.add_remote_log_segment_metadata(finished)
        with pytest.raises(InvalidMetadataError, match="should not have the state as: COPY_SEGMENT_STARTED"):
            rlmm.update_remote_log_segment_metadata(update(finished, SegmentState.COPY_SEGMENT_STARTED))
        with pytest.raises(TypeError):
            rlmm.put_remote_partition_delete_metadata(finished)
        with pytest.raises(NotInitializedError, match="not ready"):
            rlmm.add_remote_log_segment_metadata(segment(TP, 0, 99))


def test_a_write_returns_once_applied(rlmm_config, tmp_path) -> None:
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, rlmm_config(num_partitions=5), [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        q = rlmm.queries
        first = segment(TP, 0, 99)
        rlmm.add_remote_log_segment_metadata(first)
        assert [s.segment_id for s in q.list_remote_log_segments(TP)] == [first.segment_id]
        assert q.remote_log_segment_metadata(TP, 0, 50) is None  # not finished yet
        rlmm.update_remote_log_segment_metadata(update(first, SegmentState.COPY_SEGMENT_FINISHED))
        assert q.remote_log_segment_metadata(TP, 0, 50).segment_id == first.segment_id
        assert q.highest_offset_for_epoch(TP, 0) == 99
        for state in (PartitionDeleteState.DELETE_PARTITION_MARKED, PartitionDeleteState.DELETE_PARTITION_FINISHED):
            rlmm.put_remote_partition_delete_metadata(PartitionDelete(TP, 1, 1_700_000_000_002, state))
        with pytest.raises(RemoteResourceNotFound):
            q.remote_log_size(TP)
        assert rlmm.status()["counters"]["applied"] == 4


def test_a_write_the_view_cannot_apply_fails_with_kafkas_exception(rlmm_config, tmp_path) -> None:
    """A record Kafka's handler throws on (a segment of a partition whose metadata DELETE_PARTITION_FINISHED
    removed) is written, but its write is not reported applied: it fails with what Kafka throws, and says so."""
    config = rlmm_config(num_partitions=2)
    mp = metadata_partition(TP.topic_id, TP.partition, 2)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        rlmm.put_remote_partition_delete_metadata(
            PartitionDelete(TP, 1, 1_700_000_000_002, PartitionDeleteState.DELETE_PARTITION_FINISHED)
        )
        with pytest.raises(
            WriteNotAppliedError,
            match=rf"record {config.topic}-{mp}@1 was written, but it cannot be "
            r"applied \(the partition's store refused it: Kafka throws IllegalStateException\)",
        ) as refused:
            rlmm.add_remote_log_segment_metadata(segment(TP, 0, 99))
        assert refused.value.kafka_exception == "IllegalStateException"
        assert rlmm.status()["counters"]["error:IllegalStateException"] == 1
        with pytest.raises(WriteNotAppliedError):  # a writer that waits only once the record failed learns it too
            rlmm.watcher.wait_for(mp, 1).result(5)
        rlmm.wait_applied(mp, 1, timeout=5)  # what waits for the consumer to pass it does not fail


def test_a_write_not_applied_in_time_says_it_may_still_be(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=2, consume_wait_ms=700)
    mp = metadata_partition(TP.topic_id, TP.partition, 2)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        assert rlmm.consumer.hold({mp: 0}).wait(5)  # the consumer applies nothing of this partition
        late = segment(TP, 0, 99)
        with pytest.raises(
            WriteTimeoutError,
            match=rf"{config.topic}-{mp}@0 was written but not applied within "
            r"remote.log.metadata.consume.wait.ms \(700 ms\); it may still be "
            r"applied later; consumer at offset 0 of 1 \(lag 1\)",
        ):
            rlmm.add_remote_log_segment_metadata(late)
        rlmm.consumer.hold(None)
        rlmm.wait_applied(mp, 0, timeout=30)
        assert [s.segment_id for s in rlmm.queries.list_remote_log_segments(TP)] == [late.segment_id]


def _kafka_serialized() -> list[dict]:
    return [
        r
        for r in load_records()
        if r["produced_by"] == "RemoteLogMetadataSerde.serialize" and r["api_key"] in (0, 1, 2)
    ]


def _read_topic(config: RlmmConfig) -> dict[tuple[int, int], bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": "rlmm-test-reader",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(config.topic, mp, 0) for mp in range(config.num_partitions)])
    records, at_end = {}, set()
    while len(at_end) < config.num_partitions:
        message = consumer.poll(10)
        assert message is not None, "the topic could not be read to its end"
        if message.error() is not None:
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(message.partition())
        else:
            at_end.discard(message.partition())
            records[(message.partition(), message.offset())] = message.value()
    consumer.close()
    return records


def test_written_records_are_kafkas_bytes(rlmm_config, tmp_path) -> None:
    """Every record Kafka's serde wrote in the corpus, written through the three calls (the ones the
    calls refuse are refused): the topic then holds Kafka's bytes, in the partitioner's partition, and
    they decode to Kafka's canonical form."""
    config = rlmm_config(num_partitions=50, assign_all=True)
    written, refused = [], 0
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config) as rlmm:
        assert rlmm.consumer.wait_initialized(timeout=30)
        for case in _kafka_serialized():
            record = decode_value(bytes.fromhex(case["hex"]))
            call = {
                SegmentMetadata: rlmm.add_remote_log_segment_metadata,
                SegmentUpdate: rlmm.update_remote_log_segment_metadata,
                PartitionDelete: rlmm.put_remote_partition_delete_metadata,
            }[type(record)]
            try:
                call(record)
            except InvalidMetadataError:
                refused += 1
                continue
            written.append((metadata_partition(record.tp.topic_id, record.tp.partition, 50), case))
    assert refused == 4 + 4 + 4 + 9  # segments not COPY_SEGMENT_STARTED, updates to COPY_SEGMENT_STARTED

    in_topic = _read_topic(config)
    assert len(in_topic) == len(written)
    next_offset: dict[int, int] = {}
    for mp, case in written:
        offset = next_offset.get(mp, 0)
        next_offset[mp] = offset + 1
        value = in_topic[(mp, offset)]
        assert value.hex() == case["hex"], case["case"]
        assert to_canonical(decode_value(value)) == case["decoded"], case["case"]


def test_a_partition_deletion_written_again_is_answered_as_done(rlmm_config, tmp_path) -> None:
    """A ``DELETE_PARTITION_FINISHED`` written twice (a client retrying a write whose answer it lost): Kafka's store
    refuses the second record, since the partition's metadata is removed already, but that is what the write asked
    for, so it is answered OK (Kafka's writer, which waits for the consumer's offset alone, returns too)."""
    config = rlmm_config(num_partitions=2)
    mp = metadata_partition(TP.topic_id, TP.partition, 2)
    finished = PartitionDelete(TP, 1, 1_700_000_000_002, PartitionDeleteState.DELETE_PARTITION_FINISHED)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        rlmm.put_remote_partition_delete_metadata(finished)
        rlmm.put_remote_partition_delete_metadata(finished)
        assert rlmm.status()["counters"]["error:IllegalStateException"] == 1  # refused when applied, as in Kafka
        assert rlmm.queries.partition_row(TP).removed and view.metadata_offsets() == {mp: 1}


def test_a_write_the_service_stopped_before_applying_is_not_retried(rlmm_config, tmp_path) -> None:
    """A write the broker acknowledged, whose service stopped before applying it, fails with a timeout that says it
    was written (DEADLINE_EXCEEDED), not with SERVER_STOPPING, which clients retry: that would write it twice."""
    config = rlmm_config(num_partitions=2)
    mp = metadata_partition(TP.topic_id, TP.partition, 2)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        assert rlmm.consumer.hold({mp: 0}).wait(5)  # the consumer applies nothing of this partition
        with ThreadPoolExecutor(1) as pool:
            write = pool.submit(rlmm.add_remote_log_segment_metadata, segment(TP, 0, 99))
            while not rlmm.watcher.waiting():
                time.sleep(0.01)
            rlmm.close()
            with pytest.raises(
                WriteTimeoutError, match=rf"{config.topic}-{mp}@0 was written, but this service stopped"
            ):
                write.result(30)
