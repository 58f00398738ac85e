"""How ``rlmm`` commands end: exit codes 0 / 1 / 2, expected failures as one ``error: ...`` line on stderr
that says what to do (no traceback), and the ``--json`` output of ``rlmm health`` and ``rlmm snapshot
verify``. Real view directories, a real server process, real sockets."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient, NewTopic

from consumers import view_state
from consumers.broker import free_port
from consumers.service import parse_partition
from rlmm.cli.main import main
from rlmm.records.canonical import to_canonical
from rlmm.records.partitioner import metadata_partition
from rlmm.records.serde import encode_value
from rlmm.records.uuid import uuid_to_str
from rlmm.state.view import View
from tests.grpc_support import segment
from tests.snapshot_support import live_view, workload_events

RLMM = [sys.executable, "-m", "rlmm.cli"]


def rlmm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RLMM, *args], capture_output=True, text=True, timeout=60)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), prog_name="rlmm")


def one_error_line(stderr: str, *expected: str) -> str:
    """The failure's line: the last line of stderr, ``error: ...``, holding ``expected``; no traceback."""
    assert "Traceback" not in stderr, stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), stderr
    for text in expected:
        assert text in line, (text, line)
    return line


@pytest.fixture
def held_view(tmp_path):
    """A view this process holds open (its RocksDB lock), as a running service would."""
    with View(tmp_path / "held") as view:
        yield view.path


