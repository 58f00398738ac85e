"""``rlmm demo``: the whole stack on this machine in one command.

Starts a local Tansu broker (``consumers/broker.py``), ``rlmm serve`` as a subprocess on a free loopback
port over a temporary view (Kafka-backed, so it consumes and writes), registers the partitions of a
``rlmm.workload.Workload``, produces the workload's records to the metadata topic (about 1 in 1,000 of them
invalid, as the workload makes them, plus one more undecodable record, raw), waits until every partition
is ready and every record is consumed, runs one round of every query through ``rlmm.client`` and prints a
summary on stdout (progress on stderr). Ctrl-C stops everything: the service and the broker
by PID, the temporary directory removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import click

from rlmm.cli.errors import Failure
from rlmm.errors import DecodeError, DemoError
from rlmm.records.canonical import to_canonical
from rlmm.records.model import SegmentMetadata
from rlmm.records.serde import decode_value

TOPIC = "__remote_log_metadata"
UNDECODABLE = b"\xff\xfe not a remote log metadata record"


class _Service:
    """``rlmm serve`` in its own process; stopped by PID (SIGTERM, then SIGKILL)."""

    def __init__(self, workdir: Path, bootstrap: str, metadata_partitions: int, listen: str) -> None:
        self.log_path = workdir / "serve.log"
        self.view = workdir / "view"
        command = [
            sys.executable,
            "-m",
            "rlmm.cli",
            "serve",
            "--view",
            str(self.view),
            "--listen",
            listen,
            "-b",
            bootstrap,
            "--log-format",
            "text",
            "--log-level",
            "warning",
            "--grace-s",
            "2",
            "--set",
            f"remote.log.metadata.topic.num.partitions={metadata_partitions}",
            "--set",
            "remote.log.metadata.topic.replication.factor=1",
            "--set",
            "remote.log.metadata.topic.min.insync.replicas=1",
        ]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True
        )  # Ctrl-C reaches us; we stop it ourselves
        self.port: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_serving(self, timeout: float = 30.0) -> int:
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not line or not line[0]:
            self.stop()
            raise DemoError(f"rlmm serve did not start; its log ends with:\n{self.log_tail()}")
        self.port = json.loads(line[0])["port"]
        return self.port

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block has run; then the handlers that were there take them (in the main
    thread, the only one signals reach)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _: received.append(signum)) for sig in HELD_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for sig in dict.fromkeys(received):
        handler = previous[sig]
        if callable(handler):
            handler(sig, None)


def _remove(workdir: Path) -> None:
    """Remove the demo's directory; say what is left if that does not do."""
    shutil.rmtree(workdir, ignore_errors=True)
    if workdir.exists():
        left = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))[:10]
        click.echo(f"could not remove {workdir}: {', '.join(left) or 'the directory itself'} left", err=True)


def _timed(call):
    start = time.perf_counter()
    result = call()
    return result, (time.perf_counter() - start) * 1000.0


