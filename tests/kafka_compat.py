"""Kafka's compatibility data, kept in the repository under ``tests/compat`` (see its PROVENANCE.md);
``RLMM_COMPAT_DIR`` points the tests at another copy (e.g. one with more scenarios). When it is
missing the tests that need it fail, never skip."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ENV_VAR = "RLMM_COMPAT_DIR"


class CompatDataMissing(AssertionError):
    pass


def compat_dir() -> Path:
    override = os.environ.get(ENV_VAR)
    path = Path(override) if override else Path(__file__).resolve().parent / "compat"
    if not (path / "records.jsonl").is_file():
        raise CompatDataMissing(
            f"Kafka compatibility data not found: no records.jsonl in {path}. The repository keeps it in "
            f"tests/compat; {ENV_VAR} points elsewhere."
        )
    return path


def _load_jsonl(name: str) -> list[dict[str, Any]]:
    path = compat_dir() / name
    if not path.is_file():
        raise CompatDataMissing(f"Kafka compatibility data not found: {path}")
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_records() -> list[dict[str, Any]]:
    """records.jsonl: bytes Kafka wrote and what Kafka decoded them to (int64s stay exact)."""
    return _load_jsonl("records.jsonl")


def load_partitioner_vectors() -> list[dict[str, Any]]:
    return _load_jsonl("partitioner.jsonl")


def params(load: Callable[[], list[dict[str, Any]]], name: Callable[[dict[str, Any], int], str]) -> list[Any]:
    """One pytest param per row, named by ``name(row, index)``. When the data is missing, a single
    param carrying the error, which :func:`require` turns into a failure (never a skip)."""
    try:
        rows = load()
    except CompatDataMissing as error:
        return [pytest.param(error, id="compat-data-missing")]
    return [pytest.param(row, id=name(row, i)) for i, row in enumerate(rows)]


def require(row: dict[str, Any] | CompatDataMissing) -> dict[str, Any]:
    if isinstance(row, CompatDataMissing):
        pytest.fail(str(row), pytrace=False)
    return row


def same_json(a: Any, b: Any) -> bool:
    """JSON values equal with their types: ``true`` is not ``1``, ``1`` is not ``1.0`` (Python's ``==`` says they
    are)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return a == b
