"""A read-through cache of small, hot column families for the query side of the view.

The view's writer declines it while the store changes (``changing``) and refreshes it from the committed stage
(``committed``): in between, reads go to the store. Insertions by readers and refreshes by the writer take one
lock and a generation number (odd while declined), so a reader that fetched a value before a commit can never
put that stale value into the cache after the commit refreshed it.
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
        generation = self._generation
        if not generation & 1:
            try:
                return table[key]
            except KeyError:
                pass
        value = self.base.get(cf, key)
        with self._lock:
            if generation == self._generation and not generation & 1:
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

    def changing(self) -> None:
        """The store is about to change: reads go to it until ``committed`` or ``clear``."""
        with self._lock:
            self._generation |= 1

    def committed(self, stage: StagedKV) -> None:
        """Bring the cache up to date with a stage the base has just committed."""
        with self._lock:
            for cf, table in self._tables.items():
                if stage.deleted_prefixes.get(cf):
                    table.clear()
                    continue
                for key, value in stage.pending.get(cf, {}).items():
                    if key in table:
                        table[key] = value
            self._generation = (self._generation | 1) + 1

    def clear(self) -> None:
        with self._lock:
            for table in self._tables.values():
                table.clear()
            self._generation = (self._generation | 1) + 1
