"""Upgrades of a view written by an older rlmm, applied partition by partition when this rlmm opens it for
writing. Each step is idempotent: a view upgraded halfway (a crash) is upgraded again from its start."""

from __future__ import annotations

from collections.abc import Callable

from rlmm.records.model import TopicIdPartition
from rlmm.state import keys as K
from rlmm.state.export import partition_state, write_partition_state
from rlmm.state.kv import WriteKV
from rlmm.state.rows import PartitionRow


def add_timestamp_index(kv: WriteKV, tp: TopicIdPartition) -> None:
    """Schema 1 -> 2: offset-index entries gain their segment's start offset, epochs their timestamp tree and
    inversions. The partition is written again from its logical state (which reads of an offset-index entry
    only its segment id, the same in both layouts)."""
    raw = kv.get(K.PARTITIONS, K.tp_identity(tp))
    state = partition_state(kv, tp)
    if raw is None or state is None:
        return
    tpid = PartitionRow.unpack(raw).tpid
    for cf in K.PER_PARTITION:
        kv.delete_prefix(cf, tpid)
    kv.delete(K.PARTITIONS, K.tp_identity(tp))
    write_partition_state(kv, state, tpid)


# schema version -> the step that upgrades a partition of a view of that version to the next one
STEPS: dict[int, Callable[[WriteKV, TopicIdPartition], None]] = {1: add_timestamp_index}
