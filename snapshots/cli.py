"""``rlmm snapshot build|restore|export|verify`` and ``rlmm archive``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from snapshots.format import SnapshotError

_DIR = click.Path(file_okay=False, path_type=Path)


def _progress(quiet: bool):
    start = time.monotonic()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"[{time.monotonic() - start:7.1f}s] {message}", err=True)
    return say


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


@click.group()
def snapshot() -> None:
    """Snapshots of the view: rebuild with Spark, restore, export, verify."""


@snapshot.command()
@click.option("--bootstrap-servers", "-b", "bootstrap", help="Read the metadata topic from this Kafka.")
@click.option("--archive", "archive_dir", type=_DIR, help="Read an `rlmm archive` directory instead of Kafka.")
@click.option("--topic", default="__remote_log_metadata", show_default=True)
@click.option("--out", required=True, type=_DIR, help="The new snapshot's directory (must not exist).")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--from", "base_dir", type=_DIR, help="An older snapshot: fold only the records after its offsets.")
@click.option("--split", type=click.IntRange(min=1), default=250_000, show_default=True,
              help="Records per Kafka input partition.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def build(bootstrap, archive_dir, topic, out, master, base_dir, split, quiet) -> None:
    """Rebuild a snapshot with Spark from the topic (end offsets fixed at start) or an archive."""
    if (bootstrap is None) == (archive_dir is None):
        raise click.UsageError("give either --bootstrap-servers or --archive")
    from snapshots.job import build as run, spark_session
    say = _progress(quiet)
    say(f"starting Spark ({master})")
    from pyspark.sql import SparkSession
    owned = SparkSession.getActiveSession() is None  # in-process callers (tests) may have one already
    try:
        spark = spark_session(master)
    except RuntimeError as exc:
        _fail(exc)
    try:
        manifest = run(spark, out, bootstrap=bootstrap, topic=topic, archive_dir=archive_dir, base_dir=base_dir,
                       split=split, progress=say)
    except (SnapshotError, ValueError, TimeoutError) as exc:
        _fail(exc)
    finally:
        if owned:
            spark.stop()
    click.echo(json.dumps({"snapshot": str(out), "counts": manifest["counts"],
                           "metadata_offsets": manifest["metadata_offsets"]}))


@snapshot.command()
@click.argument("snapshot_dir", type=_DIR)
@click.option("--db", required=True, type=_DIR, help="The new view's directory (must not exist or be empty).")
@click.option("--quiet", is_flag=True)
def restore(snapshot_dir, db, quiet) -> None:
    """Build a fresh view from a snapshot; `rlmm serve` then tails the topic from its offsets."""
    from snapshots.restore import restore as run
    start = time.monotonic()
    try:
        result = run(snapshot_dir, db, progress=_progress(quiet))
    except SnapshotError as exc:
        _fail(exc)
    result["seconds"] = round(time.monotonic() - start, 3)
    result["metadata_offsets"] = {str(k): v for k, v in result["metadata_offsets"].items()}
    click.echo(json.dumps(result))


@snapshot.command()
@click.option("--db", required=True, type=_DIR, help="The view (may be in use by a running service).")
@click.option("--out", required=True, type=_DIR)
@click.option("--num-partitions", type=click.IntRange(min=1), default=50, show_default=True,
              help="The metadata topic's partition count (remote.log.metadata.topic.num.partitions).")
@click.option("--topic", default="__remote_log_metadata", show_default=True)
def export(db, out, num_partitions, topic) -> None:
    """Write a snapshot of a view from a consistent point in time, without Spark."""
    from snapshots.restore import export as run
    try:
        manifest = run(db, out, num_partitions, topic)
    except (SnapshotError, ValueError) as exc:
        _fail(exc)
    click.echo(json.dumps({"snapshot": str(out), "counts": manifest["counts"],
                           "metadata_offsets": manifest["metadata_offsets"]}))


@snapshot.command()
@click.argument("snapshot_dir", type=_DIR)
@click.option("--db", required=True, type=_DIR)
def verify(snapshot_dir, db) -> None:
    """Compare a snapshot with a view; print every difference (exit code 1 if any)."""
    from snapshots.restore import verify as run
    try:
        diffs = run(snapshot_dir, db)
    except (SnapshotError, ValueError) as exc:
        _fail(exc)
    for d in diffs:
        click.echo(d)
    click.echo(json.dumps({"differences": len(diffs)}))
    sys.exit(1 if diffs else 0)


@click.command()
@click.option("--bootstrap-servers", "-b", "bootstrap", required=True)
@click.option("--topic", default="__remote_log_metadata", show_default=True)
@click.option("--out", required=True, type=_DIR)
@click.option("--records-per-file", type=click.IntRange(min=1), default=500_000, show_default=True)
@click.option("--quiet", is_flag=True)
def archive(bootstrap, topic, out, records_per_file, quiet) -> None:
    """Copy the raw records of the metadata topic (value, partition, offset, timestamp) into Avro files."""
    from snapshots.archive import archive as run
    try:
        manifest = run(bootstrap, topic, out, records_per_file=records_per_file, progress=_progress(quiet))
    except (SnapshotError, ValueError, TimeoutError) as exc:
        _fail(exc)
    click.echo(json.dumps({"archive": str(out), "files": len(manifest["files"]),
                           "records": sum(f["records"] for f in manifest["files"])}))
