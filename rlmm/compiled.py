"""Which build of the core runs: compiled when rlmm was installed, or interpreted.

``setup.py`` compiles ``COMPILED_MODULES`` with mypyc and ``NATIVE_MODULES`` (the fold's native parts, in Cython)
into extension modules next to their sources and records each source it compiled: its digest, size and
modification time. Python imports an extension before a source, so in a source checkout (an editable install) a
module edited after the build would run its stale compiled self. There, when any source differs from the one
compiled (or a module was not built), and whenever ``RLMM_INTERPRETED=1``, every compiled module is imported from
its source instead, and the native parts give way to their references: the modules call each other directly, so
they are only ever used all together.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

# the modules setup.py compiles: the hot path of decoding and applying records
COMPILED_MODULES = (
    "rlmm.records.model",
    "rlmm.records.wire",
    "rlmm.records.uuid",
    "rlmm.records.serde",
    "rlmm.state.results",
    "rlmm.state.classify",
    "rlmm.state.keys",
    "rlmm.state.rows",
    "rlmm.state.kv",
    "rlmm.state.cache",
    "rlmm.state.segment_rows",
    "rlmm.state.max_timestamp",
    "rlmm.state.maxtree",
    "rlmm.state.timestamp_index",
    "rlmm.state.epoch_index",
    "rlmm.state.machine",
    "rlmm.state.rocks",
    "rlmm.state.commit_clock",
    "rlmm.state.offset_cache",
    "rlmm.state.queries",
    "rlmm.state.view",
)
# the fold's native parts (Cython), each beside the interpreted reference it replaces when the core runs compiled
NATIVE_MODULES = (
    "rlmm.records.wire_native",  # reference: rlmm.records.serde, which calls it first
    "rlmm.state.keys_native",  # references: rlmm.state.keys and max_timestamp, which call it first
    "rlmm.state.maxtree_native",  # reference: rlmm.state.maxtree (through rlmm.state.trees)
    "rlmm.state.max_timestamp_native",  # reference: rlmm.state.max_timestamp's MaxTimestampIndex (new_index)
)
CORE_MODULES = COMPILED_MODULES + NATIVE_MODULES
# the inline helpers NATIVE_MODULES cimport (.pxd): compiled into each of them, so an edit leaves them all stale
NATIVE_HEADERS = ("rlmm.records.big_endian",)
RECORDED_SOURCES = CORE_MODULES + NATIVE_HEADERS
INTERPRETED_ENV = "RLMM_INTERPRETED"
_ROOT = Path(__file__).resolve().parent.parent  # the directory holding the rlmm package
SOURCES_RECORD = Path(__file__).with_name("compiled_sources.json")  # written by setup.py when it compiles


def source_path(name: str) -> Path:
    suffix = ".pyx" if name in NATIVE_MODULES else ".pxd" if name in NATIVE_HEADERS else ".py"
    return _ROOT.joinpath(*name.split(".")).with_suffix(suffix)


def source_digest(name: str) -> int:
    """The source's CRC-32, which tells an edit from a touch (a checkout, a stash) beside its size. Not a sha256:
    hashlib loads OpenSSL's libcrypto, ~3.7 MB of memory for the life of every process of a checkout whose sources
    were touched since the build, which the benchmarks then count in the fold's peak."""
    import zlib  # (which the fold imports anyway)

    return zlib.crc32(source_path(name).read_bytes())


def source_record(name: str) -> dict[str, object]:
    """What setup.py records of a source it compiles."""
    stat = source_path(name).stat()
    return {"crc32": source_digest(name), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def stale_modules() -> list[str]:
    """Modules of a compiled core whose source differs from the one compiled, or that were not built (a checkout
    compiled before they existed), and native headers edited since. Checked in a source checkout only, where sources
    are edited; an installed rlmm runs what its wheel holds."""
    if not (_ROOT / "pyproject.toml").exists():
        return []
    built = [name for name in CORE_MODULES if _has_extension(name)]
    if not built:
        return []
    record = json.loads(SOURCES_RECORD.read_text()) if SOURCES_RECORD.exists() else {}
    stale = [name for name in CORE_MODULES if name not in built or not _unchanged(name, record.get(name))]
    return stale + [name for name in NATIVE_HEADERS if not _unchanged(name, record.get(name))]


def _unchanged(name: str, recorded: object) -> bool:
    """Whether a source is the one compiled: the same size and modification time, as CPython trusts a cached
    bytecode file, or else the same digest (a source touched, not changed)."""
    if not isinstance(recorded, dict):
        return False
    stat = source_path(name).stat()
    if (recorded.get("size"), recorded.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns):
        return True
    return recorded.get("size") == stat.st_size and recorded.get("crc32") == source_digest(name)


def _has_extension(name: str) -> bool:
    source = source_path(name)
    return any(source.with_name(source.stem + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


class _FromSource:
    """A finder of ``sys.meta_path`` (not an ``importlib.abc.MetaPathFinder``: importing ``importlib.abc`` loads
    ``importlib.resources``, ~1 MB of memory that an rlmm process does not otherwise use)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name not in COMPILED_MODULES:
            return None
        return importlib.util.spec_from_file_location(name, source_path(name))


def choose_build() -> None:
    """Import the core from its sources when asked to or when its compiled modules are stale."""
    if any(name in sys.modules for name in COMPILED_MODULES):
        return
    if os.environ.get(INTERPRETED_ENV) == "1":
        sys.meta_path.insert(0, _FromSource())
        return
    stale = stale_modules()
    if stale:
        warnings.warn(
            f"rlmm: {', '.join(stale)} changed or not built since the core was compiled; running the interpreted core "
            f"(reinstall rlmm, e.g. pip install -e ., to compile it again)",
            stacklevel=2,
        )
        sys.meta_path.insert(0, _FromSource())


def native_module(name: str) -> Any:
    """One of ``NATIVE_MODULES`` when the core runs compiled, else None (its reference serves)."""
    return importlib.import_module(name) if core_build() == "compiled" else None


def core_build() -> str:
    """'compiled' or 'interpreted': how the core runs in this process."""
    spec = importlib.util.find_spec("rlmm.state.machine")
    origin = spec.origin if spec is not None else None
    return "compiled" if origin is not None and not origin.endswith(".py") else "interpreted"
