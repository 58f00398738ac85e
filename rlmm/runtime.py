"""Process-wide settings of an rlmm process: the garbage collector's pace, a worker's tie to its parent."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, Final

GC_THRESHOLDS: Final = (50_000, 20, 20)
PR_SET_PDEATHSIG: Final = 1  # linux/prctl.h
_SIGKILL = int(signal.SIGKILL)
_prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def tune_gc() -> None:
    """Collect cyclic garbage less often than CPython's default (700, 10, 10).

    Applying a batch of events allocates tens of thousands of short-lived, acyclic objects and holds
    the batch's rows until its commit. At the default first-generation threshold the cyclic collector
    runs every few events and walks those live rows each time, about 5 % of the apply time. The
    view's objects do not form reference cycles, so reference counting still frees them at once;
    only rare cyclic garbage waits a little longer.
    """
    gc.set_threshold(*GC_THRESHOLDS)


def die_with_parent(parent: int | None = None) -> None:
    """Be killed (SIGKILL) when the thread that started this process ends, so that a process that is killed
    leaves no child behind (a broker, a Kafka client, a pool's worker). Linux's ``PR_SET_PDEATHSIG`` (nothing
    elsewhere). ``parent``: the process that started this one, which may have ended before the call: then this
    one ends at once. Without it, the call is safe in a child before exec (``preexec_fn``): only a call into
    libc, resolved beforehand (the child of a threaded process must not take locks)."""
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, _SIGKILL)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), _SIGKILL)


@contextmanager
def stderr_into(file: BinaryIO) -> Iterator[None]:
    """Point the process's standard error, file descriptor 2, at ``file`` while the block runs: what C
    libraries write there (gRPC's core logs) lands in the file, and so does everything a child process
    started meanwhile writes to its standard error, for its whole life (a JVM)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
