"""RocksDB backend of the view (rocksdict, raw bytes, one column family per index)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from itertools import islice, takewhile
from pathlib import Path
from typing import Any, Final

from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

from rlmm.errors import ViewDamaged, ViewInUse, ViewSchemaMismatch, ViewStorageFailed
from rlmm.state import keys as K
from rlmm.state.kv import Item, StagedKV, last
from rlmm.state.reopening import Reopening


def storage_error(exc: Exception) -> Exception:
    """What a RocksDB status that rocksdict raised (a plain ``Exception`` whose text is RocksDB's
    ``Status::ToString``, ``CODE: DETAIL``) means for the view, by its code; any other exception is
    returned as it is (a bug, not the storage)."""
    if type(exc) is not Exception:
        return exc
    text = str(exc)
    code, _, detail = text.partition(": ")
    if code == "Corruption":
        return ViewDamaged(text)
    if code == "IO error" and detail.startswith("While lock file"):
        return ViewInUse(text)
    return ViewStorageFailed(text)


def table_format(cache: Cache | None = None, *, held_filters: bool = False) -> BlockBasedOptions:
    """How the view's table files are laid out and read (``cache``: the block cache they are read through;
    ``held_filters``: each file's bloom filter whole, held beside the cache, as ``K.HELD_FILTERS`` have theirs)."""
    table = BlockBasedOptions()
    if cache is not None:
        table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    if held_filters:
        # The segments' point reads are mostly of new ids, at random keys, which miss: each probes the filter of
        # every level-0 file and of one file per level below (4.4 files a miss on bench_core's uploads stream). By
        # partitions, a probe searched the file's index of partitions and looked its partition up in the cache
        # (~1,100 instructions a file, 7,500 per uploads event in all); whole, it hashes once (3,200 per event).
        # Held by the open file, outside the cache, a filter takes 10 bits per segment (1.2 MB per million
        # segments) and never crowds the cache: in it, the whole filter of a view that outgrew the cache would be
        # read again at each miss. The indexes stay partitioned, in the cache.
        table.set_cache_index_and_filter_blocks(False)
        return table
    # Table files' indexes and bloom filters are read through the block cache, in partitions of a few KB,
    # rather than held whole beside it for as long as the file is open: there they took ~5 MB more for each
    # million events applied, whatever the cache's size. Whole in the cache, the filters of a growing view
    # crowd it out and the apply path reads them again and again (28k events/s after 4M events, against
    # 82k); by partitions, it reads only the few it needs. Only the partitions' own small indexes, and
    # the level-0 files' blocks, stay pinned.
    table.set_cache_index_and_filter_blocks(True)
    table.set_partition_filters(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    return table


def _column_family_options(table: BlockBasedOptions, write_buffer_mb: int) -> Options:
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.lz4())
    # RocksDB keeps the database's budget (``set_db_write_buffer_size``) by writing out one column family's memtable
    # at a time, not the largest: with the budget as each one's own limit, a large one grew to the whole budget
    # beside the others (9-15 MB of memtables for 8 MB). Each is now written out at a share of the budget
    memtable_bytes = max(ARENA_BLOCK_KB << 10, (write_buffer_mb << 20) // MEMTABLE_SHARES)
    options.set_write_buffer_size(memtable_bytes)
    options.set_max_write_buffer_number(2)
    # each column family's memtable takes an arena block as soon as it holds a row, and RocksDB's default
    # block is an eighth of the write buffer (2 MB): 14 column families held ~28 MB of mostly empty blocks
    options.set_arena_block_size(ARENA_BLOCK_KB << 10)
    # a bloom filter over each memtable's keys: most point reads of the apply path (a new segment's
    # id, an index entry not there) miss, and skip the memtable search. Its bits are allocated with the
    # memtable, a share of the write buffer: 1 % gives ~8 bits per row of a full memtable
    options.set_memtable_whole_key_filtering(True)
    options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    return options


def write_sst(path: str, cf: str, items: Iterable[tuple[bytes, bytes]]) -> None:
    """Rows of column family ``cf``, in key order, as a table file that ``RocksKV.ingest`` adds as it is, laid out
    as the view writes its own (with no bloom filter and one whole index, read through the block cache, a
    restored view of 1.5M segments applied its tail at a quarter of the rate)."""
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table_format(held_filters=cf in K.HELD_FILTERS))
    options.set_compression_type(DBCompressionType.lz4())
    writer = SstFileWriter(options=options)
    writer.open(path)
    for key, value in items:
        writer[key] = value
    writer.finish()


