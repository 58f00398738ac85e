"""The segments single lookups found, kept by the partition as the request named it, the epoch and the start
offset of the offset-index entry that answered: a lookup asked again (a fetcher reads a segment at many
offsets) costs three dictionary lookups and a bisection of the epoch's start offsets, where it otherwise
checks the request's partition, reads its row, finds the floor entry and reads it.

The start offsets are those the offset cache holds (``OffsetCache.held_starts``), which its ``committed``
keeps current. A partition's kept segments are dropped by every commit that changes its row or its offset
index, so that they are those of the state the start offsets are; a commit that range-deletes either drops
them all. Commits report to the memo as to the offset cache: ``committing`` before the write, ``committed``
after it; the generation is odd in between, and a lookup answers from the memo only if the generation was
even and unchanged over its reads, and keeps what it found only if no commit started since it began
reading the view (``generation`` before its reads).

Memory is bounded by ``limit`` bytes, counted as the values kept, the names, and fixed overheads; the
segments kept first are dropped first (a partition with its last one).
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections import OrderedDict
from typing import Final

from rlmm.state import keys as K
from rlmm.state.kv import StagedKV
from rlmm.state.offset_cache import OffsetCache

# bytes besides the values' and names' lengths: a kept segment's key and value tuples, ints, ordered-dict node,
# set entry and value header (380 measured with tracemalloc); a partition's object, set and dict slots; a name's
# tuple and dict slot; an epoch's prefix and dict slot
ENTRY_OVERHEAD: Final = 380
PARTITION_OVERHEAD: Final = 500
NAME_OVERHEAD: Final = 150
EPOCH_OVERHEAD: Final = 100
TPID_LEN: Final = K.EPOCH_PREFIX_LEN - 4

# a partition as a request names it: (topic id as sent, topic, partition)
Name = tuple[str, str, int]


class _Partition:
    __slots__ = ("identity", "tpid", "names", "prefixes", "kept", "size")

    def __init__(self, identity: bytes, tpid: bytes) -> None:
        self.identity = identity
        self.tpid = tpid
        self.names: list[Name] = []
        self.prefixes: dict[int, bytes] = {}  # epoch -> its key prefix in the offset index
        self.kept: set[tuple[int, int]] = set()  # (epoch, start offset) of the segments kept
        self.size = PARTITION_OVERHEAD


# (partition, epoch, start offset of the segment's entry) -> (the entry's epoch end, the segment's value)
_Entries = OrderedDict[tuple[_Partition, int, int], tuple[int, bytes]]


class LookupMemo:
    def __init__(self, offset_cache: OffsetCache, limit: int) -> None:
        self.offset_cache = offset_cache
        self.limit = limit
        self._by_name: dict[Name, _Partition] = {}
        self._by_identity: dict[bytes, _Partition] = {}
        self._by_tpid: dict[bytes, _Partition] = {}
        self._entries: _Entries = OrderedDict()  # oldest first
        self._size = 0
        self._lock = threading.Lock()
        self.generation = 0  # odd while a commit is being written

    def find(self, name: Name, epoch: int, offset: int) -> bytes | None:
        """The value of the segment that a lookup of ``offset`` in ``epoch`` of the partition ``name`` finds, if
        the memo knows it; None when it does not (the lookup then asks the view, which may find none)."""
        generation = self.generation
        partition = self._by_name.get(name)
        if partition is None:
            return None
        prefix = partition.prefixes.get(epoch)
        starts = None if prefix is None else self.offset_cache.held_starts(prefix)
        start = None if starts is None else _floor_start(starts, offset)
        found = None if start is None else self._entries.get((partition, epoch, start))
        if found is None or offset > found[0] or generation & 1 or generation != self.generation:
            return None
        return found[1]

    def keep(
        self,
        name: Name,
        identity: bytes,
        epoch_prefix: bytes,
        start: int,
        epoch_end: int,
        value: bytes,
        generation: int,
    ) -> None:
        """Keep the segment found at the offset-index entry ``start`` of the epoch of ``epoch_prefix``, in the
        partition ``name`` (the key of its row: ``identity``), as read from the view since the memo's
        ``generation`` was ``generation``."""
        epoch = K.read_epoch(epoch_prefix, TPID_LEN)
        with self._lock:
            if generation != self.generation or generation & 1:
                return
            partition = self._by_identity.get(identity)
            if partition is None:
                partition = self._by_identity[identity] = _Partition(identity, epoch_prefix[:TPID_LEN])
                self._by_tpid[partition.tpid] = partition
                self._size += partition.size
            if name not in self._by_name:
                partition.names.append(name)
                self._by_name[name] = partition
                self._grow(partition, _name_size(name))
            if epoch not in partition.prefixes:
                partition.prefixes[epoch] = epoch_prefix
                self._grow(partition, EPOCH_OVERHEAD)
            if (epoch, start) not in partition.kept:
                partition.kept.add((epoch, start))
                self._entries[(partition, epoch, start)] = (epoch_end, value)
                self._grow(partition, ENTRY_OVERHEAD + len(value))
            while self._size > self.limit and self._entries:
                self._drop_oldest()

    def _grow(self, partition: _Partition, size: int) -> None:
        partition.size += size
        self._size += size

    def _drop_oldest(self) -> None:
        """Forget the segment kept first, and its partition with its last segment (under the lock)."""
        (partition, epoch, start), (_, value) = self._entries.popitem(last=False)
        partition.kept.discard((epoch, start))
        self._grow(partition, -ENTRY_OVERHEAD - len(value))
        if not partition.kept:
            self._drop(partition)

    def _drop(self, partition: _Partition) -> None:
        """Forget a partition and the segments kept in it (under the lock)."""
        del self._by_identity[partition.identity]
        del self._by_tpid[partition.tpid]
        for name in partition.names:
            del self._by_name[name]
        for epoch, start in partition.kept:
            del self._entries[(partition, epoch, start)]
        self._size -= partition.size

    def committing(self, stage: StagedKV) -> None:
        """The view is about to write ``stage``."""
        if _changes_lookups(stage):
            with self._lock:
                self.generation += 1

    def committed(self, stage: StagedKV) -> None:
        """The view has written ``stage``: forget the partitions it changed."""
        if not _changes_lookups(stage):
            return
        with self._lock:
            if stage.deleted_prefixes.get(K.PARTITIONS) or stage.deleted_prefixes.get(K.OFFSETS):
                self._forget_all()
            elif self._by_identity:
                for identity in stage.pending.get(K.PARTITIONS, ()):
                    partition = self._by_identity.get(identity)
                    if partition is not None:
                        self._drop(partition)
                for key in stage.pending.get(K.OFFSETS, ()):
                    partition = self._by_tpid.get(key[:TPID_LEN])
                    if partition is not None:
                        self._drop(partition)
            self.generation += 1

    def changing(self) -> None:
        """The view is about to change as no stage says (a secondary catching up): until ``clear``, the memo
        neither answers nor keeps."""
        with self._lock:
            self.generation |= 1

    def clear(self) -> None:
        with self._lock:
            self._forget_all()
            self.generation = (self.generation + 2) & ~1

    def _forget_all(self) -> None:
        self._by_name.clear()
        self._by_identity.clear()
        self._by_tpid.clear()
        self._entries.clear()
        self._size = 0


def _floor_start(starts: array, offset: int) -> int | None:
    """The largest start offset at or below ``offset``; None where there is none, or when a commit shrank
    ``starts`` meanwhile (which also changed the generation)."""
    at = bisect_right(starts, offset)
    try:
        return starts[at - 1] if at else None
    except IndexError:
        return None


def _changes_lookups(stage: StagedKV) -> bool:
    """Whether ``stage`` changes a partition's row or offset index."""
    return any(stage.pending.get(cf) or stage.deleted_prefixes.get(cf) for cf in (K.PARTITIONS, K.OFFSETS))


def _name_size(name: Name) -> int:
    return len(name[0]) + len(name[1]) + NAME_OVERHEAD
