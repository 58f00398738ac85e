"""Benchmark of rlmm's Kafka broker plugin (plugins/kafka/), from a JVM that loads it as a broker does.

    python scripts/bench_kafka_plugin.py [--events 1000000] [--json] [--smoke]
        [--bootstrap-server HOST:PORT] [--kafka-libs DIR] [--plugin-dir DIR --tests-classes DIR]

Builds the plugin and its test classes (``scripts/build_kafka_plugin.py --tests``; ``--plugin-dir`` and
``--tests-classes`` reuse a build), starts a local Tansu broker (``consumers.broker.LocalBroker``, unless
``--bootstrap-server``), produces ``--events`` records into a fresh metadata topic (50 partitions, as Kafka's
default), starts ``rlmm serve`` on it (loopback, a port of its own, a fresh view), and runs
``io.rlmm.kafka.bench.PluginBench`` (plugins/kafka/src/test/java) in a JVM whose class path is a broker's (Kafka's
libs and slf4j): the plugin comes from its folder through Kafka's ChildFirstClassLoader, wrapped in Kafka's
ClassLoaderAwareRemoteLogMetadataManager, configured with broker.id 1.

The stream (``uploads``, as scripts/bench_core.py's): ``--partitions`` user partitions, each uploading contiguous
segments of 100 offsets in leader epoch 0, each copy started then finished (2 events a segment), round-robin over
the partitions; produced with Kafka's partitioner (``rlmm.records.partitioner``) and Kafka's bytes
(``rlmm.records.serde.encode_value``). 1M events: 5,000 finished segments per partition.

Measured (each timed case with 1 and 8 threads, calls back to back: p50/p99 µs and calls/s, plus this JVM's CPU per
call, split by thread kind: callers, gRPC event loops, executors, JIT + GC, and the server's and the local broker's
CPU per call; ``--warmup-s`` untimed then ``--measure-s`` timed, after ``--jit-warmup-calls`` untimed calls of the
floor and of the plugin with 8 threads: the JIT compiles a method after some 10,000 calls of it, which takes tens of
seconds at a few hundred gRPC calls a second on a loaded machine):

* ``floor``: the standard health service's Check on the same rlmm server, a raw unary call (byte[] marshaller,
  empty request, ``ClientCalls.blockingUnaryCall`` with a deadline) over a grpc-netty channel built as the plugin
  builds its own, grpc-java loaded from the plugin's folder: the least a unary call from this JVM costs;
* ``plugin``: ``remoteLogSegmentMetadata`` through the plugin at random offsets of one partition (epoch 0). The floor
  and the plugin are measured in turns (``--rounds`` windows each, in the order A B B A ...), so that the load other
  processes put on a shared machine falls on both alike;
* ``kafka_store``: the same calls on Kafka's own RemotePartitionMetadataStore, fed the same records, in the JVM;
* ``writes``: ``addRemoteLogSegmentMetadata`` then ``updateRemoteLogSegmentMetadata`` to COPY_SEGMENT_FINISHED
  through the plugin, each future joined (a call = one segment, both writes; each thread on a partition of its own);
* ``restart``: a broker restart: the plugin closed, a fresh one (new class loader) configured, every partition
  registered (onPartitionLeadershipChanges), isReady asked (rounds 1 ms apart) until true for all: ms, median of
  ``--restarts``. Against ``kafka_reread``: what Kafka's own classes do with the topic on a restart, in the same JVM
  (RemoteLogMetadataSerde.deserialize of each value + RemotePartitionMetadataStore, values from a file, the topic's
  reading itself not counted): the first pass cold (``cold_ms``), then the median of the warm passes (``warm_ms``).
  Each restart also tells where its time went: load + configure, register, the isReady sweep, the same sweep once
  more (the new class loader's code has run once: still interpreted), and the JVM's, the server's and the broker's
  CPU during it.

Ratios (``ratios``; targets in ``targets``): ``plugin_p50_of_floor`` (1 thread, target <= 1.5),
``plugin_qps_of_floor`` (8 threads, target >= 0.8), ``restart_of_kafka_reread_warm`` and ``_cold``. Nothing here is
a pass/fail: the numbers are printed.

``--smoke``: 20,000 events, 1 s cases, one round: well under a minute, to show that the benchmark runs.

``--json`` prints one object with these keys:

* ``smoke``: whether ``--smoke`` chose the sizes;
* ``events``, ``user_partitions``, ``metadata_partitions``: the stream;
* ``query_partition_segments``: segments of the partition the lookups ask;
* ``threads``: the thread counts of the timed cases;
* ``jit_warm_up``: the untimed calls before them, and their time;
* ``rounds``, ``warmup_s``, ``measure_s``: windows of the floor and the plugin, seconds untimed and timed per case;
* ``broker``: the broker measured on;
* ``produce_s``: producing the stream (not a measure of rlmm);
* ``rlmm_bootstrap_ms``: ``rlmm serve``'s own first read of the topic;
* ``answers``: the plugin's answers checked against Kafka's store, and how many differed;
* ``cases``: each case's figures by thread count;
* ``kafka_reread``, ``restart``: Kafka's classes reading the topic again, the plugin's restarts;
* ``ratios``, ``targets``: the ratios above and their targets;
* ``machine``: CPUs, the JVM, the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import psutil

from consumers.broker import LocalBroker
from consumers.config import RlmmConfig
from rlmm.records.model import SegmentMetadata, SegmentState, SegmentUpdate, TopicIdPartition
from rlmm.records.partitioner import metadata_partition
from rlmm.records.serde import encode_value
from scripts.topic_producer import ProduceError, produce

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "scripts" / "build_kafka_plugin.py"
BENCH_MAIN = "io.rlmm.kafka.bench.PluginBench"
SLF4J_API = Path("/usr/share/java/slf4j-api.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")
METADATA_PARTITIONS = 50
SEGMENT_OFFSETS = 100
CASES = ("floor", "plugin", "kafka_store", "writes")
CASE_TITLES = {
    "floor": "floor (Health/Check)",
    "plugin": "plugin lookup",
    "kafka_store": "Kafka's store lookup",
    "writes": "plugin add + finish",
}
TARGETS = {"plugin_p50_of_floor": 1.5, "plugin_qps_of_floor": 0.8}
FULL = {
    "events": 1_000_000,
    "jit_warmup_calls": 30_000,
    "rounds": 5,
    "warmup_s": 3.0,
    "measure_s": 10.0,
    "kafka_passes": 4,
    "restarts": 3,
    "heap": "3g",
}
SMOKE = {
    "events": 20_000,
    "jit_warmup_calls": 500,
    "rounds": 1,
    "warmup_s": 0.5,
    "measure_s": 1.0,
    "kafka_passes": 2,
    "restarts": 2,
    "heap": "1g",
}


class BenchError(Exception):
    """A one-line reason the benchmark cannot run."""


def progress(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


# ---- what the benchmark runs with ----------------------------------------------------------------------------


def kafka_libs(given: str | None) -> Path:
    chosen = given or os.environ.get("KAFKA_LIBS") or str(ROOT.parent / "shared" / "kafka-4.3.1" / "libs")
    libs = Path(chosen).resolve()
    if not (libs.is_dir() and any(libs.glob("kafka-storage-api*.jar"))):
        raise BenchError(
            f"Kafka's libs not found at {libs}: pass --kafka-libs DIR or set KAFKA_LIBS (Kafka 4.3.1's libs/)"
        )
    return libs


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BenchError("no java found (PATH or JAVA_HOME): install the Debian package default-jdk-headless")
    return found


def build(libs: Path, work: Path, quiet: bool) -> tuple[Path, Path]:
    """The plugin's folder and the test classes, built now and copied into ``work`` (build/ is shared: a build
    running meanwhile must not pull them from under the JVM)."""
    progress(quiet, "building the plugin and its test classes ...")
    done = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--tests", "--kafka-libs", str(libs)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise BenchError(f"scripts/build_kafka_plugin.py --tests failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    built = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    if not built.get("tests_classes"):
        raise BenchError("scripts/build_kafka_plugin.py compiled no test classes")
    plugin_dir, classes = work / Path(built["plugin_dir"]).name, work / "test-classes"
    shutil.copytree(built["plugin_dir"], plugin_dir)
    shutil.copytree(built["tests_classes"], classes)
    return plugin_dir, classes


# ---- the stream ------------------------------------------------------------------------------------------------


def uploads(events: int, partitions: int) -> tuple[list[TopicIdPartition], list[tuple[int, bytes]]]:
    """``events`` / 2 segments, round-robin over the partitions, each copy started then finished: the user
    partitions and the (metadata partition, value) records in the order produced."""
    rng = random.Random(1)
    tps = [TopicIdPartition(rng.randbytes(16), f"uploads-{i % 10}", i) for i in range(partitions)]
    mps = [metadata_partition(tp.topic_id, tp.partition, METADATA_PARTITIONS) for tp in tps]
    records = []
    for i in range(events // 2):
        k = i % partitions
        tp, start = tps[k], i // partitions * SEGMENT_OFFSETS
        segment_id = rng.randbytes(16)
        started = SegmentMetadata(
            tp,
            segment_id,
            start,
            start + SEGMENT_OFFSETS - 1,
            0,
            1_700_000_000_000 + i,
            1_700_000_000_000 + i,
            ((0, start),),
            1_000,
            None,
            SegmentState.COPY_SEGMENT_STARTED,
        )
        finished = SegmentUpdate(tp, segment_id, 0, 1_700_000_000_000 + i, None, SegmentState.COPY_SEGMENT_FINISHED)
        records.append((mps[k], encode_value(started)))
        records.append((mps[k], encode_value(finished)))
    return tps, records


def write_inputs(work: Path, tps: list[TopicIdPartition], records: list[tuple[int, bytes]]) -> tuple[Path, Path]:
    """The files the Java side reads: the partitions (topic id hex, topic, partition, metadata partition) and the
    values (int32 count, then int32 length + bytes each, big-endian)."""
    partitions, values = work / "partitions.txt", work / "values.bin"
    partitions.write_text(
        "".join(
            f"{tp.topic_id.hex()} {tp.topic} {tp.partition} "
            f"{metadata_partition(tp.topic_id, tp.partition, METADATA_PARTITIONS)}\n"
            for tp in tps
        )
    )
    with values.open("wb") as out:
        out.write(struct.pack(">i", len(records)))
        for _, value in records:
            out.write(struct.pack(">i", len(value)))
            out.write(value)
    return partitions, values


def produce_stream(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> float:
    """Seconds to produce the records, in order, to their metadata partitions."""
    started = time.perf_counter()
    try:
        produce(bootstrap, ((topic, partition, value) for partition, value in records))
    except ProduceError as exc:
        raise BenchError(f"producing the stream failed: {exc}") from None
    return time.perf_counter() - started


# ---- the processes ---------------------------------------------------------------------------------------------


def first_line(process: subprocess.Popen, timeout: float) -> str:
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        if not selector.select(timeout):
            return ""
    finally:
        selector.close()
    return process.stdout.readline()


def serve(work: Path, bootstrap: str, topic: str) -> tuple[subprocess.Popen, int, Path]:
    """``rlmm serve`` on 127.0.0.1 (a free port), a fresh view, consuming ``topic``."""
    settings = {
        "topic.name": topic,
        "topic.num.partitions": METADATA_PARTITIONS,
        "topic.replication.factor": 1,
        "topic.min.insync.replicas": 1,
    }
    log = work / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rlmm.cli",
                "serve",
                "--view",
                str(work / "view"),
                "--listen",
                "127.0.0.1:0",
                "--grace-s",
                "5",
                "--log-level",
                "warning",
                "-b",
                bootstrap,
                *(f"--set=remote.log.metadata.{k}={v}" for k, v in settings.items()),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
        )
    line = first_line(process, 60)
    if not line:
        stop(process)
        raise BenchError(f"rlmm serve did not start within 60 s: {log.read_text(errors='replace')[-2000:]}")
    return process, json.loads(line)["port"], log


def stop(process: subprocess.Popen | None, timeout: float = 30) -> None:
    """SIGTERM to a process this script started, then SIGKILL if it lingers."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cpu_s(pid: int | None) -> float:
    """CPU time (user + system) of a process and its children."""
    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0.0


