"""`rlmm replay` on every public compat scenario must give Kafka's apply results and answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlmm.records.model import SegmentMetadata
from rlmm.records.serde import decode_value
from rlmm.records.uuid import uuid_to_str
from tests.kafka_compat import compat_dir

SCENARIOS = sorted(p for p in (compat_dir() / "replay-public").iterdir() if p.is_dir())


def run_replay(scenario: Path, *extra: str) -> tuple[list[dict], list]:
    out = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "replay", str(scenario), *extra], check=True, capture_output=True, text=True
    ).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    events = [line for line in lines if "event" in line]
    answers = [line for line in lines if "query" in line]
    assert [e["event"] for e in events] == list(range(len(events)))
    assert [q["query"] for q in answers] == list(range(len(answers)))
    return [e["apply_result"] for e in events], [q["answer"] for q in answers]


def start_offsets_at(events: list[dict], after_event: int) -> dict[str, int]:
    """Segment id -> start offset of its latest add applied by ``after_event``."""
    starts = {}
    for event in events[: after_event + 1]:
        try:
            record = decode_value(bytes.fromhex(event["hex"]))
        except ValueError:
            continue
        if isinstance(record, SegmentMetadata):
            starts[uuid_to_str(record.segment_id)] = record.start_offset
    return starts


def assert_answer(query: dict, got, events: list[dict]) -> None:
    expect, order = query["expect"], query.get("order")
    if order == "any":
        assert sorted(got) == sorted(expect)
    elif order == "start_offset_ties_any":
        starts = start_offsets_at(events, query["after_event"])
        assert sorted(got) == sorted(expect)
        assert [starts[i] for i in got] == [starts[i] for i in expect]
    else:
        assert got == expect


@pytest.mark.parametrize("max_batch", [None, 1], ids=["batch-between-queries", "batch-per-event"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_replay_matches_kafka(scenario: Path, max_batch: int | None) -> None:
    events = [json.loads(line) for line in (scenario / "events.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (scenario / "queries.jsonl").read_text().splitlines()]
    results, answers = run_replay(scenario, *(["--max-batch", str(max_batch)] if max_batch else []))

    assert len(results) == len(events)
    mismatched = [
        (i, e["kind"], e["apply_result"], r) for i, (e, r) in enumerate(zip(events, results)) if e["apply_result"] != r
    ]
    assert not mismatched, f"apply results differ (index, kind, kafka, ours): {mismatched}"

    assert len(answers) == len(queries)
    for j, (query, got) in enumerate(zip(queries, answers)):
        try:
            assert_answer(query, got, events)
        except AssertionError as exc:
            raise AssertionError(
                f"query {j} {query['op']} {query['args']} after event {query['after_event']}: "
                f"kafka {query['expect']!r}, ours {got!r}"
            ) from exc


def test_scenarios_are_present() -> None:
    assert len(SCENARIOS) >= 5, f"expected the public compat scenarios under {compat_dir()}"
