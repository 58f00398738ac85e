"""The start offsets of epochs' offset indexes, in memory, for lookups, and the entries single lookups read.

A lookup's floor key is then found with a bisection instead of a RocksDB seek, and the entries of a
whole batch are read with one multi-get; a single lookup reads its entry with a point get and keeps it
for the next lookup of that segment. Each epoch's sorted start offsets are read through from the
``OFFSETS`` column family on first use (by a single lookup only for an epoch of at most ``SINGLE_LOAD_KEYS``
entries: it seeks in a larger one, which a batch loads) and kept current by the view's writer, which reports every
commit that changes the offset index twice: before writing it (``committing``) and after
(``committed``, which also drops the kept entries it changed). The generation number is odd in between,
so a reader that finds it unchanged after its reads knows that its start offsets and the entries it read
belong to one committed state; an entry read from the store is kept only if no commit started since.

Memory is bounded by ``limit`` weights of 8 bytes: one per start offset and ``EPOCH_WEIGHT`` per
epoch held (its array, key and dict slot). The epochs loaded first are dropped first; an epoch that
weighs more than the limit is never held and its lookups use seeks. The kept entries take at most
``entry_bytes`` (keys, values and ``ENTRY_OVERHEAD`` each), the first kept dropped first.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from typing import Final, Protocol

from rlmm.state import keys as K
from rlmm.state.kv import ReadKV, StagedKV

_MISSING: Final = object()
EPOCH_WEIGHT = 19  # the ~150 bytes of an epoch's array, key and dict slot, in start offsets
# the most start offsets a single lookup reads to load an epoch (~5 ms, which every other call waits for, the GIL
# held; ~2 weeks of 1 GB segments at 10 MB/s): it seeks in a larger epoch until a batch, which spreads the load
# over its lookups, loads it
SINGLE_LOAD_KEYS = 16_384
ENTRY_OVERHEAD = 120  # bytes of a kept entry besides its key and value: two bytes objects and a dict slot


class MultiGetKV(ReadKV, Protocol):
    """A store that reads many keys in one call (RocksDB's multi-get, in the view)."""

    def get_many(self, cf: str, keys: list[bytes]) -> list[bytes | None]: ...

    def keys_with_prefix(self, cf: str, prefix: bytes, limit: int) -> list[bytes] | None:
        """The first ``limit`` keys that start with ``prefix``; None when they changed while read."""
        ...


class OffsetCache:
    def __init__(self, base: MultiGetKV, limit: int, entry_bytes: int) -> None:
        self.base = base
        self.limit = limit
        self.entry_bytes = entry_bytes
        # offset-index key -> entry, for single lookups; and epoch prefix -> sorted start offsets. Both are dropped
        # oldest first: an OrderedDict pops its first item at once, where a dict's first key is found by
        # skipping the slots of the keys dropped before it
        self._entries: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._entries_size = 0
        self._starts: OrderedDict[bytes, array] = OrderedDict()
        self._weight = 0
        self._oversized: set[bytes] = set()  # epoch prefixes weighing more than ``limit``
        self._large: set[bytes] = set()  # epoch prefixes with more than SINGLE_LOAD_KEYS start offsets
        self._lock = threading.Lock()
        self._generation = 0  # odd while a commit that changes the offset index is being written

    def floor_entries(self, lookups: Sequence[tuple[bytes, int]]) -> list[bytes | None] | None:
        """The raw offset index entry at the floor key of each (epoch prefix, offset), None where the
        epoch has no entry at or below the offset; None for the whole batch when a commit overlapped
        the reads or an epoch is too large to hold (the caller then seeks)."""
        generation = self._generation
        keys = self._floor_keys(lookups, generation)
        if keys is None:
            return None
        values = self.base.get_many(K.OFFSETS, keys)
        return values if self._generation == generation else None

    def floor_entry(self, prefix: bytes, offset: int) -> tuple[bytes, bytes | None] | None:
        """``floor_entries`` of one lookup, with its floor key (``_floor_keys``), read with a point get (a multi-get of
        one key costs twice as much): None when the cache cannot answer."""
        generation = self._generation
        starts = self._held(prefix, generation, SINGLE_LOAD_KEYS)
        if starts is None:
            return None
        try:
            key = K.floor_key(prefix, starts, offset)
        except IndexError:  # as in ``_floor_keys``
            return None
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            value = self.base.get(K.OFFSETS, key)
            self._keep(key, value, generation)
        return (key, value) if self._generation == generation else None  # type: ignore[return-value]

    def held_starts(self, prefix: bytes) -> array | None:
        """The start offsets held for the epoch of ``prefix`` (kept current in place by ``committed``)."""
        return self._starts.get(prefix)

    def _keep(self, key: bytes, value: bytes | None, generation: int) -> None:
        size = _entry_size(key, value)
        if size > self.entry_bytes:
            return
        with self._lock:
            if generation != self._generation or key in self._entries:
                return
            entries = self._entries
            while entries and self._entries_size + size > self.entry_bytes:
                self._entries_size -= _entry_size(*entries.popitem(last=False))
            entries[key] = value
            self._entries_size += size

    def _floor_keys(
        self, lookups: Sequence[tuple[bytes, int]], generation: int, load_at_most: int | None = None
    ) -> list[bytes] | None:
        """The offset-index key at or below each lookup (a bare prefix, which is no key, where there is none);
        None when the cache cannot say. An epoch not held is loaded if it has at most ``load_at_most`` entries
        (None: any that fits in ``limit``)."""
        keys: list[bytes] = []
        append, floor_key = keys.append, K.floor_key
        try:
            for prefix, offset in lookups:
                starts = self._held(prefix, generation, load_at_most)
                if starts is None:
                    return None
                append(floor_key(prefix, starts, offset))
        except IndexError:  # a commit shrank an epoch between the reference's bisection and its read
            return None
        return keys

    def _held(self, prefix: bytes, generation: int, load_at_most: int | None) -> array | None:
        """The start offsets of the epoch of ``prefix``, loaded if it is not held (see ``_floor_keys``); None when the
        cache cannot say."""
        if generation & 1:
            return None
        starts = self._starts.get(prefix)
        return self._load(prefix, generation, load_at_most) if starts is None else starts

    def _load(self, prefix: bytes, generation: int, at_most: int | None) -> array | None:
        """Read an epoch's start offsets; kept if no commit changed the offset index meanwhile. None when it has
        more than ``at_most`` (None: no bound but ``limit``)."""
        if prefix in self._oversized or (at_most is not None and prefix in self._large):
            return None
        fitting = max(self.limit - EPOCH_WEIGHT + 1, 0)
        keys = self.base.keys_with_prefix(K.OFFSETS, prefix, fitting if at_most is None else min(fitting, at_most + 1))
        if keys is None:
            return None
        if at_most is not None and len(keys) > at_most:
            with self._lock:
                if generation == self._generation:
                    self._large.add(prefix)
            return None
        starts = array("q", map(K.read_offset, keys, repeat(K.EPOCH_PREFIX_LEN)))
        with self._lock:
            if _weight(starts) > self.limit:
                if generation == self._generation:
                    self._oversized.add(prefix)
                return None
            if generation != self._generation:
                return starts
            if prefix in self._starts:  # another reader loaded it meanwhile
                return self._starts[prefix]
            self._make_room(_weight(starts))
            self._starts[prefix] = starts
            self._weight += _weight(starts)
        return starts

    def _make_room(self, needed: int) -> None:
        while self._starts and self._weight + needed > self.limit:
            self._weight -= _weight(self._starts.popitem(last=False)[1])

    def committing(self, stage: StagedKV) -> None:
        """The base is about to write ``stage``."""
        if _changes_offsets(stage):
            with self._lock:
                self._generation += 1

    def changing(self) -> None:
        """The base is about to change as no stage says (a secondary catching up): until ``clear``, nothing read
        is kept and nothing held answers, so that no lookup bisects start offsets of before with entries of after."""
        with self._lock:
            self._generation |= 1

    def committed(self, stage: StagedKV) -> None:
        """The base has written ``stage``: apply its changes to the held epochs."""
        if not _changes_offsets(stage):
            return
        with self._lock:
            for prefix in stage.deleted_prefixes.get(K.OFFSETS, ()):
                self._forget(prefix)
            if self._starts or self._entries:  # nothing to update while nothing is held (a view that only applies)
                entries = self._entries
                for key, value in stage.pending.get(K.OFFSETS, {}).items():
                    starts = self._starts.get(key[: K.EPOCH_PREFIX_LEN])
                    if starts is not None:
                        self._weight += _update(starts, K.read_offset(key, K.EPOCH_PREFIX_LEN), value is not None)
                    if key in entries:
                        self._drop_entry(key)
            self._make_room(0)
            self._generation += 1

    def _forget(self, prefix: bytes) -> None:
        """Drop the epochs that a range deletion of ``prefix`` touches."""
        for epoch in [epoch for epoch in self._starts if _overlap(epoch, prefix)]:
            self._weight -= _weight(self._starts.pop(epoch))
        self._oversized = {epoch for epoch in self._oversized if not _overlap(epoch, prefix)}
        self._large = {epoch for epoch in self._large if not _overlap(epoch, prefix)}
        for key in [key for key in self._entries if _overlap(key, prefix)]:
            self._drop_entry(key)

    def _drop_entry(self, key: bytes) -> None:
        """Forget a kept entry and its bytes (under the lock)."""
        self._entries_size -= _entry_size(key, self._entries.pop(key))

    def clear(self) -> None:
        with self._lock:
            self._starts.clear()
            self._oversized.clear()
            self._large.clear()
            self._weight = 0
            self._entries.clear()
            self._entries_size = 0
            self._generation = (self._generation + 2) & ~1


def _changes_offsets(stage: StagedKV) -> bool:
    return bool(stage.pending.get(K.OFFSETS) or stage.deleted_prefixes.get(K.OFFSETS))


def _entry_size(key: bytes, value: bytes | None) -> int:
    return len(key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD


def _weight(starts: array) -> int:
    return len(starts) + EPOCH_WEIGHT


def _overlap(epoch: bytes, prefix: bytes) -> bool:
    return epoch.startswith(prefix) or prefix.startswith(epoch)


def _update(starts: array, start: int, present: bool) -> int:
    """Add or remove ``start``; how many entries that added (-1, 0 or 1)."""
    at = bisect_left(starts, start)
    found = at < len(starts) and starts[at] == start
    if present and not found:
        starts.insert(at, start)
        return 1
    if found and not present:
        del starts[at]
        return -1
    return 0
