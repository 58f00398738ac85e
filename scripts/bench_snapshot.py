"""Snapshot benchmark: Spark rebuild rate, restore time, time to ready from a snapshot vs a full replay.

    python scripts/bench_snapshot.py [--events 1000000] [--restore-segments 500000] [--json] [--smoke]

The workload (``rlmm.workload``, 200 user partitions, 50 metadata partitions, as bench_ingest) goes into a local
Tansu broker: all ``--events`` records into ``bench-full``, the first 90 % into ``bench-tailed``. Measures:

* rebuild_events_per_s: ``snapshots.job.build`` on ``--master`` (local[2]) over ``bench-full``, records
  read through the Kafka Python data source, folded, snapshot written (Spark session start excluded;
  the first job of the session, so it includes starting the Python workers and warming the JVM);
* rebuild_warm_events_per_s: the same for ``bench-tailed`` (its 90 %), the second job of the session;
* restore_s: restore of the whole topic's snapshot into a fresh view;
* restore_500k_segments_s: restore of a synthetic snapshot of ``--restore-segments`` finished segments;
* ready_from_snapshot_s: once the last 10 % is produced into ``bench-tailed``, restore of its 90 % snapshot +
  the service tailing the rest until ready (the same topic: the snapshot holds its topic id, which the
  service checks);
* ready_from_replay_s: the service on an empty view reading the whole of ``bench-tailed`` until ready.

``--smoke``: 20,000 events and 5,000 synthetic segments, to show that the benchmark runs (Spark's start and its
jobs' fixed costs take most of it).

``--json`` prints one object with these keys:

* ``events``: events produced (``--events``);
* ``smoke``: whether ``--smoke`` chose the sizes;
* ``master``: the Spark master;
* ``core``: the core's build (compiled or interpreted);
* ``spark_start_s``: starting the Spark session;
* ``rebuild_s``, ``rebuild_records``, ``rebuild_events_per_s``: the first job, over the whole topic;
* ``snapshot_segments``: live segments in its snapshot;
* ``rebuild_warm_events_per_s``: the second job, over the first 90 %;
* ``restore_s``: restore of the whole topic's snapshot;
* ``restore_segments``, ``restore_500k_segments_s``: segments of the synthetic snapshot, its restore;
* ``ready_from_snapshot_s``, ``ready_from_replay_s``: to ready from the 90 % snapshot, from an empty view;
* ``ready_speedup``: ``ready_from_replay_s`` / ``ready_from_snapshot_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka.admin import AdminClient  # noqa: E402

from consumers.broker import LocalBroker  # noqa: E402
from consumers.manager import RemoteLogMetadataManager  # noqa: E402
from consumers.topic import ensure_topic  # noqa: E402
from rlmm.compiled import core_build  # noqa: E402
from rlmm.records.model import SegmentMetadata, SegmentState, TopicIdPartition  # noqa: E402
from rlmm.state.export import EpochState, PartitionState  # noqa: E402
from rlmm.state.view import View  # noqa: E402
from scripts.bench_ingest import config_for, ingest, produce_workload, wait_until_ready  # noqa: E402
from snapshots.format import write_snapshot  # noqa: E402
from snapshots.job import build, spark_session  # noqa: E402
from snapshots.restore import restore  # noqa: E402

FULL = {"events": 1_000_000, "restore_segments": 500_000}
SMOKE = {"events": 20_000, "restore_segments": 5_000}


def synthetic_states(segments: int, partitions: int = 100) -> list[PartitionState]:
    """Finished segments, contiguous, one leader epoch per 1,000 segments, every one referenced."""
    states = []
    per = segments // partitions
    for p in range(partitions):
        tp = TopicIdPartition(p.to_bytes(4, "big") * 4, f"bench-{p % 10}", p)
        segs, epochs = [], {}
        for i in range(per):
            epoch = i // 1000
            sid = (p * per + i).to_bytes(8, "big") * 2
            start = i * 1000
            segs.append(
                SegmentMetadata(
                    tp,
                    sid,
                    start,
                    start + 999,
                    1,
                    1_718_000_000_000 + i,
                    1_718_000_000_000 + i,
                    ((epoch, start),),
                    1 << 20,
                    None,
                    SegmentState.COPY_SEGMENT_FINISHED,
                    i % 5 != 0,
                )
            )
            es = epochs.setdefault(epoch, EpochState(epoch, None))
            es.referenced.append((start, sid))
            es.highest_offset = start + 999
        segs.sort(key=lambda s: s.segment_id)
        states.append(PartitionState(tp, True, True, False, per * 2, None, segs, [epochs[e] for e in sorted(epochs)]))
    return states


def timed_rebuild(spark, out: Path, bootstrap: str, topic: str, say) -> tuple[dict, int, float]:
    """(manifest, records read, seconds) of one rebuild of the topic."""
    t0 = time.perf_counter()
    manifest = build(spark, out, bootstrap=bootstrap, topic=topic, progress=say)
    seconds = time.perf_counter() - t0
    return manifest, sum(v + 1 for v in manifest["metadata_offsets"].values()), seconds


def serve_until_ready(view_dir: Path, config, partitions) -> None:
    with View(view_dir) as view, RemoteLogMetadataManager(view, config, partitions) as rlmm:
        wait_until_ready(rlmm, 1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, help=f"[{FULL['events']:,}; smoke {SMOKE['events']:,}]")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--restore-segments", type=int, help=f"[{FULL['restore_segments']:,}; smoke {SMOKE['restore_segments']:,}]"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="a tiny run: does the benchmark run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    sizes = dict(SMOKE if args.smoke else FULL)
    sizes.update({key: getattr(args, key) for key in sizes if getattr(args, key) is not None})
    events = sizes["events"]

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result: dict = {"core": core_build(), "events": events, "smoke": args.smoke, "master": args.master}
    with (
        tempfile.TemporaryDirectory(prefix="rlmm-bench-snapshot-") as tmp_name,
        LocalBroker(log_path=Path(tmp_name) / "tansu.log") as broker,
    ):
        tmp = Path(tmp_name)
        boot = broker.bootstrap_servers
        full, tailed = config_for(boot, "bench-full"), config_for(boot, "bench-tailed")
        for config in (full, tailed):
            ensure_topic(AdminClient(config.admin_config()), config)
        tail_cut = events * 9 // 10
        say(f"producing {events} events, {tail_cut} of them into {tailed.topic} for now")
        workload = produce_workload(boot, {full.topic: range(events), tailed.topic: range(tail_cut)}, events, args.seed)
        t0 = time.perf_counter()
        spark = spark_session(args.master)
        result["spark_start_s"] = round(time.perf_counter() - t0, 2)

        say("rebuild of the whole topic")
        manifest, records, seconds = timed_rebuild(spark, tmp / "snap-full", boot, full.topic, say)
        result.update(
            rebuild_s=round(seconds, 2),
            rebuild_records=records,
            rebuild_events_per_s=round(records / seconds),
            snapshot_segments=manifest["counts"]["segments"],
        )

        say("rebuild of the first 90 %")
        _, records, seconds = timed_rebuild(spark, tmp / "snap-90", boot, tailed.topic, say)
        result["rebuild_warm_events_per_s"] = round(records / seconds)
        spark.stop()
        say(f"producing the last {events - tail_cut} events into {tailed.topic}")
        produce_workload(boot, {tailed.topic: range(tail_cut, events)}, events, args.seed)

        t0 = time.perf_counter()
        restore(tmp / "snap-full", tmp / "restored-full")
        result["restore_s"] = round(time.perf_counter() - t0, 3)

        say(f"synthetic snapshot of {sizes['restore_segments']} segments")
        write_snapshot(tmp / "snap-synthetic", synthetic_states(sizes["restore_segments"]), [], {0: 0}, 50)
        t0 = time.perf_counter()
        restore(tmp / "snap-synthetic", tmp / "restored-synthetic")
        result["restore_500k_segments_s"] = round(time.perf_counter() - t0, 3)
        result["restore_segments"] = sizes["restore_segments"]

        say("ready from the 90 % snapshot + tail")
        tps = workload.user_partitions()
        t0 = time.perf_counter()
        restore(tmp / "snap-90", tmp / "from-snapshot")
        serve_until_ready(tmp / "from-snapshot", tailed, tps)
        result["ready_from_snapshot_s"] = round(time.perf_counter() - t0, 2)

        say("ready from a full replay")
        t0 = time.perf_counter()
        ingest(tmp / "from-replay", tailed, workload)
        result["ready_from_replay_s"] = round(time.perf_counter() - t0, 2)
        result["ready_speedup"] = round(result["ready_from_replay_s"] / result["ready_from_snapshot_s"], 2)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:28} {v}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
