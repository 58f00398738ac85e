"""The snapshot format: a directory of Avro container files (fastavro) and a manifest.

```
DIR/manifest.json            format version, metadata-topic offsets, partition count, files, counts, checksums
DIR/partitions-NNNNN.avro    PartitionState records (schema/partition.v1.avsc), one per user partition
DIR/quarantine.avro          QuarantinedRecord records (schema/quarantine.v1.avsc)
```

``read_snapshot`` checks everything (manifest checksum, format version, every file's size, SHA-256,
schema and record count, duplicates) before it returns anything: a missing, truncated, tampered or
incompatible snapshot raises ``SnapshotError`` and nothing is loaded. ``write_snapshot`` writes into
a temporary directory and renames it into place, so a snapshot directory is complete or absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from rlmm.errors import SnapshotError
from rlmm.records.model import PartitionDelete, PartitionDeleteState, SegmentMetadata, SegmentState, TopicIdPartition
from rlmm.records.uuid import uuid_text
from rlmm.state import keys as K
from rlmm.state.export import EpochState, PartitionState
from rlmm.state.quarantine import QuarantinedRecord
from snapshots.staging import staging_path

FORMAT = "rlmm-snapshot"
FORMAT_VERSION = 1
SCHEMA_DIR = Path(__file__).parent / "schema"
MANIFEST = "manifest.json"
QUARANTINE_FILE = "quarantine.avro"
CODEC = "deflate"
SEGMENTS_PER_FILE = 100_000  # a new partition file after about this many segments (restore reads files in parallel)


def _schema(name: str) -> dict:
    return fastavro.parse_schema(json.loads((SCHEMA_DIR / f"{name}.v{FORMAT_VERSION}.avsc").read_text()))


PARTITION_SCHEMA = _schema("partition")
QUARANTINE_SCHEMA = _schema("quarantine")
_SCHEMA_NAMES = {"partition": "rlmm.snapshot.v1.PartitionState", "quarantine": "rlmm.snapshot.v1.QuarantinedRecord"}


# ---- logical state <-> Avro records ----------------------------------------------------------------


def _tags(tags) -> list[dict]:
    return [{"path": p, "tag": t, "data": d} for p, t, d in tags]


def _untags(items) -> tuple:
    return tuple((i["path"], i["tag"], i["data"]) for i in items)


def state_to_avro(state: PartitionState) -> dict[str, Any]:
    d = state.delete_record
    return {
        "topic_id": state.tp.topic_id,
        "topic": state.tp.topic,
        "partition": state.tp.partition,
        "assigned": state.assigned,
        "ready": state.ready,
        "removed": state.removed,
        "last_applied_offset": state.last_applied_offset,
        "delete_state": None
        if d is None
        else {
            "broker_id": d.broker_id,
            "event_timestamp_ms": d.event_timestamp_ms,
            "state": d.state.name,
            "unknown_tags": _tags(d.unknown_tags),
        },
        "segments": [
            {
                "segment_id": s.segment_id,
                "start_offset": s.start_offset,
                "end_offset": s.end_offset,
                "broker_id": s.broker_id,
                "max_timestamp_ms": s.max_timestamp_ms,
                "event_timestamp_ms": s.event_timestamp_ms,
                "segment_leader_epochs": [{"leader_epoch": e, "offset": o} for e, o in s.segment_leader_epochs],
                "segment_size_in_bytes": s.segment_size_in_bytes,
                "custom_metadata": s.custom_metadata,
                "remote_log_segment_state": s.state.name,
                "txn_index_empty": s.txn_index_empty,
                "unknown_tags": _tags(s.unknown_tags),
            }
            for s in state.segments
        ],
        "epochs": [
            {
                "leader_epoch": e.epoch,
                "highest_offset": e.highest_offset,
                "referenced": [{"start_offset": o, "segment_id": sid} for o, sid in e.referenced],
                "unreferenced": list(e.unreferenced),
            }
            for e in state.epochs
        ],
    }


def state_from_avro(r: dict[str, Any]) -> PartitionState:
    tp = TopicIdPartition(r["topic_id"], r["topic"], r["partition"])
    d = r["delete_state"]
    delete = (
        None
        if d is None
        else PartitionDelete(
            tp, d["broker_id"], d["event_timestamp_ms"], PartitionDeleteState[d["state"]], _untags(d["unknown_tags"])
        )
    )
    segments = [
        SegmentMetadata(
            tp,
            s["segment_id"],
            s["start_offset"],
            s["end_offset"],
            s["broker_id"],
            s["max_timestamp_ms"],
            s["event_timestamp_ms"],
            tuple((e["leader_epoch"], e["offset"]) for e in s["segment_leader_epochs"]),
            s["segment_size_in_bytes"],
            s["custom_metadata"],
            SegmentState[s["remote_log_segment_state"]],
            s["txn_index_empty"],
            _untags(s["unknown_tags"]),
        )
        for s in r["segments"]
    ]
    epochs = [
        EpochState(
            e["leader_epoch"],
            e["highest_offset"],
            [(x["start_offset"], x["segment_id"]) for x in e["referenced"]],
            list(e["unreferenced"]),
        )
        for e in r["epochs"]
    ]
    return PartitionState(
        tp, r["assigned"], r["ready"], r["removed"], r["last_applied_offset"], delete, segments, epochs
    )


def quarantine_to_avro(q: QuarantinedRecord) -> dict[str, Any]:
    return {
        "metadata_partition": q.metadata_partition,
        "offset": q.offset,
        "reason": q.reason,
        "kafka_error": q.kafka_error,
        "kafka_cause": q.kafka_cause,
        "value": q.value,
    }


def quarantine_from_avro(r: dict[str, Any]) -> QuarantinedRecord:
    return QuarantinedRecord(
        r["metadata_partition"], r["offset"], r["reason"], r["kafka_error"], r["kafka_cause"], r["value"]
    )


# ---- files ---------------------------------------------------------------------------------------


def write_avro_file(path: Path, schema: dict, records: Iterable[dict]) -> dict[str, Any]:
    """Write one container file; returns its manifest entry (name, records, bytes, sha256)."""
    count = 0

    def counted():
        nonlocal count
        for r in records:
            count += 1
            yield r

    with path.open("wb") as out:
        fastavro.writer(
            out,
            schema,
            counted(),
            codec=CODEC,
            metadata={"rlmm.format": FORMAT, "rlmm.format_version": str(FORMAT_VERSION)},
        )
    return {"name": path.name, "records": count, "bytes": path.stat().st_size, "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _manifest_checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass
class Manifest:
    metadata_offsets: dict[int, int]  # metadata partition -> last offset the snapshot reflects
    num_metadata_partitions: int
    partition_files: list[dict]
    quarantine_file: dict
    counts: dict[str, int]
    topic: str | None = None
    source: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    topic_id: str | None = None  # Kafka's id of the topic it was built from (None: not known)
    rereads: dict[int, int] = field(default_factory=dict)  # an export's readings again under way (view_state)

    def to_json(self) -> dict[str, Any]:
        data = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "rereads": {str(k): v for k, v in sorted(self.rereads.items())},
            "num_metadata_partitions": self.num_metadata_partitions,
            "metadata_offsets": {str(k): v for k, v in sorted(self.metadata_offsets.items())},
            "partition_files": self.partition_files,
            "quarantine_file": self.quarantine_file,
            "counts": self.counts,
            "source": self.source,
            "created_at": self.created_at,
        }
        data["manifest_sha256"] = _manifest_checksum(data)
        return data


def write_snapshot(
    directory: str | Path,
    states: Iterable[PartitionState],
    quarantine: Iterable[QuarantinedRecord],
    metadata_offsets: dict[int, int],
    num_metadata_partitions: int,
    *,
    topic: str | None = None,
    topic_id: str | None = None,
    rereads: dict[int, int] | None = None,
    source: dict[str, Any] | None = None,
    partition_files: list[dict] | None = None,
    staging: Path | None = None,
) -> Manifest:
    """Write a snapshot. ``partition_files`` (already written into ``staging`` by the Spark tasks)
    replaces ``states``."""
    directory = Path(directory)
    if directory.exists():
        raise SnapshotError(f"{directory} exists: a snapshot is written into a new directory")
    tmp = staging or staging_path(directory, "partial")
    tmp.mkdir(parents=True, exist_ok=staging is not None)
    try:
        if partition_files is None:
            partition_files = []
            chunk: list[PartitionState] = []
            filled = 0
            for state in states:
                chunk.append(state)
                filled += len(state.segments) + 1
                if filled >= SEGMENTS_PER_FILE:
                    name = f"partitions-{len(partition_files):05d}.avro"
                    partition_files.append(partition_file_entry(tmp / name, chunk))
                    chunk, filled = [], 0
            if chunk or not partition_files:
                partition_files.append(partition_file_entry(tmp / f"partitions-{len(partition_files):05d}.avro", chunk))
        qfile = write_avro_file(tmp / QUARANTINE_FILE, QUARANTINE_SCHEMA, (quarantine_to_avro(q) for q in quarantine))
        counts = {
            "partitions": sum(f["records"] for f in partition_files),
            "segments": sum(f.get("segments", 0) for f in partition_files),
            "quarantined": qfile["records"],
        }
        manifest = Manifest(
            dict(metadata_offsets),
            num_metadata_partitions,
            partition_files,
            qfile,
            counts,
            topic,
            source or {},
            time.time(),
            topic_id,
            dict(rereads or {}),
        )
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def partition_file_entry(path: Path, states: Iterable[PartitionState]) -> dict[str, Any]:
    """Write one partition file (a Spark task writes its own); the entry counts its segments too."""
    segments = 0

    def records():
        nonlocal segments
        for s in states:
            segments += len(s.segments)
            yield state_to_avro(s)

    entry = write_avro_file(path, PARTITION_SCHEMA, records())
    entry["segments"] = segments
    return entry


@dataclass
class Snapshot:
    directory: Path
    manifest: dict[str, Any]
    states: list[PartitionState]
    quarantine: list[QuarantinedRecord]

    @property
    def metadata_offsets(self) -> dict[int, int]:
        return {int(k): v for k, v in self.manifest["metadata_offsets"].items()}

    @property
    def num_metadata_partitions(self) -> int:
        return self.manifest["num_metadata_partitions"]


def manifest_topic_id(manifest: dict[str, Any]) -> str | None:
    """The id of the topic a snapshot (or an archive) was built from, Kafka's text form; None where it was not
    known (or rlmm did not record it yet). Those of rlmm 0.1 hold librdkafka's text form."""
    topic_id = manifest.get("topic_id")
    return None if topic_id is None else uuid_text(topic_id)


