"""What the workers of ``rlmm serve --workers N`` share, in a private runtime directory (0700) the supervisor
makes: the primary's unix socket, a directory per secondary for its RocksDB secondary instance, and the
commit counter.

The commit counter is how a write acknowledged by any worker is seen at once by every other: the primary
bumps it after each view batch it commits, before the write's call returns; a secondary, before each read,
catches its view up with the primary when the counter moved since its last catch-up (a catch-up costs
~1 ms, a look at the counter a fraction of a microsecond)."""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path

from rlmm.state.view import View

_COUNTER = struct.Struct("=Q")


class RuntimeDir:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def primary_socket(self) -> Path:
        return self.root / "primary.sock"

    @property
    def commits(self) -> Path:
        return self.root / "commits"

    def secondary(self, worker: int) -> Path:
        return self.root / f"secondary-{worker}"


class CommitCounter:
    """An 8-byte counter in a shared memory-mapped file: one process bumps it, any number read it."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _COUNTER.size:
                os.ftruncate(fd, _COUNTER.size)
            self._map = mmap.mmap(fd, _COUNTER.size)
        finally:
            os.close(fd)

    def read(self) -> int:
        return _COUNTER.unpack_from(self._map)[0]

    def bump(self) -> None:
        _COUNTER.pack_into(self._map, 0, self.read() + 1)

    def close(self) -> None:
        self._map.close()


class Freshness:
    """A secondary's view, caught up before a read whenever the primary committed since the last catch-up."""

    def __init__(self, view: View, counter: CommitCounter, seen: int) -> None:
        """``seen``: the counter as read before ``view`` was opened."""
        self.view = view
        self.counter = counter
        self.catch_ups = 0
        self._seen = seen
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Every batch committed before this call started is visible once it returns."""
        if self.counter.read() == self._seen:
            return
        with self._lock:
            now = self.counter.read()  # read before the catch-up: what it covers at least
            if now != self._seen:
                self.view.catch_up()
                self.catch_ups += 1
                self._seen = now
