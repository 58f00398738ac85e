"""``rlmm archive``: the raw records of the metadata topic copied into Avro files, so that history
survives the topic's retention and a snapshot can be rebuilt without the broker.

```
DIR/archive.json                 topic, its id, partitions, files with partition, first/last offset, count, SHA-256
DIR/records-PPPPP-OOOOOOOOOOOOOOOOOOOO.avro   RawRecord (schema/archive.v1.avsc), one partition each, offset order
```
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import fastavro

from rlmm.errors import SnapshotError
from snapshots.format import SCHEMA_DIR, _sha256
from snapshots.kafka_io import end_offsets, num_partitions, read_range, refuse_changed_topic, topic_id
from snapshots.staging import staging_path

ARCHIVE_SCHEMA = fastavro.parse_schema(json.loads((SCHEMA_DIR / "archive.v1.avsc").read_text()))
ARCHIVE_MANIFEST = "archive.json"
RECORDS_PER_FILE = 500_000


def archive(
    bootstrap: str,
    topic: str,
    out: str | Path,
    *,
    records_per_file: int = RECORDS_PER_FILE,
    progress: Callable[[str], None] | None = None,
) -> dict:
    out = Path(out)
    if out.exists():
        raise SnapshotError(f"{out} exists: an archive is written into a new directory")
    tmp = staging_path(out, "partial")
    tmp.mkdir(parents=True)
    try:
        if progress:
            progress(f"reading {topic} from {bootstrap}")
        partitions = num_partitions(bootstrap, topic)
        read_from = topic_id(bootstrap, topic)
        ends = end_offsets(bootstrap, topic, partitions)
        files = []
        for mp in range(partitions):
            records = read_range(bootstrap, topic, mp, 0, ends[mp], with_timestamp=True)
            while True:
                chunk = []
                for r in records:
                    chunk.append({"partition": r[0], "offset": r[1], "value": r[2], "timestamp": r[3]})
                    if len(chunk) >= records_per_file:
                        break
                if not chunk:
                    break
                path = tmp / f"records-{mp:05d}-{chunk[0]['offset']:020d}.avro"
                with path.open("wb") as f:
                    fastavro.writer(f, ARCHIVE_SCHEMA, chunk, codec="deflate")
                files.append(
                    {
                        "name": path.name,
                        "partition": mp,
                        "first": chunk[0]["offset"],
                        "last": chunk[-1]["offset"],
                        "records": len(chunk),
                        "sha256": _sha256(path),
                    }
                )
                if progress:
                    progress(f"partition {mp}: {chunk[-1]['offset'] + 1}/{ends[mp]}")
                if len(chunk) < records_per_file:
                    break
        refuse_changed_topic(bootstrap, topic, read_from)
        manifest = {
            "format": "rlmm-archive",
            "format_version": 1,
            "topic": topic,
            "topic_id": read_from,
            "num_partitions": partitions,
            "end_offsets": {str(k): v for k, v in sorted(ends.items())},
            "files": files,
        }
        (tmp / ARCHIVE_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, out)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_archive(
    out: str | Path,
    events: list[tuple[int, int, bytes | None]],
    num_partitions_: int,
    topic: str = "__remote_log_metadata",
    topic_id: str | None = None,
) -> dict:
    """An archive of given records (tests and benchmarks)."""
    out = Path(out)
    out.mkdir(parents=True)
    by_mp: dict[int, list] = {}
    for mp, offset, value in events:
        by_mp.setdefault(mp, []).append({"partition": mp, "offset": offset, "value": value, "timestamp": None})
    files = []
    for mp, chunk in sorted(by_mp.items()):
        chunk.sort(key=lambda r: r["offset"])
        path = out / f"records-{mp:05d}-{chunk[0]['offset']:020d}.avro"
        with path.open("wb") as f:
            fastavro.writer(f, ARCHIVE_SCHEMA, chunk, codec="null")
        files.append(
            {
                "name": path.name,
                "partition": mp,
                "first": chunk[0]["offset"],
                "last": chunk[-1]["offset"],
                "records": len(chunk),
                "sha256": _sha256(path),
            }
        )
    ends = {mp: max(r["offset"] for r in rs) + 1 for mp, rs in by_mp.items()}
    manifest = {
        "format": "rlmm-archive",
        "format_version": 1,
        "topic": topic,
        "topic_id": topic_id,
        "num_partitions": num_partitions_,
        "end_offsets": {str(k): ends.get(k, 0) for k in range(num_partitions_)},
        "files": files,
    }
    (out / ARCHIVE_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_archive_manifest(directory: str | Path) -> dict:
    path = Path(directory) / ARCHIVE_MANIFEST
    if not path.is_file():
        raise SnapshotError(f"{path}: archive manifest missing")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != "rlmm-archive" or manifest.get("format_version") != 1:
        raise SnapshotError(f"{path}: not an rlmm archive of format version 1")
    return manifest


def read_archive_file(directory: str | Path, entry: dict, after: int = -1) -> Iterator[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of one archive file, offsets above ``after``."""
    path = Path(directory) / entry["name"]
    if not path.is_file() or _sha256(path) != entry["sha256"]:
        raise SnapshotError(f"{path}: archive file missing or altered")
    with path.open("rb") as f:
        for r in fastavro.reader(f):
            if r["offset"] > after:
                yield r["partition"], r["offset"], r["value"]
