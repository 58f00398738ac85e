"""The RemoteLogMetadataService: every call checks and converts its request (``convert``), asks the
backend, and answers. Exceptions become statuses (``errors``) in one place, the wrapper each method
gets in ``RlmmServicer.__init__``, which also records the call's metrics. Nothing a request holds
can make a call fail otherwise than with a status: an unexpected exception is logged and answered
INTERNAL, and the server goes on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from consumers.watcher import Position
from rlmm.client import convert
from rlmm.client.convert import not_negative, partition_of, required
from rlmm.errors import ArgumentError, KafkaStateError, RemoteResourceNotFound
from rlmm.records.model import TopicIdPartition
from rlmm.records.serde import decode_value, encode_value
from rlmm.records.uuid import uuid_to_str
from rlmm.server.answers import SegmentAnswers
from rlmm.server.auth import WriteAuthorization
from rlmm.server.backend import Backend
from rlmm.server.errors import failure_of, internal
from rlmm.server.metrics import Metrics
from rlmm.v1 import service_pb2 as api
from rlmm.v1 import service_pb2_grpc

log = logging.getLogger(__name__)

SERVICE = api.DESCRIPTOR.services_by_name["RemoteLogMetadataService"]
SERVICE_NAME = SERVICE.full_name
WRITES = frozenset(
    {
        "AddRemoteLogSegmentMetadata",
        "UpdateRemoteLogSegmentMetadata",
        "PutRemotePartitionDeleteMetadata",
        "OnPartitionLeadershipChanges",
        "OnStopPartitions",
    }
)
# the reads, which wait for the positions of a ``rlmm-read-after`` header
READS_AFTER = frozenset(method.name for method in SERVICE.methods) - WRITES - {"GetStatus"}
READ_AFTER = "rlmm-read-after"
READ_AFTER_MAX_WAIT_S = 10.0  # the longest a read waits for its positions (less when its deadline is nearer)
DEADLINE_MARGIN_S = 0.05  # a wait ends this long before the call's deadline, to answer why
# the methods whose answers the servicer serializes itself (kept serialized: ``SegmentAnswers``)
SERIALIZED = frozenset({"RemoteLogSegmentMetadata"})
_NOT_FOUND, _UNAVAILABLE = grpc.StatusCode.NOT_FOUND.value[0], grpc.StatusCode.UNAVAILABLE.value[0]


def method_kind(name: str) -> str:
    """Which thread pool serves a method: "write" (waits for the topic), "stream" (paced by the
    client) or "read" (a few index seeks)."""
    if name in WRITES:
        return "write"
    return "stream" if SERVICE.methods_by_name[name].server_streaming else "read"


class Undecodable:
    """A request whose bytes are not the method's message: answered INVALID_ARGUMENT (gRPC itself would
    answer INTERNAL)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _decoder(message_class) -> Callable[[bytes], object]:
    def decode(data: bytes):
        try:
            return message_class.FromString(data)
        except DecodeError as exc:
            return Undecodable(f"not a valid {message_class.DESCRIPTOR.full_name} message ({exc})")

    return decode


def add_to_server(servicer: RlmmServicer, server: grpc.Server) -> None:
    """Register the service's methods (what the generated ``add_..._to_server`` does, with requests that
    fail to decode handed to the servicer as ``Undecodable``, and the answers of ``SERIALIZED`` sent as the
    servicer serialized them)."""
    handlers = {}
    for method in SERVICE.methods:
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_decoder(GetMessageClass(method.input_type)),
            response_serializer=None
            if method.name in SERIALIZED
            else GetMessageClass(method.output_type).SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


