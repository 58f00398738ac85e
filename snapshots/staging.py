"""Where snapshot commands build their output before renaming it into place: ``TARGET.KIND-PID`` beside the
target. A process killed mid-way leaves its folder behind; the next command writing beside the same target
removes the folders of processes that no longer run."""

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


def staging_path(target: Path, kind: str) -> Path:
    """This process's staging folder for ``target`` (not created), after removing stale ones of ``kind``."""
    prefix = f"{target.name}.{kind}-"
    if target.parent.is_dir():
        for stale in target.parent.glob(f"{prefix}*"):
            pid = stale.name[len(prefix) :]
            if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
                log.warning("removing %s, left by process %s which no longer runs", stale, pid)
                shutil.rmtree(stale, ignore_errors=True)
    return target.with_name(f"{prefix}{os.getpid()}")