def manifest_rereads(manifest: dict[str, Any]) -> dict[int, int]:
    return {int(mp): until for mp, until in manifest.get("rereads", {}).items()}


def read_manifest(directory: str | Path) -> dict[str, Any]:
    directory = Path(directory)
    path = directory / MANIFEST
    if not directory.is_dir():
        raise SnapshotError(f"{directory}: no snapshot directory")
    if not path.is_file():
        raise SnapshotError(f"{path}: manifest missing (an incomplete or foreign snapshot)")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: manifest is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SnapshotError(f"{path}: not an rlmm snapshot manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise SnapshotError(
            f"{path}: snapshot format version {manifest.get('format_version')!r}, this rlmm reads "
            f"version {FORMAT_VERSION}: rebuild the snapshot"
        )
    if manifest.get("manifest_sha256") != _manifest_checksum(manifest):
        raise SnapshotError(f"{path}: manifest checksum mismatch (the manifest was altered)")
    return manifest


def check_file(directory: Path, entry: dict) -> Path:
    """The file of a manifest entry, present with the recorded size and SHA-256."""
    path = directory / entry["name"]
    if not path.is_file():
        raise SnapshotError(f"{path}: file missing")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise SnapshotError(f"{path}: {size} bytes, the manifest says {entry['bytes']} (truncated or altered)")
    if _sha256(path) != entry["sha256"]:
        raise SnapshotError(f"{path}: SHA-256 mismatch (the file was altered)")
    return path


