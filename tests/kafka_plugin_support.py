"""Support of the Kafka plugin tests (``tests/test_kafka_plugin_*.py``): real parts only.

* :func:`plugin_build`: the plugin folder (``build/rlmm-kafka-plugin-VERSION``) and the test harness's classes, built
  once per run (by one of pytest-xdist's workers, for all of them) by ``scripts/build_kafka_plugin.py --tests``
  (until that script exists: the harness compiled here with javac, against a plugin folder built already). Where
  Java or Kafka's libs cannot be found the tests skip, and fail when ``CI=true`` (this repository's CI has
  ``../shared/kafka-4.3.1/libs``).
* :class:`Harness`: a JVM running ``io.rlmm.kafka.harness.PluginHarness`` (plugins/kafka/src/test/java), which loads
  the plugin as a broker does (Kafka's ChildFirstClassLoader over the plugin folder, Kafka's
  ClassLoaderAwareRemoteLogMetadataManager around it) and answers JSON commands, one line each.
* :class:`RlmmServe`: a real ``rlmm serve`` process on loopback, on a port of its own that a restart keeps.
* :class:`Pki`: certificates for TLS and mutual TLS (trustme), keys as PKCS#8 PEM as the plugin reads them.
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from consumers.broker import free_port

REPO = Path(__file__).resolve().parent.parent
TEST_SOURCES = REPO / "plugins" / "kafka" / "src" / "test" / "java"
BUILD_SCRIPT = REPO / "scripts" / "build_kafka_plugin.py"
HARNESS_MAIN = "io.rlmm.kafka.harness.PluginHarness"
SLF4J_API = Path("/usr/share/java/slf4j-api.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")  # the plugin's log lines on the harness's stderr
WAIT_S = 120  # only so that a broken part fails the test instead of hanging it


def unavailable(reason: str) -> None:
    """Skip where the tools are missing; in CI (which has them) that is a failure."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the Kafka plugin tests must run)", pytrace=False)
    pytest.skip(reason)


def kafka_libs() -> Path | None:
    """KAFKA_LIBS, else ../shared/kafka-4.3.1/libs beside the repository: a folder with Kafka's storage-api jar."""
    given = os.environ.get("KAFKA_LIBS")
    path = Path(given) if given else REPO.parent / "shared" / "kafka-4.3.1" / "libs"
    return path if path.is_dir() and any(path.glob("kafka-storage-api*.jar")) else None


def java_tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


@dataclasses.dataclass(frozen=True)
class PluginBuild:
    plugin_dir: Path
    tests_classes: Path
    kafka_libs: Path
    java: str

    @property
    def classpath(self) -> str:
        """The harness's class path: its classes, Kafka's libs and slf4j (what a broker has), never the plugin's."""
        parts = [str(self.tests_classes), f"{self.kafka_libs}/*", str(SLF4J_API)]
        if SLF4J_BINDING.is_file():
            parts.append(str(SLF4J_BINDING))
        return os.pathsep.join(parts)


def _compile_harness(javac: str, libs: Path, out: Path) -> Path:
    sources = sorted(str(p) for p in TEST_SOURCES.rglob("*.java"))
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [javac, "--release", "17", "-d", str(out), "-cp", f"{libs}/*{os.pathsep}{SLF4J_API}", *sources],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"javac of the plugin test harness failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return out


_built: list[PluginBuild | BaseException] = []


@pytest.fixture(scope="session")
def built_plugin(tmp_path_factory) -> PluginBuild:
    """The plugin and the harness, built once per session (a test module imports this fixture; the build is kept
    here, as a fixture imported into several modules would run once per module)."""
    if not _built:
        try:
            _built.append(shared_plugin_build(tmp_path_factory))
        except BaseException as exc:  # a skip or failure holds for every module
            _built.append(exc)
    if isinstance(_built[0], BaseException):
        raise _built[0]
    return _built[0]


