"""docker/Dockerfile and docker/compose.yaml: parsed and checked (Docker does not run in the tests)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
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
    assert json.loads(_instruction("ENTRYPOINT")) == ["tini", "--", "rlmm"]  # an init as PID 1
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


def test_compose_kafka_is_kraft_with_tiered_storage_through_the_rlmm_plugin() -> None:
    kafka = _compose()["services"]["kafka"]
    assert kafka["build"]["dockerfile"] == "docker/kafka.Dockerfile"
    assert kafka["build"]["args"]["KAFKA_IMAGE"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and env["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert env["KAFKA_REMOTE_LOG_STORAGE_SYSTEM_ENABLE"] == "${TIERED_STORAGE:-false}"  # on with a plugin
    assert env["KAFKA_REMOTE_LOG_METADATA_MANAGER_CLASS_NAME"] == "io.rlmm.kafka.RlmmRemoteLogMetadataManager"
    plugin_dir = env["KAFKA_REMOTE_LOG_METADATA_MANAGER_CLASS_PATH"].removesuffix("/*")
    dockerfile = (DOCKER / "kafka.Dockerfile").read_text()
    assert f"COPY --from=plugin {plugin_dir} {plugin_dir}" in dockerfile
    assert "scripts/build_kafka_plugin.py" in dockerfile and "KAFKA_LIBS=/opt/kafka/libs" in dockerfile
    prefix = env["KAFKA_REMOTE_LOG_METADATA_MANAGER_IMPL_PREFIX"]
    assert prefix == "rlmm." and env["KAFKA_RLMM_TARGETS"] == "rlmm:50051"  # the plugin's targets key
    assert "50051:50051" in _compose()["services"]["rlmm"]["ports"][0]
    assert env["KAFKA_REMOTE_LOG_STORAGE_MANAGER_CLASS_NAME"]


def test_compose_commands_are_rlmm_commands() -> None:
    services = _compose()["services"]
    serve = services["rlmm"]["command"]
    _check_args(serve)
    # rlmm creates the topic with Kafka's default partition count (the brokers' plugin writes through it)
    assert "remote.log.metadata.topic.num.partitions=50" in serve
    assert "kafka:19092" in serve
    snapshot = _snapshot_build_args()
    assert snapshot[:2] == ["snapshot", "build"] and "kafka:19092" in snapshot
    _check_args(snapshot)
    _check_args(services["rlmm"]["healthcheck"]["test"][2:])


def _image_env() -> dict[str, str]:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    pairs = [pair for line in text.splitlines() if line.startswith("ENV ") for pair in line.split()[1:]]
    return dict(pair.split("=", 1) for pair in pairs if pair.startswith("RLMM_"))


def test_the_image_default_command_refuses_to_serve_nothing(tmp_path) -> None:
    """The image's CMD with its environment, run outside Docker: without a broker it exits with why, instead
    of serving an empty view as healthy; the health probe's address comes from the environment too."""
    env = _image_env()
    assert env["RLMM_TARGET"].endswith(env["RLMM_LISTEN"].rsplit(":", 1)[1])
    assert "127.0.0.1" not in _instruction("HEALTHCHECK")  # the address is RLMM_TARGET's
    env["RLMM_VIEW"] = str(tmp_path / "view")
    env["RLMM_LISTEN"] = env["RLMM_METRICS_LISTEN"] = "127.0.0.1:0"
    done = subprocess.run(
        [*RLMM, *json.loads(_instruction("CMD"))], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )
    assert done.returncode == 2 and "RLMM_BOOTSTRAP_SERVERS" in done.stderr and "there is none" in done.stderr


def test_compose_keeps_kafka_and_the_view_and_stops_gracefully() -> None:
    compose = _compose()
    services = compose["services"]
    kafka, rlmm = services["kafka"], services["rlmm"]
    compat = json.loads((DOCKER.parent / "tests/compat/replay-public/p01-basic-lifecycle/scenario.json").read_text())
    assert kafka["build"]["args"]["KAFKA_IMAGE"] == f"apache/kafka:{compat['kafka_version']}"
    assert "kafka-data:" + kafka["environment"]["KAFKA_LOG_DIRS"] in kafka["volumes"]
    assert any(v.startswith("rlmm-view:") for v in rlmm["volumes"])
    for name in ("kafka", "rlmm"):
        assert services[name]["restart"] == "unless-stopped"
    grace = float(rlmm["stop_grace_period"].rstrip("s"))
    assert grace > 30  # the server's default drain (grace_s), then the flush
    snapshot_volume = services["snapshot"]["volumes"][0].split(":")[0]
    assert any(v.split(":")[0] == snapshot_volume for v in rlmm["volumes"])  # rlmm can restore what it writes
    assert kafka["environment"]["KAFKA_REMOTE_LOG_STORAGE_SYSTEM_ENABLE"] == "${TIERED_STORAGE:-false}"
    assert kafka["volumes"][0] == "${RSM_PLUGIN_DIR:-./rsm}:/opt/kafka/rsm:ro" and (DOCKER / "rsm").is_dir()


