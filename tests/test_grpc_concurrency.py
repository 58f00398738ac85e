"""Clients reading while writes land: every reader sees the partition only grow, finds every segment it
has seen finished, and no call fails."""

from __future__ import annotations

import threading

from rlmm.client import RlmmClient
from tests.grpc_support import finished, new_tp, segment, served

SEGMENTS = 40
READERS = 4


def test_readers_see_writes_land_in_order(kafka, tmp_path) -> None:
    tp = new_tp("concurrent")
    with served(tmp_path, kafka.bootstrap_servers, [tp]) as (server, manager, view):
        target = f"127.0.0.1:{server.port}"
        with RlmmClient(target) as writer:
            assert writer.wait_ready([tp], timeout=30)
        done = threading.Event()
        failures: list[BaseException] = []
        observed: list[int] = []

        def write() -> None:
            try:
                with RlmmClient(target) as rlmm:
                    for i in range(SEGMENTS):
                        seg = segment(tp, i * 100, i * 100 + 99, txn_empty=i % 3 != 0)
                        rlmm.add_remote_log_segment_metadata(seg)
                        rlmm.update_remote_log_segment_metadata(finished(seg))
            except BaseException as exc:
                failures.append(exc)
            finally:
                done.set()

        def read() -> None:
            try:
                with RlmmClient(target) as rlmm:
                    seen = highest = 0
                    while not done.is_set():
                        listed = rlmm.list_remote_log_segments(tp)
                        assert len(listed) >= seen
                        seen = len(listed)
                        finished_ends = [s.end_offset for s in listed if s.state.name == "COPY_SEGMENT_FINISHED"]
                        lookups = [(tp, 0, end) for end in finished_ends]
                        assert all(
                            r is not None and not isinstance(r, Exception)
                            for r in rlmm.remote_log_segment_metadata_batch(lookups)
                        )
                        top = rlmm.highest_offset_for_epoch(tp, 0) or 0
                        assert top >= highest
                        highest = top
                        assert rlmm.remote_log_size(tp) >= sum(s.segment_size_in_bytes for s in listed)  # asked later
                    observed.append(seen)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not failures, failures
        assert len(observed) == READERS
        with RlmmClient(target) as rlmm:
            assert len(rlmm.list_remote_log_segments(tp)) == SEGMENTS
            assert rlmm.highest_offset_for_epoch(tp, 0) == SEGMENTS * 100 - 1
            assert rlmm.next_segment_with_txn_index(tp, 0, 150).start_offset == 300