# The view's memory in RocksDB, by default (the view's settings change the first three): a block cache for the
# apply path's reads, no row cache (single lookups have their entries cached by the view's offset cache, and
# a row cache turns range deletions into a deletion of each key), and at most this much in memtables. Chosen for
# memory (issue 32: peak RSS within a quarter of Kafka's heap for the same segments). bench_core's cluster stream,
# which reads old rows (retention's deletes read the segment and its memberships, at random keys), at 1M events
# with 8 MB / 8 MB against 32 MB / 16 MB: the same instructions per applied event (85,277 against 85,879) with 0.63
# table blocks read from file per event against 0.34 (a read system call each, from the page cache), the same
# apply rate within the machine's noise, nextSegmentWithTxnIndex 1.19x the instructions and listings of an epoch
# p50 1.3-1.4x the time (their blocks read as often); peak RSS 80-82 MB against 109. On the uploads stream, whose
# events look up new keys, 1.11x the instructions per applied event (51,235 against 46,234, the last 20,000 of 1M)
# for a peak RSS of 71-73 MB against 104. The block cache went from 8 MB to 6 later: bench_core at 1M events,
# alternated, uploads (--kafka) peak RSS 64.8 / 66.7 MB against 68.3 / 67.7 (0.246-0.253 of Kafka's heap against
# 0.257-0.259), cluster 70.2 / 69.7 against 70.8 / 71.4, with the apply rates, lookups, txn walks and listings of an
# epoch the same within the runs' spread; at 4M uploads events, 69.6 against 72.5 MB, lookup p50 11.1 against 13.1 us.
# Then to 5, once the segments' bloom filters had left the cache (K.HELD_FILTERS: 0.6 MB beside it at 1M uploads
# events): alternated with 6 MB, uploads (--kafka) peak RSS 65.4 / 65.3 MB against 65.9 / 66.6 (0.248 of Kafka's heap
# against 0.250-0.253) at the same apply rate; cluster peak 69.6 / 69.0 against 70.6 / 70.0, apply 101.4k-104.9k
# against 97.7k-113.2k events/s (three pairs), the same instructions per applied event (74,205 against 74,664) with
# 0.70 table blocks read from file per event against 0.64, listings of an epoch 1.67 blocks read per call against
# 0.98 and p50 39.9 / 40.9 us against 38.4 / 38.0
BLOCK_CACHE_MB: Final = 5
ROW_CACHE_MB: Final = 0
WRITE_BUFFER_MB: Final = 8
ARENA_BLOCK_KB: Final = 256
MEMTABLE_SHARES: Final = 4  # a column family's memtable flushes at this share of the write buffer budget
MEMTABLE_BLOOM_RATIO: Final = 0.01
# the buffers of RocksDB's background work, taken while the view's batches are applied: a compaction reads each of
# its table files ahead by 2 MB, and every file written (table files, the log) goes through 1 MB, by RocksDB's
# defaults. With 256 KB each, bench_core's peak RSS at 1M events: 68.6 MB against 70.7-71.3 on the uploads stream,
# 73.7 / 74.5 against 75.4 / 74.4 on the cluster stream, the apply rate and the queries the same
COMPACTION_READAHEAD_KB: Final = 256
FILE_WRITE_BUFFER_KB: Final = 256
# level-0 files that start a compaction of a seek index (``K.SEEK_INDEXES``; RocksDB's default, kept for the others,
# is 4). With 4, nextSegmentWithTxnIndex cost 120k instructions against 90k once they were compacted (bench_core's
# cluster stream at 1M events); the indexes are small (the txn index: 0.7 MB), so their compactions cost little.
SEEK_INDEX_LEVEL0_FILES: Final = 1
CHECK_MIN_ENTRIES: Final = 256  # entries a step of a paced check reads at least (``check_from``)


