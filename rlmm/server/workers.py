"""``rlmm serve --workers N``: a supervisor and N serving processes on one port (SO_REUSEPORT: the kernel
spreads new connections over them).

Worker 0, the primary, is the single-process server (``app.run``): it opens the view for writing, runs the
consumer and the producer, and also listens on a unix socket in the supervisor's private runtime
directory. Workers 1..N-1, the secondaries (``secondary.run_secondary``), read the view as RocksDB
secondary instances and forward writes, registrations and GetStatus to the primary. The supervisor starts
the primary (which picks the port when it is 0), then the secondaries on that port; restarts a worker that
dies (backing off when it dies again soon after starting); forwards SIGTERM/SIGINT to every worker and
waits for them to drain; and serves the workers' metrics in one scrape (``worker_metrics``)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from rlmm.errors import RlmmError, ServeError, ViewError
from rlmm.pid_folders import pid_folder
from rlmm.server.sharing import RuntimeDir
from rlmm.server.worker_metrics import WorkerMetrics, serve_workers_metrics
from rlmm.settings import Settings, join_address, split_address

log = logging.getLogger(__name__)

POLL_S = 0.2
STARTUP_TIMEOUT_S = 300.0  # a primary may upgrade or reset a view before it serves
QUICK_DEATH_S = 10.0  # a worker dying sooner after its start is restarted after a growing delay
BACKOFF_S = (0.5, 30.0)
STOP_MARGIN_S = 60.0  # beyond grace_s, for the consumer to stop and the view to be flushed
RUNTIME_PREFIX = "rlmm-serve-"
MAX_SOCKET_PATH = 107  # bytes of a unix socket's path (sun_path, 108 with its NUL)


@dataclass(slots=True)
class Worker:
    index: int
    process: BaseProcess
    events: Connection  # the supervisor's end of the pipe on which the worker reports
    started_at: float
    metrics_port: int | None = None
    restarts: int = 0
    quick_deaths: int = 0
    restart_at: float | None = None  # when a dead worker is due to start again


def serve_workers(settings: Settings, started: Callable[[dict], None], reset: bool = False) -> None:
    """Serve with ``settings.workers`` processes until SIGTERM/SIGINT; ``started`` gets the "serving" line."""
    runtime = RuntimeDir(_runtime_folder())
    try:
        Supervisor(settings, runtime).run(started, reset)
    finally:
        shutil.rmtree(runtime.root, ignore_errors=True)


def _runtime_folder() -> Path:
    """The supervisor's private runtime folder (0700), ``rlmm-serve-PID`` in the temp folder, made after removing
    those of supervisors that no longer run (killed, they could not remove theirs)."""
    root = pid_folder(Path(tempfile.gettempdir()), RUNTIME_PREFIX)
    socket_path = len(os.fsencode(RuntimeDir(root).primary_socket))
    if socket_path > MAX_SOCKET_PATH:
        raise ServeError(
            f"the workers' runtime folder {root} is too deep: the primary's socket in it would have a path of "
            f"{socket_path} bytes, over the {MAX_SOCKET_PATH} a unix socket allows; set TMPDIR to a shorter folder"
        )
    shutil.rmtree(root, ignore_errors=True)  # an earlier process's of this PID (a container started again)
    try:
        root.mkdir(mode=0o700)
    except OSError as exc:
        raise ServeError(
            f"cannot make the workers' runtime folder {root} ({exc.strerror}): set TMPDIR to a folder of this user's"
        ) from exc
    return root


class Supervisor:
    def __init__(self, settings: Settings, runtime: RuntimeDir) -> None:
        # a plain Settings (load_settings makes a class of its own, which does not pickle), SecretStr kept
        self.settings = Settings.model_construct(**dict(settings))
        self.runtime = runtime
        self.workers: list[Worker] = []
        self._context = multiprocessing.get_context("spawn")
        self._stop = threading.Event()

    def run(self, started: Callable[[dict], None], reset: bool) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        try:
            serving = self._wait_serving(self._start(0, self.settings, reset))
            if serving is None:
                return
            port = serving["port"]
            self.settings = self.settings.model_copy(
                update={"listen": join_address(split_address(self.settings.listen)[0], port)}
            )  # restarts and secondaries bind the port the primary bound
            for index in range(1, self.settings.workers):
                if self._wait_serving(self._start(index, self.settings)) is None:
                    return
            metrics_port = None
            if self.settings.metrics_listen is not None:
                try:
                    metrics_port = serve_workers_metrics(*split_address(self.settings.metrics_listen), self._metrics)
                except OSError as exc:
                    raise ServeError(
                        f"cannot serve metrics on {self.settings.metrics_listen} ({exc.strerror}): choose "
                        f"another address (--metrics-listen, RLMM_METRICS_LISTEN)"
                    ) from exc
            started(
                {
                    "event": "serving",
                    "port": port,
                    "metrics_port": metrics_port,
                    "consumes": self.settings.rlmm_config() is not None,
                    "pid": os.getpid(),
                    "workers": [worker.process.pid for worker in self.workers],
                }
            )
            self._supervise()
        finally:
            self._stop_workers()

    def _start(self, index: int, settings: Settings, reset: bool = False) -> Worker:
        ours, theirs = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_worker, args=(index, settings, self.runtime, reset, theirs), name=f"rlmm-worker-{index}"
        )
        process.start()
        theirs.close()
        worker = Worker(index, process, ours, time.monotonic())
        if index < len(self.workers):
            previous = self.workers[index]
            worker.restarts, worker.quick_deaths = previous.restarts, previous.quick_deaths
            self.workers[index] = worker
        else:
            self.workers.append(worker)
        return worker

    def _wait_serving(self, worker: Worker) -> dict | None:
        """The worker's "serving" line (None when told to stop meanwhile); a worker that fails or ends first
        stops the start (ServeError, or the ``ViewError`` it met, which the command tells as for one process)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            if worker.events.poll(POLL_S):
                event = _receive(worker)
                if event is not None and event["event"] == "serving":
                    worker.metrics_port = event["metrics_port"]
                    return event
                if event is not None and event.get("view_error") is not None:
                    raise event["view_error"]
                raise ServeError((event or {}).get("error") or f"worker {worker.index} ended before serving")
        if self._stop.is_set():
            return None
        raise ServeError(f"worker {worker.index} did not serve within {STARTUP_TIMEOUT_S:g} s")

    def _supervise(self) -> None:
        while not self._stop.is_set():
            live = [w for w in self.workers if w.restart_at is None]
            wait([w.events for w in live] + [w.process.sentinel for w in live], timeout=POLL_S)
            now = time.monotonic()
            for worker in list(self.workers):
                if worker.restart_at is not None:
                    if now >= worker.restart_at and not self._stop.is_set():
                        self._start(worker.index, self.settings)
                    continue
                if worker.events.poll():
                    event = _receive(worker)
                    if event is not None and event["event"] == "serving":
                        worker.metrics_port = event["metrics_port"]
                        log.info("worker %d serves again", worker.index, extra={"worker": worker.index, **event})
                if not worker.process.is_alive():
                    self._died(worker, now)

    def _died(self, worker: Worker, now: float) -> None:
        worker.process.join()
        worker.events.close()
        worker.metrics_port = None
        worker.restarts += 1
        worker.quick_deaths = worker.quick_deaths + 1 if now - worker.started_at < QUICK_DEATH_S else 0
        delay = 0.0 if not worker.quick_deaths else min(BACKOFF_S[0] * 2 ** (worker.quick_deaths - 1), BACKOFF_S[1])
        worker.restart_at = now + delay
        log.error(
            "worker %d (pid %s) died with exit code %s: restarting it in %.1f s",
            worker.index,
            worker.process.pid,
            worker.process.exitcode,
            delay,
            extra={"worker": worker.index, "exit_code": worker.process.exitcode, "restarts": worker.restarts},
        )

    def _stop_workers(self) -> None:
        """SIGTERM to every worker at once; each drains its calls (grace_s) and closes; SIGKILL after that."""
        running = [w.process for w in self.workers if w.restart_at is None and w.process.is_alive()]
        for process in running:
            os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.grace_s + STOP_MARGIN_S
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("worker %s did not stop in time: killed", process.name)
                process.kill()
                process.join()

    def _metrics(self) -> list[WorkerMetrics]:
        return [WorkerMetrics(w.index, w.metrics_port, w.restarts) for w in self.workers]


