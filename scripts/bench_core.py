"""Benchmark of the core: decode, durable apply into RocksDB, query latency, txn-chain seeks, timestamp lookups
against Kafka's scan, memory, disk.

    python scripts/bench_core.py [--events 1000000] [--stream cluster|uploads] [--json] [--smoke] [--callgrind [N]]
                                 [--cache-mb MB] [--write-buffer-mb MB]

The stream is generated first into a file; a separate process streams it and measures, so its peak RSS
is the view's, not the generator's. The apply rate times the view's batches (decode, apply, commit), not
the reading of the events file. Two streams:

* ``cluster`` (the default, ``rlmm.workload``): 200 user partitions with leader changes, retention,
  transaction indexes, redeliveries and a few invalid records;
* ``uploads``: 100 user partitions, each uploading contiguous segments in leader epoch 0 (copy started,
  then finished), nothing deleted: the stream on which Kafka 4.3.1's own serde and store are measured, so that
  the report gives rlmm's apply rate, peak RSS and lookup latency as ratios of Kafka's.

``--kafka`` (uploads only) measures Kafka in the same run, on the same events: Kafka 4.3.1's own serde and
``RemoteLogMetadataCache`` in a JVM (``io.rlmm.kafka.bench.StoreYardstick``, built by
``scripts/build_kafka_plugin.py --tests`` against Kafka's libs, ``KAFKA_LIBS`` or ``../shared/kafka-4.3.1/libs``):
its apply rate over warm passes, the heap its store holds after a full collection, and its lookup p50. Without it
the ratios are of figures measured once on this machine kind (``KAFKA_UPLOADS``), which a busy or a different
machine makes wrong.

``--callgrind`` also counts instructions with valgrind's callgrind (the Debian package ``valgrind``), which hold
on a busy machine where seconds do not: a process builds the view of all but the stream's last 2N events (N is
20,000 by default), then another, under callgrind, applies those 2N, of which it counts the last N (the first
fill its caches), and asks each query of a sample of the targets the timed run asks (after an uncounted pass).
The report gives the instructions of the applying thread per event and per query. Callgrind counts no kernel
work: a table block read from file costs a read system call besides the instructions, so the report gives the
thread's read calls per event and per query too.

Memory should not grow with the view's history: the report gives RSS growth over the apply's second half (per
million events) and what RocksDB holds after the apply; a longer stream (``--events 4000000``) shows it better.

``--cache-mb`` and ``--write-buffer-mb`` set the view's block cache and memtable budget (``View``; by default the
view's own), to measure what each costs and saves.

``--smoke``: 20,000 events, txn chains of up to 100 segments, by-timestamp epochs of up to 1,000 segments: a few
seconds, to show that the benchmark runs.

``--json`` prints one object with these keys:

* ``stream``: ``cluster`` or ``uploads``;
* ``smoke``: whether ``--smoke`` chose the sizes;
* ``core``: the core's build (compiled or interpreted);
* ``events``: events applied;
* ``segments_in_view``: segments in the view after the apply;
* ``decode_records_per_s``: decoding alone, over the first 200,000 records;
* ``apply_events_per_s``: decode + durable apply, the view's batches timed;
* ``apply_us_per_event``: µs per event by stage of the view's batches;
* ``apply_without_state_machine_events_per_s``: what decoding and the durable write alone would allow;
* ``query_p50_us``, ``query_p99_us``: by query, at sampled existing offsets;
* ``txn_next_p50_us``: ``nextSegmentWithTxnIndex`` by txn-empty segments skipped;
* ``by_timestamp_p50_us``: the descent of ``FirstSegmentWithMaxTimestampAtLeast`` and Kafka's scan, by segments
  in the epoch;
* ``peak_rss_mb``, ``rss_before_view_mb``, ``view_peak_mb``: the measuring process's peak RSS, its RSS before the
  view opened, the difference;
* ``rss_mb_by_events``: RSS along the apply (by events applied) and at the steps around it;
* ``rss_growth_mb_per_million_events``: over the apply's second half;
* ``rocksdb_mb_after_apply``: RocksDB's block cache, memtables and table readers;
* ``disk_mb``: the view's files;
* ``cache_mb``, ``write_buffer_mb``: the view's block cache and memtable budget;
* ``of_kafka``: the ``uploads`` stream's measures as ratios of Kafka's (``kafka``); null for ``cluster``.
* ``kafka``: Kafka's figures the ratios are of: ``apply_events_per_s`` (its warm passes with ``--kafka``),
  ``heap_mb``, ``point_query_p50_us``, and ``measured``: ``"this run"`` or ``"stored"`` (``KAFKA_UPLOADS``); null for
  ``cluster``.
* ``instructions``: with ``--callgrind``, the applying thread's instructions and read calls per event, and per
  call of each query (valgrind's callgrind); null without.
* ``rows_per_event``: the rows the view's batches wrote for the stream (puts, deletions, range deletions), counted
  in a separate apply of it (``View(count_rows=True)``, ``rlmm.state.kv.RowCounts``): per event in all (``rows``,
  and their keys' and values' ``bytes``), by column family, by operation, and by the kind of event that last changed
  each row in its batch (per event of that kind; ``batch``: the rows written once per batch, partitions, epochs,
  consumed offsets and counters, per event of any kind).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rlmm.compiled import core_build
from rlmm.errors import DecodeError
from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.records.partitioner import metadata_partition
from rlmm.records.serde import decode_value, encode_value
from rlmm.runtime import tune_process
from rlmm.state import keys as K
from rlmm.state.rocks import BLOCK_CACHE_MB, WRITE_BUFFER_MB
from rlmm.state.rows import segment_row_value
from rlmm.state.view import View
from rlmm.workload import Workload, WorkloadConfig

FRAME = struct.Struct(">iqi")  # metadata partition, offset, value length (-1: null)
BATCH = 5_000
DECODE_SAMPLE = 200_000
# samples: lookups timed per query; txn_distances: txn-empty segments skipped by nextSegmentWithTxnIndex;
# timestamp_sizes: segments of the epochs searched by timestamp; scan_segments: segments Kafka's scan walks in all,
# at each size
FULL = {
    "events": 1_000_000,
    "samples": 2_000,
    "txn_distances": (1, 100, 10_000),
    "timestamp_sizes": (10, 10_000, 100_000),
    "scan_segments": 50_000,
}
SMOKE = {
    "events": 20_000,
    "samples": 200,
    "txn_distances": (1, 10, 100),
    "timestamp_sizes": (10, 100, 1_000),
    "scan_segments": 2_000,
}
CALLGRIND_EVENTS = 20_000  # the stream's last events, applied under callgrind onto the view of the others
CALLGRIND_QUERIES = 500  # of the timed run's targets, asked of each query under callgrind
KAFKA_YARDSTICK_MAIN = "io.rlmm.kafka.bench.StoreYardstick"
KAFKA_PASSES = 4  # Kafka's applies of the stream: the first cold, the others warm
KAFKA_HEAP = "4g"
KAFKA_YARDSTICK = {
    "decode_records_per_s": "~5M records/s warm",
    "apply_events_per_s": "1M events in 1.1-3.1 s (in memory, not durable)",
    "memory": "~550 bytes of heap per segment",
    "txn_next": "0.18 us at distance 1, 1.5 ms at 10,000",
}
# Kafka 4.3.1's own serde and RemoteLogMetadataCache on the uploads stream (1M events, 500k segments), in
# memory, warm, 4 GB heap, measured on this machine kind (three runs): the yardstick without --kafka
KAFKA_UPLOADS = {
    "apply_events_per_s": (832_000, 893_000),
    "heap_mb": 265,  # the store's heap after GC
    "point_query_p50_us": (1.5, 1.9),
}
UPLOADS_PARTITIONS = 100
SEGMENT_OFFSETS = 100  # of each uploaded segment
METADATA_PARTITIONS = 50  # both streams, as Kafka's default topic
TARGETS = {
    "decode_records_per_s": 200_000,
    "apply_events_per_s": 60_000,
    "point_query_p50_us": 20,
    "txn_ratio_10000_vs_1": 3,
    "peak_rss_mb": 250,
}


def generate(path: Path, events: int, seed: int) -> None:
    workload = Workload(
        WorkloadConfig(partitions=200, metadata_partitions=METADATA_PARTITIONS, seed=seed, retained_segments=2_000)
    )
    with path.open("wb") as out:
        for e in workload.events(events):
            value = e.value
            out.write(FRAME.pack(e.metadata_partition, e.offset, -1 if value is None else len(value)))
            if value is not None:
                out.write(value)
    (path.with_suffix(".partitions")).write_text(
        json.dumps([[tp.topic_id.hex(), tp.topic, tp.partition] for tp in workload.user_partitions()])
    )


def generate_uploads(path: Path, events: int) -> None:
    """``events`` / 2 segments, round-robin over the partitions: each copy started, then finished."""
    rng = random.Random(1)
    partitions = [TopicIdPartition(rng.randbytes(16), f"uploads-{i % 10}", i) for i in range(UPLOADS_PARTITIONS)]
    offsets = [0] * METADATA_PARTITIONS
    with path.open("wb") as out:
        for i in range(events // 2):
            tp = partitions[i % UPLOADS_PARTITIONS]
            start = i // UPLOADS_PARTITIONS * SEGMENT_OFFSETS
            segment_id = rng.randbytes(16)
            segment = SegmentMetadata(
                tp,
                segment_id,
                start,
                start + SEGMENT_OFFSETS - 1,
                0,
                1_700_000_000_000 + i,
                1,
                ((0, start),),
                1_000,
                None,
                SegmentState.COPY_SEGMENT_STARTED,
            )
            finished = SegmentUpdate(tp, segment_id, 1, 1_700_000_000_000 + i, None, SegmentState.COPY_SEGMENT_FINISHED)
            mp = metadata_partition(tp.topic_id, tp.partition, len(offsets))
            for value in (encode_value(segment), encode_value(finished)):
                out.write(FRAME.pack(mp, offsets[mp], len(value)) + value)
                offsets[mp] += 1
    path.with_suffix(".partitions").write_text(
        json.dumps([[tp.topic_id.hex(), tp.topic, tp.partition] for tp in partitions])
    )


def read_events(path: Path) -> Iterator[tuple[int, int, bytes | None]]:
    with path.open("rb") as f:
        data = f.read(FRAME.size)
        while data:
            mp, offset, length = FRAME.unpack(data)
            yield mp, offset, None if length < 0 else f.read(length)
            data = f.read(FRAME.size)


def process_status_mb(field: str) -> float:
    """A memory field of this process's /proc/self/status, in MB. The measuring process imports no more than the
    fold needs (not psutil, nor rich, which only the report uses): what it loads counts in its peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def process_rss_mb() -> float:
    return process_status_mb("VmRSS")