class RocksKV:
    """Read side of the ``ReadKV`` protocol over an open database, plus atomic commits of a stage.

    Every read checks RocksDB's status: block checksums are verified on each read (RocksDB's default,
    with paranoid checks on), and an iterator that stops on an error raises instead of reading as the
    end of the keys. RocksDB's errors are raised as ``ViewError``s; the first ``ViewDamaged`` is kept
    in ``fault``, for the service to stop serving the view.
    """

    def __init__(
        self,
        path: Path,
        *,
        cache_mb: int = BLOCK_CACHE_MB,
        row_cache_mb: int = ROW_CACHE_MB,
        write_buffer_mb: int = WRITE_BUFFER_MB,
        sync: bool = False,
        read_only: bool = False,
        secondary: Path | None = None,
    ) -> None:
        """``row_cache_mb``: a cache of the values point reads found (0: none), which spares a repeated
        ``get_many`` the index and block searches; RocksDB refuses range deletions beside it, so prefixes
        are then deleted key by key (a partition's deletion reads all its keys). ``secondary``: open as a
        RocksDB secondary instance (its own files in that directory) that follows the process writing the
        database (``catch_up``)."""
        cache = Cache(cache_mb << 20)
        table = table_format(cache)
        cf_options = _column_family_options(table, write_buffer_mb)
        held_options = _column_family_options(table_format(cache, held_filters=True), write_buffer_mb)
        # the small indexes queries seek in: a seek reads every level-0 file (a point read skips most by their
        # bloom filters), and the write buffer's flushes leave them many small ones
        seek_options = _column_family_options(table, write_buffer_mb)
        seek_options.set_level_zero_file_num_compaction_trigger(SEEK_INDEX_LEVEL0_FILES)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        options.set_db_write_buffer_size(write_buffer_mb << 20)
        options.set_paranoid_checks(True)
        options.set_compaction_readahead_size(COMPACTION_READAHEAD_KB << 10)
        options.set_writable_file_max_buffer_size(FILE_WRITE_BUFFER_KB << 10)
        options.set_block_based_table_factory(table)
        self._row_cache = row_cache_mb > 0
        if self._row_cache:
            options.set_row_cache(Cache(row_cache_mb << 20))
        if secondary is not None:
            options.set_max_open_files(-1)  # keeps table files open: the primary may delete them meanwhile
        self.fault: ViewDamaged | None = None
        self._path = str(path)
        self._options = options
        self._cf_options = {
            cf: seek_options if cf in K.SEEK_INDEXES else held_options if cf in K.HELD_FILTERS else cf_options
            for cf in K.COLUMN_FAMILIES
        }
        self._read_only = read_only or secondary is not None
        if secondary is not None:
            self._access = AccessType.secondary(str(secondary))
        else:
            self._access = AccessType.read_only() if read_only else AccessType.read_write()
        self.write_options = WriteOptions()
        self.write_options.sync = sync
        # one iterator per (thread, column family) for floor/ceiling, kept with the count of the store's changes
        # when it was made (odd while one is under way) and reused only while that count stands, so that a
        # reused iterator never shows a state older than the store's
        self._iterators: dict[tuple[int, str], tuple[int, object]] = {}
        self._changes = 0
        self._legacy: list[str] = []  # column families of older schema versions, opened to upgrade the view
        self._open()

    def _open(self) -> None:
        column_families = self._cf_options
        if self._read_only:
            self._check_column_families()  # (a read-only instance may leave column families unopened)
        else:
            self._legacy = self._legacy_present()
            column_families = {**column_families, **{cf: self._cf_options[K.META] for cf in self._legacy}}
        try:
            self.db: Any = Rdict(
                self._path, options=self._options, column_families=column_families, access_type=self._access
            )  # None once closed for a reopen
        except Exception as exc:
            raise self._failed(exc) from None
        self.cfs = {cf: self.db.get_column_family(cf) for cf in K.COLUMN_FAMILIES}
        self.handles = {cf: self.db.get_column_family_handle(cf) for cf in K.COLUMN_FAMILIES}

    def _legacy_present(self) -> list[str]:
        """The column families of older schema versions that the database holds (RocksDB opens a database for writing
        only with all of its column families)."""
        if not (Path(self._path) / "CURRENT").is_file():
            return []
        try:
            present = set(Rdict.list_cf(self._path))
        except Exception as exc:
            raise self._failed(exc) from None
        return [cf for cf in K.LEGACY_COLUMN_FAMILIES if cf in present]

    def drop_legacy_column_families(self) -> None:
        """Drop the column families of older schema versions that the database held when opened (an upgraded view no
        longer has a use for them)."""
        while self._legacy:
            try:
                self.db.drop_column_family(self._legacy[-1])
            except Exception as exc:
                raise self._failed(exc) from None
            self._legacy.pop()

    def _check_column_families(self) -> None:
        """A read-only open cannot create the column families a newer rlmm added: say so instead of failing."""
        try:
            present = set(Rdict.list_cf(str(self._path)))
        except Exception as exc:
            raise self._failed(exc) from None
        missing = [cf for cf in K.COLUMN_FAMILIES if cf not in present]
        if missing:
            raise ViewSchemaMismatch(
                f"the view at {self._path} was written by an older rlmm (it has no "
                f"{', '.join(missing)}): open it once for writing (rlmm consume or serve) "
                f"to upgrade it"
            )

    def close(self) -> None:
        """Close the database; it is only released once no column family object refers to it. Raises what its
        last flush met (``ViewDamaged`` for damage a compaction found in a table file no read touched); it closes
        all the same."""
        self._iterators = {}
        self.cfs.clear()
        self.handles.clear()
        if self.db is not None:  # None while a reopening failed
            try:
                self.db.close()
            except Exception as exc:
                raise self._failed(exc) from None

    def reopen(self) -> None:
        """Close the database and open it again: after a failed write (a full disk) RocksDB refuses every
        write until then. Raises ``ViewInUse`` while another thread still holds the old one (try again)."""
        self._iterators = {}
        self.cfs = Reopening()
        self.handles = {}
        try:
            self.db.close()
        except Exception:  # it reports the failed write again, and closes all the same
            pass
        self.db = None  # the last reference: RocksDB releases the view's lock
        self._open()

    def memory(self) -> dict[str, int]:
        """Bytes RocksDB holds for the view, by kind: the block cache (table blocks, their indexes and filters
        among them), the memtables, and the table readers (what open table files keep beside the cache)."""
        if self.db is None:  # reopening
            return {}
        cfs = list(self.cfs.values())
        return {
            "block_cache": self.db.property_int_value("rocksdb.block-cache-usage") or 0,  # one, shared
            "memtables": sum(cf.property_int_value("rocksdb.cur-size-all-mem-tables") or 0 for cf in cfs),
            "table_readers": sum(cf.property_int_value("rocksdb.estimate-table-readers-mem") or 0 for cf in cfs),
        }

    def _failed(self, exc: Exception) -> Exception:
        error = storage_error(exc)
        if isinstance(error, ViewDamaged) and self.fault is None:
            self.fault = error
        return error

    def _check(self, it: Any) -> None:
        """Raise what stopped an iterator that turned invalid, if anything but the end of the keys did."""
        try:
            it.status()
        except Exception as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        """Sync the WAL and write every column family's memtable to table files."""
        try:
            self.db.flush_wal(True)
            for cf in self.cfs.values():
                cf.flush()
        except Exception as exc:
            raise self._failed(exc) from None

    def get(self, cf: str, key: bytes) -> bytes | None:
        try:
            return self.cfs[cf].get(key)
        except Exception as exc:
            raise self._failed(exc) from None

    def get_many(self, cf: str, keys: list[bytes]) -> list[bytes | None]:
        """``get`` of every key in one call (a multi-get, which runs without the GIL)."""
        try:
            values: Any = self.cfs[cf].get(keys)  # type: ignore[arg-type]  # the stub omits list[bytes]
        except Exception as exc:
            raise self._failed(exc) from None
        return values

    # (rocksdict 0.3 applies iterator bounds in its own key encoding, not in raw mode, so iterators
    # are unbounded and stop at the prefix's end themselves.)

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        it = self.cfs[cf].iter()
        it.seek(max(key, prefix))
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                return
            yield k, it.value()
            it.next()
        self._check(it)

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        it = self.cfs[cf].iter()
        it.seek_for_prev(key)
        while it.valid():
            k = it.key()
            if k.startswith(prefix):
                yield k, it.value()
            elif k < prefix:
                return
            it.prev()  # keys past the prefix's range can only come first
        self._check(it)

    def keys_with_prefix(self, cf: str, prefix: bytes, limit: int) -> list[bytes] | None:
        """The first ``limit`` keys that start with ``prefix``, in order, without their values: RocksDB's key
        iterator, stepped in C, at about a quarter of the cost of ``iter_from``. That iterator ends silently
        where RocksDB fails, so when fewer than ``limit`` came their last is checked against a seek's: None when
        they differ (the keys changed meanwhile, or the iterator stopped at damage that the seek, which raises
        what it meets, did not reach)."""
        end = K.prefix_end(prefix)
        try:
            stored: Iterator[bytes] = self.cfs[cf].keys(from_key=prefix)  # type: ignore[assignment]  # raw: bytes
            keys = list(islice(takewhile(end.__gt__, stored), limit))
        except Exception as exc:
            raise self._failed(exc) from None
        if len(keys) == limit:
            return keys
        found = last(self, cf, prefix)
        return keys if (found[0] if found is not None else None) == (keys[-1] if keys else None) else None

    def _iterator(self, cf: str) -> Any:
        changes = self._changes
        slot = (threading.get_ident(), cf)
        held = self._iterators.get(slot)
        if held is not None and held[0] == changes:
            return held[1]
        it = self.cfs[cf].iter()
        if not changes & 1 and self._changes == changes:  # made while the store did not change
            self._iterators[slot] = (changes, it)
        return it

    def changes(self) -> int:
        """How many times the store began or finished a change (a write, a catch-up, an ingest): odd while one is
        under way. Readers compare it before and after they read; it is a Python attribute, not a call into
        RocksDB, which would let a writer waiting for the interpreter in and make the reader wait for its write."""
        return self._changes

    def floor(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        it = self._iterator(cf)
        it.seek_for_prev(key)
        while it.valid():
            k = it.key()
            if k.startswith(prefix):
                return k, it.value()
            if k < prefix:
                return None
            it.prev()
        self._check(it)
        return None

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        it = self._iterator(cf)
        it.seek(max(key, prefix))
        if it.valid():
            k = it.key()
            if k.startswith(prefix):
                return k, it.value()
        else:
            self._check(it)
        return None

    def count_keys(self, cf: str) -> int:
        """Read every entry of a column family, verifying each block's checksum, without filling the block
        cache; raises ``ViewDamaged`` at the first damaged block."""
        it = self._checking_iterator(cf)
        it.seek_to_first()
        count = 0
        while it.valid():
            count += 1
            it.next()
        self._check(it)
        return count

    def check_from(self, cf: str, key: bytes | None, table_bytes: int) -> bytes | None:
        """Read about ``table_bytes`` of a column family's table files, from ``key`` on (None: its first key), as
        ``count_keys`` does; the key to go on from, None at the column family's end. The bytes are reckoned from
        the column family's table files and its estimated count of keys."""
        family = self.cfs[cf]
        size = family.property_int_value("rocksdb.live-sst-files-size") or 0
        keys = family.property_int_value("rocksdb.estimate-num-keys") or 0
        entries = max(CHECK_MIN_ENTRIES, table_bytes * keys // size if size else 0)
        it = self._checking_iterator(cf)
        if key is None:
            it.seek_to_first()
        else:
            it.seek(key)
        for _ in range(entries):
            if not it.valid():
                break
            it.next()
        if it.valid():
            return it.key()
        self._check(it)
        return None

    def _checking_iterator(self, cf: str) -> Any:
        """An iterator that verifies each block's checksum and leaves the block cache as it is."""
        options = ReadOptions()
        options.set_verify_checksums(True)
        options.fill_cache(False)  # type: ignore[call-arg]  # the stub omits the flag
        return self.cfs[cf].iter(options)

    def ingest(self, cf: str, paths: list[str]) -> None:
        """Add table files (``write_sst``) to a column family as they are, in one step."""
        self._changes += 1
        try:
            self.cfs[cf].ingest_external_file(paths)
        except Exception as exc:
            raise self._failed(exc) from None
        finally:
            self._changes += 1

    def catch_up(self) -> None:
        """A secondary instance: read what the primary has written since (its WAL and MANIFEST)."""
        self._changes += 1
        try:
            self.db.try_catch_up_with_primary()
        except Exception as exc:
            raise self._failed(exc) from None
        finally:
            self._changes += 1

    def commit(self, stage: StagedKV) -> bool:
        """Write everything staged as one atomic batch; False when nothing was staged."""
        batch = self.write_batch(stage)
        if batch is None:
            return False
        self.write(batch)
        return True

    def write_batch(self, stage: StagedKV) -> WriteBatch | None:
        """Everything staged as one write batch (range deletions first, they came first), None when nothing was
        staged; ``write`` writes it. Built apart, so that the store's count of changes is odd for the write alone."""
        batch = WriteBatch(raw_mode=True)
        for cf, prefixes in stage.deleted_prefixes.items():
            handle = self.handles[cf]
            for prefix in prefixes:
                if self._row_cache:  # RocksDB refuses range deletions beside a row cache: each key instead
                    for key, _ in self.iter_from(cf, prefix, prefix):
                        batch.delete(key, handle)
                else:
                    batch.delete_range(prefix, K.prefix_end(prefix), handle)
        put, delete = batch.put, batch.delete  # (bound once: a row's call then looks no method up)
        for cf, table in stage.pending.items():
            handle = self.handles[cf]
            # in key order: a memtable's skip list starts each insertion from where the previous one went, so that
            # ascending keys skip most of its search from the top (RocksDB's write: ~2,400 fewer instructions per event
            # on bench_core's uploads stream, ~3,100 on its cluster stream, for a sort of ~900 and ~1,900)
            for key in sorted(table):  # (sorted as bytes: tuples of items sort at twice the cost)
                value = table[key]
                if value is None:
                    delete(key, handle)
                else:
                    put(key, value, handle)
        return None if batch.is_empty() else batch

    def write(self, batch: WriteBatch) -> None:
        """Write a batch atomically."""
        self._changes += 1
        try:
            self.db.write(batch, self.write_options)
        except Exception as exc:
            raise self._failed(exc) from None
        finally:
            self._changes += 1
