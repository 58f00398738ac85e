"""The unary call's kept answers: each is the serialized response of its segment, and at the limit the answer
kept first goes, while those asked since stay."""

from __future__ import annotations

from rlmm.client import convert
from rlmm.records.model import SegmentState
from rlmm.records.serde import encode_value
from rlmm.server import answers
from rlmm.server.answers import SegmentAnswers
from rlmm.state.segment_rows import decode_segment
from rlmm.v1 import service_pb2 as api
from tests.grpc_support import new_tp, segment

TP = new_tp("answers")


def test_answers_are_the_segments_responses_and_the_first_kept_go_first(monkeypatch) -> None:
    monkeypatch.setattr(answers, "KEPT", 3)
    kept = SegmentAnswers(api.RemoteLogSegmentMetadataResponse)
    values = [encode_value(segment(TP, i * 10, i * 10 + 9, state=SegmentState.COPY_SEGMENT_FINISHED)) for i in range(4)]
    first = {value: kept.answer(value) for value in values[:3]}
    for value, answer in first.items():
        expected = convert.with_segment(api.RemoteLogSegmentMetadataResponse(), decode_segment(value))
        assert answer == expected.SerializeToString() and kept.answer(value) is answer
    assert kept.answer(None) == api.RemoteLogSegmentMetadataResponse().SerializeToString()  # drops values[0]
    assert kept.answer(values[0]) is not first[values[0]]  # built again (dropping values[1])
    assert kept.answer(values[2]) is first[values[2]]
