"""Ordered key-value access that the state machine and the queries are written against.

``OrderedKV`` is what a backend provides (RocksDB in the view, ``MemoryKV`` in pure tests and
folds). ``StagedKV`` stages one batch of writes over a backend and reads through them, so a batch of
events sees its own writes and reaches the backend as one atomic write at ``commit``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterator
from typing import Final, Protocol, final

from rlmm.state import keys as K
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

    def floor(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        """The greatest item with ``key' <= key`` that starts with ``prefix`` (one seek)."""
        ...

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        """The least item with ``key' >= key`` that starts with ``prefix`` (one seek)."""
        ...


class WriteKV(ReadKV, Protocol):
    def put(self, cf: str, key: bytes, value: bytes) -> None: ...

    def put_new(self, cf: str, key: bytes, value: bytes) -> None:
        """``put`` of a key the store does not hold (lets a stage drop a later deletion of it)."""
        ...

    def delete(self, cf: str, key: bytes) -> None: ...

    def delete_prefix(self, cf: str, prefix: bytes) -> None: ...


def last(kv: ReadKV, cf: str, prefix: bytes) -> Item | None:
    return kv.floor(cf, prefix_end(prefix), prefix)


def scan(kv: ReadKV, cf: str, prefix: bytes) -> Iterator[Item]:
    return kv.iter_from(cf, prefix, prefix)


class MemoryKV:
    """An in-memory ordered store: a dict per column family, with a sorted list of its keys built on
    the first ordered read and kept up to date from then on. Folds mostly put and get, and hold one
    partition's keys at a time: thousands, for which list insertion and bisection (in C) beat a
    balanced structure; a key inserted or deleted in the middle moves the keys after it."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, bytes]] = {}
        self._order: dict[str, list[bytes]] = {}

    def _table(self, cf: str) -> dict[bytes, bytes]:
        table = self.tables.get(cf)
        if table is None:
            table = self.tables[cf] = {}
        return table

    def _sorted(self, cf: str) -> list[bytes]:
        order = self._order.get(cf)
        if order is None:
            order = self._order[cf] = sorted(self._table(cf))
        return order

    def get(self, cf: str, key: bytes) -> bytes | None:
        table = self.tables.get(cf)
        return None if table is None else table.get(key)

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        table = self._table(cf)
        for k in _keys_up(self._sorted(cf), key, prefix):
            yield k, table[k]

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        table = self._table(cf)
        for k in _keys_down(self._sorted(cf), key, prefix):
            yield k, table[k]

    def floor(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        k = next(_keys_down(self._sorted(cf), key, prefix), None)
        return None if k is None else (k, self.tables[cf][k])

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        k = next(_keys_up(self._sorted(cf), key, prefix), None)
        return None if k is None else (k, self.tables[cf][k])

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        table = self._table(cf)
        if key not in table:
            order = self._order.get(cf)
            if order is not None:
                insort(order, key)
        table[key] = value

    def put_new(self, cf: str, key: bytes, value: bytes) -> None:
        self.put(cf, key, value)

    def delete(self, cf: str, key: bytes) -> None:
        table = self._table(cf)
        if table.pop(key, None) is not None:
            order = self._order.get(cf)
            if order is not None:
                del order[bisect_left(order, key)]

    def delete_prefix(self, cf: str, prefix: bytes) -> None:
        table = self._table(cf)
        order = self._sorted(cf)
        start = bisect_left(order, prefix)
        end = start
        while end < len(order) and order[end].startswith(prefix):
            del table[order[end]]
            end += 1
        del order[start:end]


_NOT_STAGED: Final = b"not staged"  # by identity: what a stage's table gives for a key it does not hold


@final
class _Staged:
    """One column family's pending writes, found with one lookup by its name."""

    __slots__ = ("rows", "fresh", "order")

    def __init__(self) -> None:
        self.rows: dict[bytes, bytes | None] = {}  # None marks a deletion
        self.fresh: set[bytes] = set()  # pending puts of keys the base does not hold
        self.order: list[bytes] | None = None  # the rows' keys in order, from the first ordered read on