def shared_plugin_build(tmp_path_factory) -> PluginBuild:
    """One build for the whole run: pytest-xdist's workers share the run's temporary folder (their own ones' parent);
    the first worker to need the plugin builds it there under a lock, the others wait for it and use its copy."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    record = root / "kafka-plugin-build.json"
    with open(root / "kafka-plugin-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            built = json.loads(record.read_text())
            return PluginBuild(
                Path(built["plugin_dir"]), Path(built["tests_classes"]), Path(built["kafka_libs"]), built["java"]
            )
        build = plugin_build(Path(tempfile.mkdtemp(prefix="kafka-plugin-", dir=root)))
        record.write_text(json.dumps({name: str(value) for name, value in dataclasses.asdict(build).items()}))
        return build


def plugin_build(tmp: Path) -> PluginBuild:
    """Build the plugin and the harness (see the module's doc); skip or fail where Java or Kafka's libs are missing."""
    libs = kafka_libs()
    if libs is None:
        unavailable(
            "Kafka's libs not found: set KAFKA_LIBS to a Kafka 4.3.1 libs/ folder (or ../shared/kafka-4.3.1/libs)"
        )
    java, javac = java_tool("java"), java_tool("javac")
    if java is None or javac is None:
        unavailable("no JDK found (java and javac on PATH or in JAVA_HOME/bin)")
    if not SLF4J_API.is_file():
        unavailable(f"{SLF4J_API} not found: install the Debian package libslf4j-java")
    if BUILD_SCRIPT.is_file():
        done = subprocess.run(
            [sys.executable, str(BUILD_SCRIPT), "--tests", "--kafka-libs", str(libs)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.fail(
                f"scripts/build_kafka_plugin.py --tests failed ({done.returncode}):\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
                pytrace=False,
            )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        built = next((line for line in reversed(lines) if "plugin_dir" in line), None)
        if built is None:
            pytest.fail(f"scripts/build_kafka_plugin.py printed no JSON line with plugin_dir:\n{done.stdout[-3000:]}")
        plugin_dir = Path(built["plugin_dir"])
        classes = built.get("tests_classes")
        tests_classes = Path(classes) if classes else _compile_harness(javac, libs, tmp / "harness-classes")
    else:  # until the build script exists: a plugin folder built already, the harness compiled here
        folders = sorted(
            (p for p in (REPO / "build").glob("rlmm-kafka-plugin-*") if p.is_dir() and any(p.glob("*.jar"))),
            key=lambda p: p.stat().st_mtime,
        )
        if not folders:
            pytest.fail(
                "scripts/build_kafka_plugin.py does not exist and no build/rlmm-kafka-plugin-*/ folder holds a jar"
            )
        plugin_dir = folders[-1]
        tests_classes = _compile_harness(javac, libs, tmp / "harness-classes")
    if not (tests_classes / "io" / "rlmm" / "kafka" / "harness" / "PluginHarness.class").is_file():
        pytest.fail(f"the harness was not compiled into {tests_classes}")
    # copies of the session's own: a build running meanwhile (build/ is shared) does not pull them from under the JVMs
    plugin_copy, classes_copy = tmp / plugin_dir.name, tmp / "harness-classes-copy"
    shutil.copytree(plugin_dir, plugin_copy)
    shutil.copytree(tests_classes, classes_copy)
    return PluginBuild(plugin_copy, classes_copy, libs, java)


class HarnessError(AssertionError):
    pass


class Harness:
    """One JVM running the harness: ``call(cmd, **args)`` sends a command and returns its JSON answer."""

    def __init__(self, build: PluginBuild, log: Path) -> None:
        self.build, self.log = build, log
        with log.open("w") as stderr:
            self.process = subprocess.Popen(
                [
                    build.java,
                    "-XX:+UseSerialGC",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                    "-Dorg.slf4j.simpleLogger.showDateTime=true",
                    "-cp",
                    build.classpath,
                    HARNESS_MAIN,
                    "repl",
                    str(build.plugin_dir),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="harness-stdout").start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def send(self, cmd: str, **args: Any) -> None:
        self.process.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.process.stdin.flush()

    def receive(self, timeout: float = WAIT_S) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise HarnessError(f"the harness did not answer within {timeout} s; its log:\n{self.log_tail()}") from None
        if line is None:
            raise HarnessError(f"the harness JVM ended ({self.process.wait()}); its log:\n{self.log_tail()}")
        answer = json.loads(line)
        if "harness_error" in answer:
            raise HarnessError(f"the harness failed: {answer['harness_error']}\nits log:\n{self.log_tail()}")
        return answer

    def call(self, cmd: str, timeout: float = WAIT_S, **args: Any) -> dict:
        self.send(cmd, **args)
        return self.receive(timeout)

    def open(self, id: str, targets: str, broker_id: int | str | None = 1, **config: Any) -> dict:
        """Configure a plugin as a broker would (keys without the ``rlmm.`` prefix); asserts that it worked."""
        answer = self.call("open", id=id, config=plugin_config(targets, broker_id, **config))
        assert answer["ok"], f"the plugin refused its configuration: {answer}\n{self.log_tail()}"
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plugin_config(targets: str | None, broker_id: int | str | None = 1, **config: Any) -> dict:
    """The keys a broker hands over (``rlmm.`` stripped); ``None`` leaves a key out; ``call_timeout_ms`` etc. become
    ``call.timeout.ms``."""
    keys = {"targets": targets, "broker.id": broker_id}
    keys.update({name.replace("_", "."): value for name, value in config.items()})
    return {k: v for k, v in keys.items() if v is not None}


def new_tp(topic: str = "orders", partition: int = 0) -> dict:
    """A user partition as the harness takes it: Kafka's Uuid string (base64url, no padding)."""
    while True:
        raw = os.urandom(16)
        topic_id = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if any(raw) and not topic_id.startswith("-"):
            return {"topic_id": topic_id, "topic": topic, "partition": partition}


def topic_name(prefix: str = "rlmm-plugin") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class RlmmServe:
    """``rlmm serve`` as a real process on 127.0.0.1:``port`` (kept across restarts), over ``view``, consuming
    ``topic`` on the test broker."""

    def __init__(
        self,
        tmp: Path,
        bootstrap_servers: str,
        topic: str,
        num_partitions: int = 3,
        *flags: str,
        env: dict[str, str] | None = None,
        name: str = "rlmm",
    ) -> None:
        self.tmp, self.name = tmp, name
        self.view = tmp / f"view-{name}"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.bootstrap_servers, self.topic, self.num_partitions = bootstrap_servers, topic, num_partitions
        self.flags, self.env = flags, env or {}
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.tmp / f"serve-{self.name}-{self.starts}.log"

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def start(self) -> RlmmServe:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        settings = {
            "topic.name": self.topic,
            "topic.num.partitions": self.num_partitions,
            "topic.replication.factor": 1,
            "topic.min.insync.replicas": 1,
            "consume.wait.ms": 30_000,
        }
        with self.log.open("w") as stderr:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rlmm.cli",
                    "serve",
                    "--view",
                    str(self.view),
                    "--listen",
                    self.address,
                    "--grace-s",
                    "5",
                    "-b",
                    self.bootstrap_servers,
                    *(f"--set=remote.log.metadata.{k}={v}" for k, v in settings.items()),
                    *self.flags,
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={**os.environ, **self.env},
            )
        line = self._first_line(60)
        assert line, f"rlmm serve ended or said nothing within 60 s: {self.log_tail()}"
        self.serving = json.loads(line)
        assert self.serving["port"] == self.port, self.serving
        return self

    def _first_line(self, timeout: float) -> str:
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        try:
            if not selector.select(timeout):
                return ""
        finally:
            selector.close()
        return self.process.stdout.readline()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def terminate(self) -> None:
        """SIGTERM, as an operator stops it (calls in flight finish), and wait for it to end."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RlmmServe:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)  # in case a test paused it
        self.terminate()


class Pki:
    """A test CA, server certificates and client certificates (PKCS#8 keys, as the plugin reads them)."""

    def __init__(self, root: Path) -> None:
        import trustme

        self.root = root
        self.ca, self.other_ca = trustme.CA(), trustme.CA()
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        self.other_ca_file = self._write("other-ca.pem", self.other_ca.cert_pem.bytes())

    def _write(self, name: str, data: bytes) -> Path:
        (self.root / name).write_bytes(data)
        return self.root / name

    def server(self, *names: str, prefix: str = "server") -> tuple[Path, Path]:
        leaf = self.ca.issue_cert(*(names or ("127.0.0.1", "localhost")))
        chain = b"".join(p.bytes() for p in leaf.cert_chain_pems)
        return self._write(f"{prefix}.pem", chain), self._write(f"{prefix}.key", leaf.private_key_pem.bytes())

    def client(self, name: str, issuer: Any = None) -> tuple[Path, Path]:
        """A client certificate with CN=name and its key as PKCS#8 PEM."""
        from cryptography.hazmat.primitives import serialization

        leaf = (issuer or self.ca).issue_cert(f"{name}.clients.test", common_name=name)
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        tag = uuid.uuid4().hex[:6]
        return (
            self._write(f"client-{name}-{tag}.pem", leaf.cert_chain_pems[0].bytes()),
            self._write(f"client-{name}-{tag}.key", pkcs8),
        )


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
