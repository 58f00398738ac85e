"""A view with a RocksDB row cache (``row_cache_mb``) deletes a partition as a view without one does.

RocksDB refuses range deletions beside a row cache ("DeleteRange is not compatible with row cache"), and
a partition's deletion is one range deletion per column family: with a row cache the view deletes each
key instead, and the result must be the same rows, with nothing a lookup read before the deletion
answered from the cache afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmm.errors import KafkaStateError
from rlmm.records.model import PartitionDelete, PartitionDeleteState
from rlmm.records.serde import encode_value
from rlmm.state import keys as K
from rlmm.state.view import View
from tests.grpc_support import TS, fill_view, new_tp, segment

GONE, KEPT = new_tp("row-cache-gone"), new_tp("row-cache-kept")
UPLOADED = {tp: [segment(tp, i * 100, i * 100 + 99, epoch=i % 3) for i in range(30)] for tp in (GONE, KEPT)}


def build(path: Path, row_cache_mb: int) -> dict[str, list[tuple[bytes, bytes]]]:
    with View(path, row_cache_mb=row_cache_mb) as view:
        for tp, segments in UPLOADED.items():
            fill_view(view, tp, segments)
        assert view.queries.remote_log_segment_metadata(GONE, 1, 150) is not None  # read, and cached
        gone_tpid = view.queries.partition_row(GONE).tpid
        offset = view.metadata_offsets()[0] + 1
        with view.batch() as batch:
            for i, state in enumerate(PartitionDeleteState):
                batch.apply(0, offset + i, encode_value(PartitionDelete(GONE, 1, TS, state)))
        with pytest.raises(KafkaStateError):
            view.queries.remote_log_segment_metadata(GONE, 1, 150)
        assert view.queries.remote_log_segment_metadata(KEPT, 1, 150) is not None
        for cf in K.PER_PARTITION:
            assert not [key for key, _ in view.items(cf) if key.startswith(gone_tpid)], cf
    with View(path, row_cache_mb=row_cache_mb) as reopened:
        return {cf: list(reopened.items(cf)) for cf in K.COLUMN_FAMILIES}


def test_a_partition_deleted_beside_a_row_cache_leaves_the_rows_of_a_view_without_one(tmp_path: Path) -> None:
    without = build(tmp_path / "without", 0)
    with_cache = build(tmp_path / "with", 1)
    assert with_cache == without
    assert with_cache[K.SEGMENTS]  # the kept partition's segments
