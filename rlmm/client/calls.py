"""A typed client of the rlmm gRPC service.

Its reads have the names and signatures of ``rlmm.state.queries.Queries`` and return rlmm's records;
its writes and registrations those of ``consumers.manager.RemoteLogMetadataManager``. Every call has a
deadline (``timeout``); UNAVAILABLE (a partition still loading, a server starting or stopping, a
connection lost) is retried with exponential backoff and jitter, never sooner than the server's
``RetryInfo`` asks, until ``retry_for`` seconds have passed; but a refused connection is retried only
once the client has reached a server at its target (a server restarting): before, nothing listens there
(a wrong address, no server), which waiting does not heal. Other statuses raise at once, as
:class:`CallError` subclasses that are also the matching local exceptions (``NotFoundError`` is a
``RemoteResourceNotFound``, ``ReplicaNotAvailableError`` a ``ReplicaNotAvailable``, ...).

    with RlmmClient("127.0.0.1:50051") as rlmm:
        segment = rlmm.remote_log_segment_metadata(tp, epoch, offset)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from tenacity import Retrying, retry_if_exception, stop_after_delay
from tenacity.wait import wait_base, wait_exponential_jitter

from consumers.watcher import Position
from rlmm.client import convert
from rlmm.errors import (
    AccessDeniedError,
    CallError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    RefusedError,
    ReplicaNotAvailableError,
    UnavailableError,
)
from rlmm.records.model import PartitionDelete, SegmentMetadata, SegmentUpdate, TopicIdPartition
from rlmm.records.serde import decode_value
from rlmm.v1 import service_pb2 as api
from rlmm.v1 import service_pb2_grpc

T = TypeVar("T")
Lookup = tuple[TopicIdPartition, int, int]
# a full batch (the server's 10,000 lookups) answers ~5 MB with long topic names and custom metadata: above
# gRPC's default of 4 MB
MAX_RECEIVE_BYTES = 64 << 20


_ERRORS: dict[grpc.StatusCode, type[CallError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: RefusedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAUTHENTICATED: AccessDeniedError,
    grpc.StatusCode.PERMISSION_DENIED: AccessDeniedError,
}


def error_of(exc: grpc.RpcError) -> CallError:
    """The typed error of a failed call, with the ErrorInfo and RetryInfo details the server sent."""
    reason = kafka = retry = None
    status = rpc_status.from_call(exc) if isinstance(exc, grpc.Call) else None
    for detail in status.details if status is not None else ():
        info, hint = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason, kafka = info.reason, info.metadata.get("kafka_exception")
        elif detail.Unpack(hint):
            retry = hint.retry_delay.ToMilliseconds() / 1000
    code = exc.code()
    kind = ReplicaNotAvailableError if reason == "REPLICA_NOT_AVAILABLE" else _ERRORS.get(code, CallError)
    return kind(code, exc.details() or "", reason, kafka, retry)


class _ServerHint(wait_base):
    """Exponential backoff with jitter, but never shorter than the delay the server suggested."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.backoff = wait_exponential_jitter(multiplier=initial, max=maximum)

    def __call__(self, retry_state) -> float:
        error = retry_state.outcome.exception()
        return max(self.backoff(retry_state), getattr(error, "retry_after_s", None) or 0.0)


