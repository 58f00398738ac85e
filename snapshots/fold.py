"""The fold of a snapshot: per user partition, its records applied in offset order by the service's own
``StateMachine`` over a ``MemoryKV``, then read back as logical state. Pure; the Spark job and the
local tools call it alike."""

from __future__ import annotations

from collections.abc import Iterable

from rlmm.errors import DecodeError
from rlmm.records.model import RemoteLogMetadata, TopicIdPartition
from rlmm.records.serde import decode_value
from rlmm.state import keys as K
from rlmm.state.classify import classify, user_partition
from rlmm.state.export import PartitionState, partition_state, write_partition_state
from rlmm.state.kv import MemoryKV
from rlmm.state.machine import StateMachine
from rlmm.state.quarantine import QuarantinedRecord

QUARANTINE_KEY = b"q"  # routing key of undecodable records
UNROUTABLE_KEY = b"u"  # decodable records without a partition (api key 3): Kafka's routing fails, nothing changes


def partition_key(tp: TopicIdPartition) -> bytes:
    return b"p" + K.tp_identity(tp)


def route_key(value: bytes | None) -> bytes:
    """Where a raw record goes, by the classification the view's apply path uses (``rlmm.state.classify``):
    ``partition_key`` of its user partition, QUARANTINE_KEY when it does not decode, UNROUTABLE_KEY when it
    names no partition."""
    decoded = classify(value)
    if isinstance(decoded, DecodeError):
        return QUARANTINE_KEY
    tp = user_partition(decoded)
    return UNROUTABLE_KEY if tp is None else partition_key(tp)


def quarantined(metadata_partition: int, offset: int, value: bytes | None) -> QuarantinedRecord:
    """The quarantine entry the view makes of an undecodable record (as ``Batch.apply`` does)."""
    decoded = classify(value)
    if not isinstance(decoded, DecodeError):
        raise ValueError(f"record at {metadata_partition}/{offset} decodes")
    return QuarantinedRecord.of(metadata_partition, offset, value, decoded)


class PartitionFold:
    """One user partition's fold, a record at a time, in offset order: the service's ``StateMachine``
    over a ``MemoryKV``, on ``base`` (or a fresh assignment, as a shared service assigns every partition
    it sees)."""

    def __init__(self, tp: TopicIdPartition, base: PartitionState | None = None) -> None:
        self.tp = tp
        self.kv = MemoryKV()
        self.machine = StateMachine(self.kv)
        if base is not None:
            write_partition_state(self.kv, base)
        self.machine.assign(tp)

    def apply(self, offset: int, record: RemoteLogMetadata) -> None:
        self.machine.handle(record, offset)

    def finish(self, *, ready: bool = True) -> PartitionState:
        """The folded state, marked ready (Kafka's markInitialized; refused for a removed partition)."""
        if ready:
            self.machine.mark_ready(self.tp)
        self.machine.flush()
        state = partition_state(self.kv, self.tp)
        assert state is not None
        return state


def fold_partition(
    tp: TopicIdPartition,
    records: Iterable[tuple[int, bytes]],
    base: PartitionState | None = None,
    *,
    ready: bool = True,
) -> PartitionState:
    """Apply one user partition's records ((offset, value), one metadata partition, any order: they are
    sorted) over ``base``, then mark it ready."""
    fold = PartitionFold(tp, base)
    for offset, value in sorted(records, key=lambda r: r[0]):
        fold.apply(offset, decode_value(value))
    return fold.finish(ready=ready)


def fold_stream(
    rows: Iterable[tuple[int, int, bytes | None]],
) -> tuple[list[tuple[bytes, PartitionState]], list[QuarantinedRecord]]:
    """Whole metadata partitions' records (metadata partition, offset, value), each partition's in offset
    order, folded as they come: (routing key, state) per user partition and metadata partition, and the
    quarantine. A user partition with records in two metadata partitions comes out twice."""
    folds: dict[tuple[bytes, int], PartitionFold] = {}
    quarantine = []
    for mp, offset, value in rows:
        decoded = classify(value)
        if isinstance(decoded, DecodeError):
            quarantine.append(QuarantinedRecord.of(mp, offset, value, decoded))
            continue
        tp = user_partition(decoded)
        if tp is None:
            continue
        key = partition_key(tp)
        fold = folds.get((key, mp))
        if fold is None:
            fold = folds[(key, mp)] = PartitionFold(tp)
        fold.apply(offset, decoded)
    return [(key, fold.finish()) for (key, _), fold in folds.items()], quarantine


def group_events(
    events: Iterable[tuple[int, int, bytes | None]],
) -> tuple[dict[bytes, list[tuple[int, bytes]]], list[QuarantinedRecord], dict[int, int]]:
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


def fold_local(
    events: Iterable[tuple[int, int, bytes | None]],
    base: dict[TopicIdPartition, PartitionState] | None = None,
    only: set[TopicIdPartition] | None = None,
) -> tuple[list[PartitionState], list[QuarantinedRecord], dict[int, int]]:
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
