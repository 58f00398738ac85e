"""The column families of a view while its database is closed to be opened again (``RocksKV.reopen``).

A reopening after a failed write fails while anything still refers to the old database (a listing streamed
to a client holds its iterator): until a retry succeeds, the view has no column family. A read then fails as
the reopening does, with ``ViewStorageFailed`` (a retryable UNAVAILABLE for the caller), not with a KeyError
(an INTERNAL error). Kept out of the compiled modules: mypyc compiles no subclass of ``dict``."""

from __future__ import annotations

from typing import Any

from rlmm.errors import ViewStorageFailed


class Reopening(dict):
    def __missing__(self, cf: str) -> Any:
        raise ViewStorageFailed(f"the view is being opened again after a failed write: no {cf} to read until then")
