"""docker/Dockerfile and docker/compose.yaml: parsed and checked (Docker does not run in the tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parent.parent / "docker"
RLMM = [sys.executable, "-m", "rlmm.cli"]


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _instruction(name: str) -> str:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    found = [line.split(None, 1)[1].strip() for line in text.splitlines() if line.split(None, 1)[:1] == [name]]
    assert len(found) == 1, (name, found)
    return found[0]


def _rlmm_help(*command: str) -> None:
    done = subprocess.run([*RLMM, *command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    assert "Usage:" in done.stdout


def _option_names(*command: str) -> set[str]:
    out = subprocess.run([*RLMM, *command, "--help"], capture_output=True, text=True, timeout=60).stdout
    return set(re.findall(r"(--[a-z][a-z-]*)", out))


def _check_args(args: list[str]) -> None:
    """``args`` (after ``rlmm``) names a real command and only options it has."""
    command = [a for a in args[:2] if not a.startswith("-")]
    if command[:1] == ["snapshot"]:
        command = command[:2]
    else:
        command = command[:1]
    _rlmm_help(*command)
    known = _option_names(*command)
    for arg in args:
        if arg.startswith("--"):
            assert arg.split("=")[0] in known, (command, arg)


def test_dockerfile_base_user_install() -> None:
    assert _instruction("FROM") == "python:3.11-slim"
    user = _instruction("USER")
    assert user not in ("root", "0")
    assert 'RLMM_COMPILE=1 pip install ".${EXTRAS}"' in (DOCKER / "Dockerfile").read_text()  # compiled core
    assert "COPY pyproject.toml setup.py" in (DOCKER / "Dockerfile").read_text()


def test_dockerfile_entrypoint_cmd_and_healthcheck_are_rlmm_commands() -> None:
    assert json.loads(_instruction("ENTRYPOINT")) == ["rlmm"]
    cmd = json.loads(_instruction("CMD"))
    assert cmd[0] == "serve"
    _check_args(cmd)
    health = _instruction("HEALTHCHECK")
    assert "--interval" in health
    probe = json.loads(health.split("CMD", 1)[1].strip())
    assert probe[0] == "rlmm" and probe[1] == "health"
    _check_args(probe[1:])


def test_compose_services_profiles_ports_healthchecks() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) >= {"kafka", "rlmm", "snapshot"}
    assert "profiles" not in services["kafka"] and "profiles" not in services["rlmm"]
    assert services["snapshot"]["profiles"] == ["snapshot"]
    for name in ("kafka", "rlmm"):
        check = services[name]["healthcheck"]
        assert check["test"][0] in ("CMD", "CMD-SHELL") and check["interval"]
    assert "127.0.0.1:50051:50051" in services["rlmm"]["ports"]
    assert "127.0.0.1:9092:9092" in services["kafka"]["ports"]
    assert services["rlmm"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["rlmm"]["healthcheck"]["test"][1:3] == ["rlmm", "health"]


def test_compose_kafka_is_kraft_with_tiered_storage() -> None:
    kafka = _compose()["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and env["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert env["KAFKA_REMOTE_LOG_STORAGE_SYSTEM_ENABLE"] == "true"
    assert env["KAFKA_REMOTE_LOG_METADATA_MANAGER_CLASS_NAME"].endswith("TopicBasedRemoteLogMetadataManager")
    assert env["KAFKA_RLMM_CONFIG_REMOTE_LOG_METADATA_TOPIC_NUM_PARTITIONS"] == 50
    assert env["KAFKA_REMOTE_LOG_STORAGE_MANAGER_CLASS_NAME"]


def test_compose_commands_are_rlmm_commands() -> None:
    services = _compose()["services"]
    serve = services["rlmm"]["command"]
    _check_args(serve)
    # rlmm reads the topic with the partition count Kafka's RLMM creates it with
    kafka_partitions = services["kafka"]["environment"]["KAFKA_RLMM_CONFIG_REMOTE_LOG_METADATA_TOPIC_NUM_PARTITIONS"]
    assert f"remote.log.metadata.topic.num.partitions={kafka_partitions}" in serve
    assert "kafka:19092" in serve
    snapshot = services["snapshot"]["command"]
    assert snapshot[:2] == ["snapshot", "build"]
    _check_args(snapshot)
    _check_args(services["rlmm"]["healthcheck"]["test"][2:])