def test_usage_errors_exit_2() -> None:
    for args in (
        ["query", "segment", "not-a-partition", "0", "0"],
        ["snapshot", "build", "--out", "x"],
        ["replay", "/nonexistent"],
        ["serve", "--view", "v", "--listen", "nowhere"],
        ["no-such-command"],
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Error:" in result.stderr and "Traceback" not in result.output


def test_invalid_serve_settings_are_one_line_naming_the_setting(tmp_path) -> None:
    config = tmp_path / "rlmm.toml"
    config.write_text(f'view = "{tmp_path / "v"}"\nlisten = "nowhere"\nno_such_setting = 1\n')
    done = rlmm("serve", "--config", str(config))
    assert done.returncode == 2
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: invalid settings: ") and "listen: expected HOST:PORT, got 'nowhere'" in error
    assert "no_such_setting: Extra inputs are not permitted" in error and "docs/configuration.md" in error


def test_missing_view_and_view_in_use(tmp_path, held_view) -> None:
    result = invoke("quarantine", "--view", str(tmp_path / "nothing"))
    assert result.exit_code == 1
    one_error_line(result.stderr, f"no view at {tmp_path / 'nothing'}", "rlmm serve")
    result = invoke("snapshot", "export", "--view", str(tmp_path / "nothing"), "--out", str(tmp_path / "s"))
    assert result.exit_code == 1
    one_error_line(result.stderr, "no view at")

    for command in (
        ["consume", "--view", str(held_view), "-b", "127.0.0.1:1"],
        ["serve", "--view", str(held_view), "--listen", "127.0.0.1:0"],
    ):
        done = rlmm(*command)
        assert done.returncode == 1, done.stderr
        one_error_line(done.stderr, f"the view {held_view} is in use by another process", "stop it")
    listed = rlmm("quarantine", "--view", str(held_view))  # a view in use can still be read
    assert listed.returncode == 0 and listed.stdout == "" and "0 quarantined record(s)" in listed.stderr


def test_serve_on_a_busy_address_or_without_its_certificate(tmp_path) -> None:
    View(tmp_path / "v").close()  # an existing view, served read-only
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = rlmm("serve", "--view", str(tmp_path / "v"), "--listen", f"127.0.0.1:{port}")
        assert done.returncode == 1
        line = one_error_line(done.stderr, f"cannot listen on 127.0.0.1:{port} (Address already in use)", "--listen")
        assert done.stderr.splitlines() == [line]  # one line: not gRPC's own log of the bind before it
        done = rlmm(
            "serve", "--view", str(tmp_path / "v"), "--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{port}"
        )
        assert done.returncode == 1
        one_error_line(done.stderr, f"cannot serve metrics on 127.0.0.1:{port}", "--metrics-listen")
    done = rlmm(
        "serve",
        "--view",
        str(tmp_path / "v"),
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        str(tmp_path / "missing.pem"),
        "--tls-key",
        str(tmp_path / "missing.key"),
    )
    assert done.returncode == 1
    one_error_line(done.stderr, "cannot read", "missing", "tls_cert")


def test_health_and_query_against_a_server_and_without_one(tmp_path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    done = rlmm("health", "--target", nobody, "--json", "--timeout", "1")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {"address": nobody, "service": "", "status": "UNREACHABLE (UNAVAILABLE)"}
    one_error_line(done.stderr, f"no health answer from {nobody}", "--target")
    done = rlmm("query", "--target", nobody, "--timeout", "1", "--retry-for", "0", "status")
    assert done.returncode == 1 and json.loads(done.stdout)["error"] == "UNAVAILABLE"
    one_error_line(done.stderr, f"UNAVAILABLE: no answer from {nobody}", "--target")
    # nothing listens there: waiting does not heal that, so the query fails at once rather than retrying for
    # --retry-for (rlmm() gives up after 60 s, ten times less)
    done = rlmm("query", "--target", nobody, "--retry-for", "600", "status")
    assert done.returncode == 1 and "Connection refused" in json.loads(done.stdout)["message"]
    one_error_line(done.stderr, f"UNAVAILABLE: no answer from {nobody}", "--target")

    View(tmp_path / "v").close()
    server = subprocess.Popen(
        [*RLMM, "serve", "--view", str(tmp_path / "v"), "--listen", "127.0.0.1:0", "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        target = f"127.0.0.1:{json.loads(server.stdout.readline())['port']}"
        done = rlmm("health", "--target", target, "--json")
        assert (done.returncode, json.loads(done.stdout)) == (
            0,
            {"address": target, "service": "", "status": "SERVING"},
        )
        assert rlmm("health", "--target", target).stdout == "SERVING\n"
        done = rlmm("query", "--target", target, "size", "7Im3pooKyYT3GrJH6It1kQ:clicks:0")
        assert done.returncode == 1 and json.loads(done.stdout)["error"] == "NOT_FOUND"
        one_error_line(done.stderr, "NOT_FOUND: ")
        done = rlmm("query", "--target", target, "ready", "7Im3pooKyYT3GrJH6It1kQ:clicks:0")
        assert (done.returncode, done.stdout, done.stderr) == (0, "false\n", "")  # an answer, not a failure
        # a topic id's text may start with '-' (1 in 64), even with 'h', as the help option does
        for dashed in ("-NOGerR7jhnaq36mImUU6g:clicks:0", "-hOGerR7jhnaq36mImUU6g:clicks:0"):
            done = rlmm("query", "--target", target, "ready", dashed)
            assert (done.returncode, done.stdout, done.stderr) == (0, "false\n", "")
            done = rlmm("query", "segment", dashed, "0", "42", "--target", target)
            assert done.returncode == 1 and json.loads(done.stdout)["error"] == "NOT_FOUND"
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0


def test_snapshot_verify_json_and_exit_codes(tmp_path) -> None:
    events, tps = workload_events(600, seed=5)
    with live_view(events, tps, tmp_path / "live") as view, view.batch() as batch:
        batch.put_consumer_state(view_state.TOPIC_ID, b"AaIbMzBQfiOdjsFwZ+WkJQ")  # as rlmm 0.1 stored it
    exported = invoke(
        "snapshot", "export", "--view", str(tmp_path / "live"), "--out", str(tmp_path / "s"), "--num-partitions", "5"
    )
    assert exported.exit_code == 0 and json.loads(exported.stdout)["topic_id"] == "AaIbMzBQfiOdjsFwZ-WkJQ"
    result = invoke("snapshot", "verify", str(tmp_path / "s"), "--view", str(tmp_path / "live"), "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (0, {"differences": 0, "details": []})
    with View(tmp_path / "live") as view, view.batch() as batch:
        batch.apply(0, 10_000, b"\x00garbage")
    result = invoke("snapshot", "verify", str(tmp_path / "s"), "--view", str(tmp_path / "live"), "--json")
    answer = json.loads(result.stdout)
    assert result.exit_code == 1 and answer["differences"] == len(answer["details"]) == 2
    assert answer["details"][0].startswith("metadata partition 0: snapshot offset")
    # a quarantined record as rlmm quarantine prints it, not a Python repr
    quarantined = answer["details"][1]
    assert quarantined.startswith("quarantine 0/10000: snapshot null, view {")
    shown = json.loads(quarantined.split(", view ", 1)[1])
    assert (shown["metadata_partition"], shown["offset"], shown["hex"]) == (0, 10_000, b"\x00garbage".hex())

    # a partition named as rlmm query takes it, its segment by Kafka's id, the segment in Kafka's canonical form
    tp = tps[0]
    mp = metadata_partition(tp.topic_id, tp.partition, 5)
    added = segment(tp, 10**9, 10**9 + 99)
    with View(tmp_path / "live") as view, view.batch() as batch:
        batch.apply(mp, 20_000, encode_value(added))
    result = invoke("snapshot", "verify", str(tmp_path / "s"), "--view", str(tmp_path / "live"))
    lines = result.stdout.splitlines()
    assert result.exit_code == 1 and json.loads(lines[-1])["differences"] == len(lines) - 1
    about_tp = [line for line in lines if line.startswith("partition ")]
    assert about_tp and all(parse_partition(line.split()[1].removesuffix(":")) == tp for line in about_tp)
    [about_segment] = [line for line in about_tp if " segment " in line]
    assert about_segment.split()[2:5] == ["segment", f"{uuid_to_str(added.segment_id)}:", "snapshot"]
    assert json.loads(about_segment.split(", view ", 1)[1]) == to_canonical(added)

    result = invoke("snapshot", "restore", str(tmp_path / "s"), "--view", str(tmp_path / "live"))
    assert result.exit_code == 1
    one_error_line(result.stderr, "exists and is not empty", "fresh view")
    result = invoke("snapshot", "verify", str(tmp_path / "nothing"), "--view", str(tmp_path / "live"))
    assert result.exit_code == 1
    one_error_line(result.stderr, "no snapshot directory")


def test_replay_and_decode_failures(tmp_path) -> None:
    (tmp_path / "scenario.json").write_text("{}")
    result = invoke("replay", str(tmp_path))
    assert result.exit_code == 1 and result.stdout == ""
    one_error_line(result.stderr, "is not a compat scenario (no 'mode' field)", "events.jsonl")
    result = CliRunner().invoke(main, ["decode"], input="zz\n")
    assert result.exit_code == 1
    one_error_line(result.stderr, "line 1: not a hex record value", "--format")
    binary = tmp_path / "value.bin"  # a real binary record value, given without --format raw
    binary.write_bytes(bytes.fromhex("0100000d6d6574726963735f76322d30") + bytes(range(128, 256)))
    done = rlmm("decode", str(binary))
    assert done.returncode == 1
    one_error_line(done.stderr, "line 1: not a hex record value", "--format raw")


def test_serve_without_kafka_needs_an_existing_view(tmp_path) -> None:
    """Read-only serving of a directory that holds no view would answer nothing, as healthy."""
    done = rlmm("serve", "--view", str(tmp_path / "nothing"), "--listen", "127.0.0.1:0")
    assert done.returncode == 2 and "there is none at" in done.stderr and "--bootstrap-server" in done.stderr
    assert not (tmp_path / "nothing").exists()


def test_exit_codes_are_in_the_help_and_the_readme() -> None:
    assert "Exit codes: 0 success; 1" in invoke("--help").output
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "### Exit codes" in readme


def test_archive_from_an_unreachable_broker_is_one_error_line(tmp_path) -> None:
    """librdkafka's line per failed connection stays out of the way (DEBUG logging); nothing is left."""
    bootstrap = f"127.0.0.1:{free_port()}"
    done = rlmm("archive", "-b", bootstrap, "--out", str(tmp_path / "archive"))
    assert done.returncode == 1
    one_error_line(done.stderr, f"cannot read __remote_log_metadata from {bootstrap}", "check --bootstrap-server")
    assert "rdkafka" not in done.stderr and len(done.stderr.strip().splitlines()) == 2, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_snapshot_build_checks_its_inputs_before_starting_spark(kafka, tmp_path) -> None:
    """An existing --out, an unreachable broker, and an older snapshot of another topic are refused at once."""
    (tmp_path / "taken").mkdir()
    nobody = f"127.0.0.1:{free_port()}"
    events, tps = workload_events(300, seed=5)
    live_view(events, tps, tmp_path / "live").close()
    assert (
        invoke(
            "snapshot",
            "export",
            "--view",
            str(tmp_path / "live"),
            "--out",
            str(tmp_path / "base"),
            "--topic",
            "another-metadata-topic",
            "--num-partitions",
            "5",
        ).exit_code
        == 0
    )
    topic = f"rlmm-test-{free_port()}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 5)])[topic].result()
    for args, expected in [
        (["-b", kafka.bootstrap_servers, "--topic", topic, "--out", str(tmp_path / "taken")], "exists"),
        (["-b", nobody, "--out", str(tmp_path / "s1")], f"cannot read __remote_log_metadata from {nobody}"),
        (
            [
                "-b",
                kafka.bootstrap_servers,
                "--topic",
                topic,
                "--from",
                str(tmp_path / "base"),
                "--out",
                str(tmp_path / "s2"),
            ],
            "is a snapshot of the topic 'another-metadata-topic'",
        ),
    ]:
        done = rlmm("snapshot", "build", *args)
        assert done.returncode == 1
        one_error_line(done.stderr, expected)
        assert "starting Spark" not in done.stderr
    assert not (tmp_path / "s1").exists() and not (tmp_path / "s2").exists()