class RlmmServicer(service_pb2_grpc.RemoteLogMetadataServiceServicer):
    def __init__(
        self,
        backend: Backend,
        *,
        metrics: Metrics | None = None,
        auth: WriteAuthorization | None = None,
        pools: Mapping[str, Executor] | None = None,
        max_batch_lookups: int = 10_000,
        stream_chunk: int = 500,
        retry_after_s: float = 0.5,
    ) -> None:
        """``pools``: thread pools by method kind (see ``method_kind``); a method whose kind has none runs
        in the server's own pool."""
        self.backend = backend
        self.metrics = metrics or Metrics()
        self.auth = auth or WriteAuthorization()
        self.max_batch_lookups = max_batch_lookups
        self.stream_chunk = stream_chunk
        self.retry_after_s = retry_after_s
        self._segment_answers = SegmentAnswers(api.RemoteLogSegmentMetadataResponse)
        for method in SERVICE.methods:
            wrap = self._streaming if method.server_streaming else self._unary
            behavior = wrap(method.name, getattr(self, method.name))
            pool = (pools or {}).get(method_kind(method.name))
            if pool is not None:
                behavior.experimental_thread_pool = pool  # grpcio's per-method pool (sync server)
            setattr(self, method.name, behavior)

    # ---- status mapping and metrics ---------------------------------------------------------------

    def _abort(self, name: str, exc: Exception, context: grpc.ServicerContext, started: float) -> None:
        failure = failure_of(exc, self.retry_after_s)
        if failure is None:
            log.error("%s failed unexpectedly", name, exc_info=exc, extra={"method": name})
            failure = internal(exc)
        elif name in WRITES:
            log.warning(
                "%s refused: %s",
                name,
                failure.message,
                extra={"method": name, "code": failure.code.name, "peer": context.peer()},
            )
        self.metrics.observe(name, failure.code.name, time.perf_counter() - started)
        context.abort_with_status(failure.status())

    def _wait_read_after(self, context: grpc.ServicerContext) -> None:
        """A read that carries ``rlmm-read-after`` waits, within its deadline, until this server applied those
        positions."""
        positions = read_after(context)
        if positions:
            remaining = context.time_remaining()
            limit = (
                READ_AFTER_MAX_WAIT_S
                if remaining is None
                else min(remaining - DEADLINE_MARGIN_S, READ_AFTER_MAX_WAIT_S)
            )
            self.backend.wait_applied(positions, max(0.0, limit))

    def _unary(self, name: str, behavior: Callable) -> Callable:
        waits = name in READS_AFTER

        def handle(request, context):
            started = time.perf_counter()
            try:
                if isinstance(request, Undecodable):
                    raise ArgumentError("request", request.problem)
                if waits:
                    self._wait_read_after(context)
                response = behavior(request, context)
            except Exception as exc:
                self._abort(name, exc, context, started)
            self.metrics.observe(name, "OK", time.perf_counter() - started)
            return response

        return handle

    def _streaming(self, name: str, behavior: Callable) -> Callable:
        def handle(request, context):
            started = time.perf_counter()
            try:
                if isinstance(request, Undecodable):
                    raise ArgumentError("request", request.problem)
                self._wait_read_after(context)
                yield from behavior(request, context)
            except GeneratorExit:  # the client went away
                self.metrics.observe(name, "CANCELLED", time.perf_counter() - started)
                raise
            except Exception as exc:
                self._abort(name, exc, context, started)
            self.metrics.observe(name, "OK", time.perf_counter() - started)

        return handle

    # ---- reads ----------------------------------------------------------------------------------------

    @property
    def _queries(self):
        return self.backend.queries

    def RemoteLogSegmentMetadata(self, request, context) -> bytes:
        queries = self._queries
        msg, epoch, offset = request.topic_id_partition, request.leader_epoch, request.offset
        name = (msg.topic_id, msg.topic, msg.partition)  # the memo keeps only names of checked partitions
        value = queries.known_segment_value(name, epoch, offset)
        if value is None:
            value = queries.remote_log_segment_value(
                partition_of(request), not_negative(epoch, "leader_epoch"), not_negative(offset, "offset"), name
            )
        return self._segment_answers.answer(value)

    def BatchRemoteLogSegmentMetadata(self, request, context):
        partitions, indexes, epochs, offsets = self._lookups(request.lookups)
        _, answers = self._queries.segment_values(partitions, indexes, epochs, offsets)
        response = api.BatchRemoteLogSegmentMetadataResponse()
        (_add_kafka_values if request.kafka_values else _add_messages)(response.results, answers)
        self.metrics.lookups.inc(len(answers))
        return response

    def _lookups(self, lookups) -> tuple[list[TopicIdPartition], list[int], list[int], list[int]]:
        """The distinct partitions of a batch's checked lookups, and the lookups in columns: index of
        the partition, leader epoch, offset."""
        self._check_batch_size("lookups", len(lookups))
        partitions: list[TopicIdPartition] = []
        known: dict[tuple[str, str, int], int] = {}
        indexes: list[int] = []
        for i, lookup in enumerate(lookups):
            raw = lookup.topic_id_partition
            key = (raw.topic_id, raw.topic, raw.partition)
            index = known.get(key)
            if index is None:
                index = known[key] = len(partitions)
                partitions.append(partition_of(lookup, f"lookups[{i}]"))
            indexes.append(index)
        epochs, offsets = [lookup.leader_epoch for lookup in lookups], [lookup.offset for lookup in lookups]
        _not_negative_column(epochs, "lookups[{}].leader_epoch", offsets, "lookups[{}].offset")
        return partitions, indexes, epochs, offsets

    def _check_batch_size(self, field: str, size: int) -> None:
        if size > self.max_batch_lookups:
            raise ArgumentError(
                field,
                f"{size} lookups, more than the {self.max_batch_lookups} this server "
                f"answers in one call: split the batch",
            )

    def ColumnarRemoteLogSegmentMetadata(self, request, context):
        indexes, epochs, offsets = list(request.partition_indexes), list(request.leader_epochs), list(request.offsets)
        if not len(indexes) == len(epochs) == len(offsets):
            raise ArgumentError(
                "partition_indexes",
                f"partition_indexes, leader_epochs and offsets must have one "
                f"element per lookup, but have {len(indexes)}, {len(epochs)} and {len(offsets)}",
            )
        self._check_batch_size("partition_indexes", len(indexes))
        partitions = convert.partitions(request.partitions, "partitions")
        if indexes and max(indexes) >= len(partitions):
            at = next(i for i, index in enumerate(indexes) if index >= len(partitions))
            raise ArgumentError(
                f"partition_indexes[{at}]", f"{indexes[at]} is no index of the {len(partitions)} partitions"
            )
        _not_negative_column(epochs, "leader_epochs[{}]", offsets, "offsets[{}]")
        tpids, answers = self._queries.segment_values(partitions, indexes, epochs, offsets)
        response = api.ColumnarRemoteLogSegmentMetadataResponse()
        response.kafka_values.extend([answer if type(answer) is bytes else b"" for answer in answers])
        for index, tpid in enumerate(tpids):
            if type(tpid) is not bytes:
                error = response.partition_errors.add(partition_index=index)
                _set_error(error.error, tpid)
        self.metrics.lookups.inc(len(answers))
        return response

    def HighestOffsetForEpoch(self, request, context):
        tp = partition_of(request)
        return api.HighestOffsetForEpochResponse(
            offset=self._queries.highest_offset_for_epoch(tp, not_negative(request.leader_epoch, "leader_epoch"))
        )

    def ListRemoteLogSegments(self, request, context) -> Iterator[api.ListRemoteLogSegmentsResponse]:
        tp = partition_of(request)
        if request.HasField("leader_epoch"):
            segments = iter(self._queries.list_epoch_segments(tp, not_negative(request.leader_epoch, "leader_epoch")))
        else:
            segments = self._queries.list_remote_log_segments(tp)  # checks the partition, then streams its scan
        chunk = api.ListRemoteLogSegmentsResponse()
        for segment in segments:
            convert.fill_segment_metadata(chunk.remote_log_segment_metadata.add(), segment)
            if len(chunk.remote_log_segment_metadata) == self.stream_chunk:
                yield chunk
                chunk = api.ListRemoteLogSegmentsResponse()
        if chunk.remote_log_segment_metadata:
            yield chunk

    def RemoteLogSize(self, request, context):
        tp = partition_of(request)
        epoch = not_negative(request.leader_epoch, "leader_epoch") if request.HasField("leader_epoch") else None
        return api.RemoteLogSizeResponse(size_in_bytes=self._queries.remote_log_size(tp, epoch))

    def NextSegmentWithTxnIndex(self, request, context):
        tp = partition_of(request)
        segment = self._queries.next_segment_with_txn_index(
            tp, not_negative(request.leader_epoch, "leader_epoch"), not_negative(request.offset, "offset")
        )
        return convert.with_segment(api.NextSegmentWithTxnIndexResponse(), segment)

    def MaxTimestamp(self, request, context):
        return convert.with_segment(api.MaxTimestampResponse(), self._queries.max_timestamp(partition_of(request)))

    def FirstSegmentWithMaxTimestampAtLeast(self, request, context):
        tp = partition_of(request)
        segment = self._queries.first_segment_with_max_timestamp_at_least(
            tp,
            not_negative(request.leader_epoch, "leader_epoch"),
            request.timestamp_ms,
            not_negative(request.starting_offset, "starting_offset"),
        )
        return convert.with_segment(api.FirstSegmentWithMaxTimestampAtLeastResponse(), segment)

    def IsReady(self, request, context):
        return api.IsReadyResponse(ready=self._queries.is_ready(partition_of(request)))

    # ---- writes -----------------------------------------------------------------------------------------

    def AddRemoteLogSegmentMetadata(self, request, context):
        self.auth.check(context)
        field = "remote_log_segment_metadata"
        segment = _encodable(convert.segment_metadata(required(request, field, ""), field), field)
        position = self.backend.manager().add_remote_log_segment_metadata(segment)
        log.info("added segment", extra={"method": "AddRemoteLogSegmentMetadata", "segment": _describe(segment)})
        return api.AddRemoteLogSegmentMetadataResponse(position=_position(position))

    def UpdateRemoteLogSegmentMetadata(self, request, context):
        self.auth.check(context)
        field = "remote_log_segment_metadata_update"
        update = _encodable(convert.segment_update(required(request, field, ""), field), field)
        position = self.backend.manager().update_remote_log_segment_metadata(update)
        log.info("updated segment", extra={"method": "UpdateRemoteLogSegmentMetadata", "segment": _describe(update)})
        return api.UpdateRemoteLogSegmentMetadataResponse(position=_position(position))

    def PutRemotePartitionDeleteMetadata(self, request, context):
        self.auth.check(context)
        field = "remote_partition_delete_metadata"
        delete = _encodable(convert.partition_delete(required(request, field, ""), field), field)
        position = self.backend.manager().put_remote_partition_delete_metadata(delete)
        log.info(
            "partition delete state",
            extra={
                "method": "PutRemotePartitionDeleteMetadata",
                "partition": str(delete.tp),
                "state": delete.state.name,
            },
        )
        return api.PutRemotePartitionDeleteMetadataResponse(position=_position(position))

    def OnPartitionLeadershipChanges(self, request, context):
        self.auth.check(context)
        leaders = convert.partitions(request.leader_partitions, "leader_partitions")
        followers = convert.partitions(request.follower_partitions, "follower_partitions")
        broker_id = _broker_id(request)
        self.backend.manager().on_partition_leadership_changes(leaders, followers, broker_id, full=request.full)
        log.info(
            "partitions registered",
            extra={
                "method": "OnPartitionLeadershipChanges",
                "leaders": len(leaders),
                "followers": len(followers),
                "broker_id": broker_id,
                "full": request.full,
            },
        )
        return api.OnPartitionLeadershipChangesResponse()

    def OnStopPartitions(self, request, context):
        self.auth.check(context)
        stopped = convert.partitions(request.partitions, "partitions")
        broker_id = _broker_id(request)
        self.backend.manager().on_stop_partitions(stopped, broker_id)
        log.info(
            "partitions stopped",
            extra={"method": "OnStopPartitions", "partitions": len(stopped), "broker_id": broker_id},
        )
        return api.OnStopPartitionsResponse()

    # ---- operations -----------------------------------------------------------------------------------

    def GetStatus(self, request, context):
        status = self.backend.status()
        return api.GetStatusResponse(
            serving=status.serving,
            consumes=status.consumes,
            failure=status.failure or "",
            metadata_partitions=[
                api.MetadataPartitionStatus(
                    partition=mp.partition,
                    applied_offset=mp.applied_offset,
                    end_offset=mp.end_offset,
                    lag=mp.lag,
                    not_ready_partitions=mp.not_ready_partitions,
                    not_ready_reason=mp.not_ready_reason,
                    not_ready_examples=mp.not_ready_examples,
                )
                for mp in status.metadata_partitions
            ],
            quarantined=status.quarantined,
            registered_partitions=status.registered_partitions,
            loading_partitions=status.loading_partitions,
            counters=status.counters,
            segments=status.segments,
            version=status.version,
        )


