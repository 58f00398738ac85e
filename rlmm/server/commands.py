"""``rlmm serve`` (the gRPC service) and ``rlmm query ...`` (its calls from the command line)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import click

from rlmm.cli.errors import Failure, view_errors
from rlmm.cli.settings import settings_from_command_line, settings_options
from rlmm.cli.vocabulary import GroupOptionsAnywhere
from rlmm.records.canonical import to_canonical


@click.command()
@settings_options
@click.option("--listen", help="gRPC address HOST:PORT [127.0.0.1:50051].")
@click.option("--metrics-listen", help="Serve Prometheus /metrics on HOST:PORT.")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path), help="Server certificate (PEM).")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path), help="Server private key (PEM).")
@click.option(
    "--tls-client-ca",
    type=click.Path(dir_okay=False, path_type=Path),
    help="CA (PEM) of client certificates: require mutual TLS.",
)
@click.option(
    "--write-subject",
    "write_subjects",
    multiple=True,
    help="A client certificate subject (or CN) allowed to write (repeatable); tokens go in the file "
    "or RLMM_WRITE_TOKENS.",
)
@click.option(
    "--write-tokens-over-plaintext",
    is_flag=True,
    default=None,
    help="Accept write tokens without TLS, where they travel in clear (loopback, a protected network).",
)
@click.option("--grace-s", type=float, help="Seconds in-flight calls get on SIGTERM [30].")
@click.option(
    "--workers",
    type=int,
    help="Serving processes on the port [1]: one consumes and writes the view, the others read it and "
    "forward writes to the first (docs/operations.md).",
)
@click.option(
    "--reset",
    is_flag=True,
    help="Set the existing view aside (VIEW.reset-TIMESTAMP, nothing is deleted) and consume the topic "
    "again from the start into a fresh view, with the same registered partitions: after the "
    "metadata topic changed under the view.",
)
def serve(config_file: Path | None, kafka: tuple[str, ...], reset: bool, **flags) -> None:
    """Serve the RLMM gRPC API over a view, consuming Kafka into it when bootstrap servers are given.

    Prints one JSON line {"event": "serving", "port": ..., "metrics_port": ..., "pid": ...} once serving
    (with --workers N > 1, "pid" is the supervisor's and "workers" the workers' pids). SIGTERM/SIGINT:
    health turns NOT_SERVING, calls in flight finish (within the grace period), the consumer stops, the
    view is flushed and closed."""
    from rlmm.errors import ServeError
    from rlmm.logs import setup_logging
    from rlmm.server.app import run
    from rlmm.server.workers import serve_workers

    config = settings_from_command_line(config_file, kafka, **flags)
    if reset and config.rlmm_config() is None:
        raise click.UsageError("--reset consumes the topic again into a fresh view: give the bootstrap servers")
    if config.rlmm_config() is None and not (config.view / "CURRENT").is_file():
        raise click.UsageError(
            f"without bootstrap servers serve answers read-only from an existing view, and there "
            f"is none at {config.view}: give --bootstrap-server (or RLMM_BOOTSTRAP_SERVERS), or "
            f"restore a snapshot there first (rlmm snapshot restore)"
        )
    setup_logging(config.log_level, config.log_format)
    try:
        with view_errors(config.view):
            serve_with = run if config.workers == 1 else serve_workers
            serve_with(config, lambda line: click.echo(json.dumps(line)), reset=reset)
    except ServeError as exc:
        raise Failure(str(exc)) from None


# ---- rlmm query ----------------------------------------------------------------------------------------

_PEM = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group(cls=GroupOptionsAnywhere)
@click.option(
    "--target",
    "-t",
    default="127.0.0.1:50051",
    show_default=True,
    envvar="RLMM_TARGET",
    help="The server, HOST:PORT (or RLMM_TARGET).",
)
@click.option("--ca", type=_PEM, help="Verify the server's TLS certificate with this CA (PEM).")
@click.option("--tls", is_flag=True, help="Use TLS, verified with the system's CAs.")
@click.option("--cert", type=_PEM, help="Client certificate (mutual TLS).")
@click.option("--key", type=_PEM, help="Client private key (mutual TLS).")
@click.option("--token", envvar="RLMM_TOKEN", help="Bearer token for writes (or RLMM_TOKEN).")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Deadline of each attempt, seconds.")
@click.option(
    "--retry-for",
    type=float,
    default=10.0,
    show_default=True,
    help="Keep retrying UNAVAILABLE this long, seconds (not a refused connection: nothing listens there).",
)
@click.pass_context
def query(
    ctx: click.Context,
    target: str,
    ca: Path | None,
    tls: bool,
    cert: Path | None,
    key: Path | None,
    token: str | None,
    timeout: float,
    retry_for: float,
) -> None:
    """Ask a running rlmm server (one JSON line per answer). Partitions are TOPIC_ID:TOPIC:PARTITION.

    Exit code 1 when the call fails: the error is printed as JSON on stdout
    ({"error": CODE, "message": ..., "reason": ..., "kafka_exception": ...}) and as one line on stderr."""
    from rlmm.client import RlmmClient

    client = RlmmClient.from_files(
        target, ca=ca, cert=cert, key=key, tls=tls, token=token, timeout=timeout, retry_for=retry_for
    )
    ctx.obj = ctx.with_resource(client)


# Kafka writes a topic id as 22 characters of base64url, where 1 in 64 starts with '-': such a partition,
# -NOGerR7jhnaq36mImUU6g:clicks:0, is an argument, where click would read options (-N..., or -h, the help)
_DASHED_PARTITION = re.compile(r"-[A-Za-z0-9_-]{21}:.*:[0-9]+")
_ARGUMENT = "\0"  # in front of such a token until its callback: no command line can hold it


class _TakesDashedPartitions(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, [_ARGUMENT + a if _DASHED_PARTITION.fullmatch(a) else a for a in args])


query.command_class = _TakesDashedPartitions


def _partition(ctx, param, value: str):
    from consumers.service import parse_partition

    try:
        return parse_partition(value.removeprefix(_ARGUMENT))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


PARTITION = click.argument("partition", callback=_partition)


def _answer(call: Callable[[], object]) -> None:
    from rlmm.errors import CallError

    try:
        result = call()
    except CallError as exc:
        click.echo(
            json.dumps(
                {
                    "error": exc.code.name,
                    "message": exc.message,
                    "reason": exc.reason,
                    "kafka_exception": exc.kafka_exception,
                }
            )
        )
        target = click.get_current_context().obj.target  # the client the query group made
        if exc.reason is None and exc.code.name == "UNAVAILABLE":  # the transport's, not rlmm's answer
            raise Failure(
                f"UNAVAILABLE: no answer from {target} ({exc.message}): is rlmm serve running there? "
                f"Give its address with --target or RLMM_TARGET"
            ) from None
        if exc.reason is None and exc.code.name == "DEADLINE_EXCEEDED":
            raise Failure(
                f"DEADLINE_EXCEEDED: {target} did not answer within --timeout; raise it or look at the server's load"
            ) from None
        raise Failure(f"{exc.code.name}: {exc.message}") from None
    click.echo(json.dumps(_json(result)))


def _json(value: object) -> object:
    if isinstance(value, list):
        return [_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, str, dict)):
        return value
    return to_canonical(value)


@query.command("segment")
@PARTITION
@click.argument("epoch", type=int)
@click.argument("offset", type=int)
@click.pass_obj
def segment(client, partition, epoch: int, offset: int) -> None:
    """The segment holding OFFSET of leader EPOCH (null when none)."""
    _answer(lambda: client.remote_log_segment_metadata(partition, epoch, offset))


@query.command("highest-offset")
@PARTITION
@click.argument("epoch", type=int)
@click.pass_obj
def highest_offset(client, partition, epoch: int) -> None:
    """Highest offset copied for leader EPOCH (null when none)."""
    _answer(lambda: client.highest_offset_for_epoch(partition, epoch))


@query.command("list")
@PARTITION
@click.option("--epoch", type=int, help="Only the segments of this leader epoch, in Kafka's order.")
@click.pass_obj
def list_segments(client, partition, epoch: int | None) -> None:
    """The partition's segments."""
    if epoch is None:
        _answer(lambda: client.list_remote_log_segments(partition))
    else:
        _answer(lambda: client.list_epoch_segments(partition, epoch))