def peak_rss_of_this_process_mb() -> float:
    """The high-water mark of this process's own memory (VmHWM). Not ``getrusage``'s ``ru_maxrss``: Linux keeps
    that across ``exec``, so a child process reports the peak of the parent it was forked from (here the
    workload generator's)."""
    return round(process_status_mb("VmHWM"), 1)


def sample(items: Iterator, k: int, rng: random.Random) -> list:
    """k items drawn uniformly from an iterator without holding it all (reservoir sampling)."""
    reservoir: list = []
    for i, item in enumerate(items):
        if i < k:
            reservoir.append(item)
        elif (j := rng.randrange(i + 1)) < k:
            reservoir[j] = item
    return reservoir


def percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return round(cuts[49], 2), round(cuts[98], 2)


def time_calls(calls: list[Callable[[], object]]) -> tuple[float, float]:
    """p50/p99 µs of the calls in steady state: one untimed pass warms the block cache first."""
    for call in calls:
        call()
    timings = []
    clock = time.perf_counter_ns
    for call in calls:
        t0 = clock()
        call()
        timings.append((clock() - t0) / 1000)
    return percentiles(timings)


def jittered(i: int) -> int:
    """Max timestamps that rise with the offsets, not monotonically (up to 2.5 segments out of order)."""
    return 1_000 * i + (7919 * i) % 2_500


