"""Records of Kafka's ``__remote_log_metadata`` topic: domain model, wire format, canonical form."""

from rlmm.errors import DecodeError
from rlmm.records.canonical import from_canonical, to_canonical
from rlmm.records.model import (
    LeaderEpochs,
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadata,
    SegmentMetadata,
    SegmentSnapshot,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
    UnknownTags,
)
from rlmm.records.partitioner import metadata_partition
from rlmm.records.serde import API_KEYS, decode_value, encode_value
from rlmm.records.uuid import uuid_from_str, uuid_to_str

__all__ = [
    "API_KEYS",
    "DecodeError",
    "LeaderEpochs",
    "PartitionDelete",
    "PartitionDeleteState",
    "RemoteLogMetadata",
    "SegmentMetadata",
    "SegmentSnapshot",
    "SegmentState",
    "SegmentUpdate",
    "TopicIdPartition",
    "UnknownTags",
    "decode_value",
    "encode_value",
    "from_canonical",
    "metadata_partition",
    "to_canonical",
    "uuid_from_str",
    "uuid_to_str",
]
