"""Every error rlmm raises, in one tree under ``RlmmError``.

``kafka_exception`` is the simple name of the exception a Kafka broker would see in the same case (``None``
where Kafka has none); the gRPC server sends it in ``ErrorInfo.metadata["kafka_exception"]`` and the client
gives it back on the error it raises. The builtin bases (``ValueError``, ``TimeoutError``...) are kept where
callers catch by them.

    RlmmError
    ├── WireError, DecodeError                      the wire format: bytes Kafka's reader refuses
    ├── KafkaStateError                             a query Kafka's manager answers with an exception
    │   ├── RemoteResourceNotFound
    │   └── ReplicaNotAvailable
    ├── ViewError                                   the view on disk cannot be used
    │   ├── ViewNotFound, ViewSchemaMismatch, ViewInUse, ViewNotEmpty
    │   └── ViewStorageFailed
    │       └── ViewDamaged
    ├── StateError, SnapshotError                   a snapshot that cannot be used
    ├── ArgumentError                               a malformed request field
    ├── KafkaSideError                              the metadata topic, the broker, the producer
    │   ├── BrokerError, TopicMismatchError, TopicChangedError, ViewOfAnotherTopicError, NotInitializedError
    │   ├── InvalidMetadataError, WriteTimeoutError, WriteFailedError, ServiceStoppedError
    │   ├── RecordTooLargeError
    │   └── ProducerRecoveringError
    ├── ServerError                                 what the gRPC server refuses or cannot do
    │   └── NoKafkaError, ConsumerStoppedError, AccessDenied, ServeError, PrimaryUnavailableError
    ├── CallError                                   a failed call, as the client sees it
    │   ├── NotFoundError (also RemoteResourceNotFound)
    │   ├── UnavailableError
    │   │   └── ReplicaNotAvailableError (also ReplicaNotAvailable)
    │   ├── InvalidArgumentError, RefusedError, AccessDeniedError
    │   └── DeadlineExceededError (also WriteTimeoutError)
    └── DemoError
"""

from __future__ import annotations

from enum import Enum


class RlmmError(Exception):
    kafka_exception: str | None = None


# ---- the wire format ----------------------------------------------------------------------------------


class WireError(RlmmError):
    """A read failed; ``kafka_exception`` is what Kafka's reader throws (BufferUnderflowException...)."""

    kafka_exception: str

    def __init__(self, kafka_exception: str, message: str, position: int) -> None:
        super().__init__(f"{message} (at byte {position})")
        self.kafka_exception = kafka_exception
        self.position = position


class DecodeError(RlmmError, ValueError):
    """Bytes that Kafka's ``RemoteLogMetadataSerde.deserialize`` refuses.

    ``kafka_exception`` / ``kafka_cause`` are the simple class names of the exception Kafka throws and of
    its cause (``None`` when it has none); ``position`` is the byte offset of the failing read, if any.
    """

    kafka_exception: str

    def __init__(
        self,
        message: str,
        kafka_exception: str,
        kafka_cause: str | None = None,
        position: int | None = None,
    ) -> None:
        kafka = kafka_exception if kafka_cause is None else f"{kafka_exception} caused by {kafka_cause}"
        super().__init__(f"{message} [Kafka: {kafka}]")
        self.kafka_exception = kafka_exception
        self.kafka_cause = kafka_cause
        self.position = position


# ---- queries Kafka's manager answers with an exception --------------------------------------------------


class KafkaStateError(RlmmError):
    kafka_exception = "KafkaException"


class RemoteResourceNotFound(KafkaStateError):
    """Partition not assigned, its metadata removed, or an epoch listing names a segment that is gone."""

    kafka_exception = "RemoteResourceNotFoundException"


class ReplicaNotAvailable(KafkaStateError):
    """Partition assigned but its metadata is not loaded up to the assignment-time end offset yet."""

    kafka_exception = "ReplicaNotAvailableException"


# ---- the view on disk ---------------------------------------------------------------------------------


class ViewError(RlmmError):
    """The view cannot be used: missing, of another schema, held by another process, or its storage failed."""


class ViewNotFound(ViewError):
    pass


class ViewSchemaMismatch(ViewError):
    pass


