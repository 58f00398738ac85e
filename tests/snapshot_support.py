"""Helpers of the snapshot tests: views built by the service's own path, compared row by row and
answer by answer."""

from __future__ import annotations

from pathlib import Path

from rlmm.records.model import TopicIdPartition
from rlmm.replay import Scenario, replay
from rlmm.state import keys as K
from rlmm.state.export import partitions
from rlmm.state.kv import ReadKV, scan
from rlmm.state.probe import probe_partition
from rlmm.state.queries import Queries
from rlmm.state.rows import PartitionRow
from rlmm.state.view import View
from rlmm.workload import Workload, WorkloadConfig
from tests.kafka_compat import compat_dir

SCENARIOS = sorted(p.name for p in (compat_dir() / "replay-public").iterdir() if (p / "scenario.json").is_file())


def scenario_dir(name: str) -> Path:
    return compat_dir() / "replay-public" / name


def scenario_events(name: str) -> list[tuple[int, int, bytes]]:
    scenario = Scenario.load(scenario_dir(name))
    return [(e["metadata_partition"], e["offset"], bytes.fromhex(e["hex"])) for e in scenario.events]


def replayed_view(name: str, path: Path, *, all_ready: bool = False) -> View:
    """The view ``rlmm replay`` leaves for a scenario (reopened). ``all_ready``: then marked ready as a
    snapshot marks every partition (a snapshot holds no readiness of its own: a service started from it
    withdraws and recomputes it), where a record that threw left it not ready."""
    for _ in replay(scenario_dir(name), path / "replayed"):
        pass
    view = View(path / "replayed")
    if all_ready:
        with view.batch() as batch:
            for tp, _ in Scenario.load(scenario_dir(name)).assigned:
                batch.mark_ready(tp)
    return view


def ending_in_failure(events, tps, path: Path) -> set[int]:
    """The metadata partitions whose last record fails (decoding or handling), applied as a service would:
    by Kafka's rule the partitions they hold do not become ready on that record."""
    failed: dict[int, bool] = {}
    with View(path) as view:
        with view.batch() as batch:
            for tp in tps:
                batch.assign(tp)
        with view.batch() as batch:
            for mp, offset, value in events:
                failed[mp] = batch.apply(mp, offset, value).status == "error"
    return {mp for mp, failing in failed.items() if failing}


def workload_events(
    count: int, seed: int = 3, partitions_: int = 12, metadata_partitions: int = 5, **overrides
) -> tuple[list[tuple[int, int, bytes | None]], list[TopicIdPartition]]:
    """A generated stream with leader changes, overlaps, retention, invalid records, redeliveries and
    partition deletions (their shares raised so that small streams have them)."""
    config = WorkloadConfig(
        partitions=partitions_,
        metadata_partitions=metadata_partitions,
        seed=seed,
        retained_segments=6,
        invalid_share=0.02,
        redelivery_share=0.02,
        partition_delete_share=0.003,
        **overrides,
    )
    workload = Workload(config)
    return [(e.metadata_partition, e.offset, e.value) for e in workload.events(count)], workload.user_partitions()


def live_view(events, tps, path: Path, batch_size: int = 37) -> View:
    """The service's path: every partition registered first, records applied in batches, then ready."""
    view = View(path)
    with view.batch() as batch:
        for tp in tps:
            batch.assign(tp)
    for i in range(0, len(events), batch_size):
        with view.batch() as batch:
            for mp, offset, value in events[i : i + batch_size]:
                batch.apply(mp, offset, value)
    with view.batch() as batch:
        for tp in tps:
            batch.mark_ready(tp)
    return view


def partition_rows(kv: ReadKV, tp: TopicIdPartition) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every row of a partition, tpids stripped (keys) and zeroed (the partition row)."""
    raw = kv.get(K.PARTITIONS, K.tp_identity(tp))
    if raw is None:
        return {}
    row = PartitionRow.unpack(raw)
    rows = {K.PARTITIONS: [(b"", b"\0\0\0\0" + raw[4:])]}
    for cf in K.PER_PARTITION:
        rows[cf] = [(k[4:], v) for k, v in scan(kv, cf, row.tpid)]
    return rows


def view_rows(kv: ReadKV) -> dict[TopicIdPartition, dict]:
    return {tp: partition_rows(kv, tp) for tp in partitions(kv)}


def view_answers(queries: Queries, kv: ReadKV) -> dict[TopicIdPartition, dict]:
    return {tp: probe_partition(queries, tp) for tp in partitions(kv)}


def non_partition_rows(view: View) -> dict:
    return {"metadata_offsets": view.metadata_offsets(), "quarantine": list(view.quarantine())}
