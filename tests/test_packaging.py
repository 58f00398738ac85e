"""Installing rlmm is quiet: an editable install of the project prints no warning of the build backend
(setuptools warned that folders named like a package may shadow it, with the packages at the root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_an_editable_install_prints_no_build_warning(tmp_path) -> None:
    project = tmp_path / "project"  # a copy: an install that does not compile removes compiled modules
    project.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, project / name)
    for package in ("rlmm", "consumers", "snapshots"):
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "-e",
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RLMM_COMPILE": "0"},
    )
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "Successfully installed rlmm" in output
    assert "BuildBackendWarning" not in output and "Please be careful" not in output, output
