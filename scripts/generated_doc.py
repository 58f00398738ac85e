"""The command line shared by the scripts that generate a file under ``docs/``: write it, or ``--check``
that the committed file equals a fresh generation."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(script: str, out: Path, render: Callable[[], str], argv: list[str] | None = None) -> int:
    """Run the generator ``script`` (its ``__file__``); exit code 0 written or current, 1 stale (with one
    line saying how to regenerate)."""
    name, command = f"{out.parent.name}/{out.name}", f"python scripts/{Path(script).name}"
    parser = argparse.ArgumentParser(description=f"Generate {name}.")
    parser.add_argument("--check", action="store_true", help="compare with a fresh generation, change nothing")
    check = parser.parse_args(argv).check
    fresh = render()
    if check:
        if not out.is_file() or out.read_text() != fresh:
            print(f"{name} is stale: run {command}")
            return 1
        print(f"{name} is current")
        return 0
    out.parent.mkdir(exist_ok=True)
    out.write_text(fresh)
    print(f"wrote {name}")
    return 0
