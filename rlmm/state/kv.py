"""Ordered key-value access that the state machine and the queries are written against.

``OrderedKV`` is what a backend provides (RocksDB in the view, ``MemoryKV`` in pure tests and
folds). ``StagedKV`` stages one batch of writes over a backend and reads through them, so a batch of
events sees its own writes and reaches the backend as one atomic write at ``commit``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from sortedcontainers import SortedDict

from rlmm.state.keys import prefix_end

Item = tuple[bytes, bytes]


class ReadKV(Protocol):
    def get(self, cf: str, key: bytes) -> bytes | None: ...

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        """Items with ``key' >= key`` that start with ``prefix``, ascending."""
        ...

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        """Items with ``key' <= key`` that start with ``prefix``, descending."""
        ...


class WriteKV(ReadKV, Protocol):
    def put(self, cf: str, key: bytes, value: bytes) -> None: ...

    def delete(self, cf: str, key: bytes) -> None: ...

    def delete_prefix(self, cf: str, prefix: bytes) -> None: ...


def floor(kv: ReadKV, cf: str, key: bytes, prefix: bytes) -> Item | None:
    return next(kv.iter_down_from(cf, key, prefix), None)


def ceiling(kv: ReadKV, cf: str, key: bytes, prefix: bytes) -> Item | None:
    return next(kv.iter_from(cf, key, prefix), None)


def last(kv: ReadKV, cf: str, prefix: bytes) -> Item | None:
    return next(kv.iter_down_from(cf, prefix_end(prefix), prefix), None)


def scan(kv: ReadKV, cf: str, prefix: bytes) -> Iterator[Item]:
    return kv.iter_from(cf, prefix, prefix)


class MemoryKV:
    """An in-memory ordered store (one SortedDict per column family)."""

    def __init__(self) -> None:
        self.tables: dict[str, SortedDict] = {}

    def _table(self, cf: str) -> SortedDict:
        table = self.tables.get(cf)
        if table is None:
            table = self.tables[cf] = SortedDict()
        return table

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self._table(cf).get(key)

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        table = self._table(cf)
        for k in table.irange(minimum=max(key, prefix)):
            if not k.startswith(prefix):
                return
            yield k, table[k]

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        table = self._table(cf)
        for k in _irange_down(table, key, prefix):
            yield k, table[k]

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self._table(cf)[key] = value

    def delete(self, cf: str, key: bytes) -> None:
        self._table(cf).pop(key, None)

    def delete_prefix(self, cf: str, prefix: bytes) -> None:
        table = self._table(cf)
        for k in list(table.irange(minimum=prefix, maximum=prefix_end(prefix), inclusive=(True, False))):
            del table[k]


_TOMBSTONE = None


class StagedKV:
    """Pending writes over a read-only base; reads see base + pending."""

    def __init__(self, base: ReadKV) -> None:
        self.base = base
        self.pending: dict[str, SortedDict] = {}  # key -> value, or None for a deletion
        self.deleted_prefixes: dict[str, list[bytes]] = {}

    def _pending(self, cf: str) -> SortedDict:
        table = self.pending.get(cf)
        if table is None:
            table = self.pending[cf] = SortedDict()
        return table

    def _hidden_in_base(self, cf: str, key: bytes) -> bool:
        prefixes = self.deleted_prefixes.get(cf)
        return bool(prefixes) and any(key.startswith(p) for p in prefixes)

    def get(self, cf: str, key: bytes) -> bytes | None:
        table = self.pending.get(cf)
        if table is not None and key in table:
            return table[key]
        if self._hidden_in_base(cf, key):
            return None
        return self.base.get(cf, key)

    def _base_visible(self, cf: str, items: Iterator[Item]) -> Iterator[Item]:
        table = self.pending.get(cf)
        for k, v in items:
            if (table is None or k not in table) and not self._hidden_in_base(cf, k):
                yield k, v

    def _pending_items(self, keys) -> Iterator[Item]:
        return ((k, v) for k, v in keys if v is not _TOMBSTONE)

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        table = self.pending.get(cf)
        base = self._base_visible(cf, self.base.iter_from(cf, key, prefix))
        if not table:
            yield from base
            return
        start = max(key, prefix)
        staged = self._pending_items(
            (k, table[k]) for k in table.irange(minimum=start, maximum=prefix_end(prefix), inclusive=(True, False))
        )
        yield from _merge(base, staged, descending=False)

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        table = self.pending.get(cf)
        base = self._base_visible(cf, self.base.iter_down_from(cf, key, prefix))
        if not table:
            yield from base
            return
        staged = self._pending_items((k, table[k]) for k in _irange_down(table, key, prefix))
        yield from _merge(base, staged, descending=True)

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self._pending(cf)[key] = value

    def delete(self, cf: str, key: bytes) -> None:
        self._pending(cf)[key] = _TOMBSTONE

    def delete_prefix(self, cf: str, prefix: bytes) -> None:
        table = self._pending(cf)
        for k in list(table.irange(minimum=prefix, maximum=prefix_end(prefix), inclusive=(True, False))):
            del table[k]
        self.deleted_prefixes.setdefault(cf, []).append(prefix)

    def is_empty(self) -> bool:
        return not any(self.pending.values()) and not any(self.deleted_prefixes.values())


def _irange_down(table: SortedDict, key: bytes, prefix: bytes) -> Iterator[bytes]:
    end = prefix_end(prefix)
    if key < end:
        return table.irange(minimum=prefix, maximum=key, reverse=True)
    return table.irange(minimum=prefix, maximum=end, inclusive=(True, False), reverse=True)


def _merge(a: Iterator[Item], b: Iterator[Item], *, descending: bool) -> Iterator[Item]:
    """Merge two sorted item streams with distinct keys."""
    x = next(a, None)
    y = next(b, None)
    while x is not None and y is not None:
        if (x[0] > y[0]) == descending:
            yield x
            x = next(a, None)
        else:
            yield y
            y = next(b, None)
    if x is not None:
        yield x
        yield from a
    if y is not None:
        yield y
        yield from b
