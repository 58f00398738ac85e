"""The keys of a benchmark's ``--json`` object, as its module docstring lists them: after the line that starts
``JSON_KEYS_HEADING``, one bullet a group of keys, ``* ``key``, ``other_key``: what they are``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

JSON_KEYS_HEADING = "``--json`` prints one object with these keys"


def documented_json_keys(script: Path) -> set[str]:
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    _, heading, listing = doc.partition(JSON_KEYS_HEADING)
    assert heading, f"{script.name}'s docstring has no line starting {JSON_KEYS_HEADING!r}"
    keys = set()
    for line in listing.splitlines():
        if line.startswith("* "):
            keys.update(re.findall(r"``(\w+)``", line.split(": ", 1)[0]))
    assert keys, f"{script.name}'s docstring lists no keys after {JSON_KEYS_HEADING!r}"
    return keys
