"""Upgrades of a view written by an older rlmm, applied partition by partition when this rlmm opens it for writing.

A view of schema version 1 or 2 is upgraded by writing each partition again from its logical state, read in the
older layout: a segment's row is its topic value there, and the offset-index entries and epoch rows are read only for
what every layout holds alike (an entry's segment id, an epoch's highest offset). The view records that an upgrade is
under way (``UPGRADE_FROM_KEY``) and, in each partition's own batch, the last partition upgraded (``UPGRADED_KEY``):
an upgrade interrupted (a kill) goes on where it stopped. Its schema version is the new one from the start, so that
an older rlmm refuses a view upgraded halfway instead of reading rows it does not know.
"""

from __future__ import annotations

from typing import Final

from rlmm.records.model import TopicIdPartition
from rlmm.state import keys as K
from rlmm.state.export import partition_state, write_partition_state
from rlmm.state.kv import WriteKV
from rlmm.state.rows import PartitionRow

UPGRADABLE: Final = frozenset((1, 2))  # the schema versions whose views this rlmm upgrades
UPGRADE_FROM_KEY: Final = b"upgrade_from"  # meta: the schema version an upgrade under way started from
UPGRADED_KEY: Final = b"upgraded_up_to"  # meta: the identity of the last partition an upgrade wrote again


def _older_segment_value(row: bytes) -> bytes:
    """The topic value of a segment's row in schema versions 1 and 2: the row itself."""
    return row


def upgrade_partition(kv: WriteKV, tp: TopicIdPartition) -> None:
    """Write a partition of a view of an older schema version again, in this version's layout."""
    raw = kv.get(K.PARTITIONS, K.tp_identity(tp))
    state = partition_state(kv, tp, segment_value=_older_segment_value)
    if raw is None or state is None:
        return
    tpid = PartitionRow.unpack(raw).tpid
    for cf in K.PER_PARTITION:
        kv.delete_prefix(cf, tpid)
    kv.delete(K.PARTITIONS, K.tp_identity(tp))
    write_partition_state(kv, state, tpid)
