"""The constructors written out for the compiled build (``@dataclass(init=False)``: a dataclass's generated
``__init__`` would stay interpreted) take every field, in order, with the field's default, and set it."""

from __future__ import annotations

import ast

import pytest

from rlmm.compiled import COMPILED_MODULES, source_path


def _written_out_classes() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for name in COMPILED_MODULES:
        for node in ast.parse(source_path(name).read_text()).body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(d, ast.Call)
                and getattr(d.func, "id", None) == "dataclass"
                and any(k.arg == "init" and getattr(k.value, "value", True) is False for k in d.keywords)
                for d in node.decorator_list
            ):
                found.append((f"{name}.{node.name}", node))
    return found


CLASSES = _written_out_classes()


def _default(value: ast.expr | None) -> str | None:
    """A field's default as source (``field(default=X)`` gives X); None when it has none."""
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    return None if value is None else ast.unparse(value)


def test_the_compiled_modules_write_constructors_out() -> None:
    assert len(CLASSES) >= 8  # the records and the view's rows


def _computed(value: ast.expr | None) -> bool:
    """Whether a field is ``field(init=False)``: computed by the constructor, not passed to it."""
    return (
        isinstance(value, ast.Call)
        and getattr(value.func, "id", None) == "field"
        and any(k.arg == "init" and getattr(k.value, "value", True) is False for k in value.keywords)
    )


@pytest.mark.parametrize("name,node", CLASSES, ids=[n for n, _ in CLASSES])
def test_constructor_matches_fields(name: str, node: ast.ClassDef) -> None:
    declared = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    fields = [(s.target.id, _default(s.value)) for s in declared if not _computed(s.value)]
    computed = [f"self.{s.target.id}" for s in declared if _computed(s.value)]
    init = next(s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__")
    args = init.args.args[1:]
    defaults = [None] * (len(args) - len(init.args.defaults)) + [ast.unparse(d) for d in init.args.defaults]
    assert [(a.arg, d) for a, d in zip(args, defaults)] == fields
    assigned = [(ast.unparse(s.targets[0]), ast.unparse(s.value)) for s in init.body if isinstance(s, ast.Assign)]
    assert assigned[: len(fields)] == [(f"self.{f}", f) for f, _ in fields]
    assert [target for target, _ in assigned[len(fields) :]] == computed
