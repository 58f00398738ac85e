"""Where snapshot commands build their output before renaming it into place: ``TARGET.KIND-PID`` beside the
target. A process killed mid-way leaves its folder behind; the next command writing beside the same target
removes the folders of processes that no longer run (``rlmm.pid_folders``)."""

from __future__ import annotations

from pathlib import Path

from rlmm.pid_folders import pid_folder


def staging_path(target: Path, kind: str) -> Path:
    """This process's staging folder for ``target`` (not created), after removing stale ones of ``kind``."""
    return pid_folder(target.parent, f"{target.name}.{kind}-")
