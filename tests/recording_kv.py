"""A KV that records the writes a native part and its reference make, for the differential tests of the fold's
native parts (tests/test_native_trees.py, tests/test_native_max_timestamp.py)."""

from __future__ import annotations

from rlmm.state.kv import MemoryKV, scan

Write = tuple[str, str, bytes, bytes | None]  # operation, column family, key, value


class RecordingKV:
    """The KV calls made, recorded in order and applied to a ``MemoryKV``."""

    def __init__(self, cf: str) -> None:
        self.cf = cf  # the column family whose rows ``rows`` lists
        self.base = MemoryKV()
        self.writes: list[Write] = []

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self.base.get(cf, key)

    def ceiling(self, cf: str, key: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        return self.base.ceiling(cf, key, prefix)

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self.writes.append(("put", cf, key, value))
        self.base.put(cf, key, value)

    def put_new(self, cf: str, key: bytes, value: bytes) -> None:
        assert self.base.get(cf, key) is None, f"put_new of a stored key {key.hex()}"
        self.writes.append(("put_new", cf, key, value))
        self.base.put(cf, key, value)

    def delete(self, cf: str, key: bytes) -> None:
        self.writes.append(("delete", cf, key, None))
        self.base.delete(cf, key)

    def taken(self) -> list[Write]:
        """The writes since the last call, in the order they were made."""
        writes, self.writes = self.writes, []
        return writes

    def rows(self) -> list[tuple[bytes, bytes]]:
        return list(scan(self.base, self.cf, b""))
