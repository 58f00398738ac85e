"""The Spark rebuild job: read the metadata topic (or an archive) through a Python data source, route
each record to its user partition, fold each partition with the service's own state machine, write
the snapshot.

Spark's own Kafka and Avro sources are not bundled with PySpark, so both inputs are Python data
sources (``pyspark.sql.datasource``): ``rlmm_kafka`` reads with confluent-kafka, up to the end offsets
fixed on the driver at job start, and ``rlmm_archive`` reads archive files. A user partition's records
are all in one metadata partition (Kafka's partitioner), in offset order there, so a full build reads
whole metadata partitions per input partition and folds them as it reads (``fold``): no shuffle. An
incremental build (``--from``) reads offset ranges, routes each record, and groups each user
partition's records with its state in the older snapshot. Each output partition writes its own Avro
file into the snapshot's staging directory (with a cluster ``--master`` it must be on a filesystem
every executor shares); the driver then writes the quarantine and the manifest and renames the
directory into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

# key: the routing key of ``snapshots.fold.route_key``, computed as the records are read
SCHEMA = "key binary, mp int, offset long, value binary"
# with the option fold=true, each task folds the whole metadata partitions it reads: one row per user
# partition (key: its routing key, payload: its pickled Avro state) and one for the quarantine (its key,
# payload: the pickled list of its Avro records)
FOLDED = "key binary, payload binary"
DEFAULT_SPLIT = 250_000  # records per Kafka input partition of an incremental build


class RangePartition(InputPartition):
    """Offset ranges (metadata partition, start, end) read by one task, one after the other."""

    def __init__(self, ranges: list[tuple[int, int, int]]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


ARROW_BATCH = 8192


def _arrow_batches(rows: Iterator[tuple[int, int, bytes | None]]) -> Iterator:
    """(metadata partition, offset, value) rows, routed, as Arrow record batches: far cheaper for Spark
    than one tuple at a time."""
    buf: list[tuple] = []
    for row in rows:
        buf.append(row)
        if len(buf) >= ARROW_BATCH:
            yield _arrow_batch(buf)
            buf = []
    if buf:
        yield _arrow_batch(buf)


def _arrow_batch(rows: list[tuple[int, int, bytes | None]]):
    import pyarrow as pa

    from snapshots.fold import route_key

    mps, offsets, values = zip(*rows)
    columns = [
        pa.array([route_key(value) for value in values], pa.binary()),
        pa.array(mps, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(values, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, names=["key", "mp", "offset", "value"])


def _source_schema(options) -> str:
    return FOLDED if _folds(options) else SCHEMA


def _folds(options) -> bool:
    return options.get("fold", "false") == "true"


def _folded_batches(rows: Iterator[tuple[int, int, bytes | None]]) -> Iterator:
    """Rows of whole metadata partitions, in offset order, folded (``snapshots.fold.fold_stream``) into
    one Arrow batch of ``FOLDED`` rows."""
    import pyarrow as pa

    from snapshots.fold import QUARANTINE_KEY, fold_stream
    from snapshots.format import quarantine_to_avro, state_to_avro

    states, quarantine = fold_stream(rows)
    keys = [key for key, _ in states]
    payloads = [pickle.dumps(state_to_avro(state)) for _, state in states]
    if quarantine:
        keys.append(QUARANTINE_KEY)
        payloads.append(pickle.dumps([quarantine_to_avro(q) for q in quarantine]))
    yield pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.binary()), pa.array(payloads, pa.binary())], names=["key", "payload"]
    )


def plan_whole(sizes: dict[int, int], target: int) -> list[list[int]]:
    """Metadata partitions packed whole into at most ``target`` bins of about equal records (largest
    first, each into the lightest bin); each bin's partitions in order."""
    loads = [0] * max(1, min(target, len(sizes)))
    members: list[list[int]] = [[] for _ in loads]
    for mp in sorted(sizes, key=lambda mp: (-sizes[mp], mp)):
        lightest = loads.index(min(loads))
        members[lightest].append(mp)
        loads[lightest] += sizes[mp]
    return [sorted(mps) for mps in members if mps]


