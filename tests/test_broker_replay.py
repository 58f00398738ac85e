"""Every public compat scenario, through a real broker: its records are produced into a topic with the
scenario's metadata partitions (each at its own offset), the consumer applies them, and every query
must get the answer `rlmm replay` gives, at the same point of the stream; the views must be equal.

``live`` scenarios: the partitions are registered while the topic is empty (so they are ready at
once), then the records are produced up to each query point and the queries asked once they are
applied (read-your-writes through the offset watcher). ``bootstrap`` scenarios: every record is in
the topic before the partitions are registered, and the consumer is held at each query point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from rlmm.replay import Scenario, answer, replay
from rlmm.state import keys as K
from rlmm.state.view import View
from tests.kafka_broker import RawProducer
from tests.kafka_compat import compat_dir

SCENARIOS = sorted(p for p in (compat_dir() / "replay-public").iterdir() if p.is_dir())


def view_content(view: View) -> dict[str, list]:
    """Every column family but the counters (a redelivered record is counted by the replay, while the
    topic holds each offset once)."""
    return {cf: list(view.items(cf)) for cf in K.COLUMN_FAMILIES if cf != K.META}


@pytest.mark.parametrize("scenario_dir", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_consumer_answers_like_replay(scenario_dir: Path, rlmm_config, tmp_path) -> None:
    scenario = Scenario.load(scenario_dir)
    meta = json.loads((scenario_dir / "scenario.json").read_text())
    replayed = list(replay(scenario_dir, tmp_path / "replayed"))
    expected = [line["answer"] for line in replayed if "query" in line]

    # every metadata partition is consumed, as the replay model reads every event
    config = rlmm_config(num_partitions=meta["num_metadata_partitions"], assign_all=True)
    ensure_topic(AdminClient(config.admin_config()), config)
    produced: set[tuple[int, int]] = set()
    index_of: list[int] = []  # per event: how far the stream (without redeliveries) goes
    stream = []
    for event in scenario.events:
        key = (event["metadata_partition"], event["offset"])
        if key not in produced:
            produced.add(key)
            stream.append(event)
        index_of.append(len(stream))

    producer = RawProducer(config.bootstrap_servers, config.topic)

    def produce(events: list[dict]) -> None:
        offsets = producer.produce([(e["metadata_partition"], bytes.fromhex(e["hex"])) for e in events])
        assert offsets == [e["offset"] for e in events], "the topic must hold each record at its scenario offset"

    tps = [tp for tp, _ in scenario.assigned]
    stops = sorted({q["after_event"] for q in scenario.queries})
    answers: dict[int, object] = {}
    bootstrap = scenario.mode == "bootstrap"
    with View(tmp_path / "view") as view:
        rlmm = RemoteLogMetadataManager(view, config, tps)
        assert [rlmm.consumer.metadata_partition_of(tp) for tp in tps] == [mp for _, mp in scenario.assigned]
        if bootstrap:
            produce(stream)
            rlmm.consumer.hold({mp: 0 for mp in range(config.num_partitions)})
        with rlmm:
            used = {e["metadata_partition"] for e in stream}
            # ready at once: every partition of a live scenario, those of an empty metadata partition
            assert rlmm.consumer.wait_ready(
                [tp for tp, mp in scenario.assigned if not bootstrap or mp not in used], timeout=30
            )
            done = 0
            for stop in [*stops, len(scenario.events) - 1]:
                upto = index_of[stop] if stop >= 0 else 0
                batch, done = stream[done:upto], upto
                limits = {mp: 0 for mp in range(config.num_partitions)}
                for event in stream[:upto]:
                    limits[event["metadata_partition"]] = event["offset"] + 1
                if bootstrap:
                    rlmm.consumer.hold(limits)
                else:
                    produce(batch)
                for mp, limit in limits.items():
                    if limit:
                        rlmm.wait_applied(mp, limit - 1, timeout=30)
                for j, query in enumerate(scenario.queries):
                    if query["after_event"] == stop:
                        answers.setdefault(j, answer(view.queries, query))
        got = [answers[j] for j in range(len(scenario.queries))]
        mismatches = [
            (j, q["op"], q["args"], e, g) for j, (q, e, g) in enumerate(zip(scenario.queries, expected, got)) if e != g
        ]
        assert not mismatches, f"answers differ from rlmm replay (query, op, args, replay, broker): {mismatches}"
        ours = view_content(view)
    with View(tmp_path / "replayed") as clean:
        assert ours == view_content(clean)
