"""Running the manager as a process (``rlmm consume``): partitions from the command line, status lines
while it runs, a clean stop on SIGTERM/SIGINT, deadlines for reaching the topic and for readiness."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from consumers.config import RlmmConfig
from consumers.consumer import MetadataConsumer
from consumers.manager import RemoteLogMetadataManager
from rlmm.errors import ConsumerStoppedError, ServiceStoppedError
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
    *,
    ready_timeout: float | None = None,
    connect_timeout: float | None = None,
) -> str | None:
    """Consume until SIGTERM/SIGINT (or, with ``exit_when_ready``, until every registered partition is
    ready); emit a JSON-able status every ``status_every`` s. ``reset``: set the view aside first and
    consume into a fresh one (``reset_view``). Returns why it ended badly, if it did: the consumer failed,
    the metadata topic was not reached within ``connect_timeout`` s, or (``exit_when_ready``) a partition was
    not ready within ``ready_timeout`` s, with what it waits for."""
    stop = threading.Event()
    woken: list[Callable[[], None]] = []  # the consumer's waits, to wake on a signal

    def on_signal(*_: object) -> None:
        stop.set()
        for wake in woken:
            wake()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    if reset:
        partitions = partitions + reset_view(view_dir)
    with View(view_dir) as view, RemoteLogMetadataManager(view, config, partitions) as rlmm:
        consumer = rlmm.consumer
        woken.append(consumer.wake)
        emit(
            {
                "event": "started",
                "start_positions": {str(mp): p for mp, p in consumer.initial_positions.items()},
                "registered": len(consumer.registered()),
            }
        )
        started = time.monotonic()
        ready_timeout = ready_timeout if exit_when_ready else None
        problem = None
        try:
            while not stop.is_set():
                elapsed = time.monotonic() - started
                problem, next_deadline = _deadlines(consumer, elapsed, ready_timeout, connect_timeout)
                if problem is not None:
                    break
                consumer.wait_until(
                    lambda: stop.is_set() or (exit_when_ready and consumer.all_ready), min(status_every, next_deadline)
                )
                if exit_when_ready and consumer.all_ready:
                    break
                emit({"event": "status", **rlmm.status()})
        except (ConsumerStoppedError, ServiceStoppedError) as exc:
            problem = str(exc)
        emit({"event": "stopped", **rlmm.status()})
    return problem


def _deadlines(
    consumer: MetadataConsumer, elapsed: float, ready_timeout: float | None, connect_timeout: float | None
) -> tuple[str | None, float]:
    """What missed its deadline ``elapsed`` s after the start, if anything; else the seconds to the next deadline."""
    left = []
    if connect_timeout is not None and not consumer.wait_initialized(0):
        if elapsed >= connect_timeout:
            detail = consumer.connection_problem or f"no answer from {consumer.config.bootstrap_servers}"
            return (
                f"the metadata topic was not reached within --connect-timeout ({connect_timeout:g} s): {detail}; "
                f"check --bootstrap-server and that the brokers run"
            ), 0.0
        left.append(connect_timeout - elapsed)
    if ready_timeout is not None:
        if elapsed >= ready_timeout:
            return f"after --timeout ({ready_timeout:g} s), {_not_ready(consumer)}", 0.0
        left.append(ready_timeout - elapsed)
    return None, min(left, default=float("inf"))


def _not_ready(consumer: MetadataConsumer) -> str:
    """What the registered partitions that are not ready wait for."""
    if not consumer.initialized:
        why = consumer.connection_problem or "the metadata topic has not been reached yet"
        return f"the registered partitions are not ready: {why}"
    return "; ".join(waits.describe() for waits in consumer.not_ready()) or "the partitions are being marked ready"


def emit_json(out: TextIO) -> Callable[[dict], None]:
    def emit(line: dict) -> None:
        out.write(json.dumps(line) + "\n")
        out.flush()

    return emit
