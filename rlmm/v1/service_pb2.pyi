from rlmm.v1 import metadata_pb2 as _metadata_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch", "offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    leader_epoch: int
    offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class RemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _metadata_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class BatchRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("lookups", "kafka_values")
    LOOKUPS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_VALUES_FIELD_NUMBER: _ClassVar[int]
    lookups: _containers.RepeatedCompositeFieldContainer[RemoteLogSegmentMetadataRequest]
    kafka_values: bool
    def __init__(self, lookups: _Optional[_Iterable[_Union[RemoteLogSegmentMetadataRequest, _Mapping]]] = ..., kafka_values: _Optional[bool] = ...) -> None: ...

class BatchRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[LookupResult]
    def __init__(self, results: _Optional[_Iterable[_Union[LookupResult, _Mapping]]] = ...) -> None: ...

class LookupResult(_message.Message):
    __slots__ = ("remote_log_segment_metadata", "error", "kafka_value")
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KAFKA_VALUE_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _metadata_pb2.RemoteLogSegmentMetadata
    error: LookupError
    kafka_value: bytes
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ..., kafka_value: _Optional[bytes] = ...) -> None: ...

class ColumnarRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("partitions", "partition_indexes", "leader_epochs", "offsets")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEXES_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.TopicIdPartition]
    partition_indexes: _containers.RepeatedScalarFieldContainer[int]
    leader_epochs: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partitions: _Optional[_Iterable[_Union[_metadata_pb2.TopicIdPartition, _Mapping]]] = ..., partition_indexes: _Optional[_Iterable[int]] = ..., leader_epochs: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class ColumnarRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ("kafka_values", "partition_errors")
    KAFKA_VALUES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ERRORS_FIELD_NUMBER: _ClassVar[int]
    kafka_values: _containers.RepeatedScalarFieldContainer[bytes]
    partition_errors: _containers.RepeatedCompositeFieldContainer[PartitionLookupError]
    def __init__(self, kafka_values: _Optional[_Iterable[bytes]] = ..., partition_errors: _Optional[_Iterable[_Union[PartitionLookupError, _Mapping]]] = ...) -> None: ...

class PartitionLookupError(_message.Message):
    __slots__ = ("partition_index", "error")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    error: LookupError
    def __init__(self, partition_index: _Optional[int] = ..., error: _Optional[_Union[LookupError, _Mapping]] = ...) -> None: ...

class LookupError(_message.Message):
    __slots__ = ("code", "message", "kafka_exception")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KAFKA_EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    kafka_exception: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., kafka_exception: _Optional[str] = ...) -> None: ...

class HighestOffsetForEpochRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class HighestOffsetForEpochResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class ListRemoteLogSegmentsRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class ListRemoteLogSegmentsResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.RemoteLogSegmentMetadata]
    def __init__(self, remote_log_segment_metadata: _Optional[_Iterable[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]]] = ...) -> None: ...

class RemoteLogSizeRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class RemoteLogSizeResponse(_message.Message):
    __slots__ = ("size_in_bytes",)
    SIZE_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    size_in_bytes: int
    def __init__(self, size_in_bytes: _Optional[int] = ...) -> None: ...

class NextSegmentWithTxnIndexRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch", "offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    leader_epoch: int
    offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class NextSegmentWithTxnIndexResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _metadata_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class MaxTimestampRequest(_message.Message):
    __slots__ = ("topic_id_partition",)
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ...) -> None: ...

class MaxTimestampResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _metadata_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class FirstSegmentWithMaxTimestampAtLeastRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch", "timestamp_ms", "starting_offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STARTING_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    leader_epoch: int
    timestamp_ms: int
    starting_offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., starting_offset: _Optional[int] = ...) -> None: ...

class FirstSegmentWithMaxTimestampAtLeastResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _metadata_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class IsReadyRequest(_message.Message):
    __slots__ = ("topic_id_partition",)
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _metadata_pb2.TopicIdPartition
    def __init__(self, topic_id_partition: _Optional[_Union[_metadata_pb2.TopicIdPartition, _Mapping]] = ...) -> None: ...

class IsReadyResponse(_message.Message):
    __slots__ = ("ready",)
    READY_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    def __init__(self, ready: _Optional[bool] = ...) -> None: ...

class AddRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _metadata_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class WritePosition(_message.Message):
    __slots__ = ("metadata_partition", "offset")
    METADATA_PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    metadata_partition: int
    offset: int
    def __init__(self, metadata_partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class AddRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ("position",)
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: WritePosition
    def __init__(self, position: _Optional[_Union[WritePosition, _Mapping]] = ...) -> None: ...

class UpdateRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata_update",)
    REMOTE_LOG_SEGMENT_METADATA_UPDATE_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata_update: _metadata_pb2.RemoteLogSegmentMetadataUpdate
    def __init__(self, remote_log_segment_metadata_update: _Optional[_Union[_metadata_pb2.RemoteLogSegmentMetadataUpdate, _Mapping]] = ...) -> None: ...

class UpdateRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ("position",)
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: WritePosition
    def __init__(self, position: _Optional[_Union[WritePosition, _Mapping]] = ...) -> None: ...

class PutRemotePartitionDeleteMetadataRequest(_message.Message):
    __slots__ = ("remote_partition_delete_metadata",)
    REMOTE_PARTITION_DELETE_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_partition_delete_metadata: _metadata_pb2.RemotePartitionDeleteMetadata
    def __init__(self, remote_partition_delete_metadata: _Optional[_Union[_metadata_pb2.RemotePartitionDeleteMetadata, _Mapping]] = ...) -> None: ...

class PutRemotePartitionDeleteMetadataResponse(_message.Message):
    __slots__ = ("position",)
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: WritePosition
    def __init__(self, position: _Optional[_Union[WritePosition, _Mapping]] = ...) -> None: ...

class OnPartitionLeadershipChangesRequest(_message.Message):
    __slots__ = ("leader_partitions", "follower_partitions", "broker_id", "full")
    LEADER_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWER_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    leader_partitions: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.TopicIdPartition]
    follower_partitions: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.TopicIdPartition]
    broker_id: int
    full: bool
    def __init__(self, leader_partitions: _Optional[_Iterable[_Union[_metadata_pb2.TopicIdPartition, _Mapping]]] = ..., follower_partitions: _Optional[_Iterable[_Union[_metadata_pb2.TopicIdPartition, _Mapping]]] = ..., broker_id: _Optional[int] = ..., full: _Optional[bool] = ...) -> None: ...

class OnPartitionLeadershipChangesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OnStopPartitionsRequest(_message.Message):
    __slots__ = ("partitions", "broker_id")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.TopicIdPartition]
    broker_id: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[_metadata_pb2.TopicIdPartition, _Mapping]]] = ..., broker_id: _Optional[int] = ...) -> None: ...

class OnStopPartitionsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("serving", "consumes", "failure", "metadata_partitions", "quarantined", "registered_partitions", "loading_partitions", "counters", "segments", "version")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SERVING_FIELD_NUMBER: _ClassVar[int]
    CONSUMES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    METADATA_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LOADING_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    serving: bool
    consumes: bool
    failure: str
    metadata_partitions: _containers.RepeatedCompositeFieldContainer[MetadataPartitionStatus]
    quarantined: int
    registered_partitions: int
    loading_partitions: int
    counters: _containers.ScalarMap[str, int]
    segments: int
    version: str
    def __init__(self, serving: _Optional[bool] = ..., consumes: _Optional[bool] = ..., failure: _Optional[str] = ..., metadata_partitions: _Optional[_Iterable[_Union[MetadataPartitionStatus, _Mapping]]] = ..., quarantined: _Optional[int] = ..., registered_partitions: _Optional[int] = ..., loading_partitions: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ..., segments: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class MetadataPartitionStatus(_message.Message):
    __slots__ = ("partition", "applied_offset", "end_offset", "lag", "not_ready_partitions", "not_ready_reason", "not_ready_examples")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_REASON_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    applied_offset: int
    end_offset: int
    lag: int
    not_ready_partitions: int
    not_ready_reason: str
    not_ready_examples: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, partition: _Optional[int] = ..., applied_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., lag: _Optional[int] = ..., not_ready_partitions: _Optional[int] = ..., not_ready_reason: _Optional[str] = ..., not_ready_examples: _Optional[_Iterable[str]] = ...) -> None: ...
