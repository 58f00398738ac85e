"""Records read by a Spark rebuild, as they are read: each reading task writes its count into a file of its own
under the build's staging directory (on a filesystem every executor shares, as the snapshot's files are), and
the driver adds them up. Spark's own progress counts tasks, which a full build has a few of, each reading
whole metadata partitions: they would show nothing until the end."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
WRITE_EVERY_S = 0.5
CHECK_EVERY = 1024  # rows between two looks at the clock


def counted(rows: Iterator[T], directory: str | None, task: str) -> Iterator[T]:
    """``rows``, their count written to ``directory/task`` every half second and at the end (a task run again
    overwrites its own count). No ``directory``: the rows as they are."""
    if directory is None:
        yield from rows
        return
    path = Path(directory) / task
    count, written_at = 0, time.monotonic()
    for row in rows:
        count += 1
        if count % CHECK_EVERY == 0 and time.monotonic() - written_at >= WRITE_EVERY_S:
            _write(path, count)
            written_at = time.monotonic()
        yield row
    _write(path, count)


def _write(path: Path, count: int) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(str(count))
    partial.replace(path)  # a reader never sees half a number


class RecordsRead:
    """While the block runs, calls ``report(records read so far)`` every half second from a thread of its own,
    and once at its end."""

    def __init__(self, directory: Path, report: Callable[[int], None]) -> None:
        self.directory, self.report = directory, report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlmm-records-read", daemon=True)

    def total(self) -> int:
        return sum(int(path.read_text()) for path in self.directory.iterdir() if not path.name.startswith("."))

    def _run(self) -> None:
        while not self._stop.wait(WRITE_EVERY_S):
            self.report(self.total())

    def __enter__(self) -> RecordsRead:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.report(self.total())
