"""Folders named after the process that uses them, ``PREFIX<PID>``: a process killed mid-way leaves its folder
behind, and the next process making such a folder beside it removes those of processes that no longer run."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user holds the PID
        return True
    return True


def pid_folder(parent: Path, prefix: str) -> Path:
    """This process's folder ``parent/PREFIX<PID>`` (not created), after removing the ``PREFIX<PID>`` folders in
    ``parent`` whose process no longer runs."""
    if parent.is_dir():
        for stale in parent.glob(f"{prefix}*"):
            pid = stale.name[len(prefix) :]
            if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
                log.warning("removing %s, left by process %s which no longer runs", stale, pid)
                shutil.rmtree(stale, ignore_errors=True)
    return parent / f"{prefix}{os.getpid()}"