def _receive(worker: Worker) -> dict | None:
    try:
        return worker.events.recv()
    except (EOFError, OSError):  # it ended
        return None


def _worker(index: int, settings: Settings, runtime: RuntimeDir, reset: bool, events: Connection) -> None:
    """A worker process: the primary (0) or a secondary; reports "serving" (or why it failed) on ``events``."""
    from rlmm.logs import setup_logging
    from rlmm.runtime import tune_process
    from rlmm.server.app import run
    from rlmm.server.secondary import run_secondary

    setup_logging(settings.log_level, settings.log_format)
    for handler in logging.getLogger().handlers:  # which worker wrote a line (a field of the JSON lines)
        handler.addFilter(lambda record: setattr(record, "worker", index) or True)
    tune_process()
    _stop_with_parent()
    try:
        if index == 0:
            run(settings, events.send, reset, runtime)
        else:
            run_secondary(settings, runtime, index, events.send)
    except RlmmError as exc:
        log.error("worker %d failed: %s", index, exc, extra={"worker": index})
        view_error = exc if isinstance(exc, ViewError) else None  # a view in use, damaged...: said as by one process
        events.send({"event": "failed", "error": f"worker {index}: {exc}", "view_error": view_error})
        raise SystemExit(1) from None


def _stop_with_parent() -> None:
    """Stop (as on SIGTERM) when the supervisor is gone, rather than serve on unsupervised."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="rlmm-parent", daemon=True).start()