class ViewNotEmpty(ViewError):
    """A bulk load (``View.load``) was asked of a view that already holds state: it fills fresh views only."""


class ViewInUse(ViewError):
    """Another process holds the view's lock (RocksDB opens a view for writing in one process only)."""


class ViewStorageFailed(ViewError):
    """RocksDB failed a read or a write (an I/O error, a full disk): the operation did not happen."""


class ViewDamaged(ViewStorageFailed):
    """RocksDB found the view's files damaged (a block checksum mismatch, a truncated file). Nothing read from
    the view can be trusted any more: it must be restored from a snapshot or rebuilt from the topic."""


# ---- snapshots and requests ---------------------------------------------------------------------------


class StateError(RlmmError, ValueError):
    """A logical state the state machine can never produce (a snapshot is inconsistent)."""


class SnapshotError(RlmmError):
    """A snapshot that cannot be used: the message says which file and why."""


class ArgumentError(RlmmError, ValueError):
    """A request field is malformed (INVALID_ARGUMENT)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


# ---- the Kafka side -----------------------------------------------------------------------------------


class KafkaSideError(RlmmError):
    """The metadata topic, the broker or the producer is not as rlmm needs it."""


class BrokerError(KafkaSideError, RuntimeError):
    """The local development broker could not start or run."""


class TopicMismatchError(KafkaSideError, RuntimeError):
    """The existing metadata topic cannot be used with this configuration. Not retried."""


class TopicChangedError(KafkaSideError, RuntimeError):
    """The metadata topic is no longer the one the view was built from: its offsets went backwards, its
    topic id or its partition count changed, or it was deleted. Applying on would mix two histories."""

    KINDS = ("offsets_backwards", "topic_id_changed", "partition_count_changed", "topic_deleted")

    def __init__(self, kind: str, topic: str, seen: str) -> None:
        super().__init__(
            f"{seen}: {topic!r} is not the topic this view was built from (the broker lost it, or it "
            f"was deleted and created again); the consumer stopped applying so as not to mix two "
            f"histories. Rebuild the view: restore a snapshot built from the topic as it is now (rlmm snapshot "
            f"build, then rlmm snapshot restore), or consume the topic again from the start into a fresh view "
            f"(rlmm serve --reset, rlmm consume --reset)"
        )
        self.kind = kind
        self.seen = seen


class KafkaClientCrashed(KafkaSideError, RuntimeError):
    """The consumer's Kafka client (librdkafka, in its own process) crashed: nothing after the last batch it
    handed over was applied. The consumer goes on with a new client, unless the topic changed
    (``TopicChangedError``) or the client crashed too often; it then stops, and the service goes on answering,
    NOT_SERVING."""


class ViewOfAnotherTopicError(KafkaSideError, RuntimeError):
    """A read or a write sent to a service whose consumer stopped on a ``TopicChangedError`` (``failure``, as
    "TopicChangedError: ..."): only a reset or a restore makes it answer again, so retrying cannot help."""

    def __init__(self, failure: str) -> None:
        super().__init__(
            f"the metadata consumer stopped ({failure}): this server answers no reads nor writes until its view is "
            f"rebuilt"
        )


class NotInitializedError(KafkaSideError, RuntimeError):
    """The metadata topic is not known good yet (or the service stopped)."""

    kafka_exception = "IllegalStateException"


class InvalidMetadataError(KafkaSideError, ValueError):
    """A write Kafka's rules refuse before it is sent (a state the segment cannot go to...)."""

    kafka_exception = "IllegalArgumentException"


class WriteTimeoutError(KafkaSideError, TimeoutError):
    """The write did not complete within remote.log.metadata.consume.wait.ms. The record may have been
    written, and then it will still be applied later."""

    kafka_exception = "TimeoutException"


class WriteFailedError(KafkaSideError, RuntimeError):
    """The broker refused the record: it was not written."""


class RecordTooLargeError(KafkaSideError, ValueError):
    """A write whose record is larger than the producer's ``message.max.bytes``: it was not sent, and never will
    be as it is."""

    kafka_exception = "RecordTooLargeException"


