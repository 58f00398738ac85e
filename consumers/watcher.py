"""Read-your-writes: futures that complete once the view has applied a given offset of a metadata
partition. The consumer reports each committed batch; waiters are woken then, never by polling. A record
whose applying failed (Kafka's handler throws on it) fails its waiter with the error the consumer gives. Once
the consumer stopped (``fail_all``), a wait for an offset not applied fails at once with the stop's cause."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Final, NamedTuple

FAILURES_KEPT: Final = 1_000  # per metadata partition: a writer that waits after its record failed still learns it


class Position(NamedTuple):
    """Where a record is in the metadata topic."""

    metadata_partition: int
    offset: int


class OffsetWatcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[int, int] = {}  # metadata partition -> next offset not yet applied
        self._waiting: dict[int, list[tuple[int, int, Future[None]]]] = {}  # heap of (offset, seq, future)
        self._failed: dict[int, dict[int, BaseException]] = {}  # metadata partition -> offset -> error, oldest first
        self._seq = itertools.count()
        self._stopped: BaseException | None = None  # why every wait for an offset not applied fails now

    def applied_up_to(
        self, metadata_partition: int, next_offset: int, failed: Mapping[int, BaseException] | None = None
    ) -> None:
        """Every offset below ``next_offset`` is now in the view (committed), but those of ``failed``: records
        that cannot be applied, with the error their waiters get."""
        with self._lock:
            if next_offset <= self._applied.get(metadata_partition, 0):
                return
            self._applied[metadata_partition] = next_offset
            if failed:
                kept = self._failed.setdefault(metadata_partition, {})
                kept.update(failed)
                while len(kept) > FAILURES_KEPT:
                    del kept[next(iter(kept))]
            heap = self._waiting.get(metadata_partition)
            done = []
            while heap and heap[0][0] < next_offset:
                offset, _, future = heapq.heappop(heap)
                done.append((future, None if failed is None else failed.get(offset)))
        for future, error in done:
            _complete(future, error)

    def wait_for(self, metadata_partition: int, offset: int) -> Future[None]:
        """A future done once ``offset`` is applied (failed with the record's error when it cannot be); cancel it
        to stop waiting."""
        future: Future[None] = Future()
        with self._lock:
            if offset < self._applied.get(metadata_partition, 0):
                _complete(future, self._failed.get(metadata_partition, {}).get(offset))
            elif self._stopped is not None:
                _complete(future, self._stopped)
            else:
                heapq.heappush(self._waiting.setdefault(metadata_partition, []), (offset, next(self._seq), future))
        return future

    def applied(self) -> dict[int, int]:
        with self._lock:
            return dict(self._applied)

    def waiting(self) -> int:
        """Writers waiting for their record to be applied."""
        with self._lock:
            return sum(len(heap) for heap in self._waiting.values())

    def fail_all(self, error: BaseException) -> None:
        """Wake every waiter, and fail every later wait for an offset not applied, with ``error`` (the consumer
        stopped; the first cause given is kept)."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            self._stopped = self._stopped or error
        for heap in waiting.values():
            for _, _, future in heap:
                _complete(future, error)


def _complete(future: Future[None], error: BaseException | None) -> None:
    if future.set_running_or_notify_cancel():
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
