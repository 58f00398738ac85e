"""One committed state for every read of the view, however many times it reads the store.

A query reads the store several times: a partition's row, then an epoch's row, its offset index, its
unreferenced set, segments by id. A commit landing between two of those reads would make it answer a mix of
the states before and after the commit, which neither state answers (a listing missing the segment that the
commit moved from the unreferenced set to the offset index). The view publishes each commit (and a
secondary's catch-up) inside ``publishing``, from before the store changes until every cache in front of it
was told; ``read`` runs a query and keeps its answer, or its error, only if no publication overlapped it (a
sequence lock: the generation is odd while one runs). A query that overlapped one runs again; after
``ATTEMPTS`` such runs it runs holding the lock that publications take, so that none can overlap it: the
writer then waits for that one query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, TypeVar, TypeVarTuple, Unpack

ATTEMPTS: Final = 3  # runs overlapping a publication before a query holds publications off

A = TypeVarTuple("A")
T = TypeVar("T")


class CommitClock:
    def __init__(self) -> None:
        self.generation = 0  # odd while a publication runs
        self._lock = threading.Lock()
        self.overlapped = 0  # queries run again because a publication overlapped them
        self.held_off = 0  # of those, queries run holding publications off
        self._count_lock = threading.Lock()

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """Around a change of the store and of every cache in front of it (one writer at a time)."""
        with self._lock:
            self.generation += 1
            try:
                yield
            finally:
                self.generation += 1

    def read(self, query: Callable[[Unpack[A]], T], *args: *A) -> T:
        """``query``'s answer (or error) from one committed state."""
        generation = self.generation
        if not generation & 1:
            try:
                answer = query(*args)
            except Exception:
                if self.generation == generation:
                    raise
            else:
                if self.generation == generation:
                    return answer
        return self._read_again(query, args, ATTEMPTS - 1)

    def _read_again(self, query: Callable[[Unpack[A]], T], args: tuple[*A], attempts: int) -> T:
        """``read`` after a run that overlapped a publication (or that began during one)."""
        with self._count_lock:
            self.overlapped += 1
        for _ in range(attempts):
            generation = self.generation
            if generation & 1:
                with self._lock:  # wait for the publication's end
                    continue
            try:
                answer = query(*args)
            except Exception:
                if self.generation == generation:
                    raise
                continue  # perhaps an error of reading two states
            if self.generation == generation:
                return answer
        with self._count_lock:
            self.held_off += 1
        with self._lock:
            return query(*args)
