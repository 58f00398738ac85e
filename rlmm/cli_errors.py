"""How ``rlmm`` commands fail: one line on stderr, ``error: WHAT IS WRONG; WHAT TO DO``, and an exit code.

Exit codes, the same for every command (README, "Exit codes"): 0 success; 1 the operation failed, or
its answer is negative (a record that does not decode, a snapshot that differs from the view, a server
that is not SERVING); 2 a usage error (click's own: a bad option or argument, invalid settings);
130 interrupted (``rlmm demo``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click

# RocksDB status texts: rocksdict raises them as plain ``Exception``
_ROCKSDB_STATUS = ("IO error", "Corruption", "Invalid argument", "Not implemented", "Resource busy",
                   "Operation aborted", "Result incomplete")


class Failure(click.ClickException):
    """An expected failure of a command: ``error: MESSAGE`` on stderr, exit code 1, no traceback."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@contextmanager
def view_errors(path: Path) -> Iterator[None]:
    """Turn what opening (or using) the view at ``path`` raises for a known cause into a ``Failure``: no
    view there, a view of another schema version, a view another process holds, RocksDB refusing it."""
    try:
        yield
    except ValueError as exc:  # View's own checks
        text = str(exc)
        if text.startswith("no view at"):
            raise Failure(f"{text}: give the directory of a view that rlmm serve, rlmm consume or rlmm snapshot "
                          f"restore wrote") from None
        if text.startswith("view at"):  # "view at ... has schema version ...: rebuild it ..."
            raise Failure(text) from None
        raise
    except Exception as exc:
        text = str(exc)
        if type(exc) is not Exception or not text.startswith(_ROCKSDB_STATUS):
            raise
        if "lock" in text.lower():
            raise Failure(f"the view {path} is in use by another process (rlmm serve or rlmm consume): stop it "
                          f"or use another directory; rlmm quarantine and rlmm snapshot export read a view in "
                          f"use") from None
        raise Failure(f"RocksDB refused the view {path} ({text}): if it is damaged, restore it from a snapshot "
                      f"(rlmm snapshot restore) or remove it and let rlmm serve rebuild it from the "
                      f"topic") from None