def run_demo(
    events: int,
    partitions: int,
    metadata_partitions: int,
    seed: int,
    timeout: float,
    keep: bool,
    as_json: bool,
    listen: str = "127.0.0.1:0",
) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from consumers.broker import LocalBroker
    from consumers.config import RlmmConfig
    from rlmm.client import RlmmClient
    from rlmm.workload import Workload, WorkloadConfig

    console = Console(stderr=True, quiet=as_json)
    workdir = Path(tempfile.mkdtemp(prefix="rlmm-demo-"))
    broker: LocalBroker | None = None
    service: _Service | None = None
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            step = progress.add_task("starting broker and service", total=3)
            broker = LocalBroker(log_path=workdir / "tansu.log").start()
            progress.advance(step)
            service = _Service(workdir, broker.bootstrap_servers, metadata_partitions, listen)
            target = f"127.0.0.1:{service.wait_serving()}"
            progress.advance(step)
            client = RlmmClient(target, timeout=10.0, retry_for=30.0)
            workload = Workload(
                WorkloadConfig(
                    partitions=partitions, metadata_partitions=metadata_partitions, seed=seed, redelivery_share=0.0
                )
            )
            tps = workload.user_partitions()
            client.on_partition_leadership_changes(tps, [])
            progress.advance(step)

            config = RlmmConfig.from_properties(
                broker.bootstrap_servers,
                {
                    "remote.log.metadata.topic.num.partitions": str(metadata_partitions),
                    "remote.log.metadata.topic.replication.factor": "1",
                    "remote.log.metadata.topic.min.insync.replicas": "1",
                },
            )
            _wait_topic(client, config, metadata_partitions, timeout)
            started = time.perf_counter()
            produced, undecodable = _produce(progress, config, workload, events, tps, timeout)
            _wait_ingest(progress, client, produced, timeout)
            ingest_s = time.perf_counter() - started
            # a partition whose deletion finished is gone (not ready, as in Kafka): wait for the others
            deleted = [p.tp for p in workload.partitions if p.deleted]
            live = [tp for tp in tps if tp not in deleted]
            ready_ms = _wait_ready(progress, client, live, timeout)
            tp, epoch, offset, latencies = _query_round(progress, client, live)

        status = latencies["status"]["answer"]
        applied = _applied(status)
        summary = {
            "broker": {"bootstrap_servers": broker.bootstrap_servers, "pid": broker.pid},
            "service": {"address": target, "pid": service.pid},
            "events_sent": produced,
            "events_applied": applied,
            "ingest_seconds": round(ingest_s, 3),
            "events_per_second": round(applied / ingest_s, 1) if ingest_s > 0 else 0.0,
            "partitions": len(tps),
            "partitions_ready": sum(1 for t in live if client.is_ready(t)),
            "partitions_deleted": len(deleted),  # by the workload (partition deletion): no longer served
            "ready_wait_ms": round(ready_ms, 3),
            "metadata_partitions": metadata_partitions,
            "undecodable_sent": undecodable,  # the workload's undecodable records and the one added
            "quarantined": status["quarantined"],
            "counters": status["counters"],
            "health": latencies["health"]["answer"],
            "query_partition": f"{_tp_text(tp)}",
            "queries": latencies,
        }
        client.close()
        if as_json:
            click.echo(json.dumps(summary))
        else:
            _print_summary(summary)
        if keep:
            _keep(summary, tp, epoch, offset, as_json)
        return summary
    finally:
        with _signals_held():  # a Ctrl-C must not cut the cleanup short
            if service is not None:
                service.stop()
            if broker is not None:
                broker.stop()
            _remove(workdir)


def _produce(progress, config, workload, events: int, tps: list, timeout: float) -> tuple[int, int]:
    """Produce the workload's records and one undecodable record; returns how many were acknowledged, and how
    many of them do not decode (the quarantine's share)."""
    from consumers.producer import MetadataProducer

    producer = MetadataProducer(config)
    send = progress.add_task("producing workload records", total=events + 1)
    futures = []
    undecodable = 1  # the one added below
    try:
        for i, event in enumerate(workload.events(events)):
            undecodable += not _decodes(event.value)
            futures.append(_send(producer, event.metadata_partition, event.value, timeout))
            if i % 200 == 0:
                progress.update(send, completed=i)
        # one record that no Kafka deserializer accepts, produced raw
        futures.append(_send(producer, workload.metadata_partition_of(tps[0]), UNDECODABLE, timeout))
    finally:
        producer.close()
    for future in futures:
        future.result(timeout)
    progress.update(send, completed=len(futures))
    return len(futures), undecodable


