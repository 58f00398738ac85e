"""`rlmm replay` on every public compat scenario must give Kafka's apply results and answers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlmm.records.model import SegmentMetadata
from rlmm.records.serde import decode_value
from rlmm.records.uuid import uuid_to_str
from rlmm.replay import Scenario
from tests.kafka_compat import compat_dir, same_json

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


def start_offsets_at(events: list[dict], query: dict) -> dict[str, int]:
    """Segment id -> start offset of its latest add that Kafka applied to the queried partition by the query."""
    args, starts = query["args"], {}
    for event in events[: query["after_event"] + 1]:
        if event["apply_result"]["status"] != "applied":
            continue
        try:
            record = decode_value(bytes.fromhex(event["hex"]))
        except ValueError:
            continue
        tp = (uuid_to_str(record.tp.topic_id), record.tp.topic, record.tp.partition)
        if isinstance(record, SegmentMetadata) and tp == (args["topic_id"], args["topic"], args["partition"]):
            starts[uuid_to_str(record.segment_id)] = record.start_offset
    return starts


def assert_answer(query: dict, got, events: list[dict]) -> None:
    """Kafka's answer, with its JSON types; an order rule applies to a list of ids, nothing else (an error)."""
    expect, order = query["expect"], query.get("order")
    if not (isinstance(expect, list) and isinstance(got, list)) or order not in ("any", "start_offset_ties_any"):
        assert same_json(got, expect)
        return
    assert same_json(sorted(got), sorted(expect))
    if order == "start_offset_ties_any":
        starts = start_offsets_at(events, query)
        assert [starts[i] for i in got] == [starts[i] for i in expect]


@pytest.mark.parametrize("max_batch", [None, 1], ids=["batch-between-queries", "batch-per-event"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_replay_matches_kafka(scenario: Path, max_batch: int | None) -> None:
    loaded = Scenario.load(scenario)
    events, queries = loaded.events, loaded.queries
    results, answers = run_replay(scenario, *(["--max-batch", str(max_batch)] if max_batch else []))

    assert len(results) == len(events)
    mismatched = [
        (i, e["kind"], e["apply_result"], r)
        for i, (e, r) in enumerate(zip(events, results))
        if not same_json(e["apply_result"], r)
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


@pytest.mark.parametrize(
    ("change", "refusal"),
    [({"after_event": -2}, "comes after event -2"), ({"op": "noSuchOp"}, "the unknown op 'noSuchOp'")],
)
def test_a_query_that_would_never_be_evaluated_is_refused(change: dict, refusal: str, tmp_path: Path) -> None:
    """Its answer would stay null, and pass against an expected null."""
    scenario = tmp_path / SCENARIOS[0].name
    shutil.copytree(SCENARIOS[0], scenario)
    queries = scenario / "queries.jsonl"
    first = json.loads(queries.read_text().splitlines()[0])
    queries.write_text(queries.read_text() + json.dumps(first | change | {"expect": None}) + "\n")
    with pytest.raises(ValueError, match=re.escape(refusal)):
        Scenario.load(scenario)


def test_json_values_compare_with_their_types() -> None:
    assert same_json({"a": [1, "x", None]}, {"a": [1, "x", None]})
    assert not same_json(True, 1) and not same_json(1, 1.0) and not same_json({"a": 0}, {"a": False})
    assert not same_json([1, 2], [2, 1]) and not same_json({"a": 1}, {"a": 1, "b": 1})
