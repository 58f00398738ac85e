"""The metadata topic's partition count comes with the view: a view (or the snapshot it was restored from) records
the count of the topic it was built from, and a configuration that does not set one consumes with it instead of
Kafka's default of 50; one that sets another count is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from consumers import view_state
from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from rlmm.errors import ConsumerStoppedError, TopicMismatchError
from rlmm.records import TopicIdPartition
from rlmm.state.view import View
from snapshots.restore import export, restore
from tests.test_broker_faults import add_finished

TP = TopicIdPartition(bytes(range(16)), "orders", 3)
PARTITIONS = 10
WAIT_S = 30


def properties(config: RlmmConfig, **more: str) -> RlmmConfig:
    """``config`` as the command line gives it: Kafka-named settings, the partition count only if in ``more``."""
    return RlmmConfig.from_properties(
        config.bootstrap_servers,
        {
            "remote.log.metadata.topic.name": config.topic,
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.topic.min.insync.replicas": "1",
            **{f"remote.log.metadata.topic.{name}": value for name, value in more.items()},
        },
    )


def test_a_view_and_its_snapshot_are_consumed_with_the_count_they_record(rlmm_config, tmp_path) -> None:
    built = rlmm_config(num_partitions=PARTITIONS)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, built, [TP]) as rlmm:
        assert rlmm.consumer.wait_ready([TP], timeout=WAIT_S)
        segment_id = add_finished(rlmm, TP, 0, 9)
        assert view_state.num_partitions_of(view.consumer_state()) == PARTITIONS

    unset = properties(built)
    assert (unset.num_partitions, unset.num_partitions_given) == (50, False)  # Kafka's default, not set
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, unset) as rlmm:
        assert rlmm.config.num_partitions == PARTITIONS
        assert rlmm.consumer.wait_ready([TP], timeout=WAIT_S)
        assert rlmm.queries.remote_log_segment_metadata(TP, 0, 5).segment_id == segment_id
        add_finished(rlmm, TP, 10, 19)  # written where the brokers read

    other = properties(built, **{"num.partitions": "50"})
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, other) as rlmm:
        with pytest.raises(ConsumerStoppedError, match="built from a metadata topic of 10 partitions") as refused:
            rlmm.consumer.wait_initialized(WAIT_S)
        assert isinstance(refused.value.__cause__, TopicMismatchError)

    assert export(tmp_path / "view", tmp_path / "snapshot", PARTITIONS)["num_metadata_partitions"] == PARTITIONS
    restore(tmp_path / "snapshot", tmp_path / "restored")
    with View(tmp_path / "restored") as view:
        assert view_state.num_partitions_of(view.consumer_state()) == PARTITIONS
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rlmm.cli", "consume", "--view", str(tmp_path / "restored")),
            *("-b", built.bootstrap_servers, "--set", f"remote.log.metadata.topic.name={built.topic}"),
            *("--exit-when-ready", "--timeout", str(WAIT_S)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["pending_partitions"] == 0  # its partition caught up
