"""The ``rlmm`` command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import click

from rlmm.records.canonical import to_canonical
from rlmm.records.serde import DecodeError, decode_value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rlmm")
def main() -> None:
    """rlmm: Kafka's tiered-storage RemoteLogMetadataManager as an event-sourced service."""


@main.command()
@click.argument("scenario_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--view", "view_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the RocksDB view here (default: a temporary directory, removed afterwards).")
@click.option("--max-batch", type=click.IntRange(min=1), default=None,
              help="Apply at most this many events per atomic batch (default: all events between two queries).")
def replay(scenario_dir: Path, view_dir: Path | None, max_batch: int | None) -> None:
    """Replay a compat scenario and print one JSON line per event, then one per query."""
    from rlmm.replay import replay as run

    for line in run(scenario_dir, view_dir, max_batch):
        click.echo(json.dumps(line))


@main.command()
@click.argument("source", type=click.File("rb"), default="-")
@click.option("--format", "input_format", type=click.Choice(["hex", "jsonl", "raw"]), default="hex", show_default=True,
              help="hex: one hex value per line; jsonl: JSON objects with a 'hex' field (other fields are kept); "
                   "raw: the whole input is one record value.")
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
            context.update(error=exc.kafka_error, cause=exc.kafka_cause, message=str(exc))
        click.echo(json.dumps(context, ensure_ascii=False))
    sys.exit(1 if failed else 0)


def _values(source: BinaryIO, input_format: str) -> Iterator[tuple[dict, bytes]]:
    if input_format == "raw":
        yield {}, source.read()
        return
    for number, line in enumerate(source, start=1):
        text = line.decode().strip()
        if not text:
            continue
        try:
            if input_format == "hex":
                yield {"line": number}, bytes.fromhex(text)
            else:
                obj = json.loads(text)
                context = {k: v for k, v in obj.items() if k in ("case", "metadata_partition", "offset")}
                yield context or {"line": number}, bytes.fromhex(obj["hex"])
        except (ValueError, KeyError, TypeError) as exc:
            raise click.ClickException(f"line {number}: not a {input_format} record value ({exc})") from exc


if __name__ == "__main__":
    main()
