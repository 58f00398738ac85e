"""Writes heal after a broker stall longer than the producer's message timeout. The record written during
the stall times out; afterwards the idempotent producer's epoch bump is refused (``PRODUCER_FENCED`` on
Tansu) and the old client would refuse every record for good. rlmm replaces the client: a write meanwhile
gets a retriable UNAVAILABLE (reason PRODUCER_RECOVERING), never FAILED_PRECONDITION, and writes then
succeed with read-your-writes. A real broker, SIGSTOPped; a real gRPC server."""

from __future__ import annotations

import time

import grpc

from rlmm.errors import CallError
from tests.grpc_support import client, finished, kafka_config, new_tp, segment, served
from tests.kafka_broker import broker_kind

WAIT_MS = 3_000  # remote.log.metadata.consume.wait.ms, also the producer's message.timeout.ms
STALL_S = 8.0  # longer than it: the record written during the stall times out in the client


def test_writes_heal_after_a_stall_longer_than_the_message_timeout(kafka, tmp_path) -> None:
    tp = new_tp()
    config = kafka_config(kafka.bootstrap_servers, consume_wait_ms=WAIT_MS)
    with (
        served(tmp_path, kafka.bootstrap_servers, [tp], config=config) as (server, manager, _),
        client(server, retry_for=0, write_timeout=30) as once,
        client(server, retry_for=20) as patient,
    ):
        assert once.wait_ready([tp], timeout=30)
        first = segment(tp, 0, 9)
        once.add_remote_log_segment_metadata(first)
        kafka.pause()
        try:
            started = time.monotonic()
            try:
                once.add_remote_log_segment_metadata(segment(tp, 10, 19))
            except CallError as exc:
                assert exc.code == grpc.StatusCode.DEADLINE_EXCEEDED
            else:
                raise AssertionError("a write during the stall succeeded")
            time.sleep(max(0.0, STALL_S - (time.monotonic() - started)))
        finally:
            kafka.resume()

        codes = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # without retries: what each write answers while the producer heals
            try:
                once.add_remote_log_segment_metadata(segment(tp, 100 + 10 * len(codes), 109 + 10 * len(codes)))
                codes.append("OK")
                break
            except CallError as exc:
                codes.append(exc.code.name)
                assert (exc.code, exc.reason) == (grpc.StatusCode.UNAVAILABLE, "PRODUCER_RECOVERING"), exc
                assert exc.retry_after_s is not None  # retriable, with the server's hint
                time.sleep(0.2)
        assert codes[-1] == "OK" and len(codes) <= 3, codes

        later = segment(tp, 1000, 1009)
        patient.add_remote_log_segment_metadata(later)  # writes go on, read-your-writes
        patient.update_remote_log_segment_metadata(finished(later))
        assert patient.remote_log_segment_metadata(tp, 0, 1005).segment_id == later.segment_id
        assert patient.health() == "SERVING" and patient.status()["failure"] == ""
        if broker_kind() == "tansu":  # Tansu fences the producer after the stall: the client was replaced
            assert manager.producer.recreated == 1
        assert manager.producer.failure is None
