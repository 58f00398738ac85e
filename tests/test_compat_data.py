"""The repository's copy of Kafka's compatibility data is whole and unchanged (tests/compat/SHA256SUMS)."""

from __future__ import annotations

import hashlib
from pathlib import Path

COMPAT = Path(__file__).parent / "compat"


def test_the_compat_copy_matches_its_checksums() -> None:
    listed = {}
    for line in (COMPAT / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.removeprefix("./")] = digest
    present = {str(p.relative_to(COMPAT)) for p in COMPAT.rglob("*") if p.is_file() and p.name != "SHA256SUMS"}
    assert present == set(listed)
    changed = [
        name for name, digest in listed.items() if hashlib.sha256((COMPAT / name).read_bytes()).hexdigest() != digest
    ]
    assert not changed
    assert len([p for p in (COMPAT / "replay-public").iterdir() if (p / "scenario.json").is_file()]) >= 6
