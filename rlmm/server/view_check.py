"""The view read again and again while the server serves, at a bounded pace, every block's checksum verified
(``rlmm view check``, spread over time): damage in what reads seldom touch (a column family no lookup reads, a
table file only a compaction would open) is found while serving, not when the view closes. What it finds is
the view's ``fault``, as damage a read meets: the server turns NOT_SERVING, says why, and refuses reads."""

from __future__ import annotations

import logging
import threading
import time

from rlmm.errors import ViewDamaged, ViewStorageFailed
from rlmm.state import keys as K
from rlmm.state.view import View

log = logging.getLogger(__name__)

STEP_S = 0.05  # each step reads what the pace allows in this time, then waits out the rest of it
RETRY_S = 1.0  # after RocksDB failed a step otherwise than with damage (a reopening under way): the same step then


class BackgroundCheck:
    def __init__(self, view: View, mb_per_s: float) -> None:
        self.view = view
        self.step_bytes = max(1, int(mb_per_s * (1 << 20) * STEP_S))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlmm-view-check", daemon=True)

    def start(self) -> BackgroundCheck:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopping.is_set():
            started = time.monotonic()
            for cf in K.COLUMN_FAMILIES:
                key: bytes | None = None
                while not self._stopping.is_set():
                    began = time.monotonic()
                    try:
                        key = self.view.check_from(cf, key, self.step_bytes)
                    except ViewDamaged:  # the view's fault now: the server turns NOT_SERVING and says why
                        return
                    except ViewStorageFailed as exc:  # not damage (a reopening under way): the same step later
                        log.debug("the background check of the view waits: %s", exc)
                        self._stopping.wait(RETRY_S)
                        continue
                    self._stopping.wait(max(0.0, STEP_S - (time.monotonic() - began)))
                    if key is None:
                        break
            if not self._stopping.is_set():
                log.debug("the background check read the whole view in %.0f s: no damage", time.monotonic() - started)
