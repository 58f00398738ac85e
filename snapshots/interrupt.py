"""Ctrl-C (or SIGTERM) during a Spark build: the jobs are cancelled and the build ends as a failure that
leaves nothing behind, quietly. Spark's own handler interrupts the py4j call under way, and py4j, Spark and
the Python workers then print about sixty lines of tracebacks."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def cancel_on_interrupt(spark: Any) -> Iterator[threading.Event]:
    """While the block runs, SIGINT/SIGTERM cancel Spark's jobs (from another thread: py4j cannot be called from
    a handler that interrupted it) with Spark's logging off; the event tells that it happened."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield interrupted
        return

    def cancel() -> None:
        context = spark.sparkContext
        context.setLogLevel("OFF")
        context.cancelAllJobs()

    def on_signal(*_: object) -> None:
        if not interrupted.is_set():
            interrupted.set()
            threading.Thread(target=cancel, name="rlmm-cancel", daemon=True).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
