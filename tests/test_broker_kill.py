"""SIGKILL `rlmm consume` at random points while it loads a topic, restart it each time, and require
(1) the final view to equal a clean replay of the topic, key for key in every column family, and
(2) no run to read history again: what each run reports as applied shows up in where the next run
starts, and the runs together applied no more records than the topic holds."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient

from consumers import view_state
from consumers.topic import ensure_topic
from rlmm.records import uuid_to_str
from rlmm.state import keys as K
from rlmm.state.view import CONSUMER_STATE_PREFIX, View
from rlmm.workload import Workload, WorkloadConfig
from tests.kafka_broker import RawProducer

KILLS = 12
EVENTS = 20_000
PARTITIONS = 8


def clean_replay(path, partitions, stream) -> View:
    view = View(path)
    with view.batch() as batch:
        for tp in partitions:
            batch.assign(tp)
        for event in stream:
            batch.apply(event.metadata_partition, event.offset, event.value)
        for tp in partitions:
            batch.mark_ready(tp)
    return view


def test_killed_consumer_restarts_where_it_was(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=PARTITIONS)
    load = Workload(
        WorkloadConfig(
            partitions=20,
            metadata_partitions=PARTITIONS,
            seed=21,
            invalid_share=0.01,
            redelivery_share=0.01,
            partition_delete_share=0.0005,
            retained_segments=10,
        )
    )
    seen, stream = set(), []
    for event in load.events(EVENTS):
        if (event.metadata_partition, event.offset) not in seen:  # a redelivery is not a new record in a topic
            seen.add((event.metadata_partition, event.offset))
            stream.append(event)
    ensure_topic(AdminClient(config.admin_config()), config)
    offsets = RawProducer(config.bootstrap_servers, config.topic).produce(
        [(e.metadata_partition, e.value) for e in stream]
    )
    assert offsets == [e.offset for e in stream]
    partitions_file = tmp_path / "partitions.jsonl"
    partitions_file.write_text(
        "".join(
            json.dumps({"topic_id": uuid_to_str(tp.topic_id), "topic": tp.topic, "partition": tp.partition}) + "\n"
            for tp in load.user_partitions()
        )
    )
    command = [
        sys.executable,
        "-m",
        "rlmm.cli",
        "consume",
        "--view",
        str(tmp_path / "view"),
        "-b",
        config.bootstrap_servers,
        "--partitions-file",
        str(partitions_file),
        "--set",
        f"remote.log.metadata.topic.name={config.topic}",
        "--set",
        f"remote.log.metadata.topic.num.partitions={PARTITIONS}",
        "--set",
        "remote.log.metadata.consume.max.batch.records=100",
        "--status-every",
        "0.05",
        "--exit-when-ready",
        "--log-level",
        "error",
    ]
    rng = random.Random(5)
    kill_points = sorted(rng.sample(range(len(stream) * 9 // 10), KILLS))  # in records applied overall
    runs: list[list[dict]] = []
    kills = 0
    while True:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        lines = [child.stdout.readline()]
        assert lines[0], "rlmm consume exited before it started"
        if kills < KILLS:
            start = sum(json.loads(lines[0])["start_positions"].values())
            while line := child.stdout.readline():
                lines.append(line)
                if start + json.loads(line).get("records_applied", 0) >= kill_points[kills]:
                    break
            time.sleep(rng.uniform(0.0, 0.02))
            os.kill(child.pid, signal.SIGKILL)
        out, _ = child.communicate(timeout=120)
        runs.append([json.loads(line) for line in [*lines, *out.splitlines()]])
        if child.returncode == 0:
            break
        assert child.returncode == -signal.SIGKILL, f"rlmm consume failed: {runs[-1][-1]}"
        kills += 1
    assert kills == KILLS

    total = len(stream)
    starts = [sum(run[0]["start_positions"].values()) for run in runs]
    applied = [max((line.get("records_applied", 0) for line in run), default=0) for run in runs]
    for r in range(1, len(runs)):
        for mp, position in runs[r - 1][0]["start_positions"].items():
            assert runs[r][0]["start_positions"][mp] >= position
        # what run r-1 reported as applied is in the view the next run starts from
        assert starts[r] - starts[r - 1] >= applied[r - 1], (r, starts, applied)
    assert runs[-1][-1]["event"] == "stopped" and runs[-1][-1]["pending_partitions"] == 0
    assert applied[-1] == total - starts[-1]  # the last run read only what the others had not applied
    assert sum(applied) <= total
    assert sum(start > 0 for start in starts) >= KILLS // 2  # most kills happened after some progress

    with View(tmp_path / "view") as view, clean_replay(tmp_path / "clean", load.user_partitions(), stream) as clean:
        assert _without_holders(view.consumer_state()) == [
            b"num_partitions",
            b"topic_id",
        ]  # the consumer's bookkeeping: no reading again left
        for cf in K.COLUMN_FAMILIES:
            items = [(key, value) for key, value in view.items(cf) if not key.startswith(CONSUMER_STATE_PREFIX)]
            assert items == list(clean.items(cf)), f"column family {cf} differs from a clean replay"


def _without_holders(state: dict[bytes, bytes]) -> list[bytes]:
    """The consumer's bookkeeping but the holders of the registrations (one key per registered partition)."""
    return [key for key in state if not key.startswith(view_state.HOLDERS)]