class WriteNotAppliedError(KafkaSideError, RuntimeError):
    """The record was written to the topic, but applying it failed as it fails in Kafka (its handler threw: a
    record of a partition whose metadata DELETE_PARTITION_FINISHED removed...): the view will never hold it.
    ``kafka_exception``: what Kafka throws."""

    def __init__(self, message: str, kafka_exception: str | None) -> None:
        super().__init__(message)
        self.kafka_exception = kafka_exception


class ServiceStoppedError(KafkaSideError, RuntimeError):
    """The service is stopping: the write or registration was not done."""


class NotCaughtUpError(KafkaSideError, RuntimeError):
    """A read that must see writes (``rlmm-read-after``) came before this server applied them: ask again
    later, or another server."""


class ProducerRecoveringError(KafkaSideError, RuntimeError):
    """The producer met a fatal error and is being replaced: the record was not sent (or its delivery is
    unknown); retry it."""

    kafka_exception = "RetriableException"


# ---- the gRPC server ----------------------------------------------------------------------------------


class ServerError(RlmmError):
    """What the gRPC server refuses or cannot do."""


class NoKafkaError(ServerError, RuntimeError):
    """A write or registration sent to a server that serves a view without Kafka."""


class ConsumerStoppedError(ServerError, RuntimeError):
    """A read sent to a server whose consumer stopped for good: its view no longer follows the topic."""


class AccessDenied(ServerError):
    """A write or registration by a caller that write authorization does not list; ``unauthenticated`` when
    the caller gave no identity at all (no listed certificate, no token)."""

    def __init__(self, message: str, *, unauthenticated: bool = False) -> None:
        super().__init__(message)
        self.unauthenticated = unauthenticated


class ServeError(ServerError, RuntimeError):
    """The server cannot start for a reason the operator can fix (an address in use, a missing file)."""


class PrimaryUnavailableError(ServerError, RuntimeError):
    """A secondary worker of ``rlmm serve --workers`` whose primary (the worker that consumes and writes the
    view) does not answer: it refuses reads, which could be stale, and cannot forward writes."""


# ---- a failed call, as the client sees it -------------------------------------------------------------


class CallError(RlmmError):
    """A call that failed: the status code (a ``grpc.StatusCode``), the server's message, and the details it
    gave."""

    def __init__(
        self,
        code: Enum,
        message: str,
        reason: str | None = None,
        kafka_exception: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.kafka_exception = kafka_exception
        self.retry_after_s = retry_after_s


class NotFoundError(CallError, RemoteResourceNotFound):
    """NOT_FOUND: Kafka's RemoteResourceNotFoundException."""


class UnavailableError(CallError):
    """UNAVAILABLE: retried by the client until ``retry_for`` ran out, when retrying can help: the server
    suggested a delay, or the transport failed (no rlmm reason). A server whose consumer stopped for good
    (reason ``CONSUMER_STOPPED``) is not asked again, nor an address where nothing listens (``refused``)
    that the client never reached."""

    @property
    def retryable(self) -> bool:
        return self.reason is None or self.retry_after_s is not None

    @property
    def refused(self) -> bool:
        """The transport found nothing listening at the address (gRPC's "Connection refused")."""
        return self.reason is None and "Connection refused" in self.message


class ReplicaNotAvailableError(UnavailableError, ReplicaNotAvailable):
    """UNAVAILABLE because the partition's metadata is still loading: Kafka's ReplicaNotAvailableException."""


class InvalidArgumentError(CallError, ValueError):
    """INVALID_ARGUMENT: the request is malformed; the message names the field."""


class RefusedError(CallError):
    """FAILED_PRECONDITION: a write Kafka's rules refuse, or a server without Kafka."""


class DeadlineExceededError(CallError, WriteTimeoutError):
    """DEADLINE_EXCEEDED: not applied in time (the write may still be applied later), or the call's deadline."""


class AccessDeniedError(CallError, PermissionError):
    """UNAUTHENTICATED or PERMISSION_DENIED: write authorization does not list this caller."""


# ---- the demo -----------------------------------------------------------------------------------------


class DemoError(RlmmError, RuntimeError):
    """A step of ``rlmm demo`` failed; the message says which and why."""
