"""What the consumer keeps in the view beside the state it folds (``Batch.put_consumer_state``): the id of the
metadata topic the view was built from, and the readings again from the beginning that are under way (a
partition registered after its metadata partition was read). A snapshot carries both, so that a view restored
from it refuses another topic and finishes those readings (``snapshots.restore``)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

TOPIC_ID: Final = b"topic_id"
REREAD: Final = b"reread:"  # + metadata partition -> the offset its reading again must pass
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


def reread_key(mp: int) -> bytes:
    return REREAD + _U32.pack(mp)


def reread_value(until: int) -> bytes:
    return _I64.pack(until)


def topic_id_of(state: Mapping[bytes, bytes]) -> str | None:
    raw = state.get(TOPIC_ID)
    return None if raw is None else raw.decode()


def rereads_of(state: Mapping[bytes, bytes]) -> dict[int, int]:
    """Metadata partition -> the offset its reading again must pass."""
    return {
        _U32.unpack_from(key, len(REREAD))[0]: _I64.unpack(value)[0]
        for key, value in state.items()
        if key.startswith(REREAD)
    }


def view_state(topic_id: str | None, rereads: Mapping[int, int]) -> dict[bytes, bytes]:
    """The consumer state that says so, as ``Batch.put_consumer_state`` keeps it."""
    state = {reread_key(mp): reread_value(until) for mp, until in rereads.items()}
    if topic_id is not None:
        state[TOPIC_ID] = topic_id.encode()
    return state
