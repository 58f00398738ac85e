"""A damaged view, measured: how many reads fail loudly and how many answer wrongly (which must be none).

    python scripts/damage_drill.py [--events 1000000] [--places 1] [--json]

Builds a view of the generated workload (as ``bench_core`` does), copies it, overwrites 64 bytes at
``--places`` spots in the middle of the copy's largest table file, as a bad disk would, then asks both
views the same questions: a lookup at the start offset of every segment, and a scan of every column
family. Every answer of the damaged view must be the clean view's, or fail with ``ViewDamaged``. Also
times ``rlmm view check`` on the clean view.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import track

from rlmm.errors import ViewDamaged
from rlmm.runtime import tune_process
from rlmm.state import keys as K
from rlmm.state.view import View
from rlmm.workload import Workload, WorkloadConfig

BATCH = 5_000


def build(path: Path, events: int, seed: int) -> list:
    workload = Workload(WorkloadConfig(partitions=200, metadata_partitions=50, seed=seed, retained_segments=2_000))
    pending = []
    with View(path) as view:
        with view.batch() as batch:
            for tp in workload.user_partitions():
                batch.assign(tp)
        for event in track(
            workload.events(events), total=events, description="building the view", console=Console(stderr=True)
        ):
            pending.append(event)
            if len(pending) == BATCH:
                with view.batch() as batch:
                    for e in pending:
                        batch.apply(e.metadata_partition, e.offset, e.value)
                pending.clear()
        with view.batch() as batch:
            for e in pending:
                batch.apply(e.metadata_partition, e.offset, e.value)
            for tp in workload.user_partitions():
                batch.mark_ready(tp)
        view.flush()
    return workload.user_partitions()


def damage(path: Path, places: int) -> str:
    table = max(path.glob("*.sst"), key=lambda p: p.stat().st_size)
    size = table.stat().st_size
    with table.open("r+b") as f:
        for i in range(1, places + 1):
            f.seek(size * i // (places + 1))
            f.write(b"\xa5" * 64)
    return f"{table.name} ({size:,} bytes)"


def compare(clean, damaged) -> str:
    """ "same", "failed" (ViewDamaged), or "wrong"."""
    try:
        answer = damaged()
    except ViewDamaged:
        return "failed"
    return "same" if answer == clean() else "wrong"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--places", type=int, default=1, help="spots of 64 bytes overwritten")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    tune_process()
    with tempfile.TemporaryDirectory(prefix="rlmm-damage-") as tmp:
        clean_dir, damaged_dir = Path(tmp) / "clean", Path(tmp) / "damaged"
        tps = build(clean_dir, args.events, args.seed)
        shutil.copytree(clean_dir, damaged_dir)
        damaged_table = damage(damaged_dir, args.places)
        started = time.monotonic()
        check = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "view", "check", "--view", str(clean_dir)],
            capture_output=True,
            text=True,
            check=True,
        )
        check_s = time.monotonic() - started
        entries = sum(json.loads(check.stdout)["entries"].values())
        lookups = {"same": 0, "failed": 0, "wrong": 0}
        scans = {"same": 0, "failed": 0, "wrong": 0}
        with View(clean_dir, read_only=True) as clean, View(damaged_dir, read_only=True, cache_mb=1) as bad:
            for tp in tps:
                if clean.queries.partition_row(tp).removed:
                    continue
                for seg in clean.queries.list_remote_log_segments(tp):
                    for epoch, start in seg.segment_leader_epochs:
                        lookups[
                            compare(
                                lambda: clean.queries.remote_log_segment_metadata(tp, epoch, start),
                                lambda: bad.queries.remote_log_segment_metadata(tp, epoch, start),
                            )
                        ] += 1
            for cf in K.COLUMN_FAMILIES:
                scans[compare(lambda: list(clean.items(cf)), lambda: list(bad.items(cf)))] += 1
            fault = str(bad.fault)
    result = {
        "events": args.events,
        "damaged_table": damaged_table,
        "places": args.places,
        "lookups": lookups,
        "column_family_scans": scans,
        "fault": fault,
        "view_check_s": round(check_s, 2),
        "view_check_entries": entries,
        "view_check_entries_per_s": round(entries / check_s),
    }
    if args.json:
        print(json.dumps(result))
    else:
        Console().print_json(json.dumps(result))
    if lookups["wrong"] or scans["wrong"]:
        sys.exit("a damaged view answered wrongly")


if __name__ == "__main__":
    main()
