"""Process-wide settings of an rlmm process: the garbage collector's pace, the allocator's use of mmap, a worker's
tie to its parent."""

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
M_MMAP_THRESHOLD: Final = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES: Final = 128 << 10  # glibc's initial threshold
_SIGKILL = int(signal.SIGKILL)
_libc = ctypes.CDLL(None) if sys.platform == "linux" else None
_prctl = _libc.prctl if _libc is not None else None
_mallopt = getattr(_libc, "mallopt", None)
_malloc_trim = getattr(_libc, "malloc_trim", None)


def tune_process() -> None:
    """What every rlmm process that folds records sets first: the collector's pace and the allocator's mmap."""
    tune_gc()
    tune_allocator()


def tune_gc() -> None:
    """Collect cyclic garbage less often than CPython's default (700, 10, 10).

    Applying a batch of events allocates tens of thousands of short-lived, acyclic objects and holds
    the batch's rows until its commit. At the default first-generation threshold the cyclic collector
    runs every few events and walks those live rows each time, about 5 % of the apply time. The
    view's objects do not form reference cycles, so reference counting still frees them at once;
    only rare cyclic garbage waits a little longer.
    """
    gc.set_threshold(*GC_THRESHOLDS)


def tune_allocator() -> None:
    """Have glibc's malloc take every block of 128 KB or more straight from the kernel (mmap) and give it back
    when freed, as it does at first, instead of raising that threshold each time such a block is freed.

    RocksDB's memtables are made of 256 KB arena blocks, all freed at once when a memtable has been written
    to a table file. Past glibc's adaptive threshold (raised to the largest mmapped block freed, up to 32 MB)
    they come from the heap, among the block cache's small blocks, and the heap keeps their pages when they are
    freed: after 1M events applied (``scripts/bench_core.py --stream uploads``) the heap held 20.6 MB free of
    73 MB, against 5.1 MB of 45 MB with the threshold fixed, and the peak RSS was 8 MB lower. Nothing where the C
    library is not glibc (musl's ``mallopt`` does nothing)."""
    if _mallopt is not None:
        _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def release_free_memory() -> None:
    """Give the kernel back the whole free pages inside glibc's heaps (``malloc_trim``), which it keeps otherwise:
    a batch's rows, RocksDB's write batch and the block cache's turnover leave free memory between blocks in use,
    and the next batch's peak comes on top of it. Nothing where the C library is not glibc."""
    if _malloc_trim is not None:
        _malloc_trim(0)


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
