"""Where race tests step into a view whose parts are compiled (a compiled object refuses replaced methods): the reads
of its queries and of its offset cache, and the moment between a change of its store and its caches' update."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlmm.state.view import View


class Intercepted:
    """An object of the view (its store, its read cache) behind one whose methods a test may replace: set them as
    attributes (or give them here), delete them to restore the object's own."""

    def __init__(self, inner: Any, **methods: Callable[..., Any]) -> None:
        self._inner = inner
        self.__dict__.update(methods)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def intercept_reads(view: View) -> Intercepted:
    """The reads of the view's queries (through its read cache), made interceptable."""
    reads = view.queries.kv
    if not isinstance(reads, Intercepted):
        reads = view.queries.kv = Intercepted(reads)
    return reads


class _ThenRun:
    """The clock's lock, which runs ``action`` once, after it is next released, and puts the lock back."""

    def __init__(self, view: View, action: Callable[[], None]) -> None:
        self._view, self._lock, self._action = view, view._clock._lock, action

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)
        self._view._clock._lock = self._lock
        self._action()


def after_next_change(view: View, action: Callable[[], None]) -> None:
    """Run ``action`` in the thread that next changes the view's store (a commit's write, a secondary's catch-up),
    right after the change: the store is changed, the caches in front of it are not updated yet. Nothing else may
    take the view's commit clock in between (a read held off, or waiting for a change's end)."""
    view._clock._lock = _ThenRun(view, action)
