"""The API's messages carry every field of Kafka's records: each record of the compat corpus that
Kafka's serde wrote goes to its message and back unchanged, down to Kafka's bytes."""

from __future__ import annotations

import pytest

from rlmm.client import convert
from rlmm.records import PartitionDelete, SegmentMetadata, SegmentUpdate, decode_value, encode_value
from rlmm.v1 import metadata_pb2 as pb
from tests.kafka_compat import load_records, params, require

CONVERSIONS = {
    SegmentMetadata: (convert.segment_metadata_pb, convert.segment_metadata, pb.RemoteLogSegmentMetadata),
    SegmentUpdate: (convert.segment_update_pb, convert.segment_update, pb.RemoteLogSegmentMetadataUpdate),
    PartitionDelete: (convert.partition_delete_pb, convert.partition_delete, pb.RemotePartitionDeleteMetadata),
}


def _serialized_by_kafka() -> list[dict]:
    return [
        r
        for r in load_records()
        if r.get("produced_by") == "RemoteLogMetadataSerde.serialize" and r.get("api_key") in (0, 1, 2)
    ]


@pytest.mark.parametrize("case", params(_serialized_by_kafka, lambda r, i: r["case"]))
def test_kafka_records_survive_the_api_messages(case) -> None:
    case = require(case)
    record = decode_value(bytes.fromhex(case["hex"]))
    to_pb, from_pb, message = CONVERSIONS[type(record)]
    wire = message.FromString(to_pb(record).SerializeToString())
    back = from_pb(wire, "record")
    assert back == record
    assert encode_value(back, keep_unknown_tags=False) == encode_value(record, keep_unknown_tags=False)
