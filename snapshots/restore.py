"""Restore a snapshot into a fresh view, export a live view as a snapshot, verify one against the other."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from consumers import view_state
from rlmm.errors import SnapshotError
from rlmm.records.model import TopicIdPartition
from rlmm.runtime import die_with_parent
from rlmm.state import keys as K
from rlmm.state.export import PartitionState, partition_state, partitions, write_partition_state, write_view_rows
from rlmm.state.kv import MemoryKV, ReadKV, scan
from rlmm.state.rows import PartitionRow
from rlmm.state.view import View, write_load_file
from snapshots.differences import partition_name, segment_name, shown
from snapshots.format import Snapshot, manifest_topic_id, read_snapshot, write_snapshot
from snapshots.staging import staging_path

log = logging.getLogger(__name__)

PARALLEL_ABOVE = 50_000  # segments + partitions from which restore uses one worker process per core


class _CollectKV:
    """A write-only KV that collects puts per column family (a fresh view: nothing to read)."""

    def __init__(self) -> None:
        self.pending: dict[str, list[tuple[bytes, bytes]]] = {}
        self.count = 0

    def get(self, cf: str, key: bytes) -> bytes | None:
        return None  # write_partition_state is always given the tpid

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self.pending.setdefault(cf, []).append((key, value))
        self.count += 1

    put_new = put


def write_snapshot_rows(kv, snapshot: Snapshot) -> None:
    """Every row of a restored view (besides the view's own meta rows) into ``kv``."""
    for i, state in enumerate(snapshot.states):
        write_partition_state(kv, state, tpid=K.u32(i))
    write_view_rows(kv, len(snapshot.states), snapshot.metadata_offsets, snapshot.quarantine)


def _partition_rows(job: tuple) -> dict:
    """A restore worker: decode a contiguous run of partition files and turn their partitions (tpids from
    ``first_index`` on) into rows; per-partition column families go to sorted SST files (their tpid
    ranges never overlap another worker's), the few other rows back to the caller."""
    directory, entries, first_index, sst_dir, worker = job
    from snapshots.format import decode_file, state_from_avro

    kv = _CollectKV()
    index = first_index
    segments = 0
    for entry in entries:
        for record in decode_file(Path(directory) / entry["name"], entry, "partition"):
            state = state_from_avro(record)
            segments += len(state.segments)
            write_partition_state(kv, state, tpid=K.u32(index))
            index += 1
    ssts: dict[str, str] = {}
    small: list[tuple[str, bytes, bytes]] = []
    for cf, items in kv.pending.items():
        if cf not in K.PER_PARTITION:
            small.extend((cf, k, v) for k, v in items)
            continue
        items.sort()
        path = str(Path(sst_dir) / f"{worker:03d}-{cf}.sst")
        write_load_file(path, cf, items)
        ssts[cf] = path
    return {"ssts": ssts, "small": small, "partitions": index - first_index, "segments": segments, "rows": kv.count}


def restore(
    snapshot_dir: str | Path, db: str | Path, progress: Callable[[str], None] | None = None, workers: int | None = None
) -> dict:
    """Build a fresh view at ``db`` from a snapshot, by bulk ingest: worker processes (one per core) turn
    runs of partition files into sorted SST files that RocksDB ingests as they are. Every file is checked
    (size, SHA-256, schema, counts) before the view appears; the view is built beside ``db`` and renamed
    into place, so a refused snapshot leaves nothing behind."""
    from snapshots.format import check_file, decode_file, manifest_rereads, quarantine_from_avro, read_manifest

    db = Path(db)
    snapshot_dir = Path(snapshot_dir)
    if db.exists() and any(db.iterdir()):
        raise SnapshotError(f"{db} exists and is not empty: restore builds a fresh view")
    manifest = read_manifest(snapshot_dir)
    try:
        files = list(manifest["partition_files"])
        qentry = manifest["quarantine_file"]
        offsets = {int(k): v for k, v in manifest["metadata_offsets"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SnapshotError(f"{snapshot_dir}: manifest lacks {exc}") from None
    for entry in files + [qentry]:
        check_file(snapshot_dir, entry)
    quarantine = [quarantine_from_avro(r) for r in decode_file(snapshot_dir / qentry["name"], qentry, "quarantine")]
    total = sum(f.get("segments", 0) + f["records"] for f in files) or 1
    if workers is None:  # processes cost about half a second to start: only for large snapshots
        workers = (os.cpu_count() or 1) if total >= PARALLEL_ABOVE else 1
    workers = max(1, min(workers, len(files)))
    # contiguous runs of files, balanced by segments
    runs: list[list[dict]] = [[] for _ in range(workers)]
    filled = 0
    for f in files:
        runs[min(workers - 1, filled * workers // total)].append(f)
        filled += f.get("segments", 0) + f["records"]
    tmp = staging_path(db, "restoring")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        sst_dir = tmp / "ingest"
        sst_dir.mkdir(parents=True)
        jobs, first = [], 0
        for i, run in enumerate(runs):
            jobs.append((str(snapshot_dir), run, first, str(sst_dir), i))
            first += sum(f["records"] for f in run)
        if workers > 1:
            import multiprocessing

            with multiprocessing.get_context("fork").Pool(
                workers, initializer=die_with_parent, initargs=(os.getpid(),)
            ) as pool:
                results = pool.map(_partition_rows, jobs)
        else:
            results = [_partition_rows(job) for job in jobs]
        counts = {
            "partitions": sum(r["partitions"] for r in results),
            "segments": sum(r["segments"] for r in results),
            "quarantined": len(quarantine),
        }
        if counts != manifest.get("counts"):
            raise SnapshotError(f"{snapshot_dir}: counts {counts} differ from the manifest's {manifest.get('counts')}")
        if progress:
            progress(f"snapshot checked, rows built: {counts}")
        rows: list[tuple[str, bytes, bytes]] = []
        seen: set[bytes] = set()
        for r in results:
            for cf, key, value in r["small"]:
                if cf == K.PARTITIONS:
                    if key in seen:
                        raise SnapshotError(f"{snapshot_dir}: partition {K.tp_from_identity(key)} appears twice")
                    seen.add(key)
                rows.append((cf, key, value))
        files = {cf: [r["ssts"][cf] for r in results if cf in r["ssts"]] for cf in K.PER_PARTITION}
        topic_id = manifest_topic_id(manifest)
        if topic_id is None:
            log.warning(
                "%s records no topic id (made by an older rlmm, or from a broker without topic ids): the view "
                "restored from it cannot tell whether the topic it then reads is the one the snapshot was built "
                "from, or one deleted and created again since",
                snapshot_dir,
            )
        with View(tmp / "view") as view:
            view.load(
                rows,
                files,
                next_tpid=counts["partitions"],
                metadata_offsets=offsets,
                quarantine=quarantine,
                consumer_state=view_state.view_state(
                    topic_id, manifest_rereads(manifest), manifest.get("num_metadata_partitions")
                ),
            )
        shutil.rmtree(sst_dir, ignore_errors=True)
        if db.exists():
            db.rmdir()
        os.replace(tmp / "view", db)
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rows = sum(r["rows"] for r in results)
    if progress:
        progress(f"{rows} rows ingested")
    return {
        "partitions": counts["partitions"],
        "segments": counts["segments"],
        "rows": rows,
        "metadata_offsets": offsets,
        "quarantined": len(quarantine),
        "topic_id": topic_id,
    }


def export(view_path: str | Path, out: str | Path, num_metadata_partitions: int, topic: str | None = None) -> dict:
    """Snapshot a view without Spark. The view is opened read-only: RocksDB shows a read-only instance
    the state at its opening, and every batch is atomic, so the snapshot is consistent even beside a
    running service. The consumer's state goes with it: the topic's id, and the readings again under way
    (partitions registered after their metadata partition was read, which a restored view finishes)."""
    with View(view_path, read_only=True) as view:
        kv = view.reader
        states = [partition_state(kv, tp) for tp in partitions(kv)]
        quarantine = list(view.quarantine())
        offsets = view.metadata_offsets()
        consumer_state = view.consumer_state()
    manifest = write_snapshot(
        out,
        states,
        quarantine,
        offsets,
        num_metadata_partitions,
        topic=topic,
        topic_id=view_state.topic_id_of(consumer_state),
        rereads=view_state.rereads_of(consumer_state),
        source={"kind": "export", "view": str(view_path)},
    )
    return manifest.to_json()


def _rows(kv: ReadKV, tp: TopicIdPartition) -> dict[str, dict[bytes, bytes]]:
    raw = kv.get(K.PARTITIONS, K.tp_identity(tp))
    row = PartitionRow.unpack(raw)
    rows = {K.PARTITIONS: {b"": b"\0\0\0\0" + raw[4:]}}
    for cf in K.PER_PARTITION:
        rows[cf] = {k[4:]: v for k, v in scan(kv, cf, row.tpid)}
    return rows


def _describe_state(a: PartitionState, b: PartitionState) -> list[str]:
    out = []
    for name in ("assigned", "ready", "removed", "last_applied_offset", "delete_record"):
        if getattr(a, name) != getattr(b, name):
            out.append(f"{name}: snapshot {shown(getattr(a, name))}, view {shown(getattr(b, name))}")
    sa = {s.segment_id: s for s in a.segments}
    sb = {s.segment_id: s for s in b.segments}
    for sid in sorted(sa.keys() | sb.keys()):
        if sa.get(sid) != sb.get(sid):
            out.append(f"{segment_name(sid)}: snapshot {shown(sa.get(sid))}, view {shown(sb.get(sid))}")
    ea = {e.epoch: e for e in a.epochs}
    eb = {e.epoch: e for e in b.epochs}
    for epoch in sorted(ea.keys() | eb.keys()):
        if ea.get(epoch) != eb.get(epoch):
            out.append(f"epoch {epoch}: snapshot {shown(ea.get(epoch))}, view {shown(eb.get(epoch))}")
    return out


def verify(snapshot_dir: str | Path, db: str | Path) -> list[str]:
    """Every difference between a snapshot and a view (empty: they are the same, row for row)."""
    snapshot = read_snapshot(snapshot_dir)
    restored = MemoryKV()
    write_snapshot_rows(restored, snapshot)
    diffs: list[str] = []
    with View(db, read_only=True) as view:
        kv = view.reader
        in_snapshot = set(partitions(restored))
        in_view = set(partitions(kv))
        for tp in sorted(in_snapshot | in_view, key=K.tp_identity):
            name = partition_name(tp)
            if tp not in in_view:
                diffs.append(f"{name}: in the snapshot, not in the view")
            elif tp not in in_snapshot:
                diffs.append(f"{name}: in the view, not in the snapshot")
            elif _rows(restored, tp) != _rows(kv, tp):
                details = _describe_state(partition_state(restored, tp), partition_state(kv, tp)) or [
                    "derived index rows differ"
                ]
                diffs.extend(f"{name}: {d}" for d in details)
        ids = manifest_topic_id(snapshot.manifest), view_state.topic_id_of(view.consumer_state())
        if None not in ids and ids[0] != ids[1]:
            diffs.append(f"topic id: snapshot {ids[0]}, view {ids[1]}")
        offsets = view.metadata_offsets()
        if offsets != snapshot.metadata_offsets:
            for mp in sorted(offsets.keys() | snapshot.metadata_offsets.keys()):
                if offsets.get(mp) != snapshot.metadata_offsets.get(mp):
                    diffs.append(
                        f"metadata partition {mp}: snapshot offset {snapshot.metadata_offsets.get(mp)}, "
                        f"view offset {offsets.get(mp)}"
                    )
        vq = {(q.metadata_partition, q.offset): q for q in view.quarantine()}
        sq = {(q.metadata_partition, q.offset): q for q in snapshot.quarantine}
        for key in sorted(vq.keys() | sq.keys()):
            if vq.get(key) != sq.get(key):
                diffs.append(f"quarantine {key[0]}/{key[1]}: snapshot {shown(sq.get(key))}, view {shown(vq.get(key))}")
    return diffs
