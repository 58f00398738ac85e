"""FirstSegmentWithMaxTimestampAtLeast: the view's tree descent against Kafka's scan of the epoch's listing.

The scan is RemoteLogManager.findOffsetByTimestamp's loop over ``listRemoteLogSegments(partition, epoch)``,
run here over the same view's ``list_epoch_segments``; the histories are the differential test's (overlaps,
evictions, re-finishes, deletions of first, middle and last segments, partition deletion), applied in
random batches. A second test counts the KV reads of one call as the number of segments grows.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from rlmm.errors import KafkaStateError
from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.state.kv import MemoryKV
from rlmm.state.machine import StateMachine
from rlmm.state.queries import Queries
from tests.test_state_differential import ASSIGNED, batches, ready_view, streams

EPOCHS = range(0, 9)
TIMESTAMPS = range(-2, 8)  # the histories' max timestamps are in [-1, 5]
STARTING_OFFSETS = (-1, 0, 5, 13, 25, 40, 60, 91, 100)  # their end offsets are in [0, 90]


def kafka_scan(queries: Queries, tp: TopicIdPartition, epoch: int, timestamp: int, starting_offset: int):
    for segment in queries.list_epoch_segments(tp, epoch):
        if (
            segment.max_timestamp_ms >= timestamp
            and segment.end_offset >= starting_offset
            and segment.state is SegmentState.COPY_SEGMENT_FINISHED
        ):
            return segment
    return None


def answer(call, *args):
    try:
        return call(*args)
    except KafkaStateError as exc:
        return exc.kafka_exception


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("RLMM_DIFF_EXAMPLES", 300)) // 2,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(streams())
def test_descent_picks_the_segment_kafkas_scan_picks(stream) -> None:
    events, cuts = stream
    with tempfile.TemporaryDirectory() as tmp, ready_view(Path(tmp) / "view") as view:
        for batch_events in batches(events, cuts):
            with view.batch() as batch:
                for offset, value, _ in batch_events:
                    batch.apply(0, offset, value)
            queries = view.queries
            for epoch in EPOCHS:
                for timestamp in TIMESTAMPS:
                    for starting_offset in STARTING_OFFSETS:
                        args = (ASSIGNED, epoch, timestamp, starting_offset)
                        assert answer(queries.first_segment_with_max_timestamp_at_least, *args) == answer(
                            kafka_scan, queries, *args
                        ), args


class CountingKV:
    """A read-only KV that counts point reads and seeks."""

    def __init__(self, kv) -> None:
        self.kv = kv
        self.reads = 0

    def get(self, cf, key):
        self.reads += 1
        return self.kv.get(cf, key)

    def iter_from(self, cf, key, prefix):
        self.reads += 1
        return self.kv.iter_from(cf, key, prefix)

    def iter_down_from(self, cf, key, prefix):
        self.reads += 1
        return self.kv.iter_down_from(cf, key, prefix)

    def floor(self, cf, key, prefix):
        self.reads += 1
        return self.kv.floor(cf, key, prefix)

    def ceiling(self, cf, key, prefix):
        self.reads += 1
        return self.kv.ceiling(cf, key, prefix)


def history(count: int, retained: int, copying: bool) -> MemoryKV:
    """``count`` contiguous segments of epoch 0, added and finished, their max timestamps rising with jitter
    (not monotonic), the oldest deleted down to ``retained`` by retention, and, if ``copying``, one more
    segment still being copied (the epoch is then listed by start offset)."""
    kv = MemoryKV()
    machine = StateMachine(kv)
    machine.assign(ASSIGNED)
    machine.mark_ready(ASSIGNED)
    records: list = []
    for i in range(count + copying):
        segment_id = i.to_bytes(16, "big")
        records.append(
            SegmentMetadata(
                ASSIGNED,
                segment_id,
                i * 100,
                i * 100 + 99,
                0,
                1_000 * i + (7919 * i) % 2_500,
                0,
                ((0, i * 100),),
                1,
                None,
                SegmentState.COPY_SEGMENT_STARTED,
                True,
            )
        )
        if i < count:
            records.append(SegmentUpdate(ASSIGNED, segment_id, 0, 0, None, SegmentState.COPY_SEGMENT_FINISHED))
    records += [
        SegmentUpdate(ASSIGNED, i.to_bytes(16, "big"), 0, 0, None, SegmentState.DELETE_SEGMENT_STARTED)
        for i in range(count - retained)
    ]
    for offset, record in enumerate(records):
        assert machine.handle(record, offset).status == "applied"
    machine.flush()
    return kv


@pytest.mark.parametrize("copying", [False, True], ids=["listed-by-epoch-start", "listed-by-start"])
@pytest.mark.parametrize("count", [10, 3_000, 20_000])
def test_reads_per_call_do_not_grow_with_segments(count, copying) -> None:
    kv = history(count, count - count * 9 // 10, copying)
    counting = CountingKV(kv)
    queries = Queries(counting)
    reads = []
    for timestamp in (0, 1_000 * (count * 19 // 20), 1_000 * count - 1_000, 10**9):
        counting.reads = 0
        found = queries.first_segment_with_max_timestamp_at_least(ASSIGNED, 0, timestamp, 0)
        assert found == kafka_scan(Queries(kv), ASSIGNED, 0, timestamp, 0)
        assert (found is None) == (timestamp == 10**9)
        reads.append(counting.reads)
    # the partition and epoch rows; with unreferenced segments a seek for inversions, their scan and their
    # segments; the tree's top, a seek per page from it down (16 at most: a 64-bit position, 4 bits per level)
    # and the offset-index entry
    assert max(reads) <= 2 + (1 + 1 + copying) + 1 + 16 + 1, reads