@query.command("size")
@PARTITION
@click.option("--epoch", type=int, help="Only what this leader epoch tracks.")
@click.pass_obj
def size(client, partition, epoch: int | None) -> None:
    """Bytes in remote storage."""
    _answer(lambda: client.remote_log_size(partition, epoch))


@query.command("next-txn")
@PARTITION
@click.argument("epoch", type=int)
@click.argument("offset", type=int)
@click.pass_obj
def next_txn(client, partition, epoch: int, offset: int) -> None:
    """The next segment from OFFSET on, in leader EPOCH, with a transaction index."""
    _answer(lambda: client.next_segment_with_txn_index(partition, epoch, offset))


@query.command("max-timestamp")
@PARTITION
@click.pass_obj
def max_timestamp(client, partition) -> None:
    """The finished segment with the largest max timestamp."""
    _answer(lambda: client.max_timestamp(partition))


@query.command("by-timestamp")
@PARTITION
@click.argument("epoch", type=int)
@click.argument("timestamp", type=int)
@click.option(
    "--starting-offset", type=int, default=0, show_default=True, help="Only segments ending at or after this offset."
)
@click.pass_obj
def by_timestamp(client, partition, epoch: int, timestamp: int, starting_offset: int) -> None:
    """The first finished segment of leader EPOCH, in Kafka's listing order, whose max timestamp is at least
    TIMESTAMP (ms): the segment Kafka's ListOffsets by timestamp reads (null when none)."""
    _answer(lambda: client.first_segment_with_max_timestamp_at_least(partition, epoch, timestamp, starting_offset))


@query.command("ready")
@PARTITION
@click.pass_obj
def ready(client, partition) -> None:
    """Whether the partition's metadata is loaded."""
    _answer(lambda: client.is_ready(partition))


@query.command("status")
@click.pass_obj
def status(client) -> None:
    """Consumer position and lag per metadata partition, counters, quarantine."""
    _answer(client.status)


@query.command("health")
@click.option("--service", default="", help="A service name (default: the whole server).")
@click.pass_obj
def health(client, service: str) -> None:
    """The grpc.health.v1 status."""
    _answer(lambda: client.health(service))
