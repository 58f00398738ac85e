"""Ask a view every query about a partition, for comparing two views answer by answer."""

from __future__ import annotations

from typing import Any

from rlmm.errors import KafkaStateError
from rlmm.records.canonical import to_canonical
from rlmm.records.model import TopicIdPartition
from rlmm.records.uuid import uuid_to_str
from rlmm.state.queries import Queries


def _ask(call, *args) -> Any:
    try:
        result = call(*args)
    except KafkaStateError as exc:
        return {"error": exc.kafka_exception}
    if result is None or isinstance(result, (int, bool)):
        return result
    if isinstance(result, list):
        return [uuid_to_str(s.segment_id) for s in result]
    return to_canonical(result)


def probe_partition(queries: Queries, tp: TopicIdPartition) -> dict[str, Any]:
    """Answers of every query kind for ``tp``: whole-partition calls, every epoch seen in its
    segments (and one past), and lookups at each segment's epoch boundaries and just outside them."""
    answers: dict[str, Any] = {"ready": queries.is_ready(tp)}
    try:
        segments = sorted(queries.list_remote_log_segments(tp), key=lambda s: (s.start_offset, s.segment_id))
    except KafkaStateError as exc:
        answers["segments"] = {"error": exc.kafka_exception}
        return answers
    answers["segments"] = [to_canonical(s) for s in segments]
    answers["size"] = _ask(queries.remote_log_size, tp)
    answers["max_timestamp"] = _ask(queries.max_timestamp, tp)
    epochs = sorted({e for s in segments for e, _ in s.segment_leader_epochs})
    for epoch in epochs + [epochs[-1] + 1 if epochs else 0]:
        answers[f"epoch {epoch}"] = [
            _ask(queries.highest_offset_for_epoch, tp, epoch),
            _ask(queries.list_epoch_segments, tp, epoch),
            _ask(queries.remote_log_size, tp, epoch),
        ]
    timestamps = _spread(sorted({s.max_timestamp_ms for s in segments}))
    ends = _spread(sorted({s.end_offset for s in segments}))
    for epoch in epochs:
        for timestamp in timestamps:
            for starting_offset in ends:
                answers[f"timestamp {epoch}/{timestamp}/{starting_offset}"] = _ask(
                    queries.first_segment_with_max_timestamp_at_least, tp, epoch, timestamp, starting_offset
                )
    for s in segments:
        for epoch, start in s.segment_leader_epochs:
            for offset in (start - 1, start, s.end_offset, s.end_offset + 1):
                answers[f"at {epoch}/{offset}"] = [
                    _ask(queries.remote_log_segment_metadata, tp, epoch, offset),
                    _ask(queries.next_segment_with_txn_index, tp, epoch, offset),
                ]
    return answers


def _spread(values: list[int]) -> list[int]:
    """A few bounds around sorted ``values``: below all, the lowest, the middle one, the highest, above all."""
    if not values:
        return []
    return sorted({values[0] - 1, values[0], values[len(values) // 2], values[-1], values[-1] + 1})
