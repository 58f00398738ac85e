"""RocksDB backend of the view (rocksdict, raw bytes, one column family per index)."""

from __future__ import annotations

from collections.abc import Iterator
import threading
from pathlib import Path
from typing import Any

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from rlmm.state import keys as K
from rlmm.state.kv import Item, StagedKV


class RocksKV:
    """Read side of the ``ReadKV`` protocol over an open database, plus atomic commits of a stage."""

    def __init__(self, path: Path, *, cache_mb: int = 32, row_cache_mb: int = 0, write_buffer_mb: int = 32,
                 sync: bool = False, read_only: bool = False) -> None:
        """``row_cache_mb``: a cache of the values point reads found (0: none), which spares a repeated
        ``get_many`` the index and block searches."""
        cache = Cache(cache_mb << 20)
        table = BlockBasedOptions()
        table.set_block_cache(cache)
        table.set_bloom_filter(10, False)
        cf_options = Options(raw_mode=True)
        cf_options.set_block_based_table_factory(table)
        cf_options.set_compression_type(DBCompressionType.lz4())
        cf_options.set_write_buffer_size(min(16, write_buffer_mb) << 20)
        cf_options.set_max_write_buffer_number(2)
        # a bloom filter over each memtable's keys: most point reads of the apply path (a new segment's
        # id, an index entry not there) miss, and skip the memtable search
        cf_options.set_memtable_whole_key_filtering(True)
        cf_options.set_memtable_prefix_bloom_ratio(0.1)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        options.set_db_write_buffer_size(write_buffer_mb << 20)
        options.set_block_based_table_factory(table)
        if row_cache_mb:
            options.set_row_cache(Cache(row_cache_mb << 20))
        self.db = Rdict(str(path), options=options, column_families={cf: cf_options for cf in K.COLUMN_FAMILIES},
                        access_type=AccessType.read_only() if read_only else AccessType.read_write())
        self.cfs = {cf: self.db.get_column_family(cf) for cf in K.COLUMN_FAMILIES}
        self.handles = {cf: self.db.get_column_family_handle(cf) for cf in K.COLUMN_FAMILIES}
        self.write_options = WriteOptions()
        self.write_options.sync = sync
        # one iterator per (thread, column family) for floor/ceiling, dropped at every commit so that a
        # reused iterator never shows a state older than the last commit
        self._iterators: dict[tuple[int, str], object] = {}

    def close(self) -> None:
        """Close the database; it is only released once no column family object refers to it."""
        self._iterators = {}
        self.cfs.clear()
        self.handles.clear()
        self.db.close()

    def flush(self) -> None:
        """Sync the WAL and write every column family's memtable to table files."""
        self.db.flush_wal(True)
        for cf in self.cfs.values():
            cf.flush()

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self.cfs[cf].get(key)

    def get_many(self, cf: str, keys: list[bytes]) -> list[bytes | None]:
        """``get`` of every key in one call (a multi-get, which runs without the GIL)."""
        values: Any = self.cfs[cf].get(keys)  # type: ignore[arg-type]  # the stub omits list[bytes]
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

    def _iterator(self, cf: str):
        slot = (threading.get_ident(), cf)
        iterators = self._iterators
        it = iterators.get(slot)
        if it is None:
            it = iterators[slot] = self.cfs[cf].iter()
        return it

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
        return None

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        it = self._iterator(cf)
        it.seek(max(key, prefix))
        if it.valid():
            k = it.key()
            if k.startswith(prefix):
                return k, it.value()
        return None

    def commit(self, stage: StagedKV) -> None:
        """Write everything staged as one atomic batch (range deletions first, they came first)."""
        batch = WriteBatch(raw_mode=True)
        for cf, prefixes in stage.deleted_prefixes.items():
            for prefix in prefixes:
                batch.delete_range(prefix, K.prefix_end(prefix), self.handles[cf])
        for cf, table in stage.pending.items():
            handle = self.handles[cf]
            for key, value in table.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        if not batch.is_empty():
            self.db.write(batch, self.write_options)
            self._iterators = {}
