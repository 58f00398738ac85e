"""The `rlmm` command line: decode and replay as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

from rlmm.runtime import GC_THRESHOLDS
from tests.kafka_compat import compat_dir, load_records


def rlmm(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlmm.cli", *args], input=stdin, capture_output=True)


def test_decode_hex_lines_gives_kafkas_answers() -> None:
    records = load_records()
    hex_lines = "".join(r["hex"] + "\n" for r in records if r["hex"]).encode()
    result = rlmm("decode", stdin=hex_lines)
    assert result.returncode == 1  # the corpus holds records Kafka refuses
    out = [json.loads(line) for line in result.stdout.splitlines()]
    expected = [r for r in records if r["hex"]]
    assert len(out) == len(expected)
    for line, record in zip(out, expected):
        if record["deserialize_error"] is None:
            assert line["decoded"] == record["decoded"], record["case"]
        else:
            assert line["error"] == record["deserialize_error"]["error"], record["case"]
            assert line["cause"] == record["deserialize_error"].get("cause"), record["case"]
            assert line["message"]


def test_decode_jsonl_keeps_context_and_raw_reads_one_value(tmp_path) -> None:
    events = (compat_dir() / "replay-public" / "p01-basic-lifecycle" / "events.jsonl").read_bytes()
    result = rlmm("decode", "--format", "jsonl", stdin=events)
    assert result.returncode == 0, result.stderr
    first = json.loads(result.stdout.splitlines()[0])
    assert first["metadata_partition"] == 0 and first["offset"] == 0
    assert first["decoded"]["type"] == "RemoteLogSegmentMetadata"

    value = bytes.fromhex(json.loads(events.splitlines()[0])["hex"])
    (tmp_path / "value.bin").write_bytes(value)
    raw = rlmm("decode", "--format", "raw", str(tmp_path / "value.bin"))
    assert raw.returncode == 0
    assert json.loads(raw.stdout)["decoded"] == first["decoded"]


def test_decode_rejects_input_that_is_not_hex() -> None:
    result = rlmm("decode", stdin=b"not hex\n")
    assert result.returncode != 0
    assert b"line 1" in result.stderr


def test_help_of_every_command() -> None:
    for command in ([], ["decode"], ["replay"]):
        result = rlmm(*command, "--help")
        assert result.returncode == 0 and b"Usage" in result.stdout


def test_rlmm_commands_run_with_the_tuned_garbage_collector() -> None:
    probe = (
        "import atexit, gc, sys; from rlmm.cli.main import main; "
        "atexit.register(lambda: print(list(gc.get_threshold()), file=sys.stderr)); main(['decode'])"
    )
    result = subprocess.run([sys.executable, "-c", probe], input=b"", capture_output=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stderr.splitlines()[-1]) == list(GC_THRESHOLDS)
