"""A process that folds records into a view and answers from it imports no more than that needs: each library
loaded costs its memory for the process's life (OpenSSL's libcrypto, which ``hashlib`` loads, ~3.5 MB; gRPC,
Kafka's client, pydantic, rich... more), and the apply's peak memory is measured with the interpreter in it
(the README's "Performance")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rlmm.compiled import INTERPRETED_ENV

ROOT = Path(__file__).resolve().parents[1]

# libraries that the fold and the view's queries do not use; the service around them imports its own
NOT_IMPORTED = (
    "hashlib",
    "ssl",
    "grpc",
    "google.protobuf",
    "confluent_kafka",
    "pydantic",
    "pydantic_settings",
    "click",
    "rich",
    "prometheus_client",
    "tenacity",
    "fastavro",
    "pyspark",
    "psutil",
    "consumers",
    "snapshots",
    "rlmm.server",
    "rlmm.client",
    "rlmm.settings",
)

_FOLD = """
import json, sys, tempfile
from pathlib import Path
from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.records.serde import encode_value
from rlmm.runtime import tune_process
from rlmm.state.view import View

tune_process()
tp = TopicIdPartition(bytes(range(16)), "t", 0)
with tempfile.TemporaryDirectory() as tmp, View(Path(tmp) / "view") as view:
    with view.batch() as batch:
        batch.assign(tp)
        batch.mark_ready(tp)
        for i in range(100):
            segment_id = bytes([i]) * 16
            started = SegmentMetadata(
                tp, segment_id, i * 10, i * 10 + 9, 0, i, 1, ((0, i * 10),), 100, None,
                SegmentState.COPY_SEGMENT_STARTED,
            )
            finished = SegmentUpdate(tp, segment_id, 1, i, None, SegmentState.COPY_SEGMENT_FINISHED)
            batch.apply(0, 2 * i, encode_value(started))
            batch.apply(0, 2 * i + 1, encode_value(finished))
    found = view.queries.remote_log_segment_metadata(tp, 0, 505)
    listed = sum(1 for _ in view.queries.list_remote_log_segments(tp))
    print(json.dumps({"found": found.start_offset, "listed": listed, "modules": sorted(sys.modules)}))
"""


def test_folding_and_answering_imports_only_what_they_need() -> None:
    # the sources' import chain (the compiled modules import the same); a touched source's check imports no
    # hashlib either (tests/test_compiled_core.py)
    env = {**os.environ, INTERPRETED_ENV: "1"}
    done = subprocess.run(
        [sys.executable, "-c", _FOLD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    out = json.loads(done.stdout)
    assert (out["found"], out["listed"]) == (500, 100)  # it did fold and answer
    loaded = [name for name in NOT_IMPORTED if any(m == name or m.startswith(name + ".") for m in out["modules"])]
    assert not loaded, f"the fold's process imported {loaded}"
