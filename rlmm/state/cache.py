"""A read-through cache of small, hot column families for the query side of the view.

It holds rows of the store as it was after a given number of changes (``RocksKV.changes``) and answers from them
only while the store has had no other: from a write's start until the writer's ``committed`` brings the rows up
to date, reads go to the store. Insertions by readers and refreshes by the writer take one lock, so a reader
that fetched a value before a change can never put that stale value into the cache after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from rlmm.state.kv import Item, ReadKV, StagedKV


class CachedReadKV:
    def __init__(self, base: ReadKV, cfs: tuple[str, ...], changes: Callable[[], int], limit: int = 50_000) -> None:
        """``changes``: the base's count of changes begun or finished (``RocksKV.changes``)."""
        self.base = base
        self.limit = limit
        self._tables: dict[str, dict[bytes, bytes | None]] = {cf: {} for cf in cfs}
        self._lock = threading.Lock()
        self._changes = changes
        self._of = changes()  # the count the rows are of

    def get(self, cf: str, key: bytes) -> bytes | None:
        table = self._tables.get(cf)
        if table is None:
            return self.base.get(cf, key)
        of = self._of
        current = self._changes() == of
        if current:
            try:
                return table[key]
            except KeyError:
                pass
        value = self.base.get(cf, key)
        with self._lock:
            if current and self._of == of and self._changes() == of:
                if len(table) >= self.limit:
                    table.clear()
                table[key] = value
        return value

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        return self.base.iter_from(cf, key, prefix)

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        return self.base.iter_down_from(cf, key, prefix)

    def floor(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        return self.base.floor(cf, key, prefix)

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        return self.base.ceiling(cf, key, prefix)

    def committed(self, stage: StagedKV) -> None:
        """Bring the cache up to date with a stage the base has just committed (its only change since the last)."""
        with self._lock:
            for cf, table in self._tables.items():
                if stage.deleted_prefixes.get(cf):
                    table.clear()
                    continue
                for key, value in stage.pending.get(cf, {}).items():
                    if key in table:
                        table[key] = value
            self._of = self._changes()

    def clear(self) -> None:
        with self._lock:
            for table in self._tables.values():
                table.clear()
            self._of = self._changes()