def chain(view: View, tp: TopicIdPartition, length: int, max_timestamp: Callable[[int], int] = int) -> None:
    """Epoch 0 of ``tp`` holds ``length`` contiguous finished txn-empty segments, then one with a txn index."""
    rng = random.Random(7)
    with view.batch() as batch:
        batch.assign(tp)
        batch.mark_ready(tp)
    offset = 0
    for chunk in range(0, length + 1, BATCH // 2):
        with view.batch() as batch:
            for i in range(chunk, min(chunk + BATCH // 2, length + 1)):
                segment = SegmentMetadata(
                    tp,
                    rng.randbytes(16),
                    i * 100,
                    i * 100 + 99,
                    0,
                    max_timestamp(i),
                    i,
                    ((0, i * 100),),
                    100,
                    None,
                    SegmentState.COPY_SEGMENT_STARTED,
                    txn_index_empty=i < length,
                )
                offset += 1
                batch.apply(999, offset, encode_value(segment))
                offset += 1
                batch.apply(
                    999,
                    offset,
                    encode_value(SegmentUpdate(tp, segment.segment_id, 0, i, None, SegmentState.COPY_SEGMENT_FINISHED)),
                )


def kafka_timestamp_scan(view: View, tp: TopicIdPartition, timestamp: int) -> SegmentMetadata | None:
    """RemoteLogManager.findOffsetByTimestamp's walk of one epoch's listing (starting offset 0)."""
    for segment in view.queries.list_epoch_segments(tp, 0):
        if segment.max_timestamp_ms >= timestamp and segment.state is SegmentState.COPY_SEGMENT_FINISHED:
            return segment
    return None


def timestamp_lookups(view: View, sizes: tuple[int, ...], scan_segments: int) -> dict[str, dict[str, float]]:
    """p50 µs of FirstSegmentWithMaxTimestampAtLeast and of Kafka's scan, for a target near the end of epochs of
    each size (the scan walks 99% of the listing; the descent stays 8 levels deep)."""
    p50: dict[str, dict[str, float]] = {"descent": {}, "scan": {}}
    for index, size in enumerate(sizes):
        tp = TopicIdPartition(bytes([0xD0 + index]) * 16, f"timestamps-{size}", 0)
        with view.batch() as batch:
            batch.assign(tp)
            batch.mark_ready(tp)
        chain(view, tp, size, jittered)
        target = jittered(size * 99 // 100)
        found = view.queries.first_segment_with_max_timestamp_at_least(tp, 0, target, 0)
        assert found == kafka_timestamp_scan(view, tp, target) and found is not None
        p50["descent"][str(size)] = time_calls(
            [lambda t=tp: view.queries.first_segment_with_max_timestamp_at_least(t, 0, target, 0)] * 500
        )[0]
        p50["scan"][str(size)] = time_calls(
            [lambda t=tp: kafka_timestamp_scan(view, t, target)] * max(3, scan_segments // size)
        )[0]
    return p50


Target = tuple[TopicIdPartition, int, int]  # partition, epoch, offset


def query_targets(view: View, partitions: list[TopicIdPartition], samples: int) -> list[Target]:
    """``samples`` lookups, drawn from the segments of 50 partitions: an epoch of each and an offset in it."""
    q = view.queries
    rng = random.Random(3)
    targets = []
    for tp in rng.sample(partitions, min(50, len(partitions))):
        segs = sample(q.list_remote_log_segments(tp), samples // 50, rng) if q.is_ready(tp) else []
        for s in segs:
            epoch, start = rng.choice(s.segment_leader_epochs)
            targets.append((tp, epoch, rng.randint(start, s.end_offset)))
    targets = (targets * (samples // max(1, len(targets)) + 1))[:samples]
    rng.shuffle(targets)
    return targets


def query_calls(view: View) -> dict[str, Callable[[Target], object]]:
    q = view.queries
    return {
        "remoteLogSegmentMetadata": lambda t: q.remote_log_segment_metadata(*t),
        "highestOffsetForEpoch": lambda t: q.highest_offset_for_epoch(t[0], t[1]),
        "remoteLogSize(epoch)": lambda t: q.remote_log_size(t[0], t[1]),
        "remoteLogSize": lambda t: q.remote_log_size(t[0]),
        "isReady": lambda t: q.is_ready(t[0]),
        "nextSegmentWithTxnIndex": lambda t: q.next_segment_with_txn_index(*t),
        "maxTimestamp": lambda t: q.max_timestamp(t[0]),
        "listRemoteLogSegments(epoch)": lambda t: q.list_epoch_segments(t[0], t[1]),
    }


def read_partitions(events_path: Path) -> list[TopicIdPartition]:
    return [
        TopicIdPartition(bytes.fromhex(h), t, p)
        for h, t, p in json.loads(events_path.with_suffix(".partitions").read_text())
    ]


def sample_decode_rate(events_path: Path) -> float:
    """Records decoded per second over the stream's first ``DECODE_SAMPLE`` values. (A function of its own: the last
    chunk of values, ~2 MB on the uploads stream, goes with it rather than staying in the apply's peak RSS.)"""
    decoded, decode_seconds = 0, 0.0
    stream = read_events(events_path)
    while decoded < DECODE_SAMPLE:
        values = [v for _, _, v in itertools.islice(stream, 10_000) if v is not None]
        if not values:
            break
        t0 = time.perf_counter()
        for value in values:
            try:
                decode_value(value)
            except DecodeError:
                pass
        decode_seconds += time.perf_counter() - t0
        decoded += len(values)
    stream.close()
    return decoded / decode_seconds


def measure(events_path: Path, view_dir: Path, sizes: dict, memory: dict[str, int]) -> dict:
    tune_process()  # as every rlmm command does
    decode_rate = sample_decode_rate(events_path)
    rss_after_decode = round(process_rss_mb(), 1)

    partitions = read_partitions(events_path)
    applied = 0
    rss_before_view = round(process_rss_mb(), 1)
    with View(view_dir, **memory) as view:
        with view.batch() as batch:
            for tp in partitions:
                batch.assign(tp)
                batch.mark_ready(tp)
        stream = read_events(events_path)
        rss_curve: dict[str, float] = {"after decode": rss_after_decode, "view open": round(process_rss_mb(), 1)}
        apply_seconds = 0.0
        while chunk := list(itertools.islice(stream, BATCH)):  # reading the events file is not timed
            t0 = time.perf_counter()
            with view.batch() as batch:
                for event in chunk:
                    batch.apply(*event)
            apply_seconds += time.perf_counter() - t0
            applied += len(chunk)
            if applied % (BATCH * 20) == 0:
                rss_curve[str(applied)] = round(process_rss_mb(), 1)
        rss_curve.setdefault(str(applied), round(process_rss_mb(), 1))
        rocksdb_mb = {kind: round(size / 2**20, 1) for kind, size in view.memory().items()}
        stage_us = {stage: round(seconds / applied * 1e6, 2) for stage, seconds in view.apply_seconds().items()}

        q = view.queries
        targets = query_targets(view, partitions, sizes["samples"])
        p50, p99 = {}, {}
        for name, call in query_calls(view).items():
            p50[name], p99[name] = time_calls([(lambda c=call, t=t: c(t)) for t in targets])

        rss_curve["after queries"] = round(process_rss_mb(), 1)
        txn_chain = TopicIdPartition(b"\xee" * 16, "txn-chain", 0)
        last = max(sizes["txn_distances"])
        with view.batch() as batch:
            batch.assign(txn_chain)
            batch.mark_ready(txn_chain)
        chain(view, txn_chain, last)
        txn = {}
        for distance in sizes["txn_distances"]:
            offset = (last - distance) * 100
            assert q.next_segment_with_txn_index(txn_chain, 0, offset).start_offset == last * 100
            txn[str(distance)] = time_calls([lambda o=offset: q.next_segment_with_txn_index(txn_chain, 0, o)] * 500)[0]
        rss_curve["after txn chain"] = round(process_rss_mb(), 1)
        peak_rss_mb = peak_rss_of_this_process_mb()  # before the scans' lists of 100k segments
        by_timestamp = timestamp_lookups(view, sizes["timestamp_sizes"], sizes["scan_segments"])
        segments_live = sum(1 for _, row in view.items(K.SEGMENTS) if segment_row_value(row))
    disk = sum(f.stat().st_size for f in view_dir.rglob("*") if f.is_file())
    return {
        "core": core_build(),
        "events": applied,
        "segments_in_view": segments_live,
        "decode_records_per_s": round(decode_rate),
        "apply_events_per_s": round(applied / apply_seconds),
        "apply_us_per_event": stage_us,
        "apply_without_state_machine_events_per_s": without_state_machine(decode_rate, stage_us),
        "query_p50_us": p50,
        "query_p99_us": p99,
        "txn_next_p50_us": txn,
        "by_timestamp_p50_us": by_timestamp,
        "peak_rss_mb": peak_rss_mb,
        "rss_before_view_mb": rss_before_view,
        "view_peak_mb": round(peak_rss_mb - rss_before_view, 1),
        "rss_mb_by_events": rss_curve,
        "rss_growth_mb_per_million_events": second_half_growth(rss_curve),
        "rocksdb_mb_after_apply": rocksdb_mb,
        "disk_mb": round(disk / 2**20, 1),
    }


def apply_events(view: View, events: Iterator[tuple[int, int, bytes | None]]) -> None:
    while chunk := list(itertools.islice(events, BATCH)):
        with view.batch() as batch:
            for event in chunk:
                batch.apply(*event)


def thread_read_calls(io: int) -> int:
    """Read system calls of this thread so far, this one included (a table block not in the block cache costs one),
    from ``io``: /proc/thread-self/io open."""
    text = os.pread(io, 4096, 0).decode()
    return int(text[text.index("syscr:") + 6 :].split()[0])


def count_rows(events_path: Path, view_dir: Path) -> dict:
    """The rows the view's batches write for the stream, applied as ``measure`` applies it (``rows_per_event``)."""
    tune_process()
    with View(view_dir, count_rows=True) as view:
        with view.batch() as batch:
            for tp in read_partitions(events_path):
                batch.assign(tp)
                batch.mark_ready(tp)
        apply_events(view, read_events(events_path))
        assert view.row_counts is not None
        return view.row_counts.per_event()


def build_view(events_path: Path, view_dir: Path, stop: int, memory: dict[str, int]) -> None:
    """The view of the stream's first ``stop`` events, flushed (``instructions`` counts the others)."""
    tune_process()
    with View(view_dir, **memory) as view:
        with view.batch() as batch:
            for tp in read_partitions(events_path):
                batch.assign(tp)
                batch.mark_ready(tp)
        apply_events(view, itertools.islice(read_events(events_path), stop))
        view.flush()


def count_phases(
    events_path: Path, view_dir: Path, start: int, counted: int, phases_path: Path, memory: dict[str, int]
) -> None:
    """Run under callgrind, which dumps its counts at each call of getppid (``instructions``): the stream's events
    from ``start`` on applied onto the view of those before, the last ``counted`` of them counted (the others fill
    the caches), then each query of ``CALLGRIND_QUERIES`` targets, once uncounted and once counted. Writes each
    phase's name, calls and read system calls, in the order of the dumps."""
    tune_process()
    io = os.open("/proc/thread-self/io", os.O_RDONLY)
    phases: list[tuple[str, int, int]] = []
    reads = 0

    def phase_ends(name: str, calls: int) -> None:
        nonlocal reads
        phases.append((name, calls, thread_read_calls(io) - reads - 1))  # less the read of the count itself
        os.getppid()
        reads = thread_read_calls(io)

    tail = list(itertools.islice(read_events(events_path), start, None))
    with View(view_dir, **memory) as view:
        phase_ends("open", 0)
        apply_events(view, iter(tail[:-counted]))
        phase_ends("warm apply", 0)
        apply_events(view, iter(tail[-counted:]))
        phase_ends("apply", counted)
        targets = query_targets(view, read_partitions(events_path), FULL["samples"])[:CALLGRIND_QUERIES]
        phase_ends("targets", 0)
        for name, call in query_calls(view).items():
            for target in targets:
                call(target)
            phase_ends("warm " + name, 0)
            for target in targets:
                call(target)
            phase_ends(name, len(targets))
    phases_path.write_text(json.dumps(phases))


def instructions(events_path: Path, tmp: Path, events: int, counted: int, memory_args: list[str]) -> dict:
    """Instructions (and read system calls) of the applying thread per event for the stream's last ``counted``
    events, applied after as many others (uncounted) onto the view of the rest, and per call of each query,
    counted by callgrind (``count_phases``)."""
    if shutil.which("valgrind") is None:
        sys.exit("--callgrind needs valgrind on the PATH (Debian: apt-get install valgrind)")
    start = events - 2 * counted
    view_dir, dumps, phases_path = tmp / "counted-view", tmp / "callgrind", tmp / "phases.json"
    dumps.mkdir()
    here = [sys.executable, __file__, *memory_args]
    subprocess.run([*here, "--build-view", str(events_path), str(view_dir), str(start)], check=True)
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",  # RocksDB's flushes and compactions run in threads of their own
            "--dump-before=getppid",
            "--dump-instr=no",
            f"--callgrind-out-file={dumps}/out",
            *here,
            "--count-phases",
            str(events_path),
            str(view_dir),
            str(start),
            str(counted),
            str(phases_path),
        ],
        check=True,
        capture_output=True,
    )
    phases = json.loads(phases_path.read_text())
    # out.1-01, out.2-01...: the main thread's part ending at each getppid, in order
    parts = sorted(dumps.glob("out.*-01"), key=lambda path: int(path.name[4:].split("-")[0]))
    if len(parts) < len(phases):
        raise RuntimeError(f"callgrind dumped {len(parts)} parts for {len(phases)} phases")
    result: dict = {
        "events_counted": counted,
        "events_before": start + counted,
        "per_query": {},
        "reads_per_query": {},
    }
    for (name, calls, reads), part in zip(phases, parts):
        if not calls:
            continue
        per_call = round(callgrind_total(part) / calls)
        if name == "apply":
            result["per_event"], result["reads_per_event"] = per_call, round(reads / calls, 3)
        else:
            result["per_query"][name], result["reads_per_query"][name] = per_call, round(reads / calls, 2)
    return result


def callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no total in {path}")


def without_state_machine(decode_rate: float, stage_us: dict[str, float]) -> int:
    """The apply rate that decoding the records and writing the view's rows durably would allow with a state
    machine that cost nothing: what any fold keeping these rows in RocksDB pays in this process."""
    return round(1e6 / (1e6 / decode_rate + stage_us["encode"] + stage_us["write"]))


def second_half_growth(rss_curve: dict[str, float]) -> float:
    """How much RSS grew per million events over the second half of the apply, once the caches and memtables
    had filled: flat memory gives ~0."""
    points = sorted((int(n), mb) for n, mb in rss_curve.items() if n.isdigit())
    last, last_mb = points[-1]
    middle, middle_mb = next(point for point in points if point[0] >= last // 2)
    return round((last_mb - middle_mb) / max(last - middle, 1) * 1e6, 1)


def of_kafka(result: dict, kafka: dict) -> dict[str, list[float]]:
    """rlmm's measures as ratios of Kafka's (``kafka``) on the uploads stream ([low, high] where Kafka's is a range):
    apply rate (higher is better), peak RSS and the view's own part of it against the store's heap, point lookup
    p50."""
    apply, bare = result["apply_events_per_s"], result["apply_without_state_machine_events_per_s"]
    p50 = result["query_p50_us"]["remoteLogSegmentMetadata"]
    rates, heap = (min(kafka["apply_events_per_s"]), max(kafka["apply_events_per_s"])), kafka["heap_mb"]
    return {
        "apply": sorted(round(apply / k, 3) for k in rates),
        "apply_without_state_machine": sorted(round(bare / k, 3) for k in rates),
        "peak_rss_of_heap": [round(result["peak_rss_mb"] / heap, 3)],
        "view_peak_of_heap": [round(result["view_peak_mb"] / heap, 3)],
        "point_query_p50": sorted(round(p50 / k, 2) for k in kafka["point_query_p50_us"]),
    }


def measure_kafka(events_path: Path, tmp: Path) -> dict:
    """Kafka 4.3.1's own serde and store on the same uploads events, in a JVM (``StoreYardstick``): its warm passes'
    apply rates, its store's heap and its lookup p50."""
    from scripts.bench_kafka_plugin import SLF4J_API, SLF4J_BINDING, BenchError, build, java, kafka_libs

    try:
        libs = kafka_libs(None)
        _, classes = build(libs, tmp / "kafka", quiet=True)
        java_bin = java()
    except BenchError as exc:
        raise SystemExit(f"bench_core.py --kafka: {exc}") from None
    partitions, values = tmp / "kafka" / "partitions.txt", tmp / "kafka" / "values.bin"
    partitions.write_text(
        "".join(
            f"{tp.topic_id.hex()} {tp.topic} {tp.partition} "
            f"{metadata_partition(tp.topic_id, tp.partition, METADATA_PARTITIONS)}\n"
            for tp in read_partitions(events_path)
        )
    )
    with values.open("wb") as out:  # StoreYardstick's values file: their count, then each with its length
        out.write(struct.pack(">i", sum(1 for _, _, value in read_events(events_path) if value is not None)))
        for _, _, value in read_events(events_path):
            if value is not None:
                out.write(struct.pack(">i", len(value)) + value)
    binding = [str(SLF4J_BINDING)] if SLF4J_BINDING.is_file() else []
    classpath = os.pathsep.join([str(classes), f"{libs}/*", str(SLF4J_API), *binding])
    args = {"partitions": partitions, "values": values, "metadata-partitions": METADATA_PARTITIONS}
    args |= {"segment-offsets": SEGMENT_OFFSETS, "passes": KAFKA_PASSES}
    out = subprocess.run(
        [java_bin, f"-Xms{KAFKA_HEAP}", f"-Xmx{KAFKA_HEAP}", "-cp", classpath, KAFKA_YARDSTICK_MAIN]
        + [str(x) for name, value in args.items() for x in (f"--{name}", value)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    measured = json.loads(out.strip().splitlines()[-1])
    warm = measured["apply_events_per_s"][1:] or measured["apply_events_per_s"]
    return {
        "apply_events_per_s": warm,
        "heap_mb": measured["heap_mb"],
        "point_query_p50_us": [measured["point_query_p50_us"]],
        "measured": "this run",
    }


def report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"rlmm core ({result['core']}), {result['stream']} stream, {result['events']:,} events, "
        f"{result['segments_in_view']:,} segments in the view, {result['cache_mb']} MB block cache, "
        f"{result['write_buffer_mb']} MB of memtables"
    )
    for column in ("measure", "rlmm", "target", "Kafka's own code"):
        table.add_column(column)
    table.add_row(
        "decode records/s",
        f"{result['decode_records_per_s']:,}",
        f"≥ {TARGETS['decode_records_per_s']:,}",
        KAFKA_YARDSTICK["decode_records_per_s"],
    )
    table.add_row(
        "decode + durable apply events/s",
        f"{result['apply_events_per_s']:,}",
        f"≥ {TARGETS['apply_events_per_s']:,}",
        KAFKA_YARDSTICK["apply_events_per_s"],
    )
    stage_us = result["apply_us_per_event"]
    table.add_row(
        "per event µs: " + " / ".join(stage_us) + " (the view's batches)",
        " / ".join(map(str, stage_us.values())),
        "",
        "",
    )
    table.add_row(
        "decode + durable write alone, no state machine, events/s",
        f"{result['apply_without_state_machine_events_per_s']:,}",
        "",
        "",
    )
    for name, p50 in result["query_p50_us"].items():
        table.add_row(f"{name} p50 / p99 µs", f"{p50} / {result['query_p99_us'][name]}", "p50 ≤ 20 (point)", "")
    txn = result["txn_next_p50_us"]
    for distance, p50 in txn.items():
        table.add_row(f"nextSegmentWithTxnIndex, {distance} skipped, p50 µs", str(p50), "", "")
    farthest, nearest = max(txn, key=int), min(txn, key=int)
    table.add_row(
        f"txn ratio distance {int(farthest):,} / {nearest}",
        f"{txn[farthest] / txn[nearest]:.2f}",
        "≤ 3",
        KAFKA_YARDSTICK["txn_next"],
    )
    by_timestamp = result["by_timestamp_p50_us"]
    for size, p50 in by_timestamp["descent"].items():
        table.add_row(
            f"firstSegmentWithMaxTimestampAtLeast / Kafka's scan, {int(size):,} segments, p50 µs",
            f"{p50} / {by_timestamp['scan'][size]}",
            "flat / linear",
            "",
        )
    largest, smallest = max(by_timestamp["descent"], key=int), min(by_timestamp["descent"], key=int)
    table.add_row(
        f"by-timestamp ratio {int(largest):,} / {int(smallest):,} segments (descent, scan)",
        f"{by_timestamp['descent'][largest] / by_timestamp['descent'][smallest]:.2f}, "
        f"{by_timestamp['scan'][largest] / by_timestamp['scan'][smallest]:.0f}",
        "≤ 3 for the descent",
        "",
    )
    table.add_row("peak RSS MB", str(result["peak_rss_mb"]), "≤ 250", KAFKA_YARDSTICK["memory"])
    curve = ", ".join(
        f"{int(n) // 1000}k: {mb}" if n.isdigit() else f"{n}: {mb}" for n, mb in result["rss_mb_by_events"].items()
    )
    table.add_row("RSS MB while applying", curve, "flat", "grows with segments")
    table.add_row(
        "RSS growth over the apply's second half, MB per million events",
        str(result["rss_growth_mb_per_million_events"]),
        "≈ 0",
        "",
    )
    rocksdb = result["rocksdb_mb_after_apply"]
    table.add_row(
        "RocksDB MB after the apply: block cache / memtables / table readers",
        f"{rocksdb['block_cache']} / {rocksdb['memtables']} / {rocksdb['table_readers']}",
        f"bounded: {result['cache_mb']} / {result['write_buffer_mb']} / ≈ 0",
        "",
    )
    table.add_row(
        "view's own peak MB (peak RSS - RSS before the view opened)",
        f"{result['view_peak_mb']} (of {result['rss_before_view_mb']} before)",
        "",
        "",
    )
    table.add_row("disk MB", str(result["disk_mb"]), "", "")
    rows = result["rows_per_event"]
    table.add_row("rows written per event (bytes)", f"{rows['rows']} ({rows['bytes']})", "", "")
    table.add_row(
        "rows per event by column family",
        ", ".join(f"{cf} {n}" for cf, n in rows["by_column_family"].items()),
        "",
        "",
    )
    for kind, counted in rows["by_kind"].items():
        table.add_row(
            f"rows per {kind} event ({counted['events']:,})",
            f"{counted['rows']}: " + ", ".join(f"{cf} {n}" for cf, n in counted["by_column_family"].items()),
            "",
            "",
        )
    if result["instructions"]:
        counts = result["instructions"]
        table.add_row(
            f"instructions per event (callgrind, the last {counts['events_counted']:,} events) / read calls",
            f"{counts['per_event']:,} / {counts['reads_per_event']}",
            "",
            "",
        )
        for name, count in counts["per_query"].items():
            table.add_row(
                f"{name} instructions per call / read calls", f"{count:,} / {counts['reads_per_query'][name]}", "", ""
            )
    measured = (result["kafka"] or {}).get("measured")
    for name, ratio in (result["of_kafka"] or {}).items():
        table.add_row(f"rlmm / Kafka, {name}", " – ".join(map(str, ratio)), "", f"uploads stream, 4.3.1, {measured}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, help=f"[{FULL['events']:,}; smoke {SMOKE['events']:,}]")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--stream",
        choices=("cluster", "uploads"),
        default="cluster",
        help="cluster: rlmm.workload's traffic; uploads: the stream Kafka's own code was measured on (ratios)",
    )
    parser.add_argument("--smoke", action="store_true", help="a tiny run, a few seconds: does the benchmark run")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--callgrind",
        type=int,
        nargs="?",
        const=CALLGRIND_EVENTS,
        metavar="N",
        help=f"also count instructions per event (the last N events, default {CALLGRIND_EVENTS:,}) and per query "
        "with valgrind's callgrind",
    )
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="uploads only: measure Kafka 4.3.1's own serde and store on the same events in this run (a JVM), and "
        "give the ratios of those figures rather than of the stored ones",
    )
    parser.add_argument("--cache-mb", type=int, default=BLOCK_CACHE_MB, help="the view's block cache, MB [%(default)s]")
    parser.add_argument(
        "--write-buffer-mb", type=int, default=WRITE_BUFFER_MB, help="the view's memtable budget, MB [%(default)s]"
    )
    parser.add_argument("--measure", nargs=2, type=Path, help=argparse.SUPPRESS)  # events file, view dir
    parser.add_argument("--count-rows", nargs=2, type=Path, help=argparse.SUPPRESS)  # events file, view dir
    parser.add_argument("--build-view", nargs=3, help=argparse.SUPPRESS)  # events file, view dir, events
    parser.add_argument("--count-phases", nargs=5, help=argparse.SUPPRESS)  # events, view, start, counted, phases
    args = parser.parse_args()
    sizes = SMOKE if args.smoke else FULL
    events = args.events or sizes["events"]
    if args.kafka and args.stream != "uploads":
        parser.error("--kafka measures Kafka on the uploads stream: add --stream uploads")
    if args.callgrind is not None and not 0 < args.callgrind <= events // 2:
        parser.error(f"--callgrind N counts the last N of 2N events: N from 1 to {events // 2:,} (--events / 2)")
    memory = {"cache_mb": args.cache_mb, "write_buffer_mb": args.write_buffer_mb}
    memory_args = ["--cache-mb", str(args.cache_mb), "--write-buffer-mb", str(args.write_buffer_mb)]
    if args.measure:
        print(json.dumps(measure(*args.measure, sizes, memory)))
        return
    if args.count_rows:
        print(json.dumps(count_rows(*args.count_rows)))
        return
    if args.build_view:
        events_file, view_dir, stop = args.build_view
        build_view(Path(events_file), Path(view_dir), int(stop), memory)
        return
    if args.count_phases:
        events_file, view_dir, start, counted, phases_file = args.count_phases
        count_phases(Path(events_file), Path(view_dir), int(start), int(counted), Path(phases_file), memory)
        return
    with tempfile.TemporaryDirectory(prefix="rlmm-bench-") as tmp:
        events_path = Path(tmp) / "events.bin"
        if not args.json:
            print(f"generating {events:,} events ...", file=sys.stderr)
        if args.stream == "uploads":
            generate_uploads(events_path, events)
        else:
            generate(events_path, events, args.seed)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--measure",
                str(events_path),
                str(Path(tmp) / "view"),
                *memory_args,
                *(["--smoke"] if args.smoke else []),
            ],
            check=True,
            stdout=subprocess.PIPE,  # its errors go to this process's stderr
            text=True,
            env=os.environ,
        ).stdout
        result = {"stream": args.stream, "smoke": args.smoke, **memory, **json.loads(out)}
        if not args.json:
            print("counting rows per event ...", file=sys.stderr)
        rows = subprocess.run(
            [sys.executable, __file__, "--count-rows", str(events_path), str(Path(tmp) / "counted-rows-view")],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout
        result["rows_per_event"] = json.loads(rows)
        result["instructions"] = None
        if args.callgrind is not None:
            if not args.json:
                print("counting instructions with callgrind ...", file=sys.stderr)
            result["instructions"] = instructions(events_path, Path(tmp), result["events"], args.callgrind, memory_args)
        result["kafka"] = None
        if args.stream == "uploads":
            if args.kafka and not args.json:
                print("measuring Kafka's own serde and store on the same events ...", file=sys.stderr)
            stored = {**KAFKA_UPLOADS, "measured": "stored"}
            result["kafka"] = measure_kafka(events_path, Path(tmp)) if args.kafka else stored
    result["of_kafka"] = of_kafka(result, result["kafka"]) if result["kafka"] else None
    if args.json:
        print(json.dumps(result))
    else:
        report(result)


if __name__ == "__main__":
    main()
