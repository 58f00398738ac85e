"""The timestamp trees' pages the fold changes: native (``rlmm/state/maxtree_native.pyx``) when the core runs
compiled, else the reference (``rlmm/state/maxtree.py``). Both take the same steps and write the same rows
(tests/test_native_trees.py); the choice is made where a cache is made, and the cache makes pages of its kind."""

from __future__ import annotations

from typing import Protocol

from rlmm.compiled import native_module
from rlmm.state import maxtree
from rlmm.state.kv import WriteKV


class TreePages(Protocol):
    def insert(self, tree: bytes, position: int, first: int, second: int) -> None: ...

    def remove(self, tree: bytes, position: int) -> None: ...

    def flush(self) -> None: ...

    def forget(self, prefix: bytes) -> None: ...


class TreeCache(Protocol):
    def __len__(self) -> int: ...

    def clear(self) -> None: ...

    def pages_over(self, kv: WriteKV, cf: str) -> TreePages: ...


def new_tree_cache() -> TreeCache:
    native = native_module("rlmm.state.maxtree_native")
    cache: TreeCache = maxtree.TreeCache() if native is None else native.TreeCache()
    return cache
