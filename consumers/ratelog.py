"""Log lines that can repeat thousands of times a second (a broker down, a stream of refused records) at most
once per interval and kind, with how many were left out meanwhile."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._last: dict[str, float] = {}  # kind -> when it was last logged
        self._left_out: dict[str, int] = {}

    def log(self, level: int, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval_s:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return
        self._last[kind] = now
        left_out = self._left_out.pop(kind, 0)
        if left_out:
            message += f" ({left_out} more like it in the last {self._interval_s:g} s not logged)"
        self._logger.log(level, message, *args)
