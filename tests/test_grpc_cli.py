"""``rlmm serve`` as a process (a TOML file, environment variables and flags; metrics; SIGTERM) and
``rlmm query`` against it; the configuration model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import pytest
from pydantic import ValidationError

from consumers.broker import free_port
from rlmm.client import RlmmClient
from rlmm.records.uuid import uuid_to_str
from rlmm.settings import load_settings
from rlmm.state.view import View
from tests.grpc_support import finished, new_tp, segment

RLMM = [sys.executable, "-m", "rlmm.cli"]


def text(tp) -> str:
    return f"{uuid_to_str(tp.topic_id)}:{tp.topic}:{tp.partition}"


def query(port: int, *args: str) -> tuple[int, object]:
    done = subprocess.run(
        [*RLMM, "query", "--target", f"127.0.0.1:{port}", *args], capture_output=True, text=True, timeout=60
    )
    assert done.stdout, f"rlmm query {' '.join(args)} printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    return done.returncode, json.loads(done.stdout)


def test_serve_query_metrics_and_sigterm(kafka, tmp_path) -> None:
    tp = new_tp("cli")
    topic = f"rlmm-cli-{os.getpid()}-{time.monotonic_ns()}"
    config = tmp_path / "rlmm.toml"
    config.write_text(
        f'view = "{tmp_path / "view"}"\nlisten = "127.0.0.1:1"\nlog_level = "debug"\n'
        f'[kafka]\n"remote.log.metadata.topic.name" = "{topic}"\n'
        f'"remote.log.metadata.topic.num.partitions" = 3\n'
        f'"remote.log.metadata.topic.replication.factor" = 1\n'
    )
    env = {
        **os.environ,
        "RLMM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "RLMM_LOG_LEVEL": "info",
        "RLMM_KAFKA": json.dumps({"remote.log.metadata.topic.min.insync.replicas": "1"}),
    }
    metrics_port = free_port()
    process = subprocess.Popen(
        [
            *RLMM,
            "serve",
            "--config",
            str(config),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            "--partition",
            text(tp),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line, f"rlmm serve ended before serving: {process.communicate(timeout=30)[1][-3000:]}"
        started = json.loads(line)
        assert started["event"] == "serving" and started["consumes"] and started["metrics_port"] == metrics_port
        port = started["port"]
        seg = segment(tp, 0, 99)
        with RlmmClient(f"127.0.0.1:{port}") as rlmm:
            assert rlmm.wait_ready([tp], timeout=30)
            rlmm.add_remote_log_segment_metadata(seg)
            rlmm.update_remote_log_segment_metadata(finished(seg))
        assert query(port, "ready", text(tp)) == (0, True)
        code, found = query(port, "segment", text(tp), "0", "42")
        assert (
            code == 0
            and found["segment_id"] == uuid_to_str(seg.segment_id)
            and found["state"] == "COPY_SEGMENT_FINISHED"
        )
        assert query(port, "segment", text(tp), "1", "42") == (0, None)
        assert query(port, "size", text(tp)) == (0, seg.segment_size_in_bytes)
        assert query(port, "highest-offset", text(tp), "0") == (0, 99)
        assert [s["segment_id"] for s in query(port, "list", text(tp), "--epoch", "0")[1]] == [found["segment_id"]]
        assert query(port, "max-timestamp", text(tp))[1]["segment_id"] == found["segment_id"]
        assert query(port, "next-txn", text(tp), "0", "0") == (0, None)
        assert query(port, "by-timestamp", text(tp), "0", "0")[1]["segment_id"] == found["segment_id"]
        assert query(port, "by-timestamp", text(tp), "0", "0", "--starting-offset", "100") == (0, None)
        assert query(port, "health") == (0, "SERVING")
        code, status = query(port, "status")
        assert code == 0 and status["consumes"] and status["counters"]["applied"] == 2 and status["segments"] == 1
        assert status["version"] == version("rlmm")
        code, error = query(port, "size", text(new_tp("unknown")))
        assert (
            code == 1
            and error["error"] == "NOT_FOUND"
            and error["kafka_exception"] == "RemoteResourceNotFoundException"
        )
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        for line in (
            'rlmm_grpc_requests_total{code="OK",method="AddRemoteLogSegmentMetadata"} 1.0',
            'rlmm_grpc_requests_total{code="NOT_FOUND",method="RemoteLogSize"} 1.0',
            "rlmm_consumed_records_total 2.0",
            "process_resident_memory_bytes ",
            "rlmm_view_segments 1.0",
            "rlmm_quarantined_records 0.0",
            'rlmm_metadata_partition_lag{partition="',
            "rlmm_grpc_request_duration_seconds_bucket",
            'rlmm_view_records_total{result="applied"} 2.0',
            "rlmm_serving 1.0",
            "rlmm_view_disk_bytes",
            'rlmm_view_memory_bytes{kind="memtables"}',
            'rlmm_view_memory_bytes{kind="table_readers"}',
            "rlmm_view_reads_run_again_total 0.0",
            "rlmm_view_reads_holding_commits_total 0.0",
            'rlmm_view_apply_seconds_total{stage="write"}',
            f'rlmm_build_info{{version="{version("rlmm")}"}} 1.0',
        ):
            assert line in scraped, line
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    logs = [json.loads(line) for line in process.stderr.read().splitlines() if line.startswith("{")]
    messages = [line["message"] for line in logs if line["logger"].startswith("rlmm.server")]
    assert messages[0] == "serving" and messages[-3:] == [
        "stopping: draining calls in flight",
        "stopped serving",
        "view closed",
    ]
    assert any(line.get("method") == "AddRemoteLogSegmentMetadata" for line in logs)
    with View(tmp_path / "view") as view:  # flushed and closed; the registration is kept
        assert [s.segment_id for s in view.queries.list_remote_log_segments(tp)] == [seg.segment_id]


def test_settings_come_from_file_then_environment_then_flags(tmp_path, monkeypatch) -> None:
    config = tmp_path / "rlmm.toml"
    config.write_text(
        'view = "/file"\nlisten = "127.0.0.1:1"\ngrace_s = 5\nbootstrap_servers = "file:9092"\n'
        'write_tokens = ["from-file"]\nwrite_tokens_over_plaintext = true\n[kafka]\n'
        '"remote.log.metadata.topic.num.partitions" = 7\n'
        '"remote.log.metadata.consume.all.partitions" = true\n'
    )
    monkeypatch.setenv("RLMM_LISTEN", "127.0.0.1:2")
    monkeypatch.setenv("RLMM_GRACE_S", "6")
    settings = load_settings(config, grace_s=9.5)
    assert (settings.view, settings.listen, settings.grace_s) == (Path("/file"), "127.0.0.1:2", 9.5)
    assert [t.get_secret_value() for t in settings.write_tokens] == ["from-file"] and "from-file" not in repr(settings)
    kafka = settings.rlmm_config()
    assert (kafka.bootstrap_servers, kafka.num_partitions, kafka.assign_all) == ("file:9092", 7, True)
    for bad, problem in (
        (dict(listen="nowhere"), "expected HOST:PORT"),
        (dict(kafka={"remote.log.metadata.nope": "1"}), "unknown setting 'remote.log.metadata.nope'"),
        (dict(tls_cert=tmp_path / "c.pem"), "tls_cert and tls_key go together"),
        (dict(partitions=["x:y"]), "TOPIC_ID:TOPIC:PARTITION"),
    ):
        with pytest.raises(ValidationError, match=problem):
            load_settings(config, **bad)
    monkeypatch.delenv("RLMM_LISTEN")
    monkeypatch.delenv("RLMM_BOOTSTRAP_SERVERS", raising=False)
    assert load_settings(None, view=tmp_path).bootstrap is None  # no Kafka: the view is served read-only
    done = subprocess.run(
        [*RLMM, "serve", "--view", str(tmp_path), "--write-subject", "CN=x"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "write_subjects needs mutual TLS" in done.stderr
    done = subprocess.run(
        [*RLMM, "serve", "--view", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RLMM_WRITE_TOKENS": '["s3cret"]'},
    )
    assert done.returncode == 2 and "write_tokens without TLS would travel in clear" in done.stderr
