"""Where the view's batches spend their time, stage by stage, added up since the view opened.

A batch goes through five stages, timed at each border (a few clock reads per batch, none per record):

* ``apply``: the caller's block: decoding each record and running the state machine on it;
* ``flush``: the rows the batch kept as objects (partitions, epochs, segments, counters) written into its stage;
* ``encode``: RocksDB's write batch built from the stage;
* ``write``: RocksDB's write, WAL included;
* ``caches``: the caches in front of the store brought up to date with it.

Operators read them as ``rlmm_view_apply_seconds_total``; ``scripts/bench_core.py`` reports them per event.
"""

from __future__ import annotations

import time
from typing import Final

STAGES: Final = ("apply", "flush", "encode", "write", "caches")


class ApplyTimes:
    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self._since = 0.0

    def start(self) -> None:
        self._since = time.perf_counter()

    def lap(self, stage: str) -> None:
        """The time since the last lap (or ``start``) was spent in ``stage``."""
        now = time.perf_counter()
        self.seconds[stage] += now - self._since
        self._since = now
