"""The durable view: decode, route and apply consumed records in atomic batches, then answer queries.

Each batch writes its state changes, the consumed offset of every metadata partition it read and
its quarantine entries in one RocksDB write batch, so a restart resumes exactly where the last
committed batch ended. Writes go to the WAL; ``sync`` (off by default) also fsyncs each batch. A
process crash loses nothing either way; without sync a machine crash may lose the newest batches,
which are then consumed again from the topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

from rlmm.errors import DecodeError, ViewDamaged, ViewNotEmpty, ViewNotFound, ViewSchemaMismatch
from rlmm.records.model import (
    PartitionDelete,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.runtime import release_free_memory
from rlmm.state import keys as K
from rlmm.state.apply_times import ApplyTimes
from rlmm.state.cache import CachedReadKV
from rlmm.state.classify import classify
from rlmm.state.commit_clock import CommitClock
from rlmm.state.export import write_view_rows
from rlmm.state.kv import BATCH_ROWS, CountingStagedKV, ReadKV, RowCounts, StagedKV, scan
from rlmm.state.lookup_memo import LookupMemo
from rlmm.state.machine import StateMachine
from rlmm.state.max_timestamp import Found, Tails
from rlmm.state.offset_cache import OffsetCache
from rlmm.state.quarantine import QuarantinedRecord
from rlmm.state.queries import Queries
from rlmm.state.results import APPLIED, ApplyResult
from rlmm.state.rocks import BLOCK_CACHE_MB, ROW_CACHE_MB, WRITE_BUFFER_MB, RocksKV, write_sst
from rlmm.state.rows import EpochRow, PartitionRow
from rlmm.state.trees import new_tree_cache
from rlmm.state.upgrade import UPGRADABLE, UPGRADE_FROM_KEY, UPGRADED_KEY, upgrade_partition

log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 3
EPOCH_CACHE_LIMIT: Final = 100_000
TREE_CACHE_LIMIT: Final = 4_096  # timestamp-tree pages (up to ~2.5 KB each in memory) and tops
TAILS_CACHE_LIMIT: Final = 10_000  # partitions' last (and last found) max-timestamp buckets (~0.5 KB each on average)
OFFSET_CACHE_LIMIT: Final = 4_000_000  # what lookups hold in memory, in start offsets (8 bytes): 32 MB
OFFSET_ENTRY_CACHE_BYTES: Final = 4 << 20  # the offset-index entries single lookups read: ~10,000 segments
LOOKUP_MEMO_BYTES: Final = 16 << 20  # the segments single lookups found: ~28,000 of ~200 bytes
# rows written between two returns of glibc's free pages to the kernel (``release_free_memory``): about four of
# bench_core's uploads batches. bench_core --stream uploads at 1M events: peak RSS 66.7 / 66.7 / 66.7 / 69.6 MB
# against a median of 69.9 in eleven runs without, the same apply rate. After every batch: 66.0-66.6 MB, but the
# apply ran at 130.6k-140.8k events/s against 138.0k-152.9k
RELEASE_AFTER_ROWS: Final = 25_000
CONSUMER_STATE_PREFIX: Final = b"consumer:"  # meta keys owned by the consumer
COUNTER_PREFIX: Final = b"count:"  # meta keys counting records by result


class Batch:
    """Operations staged together and committed atomically by ``View.batch``."""

    def __init__(self, stage: StagedKV, machine: StateMachine, row_counts: RowCounts | None = None) -> None:
        """``row_counts``: counts the rows of the batch by the kind of event that last changed them (``stage`` is then
        a ``CountingStagedKV``, and each event's changes are flushed to it as the event is applied)."""
        self.stage = stage
        self.machine = machine
        # events by outcome, but for those applied, counted apart (``applied``): a plain dict, as a Counter, a Python
        # subclass of dict, cost ~1,400 instructions per event as the compiled apply counted each
        self.counts: dict[str, int] = {}
        self.applied = 0
        self.row_counts = row_counts

    def apply(self, metadata_partition: int, offset: int, value: bytes | None) -> ApplyResult:
        """Decode, route and apply one consumed record; undecodable ones go to the quarantine."""
        self.machine.record_consumed(metadata_partition, offset)
        decoded = classify(value)
        if self.row_counts is not None:
            return self._apply_counting(metadata_partition, offset, value, decoded, self.row_counts)
        return self._apply(metadata_partition, offset, value, decoded)

    def counted(self) -> dict[str, int]:
        """Events by outcome (``ApplyResult.counter``)."""
        if not self.applied:
            return self.counts
        return {**self.counts, APPLIED.counter: self.counts.get(APPLIED.counter, 0) + self.applied}

    def _apply_counting(
        self,
        metadata_partition: int,
        offset: int,
        value: bytes | None,
        decoded: RemoteLogMetadata | DecodeError,
        row_counts: RowCounts,
    ) -> ApplyResult:
        stage = self.stage
        assert isinstance(stage, CountingStagedKV)
        stage.kind = event_kind(decoded)
        row_counts.events[stage.kind] += 1
        result = self._apply(metadata_partition, offset, value, decoded)
        self.machine.flush()  # the rows this event changed, noted as its own
        stage.kind = BATCH_ROWS
        return result

    def _apply(
        self, metadata_partition: int, offset: int, value: bytes | None, decoded: RemoteLogMetadata | DecodeError
    ) -> ApplyResult:
        # (by the records' own classes: a test of these compiled classes costs little, of DecodeError much more)
        if isinstance(decoded, (SegmentMetadata, SegmentUpdate, PartitionDelete, SegmentSnapshot)):
            result = self.machine.handle(decoded, offset)
            if result is APPLIED:
                self.applied += 1
            else:
                counter = result.counter
                self.counts[counter] = self.counts.get(counter, 0) + 1
            return result
        key = K.quarantine_key(metadata_partition, offset)
        if self.stage.get(K.QUARANTINE, key) is None:  # a record read again (a consumer's rewind) counts once
            self.counts["quarantined"] = self.counts.get("quarantined", 0) + 1
        self.stage.put(K.QUARANTINE, key, QuarantinedRecord.of(metadata_partition, offset, value, decoded).pack())
        return ApplyResult("error", stage="deserialize", error=decoded.kafka_exception, cause=decoded.kafka_cause)

    def assign(self, tp: TopicIdPartition) -> None:
        self.machine.assign(tp)

    def unassign(self, tp: TopicIdPartition) -> None:
        self.machine.unassign(tp)

    def mark_ready(self, tp: TopicIdPartition) -> str | None:
        return self.machine.mark_ready(tp)

    def mark_not_ready(self, tp: TopicIdPartition) -> None:
        self.machine.mark_not_ready(tp)

    def put_consumer_state(self, key: bytes, value: bytes | None) -> None:
        """Bookkeeping of the consumer, opaque to the view, committed with the batch (None deletes it)."""
        if value is None:
            self.stage.delete(K.META, CONSUMER_STATE_PREFIX + key)
        else:
            self.stage.put(K.META, CONSUMER_STATE_PREFIX + key, value)


class View:
    def __init__(
        self,
        path: str | Path,
        *,
        sync: bool = False,
        cache_mb: int = BLOCK_CACHE_MB,
        row_cache_mb: int = ROW_CACHE_MB,
        write_buffer_mb: int = WRITE_BUFFER_MB,
        read_only: bool = False,
        secondary: Path | None = None,
        on_commit: Callable[[], None] | None = None,
        count_rows: bool = False,
    ) -> None:
        """``read_only`` opens an existing view beside the process that writes it (operations tools);
        ``secondary`` likewise, as a RocksDB secondary instance keeping its own files in that directory, which
        ``catch_up`` brings up to date with the writer; ``on_commit`` is called after each batch that wrote
        something, before ``batch`` returns; ``row_cache_mb`` caches the offset index entries that batch
        lookups read; ``count_rows`` counts the rows each batch writes in ``row_counts`` (each event's changes are then
        flushed to its batch as it is applied, which costs time)."""
        self.path = Path(path)
        read_only = read_only or secondary is not None
        if read_only and not (self.path / "CURRENT").is_file():
            raise ViewNotFound(f"no view at {self.path}")
        self.path.mkdir(parents=True, exist_ok=True)
        self._kv = RocksKV(
            self.path,
            cache_mb=cache_mb,
            row_cache_mb=row_cache_mb,
            write_buffer_mb=write_buffer_mb,
            sync=sync,
            read_only=read_only,
            secondary=secondary,
        )
        self._on_commit = on_commit
        self.row_counts = RowCounts() if count_rows else None
        self._write_lock = threading.Lock()
        # partition and epoch rows, kept across batches: this view is their only writer
        self._row_cache: dict[TopicIdPartition, PartitionRow] = {}
        self._epoch_cache: dict[bytes, EpochRow] = {}
        self._tree_cache = new_tree_cache()  # the timestamp trees' pages and tops, likewise
        self._max_timestamp_tails: Tails = {}
        self._max_timestamp_found: Found = {}
        self._read_cache = CachedReadKV(self._kv, (K.PARTITIONS, K.EPOCHS), self._kv.changes)
        self._offset_cache = OffsetCache(self._kv, OFFSET_CACHE_LIMIT, OFFSET_ENTRY_CACHE_BYTES)
        self._lookup_memo = LookupMemo(self._offset_cache, LOOKUP_MEMO_BYTES)
        self._clock = CommitClock(self._kv.changes)  # each query answers from one committed state
        self._times = ApplyTimes()
        self._rows_since_release = 0  # rows written since glibc's free pages were last given back
        self.queries = Queries(self._read_cache, self._offset_cache, self._lookup_memo, self._clock)
        try:
            self._check_schema(read_only)
        except BaseException:
            with suppress(Exception):  # what made it unusable is the error to raise
                self.close()  # a view that cannot be used is not kept open (nor its lock held)
            raise

    def _check_schema(self, read_only: bool) -> None:
        raw = self._kv.get(K.META, K.SCHEMA_VERSION_KEY)
        if raw is None:
            with self.batch() as batch:
                batch.stage.put(K.META, K.SCHEMA_VERSION_KEY, K.u32(SCHEMA_VERSION))
            return
        version = K.read_u32(raw)
        if version == SCHEMA_VERSION:
            interrupted = self._kv.get(K.META, UPGRADE_FROM_KEY)
            if interrupted is None:
                if not read_only:
                    self._kv.drop_legacy_column_families()  # left by an upgrade killed as it ended
                return
            if read_only:
                raise ViewSchemaMismatch(
                    f"the upgrade of the view at {self.path} from schema version {K.read_u32(interrupted)} to "
                    f"{SCHEMA_VERSION} was interrupted: open it once for writing (rlmm consume or serve) to finish it"
                )
            self._upgrade(K.read_u32(interrupted))
            return
        if version in UPGRADABLE:
            if read_only:
                raise ViewSchemaMismatch(
                    f"the view at {self.path} has schema version {version}, written by an older rlmm: open it once "
                    f"for writing (rlmm consume or serve) to upgrade it to {SCHEMA_VERSION}"
                )
            self._upgrade(version)
            return
        raise ViewSchemaMismatch(
            f"view at {self.path} has schema version {version}, this rlmm reads "
            f"{SCHEMA_VERSION}: rebuild it from the topic or a snapshot"
        )

    def _upgrade(self, version: int) -> None:
        """Write every partition again in this version's layout (``rlmm.state.upgrade``), going on after the last
        partition an interrupted upgrade wrote."""
        with self.batch() as batch:
            batch.stage.put(K.META, K.SCHEMA_VERSION_KEY, K.u32(SCHEMA_VERSION))
            batch.stage.put(K.META, UPGRADE_FROM_KEY, K.u32(version))
        done = self._kv.get(K.META, UPGRADED_KEY)
        tps = [K.tp_from_identity(key) for key, _ in scan(self._kv, K.PARTITIONS, b"") if done is None or key > done]
        log.warning(
            "upgrading the view at %s from schema version %d to %d (%d partitions%s)",
            self.path,
            version,
            SCHEMA_VERSION,
            len(tps),
            "" if done is None else ", going on after an interrupted upgrade",
        )
        for tp in tps:
            with self.batch() as batch:
                upgrade_partition(batch.stage, tp)
                batch.stage.put(K.META, UPGRADED_KEY, K.tp_identity(tp))
        with self.batch() as batch:
            batch.stage.delete(K.META, UPGRADE_FROM_KEY)
            batch.stage.delete(K.META, UPGRADED_KEY)
        self._kv.drop_legacy_column_families()

    def close(self) -> None:
        self._kv.close()

    def open_again(self) -> None:
        """Close the view's database and open it again, nothing kept of it; queries wait meanwhile. A secondary
        does so after the process writing the view was replaced (``rlmm.server.sharing``)."""
        with self._write_lock, self._clock.publishing():
            self._drop_caches()
            self._kv.reopen()

    def reopen(self) -> None:
        """Open the view's database again and write to it, after RocksDB refused a write (a full disk): raises
        ``ViewStorageFailed`` while writes still fail."""
        self.open_again()
        with self.batch() as batch:
            batch.stage.put(K.META, K.SCHEMA_VERSION_KEY, K.u32(SCHEMA_VERSION))

    @property
    def fault(self) -> ViewDamaged | None:
        """The damage RocksDB first reported (a checksum mismatch...), None while none was seen."""
        return self._kv.fault

    def reads_run_again(self) -> tuple[int, int]:
        """Queries run again because a commit (or catch-up) landed while they read, and how many of them then
        ran holding the next one off (``CommitClock``)."""
        return self._clock.overlapped, self._clock.held_off

    def apply_seconds(self) -> dict[str, float]:
        """Seconds the batches spent in each stage since the view opened (``rlmm.state.apply_times``)."""
        return dict(self._times.seconds)

    def memory(self) -> dict[str, int]:
        """Bytes RocksDB holds for the view, by kind (``RocksKV.memory``)."""
        return self._kv.memory()

    def flush(self) -> None:
        """Make every committed batch durable (fsync) and move it out of the WAL, for a clean shutdown."""
        self._kv.flush()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        """Stage operations; on normal exit they are committed as one atomic write."""
        with self._write_lock:
            self._times.start()
            stage = StagedKV(self._kv) if self.row_counts is None else CountingStagedKV(self._kv)
            batch = Batch(
                stage,
                StateMachine(
                    stage,
                    self._row_cache,
                    self._epoch_cache,
                    self._tree_cache,
                    self._max_timestamp_tails,
                    self._max_timestamp_found,
                ),
                self.row_counts,
            )
            try:
                yield batch
                self._times.lap("apply")
                batch.machine.flush()
                for name, count in batch.counted().items():
                    key = _counter_key(name)
                    raw = self._kv.get(K.META, key)
                    batch.stage.put(K.META, key, K.offset_bytes((0 if raw is None else K.read_offset(raw, 0)) + count))
            except BaseException:
                self._drop_caches()  # cached rows may hold changes that are not committed
                raise
            self._times.lap("flush")
            if self.row_counts is not None:
                assert isinstance(batch.stage, CountingStagedKV)
                self.row_counts.add(batch.stage)
            self._publish(batch.stage)
            if len(self._epoch_cache) > EPOCH_CACHE_LIMIT:
                self._epoch_cache.clear()
            if len(self._tree_cache) > TREE_CACHE_LIMIT:
                self._tree_cache.clear()
            if len(self._max_timestamp_tails) > TAILS_CACHE_LIMIT:
                self._max_timestamp_tails.clear()
            if len(self._max_timestamp_found) > TAILS_CACHE_LIMIT:
                self._max_timestamp_found.clear()

    def _publish(self, stage: StagedKV) -> None:
        """Write a stage atomically and bring the caches in front of the store up to date with it (the lookup caches
        decline from before the write, the read cache from its start), then call ``on_commit``."""
        try:
            writes = self._kv.write_batch(stage)
        except BaseException:
            self._drop_caches()
            raise
        self._times.lap("encode")
        if writes is None:
            return
        self._offset_cache.committing(stage)
        self._lookup_memo.committing(stage)
        self._times.lap("caches")
        self._rows_since_release += len(writes)  # before the write, which empties the batch
        try:
            with self._clock.changing():
                self._kv.write(writes)
        except BaseException:
            self._drop_caches()
            raise
        if self._rows_since_release >= RELEASE_AFTER_ROWS:
            self._rows_since_release = 0
            release_free_memory()
        self._times.lap("write")
        self._read_cache.committed(stage)
        self._offset_cache.committed(stage)
        self._lookup_memo.committed(stage)
        self._times.lap("caches")
        if self._on_commit is not None:
            self._on_commit()

    def load(
        self,
        rows: Iterable[tuple[str, bytes, bytes]],
        files: Mapping[str, Sequence[str]],
        *,
        next_tpid: int,
        metadata_offsets: Mapping[int, int],
        quarantine: Sequence[QuarantinedRecord],
        consumer_state: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """Fill a fresh view in bulk (a restore) and make it durable: ``files``, per column family its rows in
        sorted files (``write_load_file``), are ingested as they are; then ``rows`` (column family, key, value),
        the tpid counter, the consumed offsets, the quarantine (and its count) and the consumer's state
        (``Batch.put_consumer_state``) are written in one atomic batch. Raises
        ``ViewNotEmpty`` when the view holds anything besides its schema version. A load interrupted between
        the files and the batch leaves rows without their partitions, in a view that refuses another load:
        load a view where nothing reads it and move it into place once loaded, as restore does."""
        with self._write_lock:
            self._refuse_unless_empty()
            stage = StagedKV(self._kv)
            for cf, key, value in rows:
                stage.put(cf, key, value)
            write_view_rows(stage, next_tpid, metadata_offsets, quarantine)
            stage.put(K.META, _counter_key("quarantined"), K.offset_bytes(len(quarantine)))
            for key, value in (consumer_state or {}).items():
                stage.put(K.META, CONSUMER_STATE_PREFIX + key, value)
            with self._clock.publishing():
                try:
                    for cf, paths in files.items():
                        if paths:
                            self._kv.ingest(cf, list(paths))
                    self._kv.commit(stage)
                finally:
                    self._drop_caches()
        self.flush()

    def _refuse_unless_empty(self) -> None:
        for cf in K.COLUMN_FAMILIES:
            for key, _ in scan(self._kv, cf, b""):
                if cf != K.META or key != K.SCHEMA_VERSION_KEY:
                    raise ViewNotEmpty(
                        f"the view at {self.path} is not empty ({cf} has rows): a load fills a fresh view"
                    )

    def catch_up(self) -> None:
        """A secondary view: see every batch the writer has committed until now, nothing cached from before."""
        self._offset_cache.changing()
        self._lookup_memo.changing()
        try:
            with self._clock.changing():
                self._kv.catch_up()
        finally:
            self._read_cache.clear()
            self._offset_cache.clear()
            self._lookup_memo.clear()

    def _drop_caches(self) -> None:
        self._row_cache.clear()
        self._epoch_cache.clear()
        self._tree_cache.clear()
        self._max_timestamp_tails.clear()
        self._max_timestamp_found.clear()
        self._read_cache.clear()
        self._offset_cache.clear()
        self._lookup_memo.clear()

    def check(self) -> Iterator[tuple[str, int]]:
        """Read the whole view, every block's checksum verified: (column family, entries) for each in turn;
        raises ``ViewDamaged`` where RocksDB finds damage."""
        for cf in K.COLUMN_FAMILIES:
            yield cf, self._kv.count_keys(cf)

    def check_from(self, cf: str, key: bytes | None, table_bytes: int) -> bytes | None:
        """One step of a paced ``check``: about ``table_bytes`` of column family ``cf``'s table files from ``key``
        on (None: the start); the key to go on from, None at its end. Damage found is the view's ``fault``."""
        return self._kv.check_from(cf, key, table_bytes)

    def metadata_offsets(self) -> dict[int, int]:
        """Last consumed offset per metadata partition."""
        return {K.read_u32(k): K.read_offset(v, 0) for k, v in scan(self._kv, K.METADATA_OFFSETS, b"")}

    def consumer_state(self) -> dict[bytes, bytes]:
        """What ``Batch.put_consumer_state`` committed."""
        n = len(CONSUMER_STATE_PREFIX)
        return {k[n:]: v for k, v in scan(self._kv, K.META, CONSUMER_STATE_PREFIX)}

    def counters(self) -> dict[str, int]:
        """Records handled by result (``ApplyResult.counter``), and ``quarantined``, since the view was created."""
        n = len(COUNTER_PREFIX)
        return {k[n:].decode(): K.read_offset(v, 0) for k, v in scan(self._kv, K.META, COUNTER_PREFIX)}

    def quarantine(self) -> Iterator[QuarantinedRecord]:
        for key, value in scan(self._kv, K.QUARANTINE, b""):
            yield QuarantinedRecord.unpack(key, value)

    @property
    def reader(self) -> ReadKV:
        """The committed state, for the core's readers (``rlmm.state.export``...): to read, never to write."""
        return self._kv

    def items(self, cf: str) -> Iterator[tuple[bytes, bytes]]:
        """Raw content of one column family, in key order."""
        return scan(self._kv, cf, b"")

    def partitions(self) -> Iterator[tuple[TopicIdPartition, bool, bool]]:
        """(partition, assigned, ready) for every partition the view knows."""
        for key, raw in scan(self._kv, K.PARTITIONS, b""):
            row = PartitionRow.unpack(raw)
            yield K.tp_from_identity(key), row.assigned, row.ready


def event_kind(decoded: RemoteLogMetadata | DecodeError) -> str:
    """What ``RowCounts`` counts an event as: its record's target state, or why it has none."""
    if isinstance(decoded, (SegmentMetadata, SegmentUpdate, PartitionDelete)):
        return decoded.state.name
    return "undecodable" if isinstance(decoded, DecodeError) else "snapshot"


def _counter_key(name: str) -> bytes:
    return COUNTER_PREFIX + name.encode()


def write_load_file(path: str | Path, cf: str, rows: Iterable[tuple[bytes, bytes]]) -> None:
    """Rows of column family ``cf``, in key order, as a file for ``View.load`` (worker processes may write them)."""
    write_sst(str(path), cf, rows)


def reset_view(path: str | Path) -> list[TopicIdPartition]:
    """Move the view at ``path`` (if any) out of the way, to ``PATH.reset-TIMESTAMP`` beside it: nothing is
    deleted, and a fresh view starts at ``path``. Returns the partitions it had registered, to register in
    the fresh one (none, with a warning, where they cannot be read: a damaged view, or one of another schema
    version, the views a reset is for). Raises ``ViewInUse`` while a process holds it."""
    path = Path(path)
    if not (path / "CURRENT").is_file():
        return []
    try:
        with View(path) as view:  # opened for writing: refused while another process holds it
            registered = [tp for tp, assigned, _ in view.partitions() if assigned]
    except (ViewDamaged, ViewSchemaMismatch) as exc:  # what a reset is for; no process holds it (checked first)
        log.warning("the registrations of the view %s cannot be read (%s): register its partitions again", path, exc)
        registered = []
    aside = path.with_name(f"{path.name}.reset-{time.strftime('%Y%m%dT%H%M%S')}")
    path.rename(aside)
    log.warning(
        "the view %s was set aside as %s; a fresh view consumes the topic from the start, with its %d "
        "registered partition(s)",
        path,
        aside,
        len(registered),
    )
    return registered
