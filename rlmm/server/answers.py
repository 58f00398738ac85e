"""Serialized answers of a unary call that answers one segment, by the segment's topic value: the same
stored bytes always make the same answer, so nothing invalidates them, and a segment asked for again (a
fetcher reads a segment by many offsets) costs a dictionary lookup instead of decoding the value, filling
the message and serializing it. The answers kept first are dropped first: a segment asked again and
again stays, where clearing them all at the limit would rebuild every answer at once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from google.protobuf.message import Message

from rlmm.client import convert
from rlmm.state.segment_rows import decode_segment

# answers kept (~310 bytes each with their values for the benchmark's segments: ~6 MB)
KEPT = 20_000


class SegmentAnswers:
    def __init__(self, response: Callable[[], Message]) -> None:
        """``response``: the call's response class, whose ``remote_log_segment_metadata`` holds the segment."""
        self._response = response
        self._answers: OrderedDict[bytes | None, bytes] = OrderedDict()

    def answer(self, value: bytes | None) -> bytes:
        """The serialized response holding the segment whose topic value is ``value`` (None: none)."""
        answer = self._answers.get(value)
        if answer is None:
            segment = None if value is None else decode_segment(value)
            answer = convert.with_segment(self._response(), segment).SerializeToString()
            if len(self._answers) >= KEPT:
                self._answers.popitem(last=False)
            self._answers[value] = answer
        return answer