class RlmmClient:
    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        root_certificates: bytes | None = None,
        certificate_chain: bytes | None = None,
        private_key: bytes | None = None,
        token: str | None = None,
        timeout: float = 10.0,
        write_timeout: float = 130.0,
        retry_for: float = 30.0,
        backoff: tuple[float, float] = (0.05, 2.0),
        options: Sequence[tuple[str, object]] = (),
    ) -> None:
        """``tls`` (implied by certificates): verify the server with ``root_certificates`` (default: the
        system's); ``certificate_chain`` + ``private_key``: a client certificate for mutual TLS;
        ``token``: a bearer token for writes. ``timeout``/``write_timeout``: each attempt's deadline in
        seconds (writes wait for the topic: remote.log.metadata.consume.wait.ms is 120 s by default)."""
        options = list(options)
        if all(key != "grpc.max_receive_message_length" for key, _ in options):
            options.append(("grpc.max_receive_message_length", MAX_RECEIVE_BYTES))
        if tls or root_certificates or certificate_chain:
            credentials = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = service_pb2_grpc.RemoteLogMetadataServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.target = target
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.retry_for = retry_for
        self._wait = _ServerHint(*backoff)
        self._reached = False  # a server at the target answered a call, or failed it itself

    @classmethod
    def from_files(
        cls, target: str, *, ca: Path | None = None, cert: Path | None = None, key: Path | None = None, **kwargs
    ) -> RlmmClient:
        """Certificates and key read from PEM files."""

        def read(path: Path | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return cls(target, root_certificates=read(ca), certificate_chain=read(cert), private_key=read(key), **kwargs)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RlmmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request, *, timeout: float | None = None) -> T:
        def attempt() -> T:
            try:
                answer = method(request, timeout=timeout or self.timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                error = error_of(exc)
                self._reached |= error.reason is not None or error.code != grpc.StatusCode.UNAVAILABLE
                raise error from None
            self._reached = True
            return answer

        def heals(exc: BaseException) -> bool:
            return isinstance(exc, UnavailableError) and exc.retryable and (self._reached or not exc.refused)

        retrying = Retrying(
            retry=retry_if_exception(heals),
            wait=self._wait,
            stop=stop_after_delay(self.retry_for),
            reraise=True,
        )
        return retrying(attempt)

    # ---- reads -----------------------------------------------------------------------------------------

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch: int, offset: int) -> SegmentMetadata | None:
        response = self._call(self._stub.RemoteLogSegmentMetadata, _lookup(tp, epoch, offset))
        return _segment(response)

    def remote_log_segment_metadata_batch(
        self, lookups: Iterable[Lookup], *, kafka_values: bool = True
    ) -> list[SegmentMetadata | None | CallError]:
        """One answer per (partition, epoch, offset): the segment, None, or the error of that lookup alone
        (``NotFoundError``, ``ReplicaNotAvailableError``). ``kafka_values``: ask in columns and receive
        segments as Kafka's bytes, decoded here (``ColumnarRemoteLogSegmentMetadata``, the cheapest call
        on both sides); otherwise one message per lookup and per segment. The answers are the same, but for
        the tagged fields unknown to Kafka that a segment's records carried (``unknown_tags``), which only
        Kafka's bytes carry."""
        if not kafka_values:
            request = api.BatchRemoteLogSegmentMetadataRequest(lookups=[_lookup(*lookup) for lookup in lookups])
            return [_result(r) for r in self._call(self._stub.BatchRemoteLogSegmentMetadata, request).results]
        known: dict[TopicIdPartition, int] = {}
        columnar = api.ColumnarRemoteLogSegmentMetadataRequest()
        for tp, epoch, offset in lookups:
            index = known.get(tp)
            if index is None:
                index = known[tp] = len(known)
                columnar.partitions.append(_tp(tp))
            columnar.partition_indexes.append(index)
            columnar.leader_epochs.append(epoch)
            columnar.offsets.append(offset)
        response = self._call(self._stub.ColumnarRemoteLogSegmentMetadata, columnar)
        failed = {e.partition_index: _lookup_error(e.error) for e in response.partition_errors}
        return [
            failed[index] if index in failed else decode_value(value) if value else None
            for index, value in zip(columnar.partition_indexes, response.kafka_values)
        ]

    def highest_offset_for_epoch(self, tp: TopicIdPartition, epoch: int) -> int | None:
        response = self._call(
            self._stub.HighestOffsetForEpoch,
            api.HighestOffsetForEpochRequest(topic_id_partition=_tp(tp), leader_epoch=epoch),
        )
        return response.offset if response.HasField("offset") else None

    def list_remote_log_segments(self, tp: TopicIdPartition) -> list[SegmentMetadata]:
        return self._list(api.ListRemoteLogSegmentsRequest(topic_id_partition=_tp(tp)))

    def list_epoch_segments(self, tp: TopicIdPartition, epoch: int) -> list[SegmentMetadata]:
        return self._list(api.ListRemoteLogSegmentsRequest(topic_id_partition=_tp(tp), leader_epoch=epoch))

    def _list(self, request: api.ListRemoteLogSegmentsRequest) -> list[SegmentMetadata]:
        def read_all(request, timeout, metadata) -> list[SegmentMetadata]:
            chunks = self._stub.ListRemoteLogSegments(request, timeout=timeout, metadata=metadata)
            return [convert.segment_metadata_from_pb(s) for chunk in chunks for s in chunk.remote_log_segment_metadata]

        return self._call(read_all, request)

    def remote_log_size(self, tp: TopicIdPartition, epoch: int | None = None) -> int:
        request = api.RemoteLogSizeRequest(topic_id_partition=_tp(tp), leader_epoch=epoch)
        return self._call(self._stub.RemoteLogSize, request).size_in_bytes

    def next_segment_with_txn_index(self, tp: TopicIdPartition, epoch: int, offset: int) -> SegmentMetadata | None:
        request = api.NextSegmentWithTxnIndexRequest(topic_id_partition=_tp(tp), leader_epoch=epoch, offset=offset)
        return _segment(self._call(self._stub.NextSegmentWithTxnIndex, request))

    def max_timestamp(self, tp: TopicIdPartition) -> SegmentMetadata | None:
        return _segment(self._call(self._stub.MaxTimestamp, api.MaxTimestampRequest(topic_id_partition=_tp(tp))))

    def first_segment_with_max_timestamp_at_least(
        self, tp: TopicIdPartition, epoch: int, timestamp: int, starting_offset: int
    ) -> SegmentMetadata | None:
        request = api.FirstSegmentWithMaxTimestampAtLeastRequest(
            topic_id_partition=_tp(tp), leader_epoch=epoch, timestamp_ms=timestamp, starting_offset=starting_offset
        )
        return _segment(self._call(self._stub.FirstSegmentWithMaxTimestampAtLeast, request))

    def is_ready(self, tp: TopicIdPartition) -> bool:
        return self._call(self._stub.IsReady, api.IsReadyRequest(topic_id_partition=_tp(tp))).ready

    def wait_ready(self, partitions: Iterable[TopicIdPartition], timeout: float, poll: float = 0.05) -> bool:
        """Poll IsReady until every partition is ready; False after ``timeout`` seconds."""
        waiting = list(partitions)
        deadline = time.monotonic() + timeout
        while waiting:
            waiting = [tp for tp in waiting if not self.is_ready(tp)]
            if waiting and time.monotonic() >= deadline:
                return False
            if waiting:
                time.sleep(poll)
        return True

    # ---- writes -----------------------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, segment: SegmentMetadata) -> Position | None:
        """The writes return where the record landed (None from a server of an earlier release). They refuse a
        record with tagged fields unknown to Kafka (``unknown_tags``, as a decoded record may hold): the API's
        messages do not carry them, and the record written would lack them."""
        _refuse_unknown_tags(segment)
        request = api.AddRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata=convert.segment_metadata_pb(segment)
        )
        return _position(self._call(self._stub.AddRemoteLogSegmentMetadata, request, timeout=self.write_timeout))

    def update_remote_log_segment_metadata(self, update: SegmentUpdate) -> Position | None:
        _refuse_unknown_tags(update)
        request = api.UpdateRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata_update=convert.segment_update_pb(update)
        )
        return _position(self._call(self._stub.UpdateRemoteLogSegmentMetadata, request, timeout=self.write_timeout))

    def put_remote_partition_delete_metadata(self, delete: PartitionDelete) -> Position | None:
        _refuse_unknown_tags(delete)
        request = api.PutRemotePartitionDeleteMetadataRequest(
            remote_partition_delete_metadata=convert.partition_delete_pb(delete)
        )
        return _position(self._call(self._stub.PutRemotePartitionDeleteMetadata, request, timeout=self.write_timeout))

    def on_partition_leadership_changes(
        self,
        leaders: Iterable[TopicIdPartition],
        followers: Iterable[TopicIdPartition],
        broker_id: int | None = None,
        *,
        full: bool = False,
    ) -> None:
        """Registrations are kept per ``broker_id`` (None: registered without one)."""
        request = api.OnPartitionLeadershipChangesRequest(
            leader_partitions=[_tp(tp) for tp in leaders],
            follower_partitions=[_tp(tp) for tp in followers],
            broker_id=broker_id,
            full=full,
        )
        self._call(self._stub.OnPartitionLeadershipChanges, request)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition], broker_id: int | None = None) -> None:
        request = api.OnStopPartitionsRequest(partitions=[_tp(tp) for tp in partitions], broker_id=broker_id)
        self._call(self._stub.OnStopPartitions, request)

    # ---- operations -------------------------------------------------------------------------------------

    def status(self) -> dict:
        """GetStatus as a JSON-ready dict, field names as in the proto, unset optional fields None."""
        response = self._call(self._stub.GetStatus, api.GetStatusRequest())
        out = {field.name: getattr(response, field.name) for field in response.DESCRIPTOR.fields}
        out["counters"] = dict(response.counters)
        out["metadata_partitions"] = [
            {f.name: _field_value(mp, f) for f in mp.DESCRIPTOR.fields} for mp in response.metadata_partitions
        ]
        return out

    def health(self, service: str = "") -> str:
        """The grpc.health.v1 status of ``service`` ("" is the whole server): SERVING, NOT_SERVING, ..."""
        response = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def _field_value(message, field):
    """A field of a message as JSON: None when an optional field is unset, a list for a repeated one."""
    if field.is_repeated:
        return list(getattr(message, field.name))
    return getattr(message, field.name) if not field.has_presence or message.HasField(field.name) else None