def _decodes(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        decode_value(value)
    except DecodeError:
        return False
    return True


def _wait_ingest(progress, client, produced: int, timeout: float) -> None:
    ingest = progress.add_task("service consuming into its view", total=produced)
    deadline = time.monotonic() + timeout
    while True:
        status = _consuming(client.status())
        consumed = _applied(status)
        progress.update(ingest, completed=min(consumed, produced))
        if consumed >= produced:
            return
        if time.monotonic() > deadline:
            raise DemoError(f"the service consumed {consumed} of {produced} records within {timeout} s")
        time.sleep(0.05)


def _wait_ready(progress, client, live: list, timeout: float) -> float:
    """Milliseconds until every partition in ``live`` is ready."""
    ready_wait = progress.add_task("waiting for readiness", total=len(live))
    from rlmm.errors import CallError

    ready_start = time.perf_counter()
    try:
        ready = client.wait_ready(live, timeout)
    except CallError as exc:  # the service's consumer stopped (not retried)
        raise DemoError(f"the service stopped answering readiness: {exc}") from None
    if not ready:
        waiting = [mp["not_ready_reason"] for mp in client.status()["metadata_partitions"] if mp["not_ready_reason"]]
        raise DemoError(f"not every (undeleted) partition became ready: {'; '.join(waiting) or 'none waits now'}")
    progress.update(ready_wait, completed=len(live))
    return (time.perf_counter() - ready_start) * 1000.0


def _query_round(progress, client, live: list) -> tuple:
    """One round of every query on the partition with the most segments: (partition, epoch, offset asked,
    the answers and latencies by query, the status and health among them)."""
    from rlmm.errors import CallError

    queries = progress.add_task("one round of every query", total=10)
    sizes = {tp: client.remote_log_size(tp) for tp in live}
    tp = max(live, key=lambda t: sizes[t])
    segments = client.list_remote_log_segments(tp)
    some = segments[len(segments) // 2] if segments else None
    epoch, offset = (some.segment_leader_epochs[0][0], some.start_offset) if some else (0, 0)
    calls = {
        "remote_log_segment_metadata": lambda: client.remote_log_segment_metadata(tp, epoch, offset),
        "batch_remote_log_segment_metadata": lambda: client.remote_log_segment_metadata_batch(
            [(tp, epoch, offset)] * 10
        ),
        "highest_offset_for_epoch": lambda: client.highest_offset_for_epoch(tp, epoch),
        "list_remote_log_segments": lambda: client.list_remote_log_segments(tp),
        "list_epoch_segments": lambda: client.list_epoch_segments(tp, epoch),
        "remote_log_size": lambda: client.remote_log_size(tp),
        "remote_log_size_epoch": lambda: client.remote_log_size(tp, epoch),
        "next_segment_with_txn_index": lambda: client.next_segment_with_txn_index(tp, epoch, 0),
        "max_timestamp": lambda: client.max_timestamp(tp),
        "is_ready": lambda: client.is_ready(tp),
    }
    latencies: dict[str, dict] = {}
    for name, call in calls.items():
        try:
            result, ms = _timed(call)
            latencies[name] = {"ms": round(ms, 3), "answer": _as_json(result)}
        except CallError as exc:  # an answer too (e.g. RemoteResourceNotFound), still a round trip
            latencies[name] = {"ms": None, "error": exc.code.name}
        progress.advance(queries)
    for name, call in (("status", client.status), ("health", client.health)):
        result, ms = _timed(call)
        latencies[name] = {"ms": round(ms, 3), "answer": result}
    return tp, epoch, offset, latencies


def _wait_topic(client, config, metadata_partitions: int, timeout: float) -> None:
    """Produce only once the service created the metadata topic (health SERVING: the consumer runs on a
    known-good topic) and the broker lists all its partitions: a producer asking for an unknown topic
    could have the broker auto-create it with the wrong partition count."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})
    deadline = time.monotonic() + timeout
    while True:
        if client.health() != "SERVING":
            _consuming(client.status())
        else:
            topic = admin.list_topics(topic=config.topic, timeout=5).topics.get(config.topic)
            if topic is not None and topic.error is None and len(topic.partitions) == metadata_partitions:
                return
        if time.monotonic() > deadline:
            raise DemoError(
                f"the service did not create {config.topic} with {metadata_partitions} partitions within {timeout} s"
            )
        time.sleep(0.05)


def _send(producer, metadata_partition: int, value: bytes, timeout: float):
    """Produce, waiting while the producer does not know the topic's partitions yet (just created)."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return producer.send(metadata_partition, value)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code not in (KafkaError._UNKNOWN_PARTITION, KafkaError._QUEUE_FULL) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _consuming(status: dict) -> dict:
    """The service's status, while its consumer runs; a ``DemoError`` with its failure once it stopped."""
    if not status["consumes"] and status["failure"]:
        raise DemoError(f"the service's consumer stopped: {status['failure']}")
    return status


def _applied(status: dict) -> int:
    """Records the view applied: offsets start at 0 in every metadata partition."""
    return sum(mp["applied_offset"] + 1 for mp in status["metadata_partitions"] if mp["applied_offset"] is not None)


def _tp_text(tp) -> str:
    from rlmm.records.uuid import uuid_to_str

    return f"{uuid_to_str(tp.topic_id)}:{tp.topic}:{tp.partition}"


def _as_json(answer: object) -> object:
    """A query's answer as JSON: segments in Kafka's canonical form, lists element by element."""
    if isinstance(answer, list):
        return [_as_json(item) for item in answer]
    return to_canonical(answer) if isinstance(answer, SegmentMetadata) else answer


def _short(answer: object) -> str:
    """An answer in a table cell: a segment by its offsets and state, a list by its length."""
    if isinstance(answer, list):
        return f"{len(answer)} segment(s)" if all(isinstance(a, dict) or a is None for a in answer) else str(answer)
    if isinstance(answer, dict) and "start_offset" in answer:
        return f"segment {answer['start_offset']}-{answer['end_offset']} ({answer['state']})"
    return "status" if isinstance(answer, dict) else str(answer)


def _print_summary(s: dict) -> None:
    """The summary, for people, on stdout: it is the command's output."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]rlmm demo[/bold]: {s['events_applied']} of {s['events_sent']} records applied in "
        f"{s['ingest_seconds']} s = [bold]{s['events_per_second']:,} events/s[/bold]; "
        f"{s['partitions_ready']}/{s['partitions'] - s['partitions_deleted']} partitions ready "
        f"({s['partitions_deleted']} deleted by the workload) "
        f"(ready wait {s['ready_wait_ms']:.1f} ms); quarantined: {s['quarantined']} "
        f"(the undecodable records sent: {s['undecodable_sent']}); health {s['health']}"
    )
    table = Table("query", "latency ms", "answer")
    for name, q in s["queries"].items():
        table.add_row(
            name,
            "-" if q.get("ms") is None else f"{q['ms']:.3f}",
            _short(q["answer"]) if "answer" in q else str(q.get("error")),
        )
    console.print(table)


def _keep(s: dict, tp, epoch: int, offset: int, as_json: bool) -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    target = s["service"]["address"]
    lines = [
        f"broker {s['broker']['bootstrap_servers']} (pid {s['broker']['pid']}), "
        f"service {target} (pid {s['service']['pid']}); Ctrl-C stops both",
        f"rlmm query --target {target} status",
        f"rlmm query --target {target} list {_tp_text(tp)} --epoch {epoch}",
        f"rlmm query --target {target} segment {_tp_text(tp)} {epoch} {offset}",
        f"rlmm query --target {target} highest-offset {_tp_text(tp)} {epoch}",
    ]
    for line in lines:
        click.echo(line, err=as_json)
    stop.wait()


@click.command()
@click.option(
    "--events",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Workload records to produce: about 1 in 1,000 is invalid (undecodable bytes, which the quarantine "
    "keeps, illegal transitions, updates of unknown segments), and one more undecodable record is added.",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="User partitions the workload uploads segments for.",
)
@click.option(
    "--metadata-partitions",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Partitions of the metadata topic.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Workload seed.")
@click.option(
    "--timeout", type=float, default=120.0, show_default=True, help="Seconds to wait for ingestion and readiness."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object (no progress bars).")
@click.option("--keep", is_flag=True, help="Leave broker and service running until Ctrl-C; print how to query them.")
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    help="The service's gRPC address HOST:PORT (port 0: a free one); 127.0.0.1:50051 is rlmm query's default.",
)
def demo(
    events: int,
    partitions: int,
    metadata_partitions: int,
    seed: int,
    timeout: float,
    as_json: bool,
    keep: bool,
    listen: str,
) -> None:
    """Start a local broker and `rlmm serve`, run a tiered-storage workload through them, query, summarize.

    Needs the dev extra (pip install 'rlmm[dev]') for the local broker. Everything is stopped and
    removed at the end (or on Ctrl-C)."""
    from rlmm.errors import BrokerError

    def interrupt(*_: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)  # also when started with SIGINT ignored (a background job)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        run_demo(events, partitions, metadata_partitions, seed, timeout, keep, as_json, listen)
    except (DemoError, BrokerError) as exc:
        raise Failure(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted: broker and service stopped, temporary files removed", err=True)
        sys.exit(130)
