"""A snapshot exported beside a running service, restored, and tailing the real broker: a partition that was
being loaded when the export was taken (registered after its metadata partition was read, so that partition is
read again from the beginning) is loaded whole, not taken as caught up after the highest offset read."""

from __future__ import annotations

import time

from consumers.manager import RemoteLogMetadataManager
from rlmm.records import TopicIdPartition, metadata_partition
from rlmm.state.view import View
from snapshots.restore import export, restore
from tests.kafka_broker import RawProducer
from tests.test_broker_topic_change import PARTITIONS, finished_records

SERVED = TopicIdPartition(bytes(range(16)), "orders", 0)
MP = metadata_partition(SERVED.topic_id, SERVED.partition, PARTITIONS)
LOADING = next(
    TopicIdPartition(SERVED.topic_id, "orders", p)
    for p in range(1, 100)
    if metadata_partition(SERVED.topic_id, p, PARTITIONS) == MP
)


def starts(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> list[int]:
    return sorted(s.start_offset for s in rlmm.queries.list_remote_log_segments(tp))


def loaded_up_to(view: View) -> int | None:
    row = view.queries.partition_row(LOADING)
    return None if row is None else row.last_applied_offset


def test_an_export_taken_while_a_partition_loads_restores_it_whole(rlmm_config, tmp_path) -> None:
    config = rlmm_config(num_partitions=PARTITIONS)
    records = [
        (MP, value) for _, value in finished_records(SERVED, 3) + finished_records(LOADING, 5, base=500)
    ]  # offsets 0-5 of the served partition, 6-15 of the other
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [SERVED]) as rlmm:
        assert rlmm.consumer.wait_ready([SERVED], timeout=30)
        RawProducer(config.bootstrap_servers, config.topic).produce(records)
        rlmm.wait_applied(MP, 15, timeout=30)
        assert rlmm.consumer.hold({MP: 10}).wait(10)  # the reading again stops after offset 9
        rlmm.on_partition_leadership_changes([LOADING], [])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and loaded_up_to(view) != 9:
            time.sleep(0.02)
        assert loaded_up_to(view) == 9
        manifest = export(tmp_path / "view", tmp_path / "snap", PARTITIONS)
    assert manifest["metadata_offsets"] == {str(MP): 15} and manifest["rereads"] == {str(MP): 15}
    restore(tmp_path / "snap", tmp_path / "restored")
    with View(tmp_path / "restored") as view, RemoteLogMetadataManager(view, config, [SERVED, LOADING]) as rlmm:
        assert rlmm.consumer.wait_ready([SERVED, LOADING], timeout=30)
        assert starts(rlmm, LOADING) == [500, 510, 520, 530, 540]
        assert rlmm.queries.remote_log_segment_metadata(LOADING, 0, 535).start_offset == 530
        assert rlmm.queries.highest_offset_for_epoch(LOADING, 0) == 549
        assert starts(rlmm, SERVED) == [0, 10, 20] and rlmm.consumer.failure is None
