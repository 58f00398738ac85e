from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RemoteLogSegmentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REMOTE_LOG_SEGMENT_STATE_UNSPECIFIED: _ClassVar[RemoteLogSegmentState]
    COPY_SEGMENT_STARTED: _ClassVar[RemoteLogSegmentState]
    COPY_SEGMENT_FINISHED: _ClassVar[RemoteLogSegmentState]
    DELETE_SEGMENT_STARTED: _ClassVar[RemoteLogSegmentState]
    DELETE_SEGMENT_FINISHED: _ClassVar[RemoteLogSegmentState]

class RemotePartitionDeleteState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REMOTE_PARTITION_DELETE_STATE_UNSPECIFIED: _ClassVar[RemotePartitionDeleteState]
    DELETE_PARTITION_MARKED: _ClassVar[RemotePartitionDeleteState]
    DELETE_PARTITION_STARTED: _ClassVar[RemotePartitionDeleteState]
    DELETE_PARTITION_FINISHED: _ClassVar[RemotePartitionDeleteState]
REMOTE_LOG_SEGMENT_STATE_UNSPECIFIED: RemoteLogSegmentState
COPY_SEGMENT_STARTED: RemoteLogSegmentState
COPY_SEGMENT_FINISHED: RemoteLogSegmentState
DELETE_SEGMENT_STARTED: RemoteLogSegmentState
DELETE_SEGMENT_FINISHED: RemoteLogSegmentState
REMOTE_PARTITION_DELETE_STATE_UNSPECIFIED: RemotePartitionDeleteState
DELETE_PARTITION_MARKED: RemotePartitionDeleteState
DELETE_PARTITION_STARTED: RemotePartitionDeleteState
DELETE_PARTITION_FINISHED: RemotePartitionDeleteState

class TopicIdPartition(_message.Message):
    __slots__ = ("topic_id", "topic", "partition")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id: str
    topic: str
    partition: int
    def __init__(self, topic_id: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class RemoteLogSegmentId(_message.Message):
    __slots__ = ("topic_id_partition", "id")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: TopicIdPartition
    id: str
    def __init__(self, topic_id_partition: _Optional[_Union[TopicIdPartition, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...

class SegmentLeaderEpoch(_message.Message):
    __slots__ = ("leader_epoch", "start_offset")
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    leader_epoch: int
    start_offset: int
    def __init__(self, leader_epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class RemoteLogSegmentMetadata(_message.Message):
    __slots__ = ("remote_log_segment_id", "start_offset", "end_offset", "broker_id", "max_timestamp_ms", "event_timestamp_ms", "segment_leader_epochs", "segment_size_in_bytes", "custom_metadata", "state", "txn_index_empty")
    REMOTE_LOG_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_LEADER_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_SIZE_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TXN_INDEX_EMPTY_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: _containers.RepeatedCompositeFieldContainer[SegmentLeaderEpoch]
    segment_size_in_bytes: int
    custom_metadata: bytes
    state: RemoteLogSegmentState
    txn_index_empty: bool
    def __init__(self, remote_log_segment_id: _Optional[_Union[RemoteLogSegmentId, _Mapping]] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., broker_id: _Optional[int] = ..., max_timestamp_ms: _Optional[int] = ..., event_timestamp_ms: _Optional[int] = ..., segment_leader_epochs: _Optional[_Iterable[_Union[SegmentLeaderEpoch, _Mapping]]] = ..., segment_size_in_bytes: _Optional[int] = ..., custom_metadata: _Optional[bytes] = ..., state: _Optional[_Union[RemoteLogSegmentState, str]] = ..., txn_index_empty: _Optional[bool] = ...) -> None: ...

class RemoteLogSegmentMetadataUpdate(_message.Message):
    __slots__ = ("remote_log_segment_id", "event_timestamp_ms", "custom_metadata", "state", "broker_id")
    REMOTE_LOG_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes
    state: RemoteLogSegmentState
    broker_id: int
    def __init__(self, remote_log_segment_id: _Optional[_Union[RemoteLogSegmentId, _Mapping]] = ..., event_timestamp_ms: _Optional[int] = ..., custom_metadata: _Optional[bytes] = ..., state: _Optional[_Union[RemoteLogSegmentState, str]] = ..., broker_id: _Optional[int] = ...) -> None: ...

class RemotePartitionDeleteMetadata(_message.Message):
    __slots__ = ("topic_id_partition", "state", "event_timestamp_ms", "broker_id")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int
    def __init__(self, topic_id_partition: _Optional[_Union[TopicIdPartition, _Mapping]] = ..., state: _Optional[_Union[RemotePartitionDeleteState, str]] = ..., event_timestamp_ms: _Optional[int] = ..., broker_id: _Optional[int] = ...) -> None: ...