def _add_messages(results, answers: list[bytes | None | KafkaStateError]) -> None:
    """One result per answer, a segment as a RemoteLogSegmentMetadata message."""
    add, fill = results.add, convert.fill_segment_metadata
    for answer in answers:
        result = add()
        if isinstance(answer, bytes):
            fill(result.remote_log_segment_metadata, decode_value(answer))
        elif answer is not None:
            _set_error(result.error, answer)


def _add_kafka_values(results, answers: list[bytes | None | KafkaStateError]) -> None:
    """One result per answer, a segment as its Kafka value."""
    add = results.add
    for answer in answers:
        if isinstance(answer, bytes):
            add().kafka_value = answer
        elif answer is None:
            add()
        else:
            _set_error(add().error, answer)


def _not_negative_column(*columns) -> None:
    """``columns``: (values, field name pattern) pairs; refuse the first negative value of each."""
    for values, field in zip(columns[::2], columns[1::2]):
        if values and min(values) < 0:
            at = next(i for i, value in enumerate(values) if value < 0)
            not_negative(values[at], field.format(at))


def _set_error(error: api.LookupError, exc: KafkaStateError) -> None:
    error.code = _NOT_FOUND if isinstance(exc, RemoteResourceNotFound) else _UNAVAILABLE
    error.message, error.kafka_exception = str(exc), exc.kafka_exception