def plan_bins(ranges: dict[int, list[int]], split: int, target: int) -> list[list[tuple[int, int, int]]]:
    """Offset ranges packed into about ``target`` input partitions of at most ``split`` records (reading a
    metadata partition costs one consumer and one fetch round, so small ones share a task)."""
    total = sum(max(0, e - s) for s, e in ranges.values())
    size = max(1, min(split, -(-total // max(1, target))))
    bins: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    filled = 0
    for mp, (start, end) in sorted(ranges.items()):
        s = start
        while s < end:
            take = min(end - s, size - filled)
            current.append((mp, s, s + take))
            filled += take
            s += take
            if filled >= size:
                bins.append(current)
                current, filled = [], 0
    if current:
        bins.append(current)
    return bins


class KafkaTopicSource(DataSource):
    """``spark.read.format("rlmm_kafka").option("bootstrap", ..).option("topic", ..).option("ranges", json)``
    where ranges maps a metadata partition to [start, end); with ``.option("fold", "true")``, the records of
    each task's whole metadata partitions folded (``FOLDED``)."""

    @classmethod
    def name(cls) -> str:
        return "rlmm_kafka"

    def schema(self) -> str:
        return _source_schema(self.options)

    def reader(self, schema) -> DataSourceReader:
        return _KafkaReader(self.options)


class _KafkaReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.bootstrap = options["bootstrap"]
        self.topic = options["topic"]
        self.ranges = {int(k): v for k, v in json.loads(options["ranges"]).items()}
        self.split = int(options.get("split", DEFAULT_SPLIT))
        self.target = int(options.get("target_partitions", 4))
        self.fold = _folds(options)
        self.progress = options.get("progress")

    def partitions(self):
        if self.fold:  # each metadata partition read by one task, in offset order
            sizes = {mp: end - start for mp, (start, end) in self.ranges.items()}
            bins = [[(mp, *self.ranges[mp]) for mp in mps] for mps in plan_whole(sizes, self.target)]
        else:
            bins = plan_bins(self.ranges, self.split, self.target)
        return [RangePartition(b) for b in bins] or [RangePartition([])]

    def read(self, partition: RangePartition) -> Iterator:
        from snapshots.kafka_io import read_ranges
        from snapshots.progress import counted

        rows = read_ranges(self.bootstrap, self.topic, partition.ranges)
        first = partition.ranges[0] if partition.ranges else (0, 0, 0)
        rows = counted(rows, self.progress, f"kafka-{first[0]}-{first[1]}")
        yield from (_folded_batches if self.fold else _arrow_batches)(rows)


class FilePartition(InputPartition):
    def __init__(self, entries: list[tuple[dict, int]]) -> None:
        super().__init__([e["name"] for e, _ in entries])
        self.entries = entries  # (archive file entry, offsets above which its records are read)


class ArchiveSource(DataSource):
    """``spark.read.format("rlmm_archive").option("path", DIR).option("after", json)``: records of an
    archive, only those above ``after[mp]`` (an older snapshot's offsets); ``fold`` as ``rlmm_kafka``."""

    @classmethod
    def name(cls) -> str:
        return "rlmm_archive"

    def schema(self) -> str:
        return _source_schema(self.options)

    def reader(self, schema) -> DataSourceReader:
        return _ArchiveReader(self.options)


class _ArchiveReader(DataSourceReader):
    def __init__(self, options) -> None:
        from snapshots.archive import read_archive_manifest

        self.path = options["path"]
        self.after = {int(k): v for k, v in json.loads(options.get("after", "{}")).items()}
        self.manifest = read_archive_manifest(self.path)
        self.target = int(options.get("target_partitions", 4))
        self.fold = _folds(options)
        self.progress = options.get("progress")

    def partitions(self):
        files = [
            (e, self.after.get(e["partition"], -1))
            for e in self.manifest["files"]
            if e["last"] > self.after.get(e["partition"], -1)
        ]
        if self.fold:  # each metadata partition's files read by one task, in the archive's order
            sizes: dict[int, int] = {}
            for entry, _ in files:
                sizes[entry["partition"]] = sizes.get(entry["partition"], 0) + entry["records"]
            return [
                FilePartition([f for mp in mps for f in files if f[0]["partition"] == mp])
                for mps in plan_whole(sizes, self.target)
            ] or [FilePartition([])]
        total = sum(e["records"] for e, _ in files)
        size = max(1, -(-total // self.target))
        parts, current, filled = [], [], 0
        for entry in files:
            current.append(entry)
            filled += entry[0]["records"]
            if filled >= size:
                parts.append(FilePartition(current))
                current, filled = [], 0
        if current:
            parts.append(FilePartition(current))
        return parts or [FilePartition([])]

    def read(self, partition: FilePartition) -> Iterator:
        from snapshots.archive import read_archive_file
        from snapshots.progress import counted

        def rows():
            for entry, after in partition.entries:
                yield from read_archive_file(self.path, entry, after)

        first = partition.entries[0][0]["name"] if partition.entries else "none"
        counted_rows = counted(rows(), self.progress, f"archive-{first}")
        yield from (_folded_batches if self.fold else _arrow_batches)(counted_rows)


# ---- the job -------------------------------------------------------------------------------------

# A local rebuild's JVM is short-lived: with the C1 compiler alone it starts ~1 s sooner and runs a
# first job ~1 s faster (bench_snapshot.py); long jobs on a cluster keep the JVM's defaults.
# a local master: a faster-starting JVM
LOCAL_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
# a master on this host (local, or a standalone cluster on loopback): the driver listens on loopback only
LOOPBACK_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def on_loopback(master: str) -> bool:
    return master.startswith("local") or master.split("://", 1)[-1].split(":", 1)[0] in ("127.0.0.1", "localhost")


def spark_session(master: str = "local[*]", app: str = "rlmm-snapshot", conf: dict | None = None):
    """A session with the two data sources registered; ``conf`` adds or overrides Spark properties. Needs
    Java (checked, with a clear error)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Spark needs Java (17): no `java` on PATH and JAVA_HOME is not set")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if on_loopback(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the JVM's own choice of address, before the conf
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.python.worker.reuse", "true")
    )
    for k, v in {
        **(LOCAL_CONF if master.startswith("local") else {}),
        **(LOOPBACK_CONF if on_loopback(master) else {}),
        **(conf or {}),
    }.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaTopicSource)
    spark.dataSource.register(ArchiveSource)
    return spark


def _fold_group(records, bases):
    """One user partition: its records (an Arrow table) folded over its state in the older snapshot, if
    any; or the quarantine group: its records as quarantine entries."""
    import pyarrow as pa

    from rlmm.state import keys as K
    from snapshots.fold import QUARANTINE_KEY, fold_partition, quarantined
    from snapshots.format import quarantine_to_avro, state_from_avro, state_to_avro

    key = (records if records.num_rows else bases).column("key")[0].as_py()
    base = bases.column("payload")[0].as_py() if bases.num_rows else None
    if key == QUARANTINE_KEY:  # the undecodable records, all in one group (few)
        rows = zip(*(records.column(c).to_pylist() for c in ("mp", "offset", "value")))
        payload = pickle.dumps([quarantine_to_avro(quarantined(mp, offset, value)) for mp, offset, value in rows])
    elif not records.num_rows:
        payload = base
    else:
        state = fold_partition(
            K.tp_from_identity(key[1:]),
            zip(records.column("offset").to_pylist(), records.column("value").to_pylist()),
            state_from_avro(pickle.loads(base)) if base is not None else None,
        )
        payload = pickle.dumps(state_to_avro(state))
    return pa.table({"key": pa.array([key], pa.binary()), "payload": pa.array([payload], pa.binary())})


def _writer(staging: str):
    def write(index: int, rows: Iterator) -> Iterator[dict]:
        from snapshots.fold import QUARANTINE_KEY
        from snapshots.format import PARTITION_SCHEMA, write_avro_file

        records = []
        for key, payload in rows:
            value = pickle.loads(payload)
            if key == QUARANTINE_KEY:
                yield {"quarantine": value}
            else:
                records.append((key, value))
        if not records:
            return
        records.sort(key=lambda kv: kv[0])
        segments = sum(len(r["segments"]) for _, r in records)
        entry = write_avro_file(
            Path(staging) / f"partitions-{index:05d}.avro", PARTITION_SCHEMA, (r for _, r in records)
        )
        entry["segments"] = segments
        yield {"file": entry, "keys": [key for key, _ in records]}

    return write


def _refuse_split_partitions(keys: list[bytes]) -> None:
    """A user partition folded twice had records in two metadata partitions (Kafka's partitioner puts all
    of a partition's records in one): their order cannot be known, so no snapshot is written."""
    from rlmm.errors import SnapshotError
    from rlmm.state import keys as K

    seen: set[bytes] = set()
    for key in keys:
        if key in seen:
            tp = K.tp_from_identity(key[1:])
            raise SnapshotError(
                f"user partition {tp.topic}-{tp.partition} has records in more than one metadata "
                f"partition: their order cannot be known, so no snapshot is written"
            )
        seen.add(key)


def build(
    spark,
    out: str | Path,
    *,
    bootstrap: str | None = None,
    topic: str = "__remote_log_metadata",
    archive_dir: str | Path | None = None,
    base_dir: str | Path | None = None,
    split: int = DEFAULT_SPLIT,
    progress: Callable[[str], None] | None = None,
    records_read: Callable[[int, int], None] | None = None,
) -> dict:
    """Build a snapshot into ``out`` from the topic (``bootstrap``) or an archive, optionally on top of an
    older snapshot (``base_dir``: only records after its offsets are read). Returns the manifest.
    ``progress`` gets what the build does, line by line; ``records_read`` (records read, records to read)
    twice a second while the input is read (``snapshots.progress``)."""
    from rlmm.errors import SnapshotError
    from rlmm.state.keys import tp_identity
    from snapshots.fold import UNROUTABLE_KEY
    from snapshots.format import quarantine_from_avro, read_snapshot, state_to_avro, write_snapshot
    from snapshots.preflight import check_build_inputs
    from snapshots.progress import RecordsRead
    from snapshots.staging import staging_path

    say = progress or (lambda _: None)
    out = Path(out)
    if (bootstrap is None) == (archive_dir is None):
        raise ValueError("give either bootstrap servers or an archive")
    topic_id = check_build_inputs(out, bootstrap=bootstrap, topic=topic, archive_dir=archive_dir, base_dir=base_dir)
    base = read_snapshot(base_dir) if base_dir else None
    after = base.metadata_offsets if base else {}
    target = 2 * spark.sparkContext.defaultParallelism
    fold = "true" if base is None else "false"  # a full build folds in the reading tasks
    staging = staging_path(out, "partial")
    counts = staging / "records-read"  # the reading tasks' counts, while they read
    watched = {"progress": str(counts)} if records_read is not None else {}
    if bootstrap is not None:
        from snapshots.kafka_io import end_offsets, num_partitions

        partitions = num_partitions(bootstrap, topic)
        ends = end_offsets(bootstrap, topic, partitions)
        ranges = {mp: [after.get(mp, -1) + 1, end] for mp, end in ends.items() if end > after.get(mp, -1) + 1}
        to_read = sum(e - s for s, e in ranges.values())
        say(f"topic {topic}: {partitions} partitions, reading {to_read} records up to end offsets fixed now")
        df = (
            spark.read.format("rlmm_kafka")
            .option("bootstrap", bootstrap)
            .option("topic", topic)
            .option("ranges", json.dumps(ranges))
            .option("split", str(split))
            .option("target_partitions", str(target))
            .option("fold", fold)
            .options(**watched)
            .load()
        )
        last = {mp: end - 1 for mp, end in ends.items() if end > 0}
        source = {"kind": "kafka", "bootstrap": bootstrap, "topic": topic}
    else:
        from snapshots.archive import read_archive_manifest

        manifest = read_archive_manifest(archive_dir)
        topic, partitions = manifest["topic"], manifest["num_partitions"]
        last = {}
        for entry in manifest["files"]:
            last[entry["partition"]] = max(last.get(entry["partition"], -1), entry["last"])
        say(f"archive {archive_dir}: {len(manifest['files'])} files")
        # the records of the files that hold any after the older snapshot's offsets (of which a few may not be)
        to_read = sum(e["records"] for e in manifest["files"] if e["last"] > after.get(e["partition"], -1))
        df = (
            spark.read.format("rlmm_archive")
            .option("path", str(archive_dir))
            .option("after", json.dumps(after))
            .option("target_partitions", str(target))
            .option("fold", fold)
            .options(**watched)
            .load()
        )
        source = {"kind": "archive", "path": str(archive_dir), "topic": topic}
    if base is not None:
        if base.num_metadata_partitions != partitions:
            raise SnapshotError(
                f"{base_dir} covers {base.num_metadata_partitions} metadata partitions, the input has {partitions}"
            )
        source["base"] = str(base_dir)
        for mp, offset in after.items():
            last[mp] = max(last.get(mp, -1), offset)
    sc = spark.sparkContext
    staging.mkdir(parents=True)
    try:
        with RecordsRead(counts, lambda n: records_read(n, to_read)) if records_read else contextlib.nullcontext():
            if base is None:  # each task folded the metadata partitions it read: written as they are
                folded = df
            else:  # each user partition's new records grouped with its state in the older snapshot
                from pyspark.sql.functions import col, lit

                records = df.filter(col("key") != lit(UNROUTABLE_KEY))
                bases = spark.createDataFrame(
                    [(b"p" + tp_identity(s.tp), pickle.dumps(state_to_avro(s))) for s in base.states], FOLDED
                )
                folded = records.groupBy("key").cogroup(bases.groupBy("key")).applyInArrow(_fold_group, FOLDED)
                folded = folded.coalesce(max(2, sc.defaultParallelism))
            outputs = folded.rdd.mapPartitionsWithIndex(_writer(str(staging))).collect()
            files = [o["file"] for o in outputs if "file" in o]
            _refuse_split_partitions([key for o in outputs for key in o.get("keys", ())])
            quarantine_rows = [q for o in outputs if "quarantine" in o for q in o["quarantine"]]
        shutil.rmtree(counts, ignore_errors=True)
        if bootstrap is not None:
            from snapshots.kafka_io import refuse_changed_topic

            refuse_changed_topic(bootstrap, topic, topic_id)
        say(f"folded: {sum(f['records'] for f in files)} partitions in {len(files)} files")
        quarantine = {}
        for q in base.quarantine if base else []:
            quarantine[(q.metadata_partition, q.offset)] = q
        for row in quarantine_rows:
            q = quarantine_from_avro(row)
            quarantine[(q.metadata_partition, q.offset)] = q
        manifest = write_snapshot(
            out,
            (),
            [quarantine[k] for k in sorted(quarantine)],
            last,
            partitions,
            topic=topic,
            topic_id=topic_id,
            source=source,
            partition_files=sorted(files, key=lambda f: f["name"]),
            staging=staging,
        )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    say(f"snapshot written: {out}")
    return manifest.to_json()
