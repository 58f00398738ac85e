"""The fold of a snapshot: per user partition, its records applied in offset order by the service's own
``StateMachine`` over a ``MemoryKV``, then read back as logical state. Pure; the Spark job and the
local tools call it alike."""

from __future__ import annotations

from collections.abc import Iterable

from rlmm.records.model import SegmentSnapshot, TopicIdPartition
from rlmm.records.serde import DecodeError, decode_value
from rlmm.state import keys as K
from rlmm.state.export import PartitionState, partition_state, write_partition_state
from rlmm.state.kv import MemoryKV
from rlmm.state.machine import StateMachine
from rlmm.state.view import QuarantinedRecord

QUARANTINE_KEY = b"q"  # routing key of undecodable records
UNROUTABLE_KEY = b"u"  # decodable records without a partition (api key 3): Kafka's routing fails, nothing changes


def route_key(value: bytes | None) -> bytes:
    """Which user partition a raw record belongs to: b"p" + its identity, or QUARANTINE_KEY / UNROUTABLE_KEY."""
    if value is None:
        return QUARANTINE_KEY
    try:
        record = decode_value(value)
    except DecodeError:
        return QUARANTINE_KEY
    if isinstance(record, SegmentSnapshot):
        return UNROUTABLE_KEY
    return b"p" + K.tp_identity(record.tp)


def quarantined(metadata_partition: int, offset: int, value: bytes | None) -> QuarantinedRecord:
    """The quarantine entry the view makes of an undecodable record (as ``Batch.apply`` does)."""
    if value is None:
        error = DecodeError("null record value (tombstone)", kafka_error="NullPointerException")
    else:
        try:
            decode_value(value)
        except DecodeError as exc:
            error = exc
        else:
            raise ValueError(f"record at {metadata_partition}/{offset} decodes")
    return QuarantinedRecord(metadata_partition, offset, str(error), error.kafka_error, error.kafka_cause, value)


def fold_partition(tp: TopicIdPartition, records: Iterable[tuple[int, bytes]], base: PartitionState | None = None,
                   *, ready: bool = True) -> PartitionState:
    """Apply one user partition's records ((offset, value), one metadata partition, any order: they are
    sorted) over ``base`` (or a fresh assignment, as a shared service assigns every partition it sees),
    then mark it ready (Kafka's markInitialized; refused for a removed partition)."""
    kv = MemoryKV()
    machine = StateMachine(kv)
    if base is not None:
        write_partition_state(kv, base)
    machine.assign(tp)
    for offset, value in sorted(records, key=lambda r: r[0]):
        machine.handle(decode_value(value), offset)
    if ready:
        machine.mark_ready(tp)
    machine.flush()
    state = partition_state(kv, tp)
    assert state is not None
    return state


def group_events(events: Iterable[tuple[int, int, bytes | None]]) -> tuple[
        dict[bytes, list[tuple[int, bytes]]], list[QuarantinedRecord], dict[int, int]]:
    """Local (non-Spark) grouping: (per-partition records, quarantine, last offset per metadata partition)."""
    groups: dict[bytes, list[tuple[int, bytes]]] = {}
    quarantine: dict[tuple[int, int], QuarantinedRecord] = {}
    offsets: dict[int, int] = {}
    for mp, offset, value in events:
        offsets[mp] = max(offsets.get(mp, -1), offset)
        key = route_key(value)
        if key == QUARANTINE_KEY:
            quarantine[(mp, offset)] = quarantined(mp, offset, value)
        elif key != UNROUTABLE_KEY:
            groups.setdefault(key, []).append((offset, value))
    return groups, [quarantine[k] for k in sorted(quarantine)], offsets


def fold_local(events: Iterable[tuple[int, int, bytes | None]], base: dict[TopicIdPartition, PartitionState] | None = None,
               only: set[TopicIdPartition] | None = None) -> tuple[list[PartitionState], list[QuarantinedRecord],
                                                                     dict[int, int]]:
    """The whole fold without Spark (tests, small topics)."""
    groups, quarantine, offsets = group_events(events)
    base = dict(base or {})
    states: dict[TopicIdPartition, PartitionState] = {}
    for key, records in groups.items():
        tp = K.tp_from_identity(key[1:])
        if only is not None and tp not in only:
            continue
        states[tp] = fold_partition(tp, records, base.pop(tp, None))
    for tp, state in base.items():
        states[tp] = state
    return [states[tp] for tp in sorted(states, key=K.tp_identity)], quarantine, offsets
