"""``rlmm snapshot build|restore|export|verify`` and ``rlmm archive``."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from rlmm.cli.errors import Failure, view_errors
from rlmm.errors import SnapshotError
from rlmm.runtime import stderr_into

_DIR = click.Path(file_okay=False, path_type=Path)


def _progress(quiet: bool):
    start = time.monotonic()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"[{time.monotonic() - start:7.1f}s] {message}", err=True)

    return say


@contextlib.contextmanager
def _records_bar(quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar of the records read on stderr, fed (records read, records to read)."""
    if quiet:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("records read"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = None

        def update(read: int, total: int) -> None:
            nonlocal task
            if task is None:
                task = bar.add_task("records read", total=total)
            bar.update(task, completed=read)

        yield update


def _kafka_failure(exc: Exception, bootstrap: str, topic: str) -> Failure:
    return Failure(f"cannot read {topic} from {bootstrap} ({exc}): check --bootstrap-server and that the broker is up")


def _spark_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--conf")
        conf[key.strip()] = value
    return conf


@click.group()
def snapshot() -> None:
    """Snapshots of the view: rebuild with Spark, restore, export, verify."""


@snapshot.command()
@click.option("--bootstrap-server", "-b", "bootstrap", help="Read the metadata topic from this Kafka.")
@click.option("--archive", "archive_dir", type=_DIR, help="Read an `rlmm archive` directory instead of Kafka.")
@click.option(
    "--topic",
    default="__remote_log_metadata",
    show_default=True,
    help="The metadata topic (remote.log.metadata.topic.name).",
)
@click.option("--out", required=True, type=_DIR, help="The new snapshot's directory (must not exist).")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    callback=lambda _c, _p, v: _spark_conf(v),
    help="A Spark configuration property (repeatable), as spark-submit's --conf.",
)
@click.option("--from", "base_dir", type=_DIR, help="An older snapshot: fold only the records after its offsets.")
@click.option(
    "--split",
    type=click.IntRange(min=1),
    default=250_000,
    show_default=True,
    help="Records per Kafka input partition of an incremental build (--from); a full build reads "
    "each metadata partition in one task.",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def build(bootstrap, archive_dir, topic, out, master, confs, base_dir, split, quiet) -> None:
    """Rebuild a snapshot with Spark from the topic (end offsets fixed at start) or an archive."""
    if (bootstrap is None) == (archive_dir is None):
        raise click.UsageError("give either --bootstrap-server or --archive")
    try:
        from pyspark.sql import SparkSession

        from snapshots.job import build as run
        from snapshots.job import spark_session
    except ImportError as exc:
        raise Failure(
            f"rlmm snapshot build needs Spark ({exc}): pip install 'rlmm[spark]' (and a Java runtime); "
            f"restore, export and verify do not"
        ) from None
    from confluent_kafka import KafkaException

    from snapshots.interrupt import cancel_on_interrupt
    from snapshots.preflight import check_build_inputs

    try:
        check_build_inputs(out, bootstrap=bootstrap, topic=topic, archive_dir=archive_dir, base_dir=base_dir)
    except SnapshotError as exc:
        raise Failure(str(exc)) from None
    except (KafkaException, ValueError) as exc:
        raise (Failure(str(exc)) if bootstrap is None else _kafka_failure(exc, bootstrap, topic)) from None
    say = _progress(quiet)
    owned = SparkSession.getActiveSession() is None  # in-process callers (tests) may have one already
    # the JVM's own lines (its modules, log4j's setup, Hadoop's native library) go to a log of their own
    jvm_log = Path(tempfile.gettempdir()) / f"rlmm-snapshot-build-{os.getpid()}.log"
    say(f"starting Spark ({master}; its log, kept if the build fails: {jvm_log})" if owned else "Spark runs already")
    jvm_log.touch()
    try:
        with jvm_log.open("ab") as log, stderr_into(log):
            spark = spark_session(master, conf=confs)
    except RuntimeError as exc:
        raise Failure(f"{exc} (Spark's log: {jvm_log})") from None
    keep_log = True  # for a build that failed, unless the log is empty
    try:
        with cancel_on_interrupt(spark) as interrupted:
            try:
                with _records_bar(quiet) as records_read:
                    manifest = run(
                        spark,
                        out,
                        bootstrap=bootstrap,
                        topic=topic,
                        archive_dir=archive_dir,
                        base_dir=base_dir,
                        split=split,
                        progress=say,
                        records_read=records_read,
                    )
            except Exception:
                if interrupted.is_set():
                    keep_log = False
                    click.echo("interrupted: Spark's jobs cancelled, nothing written", err=True)
                    sys.exit(130)
                raise
        keep_log = False
    except (SnapshotError, ValueError, TimeoutError) as exc:
        raise Failure(f"{exc} (Spark's log: {jvm_log})") from None
    except KafkaException as exc:
        raise _kafka_failure(exc, bootstrap, topic) from None
    finally:
        if owned:
            spark.stop()
        if not keep_log or jvm_log.stat().st_size == 0:
            jvm_log.unlink(missing_ok=True)
    click.echo(
        json.dumps(
            {
                "snapshot": str(out),
                "counts": manifest["counts"],
                "metadata_offsets": manifest["metadata_offsets"],
                "topic_id": manifest["topic_id"],
            }
        )
    )


@snapshot.command()
@click.argument("snapshot_dir", type=_DIR)
@click.option("--view", "db", required=True, type=_DIR, help="The new view's directory (must not exist or be empty).")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def restore(snapshot_dir, db, quiet) -> None:
    """Build a fresh view from a snapshot; `rlmm serve` then tails the topic from its offsets."""
    from snapshots.restore import restore as run

    start = time.monotonic()
    try:
        with view_errors(db):
            result = run(snapshot_dir, db, progress=_progress(quiet))
    except SnapshotError as exc:
        raise Failure(str(exc)) from None
    result["seconds"] = round(time.monotonic() - start, 3)
    result["metadata_offsets"] = {str(k): v for k, v in result["metadata_offsets"].items()}
    click.echo(json.dumps(result))


@snapshot.command()
@click.option("--view", "db", required=True, type=_DIR, help="The view (may be in use by a running service).")
@click.option("--out", required=True, type=_DIR, help="The new snapshot's directory (must not exist).")
@click.option(
    "--num-partitions",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="The metadata topic's partition count (remote.log.metadata.topic.num.partitions).",
)
@click.option(
    "--topic",
    default="__remote_log_metadata",
    show_default=True,
    help="The metadata topic (remote.log.metadata.topic.name).",
)
def export(db, out, num_partitions, topic) -> None:
    """Write a snapshot of a view from a consistent point in time, without Spark."""
    from snapshots.restore import export as run

    try:
        with view_errors(db):
            manifest = run(db, out, num_partitions, topic)
    except (SnapshotError, ValueError) as exc:
        raise Failure(str(exc)) from None
    click.echo(
        json.dumps(
            {
                "snapshot": str(out),
                "counts": manifest["counts"],
                "metadata_offsets": manifest["metadata_offsets"],
                "topic_id": manifest["topic_id"],
            }
        )
    )


@snapshot.command()
@click.argument("snapshot_dir", type=_DIR)
@click.option("--view", "db", required=True, type=_DIR, help="The view (may be in use by a running service).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON object {"differences": N, "details": [...]} instead of one line per difference.',
)
def verify(snapshot_dir, db, as_json) -> None:
    """Compare a snapshot with a view; print every difference, then {"differences": N}.

    Exit code 1 if there is any difference (or the snapshot or the view cannot be read)."""
    from snapshots.restore import verify as run

    try:
        with view_errors(db):
            diffs = run(snapshot_dir, db)
    except (SnapshotError, ValueError) as exc:
        raise Failure(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"differences": len(diffs), "details": diffs}))
    else:
        for d in diffs:
            click.echo(d)
        click.echo(json.dumps({"differences": len(diffs)}))
    sys.exit(1 if diffs else 0)


@click.command()
@click.option("--bootstrap-server", "-b", "bootstrap", required=True, help="The Kafka to read the topic from.")
@click.option(
    "--topic",
    default="__remote_log_metadata",
    show_default=True,
    help="The metadata topic (remote.log.metadata.topic.name).",
)
@click.option("--out", required=True, type=_DIR, help="The new archive's directory (must not exist).")
@click.option(
    "--records-per-file", type=click.IntRange(min=1), default=500_000, show_default=True, help="Records per Avro file."
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def archive(bootstrap, topic, out, records_per_file, quiet) -> None:
    """Copy the raw records of the metadata topic (value, partition, offset, timestamp) into Avro files."""
    from confluent_kafka import KafkaException

    from snapshots.archive import archive as run

    try:
        manifest = run(bootstrap, topic, out, records_per_file=records_per_file, progress=_progress(quiet))
    except (SnapshotError, ValueError, TimeoutError) as exc:
        raise Failure(str(exc)) from None
    except KafkaException as exc:
        raise _kafka_failure(exc, bootstrap, topic) from None
    click.echo(
        json.dumps(
            {
                "archive": str(out),
                "files": len(manifest["files"]),
                "records": sum(f["records"] for f in manifest["files"]),
            }
        )
    )
