"""The metadata consumer's Kafka client, in a child process.

librdkafka can crash the process it runs in: confluent-kafka 2.16.1 (librdkafka 2.16.0) dies of SIGSEGV when
a Fetch answer names a topic by the zero topic id and carries KIP-951 leader tags (the dev broker's answer for
a topic deleted under the consumer; see docs/operations.md, "The Kafka client crashed"). So the consumer's client
runs in a child process, and the consumer talks to it over a socket pair: ``ConsumerProcess`` has the methods of
confluent-kafka's ``Consumer`` the consumer uses. A crash ends the child only: the call under way raises
``KafkaClientCrashed`` with the signal, and the service goes on answering, NOT_SERVING, with the cause.

Each call is one round trip: the request (method, arguments), then the answer, with the client's callbacks
(errors, statistics, log lines) that fired meanwhile, handed to the parent's callbacks before the call returns,
as confluent-kafka hands them over inside ``poll``. A batch of records crosses as plain tuples.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import Any

from rlmm.errors import KafkaClientCrashed
from rlmm.runtime import die_with_parent

EXIT_WAIT_S = 5.0  # how long a crashed or closed child may take to end before it is killed
CLOSE_TIMEOUT_S = 30.0  # confluent-kafka's close leaves the group and flushes: bounded all the same

ErrorTuple = tuple[int, str, bool, bool]  # code, reason, fatal, retriable
MessageTuple = tuple[int, int, "bytes | None", "ErrorTuple | None"]  # partition, offset, value, error
PartitionTuple = tuple[str, int, int]  # topic, partition, offset
Events = list[tuple[str, Any]]


class FetchedMessage:
    """A record (or a partition's end, or an error) as the child fetched it: ``Message``'s accessors."""

    __slots__ = ("_partition", "_offset", "_value", "_error")

    def __init__(self, fields: MessageTuple) -> None:
        self._partition, self._offset, self._value, error = fields
        self._error = None if error is None else _kafka_error(error)

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> Any:
        return self._error


class ConsumerProcess:
    """A confluent-kafka ``Consumer`` with ``config`` in a child process; ``on_error``, ``on_stats`` and
    ``logger`` get its callbacks in the calling thread."""

    def __init__(
        self,
        config: dict[str, object],
        on_error: Callable[[Any], None],
        on_stats: Callable[[str], None],
    ) -> None:
        settings = dict(config)
        self._logger = settings.pop("logger", None)
        self._on_error, self._on_stats = on_error, on_stats
        ours, theirs = socket.socketpair()
        with ours, theirs:
            # no preexec_fn: it would make subprocess fork() this threaded process and run gRPC's fork handlers
            # in the child, which can abort it before exec; the child sets its death signal itself
            self._process = subprocess.Popen(
                [sys.executable, "-m", "consumers.client_process", str(theirs.fileno()), str(os.getpid())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
            self._conn = Connection(os.dup(ours.fileno()))
        self._closed = False
        try:
            self._call("open", settings)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    def poll(self, timeout: float) -> FetchedMessage | None:
        fields = self._call("poll", timeout)
        return None if fields is None else FetchedMessage(fields)

    def consume(self, num_messages: int, timeout: float) -> list[FetchedMessage]:
        return [FetchedMessage(fields) for fields in self._call("consume", num_messages, timeout)]

    def incremental_assign(self, partitions: Iterable[Any]) -> None:
        self._call("incremental_assign", _partitions(partitions))

    def incremental_unassign(self, partitions: Iterable[Any]) -> None:
        self._call("incremental_unassign", _partitions(partitions))

    def pause(self, partitions: Iterable[Any]) -> None:
        self._call("pause", _partitions(partitions))

    def resume(self, partitions: Iterable[Any]) -> None:
        self._call("resume", _partitions(partitions))

    def seek(self, partition: Any) -> None:
        self._call("seek", _partitions([partition])[0])

    def get_watermark_offsets(self, partition: Any, cached: bool = False) -> tuple[int, int]:
        return self._call("get_watermark_offsets", _partitions([partition])[0], cached)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call("close")
        except KafkaClientCrashed:
            pass  # it ended anyway
        finally:
            self._conn.close()
            self._end_child()

    def _call(self, method: str, *args: object) -> Any:
        try:
            self._conn.send((method, args))
            events, outcome, value = self._conn.recv()
        except (EOFError, OSError):
            self._closed = True
            self._conn.close()
            raise KafkaClientCrashed(self._how_it_ended()) from None
        self._deliver(events)
        if outcome == "raise":
            raise _exception(value)
        return value

    def _deliver(self, events: Events) -> None:
        for kind, payload in events:
            if kind == "log" and self._logger is not None:
                level, msg, args = payload
                self._logger.log(level, msg, *args)
            elif kind == "stats":
                self._on_stats(payload)
            elif kind == "error":
                self._on_error(_kafka_error(payload))

    def _how_it_ended(self) -> str:
        code = self._end_child()
        if code is None:
            return f"the Kafka client's process (pid {self._process.pid}) stopped answering and was killed"
        if code < 0:
            cause = f"was killed by {signal.Signals(-code).name}"
        else:
            cause = f"exited with status {code}"
        return f"the Kafka client (librdkafka) crashed: its process (pid {self._process.pid}) {cause}"

    def _end_child(self) -> int | None:
        """Wait for the child to end; its exit status, or None if it had to be killed."""
        try:
            return self._process.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            return None


def _partitions(partitions: Iterable[Any]) -> list[PartitionTuple]:
    return [(tp.topic, tp.partition, tp.offset) for tp in partitions]


def _kafka_error(fields: ErrorTuple) -> Any:
    from confluent_kafka import KafkaError

    code, reason, fatal, retriable = fields
    return KafkaError(code, reason, fatal=fatal, retriable=retriable)


def _error_fields(error: Any) -> ErrorTuple:
    return error.code(), error.str(), error.fatal(), error.retriable()


def _exception(value: tuple[str, Any]) -> BaseException:
    kind, payload = value
    if kind == "kafka":
        from confluent_kafka import KafkaException

        return KafkaException(_kafka_error(payload))
    return RuntimeError(f"the Kafka client's process: {payload}")


# ---- the child ----------------------------------------------------------------------------------------


class _ChildLog:
    """The client's ``logger`` in the child: its lines go to the parent with the next answer."""

    def __init__(self, events: Events) -> None:
        self._events = events

    def log(self, level: int, msg: str, *args: object) -> None:
        self._events.append(("log", (level, msg, tuple(str(a) for a in args))))


def serve(conn: Connection) -> None:
    """Answer the parent's calls until it closes the client or goes away."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    events: Events = []
    client: Any = None

    def tps(partitions: list[PartitionTuple]) -> list[Any]:
        return [TopicPartition(*fields) for fields in partitions]

    def message(m: Any) -> MessageTuple:
        error = m.error()
        return m.partition(), m.offset(), m.value(), None if error is None else _error_fields(error)

    def carry_out(method: str, args: tuple) -> Any:
        nonlocal client
        if method == "open":
            client = Consumer(
                {
                    **args[0],
                    "logger": _ChildLog(events),
                    "error_cb": lambda error: events.append(("error", _error_fields(error))),
                    "stats_cb": lambda stats: events.append(("stats", stats)),
                }
            )
            return None
        if method == "poll":
            polled = client.poll(*args)
            return None if polled is None else message(polled)
        if method == "consume":
            return [message(m) for m in client.consume(*args)]
        if method in ("incremental_assign", "incremental_unassign", "pause", "resume"):
            return getattr(client, method)(tps(args[0]))
        if method == "seek":
            return client.seek(TopicPartition(*args[0]))
        if method == "get_watermark_offsets":
            return client.get_watermark_offsets(TopicPartition(*args[0]), cached=args[1])
        if method == "close":
            return None if client is None else client.close()
        raise ValueError(f"unknown call {method!r}")

    while True:
        try:
            method, args = conn.recv()
        except EOFError:
            break  # the parent went away: the client goes with it
        try:
            outcome, value = "return", carry_out(method, args)
        except KafkaException as exc:
            outcome, value = "raise", ("kafka", _error_fields(exc.args[0]))
        except Exception as exc:  # answered as raised, as a call in the parent would raise it
            outcome, value = "raise", ("python", f"{type(exc).__name__}: {exc}")
        answer, events[:] = (list(events), outcome, value), []
        conn.send(answer)
        if method == "close":
            break


def main() -> None:
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    die_with_parent(parent)
    # the parent stops the client (close, or by going away): a Ctrl-C to the process group is not for us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    serve(Connection(fd))


if __name__ == "__main__":
    main()