def test_dockerignore_keeps_the_context_small() -> None:
    rules = [
        line.strip()
        for line in (DOCKER.parent / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert {".venv", ".git", "build", "**/*.so", "tests", "plugins/kafka/src/test"} <= set(rules)
    for dockerfile in ("Dockerfile", "kafka.Dockerfile"):
        copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (DOCKER / dockerfile).read_text(), re.M)
        for sources in copied:
            for source in sources.split():
                assert (DOCKER.parent / source).exists() and not _ignored(source, rules), source


def _ignored(path: str, rules: list[str]) -> bool:
    """Whether .dockerignore's rules leave ``path`` out of the context (the last rule that matches wins; ``!``
    takes a path back in)."""
    ignored = False
    for rule in rules:
        pattern = rule.removeprefix("!")
        if path == pattern or path.startswith(f"{pattern}/"):
            ignored = not rule.startswith("!")
    return ignored


def _built_from_the_rlmm_image(service: dict) -> bool:
    return service.get("build", {}).get("dockerfile") == "docker/Dockerfile"


def test_one_init_per_container() -> None:
    """The image's entrypoint is tini: compose's `init: true` would start a second one, which warns on every
    start that it is not PID 1. Kafka's image has none, so compose gives it one."""
    assert json.loads(_instruction("ENTRYPOINT"))[0] == "tini"
    services = _compose()["services"]
    for name, service in services.items():
        if _built_from_the_rlmm_image(service):
            assert "init" not in service, name
            assert service.get("entrypoint", ["tini"])[0] == "tini", name
    assert services["kafka"]["init"] is True


def _snapshot_script() -> str:
    """The snapshot service's shell command, as compose hands it to sh ($$ is compose's escape of $)."""
    snapshot = _compose()["services"]["snapshot"]
    assert snapshot["entrypoint"] == ["tini", "--", "sh", "-c"]
    [script] = snapshot["command"]
    return script.replace("$$", "$")


def _snapshot_build_args() -> list[str]:
    """The arguments of the snapshot service's `rlmm` command (after `rlmm`)."""
    [build] = [part.strip() for part in _snapshot_script().split("&&") if part.strip().startswith("rlmm ")]
    return shlex.split(build)[1:]


def test_the_snapshot_service_writes_a_new_snapshot_on_every_run(tmp_path) -> None:
    """Run twice, the service's command writes two snapshots (the second no longer fails on an --out that
    exists) and points /data/latest at the newest. A real sh runs the command; `rlmm` is a stand-in that
    creates --out and fails where it exists, as `rlmm snapshot build` does (tests/test_snapshot_*.py)."""
    script = _snapshot_script()
    data, bin_dir = tmp_path / "data", tmp_path / "bin"
    data.mkdir()
    bin_dir.mkdir()
    stand_in = bin_dir / "rlmm"
    stand_in.write_text('#!/bin/sh\nwhile [ "$1" != --out ]; do shift; done\nexec mkdir "$2"\n')
    stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for run in range(2):
        if run:
            time.sleep(1.1)  # the snapshots are named by the second
        done = subprocess.run(
            ["sh", "-c", script.replace("/data", str(data))], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0, done.stderr
    snapshots = sorted(p.name for p in data.iterdir() if p.name.startswith("snapshot-"))
    assert len(snapshots) == 2 and all(re.fullmatch(r"snapshot-\d{8}T\d{6}Z", name) for name in snapshots)
    assert os.readlink(data / "latest") == snapshots[-1]  # relative: the same link in both containers


def test_restoring_a_snapshot_into_the_service_is_documented() -> None:
    """docs/operations.md's steps restore what the snapshot service writes into the view the service serves,
    with real rlmm commands, through the volume the service mounts."""
    operations = (DOCKER.parent / "docs" / "operations.md").read_text()
    section = operations.split("### Snapshots with Docker Compose", 1)[1].split("\n#", 1)[0]
    [steps] = re.findall(r"```bash\n(.*?)```", section, re.S)
    services = _compose()["services"]
    rlmm = services["rlmm"]
    view = rlmm["command"][rlmm["command"].index("--view") + 1]
    assert "/data/latest" in _snapshot_script()
    assert any(v.split(":")[:2] == ["snapshot-data", "/data"] for v in rlmm["volumes"])
    assert "--profile snapshot run --rm snapshot" in steps and "stop rlmm" in steps and "start rlmm" in steps
    commands = [line.strip() for line in steps.splitlines() if line.strip().startswith("rlmm ")]
    assert [c.split()[1:3] for c in commands] == [["snapshot", "restore"], ["snapshot", "verify"]]
    for command in commands:
        args = command.split()[1:]
        _check_args(args)
        assert args[2:] == ["/data/latest", "--view", view], command
