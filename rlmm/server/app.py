"""The gRPC server: the service, the standard health service and reflection, TLS or mutual TLS, thread
pools per kind of call; and ``run``, the process behind ``rlmm serve``."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from consumers.manager import RemoteLogMetadataManager
from rlmm.errors import ServeError
from rlmm.runtime import stderr_into
from rlmm.server.auth import WriteAuthorization
from rlmm.server.backend import Backend
from rlmm.server.metrics import Metrics
from rlmm.server.reflection import enable_reflection
from rlmm.server.servicer import SERVICE_NAME, RlmmServicer, add_to_server
from rlmm.server.sharing import CommitCounter, RuntimeDir
from rlmm.server.view_check import BackgroundCheck
from rlmm.settings import Settings, join_address, split_address
from rlmm.state.view import View, reset_view

log = logging.getLogger(__name__)

HEALTH_POLL_S = 0.2
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.tls_cert is None:
        return None
    try:
        client_ca = None if settings.tls_client_ca is None else settings.tls_client_ca.read_bytes()
        key, cert = settings.tls_key.read_bytes(), settings.tls_cert.read_bytes()
    except OSError as exc:
        raise ServeError(
            f"cannot read {exc.filename} ({exc.strerror}): check tls_cert, tls_key and tls_client_ca"
        ) from exc
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


class RlmmServer:
    """``RlmmServer(backend, settings).start()``; ``port`` is the bound port, ``stop`` drains.

    ``reuse_port``: share the port with the other workers of ``rlmm serve --workers`` (otherwise a second
    server on the port fails); ``private_socket``: listen there instead, a unix socket in plaintext without
    write authorization, for the secondary workers (which check it themselves)."""

    def __init__(
        self,
        backend: Backend,
        settings: Settings,
        metrics: Metrics | None = None,
        *,
        reuse_port: bool = False,
        private_socket: Path | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._pools = {
            "read": ThreadPoolExecutor(settings.read_threads, "rlmm-read"),
            "stream": ThreadPoolExecutor(settings.stream_threads, "rlmm-stream"),
            "write": ThreadPoolExecutor(settings.write_threads, "rlmm-write"),
        }
        auth = WriteAuthorization()
        if private_socket is None:
            auth = WriteAuthorization(settings.write_subjects, [t.get_secret_value() for t in settings.write_tokens])
            if settings.write_tokens and settings.tls_cert is None:
                log.warning("write tokens are accepted without TLS (write_tokens_over_plaintext): they travel in clear")
        self.servicer = RlmmServicer(
            backend,
            metrics=self.metrics,
            pools=self._pools,
            max_batch_lookups=settings.max_batch_lookups,
            stream_chunk=settings.stream_chunk,
            retry_after_s=settings.retry_after_ms / 1000,
            auth=auth,
        )
        # health answers Watch from the stream pool, so that a watcher never holds a read thread
        self.health = health.HealthServicer(
            experimental_non_blocking=True, experimental_thread_pool=self._pools["stream"]
        )
        self._server = grpc.server(
            self._pools["read"],
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
            options=[("grpc.so_reuseport", int(reuse_port))],
        )
        add_to_server(self.servicer, self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        enable_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), self._server)
        if private_socket is not None:
            self.port = self._server.add_insecure_port(f"unix:{private_socket}")
        else:
            self.port = self._listen(settings)
        self._stopping = threading.Event()
        self._health_thread = threading.Thread(target=self._watch_health, name="rlmm-health", daemon=True)

    def _listen(self, settings: Settings) -> int:
        credentials = server_credentials(settings)
        address = join_address(*split_address(settings.listen))
        # gRPC's core logs a failed bind on stderr itself (E... add_port.cc: ...), before our one line: that
        # line is kept aside, and the cause it names goes into ours
        with tempfile.TemporaryFile() as grpc_says:
            with stderr_into(grpc_says):
                try:
                    port = (
                        self._server.add_secure_port(address, credentials)
                        if credentials is not None
                        else self._server.add_insecure_port(address)
                    )
                except RuntimeError:  # grpcio: "Failed to bind to address ..."
                    port = None
            grpc_says.seek(0)
            said = grpc_says.read().decode(errors="replace")
        if port is None:
            cause = re.search(r"Error in bind for address '[^']*': ([^)\n]+)", said)
            raise ServeError(
                f"cannot listen on {settings.listen} ({cause[1] if cause else 'in use, or not local'}): choose "
                f"another address (--listen, RLMM_LISTEN)"
            )
        sys.stderr.write(said)  # what anything else wrote meanwhile
        return port

    def start(self) -> RlmmServer:
        self._set_health(self.backend.serving())
        self._server.start()
        self._health_thread.start()
        log.info(
            "serving",
            extra={
                "port": self.port,
                "tls": self.settings.tls_cert is not None,
                "mutual_tls": self.settings.tls_client_ca is not None,
                "consumes": self.backend.consumes,
            },
        )
        return self

    def _set_health(self, serving: bool) -> None:
        for service in ("", SERVICE_NAME):
            self.health.set(service, _SERVING if serving else _NOT_SERVING)

    def _watch_health(self) -> None:
        """Health follows the backend: SERVING once the view is open and the consumer runs."""
        serving = None
        while not self._stopping.wait(HEALTH_POLL_S):
            now = self.backend.serving()
            if now != serving:
                failure = None if now else self.backend.failure()
                log.log(
                    logging.ERROR if failure else logging.INFO,
                    "health: %s%s",
                    "SERVING" if now else "NOT_SERVING",
                    f" ({failure})" if failure else "",
                    extra={"serving": now, "failure": failure},
                )
                self._set_health(now)
                serving = now

    def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING at once; refuse new calls and let those in flight finish within ``grace`` seconds."""
        self._stopping.set()
        self.health.enter_graceful_shutdown()
        self._server.stop(self.settings.grace_s if grace is None else grace).wait()
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        log.info("stopped serving")


