"""The hot path of the core runs compiled by mypyc (``setup.py``); compiled and interpreted must agree.

CI installs with a C compiler, so the compiled build is required here: a broken toolchain fails this
test instead of leaving the suite to pass on the slow build.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

from rlmm import compiled
from rlmm.compiled import COMPILED_MODULES, INTERPRETED_ENV, core_build
from rlmm.errors import DecodeError
from rlmm.records.model import PartitionDelete, PartitionDeleteState, SegmentMetadata, SegmentState, SegmentUpdate
from rlmm.records.serde import decode_value
from rlmm.workload import Workload, WorkloadConfig
from tests.kafka_compat import compat_dir

# Replays every public scenario and folds a generated stream into a view, then prints the replay lines
# and a digest of every column family of the view.
_RUN_BOTH = """
import hashlib, json, sys, tempfile
from pathlib import Path
from rlmm.compiled import core_build
from rlmm.replay import replay
from rlmm.state import keys as K
from rlmm.state.view import View
from rlmm.workload import Workload, WorkloadConfig

out = {"build": core_build(), "replays": {d: list(replay(Path(d))) for d in sys.argv[1:]}}
workload = Workload(WorkloadConfig(partitions=12, metadata_partitions=4, seed=21, retained_segments=50))
events = list(workload.events(20_000))
with tempfile.TemporaryDirectory() as tmp, View(Path(tmp) / "view") as view:
    with view.batch() as batch:
        for tp in workload.user_partitions():
            batch.assign(tp)
            batch.mark_ready(tp)
    for i in range(0, len(events), 1_500):
        with view.batch() as batch:
            for e in events[i:i + 1_500]:
                batch.apply(e.metadata_partition, e.offset, e.value)
    digests = {}
    for cf in K.COLUMN_FAMILIES:
        h = hashlib.sha256()
        for key, value in view.items(cf):
            h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
        digests[cf] = h.hexdigest()
    out["view"] = digests
print(json.dumps(out))
"""


def _run(interpreted: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != INTERPRETED_ENV}
    if interpreted:
        env[INTERPRETED_ENV] = "1"
    scenarios = sorted(str(p) for p in (compat_dir() / "replay-public").iterdir() if p.is_dir())
    result = subprocess.run(
        [sys.executable, "-c", _RUN_BOTH, *scenarios], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(result.stdout)


def test_the_core_runs_compiled() -> None:
    expected = "interpreted" if os.environ.get(INTERPRETED_ENV) == "1" else "compiled"
    assert core_build() == expected, (
        f"the core runs {core_build()}: install rlmm where a C compiler is found (RLMM_COMPILE=1 makes a "
        f"missing one an install error), or set {INTERPRETED_ENV}=1 to test the interpreted core"
    )
    for name in COMPILED_MODULES:
        assert Path(importlib.import_module(name).__file__).suffix == (".py" if expected == "interpreted" else ".so"), (
            name
        )


def test_compiled_and_interpreted_cores_agree() -> None:
    compiled, interpreted = _run(interpreted=False), _run(interpreted=True)
    assert (compiled["build"], interpreted["build"]) == ("compiled", "interpreted")
    assert compiled["replays"] and all(compiled["replays"].values())
    assert compiled["replays"] == interpreted["replays"]
    assert compiled["view"] == interpreted["view"]
    assert len(set(compiled["view"].values())) > 5  # the stream filled most column families


def test_records_pickle() -> None:
    records = []
    for event in Workload(WorkloadConfig(partitions=3, seed=2)).events(200):
        try:
            records.append(decode_value(event.value or b""))
        except DecodeError:
            pass  # the workload's invalid records
    kinds = {type(r) for r in records}
    assert {SegmentMetadata, SegmentUpdate} <= kinds
    tp = records[0].tp
    records.append(PartitionDelete(tp, 1, 2, PartitionDeleteState.DELETE_PARTITION_MARKED))
    for record in records:
        unpickled = pickle.loads(pickle.dumps(record))
        assert unpickled == record and type(unpickled) is type(record)
    assert SegmentState.COPY_SEGMENT_FINISHED in {getattr(r, "state", None) for r in records}


def test_a_source_is_taken_as_compiled_by_its_stamp_or_else_its_digest() -> None:
    name = "rlmm.state.keys"
    stat = compiled.source_path(name).stat()
    digest = compiled.source_digest(name)
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    assert compiled._unchanged(name, {**stamp, "crc32": "not read when the stamp matches"})
    assert compiled._unchanged(name, {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns - 1, "crc32": digest})
    assert not compiled._unchanged(name, {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns - 1, "crc32": digest ^ 1})
    assert not compiled._unchanged(name, {"size": stat.st_size + 1, "mtime_ns": stat.st_mtime_ns, "crc32": digest})
    assert not compiled._unchanged(name, digest)  # a record of an older format: stale until reinstalled
    assert not compiled._unchanged(name, {"size": stat.st_size, "mtime_ns": 0, "sha256": "0" * 64})  # likewise


def test_a_touched_source_is_checked_without_hashlib(tmp_path: Path) -> None:
    """A checkout or a stash touches sources without changing them: the compiled core still runs, and the check of
    their digests loads no hashlib (OpenSSL's libcrypto, ~3.7 MB for the process's life)."""
    record = {name: dict(stamp) for name, stamp in json.loads(compiled.SOURCES_RECORD.read_text()).items()}
    for stamp in record.values():
        stamp["mtime_ns"] -= 1  # each source as if touched since the build
    touched = tmp_path / "compiled_sources.json"
    touched.write_text(json.dumps(record))
    probe = """
