"""The timestamp index: for each leader epoch, a tree of maxima (rlmm/state/maxtree.py) over its offset index,
with each referenced segment's max timestamp and end offset, and the query Kafka answers by scanning.

Kafka finds the remote segment for a timestamp (RemoteLogManager.findOffsetByTimestamp) by walking
``listRemoteLogSegments(partition, epoch)`` and taking the first COPY_SEGMENT_FINISHED segment with
``maxTimestampMs >= timestamp`` and ``endOffset >= startingOffset``. That listing is the offset index in its
order (start offset in the epoch) while the epoch has no unreferenced segment; otherwise the offset index's
segments and the unreferenced ones, stably sorted by segment start offset. So:

* without unreferenced segments, the answer is the tree's first entry reaching both bounds;
* with some, it is the earlier (by start offset, the offset index's first on a tie) of that entry and
  the first qualifying finished unreferenced segment, read from their own index (``FINISHED_UNREFERENCED``:
  segments evicted from the offset index, or tracked under an epoch that a re-add with other epochs left
  behind; the others being copied or deleted do not qualify). The offset index's order is its order by start
  offset as long as no entry starts before an earlier entry (``inversions``, which only logs that diverged
  make); where one does, the listing is scanned as Kafka scans it.
"""

from __future__ import annotations

from collections.abc import Iterator

from rlmm.records.model import COPY_SEGMENT_FINISHED, SegmentMetadata
from rlmm.state import keys as K
from rlmm.state import maxtree
from rlmm.state.kv import ReadKV, WriteKV, scan
from rlmm.state.trees import TreePages


def reference(pages: TreePages, epoch_prefix: bytes, epoch_start: int, segment: SegmentMetadata) -> None:
    """A finished segment enters the offset index of the epoch (``K.epoch_prefix``) at ``epoch_start``."""
    pages.insert(epoch_prefix, epoch_start + K.I64_FLIP, segment.max_timestamp_ms, segment.end_offset)


def unreference(pages: TreePages, epoch_prefix: bytes, epoch_start: int) -> None:
    """The offset index's entry at ``epoch_start`` goes."""
    pages.remove(epoch_prefix, epoch_start + K.I64_FLIP)


def add_finished_unreferenced(kv: WriteKV, tpid: bytes, epoch: int, start_offset: int, segment_id: bytes) -> None:
    """A finished segment evicted from the epoch's offset index stays in the epoch, unreferenced."""
    kv.put_new(K.FINISHED_UNREFERENCED, _finished_unreferenced_key(tpid, epoch, start_offset, segment_id), b"")


def move_finished_unreferenced(
    kv: WriteKV, tpid: bytes, segment: SegmentMetadata, before: list[int], after: list[int]
) -> None:
    """A segment that was finished and unreferenced in the epochs ``before`` is so in ``after`` now (each list
    empty while the segment is not finished)."""
    for epoch in before:
        if epoch not in after:
            kv.delete(
                K.FINISHED_UNREFERENCED,
                _finished_unreferenced_key(tpid, epoch, segment.start_offset, segment.segment_id),
            )
    for epoch in after:
        if epoch not in before:
            add_finished_unreferenced(kv, tpid, epoch, segment.start_offset, segment.segment_id)


def _finished_unreferenced_key(tpid: bytes, epoch: int, start_offset: int, segment_id: bytes) -> bytes:
    return K.epoch_prefix(tpid, epoch) + K.offset_bytes(start_offset) + segment_id


def finished_unreferenced(kv: ReadKV, tpid: bytes, epoch: int) -> Iterator[bytes]:
    """The ids of the epoch's finished unreferenced segments, in the listing's order (start offset, then id)."""
    prefix = K.epoch_prefix(tpid, epoch)
    for key, _ in scan(kv, K.FINISHED_UNREFERENCED, prefix):
        yield key[len(prefix) + 8 :]


def first_referenced(kv: ReadKV, tpid: bytes, epoch: int, timestamp: int, starting_offset: int) -> int | None:
    """The epoch start offset of the first offset-index entry (in its order) whose segment has max timestamp
    >= ``timestamp`` and end offset >= ``starting_offset``."""
    found = maxtree.first(kv, K.TIMESTAMP_TREES, K.epoch_prefix(tpid, epoch), timestamp, starting_offset)
    return None if found is None else found - K.I64_FLIP


def qualifies(segment: SegmentMetadata, timestamp: int, starting_offset: int) -> bool:
    """findOffsetByTimestamp's test of a listed segment (the broker's leader-epoch check aside)."""
    return (
        segment.max_timestamp_ms >= timestamp
        and segment.end_offset >= starting_offset
        and segment.state is COPY_SEGMENT_FINISHED
    )
