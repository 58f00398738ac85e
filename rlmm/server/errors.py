"""Exceptions of the view, the manager and the request checks, as gRPC statuses.

Each status carries a message that says what is wrong, and in its details (the standard
``grpc-status-details-bin``, a ``google.rpc.Status``) an ``ErrorInfo`` whose reason names the case and
whose metadata names the Kafka exception, plus a ``RetryInfo`` where retrying later can succeed.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from rlmm.errors import (
    AccessDenied,
    ArgumentError,
    CallError,
    ConsumerStoppedError,
    InvalidMetadataError,
    NoKafkaError,
    NotCaughtUpError,
    NotInitializedError,
    PrimaryUnavailableError,
    ProducerRecoveringError,
    RecordTooLargeError,
    RemoteResourceNotFound,
    ReplicaNotAvailable,
    RlmmError,
    ServiceStoppedError,
    TopicChangedError,
    ViewDamaged,
    ViewOfAnotherTopicError,
    ViewStorageFailed,
    WriteFailedError,
    WriteNotAppliedError,
    WriteTimeoutError,
)

DOMAIN = "rlmm.v1"


@dataclass(frozen=True, slots=True)
class Failure:
    code: grpc.StatusCode
    reason: str
    message: str
    kafka_exception: str | None = None
    retry_after_s: float | None = None

    def status(self) -> grpc.Status:
        info = error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN)
        if self.kafka_exception:
            info.metadata["kafka_exception"] = self.kafka_exception
        details = status_pb2.Status(code=self.code.value[0], message=self.message)
        details.details.add().Pack(info)
        if self.retry_after_s is not None:
            delay = duration_pb2.Duration()
            delay.FromMilliseconds(round(self.retry_after_s * 1000))
            details.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        return rpc_status.to_status(details)


# exception type -> (code, reason, retryable)
_KNOWN: tuple[tuple[type[RlmmError], grpc.StatusCode, str, bool], ...] = (
    (ArgumentError, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", False),
    (RemoteResourceNotFound, grpc.StatusCode.NOT_FOUND, "REMOTE_RESOURCE_NOT_FOUND", False),
    (ReplicaNotAvailable, grpc.StatusCode.UNAVAILABLE, "REPLICA_NOT_AVAILABLE", True),
    (InvalidMetadataError, grpc.StatusCode.FAILED_PRECONDITION, "INVALID_METADATA", False),
    (NotInitializedError, grpc.StatusCode.UNAVAILABLE, "METADATA_TOPIC_NOT_READY", True),
    (ServiceStoppedError, grpc.StatusCode.UNAVAILABLE, "SERVER_STOPPING", True),
    (WriteTimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED, "WRITE_NOT_APPLIED_IN_TIME", False),
    (WriteFailedError, grpc.StatusCode.FAILED_PRECONDITION, "WRITE_REFUSED_BY_BROKER", False),
    (RecordTooLargeError, grpc.StatusCode.INVALID_ARGUMENT, "RECORD_TOO_LARGE", False),
    (WriteNotAppliedError, grpc.StatusCode.FAILED_PRECONDITION, "WRITE_REFUSED_WHEN_APPLIED", False),
    (NoKafkaError, grpc.StatusCode.FAILED_PRECONDITION, "NO_KAFKA", False),
    (ConsumerStoppedError, grpc.StatusCode.UNAVAILABLE, "CONSUMER_STOPPED", False),
    (ProducerRecoveringError, grpc.StatusCode.UNAVAILABLE, "PRODUCER_RECOVERING", True),
    (TopicChangedError, grpc.StatusCode.FAILED_PRECONDITION, "METADATA_TOPIC_CHANGED", False),
    (ViewOfAnotherTopicError, grpc.StatusCode.FAILED_PRECONDITION, "METADATA_TOPIC_CHANGED", False),
    (ViewDamaged, grpc.StatusCode.DATA_LOSS, "VIEW_DAMAGED", False),
    (ViewStorageFailed, grpc.StatusCode.UNAVAILABLE, "VIEW_STORAGE_FAILED", True),
    (PrimaryUnavailableError, grpc.StatusCode.UNAVAILABLE, "PRIMARY_UNAVAILABLE", True),
    (NotCaughtUpError, grpc.StatusCode.UNAVAILABLE, "NOT_CAUGHT_UP", True),
)


def failure_of(exc: BaseException, retry_after_s: float) -> Failure | None:
    """The status for an expected exception; None for anything else (a bug: INTERNAL)."""
    if isinstance(exc, AccessDenied):
        code = grpc.StatusCode.UNAUTHENTICATED if exc.unauthenticated else grpc.StatusCode.PERMISSION_DENIED
        return Failure(code, code.name, str(exc))
    if isinstance(exc, CallError):  # a call forwarded to the primary worker: its answer as it is
        code = exc.code if isinstance(exc.code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
        return Failure(code, exc.reason or code.name, exc.message, exc.kafka_exception, exc.retry_after_s)
    for kind, code, reason, retryable in _KNOWN:
        if isinstance(exc, kind):
            message = str(exc)
            if retryable:
                message += f" (retry in {retry_after_s:g} s or later)"
            return Failure(code, reason, message, exc.kafka_exception, retry_after_s if retryable else None)
    return None


def internal(exc: BaseException) -> Failure:
    return Failure(
        grpc.StatusCode.INTERNAL, "INTERNAL", f"internal error ({type(exc).__name__}); the server logged it and goes on"
    )