import json, sys
from pathlib import Path
from rlmm import compiled
compiled.SOURCES_RECORD = Path(sys.argv[1])
print(json.dumps([compiled.stale_modules(), "hashlib" in sys.modules]))
"""
    env = {k: v for k, v in os.environ.items() if k != INTERPRETED_ENV}
    done = subprocess.run([sys.executable, "-c", probe, str(touched)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], False]


def test_an_edited_native_header_leaves_the_compiled_core_stale(tmp_path: Path, monkeypatch) -> None:
    record = json.loads(compiled.SOURCES_RECORD.read_text())
    for header in compiled.NATIVE_HEADERS:
        assert header in record, f"setup.py did not record {header}"
        assert any(
            f"from {header} cimport" in compiled.source_path(name).read_text() for name in compiled.NATIVE_MODULES
        ), f"no native module cimports {header}"
    assert compiled.stale_modules() == []
    header = compiled.NATIVE_HEADERS[0]
    record[header] = {**record[header], "size": record[header]["size"] + 1}
    edited = tmp_path / "compiled_sources.json"
    edited.write_text(json.dumps(record))
    monkeypatch.setattr(compiled, "SOURCES_RECORD", edited)
    assert compiled.stale_modules() == [header]


ENUM_MEMBER_READ = re.compile(r"\b(SegmentState|PartitionDeleteState)\.[A-Z_]+\b")


def test_compiled_modules_read_enum_members_as_constants() -> None:
    """In Python 3.11 a member read from its enum class (``SegmentState.COPY_SEGMENT_FINISHED``) runs
    ``EnumType.__getattr__``, interpreted, ~200 ns: the state machine's few reads per event took 5-6 % of the
    apply's instructions. The compiled modules read rlmm/records/model.py's constants instead."""
    reads = [
        f"{name}:{number}: {line.strip()}"
        for name in COMPILED_MODULES
        if name != "rlmm.records.model"
        for number, line in enumerate(compiled.source_path(name).read_text().splitlines(), 1)
        if ENUM_MEMBER_READ.search(line.split("#")[0])
    ]
    assert not reads, "\n".join(reads)
