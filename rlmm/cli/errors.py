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

from rlmm.errors import ViewDamaged, ViewInUse, ViewNotFound, ViewSchemaMismatch, ViewStorageFailed


class Failure(click.ClickException):
    """An expected failure of a command: ``error: MESSAGE`` on stderr, exit code 1, no traceback."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@contextmanager
def view_errors(path: Path) -> Iterator[None]:
    """Turn what opening (or using) the view at ``path`` raises into a ``Failure``, by its type: no view
    there, a view of another schema version, a view another process holds, a damaged view, RocksDB
    failing otherwise."""
    try:
        yield
    except ViewNotFound as exc:
        raise Failure(
            f"{exc}: give the directory of a view that rlmm serve, rlmm consume or rlmm snapshot restore wrote"
        ) from None
    except ViewSchemaMismatch as exc:  # "view at ... has schema version ...: rebuild it ..."
        raise Failure(str(exc)) from None
    except ViewInUse:
        raise Failure(
            f"the view {path} is in use by another process (rlmm serve or rlmm consume): stop it "
            f"or use another directory; rlmm quarantine and rlmm snapshot export read a view in "
            f"use"
        ) from None
    except ViewDamaged as exc:
        raise Failure(
            f"the view {path} is damaged ({exc}): restore it from a snapshot (rlmm snapshot restore) "
            f"or rebuild it from the topic (rlmm serve --reset); rlmm view check reads it "
            f"whole"
        ) from None
    except ViewStorageFailed as exc:
        raise Failure(
            f"RocksDB failed on the view {path} ({exc}): check the disk (space, permissions); if the "
            f"view is damaged, restore it from a snapshot or rebuild it (rlmm serve --reset)"
        ) from None
