"""One committed state for every read of the view, however many times it reads the store.

A query reads the store several times: a partition's row, then an epoch's row, its offset index, its
unreferenced set, segments by id. A commit landing between two of those reads would make it answer a mix of
the states before and after the commit, which neither state answers (a listing missing the segment that the
commit moved from the unreferenced set to the offset index). ``read`` keeps a query's answer, or its error,
only if the store's count of changes (``RocksKV.changes``: begun and finished writes and catch-ups, odd while
one is under way) and the clock's generation stood still, and even, while it ran; otherwise it runs the query
again. What is kept in front of the store (the read cache's rows, the store's iterators) answers only for the
count it was read at, and the lookup caches decline from before a write until they are brought up to date
with it. Writes take no part in this but the lock of ``changing``: after ``ATTEMPTS`` runs that overlapped a
change, a query runs holding that lock, so that no change overlaps it (the writer then waits for that one
query). A load of table files and a reopening are made inside ``publishing``, during which queries wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, TypeVar, TypeVarTuple, Unpack

ATTEMPTS: Final = 3  # runs overlapping a change before a query holds changes off

A = TypeVarTuple("A")
T = TypeVar("T")


def _unchanging() -> int:
    return 0


class CommitClock:
    def __init__(self, changes: Callable[[], int] = _unchanging) -> None:
        """``changes``: the store's count of changes begun or finished, odd while one is under way."""
        self.changes = changes
        self.generation = 0  # odd while a publication runs
        self._lock = threading.Lock()
        self.overlapped = 0  # queries run again because a change overlapped them
        self.held_off = 0  # of those, queries run holding changes off
        self._count_lock = threading.Lock()

    @contextmanager
    def changing(self) -> Iterator[None]:
        """Around a change of the store that its count shows (a write, a catch-up)."""
        with self._lock:
            yield

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """Around a change of the store and of the caches in front of it that queries must wait for."""
        with self._lock:
            self.generation += 1
            try:
                yield
            finally:
                self.generation += 1

    def read(self, query: Callable[[Unpack[A]], T], *args: *A) -> T:
        """``query``'s answer (or error) from one committed state."""
        # the first run written out here, apart from the loop of ``read_again``: a third of the wrapper's cost. The
        # single lookup, the hottest query, writes it out in its own code (``Queries.remote_log_segment_value``).
        generation, changes = self.generation, self.changes()
        if not (generation | changes) & 1:
            try:
                answer = query(*args)
            except Exception:
                if self.stood(generation, changes):
                    raise
            else:
                if self.stood(generation, changes):
                    return answer
        return self.read_again(query, args)

    def stood(self, generation: int, changes: int) -> bool:
        """Whether the store and the clock are still at the counts read before a run, ``generation`` and
        ``changes``, both even: its answer is of one committed state."""
        return self.generation == generation and self.changes() == changes

    def read_again(self, query: Callable[[Unpack[A]], T], args: tuple[*A]) -> T:
        """``read`` after a first run that overlapped a change (or that began during one)."""
        with self._count_lock:
            self.overlapped += 1
        for _ in range(ATTEMPTS - 1):
            generation, changes = self.generation, self.changes()
            if (generation | changes) & 1:
                with self._lock:  # wait for the change's end
                    pass
                continue
            try:
                answer = query(*args)
            except Exception:
                if self.stood(generation, changes):
                    raise
                continue  # perhaps an error of reading two states
            if self.stood(generation, changes):
                return answer
        with self._count_lock:
            self.held_off += 1
        with self._lock:
            return query(*args)
