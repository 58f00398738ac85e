"""What the workers of ``rlmm serve --workers N`` share, in a private runtime directory (0700) the supervisor
makes: the primary's unix socket, a directory per secondary for its RocksDB secondary instance, and the
commit counter.

The commit counter is how a write acknowledged by any worker is seen at once by every other: the primary
bumps it after each view batch it commits, before the write's call returns; a secondary, before each read,
catches its view up with the primary when the counter moved since its last catch-up (a catch-up costs
~1 ms, a look at the counter a fraction of a microsecond). Beside it, the primary counts its openings of the
view: a primary that died and was started again replays what the dead one wrote to RocksDB's log, and a
secondary that had replayed that log too keeps it in memory, where point reads find it even after the new
primary flushed newer rows (a partition read as ready that the new primary withdrew, its segments as
before). A secondary opens its view again when the openings moved, instead of catching up."""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path

from rlmm.state.view import View

_COUNTER = struct.Struct("=Q")
_OPENINGS_AT = _COUNTER.size
_SIZE = 2 * _COUNTER.size


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
    """Two 8-byte counters in a shared memory-mapped file, the primary's commits and its openings of the view:
    one process bumps them, any number read them."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)

    def read(self) -> int:
        return _COUNTER.unpack_from(self._map)[0]

    def bump(self) -> None:
        _COUNTER.pack_into(self._map, 0, self.read() + 1)

    def openings(self) -> int:
        return _COUNTER.unpack_from(self._map, _OPENINGS_AT)[0]

    def primary_opened(self) -> None:
        """The primary opened the view for writing (its first, or after the one before it died)."""
        _COUNTER.pack_into(self._map, _OPENINGS_AT, self.openings() + 1)

    def close(self) -> None:
        self._map.close()


class Freshness:
    """A secondary's view, caught up before a read whenever the primary committed since the last catch-up."""

    def __init__(self, view: View, counter: CommitCounter, seen: int, openings: int) -> None:
        """``seen``, ``openings``: the counters as read before ``view`` was opened."""
        self.view = view
        self.counter = counter
        self.catch_ups = 0
        self.reopenings = 0
        self._seen = seen
        self._openings = openings
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Every batch committed before this call started is visible once it returns."""
        if self.counter.read() == self._seen and self.counter.openings() == self._openings:
            return
        with self._lock:
            openings = self.counter.openings()
            now = self.counter.read()  # read before the catch-up: what it covers at least
            if openings != self._openings:
                self.view.open_again()
                self.reopenings += 1
                self._openings = openings
            elif now != self._seen:
                self.view.catch_up()
                self.catch_ups += 1
            self._seen = now
