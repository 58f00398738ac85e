package io.rlmm.kafka.bench;

import io.rlmm.kafka.harness.Json;
import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.utils.ChildFirstClassLoader;
import org.apache.kafka.server.log.remote.metadata.storage.ClassLoaderAwareRemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.metadata.storage.KafkaStoreDriver;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;

/**
 * The benchmark of rlmm's Kafka plugin, run by {@code scripts/bench_kafka_plugin.py} (which builds the plugin,
 * starts a broker and {@code rlmm serve}, and has produced the metadata topic's records before this starts).
 *
 * <pre>
 * java -cp TEST_CLASSES:KAFKA_LIBS/*:slf4j io.rlmm.kafka.bench.PluginBench --plugin-dir DIR --target HOST:PORT
 *     --partitions FILE --values FILE --metadata-partitions 50 [--threads 1,8] [--warmup-s 3] [--measure-s 10]
 *     [--kafka-passes 4] [--restarts 3]
 * </pre>
 *
 * <p>{@code --partitions}: one user partition a line, {@code TOPIC_ID_HEX TOPIC PARTITION METADATA_PARTITION};
 * {@code --values}: the values produced into the metadata topic, in the order produced (int32 count, then an int32
 * length and the bytes of each). The plugin is loaded as a broker loads it: Kafka's ChildFirstClassLoader over the
 * plugin's folder, parent this class's loader (Kafka's libs and slf4j), wrapped in Kafka's
 * ClassLoaderAwareRemoteLogMetadataManager, configured with the broker's keys ({@code broker.id} 1).
 *
 * <p>Steps: the plugin registers every partition (and one empty partition per writing thread) and waits until
 * rlmm has read them ({@code rlmm_bootstrap_ms}); Kafka's own classes read the same values (serde + store), first
 * pass cold, then warm passes; the plugin's answers are checked against Kafka's store's; then, per thread count,
 * the gRPC floor (Health/Check), {@code remoteLogSegmentMetadata} through the plugin and on Kafka's store at random
 * offsets of one partition, then add + finish through the plugin's futures; then broker restarts: the plugin
 * closed, a fresh one (new class loader) configured, every partition registered, isReady polled until true.
 *
 * <p>Stdout carries JSON lines only: {@code {"event": "measure_start"|"measure_end", "case", "threads"}} at the
 * bounds of each timed window (the driver samples the server's CPU there), and a last {@code {"event": "result"}}.
 * Everything else (the plugin's log lines) goes to stderr.
 */
public final class PluginBench {
    static final String PLUGIN_CLASS = "io.rlmm.kafka.RlmmRemoteLogMetadataManager";
    static final int BROKER_ID = 1;
    static final long TS = 1_700_000_000_000L;
    static final int LOOKUPS = 1 << 16;

    private final Map<String, String> args;
    private final String pluginDir;
    private final String target;
    private final PrintStream out;
    private final int[] threadCounts;
    private final double warmupS;
    private final double measureS;
    private final com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

