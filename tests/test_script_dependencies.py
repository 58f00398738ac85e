"""Every script's imports (and those of the project modules it uses, transitively) are installed by the
install path the README states for it: the benchmarks and drills by ``rlmm[bench]``, the generators of
stubs and docs by ``rlmm[test]``. Checked against the distribution's declared requirements, so a script
that starts importing a package no extra declares fails here, not on a user's machine."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"rlmm", "consumers", "snapshots", "scripts"}
SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("*.py") if p.name != "__init__.py")
EXTRA_OF = {"gen_api_docs.py": "test", "gen_config_docs.py": "test", "gen_proto.py": "test", "generated_doc.py": "test"}


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(script: Path) -> set[str]:
    """Top-level third-party modules imported by ``script`` and by the first-party modules it imports."""
    found: set[str] = set()
    seen, todo = {script}, [script]
    while todo:
        for name in _imported_names(todo.pop()):
            top = name.split(".")[0]
            if top not in FIRST_PARTY:
                if top not in sys.stdlib_module_names:
                    found.add(top)
                continue
            parts = name.split(".")
            for i in range(len(parts), 0, -1):  # the module itself, or the package that holds the name
                module = _module_file(".".join(parts[:i]))
                if module is not None:
                    if module not in seen:
                        seen.add(module)
                        todo.append(module)
                    break
    return found


def _imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _declared(extra: str) -> set[str]:
    names = set()
    for line in importlib.metadata.requires("rlmm") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
            names.add(_normal(requirement.name))
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _module_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    return {_normal(d) for d in _module_distributions().get(module, [])}


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_imports_are_declared(script: Path) -> None:
    extra = EXTRA_OF.get(script.name, "bench")
    declared = _declared(extra)
    missing = {m: _distributions(m) for m in _imports(script) if not _distributions(m) & declared}
    assert not missing, f"{script.name} imports what rlmm[{extra}] does not install: {missing}"
