"""The segments' rows: per segment id, the epochs that track it (its memberships) and its topic value, in one row.

The state machine reads and changes a segment's metadata, the ``EpochIndex`` its memberships; both go through one
``SegmentRows``, which reads each row once per batch, decodes its metadata only when asked, and writes each row
back once by ``flush`` (deleted when the segment has neither metadata nor an epoch that tracks it).
"""

from __future__ import annotations

from typing import final

from rlmm.records.model import SegmentMetadata
from rlmm.records.serde import decode_value, encode_value
from rlmm.state import keys as K
from rlmm.state.kv import ReadKV, WriteKV
from rlmm.state.rows import pack_segment_row, segment_row_value, unpack_memberships


@final
class _Row:
    """One segment's row as the batch sees it."""

    __slots__ = ("stored", "value", "metadata", "decoded", "members")

    def __init__(self, stored: bool, value: bytes, members: dict[int, int]) -> None:
        self.stored = stored  # whether the KV held it when it was read
        self.value = value  # its topic value as stored (b"": none), until ``metadata`` is set
        self.metadata: SegmentMetadata | None = None
        self.decoded = not value  # whether ``metadata`` is the metadata
        self.members = members


@final
class SegmentRows:
    def __init__(self, kv: WriteKV) -> None:
        self.kv = kv
        self._rows: dict[bytes, _Row] = {}  # tpid|segment id -> row
        self._dirty: set[bytes] = set()
        self._encoded: dict[bytes, tuple[SegmentMetadata, bytes]] = {}  # tpid|segment id -> latest encoding

    def _row(self, key: bytes) -> _Row:
        row = self._rows.get(key)
        if row is None:
            raw = self.kv.get(K.SEGMENTS, key)
            if raw is None:
                row = _Row(False, b"", {})
            else:
                row = _Row(True, segment_row_value(raw), unpack_memberships(raw))
            self._rows[key] = row
        return row

    def metadata(self, key: bytes) -> SegmentMetadata | None:
        """The segment's metadata (None: absent)."""
        row = self._row(key)
        if not row.decoded:
            row.metadata = decode_segment(row.value)
            row.decoded = True
        return row.metadata

    def set_metadata(self, key: bytes, segment: SegmentMetadata | None) -> None:
        row = self._row(key)
        row.metadata = segment
        row.decoded = True
        row.value = b""  # encoded by ``flush``
        self._dirty.add(key)

    def members(self, key: bytes) -> dict[int, int]:
        """Epoch -> membership flags of the segment; the caller calls ``members_changed`` after changing them."""
        return self._row(key).members

    def members_changed(self, key: bytes) -> None:
        self._dirty.add(key)

    def encode(self, key: bytes, segment: SegmentMetadata) -> bytes:
        """The segment's topic value, encoded once per version of the segment."""
        cached = self._encoded.get(key)
        if cached is None or cached[0] is not segment:
            cached = self._encoded[key] = (segment, encode_value(segment))
        return cached[1]

    def flush(self) -> None:
        """Write the changed rows back to the KV."""
        kv = self.kv
        for key in self._dirty:
            row = self._rows[key]
            value = row.value  # as stored, unless ``set_metadata`` cleared it
            if not value and row.metadata is not None:
                value = self.encode(key, row.metadata)
            if value or row.members:
                if row.stored:
                    kv.put(K.SEGMENTS, key, pack_segment_row(row.members, value))
                else:
                    kv.put_new(K.SEGMENTS, key, pack_segment_row(row.members, value))
            elif row.stored:
                kv.delete(K.SEGMENTS, key)
        self._rows.clear()
        self._dirty.clear()
        self._encoded.clear()

    def forget(self, tpid: bytes) -> None:
        """Drop what is cached of a partition whose rows were deleted."""
        for cache in (self._rows, self._encoded):
            for key in [k for k in cache if k.startswith(tpid)]:
                del cache[key]
        self._dirty = {k for k in self._dirty if not k.startswith(tpid)}


def load_segment(kv: ReadKV, tpid: bytes, segment_id: bytes) -> SegmentMetadata | None:
    """A segment's metadata as the view stores it (None: absent)."""
    raw = kv.get(K.SEGMENTS, tpid + segment_id)
    if raw is None:
        return None
    value = segment_row_value(raw)
    return decode_segment(value) if value else None


def decode_segment(value: bytes) -> SegmentMetadata:
    """A segment's topic value as the view stores it."""
    segment = decode_value(value)
    assert isinstance(segment, SegmentMetadata)
    return segment
