"""Read-your-writes: futures that complete once the view has applied a given offset of a metadata
partition. The consumer reports each committed batch; waiters are woken then, never by polling."""

from __future__ import annotations

import heapq
import itertools
import threading
from concurrent.futures import Future


class OffsetWatcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[int, int] = {}  # metadata partition -> next offset not yet applied
        self._waiting: dict[int, list[tuple[int, int, Future[None]]]] = {}  # heap of (offset, seq, future)
        self._seq = itertools.count()

    def applied_up_to(self, metadata_partition: int, next_offset: int) -> None:
        """Every offset below ``next_offset`` is now in the view (committed)."""
        with self._lock:
            if next_offset <= self._applied.get(metadata_partition, 0):
                return
            self._applied[metadata_partition] = next_offset
            heap = self._waiting.get(metadata_partition)
            done = []
            while heap and heap[0][0] < next_offset:
                done.append(heapq.heappop(heap)[2])
        for future in done:
            if future.set_running_or_notify_cancel():
                future.set_result(None)

    def wait_for(self, metadata_partition: int, offset: int) -> Future[None]:
        """A future done once ``offset`` is applied; cancel it to stop waiting."""
        future: Future[None] = Future()
        with self._lock:
            if offset < self._applied.get(metadata_partition, 0):
                future.set_running_or_notify_cancel()
                future.set_result(None)
            else:
                heapq.heappush(self._waiting.setdefault(metadata_partition, []), (offset, next(self._seq), future))
        return future

    def applied(self) -> dict[int, int]:
        with self._lock:
            return dict(self._applied)

    def fail_all(self, error: BaseException) -> None:
        """Wake every waiter with ``error`` (the service stops)."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for heap in waiting.values():
            for _, _, future in heap:
                if future.set_running_or_notify_cancel():
                    future.set_exception(error)
