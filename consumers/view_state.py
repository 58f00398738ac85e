"""What the consumer keeps in the view beside the state it folds (``Batch.put_consumer_state``): the id and the
partition count of the metadata topic the view was built from, the readings again from the beginning that are
under way (a partition registered after its metadata partition was read), and which brokers hold each
registration. A snapshot carries the first three, so that a view restored from it refuses another topic,
consumes with its count and finishes those readings (``snapshots.restore``); its registrations come without
holders, so the first broker to stop one ends it."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Final

from rlmm.records.model import TopicIdPartition
from rlmm.records.uuid import uuid_text
from rlmm.state import keys as K

TOPIC_ID: Final = b"topic_id"
NUM_PARTITIONS: Final = b"num_partitions"  # the metadata topic's partition count
REREAD: Final = b"reread:"  # + metadata partition -> the offset its reading again must pass
HOLDERS: Final = b"holders:"  # + the user partition's identity -> the broker ids holding its registration
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def holders_key(tp: TopicIdPartition) -> bytes:
    return HOLDERS + K.tp_identity(tp)


def holders_value(holders: Iterable[int]) -> bytes | None:
    """The holders as stored; None (the key deleted) when there are none."""
    ordered = sorted(holders)
    return b"".join(_I32.pack(holder) for holder in ordered) if ordered else None


def holders_of(state: Mapping[bytes, bytes]) -> dict[TopicIdPartition, set[int]]:
    """User partition -> the broker ids holding its registration."""
    return {
        K.tp_from_identity(key[len(HOLDERS) :]): {holder for (holder,) in _I32.iter_unpack(value)}
        for key, value in state.items()
        if key.startswith(HOLDERS)
    }


def reread_key(mp: int) -> bytes:
    return REREAD + _U32.pack(mp)


def reread_value(until: int) -> bytes:
    return _I64.pack(until)


def topic_id_of(state: Mapping[bytes, bytes]) -> str | None:
    """Kafka's text form of the topic id the view was built from (views of rlmm 0.1 stored librdkafka's)."""
    raw = state.get(TOPIC_ID)
    return None if raw is None else uuid_text(raw.decode())


def num_partitions_value(count: int) -> bytes:
    return _U32.pack(count)


def num_partitions_of(state: Mapping[bytes, bytes]) -> int | None:
    """The metadata topic's partition count the view records (None: a view of an older release, or new)."""
    raw = state.get(NUM_PARTITIONS)
    return None if raw is None else _U32.unpack(raw)[0]


def rereads_of(state: Mapping[bytes, bytes]) -> dict[int, int]:
    """Metadata partition -> the offset its reading again must pass."""
    return {
        _U32.unpack_from(key, len(REREAD))[0]: _I64.unpack(value)[0]
        for key, value in state.items()
        if key.startswith(REREAD)
    }


def view_state(
    topic_id: str | None, rereads: Mapping[int, int], num_partitions: int | None = None
) -> dict[bytes, bytes]:
    """The consumer state that says so, as ``Batch.put_consumer_state`` keeps it."""
    state = {reread_key(mp): reread_value(until) for mp, until in rereads.items()}
    if topic_id is not None:
        state[TOPIC_ID] = topic_id.encode()
    if num_partitions is not None:
        state[NUM_PARTITIONS] = num_partitions_value(num_partitions)
    return state
