"""Running the manager as a process (``rlmm consume``): partitions from the command line, status lines
while it runs, a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from rlmm.records.model import TopicIdPartition
from rlmm.records.uuid import uuid_from_str
from rlmm.state.view import View, reset_view

MAX_PARTITION = 2**31 - 1  # Kafka's partition numbers are int32, from 0


def parse_partition(text: str) -> TopicIdPartition:
    """``TOPIC_ID:TOPIC:PARTITION``, the topic id in Kafka's text form."""
    topic_id, sep, rest = text.partition(":")
    topic, sep2, partition = rest.rpartition(":")
    if not (sep and sep2):
        raise ValueError(f"expected TOPIC_ID:TOPIC:PARTITION, got {text!r}")
    if not (partition.isascii() and partition.isdigit()) or int(partition) > MAX_PARTITION:
        raise ValueError(f"the partition of {text!r} is {partition!r}: give a number from 0 to {MAX_PARTITION}")
    return TopicIdPartition(uuid_from_str(topic_id), topic, int(partition))


def read_partitions(lines: Iterable[str]) -> list[TopicIdPartition]:
    """JSON lines with ``topic_id``, ``topic`` and ``partition`` (a compat scenario's ``assigned`` form)."""
    out = []
    for line in lines:
        if line.strip():
            entry = json.loads(line)
            out.append(TopicIdPartition(uuid_from_str(entry["topic_id"]), entry["topic"], int(entry["partition"])))
    return out


def run(
    view_dir: Path,
    config: RlmmConfig,
    partitions: list[TopicIdPartition],
    status_every: float,
    exit_when_ready: bool,
    emit: Callable[[dict], None],
    reset: bool = False,
) -> BaseException | None:
    """Consume until SIGTERM/SIGINT (or, with ``exit_when_ready``, until every registered partition is
    ready); emit a JSON-able status every ``status_every`` s. ``reset``: set the view aside first and
    consume into a fresh one (``reset_view``). Returns why the consumer failed, if it did."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if reset:
        partitions = partitions + reset_view(view_dir)
    with View(view_dir) as view, RemoteLogMetadataManager(view, config, partitions) as rlmm:
        consumer = rlmm.consumer
        emit(
            {
                "event": "started",
                "start_positions": {str(mp): p for mp, p in consumer.initial_positions.items()},
                "registered": len(consumer.registered()),
            }
        )
        while not stop.is_set() and consumer.failure is None:
            if exit_when_ready and consumer.wait_ready(None, timeout=status_every):
                break
            if not exit_when_ready:
                stop.wait(status_every)
            emit({"event": "status", **rlmm.status()})
        emit({"event": "stopped", **rlmm.status()})
    return consumer.failure


def emit_json(out: TextIO) -> Callable[[dict], None]:
    def emit(line: dict) -> None:
        out.write(json.dumps(line) + "\n")
        out.flush()

    return emit