def decode_file(path: Path, entry: dict, kind: str) -> list[dict]:
    """The records of a checked file, with its format version, schema and record count checked."""
    try:
        with path.open("rb") as f:
            reader = fastavro.reader(f)
            meta = reader.metadata
            if meta.get("rlmm.format_version") != str(FORMAT_VERSION):
                raise SnapshotError(
                    f"{path}: format version {meta.get('rlmm.format_version')!r}, expected {FORMAT_VERSION}"
                )
            name = reader.writer_schema.get("name") if isinstance(reader.writer_schema, dict) else None
            if name != _SCHEMA_NAMES[kind]:
                raise SnapshotError(f"{path}: schema {name!r}, expected {_SCHEMA_NAMES[kind]}")
            records = list(reader)
    except SnapshotError:
        raise
    except Exception as exc:  # fastavro raises many kinds on corrupt data
        raise SnapshotError(f"{path}: unreadable Avro container ({type(exc).__name__}: {exc})") from None
    if len(records) != entry["records"]:
        raise SnapshotError(f"{path}: {len(records)} records, the manifest says {entry['records']}")
    return records


def _read_file(directory: Path, entry: dict, kind: str) -> Iterator[dict]:
    return iter(decode_file(check_file(directory, entry), entry, kind))


def read_snapshot(directory: str | Path) -> Snapshot:
    """Read and check a whole snapshot; raises ``SnapshotError`` before returning anything."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    states: list[PartitionState] = []
    seen: set[bytes] = set()
    segments = 0
    try:
        for entry in manifest["partition_files"]:
            for record in _read_file(directory, entry, "partition"):
                state = state_from_avro(record)
                key = K.tp_identity(state.tp)
                if key in seen:
                    raise SnapshotError(f"{directory}: partition {state.tp} appears twice")
                seen.add(key)
                segments += len(state.segments)
                states.append(state)
        quarantine = [quarantine_from_avro(r) for r in _read_file(directory, manifest["quarantine_file"], "quarantine")]
    except (KeyError, TypeError) as exc:
        raise SnapshotError(f"{directory}: manifest lacks {exc}") from None
    counts = manifest.get("counts", {})
    actual = {"partitions": len(states), "segments": segments, "quarantined": len(quarantine)}
    if counts != actual:
        raise SnapshotError(f"{directory}: counts {actual} differ from the manifest's {counts}")
    return Snapshot(directory, manifest, states, quarantine)
