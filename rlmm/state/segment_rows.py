"""The segments' rows: per segment id, the epochs that track it (its memberships) and its topic value, in one row.

The state machine reads and changes a segment's metadata, the ``EpochIndex`` its memberships; both go through one
``SegmentRows``, which reads each row once per batch, decodes its metadata only when asked, and writes each row
back once by ``flush`` (deleted when the segment has neither metadata nor an epoch that tracks it), with the rows of
the epochs' unreferenced sets, which follow the memberships' ``UNREFERENCED`` flags: a segment added and copied
within a batch, unreferenced in between, writes none.
"""

from __future__ import annotations

from typing import Final, final

from rlmm.records.model import SegmentMetadata
from rlmm.records.serde import decode_value, encode_value
from rlmm.state import keys as K
from rlmm.state.kv import ReadKV, WriteKV
from rlmm.state.rows import UNREFERENCED, pack_segment_row, segment_row_value, unpack_memberships


@final
class _Row:
    """One segment's row as the batch sees it."""

    __slots__ = (
        "stored",
        "value",
        "metadata",
        "decoded",
        "members",
        "stored_members",
        "dirty",
        "encoded_from",
        "encoded",
    )

    def __init__(self, stored: bool, value: bytes, members: dict[int, int]) -> None:
        self.stored = stored  # whether the KV held it when it was read
        self.value = value  # its topic value as stored (b"": none), until ``metadata`` is set
        self.metadata: SegmentMetadata | None = None
        self.decoded = not value  # whether ``metadata`` is the metadata
        self.members = members
        self.stored_members = dict(members)  # as the KV holds them, and the unreferenced sets' rows with them
        self.dirty = False  # whether ``flush`` writes it
        self.encoded_from: SegmentMetadata | None = None  # the version of the segment last encoded, into ``encoded``
        self.encoded = b""


_NO_KEY: Final = object()  # the last row's key before any row is found: no tpid or segment id is this object


@final
class SegmentRows:
    """Rows are found by tpid, then segment id: the fold passes the same tpid and segment id objects around, whose
    hashes Python keeps, where one key joined from them would be a new object to hash at every call. A record's
    transition asks for its segment's row some six times: the last row found is kept, and found again when asked
    with the very same tpid and segment id objects."""

    _last_tpid: object
    _last_id: object
    _last_row: _Row

    def __init__(self, kv: WriteKV) -> None:
        self.kv = kv
        self._rows: dict[bytes, dict[bytes, _Row]] = {}  # tpid -> segment id -> row
        self._dirty: list[tuple[bytes, bytes, _Row]] = []
        self._forget_last()

    def _forget_last(self) -> None:
        self._last_tpid = self._last_id = _NO_KEY
        self._last_row = _Row(False, b"", {})

    def _row(self, tpid: bytes, segment_id: bytes) -> _Row:
        if segment_id is self._last_id and tpid is self._last_tpid:
            return self._last_row
        row = self._find(tpid, segment_id)
        self._last_tpid, self._last_id, self._last_row = tpid, segment_id, row
        return row

    def _find(self, tpid: bytes, segment_id: bytes) -> _Row:
        rows = self._rows.get(tpid)
        if rows is None:
            rows = self._rows[tpid] = {}
        row = rows.get(segment_id)
        if row is None:
            raw = self.kv.get(K.SEGMENTS, tpid + segment_id)
            if raw is None:
                row = _Row(False, b"", {})
            else:
                row = _Row(True, segment_row_value(raw), unpack_memberships(raw))
            rows[segment_id] = row
        return row

    def _changed(self, tpid: bytes, segment_id: bytes, row: _Row) -> None:
        if not row.dirty:
            row.dirty = True
            self._dirty.append((tpid, segment_id, row))

    def metadata(self, tpid: bytes, segment_id: bytes) -> SegmentMetadata | None:
        """The segment's metadata (None: absent)."""
        row = self._row(tpid, segment_id)
        if not row.decoded:
            row.metadata = decode_segment(row.value)
            row.decoded = True
        return row.metadata

    def set_metadata(self, tpid: bytes, segment_id: bytes, segment: SegmentMetadata | None) -> None:
        row = self._row(tpid, segment_id)
        row.metadata = segment
        row.decoded = True
        row.value = b""  # encoded by ``flush``
        self._changed(tpid, segment_id, row)

    def members(self, tpid: bytes, segment_id: bytes) -> dict[int, int]:
        """Epoch -> membership flags of the segment; the caller calls ``members_changed`` after changing them."""
        return self._row(tpid, segment_id).members

    def members_changed(self, tpid: bytes, segment_id: bytes) -> None:
        self._changed(tpid, segment_id, self._row(tpid, segment_id))

    def encode(self, tpid: bytes, segment_id: bytes, segment: SegmentMetadata) -> bytes:
        """The segment's topic value, encoded once per version of the segment."""
        return _encoding(self._row(tpid, segment_id), segment)

    def flush(self) -> None:
        """Write the changed rows back to the KV."""
        kv = self.kv
        for tpid, segment_id, row in self._dirty:
            value = row.value  # as stored, unless ``set_metadata`` cleared it
            if not value and row.metadata is not None:
                value = _encoding(row, row.metadata)
            if value or row.members:
                if row.stored:
                    kv.put(K.SEGMENTS, tpid + segment_id, pack_segment_row(row.members, value))
                else:
                    kv.put_new(K.SEGMENTS, tpid + segment_id, pack_segment_row(row.members, value))
            elif row.stored:
                kv.delete(K.SEGMENTS, tpid + segment_id)
            if row.members != row.stored_members:
                _write_unreferenced(kv, tpid, segment_id, row.stored_members, row.members)
        self._rows.clear()
        self._dirty.clear()
        self._forget_last()

    def forget(self, tpid: bytes) -> None:
        """Drop what is cached of a partition whose rows were deleted."""
        self._rows.pop(tpid, None)
        self._forget_last()
        self._dirty = [changed for changed in self._dirty if changed[0] != tpid]


def _write_unreferenced(
    kv: WriteKV, tpid: bytes, segment_id: bytes, stored: dict[int, int], members: dict[int, int]
) -> None:
    """Put the segment in, or take it out of, the unreferenced sets of the epochs whose ``UNREFERENCED`` flag it
    gained or lost since its memberships were stored."""
    for epoch, flags in members.items():
        if flags & UNREFERENCED and not stored.get(epoch, 0) & UNREFERENCED:
            kv.put_new(K.UNREFERENCED, K.epoch_prefix(tpid, epoch) + segment_id, b"")
    for epoch, flags in stored.items():
        if flags & UNREFERENCED and not members.get(epoch, 0) & UNREFERENCED:
            kv.delete(K.UNREFERENCED, K.epoch_prefix(tpid, epoch) + segment_id)


def _encoding(row: _Row, segment: SegmentMetadata) -> bytes:
    if row.encoded_from is not segment:
        row.encoded = encode_value(segment)
        row.encoded_from = segment
    return row.encoded


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