class StagedKV:
    """Pending writes over a read-only base; reads see base + pending.

    Pending writes of a column family live in a dict; a sorted list of its keys is built only once
    an ordered read of that column family happens, and is kept up to date from then on (a batch's
    pending keys are few enough for list insertion, and bisection runs in C).
    """

    def __init__(self, base: ReadKV) -> None:
        self.base = base
        self.pending: dict[str, dict[bytes, bytes | None]] = {}  # each column family's ``_Staged.rows``
        self.deleted_prefixes: dict[str, list[bytes]] = {}
        self._staged: dict[str, _Staged] = {}

    def _hidden_in_base(self, cf: str, key: bytes) -> bool:
        if not self.deleted_prefixes:
            return False
        prefixes = self.deleted_prefixes.get(cf)
        return prefixes is not None and any(key.startswith(p) for p in prefixes)

    def get(self, cf: str, key: bytes) -> bytes | None:
        table = self.pending.get(cf)
        if table is not None:
            value = table.get(key, _NOT_STAGED)
            if value is not _NOT_STAGED:
                return value
        if self._hidden_in_base(cf, key):
            return None
        return self.base.get(cf, key)

    def _sorted(self, cf: str) -> list[bytes] | None:
        staged = self._staged.get(cf)
        if staged is None or not staged.rows:
            return None
        if staged.order is None:
            staged.order = sorted(staged.rows)
        return staged.order

    def _base_visible(self, cf: str, items: Iterator[Item]) -> Iterator[Item]:
        table = self.pending.get(cf)
        for k, v in items:
            if (table is None or k not in table) and not self._hidden_in_base(cf, k):
                yield k, v

    def iter_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        base = self._base_visible(cf, self.base.iter_from(cf, key, prefix))
        order = self._sorted(cf)
        if order is None:
            yield from base
            return
        table = self.pending[cf]
        yield from _merge(base, _live(table, _keys_up(order, key, prefix)), descending=False)

    def iter_down_from(self, cf: str, key: bytes, prefix: bytes) -> Iterator[Item]:
        base = self._base_visible(cf, self.base.iter_down_from(cf, key, prefix))
        order = self._sorted(cf)
        if order is None:
            yield from base
            return
        table = self.pending[cf]
        yield from _merge(base, _live(table, _keys_down(order, key, prefix)), descending=True)

    def _through_stage(self, cf: str, found: Item | None) -> tuple[bool, Item | None]:
        """A base item as the stage sees it: (False, itself or its pending value), or (True, None) if the
        stage hides it."""
        if found is None:
            return False, None
        table = self.pending.get(cf)
        if table is not None and found[0] in table:
            value = table[found[0]]
            return (True, None) if value is None else (False, (found[0], value))
        return (True, None) if self._hidden_in_base(cf, found[0]) else (False, found)

    # floor and ceiling combine one seek in the base with one bisection in the pending keys; only a
    # base candidate that the stage hides sends them to the merged iteration.

    def floor(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        hidden, found = self._through_stage(cf, self.base.floor(cf, key, prefix))
        if hidden:
            return next(self.iter_down_from(cf, key, prefix), None)
        order = self._sorted(cf)
        if order is None:
            return found
        table = self.pending[cf]
        nearest = next(_live(table, _keys_down(order, key, prefix)), None)
        return nearest if nearest is not None and (found is None or nearest[0] > found[0]) else found

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> Item | None:
        hidden, found = self._through_stage(cf, self.base.ceiling(cf, key, prefix))
        if hidden:
            return next(self.iter_from(cf, key, prefix), None)
        order = self._sorted(cf)
        if order is None:
            return found
        table = self.pending[cf]
        nearest = next(_live(table, _keys_up(order, key, prefix)), None)
        return nearest if nearest is not None and (found is None or nearest[0] < found[0]) else found

    def _set(self, cf: str, key: bytes, value: bytes | None, new: bool = False) -> None:
        """``new``: the key is absent from the base (``put_new``)."""
        staged = self._staged.get(cf)
        if staged is None:
            staged = self._staged[cf] = _Staged()
            self.pending[cf] = staged.rows
        rows = staged.rows
        held = len(rows)
        rows[key] = value
        if len(rows) != held:  # a key the stage did not hold (found by the one dict operation)
            if new:  # untouched by this stage and absent: absent from the base
                staged.fresh.add(key)
            if staged.order is not None:
                insort(staged.order, key)

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self._set(cf, key, value)

    def put_new(self, cf: str, key: bytes, value: bytes) -> None:
        self._set(cf, key, value, True)

    def delete(self, cf: str, key: bytes) -> None:
        staged = self._staged.get(cf)
        if staged is not None and key in staged.fresh:  # never reached the base: forgotten, not a tombstone
            staged.fresh.discard(key)
            del staged.rows[key]
            if staged.order is not None:
                del staged.order[bisect_left(staged.order, key)]
        else:
            self._set(cf, key, None)

    def delete_prefix(self, cf: str, prefix: bytes) -> None:
        staged = self._staged.get(cf)
        if staged is not None and staged.rows:
            for k in [k for k in staged.rows if k.startswith(prefix)]:
                del staged.rows[k]
                staged.fresh.discard(k)
            staged.order = None
        self.deleted_prefixes.setdefault(cf, []).append(prefix)


BATCH_ROWS: Final = "batch"  # what ``RowCounts`` attributes a batch's own rows to
# column families whose rows are written once per batch however many events changed them
_BOOKKEEPING: Final = frozenset((K.PARTITIONS, K.EPOCHS, K.METADATA_OFFSETS, K.META))


class CountingStagedKV(StagedKV):
    """A stage that notes, for each row it will write, the kind of event that last changed it (``kind``, which its
    writer sets), for ``RowCounts``. A separate class, so that the stages of a view that counts nothing pay
    nothing for it."""

    def __init__(self, base: ReadKV) -> None:
        super().__init__(base)
        self.kind = BATCH_ROWS
        self.kinds: dict[tuple[str, bytes], str] = {}
        self.range_deletes: list[tuple[str, str]] = []  # (column family, kind)

    def _set(self, cf: str, key: bytes, value: bytes | None, new: bool = False) -> None:
        self.kinds[(cf, key)] = self.kind
        super()._set(cf, key, value, new)

    def delete_prefix(self, cf: str, prefix: bytes) -> None:
        self.range_deletes.append((cf, self.kind))
        super().delete_prefix(cf, prefix)


class RowCounts:
    """Rows the batches of a view wrote (puts, deletions, range deletions) and their bytes (keys and values), by
    column family and by the kind of event that last changed each row before its batch was written. The rows of
    the bookkeeping column families (a partition's, an epoch's, a consumed offset, a counter: written once per batch
    however many events changed them) count as the batch's own (``BATCH_ROWS``)."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()  # by kind
        self.rows: Counter[tuple[str, str, str]] = Counter()  # (kind, column family, operation)
        self.bytes: Counter[tuple[str, str]] = Counter()  # (kind, column family)

    def add(self, stage: CountingStagedKV) -> None:
        """Count the rows of a stage about to be written."""
        for cf, kind in stage.range_deletes:
            self.rows[(BATCH_ROWS if cf in _BOOKKEEPING else kind, cf, "range_delete")] += 1
        for cf, table in stage.pending.items():
            bookkeeping = cf in _BOOKKEEPING
            for key, value in table.items():
                kind = BATCH_ROWS if bookkeeping else stage.kinds.get((cf, key), BATCH_ROWS)
                self.rows[(kind, cf, "put" if value is not None else "delete")] += 1
                self.bytes[(kind, cf)] += len(key) + (0 if value is None else len(value))

    def per_event(self) -> dict:
        """Rows and bytes per event applied: in all, by column family, by operation, and by kind (per event of that
        kind; the batch's own rows per event of any kind)."""
        events = sum(self.events.values()) or 1
        by_kind: dict[str, dict] = {}
        for kind in sorted({k for k, _, _ in self.rows} | set(self.events)):
            count = events if kind == BATCH_ROWS else self.events[kind] or 1
            by_kind[kind] = {
                "events": self.events[kind] if kind != BATCH_ROWS else events,
                "rows": _ratio(sum(n for (k, _, _), n in self.rows.items() if k == kind), count),
                "by_column_family": _per(self.rows, count, kind),
            }
        return {
            "events": events,
            "rows": _ratio(sum(self.rows.values()), events),
            "bytes": _ratio(sum(self.bytes.values()), events),
            "by_column_family": _per(self.rows, events),
            "bytes_by_column_family": _per_cf_bytes(self.bytes, events),
            "by_operation": {
                op: _ratio(sum(n for (_, _, o), n in self.rows.items() if o == op), events)
                for op in ("put", "delete", "range_delete")
            },
            "by_kind": by_kind,
        }


def _ratio(count: int, events: int) -> float:
    return round(count / events, 4)


def _per(rows: Counter[tuple[str, str, str]], events: int, kind: str | None = None) -> dict[str, float]:
    by_cf: Counter[str] = Counter()
    for (k, cf, _), n in rows.items():
        if kind is None or k == kind:
            by_cf[cf] += n
    return {cf: _ratio(n, events) for cf, n in sorted(by_cf.items())}


def _per_cf_bytes(counts: Counter[tuple[str, str]], events: int) -> dict[str, float]:
    by_cf: Counter[str] = Counter()
    for (_, cf), n in counts.items():
        by_cf[cf] += n
    return {cf: round(n / events, 1) for cf, n in sorted(by_cf.items())}


def _keys_up(order: list[bytes], key: bytes, prefix: bytes) -> Iterator[bytes]:
    """Keys of a sorted list >= ``key`` that start with ``prefix``, ascending."""
    i = bisect_left(order, max(key, prefix))
    while i < len(order) and order[i].startswith(prefix):
        yield order[i]
        i += 1


def _keys_down(order: list[bytes], key: bytes, prefix: bytes) -> Iterator[bytes]:
    """Keys of a sorted list <= ``key`` that start with ``prefix``, descending."""
    end = prefix_end(prefix) if prefix else None
    i = (bisect_left(order, end) if end is not None and key >= end else bisect_right(order, key)) - 1
    while i >= 0 and order[i].startswith(prefix):
        yield order[i]
        i -= 1


def _live(table: dict[bytes, bytes | None], keys: Iterator[bytes]) -> Iterator[Item]:
    """The pending items of ``keys`` that are not deletions."""
    for k in keys:
        value = table[k]
        if value is not None:
            yield k, value


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