def run(
    settings: Settings, started: Callable[[dict], None], reset: bool = False, runtime: RuntimeDir | None = None
) -> None:
    """Open the view, start the consumer (with Kafka) and the server, and serve until SIGTERM/SIGINT; then
    drain the calls in flight, stop the consumer, flush and close the view. ``started`` gets the bound
    ports once serving. ``reset``: set the existing view aside and consume the topic again from the start
    into a fresh one, with the same registered partitions. ``runtime``: serve as the primary worker of
    ``rlmm serve --workers`` (the port shared, the secondaries' socket and commit counter there, metrics
    on a loopback port of its own, which the supervisor gathers)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    config = settings.rlmm_config()
    partitions = settings.initial_partitions()
    if reset:
        partitions += reset_view(settings.view)
    counter = None if runtime is None else CommitCounter(runtime.commits)
    with View(
        settings.view,
        sync=settings.sync,
        cache_mb=settings.cache_mb,
        row_cache_mb=settings.row_cache_mb,
        write_buffer_mb=settings.write_buffer_mb,
        on_commit=None if counter is None else counter.bump,
    ) as view:
        if counter is not None:
            counter.primary_opened()
        manager = None if config is None else RemoteLogMetadataManager(view, config, partitions)
        if manager is not None:
            manager.start()
        check = None if not settings.check_mb_per_s else BackgroundCheck(view, settings.check_mb_per_s).start()
        try:
            backend = Backend(view, manager)
            metrics = Metrics()
            metrics.watch(backend)
            servers = [RlmmServer(backend, settings, metrics, reuse_port=runtime is not None).start()]
            if runtime is not None:
                servers.append(RlmmServer(backend, settings, private_socket=runtime.primary_socket).start())
            metrics_port = None
            if settings.metrics_listen is not None:
                host, port = ("127.0.0.1", 0) if runtime is not None else split_address(settings.metrics_listen)
                try:
                    metrics_port = metrics.serve_http(host, port)
                except OSError as exc:
                    _stop_all(servers, 0)
                    raise ServeError(
                        f"cannot serve metrics on {settings.metrics_listen} ({exc.strerror}): choose "
                        f"another address (--metrics-listen, RLMM_METRICS_LISTEN)"
                    ) from exc
            started(
                {
                    "event": "serving",
                    "port": servers[0].port,
                    "metrics_port": metrics_port,
                    "consumes": backend.consumes,
                    "pid": os.getpid(),
                }
            )
            stop.wait()
            log.info("stopping: draining calls in flight", extra={"grace_s": settings.grace_s})
            _stop_all(servers)
        finally:
            if check is not None:
                check.stop()
            if manager is not None:
                manager.close()
            view.flush()
            if counter is not None:
                counter.close()
    log.info("view closed", extra={"view": str(settings.view)})


def _stop_all(servers: list[RlmmServer], grace: float | None = None) -> None:
    """Stop the servers at once, each draining its calls in flight."""
    stopping = [threading.Thread(target=server.stop, args=(grace,)) for server in servers]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join()