def run_java(
    java_bin: str,
    classpath: str,
    heap: str,
    bench_args: list[str],
    log: Path,
    watched: dict[str, int | None],
    timeout_s: float,
) -> tuple[dict, dict]:
    """Runs PluginBench; samples the CPU of the watched processes at each timed window's bounds. Returns its result
    and, per "case/threads", the CPU seconds each watched process spent in the window."""
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [
                java_bin,
                f"-Xms{heap}",
                f"-Xmx{heap}",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                classpath,
                BENCH_MAIN,
                *bench_args,
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    windows: dict[str, dict[str, float]] = {}
    opened: dict[str, dict[str, float]] = {}
    result = None
    deadline = time.monotonic() + timeout_s
    try:
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        while result is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"the Java bench did not finish within {timeout_s:.0f} s; its log: {log}")
            if not selector.select(min(left, 5)):
                continue
            line = process.stdout.readline()
            if not line:
                process.wait(30)
                raise BenchError(
                    f"the Java bench ended ({process.returncode}) without a result; its log ends with:\n"
                    f"{log.read_text(errors='replace')[-3000:]}"
                )
            event = json.loads(line)
            key = f"{event.get('case')}/{event.get('threads')}"
            if event["event"] == "measure_start":
                opened[key] = {name: cpu_s(pid) for name, pid in watched.items()}
            elif event["event"] == "measure_end":  # a case measured in turns has several windows
                spent = windows.setdefault(key, dict.fromkeys(watched, 0.0))
                for name, pid in watched.items():
                    spent[name] += cpu_s(pid) - opened[key][name]
            elif event["event"] == "result":
                result = event
        selector.close()
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return result, windows