def _refuse_unknown_tags(record: SegmentMetadata | SegmentUpdate | PartitionDelete) -> None:
    if record.unknown_tags:
        raise ValueError(
            f"the {type(record).__name__} carries {len(record.unknown_tags)} tagged field(s) unknown to Kafka, which "
            f"the API's messages do not carry: write it without them (unknown_tags=()), or through "
            f"consumers.manager.RemoteLogMetadataManager, which writes them"
        )


def _position(response) -> Position | None:
    if not response.HasField("position"):
        return None
    return Position(response.position.metadata_partition, response.position.offset)


def _tp(tp: TopicIdPartition):
    return convert.topic_id_partition_pb(tp)


def _lookup(tp: TopicIdPartition, epoch: int, offset: int) -> api.RemoteLogSegmentMetadataRequest:
    return api.RemoteLogSegmentMetadataRequest(topic_id_partition=_tp(tp), leader_epoch=epoch, offset=offset)


def _segment(response) -> SegmentMetadata | None:
    if not response.HasField("remote_log_segment_metadata"):
        return None
    return convert.segment_metadata_from_pb(response.remote_log_segment_metadata)


def _result(result: api.LookupResult) -> SegmentMetadata | None | CallError:
    kind = result.WhichOneof("result")
    if kind == "kafka_value":
        return decode_value(result.kafka_value)
    if kind == "remote_log_segment_metadata":
        return convert.segment_metadata_from_pb(result.remote_log_segment_metadata)
    if kind == "error":
        return _lookup_error(result.error)
    return None


def _lookup_error(error: api.LookupError) -> CallError:
    if error.code == grpc.StatusCode.NOT_FOUND.value[0]:
        return NotFoundError(grpc.StatusCode.NOT_FOUND, error.message, kafka_exception=error.kafka_exception)
    return ReplicaNotAvailableError(grpc.StatusCode.UNAVAILABLE, error.message, kafka_exception=error.kafka_exception)