    private PluginBench(Map<String, String> args, PrintStream out) {
        this.args = args;
        this.out = out;
        this.pluginDir = required(args, "plugin-dir");
        this.target = required(args, "target");
        String[] counts = args.getOrDefault("threads", "1,8").split(",");
        this.threadCounts = new int[counts.length];
        for (int i = 0; i < counts.length; i++) {
            threadCounts[i] = Integer.parseInt(counts[i].trim());
        }
        this.warmupS = Double.parseDouble(args.getOrDefault("warmup-s", "3"));
        this.measureS = Double.parseDouble(args.getOrDefault("measure-s", "10"));
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err); // stdout is the driver's
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        Map<String, Object> result = new PluginBench(args, out).run();
        result.put("event", "result");
        out.println(Json.write(result));
        out.flush();
        System.exit(0);
    }

    // ---- the run ----------------------------------------------------------------------------------------------

    private Map<String, Object> run() throws Exception {
        Map<String, Object> result = new LinkedHashMap<>();
        List<TopicIdPartition> uploads = readPartitions(required(args, "partitions"),
                Integer.parseInt(required(args, "metadata-partitions")));
        byte[][] values = readValues(required(args, "values"));
        int maxThreads = 1;
        for (int t : threadCounts) {
            maxThreads = Math.max(maxThreads, t);
        }
        List<TopicIdPartition> writePartitions = new ArrayList<>();
        for (int i = 0; i < maxThreads; i++) {
            writePartitions.add(new TopicIdPartition(Uuid.randomUuid(), i, "bench-writes"));
        }
        Set<TopicIdPartition> all = new LinkedHashSet<>(uploads);
        all.addAll(writePartitions);
        result.put("events", values.length);
        result.put("user_partitions", uploads.size());
        result.put("jvm", Map.of("version", System.getProperty("java.version"),
                "processors", Runtime.getRuntime().availableProcessors(),
                "max_heap_mb", Runtime.getRuntime().maxMemory() >> 20));

        // rlmm reads the topic for the partitions broker 1 registers through a first plugin
        RemoteLogMetadataManager plugin = load();
        long start = System.nanoTime();
        plugin.onPartitionLeadershipChanges(all, Collections.emptySet());
        long notReady = waitReady(plugin, all, Long.parseLong(args.getOrDefault("ready-timeout-s", "1800")) * 1000, 50);
        if (notReady > 0) {
            throw new IllegalStateException(notReady + " partitions not ready after the first registration");
        }
        result.put("rlmm_bootstrap_ms", ms(start));

        // Kafka's own classes read the same values: serde + store, as its ConsumerTask on a broker restart
        int passes = Integer.parseInt(args.getOrDefault("kafka-passes", "4"));
        List<Double> rereads = new ArrayList<>();
        List<Double> rereadCpu = new ArrayList<>();
        List<Double> rereadGc = new ArrayList<>();
        KafkaStoreDriver kafka = null;
        for (int pass = 0; pass < passes; pass++) {
            kafka = null;
            System.gc();
            long gc0 = gcMillis();
            long cpu0 = os.getProcessCpuTime();
            long t0 = System.nanoTime();
            kafka = reread(uploads, values);
            rereads.add(ms(t0));
            rereadCpu.add(round((os.getProcessCpuTime() - cpu0) / 1e6, 1));
            rereadGc.add((double) (gcMillis() - gc0));
        }
        Map<String, Object> reread = new LinkedHashMap<>();
        reread.put("cold_ms", rereads.get(0));
        reread.put("warm_ms", rereads.size() > 1 ? median(rereads.subList(1, rereads.size())) : null);
        reread.put("passes_ms", rereads);
        reread.put("passes_jvm_cpu_ms", rereadCpu);
        reread.put("passes_gc_ms", rereadGc);
        result.put("kafka_reread", reread);

        // the partition the lookups ask, its offsets, and the plugin's answers checked against Kafka's
        TopicIdPartition queried = uploads.get(Integer.parseInt(args.getOrDefault("query-partition", "0")));
        long highest = kafka.highestOffsetForEpoch(queried, 0).orElseThrow();
        int segments = 0;
        for (var it = kafka.listRemoteLogSegments(queried); it.hasNext(); it.next()) {
            segments++;
        }
        result.put("query_partition_segments", segments);
        result.put("query_partition_highest_offset", highest);
        long[] lookups = new long[LOOKUPS];
        SplittableRandom random = new SplittableRandom(42);
        for (int i = 0; i < LOOKUPS; i++) {
            lookups[i] = random.nextLong(highest + 1);
        }
        result.put("answers", check(plugin, kafka, uploads, random));

        Map<String, Object> cases = new LinkedHashMap<>();
        for (String name : List.of("floor", "plugin", "kafka_store", "writes")) {
            cases.put(name, new LinkedHashMap<String, Object>());
        }
        ClassLoader grpcLoader = new ChildFirstClassLoader(pluginDir + "/*", PluginBench.class.getClassLoader());
        try (HealthFloor floor = new HealthFloor(grpcLoader, target, 30_000)) {
            if (!HealthFloor.serving(floor.check())) {
                throw new IllegalStateException("the health check did not answer SERVING");
            }
            final RemoteLogMetadataManager reader = plugin;
            final KafkaStoreDriver store = kafka;
            Op floorCall = (thread, i, measuring) -> {
                if (!HealthFloor.serving(floor.check())) {
                    throw new IllegalStateException("not SERVING");
                }
            };
            Op pluginCall = (thread, i, measuring) -> {
                long offset = lookups[(int) ((i + thread * 7919L) & (LOOKUPS - 1))];
                if (reader.remoteLogSegmentMetadata(queried, 0, offset).isEmpty()) {
                    throw new IllegalStateException("no segment at " + offset);
                }
            };
            Op storeCall = (thread, i, measuring) -> {
                long offset = lookups[(int) ((i + thread * 7919L) & (LOOKUPS - 1))];
                if (store.remoteLogSegmentMetadata(queried, 0, offset).isEmpty()) {
                    throw new IllegalStateException("no segment at " + offset);
                }
            };
            // The JIT compiles a method after some 10,000 calls of it: at a few hundred gRPC calls a second on
            // a loaded machine, a few seconds of warm-up would time the compilers. A fixed number of calls first.
            long warmCalls = Long.parseLong(args.getOrDefault("jit-warmup-calls", "30000"));
            Map<String, Object> warmUp = new LinkedHashMap<>();
            warmUp.put("calls", warmCalls);
            warmUp.put("threads", maxThreads);
            warmUp.put("floor_s", warmUp(maxThreads, warmCalls, floorCall));
            warmUp.put("plugin_s", warmUp(maxThreads, warmCalls, pluginCall));
            warmUp.put("kafka_store_s", warmUp(maxThreads, warmCalls * 100, storeCall));
            result.put("jit_warm_up", warmUp);
            int rounds = Integer.parseInt(args.getOrDefault("rounds", "5"));
            result.put("rounds", rounds);
            for (int threads : threadCounts) {
                Map<String, Map<String, Object>> compared = interleaved(List.of("floor", "plugin"),
                        List.of(floorCall, pluginCall), threads, rounds);
                put(cases, "floor", threads, compared.get("floor"));
                put(cases, "plugin", threads, compared.get("plugin"));
                put(cases, "kafka_store", threads, measure("kafka_store", threads, storeCall));
            }
        }
        kafka = null;

        // add + finish through the plugin's futures, each thread on a partition of its own
        for (int threads : threadCounts) {
            LatencyHistogram[] adds = new LatencyHistogram[threads];
            LatencyHistogram[] finishes = new LatencyHistogram[threads];
            long[] next = new long[threads];
            for (int t = 0; t < threads; t++) {
                adds[t] = new LatencyHistogram();
                finishes[t] = new LatencyHistogram();
                next[t] = nextWriteOffset(plugin, writePartitions.get(t));
            }
            final RemoteLogMetadataManager writer = plugin;
            Map<String, Object> stats = measure("writes", threads, (thread, i, measuring) -> {
                TopicIdPartition tp = writePartitions.get(thread);
                long first = next[thread];
                next[thread] += 100;
                RemoteLogSegmentId id = new RemoteLogSegmentId(tp, Uuid.randomUuid());
                RemoteLogSegmentMetadata segment = new RemoteLogSegmentMetadata(id, first, first + 99, TS + first,
                        BROKER_ID, TS, 1_000, Map.of(0, first));
                long t0 = System.nanoTime();
                writer.addRemoteLogSegmentMetadata(segment).get(60, TimeUnit.SECONDS);
                long t1 = System.nanoTime();
                writer.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(id, TS, Optional.empty(),
                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED, BROKER_ID)).get(60, TimeUnit.SECONDS);
                long t2 = System.nanoTime();
                if (measuring) {
                    adds[thread].record(t1 - t0);
                    finishes[thread].record(t2 - t1);
                }
            });
            stats.put("add_p50_us", p(merge(adds), 0.50));
            stats.put("add_p99_us", p(merge(adds), 0.99));
            stats.put("finish_p50_us", p(merge(finishes), 0.50));
            stats.put("finish_p99_us", p(merge(finishes), 0.99));
            put(cases, "writes", threads, stats);
        }
        result.put("cases", cases);

        // broker restarts: the plugin closed, a fresh one (a new class loader) until every partition is ready
        long t0 = System.nanoTime();
        plugin.close();
        Map<String, Object> restart = new LinkedHashMap<>();
        restart.put("close_ms", ms(t0));
        List<Object> runs = new ArrayList<>();
        List<Double> totals = new ArrayList<>();
        int restarts = Integer.parseInt(args.getOrDefault("restarts", "3"));
        for (int r = 0; r < restarts; r++) {
            Map<String, Object> run = new LinkedHashMap<>();
            emit("measure_start", "restart", r + 1);
            Map<Long, Long> threadCpu0 = threadCpu();
            long cpu0 = os.getProcessCpuTime();
            long begin = System.nanoTime();
            RemoteLogMetadataManager fresh = load();
            long configured = System.nanoTime();
            fresh.onPartitionLeadershipChanges(all, Collections.emptySet());
            long registered = System.nanoTime();
            long[] polls = new long[1];
            if (waitReady(fresh, all, 600_000, 1, polls) > 0) {
                throw new IllegalStateException("partitions not ready after a restart");
            }
            long ready = System.nanoTime();
            long cpu = os.getProcessCpuTime() - cpu0;
            Map<String, Long> byGroup = cpuByGroup(threadCpu0, threadCpu(), cpu);
            emit("measure_end", "restart", r + 1);
            // not part of the restart: the same isReady sweep again, the plugin's classes now run once
            if (waitReady(fresh, all, 600_000, 1) > 0) {
                throw new IllegalStateException("partitions no longer ready");
            }
            long again = System.nanoTime();
            double total = round((ready - begin) / 1e6, 2);
            run.put("load_and_configure_ms", round((configured - begin) / 1e6, 2));
            run.put("register_ms", round((registered - configured) / 1e6, 2));
            run.put("until_ready_ms", round((ready - registered) / 1e6, 2));
            run.put("total_ms", total);
            run.put("is_ready_rounds", polls[0]);
            run.put("is_ready_sweep_again_ms", round((again - ready) / 1e6, 2));
            run.put("jvm_cpu_ms", round(cpu / 1e6, 1));
            Map<String, Object> breakdown = new LinkedHashMap<>();
            byGroup.forEach((group, nanos) -> breakdown.put(group, round(nanos / 1e6, 1)));
            run.put("jvm_cpu_ms_by_thread", breakdown);
            totals.add(total);
            runs.add(run);
            fresh.close();
        }
        restart.put("runs", runs);
        restart.put("partitions", all.size());
        restart.put("median_ms", median(totals));
        result.put("restart", restart);
        return result;
    }

    // ---- loading the plugin as a broker does --------------------------------------------------------------

    private RemoteLogMetadataManager load() throws Exception {
        ClassLoader loader = new ChildFirstClassLoader(pluginDir + "/*", PluginBench.class.getClassLoader());
        RemoteLogMetadataManager delegate = (RemoteLogMetadataManager) loader.loadClass(PLUGIN_CLASS)
                .getDeclaredConstructor().newInstance();
        RemoteLogMetadataManager rlmm = new ClassLoaderAwareRemoteLogMetadataManager(delegate, loader);
        Map<String, Object> config = new HashMap<>();
        config.put("targets", target);
        config.put("broker.id", BROKER_ID);
        config.put("log.dir", System.getProperty("java.io.tmpdir"));
        config.put("cluster.id", "rlmm-plugin-bench");
        config.put("remote.log.metadata.common.client.bootstrap.servers", "127.0.0.1:9092");
        rlmm.configure(config);
        return rlmm;
    }

    private static long waitReady(RemoteLogMetadataManager rlmm, Set<TopicIdPartition> partitions, long timeoutMs,
                                  long pollMs) throws InterruptedException {
        return waitReady(rlmm, partitions, timeoutMs, pollMs, new long[1]);
    }

    /** Asks isReady of each partition not ready yet, rounds {@code pollMs} apart; how many are still not ready. */
    private static long waitReady(RemoteLogMetadataManager rlmm, Set<TopicIdPartition> partitions, long timeoutMs,
                                  long pollMs, long[] rounds) throws InterruptedException {
        Set<TopicIdPartition> waiting = new LinkedHashSet<>(partitions);
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        while (true) {
            rounds[0]++;
            waiting.removeIf(rlmm::isReady);
            if (waiting.isEmpty() || System.nanoTime() > end) {
                return waiting.size();
            }
            Thread.sleep(pollMs);
        }
    }

    // ---- Kafka's own classes ------------------------------------------------------------------------------

    /** What a broker's ConsumerTask does with the topic on a restart: its partitions loaded, every value
     * deserialized and handed to the store, the partitions marked ready at the end. */
    static KafkaStoreDriver reread(List<TopicIdPartition> partitions, byte[][] values) {
        KafkaStoreDriver kafka = new KafkaStoreDriver();
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        for (TopicIdPartition tp : partitions) {
            kafka.load(tp);
        }
        for (byte[] value : values) {
            kafka.handle(serde.deserialize(value));
        }
        for (TopicIdPartition tp : partitions) {
            kafka.markInitialized(tp);
        }
        return kafka;
    }

    /** The plugin's answers against Kafka's store's at random offsets of every partition (a benchmark of wrong
     * answers would be worth nothing). */
    private static Map<String, Object> check(RemoteLogMetadataManager plugin, KafkaStoreDriver kafka,
                                             List<TopicIdPartition> partitions, SplittableRandom random)
            throws Exception {
        int checked = 0;
        List<Object> differ = new ArrayList<>();
        for (TopicIdPartition tp : partitions) {
            long highest = kafka.highestOffsetForEpoch(tp, 0).orElse(-1L);
            Optional<Long> answer = plugin.highestOffsetForEpoch(tp, 0);
            checked++;
            if (!answer.equals(kafka.highestOffsetForEpoch(tp, 0))) {
                differ.add("highestOffsetForEpoch " + tp + ": " + answer + " vs " + highest);
            }
            for (int i = 0; i < 5; i++) {
                long offset = random.nextLong(highest + 2);
                Optional<RemoteLogSegmentMetadata> got = plugin.remoteLogSegmentMetadata(tp, 0, offset);
                Optional<RemoteLogSegmentMetadata> want = kafka.remoteLogSegmentMetadata(tp, 0, offset);
                checked++;
                if (!got.equals(want)) {
                    differ.add("remoteLogSegmentMetadata " + tp + " @" + offset + ": " + got + " vs " + want);
                }
            }
        }
        Map<String, Object> answers = new LinkedHashMap<>();
        answers.put("checked", checked);
        answers.put("differ", differ.size());
        answers.put("first_differences", differ.subList(0, Math.min(3, differ.size())));
        return answers;
    }

    /** Past the end of the last segment written to the partition (a restart of the bench, or the 1-thread run). */
    private static long nextWriteOffset(RemoteLogMetadataManager plugin, TopicIdPartition tp) throws Exception {
        return plugin.highestOffsetForEpoch(tp, 0).map(h -> h + 1).orElse(0L);
    }

    // ---- timing -------------------------------------------------------------------------------------------

    interface Op {
        void call(int thread, long i, boolean measuring) throws Throwable;
    }

    /** What one or more timed windows of a case saw. */
    private static final class Window {
        final LatencyHistogram histogram = new LatencyHistogram();
        final Map<String, Long> cpu = new LinkedHashMap<>();
        long errors;
        String firstError;
        long nanos;
        long processCpu;
        int windows;

        void add(Window other) {
            histogram.add(other.histogram);
            other.cpu.forEach((group, nanos) -> cpu.merge(group, nanos, Long::sum));
            errors += other.errors;
            firstError = firstError != null ? firstError : other.firstError;
            nanos += other.nanos;
            processCpu += other.processCpu;
            windows += other.windows;
        }
    }

    /** One case: {@code warmup-s} untimed, then {@code measure-s} timed. */
    private Map<String, Object> measure(String name, int threads, Op op) throws Exception {
        return stats(window(name, threads, op, warmupS, measureS), threads);
    }

    /**
     * Cases whose numbers are compared, measured in turns ({@code rounds} windows each, the order alternating:
     * A B B A A B ...), so that the load other processes put on a shared machine falls on each alike. Each window
     * has its share of {@code warmup-s} and {@code measure-s}.
     */
    private Map<String, Map<String, Object>> interleaved(List<String> names, List<Op> ops, int threads, int rounds)
            throws Exception {
        Map<String, Window> sums = new LinkedHashMap<>();
        for (String name : names) {
            sums.put(name, new Window());
        }
        for (int r = 0; r < rounds; r++) {
            for (int k = 0; k < names.size(); k++) {
                int index = r % 2 == 0 ? k : names.size() - 1 - k;
                String name = names.get(index);
                sums.get(name).add(window(name, threads, ops.get(index), warmupS / rounds, measureS / rounds));
            }
        }
        Map<String, Map<String, Object>> stats = new LinkedHashMap<>();
        sums.forEach((name, window) -> stats.put(name, stats(window, threads)));
        return stats;
    }

    /**
     * {@code threads} threads call {@code op} back to back: {@code warmS} untimed, then {@code measureS} timed (the
     * calls started inside the window: latency of each, the window's length, this JVM's CPU by thread kind),
     * announced on stdout.
     */
    private Window window(String name, int threads, Op op, double warmS, double measureS) throws Exception {
        LatencyHistogram[] histograms = new LatencyHistogram[threads];
        long[] errors = new long[threads];
        String[] firstError = new String[1];
        Phase phase = new Phase();
        CyclicBarrier go = new CyclicBarrier(threads + 1);
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int thread = t;
            histograms[t] = new LatencyHistogram();
            Thread worker = new Thread(() -> {
                try {
                    go.await();
                } catch (Exception e) {
                    return;
                }
                long i = 0;
                LatencyHistogram histogram = histograms[thread];
                while (true) {
                    int now = phase.value;
                    if (now == Phase.STOP) {
                        return;
                    }
                    boolean measuring = now == Phase.MEASURE;
                    long t0 = System.nanoTime();
                    try {
                        op.call(thread, i++, measuring);
                    } catch (Throwable e) {
                        errors[thread]++;
                        synchronized (firstError) {
                            if (firstError[0] == null) {
                                firstError[0] = e.toString();
                            }
                        }
                    }
                    long elapsed = System.nanoTime() - t0;
                    if (measuring) {
                        histogram.record(elapsed);
                    }
                }
            }, "caller-" + name + "-" + t);
            worker.setDaemon(true);
            workers.add(worker);
            worker.start();
        }
        go.await();
        Thread.sleep((long) (warmS * 1000));
        emit("measure_start", name, threads);
        Map<Long, Long> threadCpu0 = threadCpu();
        long cpu0 = os.getProcessCpuTime();
        long start = System.nanoTime();
        phase.value = Phase.MEASURE;
        Thread.sleep((long) (measureS * 1000));
        Window window = new Window();
        window.nanos = System.nanoTime() - start;
        window.processCpu = os.getProcessCpuTime() - cpu0;
        window.cpu.putAll(cpuByGroup(threadCpu0, threadCpu(), window.processCpu)); // the callers still alive
        phase.value = Phase.STOP;
        emit("measure_end", name, threads);
        for (Thread worker : workers) {
            worker.join(120_000);
        }
        for (int t = 0; t < threads; t++) {
            window.histogram.add(histograms[t]);
            window.errors += errors[t];
        }
        window.firstError = firstError[0];
        window.windows = 1;
        return window;
    }

    private static Map<String, Object> stats(Window window, int threads) {
        LatencyHistogram all = window.histogram;
        double seconds = window.nanos / 1e9;
        Map<String, Object> stats = new LinkedHashMap<>();
        stats.put("threads", threads);
        stats.put("calls", all.count());
        stats.put("errors", window.errors);
        stats.put("first_error", window.firstError);
        stats.put("windows", window.windows);
        stats.put("seconds", round(seconds, 3));
        stats.put("calls_per_s", round(all.count() / seconds, 1));
        stats.put("p50_us", p(all, 0.50));
        stats.put("p99_us", p(all, 0.99));
        stats.put("max_us", round(all.maxNanos() / 1e3, 1));
        stats.put("jvm_cpu_us_per_call", all.count() == 0 ? null : round(window.processCpu / 1e3 / all.count(), 2));
        Map<String, Object> breakdown = new LinkedHashMap<>();
        for (Map.Entry<String, Long> group : window.cpu.entrySet()) {
            breakdown.put(group.getKey(), all.count() == 0 ? null : round(group.getValue() / 1e3 / all.count(), 2));
        }
        stats.put("jvm_cpu_us_per_call_by_thread", breakdown);
        return stats;
    }

    /** Milliseconds the garbage collectors spent so far (their own accounting, pauses and concurrent work). */
    private static long gcMillis() {
        long ms = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            ms += Math.max(0, gc.getCollectionTime());
        }
        return ms;
    }

    /** CPU nanoseconds of every live Java thread, by id. */
    private static Map<Long, Long> threadCpu() {
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        Map<Long, Long> cpu = new HashMap<>();
        for (long id : threads.getAllThreadIds()) {
            long nanos = threads.getThreadCpuTime(id);
            if (nanos >= 0) {
                cpu.put(id, nanos);
            }
        }
        return cpu;
    }

    /**
     * Where this JVM's CPU went since {@code before}: the calling threads, the gRPC event loops (netty), the
     * executors (the plugin's and the floor's), other Java threads, and the rest of the process's CPU (the JIT
     * compilers and the garbage collector, which are not Java threads).
     */
    private static Map<String, Long> cpuByGroup(Map<Long, Long> before, Map<Long, Long> after, long processNanos) {
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        Map<String, Long> groups = new LinkedHashMap<>();
        for (String group : List.of("callers", "event_loops", "executors", "other_threads", "jit_and_gc")) {
            groups.put(group, 0L);
        }
        long javaThreads = 0;
        long[] ids = after.keySet().stream().mapToLong(Long::longValue).toArray();
        for (ThreadInfo info : threads.getThreadInfo(ids)) {
            if (info == null) {
                continue;
            }
            long spent = after.get(info.getThreadId()) - before.getOrDefault(info.getThreadId(), 0L);
            String name = info.getThreadName();
            String group = name.startsWith("caller-") || name.equals("main") ? "callers"
                    : name.contains("netty") ? "event_loops"
                    : name.startsWith("rlmm-kafka") || name.startsWith("floor-executor") ? "executors"
                    : "other_threads";
            groups.merge(group, spent, Long::sum);
            javaThreads += spent;
        }
        groups.put("jit_and_gc", Math.max(0, processNanos - javaThreads));
        return groups;
    }

    /** {@code threads} threads make {@code calls} calls in all, untimed; the seconds it took. */
    private static double warmUp(int threads, long calls, Op op) throws Exception {
        AtomicLong next = new AtomicLong();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        List<Thread> workers = new ArrayList<>();
        long start = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            final int thread = t;
            Thread worker = new Thread(() -> {
                long i;
                while ((i = next.getAndIncrement()) < calls && failed.get() == null) {
                    try {
                        op.call(thread, i, false);
                    } catch (Throwable e) {
                        failed.compareAndSet(null, e);
                    }
                }
            }, "caller-warm-up-" + t);
            worker.setDaemon(true);
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        if (failed.get() != null) {
            throw new IllegalStateException("a warm-up call failed", failed.get());
        }
        return round((System.nanoTime() - start) / 1e9, 2);
    }

    private static final class Phase {
        static final int WARMUP = 0;
        static final int MEASURE = 1;
        static final int STOP = 2;
        volatile int value = WARMUP;
    }

    private void emit(String event, String name, int threads) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("event", event);
        line.put("case", name);
        line.put("threads", threads);
        out.println(Json.write(line));
        out.flush();
    }

    private static LatencyHistogram merge(LatencyHistogram[] histograms) {
        LatencyHistogram all = new LatencyHistogram();
        for (LatencyHistogram h : histograms) {
            all.add(h);
        }
        return all;
    }

    private static double p(LatencyHistogram histogram, double q) {
        return round(histogram.percentileNanos(q) / 1e3, 2);
    }

    @SuppressWarnings("unchecked")
    private static void put(Map<String, Object> cases, String name, int threads, Map<String, Object> stats) {
        ((Map<String, Object>) cases.get(name)).put(String.valueOf(threads), stats);
    }

    // ---- small things -------------------------------------------------------------------------------------

    static List<TopicIdPartition> readPartitions(String path, int metadataPartitions) throws Exception {
        RemoteLogMetadataTopicPartitioner partitioner = new RemoteLogMetadataTopicPartitioner(metadataPartitions);
        List<TopicIdPartition> partitions = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8)) {
            if (line.isBlank()) {
                continue;
            }
            String[] fields = line.trim().split(" ");
            ByteBuffer id = ByteBuffer.wrap(hex(fields[0]));
            TopicIdPartition tp = new TopicIdPartition(new Uuid(id.getLong(), id.getLong()),
                    Integer.parseInt(fields[2]), fields[1]);
            // the driver produced with rlmm's partitioner: it must be Kafka's
            if (partitioner.metadataPartition(tp) != Integer.parseInt(fields[3])) {
                throw new IllegalStateException(tp + ": the driver's metadata partition " + fields[3]
                        + " is not Kafka's " + partitioner.metadataPartition(tp));
            }
            partitions.add(tp);
        }
        return partitions;
    }

    static byte[][] readValues(String path) throws Exception {
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(path), 1 << 20))) {
            byte[][] values = new byte[in.readInt()][];
            for (int i = 0; i < values.length; i++) {
                values[i] = new byte[in.readInt()];
                in.readFully(values[i]);
            }
            return values;
        }
    }

    private static byte[] hex(String text) {
        byte[] bytes = new byte[text.length() / 2];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return bytes;
    }

    private static String required(Map<String, String> args, String name) {
        String value = args.get(name);
        if (value == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return value;
    }

    private static double ms(long startNanos) {
        return round((System.nanoTime() - startNanos) / 1e6, 2);
    }

    static double median(List<Double> values) {
        List<Double> sorted = new ArrayList<>(values);
        Collections.sort(sorted);
        int n = sorted.size();
        return n % 2 == 1 ? sorted.get(n / 2) : round((sorted.get(n / 2 - 1) + sorted.get(n / 2)) / 2, 2);
    }

    static double round(double value, int digits) {
        double scale = Math.pow(10, digits);
        return Math.round(value * scale) / scale;
    }
}