# ---- the run ---------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, sizes: dict) -> dict:
    quiet = args.json
    libs = kafka_libs(args.kafka_libs)
    java_bin = java()
    if not SLF4J_API.is_file():
        raise BenchError(f"{SLF4J_API} not found: install the Debian package libslf4j-java")
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlmm-bench-plugin-")))
        if args.plugin_dir and args.tests_classes:
            plugin_dir, classes = Path(args.plugin_dir).resolve(), Path(args.tests_classes).resolve()
        elif args.plugin_dir or args.tests_classes:
            raise BenchError("give both --plugin-dir and --tests-classes, or neither (then the plugin is built)")
        else:
            plugin_dir, classes = build(libs, work, quiet)
        if not (classes / BENCH_MAIN.replace(".", "/")).with_suffix(".class").is_file():
            raise BenchError(f"{BENCH_MAIN} is not in {classes}")

        progress(quiet, f"generating {sizes['events']:,} events ...")
        tps, records = uploads(sizes["events"], args.partitions)
        partitions_file, values_file = write_inputs(work, tps, records)

        broker_pid = None
        bootstrap = args.bootstrap_server
        if bootstrap is None:
            broker = stack.enter_context(LocalBroker(log_path=work / "tansu.log"))
            bootstrap, broker_pid = broker.bootstrap_servers, broker.pid
        topic = f"rlmm-plugin-bench-{uuid.uuid4().hex[:8]}"
        from confluent_kafka.admin import AdminClient

        from consumers.topic import ensure_topic

        config = RlmmConfig(
            bootstrap, topic=topic, num_partitions=METADATA_PARTITIONS, replication_factor=1, min_insync_replicas=1
        )
        ensure_topic(AdminClient(config.admin_config()), config)
        progress(quiet, f"producing them to {topic} on {bootstrap} ...")
        produce_s = produce_stream(bootstrap, topic, records)
        del records

        server, port, serve_log = serve(work, bootstrap, topic)
        stack.callback(stop, server)
        progress(quiet, f"rlmm serve (pid {server.pid}) on 127.0.0.1:{port}; running the Java bench ...")
        classpath = os.pathsep.join(
            [str(classes), f"{libs}/*", str(SLF4J_API), *([str(SLF4J_BINDING)] if SLF4J_BINDING.is_file() else [])]
        )
        bench_args = {
            "plugin-dir": plugin_dir,
            "target": f"127.0.0.1:{port}",
            "partitions": partitions_file,
            "values": values_file,
            "metadata-partitions": METADATA_PARTITIONS,
            "threads": args.threads,
            "jit-warmup-calls": sizes["jit_warmup_calls"],
            "rounds": sizes["rounds"],
            "warmup-s": sizes["warmup_s"],
            "measure-s": sizes["measure_s"],
            "kafka-passes": sizes["kafka_passes"],
            "restarts": sizes["restarts"],
        }
        java_log = work / "bench-jvm.log"
        load_before = os.getloadavg()[0]
        try:
            result, windows = run_java(
                java_bin,
                classpath,
                sizes["heap"],
                [str(x) for kv in bench_args.items() for x in (f"--{kv[0]}", kv[1])],
                java_log,
                {"server": server.pid, "broker": broker_pid},
                timeout_s=args.timeout_s,
            )
        except BenchError as exc:
            tail = serve_log.read_text(errors="replace")[-2000:]
            raise BenchError(f"{exc}\nrlmm serve's log ends with:\n{tail}") from None
        if args.keep_logs:
            for log in (java_log, serve_log):
                shutil.copyfile(log, Path(args.keep_logs) / log.name)
    data = report_data(result, windows, sizes, args, produce_s, broker_pid is not None)
    data["machine"]["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return data


def report_data(
    result: dict, windows: dict, sizes: dict, args: argparse.Namespace, produce_s: float, tansu: bool
) -> dict:
    cases = result["cases"]
    for name, by_threads in cases.items():
        for threads, stats in by_threads.items():
            cpu = windows.get(f"{name}/{threads}", {})
            calls = stats["calls"] or 1
            stats["server_cpu_us_per_call"] = round(cpu.get("server", 0.0) / calls * 1e6, 1)
            if tansu:
                stats["broker_cpu_us_per_call"] = round(cpu.get("broker", 0.0) / calls * 1e6, 1)
    for i, run in enumerate(result["restart"]["runs"], start=1):
        cpu = windows.get(f"restart/{i}", {})
        run["server_cpu_ms"] = round(cpu.get("server", 0.0) * 1000, 1)
        if tansu:
            run["broker_cpu_ms"] = round(cpu.get("broker", 0.0) * 1000, 1)
    counts = sorted(int(t) for t in cases["plugin"])
    low, high = str(counts[0]), str(counts[-1])
    reread, restart = result["kafka_reread"], result["restart"]
    plugin, floor, store = cases["plugin"], cases["floor"], cases["kafka_store"]
    # the targets: latency with one thread, throughput with the most threads
    ratios = {
        "plugin_p50_of_floor": round(plugin[low]["p50_us"] / floor[low]["p50_us"], 3),
        "plugin_qps_of_floor": round(plugin[high]["calls_per_s"] / floor[high]["calls_per_s"], 3),
    }
    if low != high:
        ratios[f"plugin_p50_of_floor_{high}_threads"] = round(plugin[high]["p50_us"] / floor[high]["p50_us"], 3)
        ratios[f"plugin_qps_of_floor_{low}_thread"] = round(plugin[low]["calls_per_s"] / floor[low]["calls_per_s"], 3)
    ratios["plugin_p50_of_kafka_store"] = round(plugin[low]["p50_us"] / store[low]["p50_us"], 1)
    ratios["restart_of_kafka_reread_cold"] = round(restart["median_ms"] / reread["cold_ms"], 4)
    if reread["warm_ms"] is not None:
        ratios["restart_of_kafka_reread_warm"] = round(restart["median_ms"] / reread["warm_ms"], 4)
    return {
        "smoke": args.smoke,
        "events": result["events"],
        "user_partitions": result["user_partitions"],
        "metadata_partitions": METADATA_PARTITIONS,
        "query_partition_segments": result["query_partition_segments"],
        "threads": [int(t) for t in counts],
        "jit_warm_up": result["jit_warm_up"],
        "rounds": result["rounds"],
        "warmup_s": sizes["warmup_s"],
        "measure_s": sizes["measure_s"],
        "broker": "tansu (local, in memory)" if tansu else args.bootstrap_server,
        "produce_s": round(produce_s, 2),
        "rlmm_bootstrap_ms": result["rlmm_bootstrap_ms"],
        "answers": result["answers"],
        "cases": cases,
        "kafka_reread": reread,
        "restart": restart,
        "ratios": ratios,
        "targets": TARGETS,
        "machine": {"cpus": os.cpu_count(), "jvm": result["jvm"]},
    }


# ---- the table -------------------------------------------------------------------------------------------------


def _cpu_split(by_thread: dict) -> str:
    return " / ".join(f"{by_thread[k]:,.0f}" for k in ("callers", "event_loops", "executors", "jit_and_gc"))


def report(data: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    table = Table(
        title=f"rlmm Kafka plugin: {data['events']:,} events over {data['user_partitions']} partitions; lookups at "
        f"random offsets of a partition of {data['query_partition_segments']:,} segments; per case "
        f"{data['warmup_s']} s warm-up, {data['measure_s']} s timed (floor and plugin in {data['rounds']} turns)",
        caption="lookup: remoteLogSegmentMetadata; add + finish: both writes, each future joined; "
        "JVM CPU split: calling threads / gRPC event loops / executors / JIT + GC",
    )
    columns = (
        "case",
        "threads",
        "p50 µs",
        "p99 µs",
        "calls/s",
        "JVM CPU µs/call",
        "JVM CPU split",
        "server CPU µs/call",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "case" else "right")
    for name in CASES:
        for threads, s in data["cases"][name].items():
            title = CASE_TITLES[name]
            if s["errors"]:
                title += f" [{s['errors']} errors: {s['first_error']}]"
            table.add_row(
                title,
                threads,
                f"{s['p50_us']:,.1f}",
                f"{s['p99_us']:,.1f}",
                f"{s['calls_per_s']:,.0f}",
                f"{s['jvm_cpu_us_per_call']:,.1f}",
                _cpu_split(s["jvm_cpu_us_per_call_by_thread"]),
                f"{s['server_cpu_us_per_call']:,.1f}",
            )
            if name == "writes":
                table.add_row(
                    "  of which add / finish",
                    threads,
                    f"{s['add_p50_us']:,.0f} / {s['finish_p50_us']:,.0f}",
                    f"{s['add_p99_us']:,.0f} / {s['finish_p99_us']:,.0f}",
                )
    console.print(table)

    reread, restart, ratios = data["kafka_reread"], data["restart"], data["ratios"]
    second = Table(title="broker restart to ready, and the ratios")
    for column in ("measure", "value", "target"):
        second.add_column(column)
    second.add_row(
        f"Kafka's classes re-read the {data['events']:,} events, cold (first pass) ms", f"{reread['cold_ms']:,.1f}", ""
    )
    second.add_row(
        "Kafka's classes re-read them, warm (median of the later passes) ms",
        f"{reread['warm_ms']:,.1f}" if reread["warm_ms"] is not None else "-",
        "",
    )
    second.add_row(
        "  each pass: wall / JVM CPU / GC ms",
        ", ".join(
            f"{wall:,.0f} / {cpu:,.0f} / {gc:,.0f}"
            for wall, cpu, gc in zip(reread["passes_ms"], reread["passes_jvm_cpu_ms"], reread["passes_gc_ms"])
        ),
        "",
    )
    runs = ", ".join(f"{r['total_ms']:,.0f}" for r in restart["runs"])
    second.add_row(
        f"plugin restart to ready, {restart['partitions']} partitions, ms: median of [{runs}]",
        f"{restart['median_ms']:,.1f}",
        "",
    )
    for i, r in enumerate(restart["runs"]):
        second.add_row(
            f"  restart {i + 1}: load + configure / register / isReady sweep (sweep again) ms",
            f"{r['load_and_configure_ms']:,.0f} / {r['register_ms']:,.0f} / {r['until_ready_ms']:,.0f} "
            f"({r['is_ready_sweep_again_ms']:,.0f})",
            "",
        )
        second.add_row(
            "    CPU ms: JVM (split) / server",
            f"{r['jvm_cpu_ms']:,.0f} ({_cpu_split(r['jvm_cpu_ms_by_thread'])}) / {r['server_cpu_ms']:,.0f}",
            "",
        )
    second.add_row(
        "rlmm serve's own first read of the topic (registration to ready) ms", f"{data['rlmm_bootstrap_ms']:,.0f}", ""
    )
    second.add_row("producing the topic s", f"{data['produce_s']:,.1f}", "")
    answers = data["answers"]
    second.add_row(
        "plugin answers checked against Kafka's store (differing)", f"{answers['checked']:,} ({answers['differ']})", "0"
    )
    for name, value in ratios.items():
        target = TARGETS.get(name)
        sign = "≤" if name == "plugin_p50_of_floor" else "≥"
        second.add_row(name, f"{value}", f"{sign} {target}" if target is not None else "")
    load = data["machine"]["load_average"]
    second.add_row(
        "machine: CPUs, 1-min load average before / after", f"{data['machine']['cpus']}, {load[0]} / {load[1]}", ""
    )
    console.print(second)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, help=f"events produced [{FULL['events']:,}; smoke {SMOKE['events']:,}]")
    parser.add_argument("--partitions", type=int, default=100, help="user partitions of the stream [100]")
    parser.add_argument("--threads", default="1,8", help="thread counts of the timed cases [1,8]")
    parser.add_argument(
        "--jit-warmup-calls", type=int, help="untimed calls of the floor and the plugin (x100 of Kafka's store) first"
    )
    parser.add_argument("--rounds", type=int, help="windows of the floor and the plugin, in turns [5; smoke 1]")
    parser.add_argument("--warmup-s", type=float, help="untimed seconds before each timed case")
    parser.add_argument("--measure-s", type=float, help="timed seconds of each case")
    parser.add_argument("--restarts", type=int, help="plugin restarts measured")
    parser.add_argument("--kafka-passes", type=int, help="passes of Kafka's re-read (the first cold)")
    parser.add_argument("--smoke", action="store_true", help="a tiny run (20k events, 1 s cases): well under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--bootstrap-server", help="a Kafka broker to use instead of a local Tansu")
    parser.add_argument("--kafka-libs", help="Kafka 4.3.1's libs/ [KAFKA_LIBS, else ../shared/kafka-4.3.1/libs]")
    parser.add_argument("--plugin-dir", help="a built plugin folder (with --tests-classes: no build)")
    parser.add_argument("--tests-classes", help="the compiled plugins/kafka/src/test/java (with --plugin-dir)")
    parser.add_argument("--timeout-s", type=float, default=1800, help="the Java bench's deadline [1800]")
    parser.add_argument("--keep-logs", help="copy the JVM's and rlmm serve's logs into this folder")
    args = parser.parse_args()
    sizes = dict(SMOKE if args.smoke else FULL)
    for key in ("events", "jit_warmup_calls", "rounds", "warmup_s", "measure_s", "restarts", "kafka_passes"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    if sizes["events"] < 2 * args.partitions:
        parser.error("--events must give every partition a segment (at least 2 x --partitions)")
    try:
        data = run(args, sizes)
    except BenchError as exc:
        print(f"bench_kafka_plugin: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data))
    else:
        report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
