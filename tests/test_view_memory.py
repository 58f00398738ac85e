"""The view's memory outside its caches does not grow with the rows it holds: the indexes and bloom filters of
its table files are read through the block cache (by partitions) instead of being held beside it while the file
is open, where they took ~1.8 bytes per row (10 bits of filter per key, and an index entry per block)."""

from __future__ import annotations

import random
from pathlib import Path

from rlmm.state import keys as K
from rlmm.state.view import View

ROWS_PER_FILE = 20_000
FILES = 3


def test_table_files_hold_their_indexes_and_filters_in_the_block_cache(tmp_path: Path) -> None:
    rng = random.Random(7)
    with View(tmp_path / "view") as view:
        for _ in range(FILES):
            with view.batch() as batch:
                for _ in range(ROWS_PER_FILE):
                    batch.stage.put(K.SEGMENTS, rng.randbytes(20), bytes(100))
            unflushed = view.memory()["memtables"]
            assert unflushed > ROWS_PER_FILE * 120  # the rows, before the flush
            view.flush()  # a table file each
        assert view._kv.cfs[K.SEGMENTS].property_int_value("rocksdb.num-files-at-level0") == FILES
        assert sum(1 for _ in view.items(K.SEGMENTS)) == ROWS_PER_FILE * FILES  # and every row reads back
        memory = view.memory()
        assert memory["table_readers"] < ROWS_PER_FILE * FILES // 4, f"{memory} bytes held beside the block cache"
        assert memory["memtables"] < unflushed // 10 and memory["block_cache"] > 0
