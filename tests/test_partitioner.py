"""metadata_partition against Kafka's RemoteLogMetadataTopicPartitioner (tests/compat/partitioner.jsonl)."""

from __future__ import annotations

from typing import Any

import pytest

from rlmm.records import metadata_partition, uuid_from_str
from rlmm.records.partitioner import murmur2
from tests import kafka_compat as compat

VECTORS = compat.params(
    compat.load_partitioner_vectors,
    lambda row, i: f"{i:03d}-{row['topic_id_hex']}-{row['partition']}-of-{row['num_metadata_partitions']}",
)


@pytest.mark.parametrize("vector", VECTORS)
def test_matches_kafka(vector: dict[str, Any]) -> None:
    vector = compat.require(vector)
    topic_id = bytes.fromhex(vector["topic_id_hex"])
    assert uuid_from_str(vector["topic_id"]) == topic_id
    got = metadata_partition(topic_id, vector["partition"], vector["num_metadata_partitions"])
    assert got == vector["metadata_partition"]


def test_murmur2_tails() -> None:
    # Kafka's Utils.murmur2 reference values (UtilsTest), as unsigned ints
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected & 0xFFFFFFFF, data


@pytest.mark.parametrize("bad", [0, -1])
def test_refuses_no_partitions(bad: int) -> None:
    with pytest.raises(ValueError):
        metadata_partition(bytes(16), 0, bad)


@pytest.mark.parametrize("topic_id, partition", [(bytes(15), 0), (bytes(16), 1 << 31), (bytes(16), -(1 << 31) - 1)])
def test_refuses_what_java_cannot_hold(topic_id: bytes, partition: int) -> None:
    with pytest.raises(ValueError):
        metadata_partition(topic_id, partition, 3)
