"""Crash safety: SIGKILL a process applying a generated stream at random points, restart it on the
same view until the stream is applied, and compare the view with a clean replay.

    python scripts/crash_loop.py --kills 500 --events 20000 [--json]

Each round uses a fresh view and a new seed; rounds repeat until ``--kills`` kills happened. The
comparison covers every query answer (``probe_partition``) and the raw content of every column family.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlmm.state import keys as K
from rlmm.state.probe import probe_partition
from rlmm.state.view import View
from rlmm.workload import Workload, WorkloadConfig

READY_LINE = "applying"


def workload(seed: int, partitions: int) -> Workload:
    return Workload(
        WorkloadConfig(
            partitions=partitions,
            metadata_partitions=8,
            seed=seed,
            invalid_share=0.01,
            redelivery_share=0.01,
            partition_delete_share=0.0005,
            retained_segments=10,
        )
    )


def apply_stream(
    view_dir: Path, seed: int, events: int, partitions: int, max_batch: int, announce: bool = False
) -> int:
    """Apply the stream from where the view stands; returns how many events were applied now."""
    load = workload(seed, partitions)
    rng = random.Random(time.monotonic_ns())
    with View(view_dir) as view:
        with view.batch() as batch:
            for tp in load.user_partitions():
                batch.assign(tp)
                batch.mark_ready(tp)
        position = view.metadata_offsets()
        todo = []
        for e in load.events(events):  # a consumer resumes after its stored offsets and never goes back
            if e.offset > position.get(e.metadata_partition, -1):
                position[e.metadata_partition] = e.offset
                todo.append(e)
        if announce:
            print(READY_LINE, flush=True)
        i = 0
        while i < len(todo):
            size = rng.randint(1, max_batch)
            with view.batch() as batch:
                for e in todo[i : i + size]:
                    batch.apply(e.metadata_partition, e.offset, e.value)
            i += size
    return len(todo)


def snapshot_of(view_dir: Path, seed: int, partitions: int) -> dict:
    with View(view_dir) as view:
        raw = {cf: [(k.hex(), v.hex()) for k, v in view.items(cf)] for cf in K.COLUMN_FAMILIES}
        answers = {
            f"{tp.partition}": probe_partition(view.queries, tp) for tp in workload(seed, partitions).user_partitions()
        }
    return {"raw": raw, "answers": answers}


def first_difference(a: dict, b: dict) -> str | None:
    for part in ("answers", "raw"):
        for key in sorted(set(a[part]) | set(b[part])):
            if a[part].get(key) != b[part].get(key):
                return f"{part}: {key}"
    return None


def run_round(workdir: Path, seed: int, events: int, partitions: int, kills_wanted: int, max_delay: float) -> dict:
    view_dir = workdir / f"view-{seed}"
    command = [
        sys.executable,
        __file__,
        "--child",
        str(view_dir),
        "--seed",
        str(seed),
        "--events",
        str(events),
        "--partitions",
        str(partitions),
    ]
    rng = random.Random(seed)
    kills = restarts = 0
    while True:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        restarts += 1
        child.stdout.readline()  # the child opened the view and starts applying
        if kills < kills_wanted:
            try:
                child.wait(timeout=rng.uniform(0.0, max_delay))
            except subprocess.TimeoutExpired:
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
                kills += 1
                continue
        else:
            child.wait()
        if child.returncode != 0:
            raise RuntimeError(f"child exited with {child.returncode}")
        break
    clean_dir = workdir / f"clean-{seed}"
    apply_stream(clean_dir, seed, events, partitions, max_batch=events)
    crashed, clean = snapshot_of(view_dir, seed, partitions), snapshot_of(clean_dir, seed, partitions)
    return {
        "seed": seed,
        "kills": kills,
        "runs": restarts,
        "difference": first_difference(crashed, clean),
        "segments": len(clean["raw"][K.SEGMENTS]),
    }


def run_crash_loop(
    kills: int, events: int, partitions: int = 20, seed: int = 1, max_delay: float = 0.4, kills_per_round: int = 25
) -> dict:
    started = time.monotonic()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="rlmm-crash-") as tmp:
        total = 0
        while total < kills:
            result = run_round(
                Path(tmp), seed + len(rounds), events, partitions, min(kills_per_round, kills - total), max_delay
            )
            rounds.append(result)
            total += result["kills"]
    return {
        "kills": sum(r["kills"] for r in rounds),
        "rounds": rounds,
        "mismatches": [r for r in rounds if r["difference"]],
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-delay", type=float, default=0.4, help="kill within this many seconds of a start")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        apply_stream(args.child, args.seed, args.events, args.partitions, max_batch=200, announce=True)
        return
    report = run_crash_loop(args.kills, args.events, args.partitions, args.seed, args.max_delay)
    if args.json:
        print(json.dumps(report))
    else:
        for r in report["rounds"]:
            print(
                f"seed {r['seed']}: {r['kills']} kills over {r['runs']} runs, {r['segments']} segments, "
                f"{'identical to a clean replay' if not r['difference'] else 'DIFFERS at ' + r['difference']}"
            )
        print(f"{report['kills']} kills, {len(report['mismatches'])} mismatching rounds, {report['seconds']} s")
    sys.exit(1 if report["mismatches"] else 0)


if __name__ == "__main__":
    main()
