"""A read-through cache of small, hot column families for the query side of the view.

The view's writer refreshes it from each committed stage (``committed``). Insertions by readers and
refreshes by the writer take one lock and a generation number, so a reader that fetched a value
before a commit can never put that stale value into the cache after the commit refreshed it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from rlmm.state.kv import Item, ReadKV, StagedKV


class CachedReadKV:
    def __init__(self, base: ReadKV, cfs: tuple[str, ...], limit: int = 50_000) -> None:
        self.base = base
        self.limit = limit
        self._tables: dict[str, dict[bytes, bytes | None]] = {cf: {} for cf in cfs}
        self._lock = threading.Lock()
        self._generation = 0

    def get(self, cf: str, key: bytes) -> bytes | None:
        table = self._tables.get(cf)
        if table is None:
            return self.base.get(cf, key)
        try:
            return table[key]
        except KeyError:
            pass
        generation = self._generation
        value = self.base.get(cf, key)
        with self._lock:
            if generation == self._generation:
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
        """Bring the cache up to date with a stage the base has just committed."""
        with self._lock:
            self._generation += 1
            for cf, table in self._tables.items():
                if stage.deleted_prefixes.get(cf):
                    table.clear()
                    continue
                for key, value in stage.pending.get(cf, {}).items():
                    if key in table:
                        table[key] = value

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            for table in self._tables.values():
                table.clear()