def _encodable(record, field: str):
    """Refuse values Kafka's wire format cannot carry (the manager would fail on them later)."""
    try:
        encode_value(record)
    except ValueError as exc:
        raise ArgumentError(field, str(exc)) from None
    return record


def _position(position: Position | None) -> api.WritePosition | None:
    return None if position is None else api.WritePosition(metadata_partition=position[0], offset=position[1])


def _broker_id(request) -> int | None:
    return not_negative(request.broker_id, "broker_id") if request.HasField("broker_id") else None


def read_after(context: grpc.ServicerContext) -> dict[int, int] | None:
    """The positions of the request's ``rlmm-read-after`` header (metadata partition -> highest offset), if any."""
    value = next((v for k, v in context.invocation_metadata() if k == READ_AFTER), None)
    if value is None:
        return None
    positions: dict[int, int] = {}
    for item in value.split(","):
        mp, _, offset = item.strip().partition(":")
        if not (mp.isdigit() and offset.isdigit()):
            raise ArgumentError(
                READ_AFTER, f"{item.strip()!r} is not METADATA_PARTITION:OFFSET (the header is a comma-separated list)"
            )
        positions[int(mp)] = max(int(offset), positions.get(int(mp), 0))
    return positions


def _describe(record) -> str:
    return f"{record.tp.topic}-{record.tp.partition}/{uuid_to_str(record.segment_id)}:{record.state.name}"
