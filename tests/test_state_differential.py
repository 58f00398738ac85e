"""Random record streams applied to the RocksDB view (random batching) and to a naive model of
Kafka's cache must give the same apply results and the same answer to every query.

The streams are drawn from a tiny universe (few segment ids, epochs and offsets) so that the
quirks happen often: overlapping and same-start segments, re-adds with other epochs, deletions of
segments still listed under other epochs, partition deletions, redeliveries, invalid transitions.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmm.errors import KafkaStateError
from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.serde import encode_value
from rlmm.state import keys as K
from rlmm.state.probe import probe_partition
from rlmm.state.queries import Queries
from rlmm.state.view import View
from tests.grpc_support import finished, segment
from tests.reference_model import ReferenceModel

ASSIGNED = TopicIdPartition(b"\x01" * 16, "orders", 0)
OTHER = TopicIdPartition(b"\x01" * 16, "orders-renamed", 0)  # same id and partition, other name
SEGMENT_IDS = [bytes([i]) * 16 for i in range(1, 7)]


@st.composite
def segments(draw, tp=ASSIGNED):
    start = draw(st.integers(0, 60))
    end = start + draw(st.integers(0, 30))
    count = draw(st.integers(1, 3))
    first = draw(st.integers(0, 4))
    epochs = sorted({first + i for i in range(count)})
    # epoch start offsets inside the segment, non-decreasing (sometimes equal: degenerate epochs)
    starts = sorted([start] + [draw(st.integers(start, end)) for _ in epochs[1:]])
    return SegmentMetadata(
        tp=tp,
        segment_id=draw(st.sampled_from(SEGMENT_IDS)),
        start_offset=start,
        end_offset=end,
        broker_id=draw(st.integers(0, 3)),
        max_timestamp_ms=draw(st.integers(-1, 5)),
        event_timestamp_ms=draw(st.integers(0, 10**6)),
        segment_leader_epochs=tuple(zip(epochs, starts)),
        segment_size_in_bytes=draw(st.integers(-1, 1000)),
        custom_metadata=draw(st.one_of(st.none(), st.binary(max_size=3))),
        state=draw(st.sampled_from([SegmentState.COPY_SEGMENT_STARTED] * 6 + list(SegmentState))),
        txn_index_empty=draw(st.booleans()),
    )


updates = st.builds(
    SegmentUpdate,
    tp=st.just(ASSIGNED),
    segment_id=st.sampled_from(SEGMENT_IDS),
    broker_id=st.integers(0, 3),
    event_timestamp_ms=st.integers(0, 10**6),
    custom_metadata=st.one_of(st.none(), st.binary(max_size=3)),
    state=st.sampled_from(
        [SegmentState.COPY_SEGMENT_FINISHED] * 4 + [SegmentState.DELETE_SEGMENT_STARTED] * 2 + list(SegmentState)
    ),
)
partition_deletes = st.builds(
    PartitionDelete,
    tp=st.just(ASSIGNED),
    broker_id=st.just(0),
    event_timestamp_ms=st.just(0),
    state=st.sampled_from(list(PartitionDeleteState)),
)


@st.composite
def chains(draw):
    """Contiguous segments of one epoch range, each added and finished, and deletions of some of them for
    later in the stream: an epoch's offset index then loses first entries (retention), middle and last
    ones, with the chain continuing after them or broken."""
    ids = draw(st.permutations(SEGMENT_IDS))[: draw(st.integers(2, 4))]
    epoch, start = draw(st.integers(0, 4)), draw(st.integers(0, 20))
    now, later = [], []
    for segment_id in ids:
        end = start + draw(st.integers(0, 12))
        segment = SegmentMetadata(
            ASSIGNED,
            segment_id,
            start,
            end,
            0,
            draw(st.integers(-1, 5)),
            0,
            ((epoch, start),),
            draw(st.integers(0, 100)),
            None,
            SegmentState.COPY_SEGMENT_STARTED,
            draw(st.booleans()),
        )
        now += [segment, SegmentUpdate(ASSIGNED, segment_id, 0, 0, None, SegmentState.COPY_SEGMENT_FINISHED)]
        if draw(st.booleans()):
            later.append(SegmentUpdate(ASSIGNED, segment_id, 0, 0, None, SegmentState.DELETE_SEGMENT_STARTED))
        start = end + 1 + draw(st.sampled_from([0, 0, 0, 1, -1]))  # mostly contiguous
    return now, later


records = st.one_of(
    segments(),
    segments(),
    updates,
    updates,
    updates,
    segments(OTHER),
    chains(),
    partition_deletes.filter(lambda r: r.state is not PartitionDeleteState.DELETE_PARTITION_FINISHED),
    st.just(None),
)  # None: redeliver an earlier record


@st.composite
def streams(draw):
    body, deferred = [], []
    for drawn in draw(st.lists(records, min_size=1, max_size=60)):
        if isinstance(drawn, tuple):  # a chain: records now, deletions for later
            body += drawn[0]
            deferred += [(len(body), record) for record in drawn[1]]
        else:
            body.append(drawn)
    for after, record in deferred:
        body.insert(draw(st.integers(min(after, len(body)), len(body))), record)
    if draw(st.integers(0, 9)) == 0:  # sometimes the partition is deleted somewhere in the stream
        finished = PartitionDelete(ASSIGNED, 0, 0, PartitionDeleteState.DELETE_PARTITION_FINISHED)
        body.insert(draw(st.integers(0, len(body))), finished)
    events = []
    for record in body:
        if record is None:
            if events:
                events.append(events[draw(st.integers(0, len(events) - 1))])
        else:
            events.append((len(events), encode_value(record), record))
    cuts = draw(st.lists(st.integers(1, max(1, len(events))), max_size=8))
    return events, sorted(set(cuts))


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("RLMM_DIFF_EXAMPLES", 300)),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(streams())
def test_view_matches_naive_model(stream) -> None:
    events, cuts = stream
    model = ReferenceModel()
    model.assign(ASSIGNED)
    model.mark_ready(ASSIGNED)
    with tempfile.TemporaryDirectory() as tmp, ready_view(Path(tmp) / "view") as view:
        for batch_events in batches(events, cuts):
            with view.batch() as batch:
                for offset, value, record in batch_events:
                    expected = model.handle(record, offset)
                    assert batch.apply(0, offset, value) == expected, (offset, record)
            assert probe_partition(view.queries, ASSIGNED) == probe_partition(model, ASSIGNED)
            assert probe_partition(view.queries, OTHER) == probe_partition(model, OTHER)
            assert batch_answers(view.queries) == single_answers(view.queries) == memo_answers(view.queries)
            assert memo_answers(view.queries) == single_answers(view.queries)  # now partly from the memo


def ready_view(path: Path) -> View:
    view = View(path)
    with view.batch() as batch:
        batch.assign(ASSIGNED)
        batch.mark_ready(ASSIGNED)
    return view


def batches(events: list, cuts: list[int]) -> list[list]:
    bounds = [0, *cuts, len(events)]
    return [events[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


BATCH_LOOKUPS = [(p, epoch, offset) for p in (0, 1) for epoch in range(8) for offset in range(0, 96, 3)]


def batch_answers(queries: Queries) -> list:
    """Lookups of both partitions in one batch (from the offset cache, which lives across batches)."""
    indexes, epochs, offsets = ([lookup[i] for lookup in BATCH_LOOKUPS] for i in range(3))
    answers = queries.segment_values([ASSIGNED, OTHER], indexes, epochs, offsets)[1]
    return [a if a is None or isinstance(a, bytes) else a.kafka_exception for a in answers]


def single_answers(queries: Queries) -> list:
    answers = []
    for p, epoch, offset in BATCH_LOOKUPS:
        try:
            found = queries.remote_log_segment_metadata((ASSIGNED, OTHER)[p], epoch, offset)
        except KafkaStateError as exc:
            answers.append(exc.kafka_exception)
        else:
            answers.append(None if found is None else encode_value(found))
    return answers


NAMES = [("id", tp.topic, tp.partition) for tp in (ASSIGNED, OTHER)]  # as requests name them to the lookup memo


def memo_answers(queries: Queries) -> list:
    """Single lookups as the server asks them: the lookup memo's answer, else the view's (which the memo keeps;
    it lives across batches)."""
    answers = []
    for p, epoch, offset in BATCH_LOOKUPS:
        try:
            value = queries.known_segment_value(NAMES[p], epoch, offset)
            if value is None:
                value = queries.remote_log_segment_value((ASSIGNED, OTHER)[p], epoch, offset, NAMES[p])
        except KafkaStateError as exc:
            answers.append(exc.kafka_exception)
        else:
            answers.append(value)
    return answers


def test_a_partition_assigned_again_within_a_batch_folds_as_across_batches(tmp_path: Path) -> None:
    """Unassigned, a partition's rows go; assigned again in the same batch, its epochs start afresh, as they do
    when each step is a batch of its own (the fold's caches of rows must forget the partition)."""
    added = [segment(ASSIGNED, start, start + 9) for start in (0, 10, 20)]
    records = [record for seg in added for record in (seg, finished(seg))]
    applies = [("apply", offset, encode_value(record)) for offset, record in enumerate(records)]
    steps: list[tuple] = [("assign",), ("ready",), *applies[:4], ("unassign",), ("assign",), ("ready",), *applies[4:]]

    def run(step, batch) -> None:
        if step[0] == "apply":
            batch.apply(0, step[1], step[2])
        else:
            {"assign": batch.assign, "ready": batch.mark_ready, "unassign": batch.unassign}[step[0]](ASSIGNED)

    contents = []
    for batching in ([steps], [[step] for step in steps]):
        with View(tmp_path / f"view-{len(batching)}") as view:
            for steps_of_batch in batching:
                with view.batch() as batch:
                    for step in steps_of_batch:
                        run(step, batch)
            contents.append({cf: list(view.items(cf)) for cf in K.COLUMN_FAMILIES})
            listed = view.queries.list_epoch_segments(ASSIGNED, 0)
            assert [s.segment_id for s in listed] == [added[2].segment_id]
    assert contents[0] == contents[1]
