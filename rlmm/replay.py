"""Replay a compat scenario (``events.jsonl`` + ``queries.jsonl``) through a real view.

Follows the compat README's replay model: ``live`` scenarios mark every assigned partition ready
before the first record; ``bootstrap`` ones mark a partition ready once a record at or past the highest
offset of its metadata partition has been read (at once when that partition has no record). As in
Kafka's ``ConsumerTask``, a record counts as read once it was handled or skipped: one whose decoding,
routing or handling threw does not advance the metadata partition's read offset, so it makes nothing
ready. Events between two query points are applied as one batch.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rlmm.errors import KafkaStateError
from rlmm.records.canonical import to_canonical
from rlmm.records.model import TopicIdPartition
from rlmm.records.uuid import uuid_from_str, uuid_to_str
from rlmm.state.queries import Queries
from rlmm.state.view import View


@dataclass(frozen=True)
class Scenario:
    mode: str
    assigned: list[tuple[TopicIdPartition, int]]  # (user partition, its metadata partition)
    events: list[dict]
    queries: list[dict]

    @classmethod
    def load(cls, directory: Path) -> Scenario:
        meta = json.loads((directory / "scenario.json").read_text())
        if meta["mode"] not in ("live", "bootstrap"):
            raise ValueError(f"{directory}: unknown scenario mode {meta['mode']!r}")
        assigned = [(_tp(a), a["metadata_partition"]) for a in meta["assigned"]]
        events, queries = _jsonl(directory / "events.jsonl"), _jsonl(directory / "queries.jsonl")
        for j, query in enumerate(queries):  # a query never evaluated would answer null
            if query["op"] not in OPS:
                raise ValueError(f"{directory}: query {j} has the unknown op {query['op']!r}")
            if not -1 <= query["after_event"] < len(events):
                raise ValueError(
                    f"{directory}: query {j} comes after event {query['after_event']}, not one of -1 to "
                    f"{len(events) - 1}"
                )
        return cls(meta["mode"], assigned, events, queries)


def _jsonl(path: Path) -> list[dict]:
    with path.open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _tp(args: dict) -> TopicIdPartition:
    return TopicIdPartition(uuid_from_str(args["topic_id"]), args["topic"], args["partition"])


def replay(directory: Path, view_dir: Path | None = None, max_batch: int | None = None) -> Iterator[dict]:
    """Yield one ``{"event": i, "apply_result": ...}`` per event, then one ``{"query": j, "answer": ...}``
    per query (each evaluated at its ``after_event``). ``max_batch`` caps the events per atomic batch.
    The scenario is read at once: a directory that is not one fails here, before any line."""
    return _replay(Scenario.load(directory), view_dir, max_batch)


def _replay(scenario: Scenario, view_dir: Path | None, max_batch: int | None) -> Iterator[dict]:
    with tempfile.TemporaryDirectory(prefix="rlmm-replay-") as tmp, View(view_dir or Path(tmp) / "view") as view:
        yield from _run(scenario, view, max_batch)


def _run(scenario: Scenario, view: View, max_batch: int | None) -> Iterator[dict]:
    end_offsets: dict[int, int] = {}
    for event in scenario.events:
        mp = event["metadata_partition"]
        end_offsets[mp] = max(end_offsets.get(mp, -1), event["offset"])
    pending: list[tuple[TopicIdPartition, int]] = []
    with view.batch() as batch:
        for tp, _ in scenario.assigned:
            batch.assign(tp)
        for tp, mp in scenario.assigned:
            if scenario.mode == "live" or mp not in end_offsets:
                batch.mark_ready(tp)
            else:
                pending.append((tp, mp))

    queries_after: dict[int, list[int]] = {}
    for j, query in enumerate(scenario.queries):
        queries_after.setdefault(query["after_event"], []).append(j)
    answers: list[Any] = [None] * len(scenario.queries)
    for j in queries_after.get(-1, []):
        answers[j] = answer(view.queries, scenario.queries[j])

    stops = sorted(
        {i for i in queries_after if i >= 0}
        | {len(scenario.events) - 1}
        | set(range(max_batch - 1, len(scenario.events), max_batch) if max_batch else ())
    )
    start = 0
    for stop in stops:
        if stop < start:
            continue
        with view.batch() as batch:
            for i in range(start, stop + 1):
                event = scenario.events[i]
                mp, offset = event["metadata_partition"], event["offset"]
                result = batch.apply(mp, offset, bytes.fromhex(event["hex"])).to_json()
                caught_up = (
                    []
                    if result["status"] == "error"
                    else [  # (a record that threw is not read)
                        entry for entry in pending if entry[1] == mp and offset >= end_offsets[mp]
                    ]
                )
                if caught_up:
                    result["became_ready"] = [_became_ready(batch.mark_ready(tp), tp) for tp, _ in caught_up]
                    pending = [entry for entry in pending if entry not in caught_up]
                yield {"event": i, "apply_result": result}
        for j in queries_after.get(stop, []):
            answers[j] = answer(view.queries, scenario.queries[j])
        start = stop + 1
    for j, value in enumerate(answers):
        yield {"query": j, "answer": value}


def _became_ready(error: str | None, tp: TopicIdPartition) -> dict:
    entry = {"topic_id": uuid_to_str(tp.topic_id), "topic": tp.topic, "partition": tp.partition}
    if error is not None:
        entry["error"] = error
    return entry


def answer(queries: Queries, query: dict) -> Any:
    """Evaluate one compat query; the answer is in the ``expect`` form."""
    op, args = query["op"], query["args"]
    evaluate = OPS.get(op)
    if evaluate is None:
        raise ValueError(f"unknown query op {op!r}")
    try:
        return evaluate(queries, _tp(args), args.get("leader_epoch"), args)
    except KafkaStateError as exc:
        return {"error": exc.kafka_exception}


def _listed(queries: Queries, tp: TopicIdPartition, epoch: int | None) -> list[str]:
    if epoch is None:
        segments = sorted(
            queries.list_remote_log_segments(tp), key=lambda s: (s.start_offset, uuid_to_str(s.segment_id))
        )
    else:
        segments = queries.list_epoch_segments(tp, epoch)
    return [uuid_to_str(s.segment_id) for s in segments]


# each compat op: (queries, partition, leader epoch or None, the query's args) -> the answer in ``expect`` form
OPS: Final[dict[str, Callable[[Queries, TopicIdPartition, Any, dict], Any]]] = {
    "remoteLogSegmentMetadata": lambda q, tp, epoch, args: _canonical_or_none(
        q.remote_log_segment_metadata(tp, epoch, args["offset"])
    ),
    "highestOffsetForEpoch": lambda q, tp, epoch, _: q.highest_offset_for_epoch(tp, epoch),
    "listRemoteLogSegments": lambda q, tp, epoch, _: _listed(q, tp, epoch),
    "remoteLogSize": lambda q, tp, epoch, _: q.remote_log_size(tp, epoch),
    "nextSegmentWithTxnIndex": lambda q, tp, epoch, args: _canonical_or_none(
        q.next_segment_with_txn_index(tp, epoch, args["offset"])
    ),
    "maxTimestamp": lambda q, tp, _, __: _canonical_or_none(q.max_timestamp(tp)),
    "isReady": lambda q, tp, _, __: q.is_ready(tp),
}


def _canonical_or_none(segment) -> dict | None:
    return None if segment is None else to_canonical(segment)
