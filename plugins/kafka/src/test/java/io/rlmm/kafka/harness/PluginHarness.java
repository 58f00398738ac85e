package io.rlmm.kafka.harness;

import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.utils.ChildFirstClassLoader;
import org.apache.kafka.server.log.remote.metadata.storage.ClassLoaderAwareRemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.metadata.storage.KafkaStoreDriver;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteState;

/**
 * The test harness of rlmm's Kafka plugin: loads the plugin as a broker does (Kafka's ChildFirstClassLoader over
 * the plugin's folder, the class by name, wrapped in Kafka's ClassLoaderAwareRemoteLogMetadataManager, configured
 * with the keys the broker hands over) and runs the commands pytest sends.
 *
 * <p>{@code java -cp HARNESS:KAFKA_LIBS/*:slf4j PluginHarness repl PLUGIN_DIR}: one JSON command per line on stdin,
 * one JSON answer per line on stdout (anything else the JVM prints goes to stderr). Answers carry {@code "ok"}:
 * false with {@code "harness_error"} when the harness itself failed.
 */
public final class PluginHarness {
    static final String PLUGIN_CLASS = "io.rlmm.kafka.RlmmRemoteLogMetadataManager";
    static final long TS = 1_700_000_000_000L;

    private final String pluginDir;
    private final Map<String, RemoteLogMetadataManager> plugins = new LinkedHashMap<>();
    private final Map<String, Integer> brokerIds = new HashMap<>();
    private final Map<String, ScenarioRun> scenarios = new HashMap<>();
    /** Next start offset per user partition (as "topicId:topic:partition"), for the segments the harness makes. */
    private final Map<String, AtomicLong> nextOffsets = new ConcurrentHashMap<>();

    private PluginHarness(String pluginDir) {
        this.pluginDir = pluginDir;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2 || !args[0].equals("repl")) {
            System.err.println("usage: PluginHarness repl PLUGIN_DIR");
            System.exit(2);
        }
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err); // the protocol owns stdout
        PluginHarness harness = new PluginHarness(args[1]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> answer;
            try {
                answer = harness.run(Json.parseObject(line));
            } catch (Throwable t) {
                answer = new LinkedHashMap<>();
                answer.put("ok", false);
                answer.put("harness_error", stackTrace(t));
            }
            out.println(Json.write(answer));
        }
        harness.closeAll();
        out.flush();
        System.exit(0);
    }

    private Map<String, Object> run(Map<String, Object> cmd) throws Exception {
        String name = str(cmd, "cmd");
        switch (name) {
            case "open": return open(cmd);
            case "close": return close(cmd);
            case "register": return register(cmd);
            case "stop": return stop(cmd);
            case "wait_ready": return waitReady(cmd);
            case "write": return write(cmd);
            case "read": return read(cmd);
            case "list_slowly": return listSlowly(cmd);
            case "calls_without_arguments": return callsWithoutArguments(cmd);
            case "contract": return contract(cmd);
            case "contract_final": return contractFinal(cmd);
            case "contract_stop": return contractStop(cmd);
            case "poll_until_ready": return pollUntilReady(cmd);
            case "read_your_writes": return readYourWrites(cmd);
            case "loop": return loop(cmd);
            case "write_segments": return writeSegments(cmd);
            case "check_visible": return checkVisible(cmd);
            case "thread_check": return threadCheck(cmd);
            case "threads": return ok("threads", threadNames(liveThreads()));
            default: throw new IllegalArgumentException("unknown command " + name);
        }
    }

    // ---- loading the plugin as a broker does -----------------------------------------------------------

    /** The configuration a broker hands over: the prefix stripped, broker.id an Integer, log.dir, cluster.id. */
    private static Map<String, Object> brokerConfig(Map<String, Object> given) {
        Map<String, Object> config = new HashMap<>();
        config.put("remote.log.metadata.common.client.bootstrap.servers", "127.0.0.1:9092");
        config.put("remote.log.metadata.common.client.security.protocol", "PLAINTEXT");
        config.put("log.dir", System.getProperty("java.io.tmpdir"));
        config.put("cluster.id", "rlmm-plugin-harness");
        for (Map.Entry<String, Object> entry : given.entrySet()) {
            Object value = entry.getValue();
            if (value == null) {
                config.remove(entry.getKey());
            } else if (entry.getKey().equals("broker.id") && value instanceof Long) {
                config.put("broker.id", ((Long) value).intValue());
            } else {
                config.put(entry.getKey(), value instanceof String ? value : String.valueOf(value));
            }
        }
        return config;
    }

    private RemoteLogMetadataManager load(Map<String, Object> config) throws Exception {
        ClassLoader loader = new ChildFirstClassLoader(pluginDir + "/*", PluginHarness.class.getClassLoader());
        RemoteLogMetadataManager delegate = (RemoteLogMetadataManager) loader.loadClass(PLUGIN_CLASS)
                .getDeclaredConstructor().newInstance();
        RemoteLogMetadataManager rlmm = new ClassLoaderAwareRemoteLogMetadataManager(delegate, loader);
        try {
            rlmm.configure(brokerConfig(config));
        } catch (Throwable t) {
            try {
                rlmm.close();
            } catch (Throwable ignored) {
                // what a broker that failed to start would do with it: nothing more
            }
            throw t;
        }
        return rlmm;
    }

    private Map<String, Object> open(Map<String, Object> cmd) {
        String id = str(cmd, "id");
        @SuppressWarnings("unchecked")
        Map<String, Object> config = (Map<String, Object>) cmd.get("config");
        long start = System.nanoTime();
        Map<String, Object> answer = new LinkedHashMap<>();
        try {
            RemoteLogMetadataManager rlmm = load(config);
            plugins.put(id, rlmm);
            Object brokerId = config.get("broker.id");
            brokerIds.put(id, brokerId instanceof Number ? ((Number) brokerId).intValue() : 0);
            answer.put("ok", true);
        } catch (Throwable t) {
            answer.put("ok", false);
            answer.putAll(error(t));
            answer.put("config_exception", t instanceof ConfigException);
        }
        answer.put("ms", ms(start));
        return answer;
    }

    private Map<String, Object> close(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugins.remove(str(cmd, "id"));
        Map<String, Object> answer = new LinkedHashMap<>();
        long start = System.nanoTime();
        answer.put("first", outcome(() -> {
            rlmm.close();
            return null;
        }));
        answer.put("second", outcome(() -> {
            rlmm.close();
            return null;
        }));
        answer.put("ok", true);
        answer.put("ms", ms(start));
        return answer;
    }

    private void closeAll() {
        for (RemoteLogMetadataManager rlmm : plugins.values()) {
            try {
                rlmm.close();
            } catch (Throwable ignored) {
                // the JVM ends
            }
        }
    }

    private RemoteLogMetadataManager plugin(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugins.get(str(cmd, "id"));
        if (rlmm == null) {
            throw new IllegalArgumentException("no open plugin " + cmd.get("id"));
        }
        return rlmm;
    }

    // ---- single calls ----------------------------------------------------------------------------------

    private Map<String, Object> register(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        Set<TopicIdPartition> leaders = tps(cmd.getOrDefault("leaders", List.of()));
        Set<TopicIdPartition> followers = tps(cmd.getOrDefault("followers", List.of()));
        long start = System.nanoTime();
        Map<String, Object> answer = outcome(() -> {
            rlmm.onPartitionLeadershipChanges(leaders, followers);
            return null;
        });
        answer.put("ms", ms(start));
        return answer;
    }

    private Map<String, Object> stop(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        Set<TopicIdPartition> partitions = tps(cmd.get("partitions"));
        long start = System.nanoTime();
        Map<String, Object> answer = outcome(() -> {
            rlmm.onStopPartitions(partitions);
            return null;
        });
        answer.put("ms", ms(start));
        return answer;
    }

    private Map<String, Object> waitReady(Map<String, Object> cmd) throws InterruptedException {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        Set<TopicIdPartition> partitions = tps(cmd.get("partitions"));
        long timeoutMs = num(cmd, "timeout_ms", 30_000);
        long start = System.nanoTime();
        Set<TopicIdPartition> waiting = new LinkedHashSet<>(partitions);
        while (true) {
            waiting.removeIf(rlmm::isReady);
            if (waiting.isEmpty() || ms(start) > timeoutMs) {
                break;
            }
            Thread.sleep(20);
        }
        Map<String, Object> answer = ok("ready", waiting.isEmpty());
        answer.put("not_ready", tpList(waiting));
        answer.put("ms", ms(start));
        return answer;
    }

    private Map<String, Object> write(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        TopicIdPartition tp = tp(cmd.get("tp"));
        String op = str(cmd, "op");
        int brokerId = (int) num(cmd, "broker_id", 1);
        RemoteLogMetadata record;
        Map<String, Object> answer = new LinkedHashMap<>();
        if (op.equals("add")) {
            long startOffset = num(cmd, "start", nextOffset(tp).get());
            long end = num(cmd, "end", startOffset + 99);
            Uuid id = cmd.containsKey("segment_id") ? Uuid.fromString(str(cmd, "segment_id")) : Uuid.randomUuid();
            Map<Integer, Long> epochs = new TreeMap<>();
            epochs.put((int) num(cmd, "epoch", 0), startOffset);
            record = new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tp, id), startOffset, end, TS + end, brokerId,
                    TS, (int) num(cmd, "size", 1000), Optional.empty(),
                    RemoteLogSegmentState.valueOf((String) cmd.getOrDefault("state", "COPY_SEGMENT_STARTED")),
                    epochs, Boolean.TRUE.equals(cmd.getOrDefault("txn_empty", true)));
            answer.put("segment_id", id.toString());
        } else if (op.equals("update")) {
            record = new RemoteLogSegmentMetadataUpdate(
                    new RemoteLogSegmentId(tp, Uuid.fromString(str(cmd, "segment_id"))), TS + 1, Optional.empty(),
                    RemoteLogSegmentState.valueOf((String) cmd.getOrDefault("state", "COPY_SEGMENT_FINISHED")),
                    brokerId);
        } else if (op.equals("delete")) {
            record = new RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.valueOf(str(cmd, "state")),
                    TS + 2, brokerId);
        } else {
            throw new IllegalArgumentException("unknown write " + op);
        }
        answer.putAll(writeRecord(rlmm, record, num(cmd, "wait_ms", 60_000)));
        answer.put("ok", true);
        return answer;
    }

    private Map<String, Object> read(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        Query query = new Query(str(cmd, "op"), tp(cmd.get("tp")), intOrNull(cmd.get("epoch")),
                cmd.get("offset") == null ? null : ((Number) cmd.get("offset")).longValue());
        long start = System.nanoTime();
        Map<String, Object> answer;
        if (query.op.equals("listRemoteLogSegments")) { // where a failure comes from: the call, or the iteration
            AtomicReference<Iterator<RemoteLogSegmentMetadata>> listing = new AtomicReference<>();
            answer = outcome(() -> {
                listing.set(query.epoch == null ? rlmm.listRemoteLogSegments(query.tp)
                        : rlmm.listRemoteLogSegments(query.tp, query.epoch));
                return null;
            });
            if (answer.containsKey("error")) {
                answer.put("thrown_by", "call");
            } else {
                answer.put("call_ms", ms(start));
                answer = outcome(() -> Boolean.TRUE.equals(cmd.get("count")) ? (Object) list(listing.get()).size()
                        : canonical(listing.get()));
                if (answer.containsKey("error")) {
                    answer.put("thrown_by", "iteration");
                }
            }
        } else {
            answer = outcome(() -> query.onPlugin(rlmm));
        }
        answer.put("ms", ms(start));
        return answer;
    }

    /** A listing iterated slower than a stream lives (a broker deleting segment after segment): each segment is
     * to come once, in start offset order. */
    private Map<String, Object> listSlowly(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        TopicIdPartition tp = tp(cmd.get("tp"));
        long pauseEvery = num(cmd, "pause_every", 1000);
        long pauseMs = num(cmd, "pause_ms", 100);
        long start = System.nanoTime();
        Map<String, Object> answer = outcome(() -> {
            Iterator<RemoteLogSegmentMetadata> segments = rlmm.listRemoteLogSegments(tp, 0);
            Set<String> ids = new HashSet<>();
            long count = 0;
            long previousStart = Long.MIN_VALUE;
            boolean ordered = true;
            while (segments.hasNext()) {
                RemoteLogSegmentMetadata segment = segments.next();
                ids.add(segment.remoteLogSegmentId().id().toString());
                ordered &= segment.startOffset() >= previousStart;
                previousStart = segment.startOffset();
                if (++count % pauseEvery == 0) {
                    Thread.sleep(pauseMs);
                }
            }
            return Map.of("count", count, "distinct", ids.size(), "ordered", ordered);
        });
        answer.put("ms", ms(start));
        return answer;
    }

    /** Kafka's contract for arguments: null ones throw NullPointerException, a wrong state IllegalArgumentException,
     * both synchronously. */
    private Map<String, Object> callsWithoutArguments(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        TopicIdPartition tp = tp(cmd.get("tp"));
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("add_null", outcome(() -> rlmm.addRemoteLogSegmentMetadata(null)));
        answer.put("update_null", outcome(() -> rlmm.updateRemoteLogSegmentMetadata(null)));
        answer.put("delete_null", outcome(() -> rlmm.putRemotePartitionDeleteMetadata(null)));
        Map<Integer, Long> epochs = Map.of(0, 0L);
        for (RemoteLogSegmentState state : RemoteLogSegmentState.values()) {
            if (state == RemoteLogSegmentState.COPY_SEGMENT_STARTED) {
                continue; // a valid add: it would write
            }
            RemoteLogSegmentId id = RemoteLogSegmentId.generateNew(tp);
            answer.put("add_" + state, outcome(() -> rlmm.addRemoteLogSegmentMetadata(new RemoteLogSegmentMetadata(
                    id, 0, 9, TS, 1, TS, 10, Optional.empty(), state, epochs, true))));
        }
        RemoteLogSegmentId id = RemoteLogSegmentId.generateNew(tp);
        answer.put("update_COPY_SEGMENT_STARTED", outcome(() -> rlmm.updateRemoteLogSegmentMetadata(
                new RemoteLogSegmentMetadataUpdate(id, TS, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                        1))));
        answer.put("ok", true);
        return answer;
    }

    // ---- the compat scenarios --------------------------------------------------------------------------

    private static final class ScenarioRun {
        final KafkaStoreDriver kafka = new KafkaStoreDriver();
        final List<TopicIdPartition> assigned = new ArrayList<>();
        final List<Map<String, Object>> queries = new ArrayList<>();
        final Set<TopicIdPartition> queried = new LinkedHashSet<>();
        final Map<TopicIdPartition, Map<Integer, TreeSet<Long>>> offsets = new HashMap<>();
        /** The records in the topic (those the plugin wrote), in the order written. */
        final List<RemoteLogMetadata> written = new ArrayList<>();
        int metadataPartitions;
    }

    /**
     * Replays a scenario's events through the plugin's write methods (assigned partitions registered first, as a
     * live broker's), feeds Kafka's store what was written to the topic with ConsumerTask's routing, and evaluates
     * each query at its after_event on both.
     */
    private Map<String, Object> contract(Map<String, Object> cmd) throws Exception {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        Path dir = Paths.get(str(cmd, "scenario"));
        long writeWaitMs = num(cmd, "write_wait_ms", 60_000);
        Map<String, Object> meta = Json.parseObject(Files.readString(dir.resolve("scenario.json")));
        List<Map<String, Object>> events = jsonLines(dir.resolve("events.jsonl"));
        ScenarioRun run = new ScenarioRun();
        run.queries.addAll(jsonLines(dir.resolve("queries.jsonl")));
        for (Object a : (List<?>) meta.get("assigned")) {
            run.assigned.add(tp(a));
        }
        run.metadataPartitions = ((Number) meta.get("num_metadata_partitions")).intValue();
        scenarios.put(str(cmd, "name"), run);
        Map<Long, List<Integer>> queriesAt = new TreeMap<>();
        for (int j = 0; j < run.queries.size(); j++) {
            Map<String, Object> q = run.queries.get(j);
            queriesAt.computeIfAbsent(((Number) q.get("after_event")).longValue(), k -> new ArrayList<>()).add(j);
            run.queried.add(tp(q.get("args")));
        }

        Map<String, Object> answer = new LinkedHashMap<>();
        long start = System.nanoTime();
        rlmm.onPartitionLeadershipChanges(new HashSet<>(run.assigned), Collections.emptySet());
        answer.put("register_ms", ms(start));
        Set<TopicIdPartition> waiting = new LinkedHashSet<>(run.assigned);
        while (!waiting.isEmpty() && ms(start) < num(cmd, "ready_timeout_ms", 30_000)) {
            waiting.removeIf(rlmm::isReady);
            Thread.sleep(20);
        }
        answer.put("not_ready", tpList(waiting));
        for (TopicIdPartition tp : run.assigned) { // live: loaded and ready before the first record
            run.kafka.load(tp);
            run.kafka.markInitialized(tp);
        }

        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        List<Object> outcomes = new ArrayList<>();
        List<Object> answers = new ArrayList<>();
        evaluate(run, rlmm, queriesAt.getOrDefault(-1L, List.of()), answers);
        for (int i = 0; i < events.size(); i++) {
            Map<String, Object> outcome = new LinkedHashMap<>();
            outcome.put("event", i);
            RemoteLogMetadata record = null;
            try {
                record = serde.deserialize(hex(str(events.get(i), "hex")));
            } catch (Throwable t) {
                outcome.put("skipped", "undecodable");
                outcome.put("decode_error", error(t));
            }
            if (record != null && !(record instanceof RemoteLogSegmentMetadata
                    || record instanceof RemoteLogSegmentMetadataUpdate
                    || record instanceof RemotePartitionDeleteMetadata)) {
                outcome.put("skipped", "not a record of the interface: " + record.getClass().getSimpleName());
                record = null;
            }
            if (record != null) {
                TopicIdPartition tp = record.topicIdPartition();
                outcome.put("type", record.getClass().getSimpleName());
                outcome.put("tp", tpJson(tp));
                outcome.put("assigned", run.assigned.contains(tp));
                if (record instanceof RemoteLogSegmentMetadata) {
                    outcome.put("state", ((RemoteLogSegmentMetadata) record).state().name());
                    track(run, (RemoteLogSegmentMetadata) record);
                } else if (record instanceof RemoteLogSegmentMetadataUpdate) {
                    outcome.put("state", ((RemoteLogSegmentMetadataUpdate) record).state().name());
                } else {
                    outcome.put("state", ((RemotePartitionDeleteMetadata) record).state().name());
                }
                outcome.putAll(writeRecord(rlmm, record, writeWaitMs));
                boolean written = !outcome.containsKey("sync_error");
                if (written) {
                    run.written.add(record);
                }
                if (written && run.assigned.contains(tp)) { // ConsumerTask: assigned partitions only
                    final RemoteLogMetadata handled = record;
                    outcome.put("kafka", outcome(() -> {
                        run.kafka.handle(handled);
                        return null;
                    }));
                }
            }
            outcomes.add(outcome);
            evaluate(run, rlmm, queriesAt.getOrDefault((long) i, List.of()), answers);
        }
        answer.put("events", outcomes);
        answer.put("queries", answers);
        answer.put("ok", true);
        answer.put("ms", ms(start));
        return answer;
    }

    /** The epochs and offsets worth asking about: per epoch of a segment, where it starts in it, and the segment's
     * bounds. */
    private static void track(ScenarioRun run, RemoteLogSegmentMetadata segment) {
        Map<Integer, TreeSet<Long>> epochs = run.offsets.computeIfAbsent(segment.topicIdPartition(),
                k -> new TreeMap<>());
        for (Map.Entry<Integer, Long> epoch : segment.segmentLeaderEpochs().entrySet()) {
            TreeSet<Long> offsets = epochs.computeIfAbsent(epoch.getKey(), k -> new TreeSet<>());
            offsets.add(epoch.getValue());
            offsets.add(segment.startOffset());
            offsets.add(segment.endOffset());
            offsets.add(segment.endOffset() + 1);
        }
    }

    private static void evaluate(ScenarioRun run, RemoteLogMetadataManager rlmm, List<Integer> indexes,
                                 List<Object> answers) {
        for (int j : indexes) {
            Map<String, Object> q = run.queries.get(j);
            @SuppressWarnings("unchecked")
            Map<String, Object> args = (Map<String, Object>) q.get("args");
            Query query = new Query(str(q, "op"), tp(args), intOrNull(args.get("leader_epoch")),
                    args.get("offset") == null ? null : ((Number) args.get("offset")).longValue());
            answers.add(compare(run.kafka, rlmm, query, j));
        }
    }

    private static Map<String, Object> compare(KafkaStoreDriver kafka, RemoteLogMetadataManager rlmm, Query query,
                                               int index) {
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("query", index);
        answer.put("call", query.json());
        long start = System.nanoTime();
        answer.put("plugin", outcome(() -> query.onPlugin(rlmm)));
        answer.put("plugin_ms", ms(start));
        answer.put("kafka", outcome(() -> query.onKafka(kafka)));
        return answer;
    }

    /**
     * Kafka's store as a broker's ConsumerTask fills it when the records already sit in the topic as its partitions
     * are assigned (bootstrap): the assigned partitions loaded first; each becomes ready once the last record of its
     * metadata partition was read (a record whose handling threw is not read), at once if that partition is empty.
     */
    private static KafkaStoreDriver bootstrapStore(ScenarioRun run) {
        KafkaStoreDriver kafka = new KafkaStoreDriver();
        RemoteLogMetadataTopicPartitioner partitioner = new RemoteLogMetadataTopicPartitioner(run.metadataPartitions);
        Map<Integer, Integer> last = new HashMap<>();
        for (int i = 0; i < run.written.size(); i++) {
            last.put(partitioner.metadataPartition(run.written.get(i).topicIdPartition()), i);
        }
        for (TopicIdPartition tp : run.assigned) {
            kafka.load(tp);
            if (!last.containsKey(partitioner.metadataPartition(tp))) {
                kafka.markInitialized(tp);
            }
        }
        for (int i = 0; i < run.written.size(); i++) {
            RemoteLogMetadata record = run.written.get(i);
            boolean read = true;
            if (run.assigned.contains(record.topicIdPartition())) {
                try {
                    kafka.handle(record);
                } catch (RuntimeException e) {
                    read = false;
                }
            }
            int mp = partitioner.metadataPartition(record.topicIdPartition());
            if (read && last.get(mp) == i) {
                for (TopicIdPartition tp : run.assigned) {
                    if (partitioner.metadataPartition(tp) == mp) {
                        try {
                            kafka.markInitialized(tp);
                        } catch (RuntimeException e) {
                            // Kafka's mark-ready throws for a partition a DELETE_PARTITION_FINISHED removed
                        }
                    }
                }
            }
        }
        return kafka;
    }

    /**
     * The state after every event, on another plugin (one whose server consumed the topic from the start: bootstrap),
     * or the same: every query of the scenario again, and every call of the interface on each partition at the
     * offsets and epochs its segments name.
     */
    private Map<String, Object> contractFinal(Map<String, Object> cmd) throws Exception {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        ScenarioRun run = scenarios.get(str(cmd, "name"));
        Map<String, Object> answer = new LinkedHashMap<>();
        long start = System.nanoTime();
        boolean bootstrap = Boolean.TRUE.equals(cmd.get("bootstrap"));
        KafkaStoreDriver kafka = bootstrap ? bootstrapStore(run) : run.kafka;
        if (bootstrap) {
            rlmm.onPartitionLeadershipChanges(new HashSet<>(run.assigned), Collections.emptySet());
        }
        Set<TopicIdPartition> waiting = new LinkedHashSet<>();
        for (TopicIdPartition tp : run.assigned) {
            if (kafka.isReady(tp)) {
                waiting.add(tp);
            }
        }
        while (!waiting.isEmpty() && ms(start) < num(cmd, "ready_timeout_ms", 30_000)) {
            waiting.removeIf(rlmm::isReady);
            Thread.sleep(20);
        }
        answer.put("ready_ms", ms(start));
        answer.put("not_ready", tpList(waiting));
        List<Object> answers = new ArrayList<>();
        List<Query> calls = new ArrayList<>();
        boolean negative = Boolean.TRUE.equals(cmd.get("negative"));
        if (!negative) {
            for (Map<String, Object> q : run.queries) {
                @SuppressWarnings("unchecked")
                Map<String, Object> args = (Map<String, Object>) q.get("args");
                calls.add(new Query(str(q, "op"), tp(args), intOrNull(args.get("leader_epoch")),
                        args.get("offset") == null ? null : ((Number) args.get("offset")).longValue()));
            }
        }
        Set<TopicIdPartition> partitions = new LinkedHashSet<>(run.assigned);
        partitions.addAll(run.queried);
        for (TopicIdPartition tp : partitions) {
            TreeMap<Integer, TreeSet<Long>> epochs = new TreeMap<>(run.offsets.getOrDefault(tp, Map.of()));
            epochs.put(epochs.isEmpty() ? 0 : epochs.lastKey() + 1, new TreeSet<>(List.of(0L))); // an epoch of none
            if (negative) { // Kafka answers a negative epoch or offset as any other: empty, 0, or not found
                int someEpoch = epochs.firstKey();
                epochs.clear();
                epochs.put(-1, new TreeSet<>(List.of(0L, -1L)));
                epochs.put(someEpoch, new TreeSet<>(List.of(-1L)));
            } else {
                calls.add(new Query("isReady", tp, null, null));
                calls.add(new Query("listRemoteLogSegments", tp, null, null));
            }
            for (Map.Entry<Integer, TreeSet<Long>> epoch : epochs.entrySet()) {
                if (!negative || epoch.getKey() < 0) {
                    calls.add(new Query("listRemoteLogSegments", tp, epoch.getKey(), null));
                    calls.add(new Query("remoteLogSize", tp, epoch.getKey(), null));
                    calls.add(new Query("highestOffsetForEpoch", tp, epoch.getKey(), null));
                }
                for (long offset : epoch.getValue()) {
                    calls.add(new Query("remoteLogSegmentMetadata", tp, epoch.getKey(), offset));
                    calls.add(new Query("nextSegmentWithTxnIndex", tp, epoch.getKey(), offset));
                }
            }
        }
        for (int j = 0; j < calls.size(); j++) {
            answers.add(compare(kafka, rlmm, calls.get(j), !negative && j < run.queries.size() ? j : -1));
        }
        answer.put("queries", answers);
        answer.put("ok", true);
        answer.put("ms", ms(start));
        return answer;
    }

    /** onStopPartitions of the scenario's partitions, then reads: Kafka forgets them (RemoteResourceNotFound). */
    private Map<String, Object> contractStop(Map<String, Object> cmd) throws Exception {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        ScenarioRun run = scenarios.get(str(cmd, "name"));
        long start = System.nanoTime();
        rlmm.onStopPartitions(new HashSet<>(run.assigned));
        for (TopicIdPartition tp : run.assigned) {
            run.kafka.clear(tp);
        }
        List<Object> answers = new ArrayList<>();
        for (TopicIdPartition tp : run.assigned) {
            Query list = new Query("listRemoteLogSegments", tp, null, null);
            Map<String, Object> got;
            long waited = System.nanoTime();
            while (true) { // the server ends registrations in the background, as Kafka's consumer thread does
                got = outcome(() -> list.onPlugin(rlmm));
                if (got.containsKey("error") || ms(waited) > num(cmd, "timeout_ms", 10_000)) {
                    break;
                }
                Thread.sleep(20);
            }
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("tp", tpJson(tp));
            one.put("plugin", got);
            one.put("kafka", outcome(() -> list.onKafka(run.kafka)));
            one.put("waited_ms", ms(waited));
            for (Query q : List.of(new Query("remoteLogSegmentMetadata", tp, 0, 0L),
                    new Query("highestOffsetForEpoch", tp, 0, null), new Query("remoteLogSize", tp, 0, null),
                    new Query("nextSegmentWithTxnIndex", tp, 0, 0L), new Query("listRemoteLogSegments", tp, 0, null),
                    new Query("isReady", tp, null, null))) {
                one.put(q.op + (q.epoch == null ? "" : "@epoch"), Map.of("plugin", outcome(() -> q.onPlugin(rlmm)),
                        "kafka", outcome(() -> q.onKafka(run.kafka))));
            }
            answers.add(one);
        }
        Map<String, Object> answer = ok("partitions", answers);
        answer.put("ms", ms(start));
        return answer;
    }

    /**
     * Registers a partition and looks it up until it answers: while the server loads its metadata partition the
     * plugin must throw ReplicaNotAvailableException at once (as Kafka's store does for a partition not ready).
     */
    private Map<String, Object> pollUntilReady(Map<String, Object> cmd) throws Exception {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        TopicIdPartition tp = tp(cmd.get("tp"));
        KafkaStoreDriver kafka = new KafkaStoreDriver();
        kafka.load(tp);
        Query lookup = new Query("remoteLogSegmentMetadata", tp, 0, 0L);
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("kafka_not_ready", outcome(() -> lookup.onKafka(kafka)));
        answer.put("kafka_not_ready_is_ready", kafka.isReady(tp));
        long start = System.nanoTime();
        rlmm.onPartitionLeadershipChanges(Set.of(tp), Set.of());
        List<Object> sequence = new ArrayList<>();
        String last = null;
        List<Object> run = null;
        while (ms(start) < num(cmd, "timeout_ms", 30_000)) {
            boolean ready = rlmm.isReady(tp);  // asked first: once ready, a lookup must answer (no race)
            long t = System.nanoTime();
            Map<String, Object> got = outcome(() -> lookup.onPlugin(rlmm));
            double took = ms(t);
            String kind = (got.containsKey("error") ? (String) got.get("error") : "answer") + (ready ? "+ready" : "");
            if (!kind.equals(last)) {
                run = new ArrayList<>(List.of(kind, 0, 0.0, got));
                sequence.add(run);
                last = kind;
            }
            run.set(1, (Integer) run.get(1) + 1);
            run.set(2, Math.max((Double) run.get(2), took));
            if (!got.containsKey("error") && ready) {
                break;
            }
        }
        answer.put("sequence", sequence);
        answer.put("ok", true);
        answer.put("ms", ms(start));
        return answer;
    }

    // ---- read-your-writes, loops, failover ----------------------------------------------------------------

    private Map<String, Object> readYourWrites(Map<String, Object> cmd) throws Exception {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        List<TopicIdPartition> partitions = new ArrayList<>(tps(cmd.get("partitions")));
        int threads = (int) num(cmd, "threads", 8);
        int iterations = (int) num(cmd, "iterations", 50);
        int brokerId = brokerIds.getOrDefault(str(cmd, "id"), 1);
        AtomicInteger checks = new AtomicInteger();
        AtomicInteger doneAtReturn = new AtomicInteger();
        AtomicInteger futures = new AtomicInteger();
        List<Object> violations = Collections.synchronizedList(new ArrayList<>());
        List<Object> failures = Collections.synchronizedList(new ArrayList<>());
        Set<String> completionThreads = ConcurrentHashMap.newKeySet();
        List<Thread> workers = new ArrayList<>();
        long start = System.nanoTime();
        for (int w = 0; w < threads; w++) {
            List<TopicIdPartition> mine = new ArrayList<>();
            for (int k = w; k < partitions.size(); k += threads) {
                mine.add(partitions.get(k));
            }
            Thread worker = new Thread(() -> {
                for (int i = 0; i < iterations; i++) {
                    TopicIdPartition tp = mine.get(i % mine.size());
                    long first = nextOffset(tp).getAndAdd(100);
                    long last = first + 99;
                    RemoteLogSegmentId id = RemoteLogSegmentId.generateNew(tp);
                    try {
                        CompletableFuture<Void> added = rlmm.addRemoteLogSegmentMetadata(new RemoteLogSegmentMetadata(
                                id, first, last, TS + last, brokerId, TS, 1000, Optional.empty(),
                                RemoteLogSegmentState.COPY_SEGMENT_STARTED, Map.of(0, first), true));
                        watch(added, futures, doneAtReturn, completionThreads);
                        added.get(60, TimeUnit.SECONDS);
                        List<RemoteLogSegmentMetadata> all = list(rlmm.listRemoteLogSegments(tp));
                        check(checks, violations, all.stream().anyMatch(s -> s.remoteLogSegmentId().equals(id)
                                && s.state() == RemoteLogSegmentState.COPY_SEGMENT_STARTED),
                                "listRemoteLogSegments after the add", tp, id, all.size());
                        CompletableFuture<Void> finished = rlmm.updateRemoteLogSegmentMetadata(
                                new RemoteLogSegmentMetadataUpdate(id, TS + 1, Optional.empty(),
                                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED, brokerId));
                        watch(finished, futures, doneAtReturn, completionThreads);
                        finished.get(60, TimeUnit.SECONDS);
                        Optional<RemoteLogSegmentMetadata> found = rlmm.remoteLogSegmentMetadata(tp, 0, first + 50);
                        check(checks, violations, found.isPresent() && found.get().remoteLogSegmentId().equals(id)
                                && found.get().state() == RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                "remoteLogSegmentMetadata after the finish", tp, id, found.map(Object::toString));
                        Optional<Long> highest = rlmm.highestOffsetForEpoch(tp, 0);
                        check(checks, violations, highest.isPresent() && highest.get() == last,
                                "highestOffsetForEpoch after the finish", tp, id, highest);
                        List<RemoteLogSegmentMetadata> epoch = list(rlmm.listRemoteLogSegments(tp, 0));
                        check(checks, violations, !epoch.isEmpty()
                                && epoch.get(epoch.size() - 1).remoteLogSegmentId().equals(id)
                                && epoch.get(epoch.size() - 1).state() == RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                "listRemoteLogSegments(epoch) after the finish", tp, id, epoch.size());
                    } catch (Throwable t) {
                        failures.add(error(t));
                    }
                }
            }, "ryw-" + w);
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join(300_000);
        }
        Map<String, Object> answer = ok("checks", checks.get());
        answer.put("violations", violations.size());
        answer.put("violation_examples", first(violations, 10));
        answer.put("failures", first(failures, 10));
        answer.put("failure_count", failures.size());
        answer.put("futures_done_at_return", doneAtReturn.get());
        answer.put("futures", futures.get());
        answer.put("completion_threads", new ArrayList<>(completionThreads).subList(0,
                Math.min(10, completionThreads.size())));
        answer.put("ms", ms(start));
        return answer;
    }

    /** Whether the future was complete when the call returned (a call that blocked until rlmm answered), and which
     * threads complete them. */
    private static void watch(CompletableFuture<Void> future, AtomicInteger futures, AtomicInteger doneAtReturn,
                              Set<String> completionThreads) {
        futures.incrementAndGet();
        if (future.isDone()) {
            doneAtReturn.incrementAndGet();
            return;
        }
        future.whenComplete((v, e) -> completionThreads.add(Thread.currentThread().getName()));
    }

    private static void check(AtomicInteger checks, List<Object> violations, boolean good, String what,
                              TopicIdPartition tp, RemoteLogSegmentId id, Object got) {
        checks.incrementAndGet();
        if (!good) {
            violations.add(what + ": " + tp + " segment " + id.id() + ", got " + got);
        }
    }

    /**
     * Writes (a segment added then finished, again and again) and reads on the given partitions, as a broker does,
     * recording every call, until the file {@code until_file} holds an epoch ms T and a write and a read that started
     * after T succeeded (or {@code max_ms} passed); then checks that each acknowledged write is visible.
     */
    private Map<String, Object> loop(Map<String, Object> cmd) throws Exception {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        List<TopicIdPartition> partitions = new ArrayList<>(tps(cmd.get("partitions")));
        Path untilFile = Paths.get(str(cmd, "until_file"));
        int readers = (int) num(cmd, "readers", 2);
        int brokerId = brokerIds.getOrDefault(str(cmd, "id"), 1);
        long end = System.nanoTime() + num(cmd, "max_ms", 300_000) * 1_000_000L;
        AtomicLong after = new AtomicLong(Long.MAX_VALUE); // T, once the file holds it
        AtomicLong lastWriteOk = new AtomicLong(Long.MIN_VALUE);
        AtomicLong lastReadOk = new AtomicLong(Long.MIN_VALUE);
        BooleanSupplier running = () -> {
            if (after.get() == Long.MAX_VALUE) {
                after.set(epochMsIn(untilFile));
            }
            return System.nanoTime() < end && !(lastWriteOk.get() > after.get() && lastReadOk.get() > after.get());
        };
        List<Map<String, Object>> acked = Collections.synchronizedList(new ArrayList<>());
        List<Object> writes = Collections.synchronizedList(new ArrayList<>());
        List<Object> writeFailures = Collections.synchronizedList(new ArrayList<>());
        List<Object> reads = Collections.synchronizedList(new ArrayList<>());
        List<Object> readFailures = Collections.synchronizedList(new ArrayList<>());
        List<Object> readViolations = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        threads.add(new Thread(() -> {
            int i = 0;
            while (running.getAsBoolean()) {
                TopicIdPartition tp = partitions.get(i++ % partitions.size());
                long first = nextOffset(tp).getAndAdd(100);
                RemoteLogSegmentId id = RemoteLogSegmentId.generateNew(tp);
                long t0 = System.currentTimeMillis();
                long n0 = System.nanoTime();
                try {
                    rlmm.addRemoteLogSegmentMetadata(new RemoteLogSegmentMetadata(id, first, first + 99, TS, brokerId,
                            TS, 1000, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_STARTED, Map.of(0, first),
                            true)).get(300, TimeUnit.SECONDS);
                    rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(id, TS + 1,
                            Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, brokerId))
                            .get(300, TimeUnit.SECONDS);
                    writes.add(List.of(t0, ms(n0), true));
                    lastWriteOk.accumulateAndGet(t0, Math::max);
                    Map<String, Object> segment = new LinkedHashMap<>();
                    segment.put("tp", tp);
                    segment.put("segment_id", id.id().toString());
                    segment.put("start", first);
                    acked.add(segment);
                } catch (Throwable t) {
                    writes.add(List.of(t0, ms(n0), false));
                    Map<String, Object> failure = error(t);
                    failure.put("start_ms", t0);
                    failure.put("took_ms", ms(n0));
                    writeFailures.add(failure);
                }
            }
        }, "loop-writer"));
        for (int r = 0; r < readers; r++) {
            threads.add(new Thread(() -> {
                ThreadLocalRandom random = ThreadLocalRandom.current();
                while (running.getAsBoolean()) {
                    Map<String, Object> target = null;
                    synchronized (acked) {
                        if (!acked.isEmpty()) {
                            target = acked.get(random.nextInt(acked.size()));
                        }
                    }
                    TopicIdPartition tp = target == null ? partitions.get(random.nextInt(partitions.size()))
                            : (TopicIdPartition) target.get("tp");
                    long t0 = System.currentTimeMillis();
                    long n0 = System.nanoTime();
                    String op = target != null ? "remoteLogSegmentMetadata" : "";
                    try {
                        if (target != null) {
                            long first = (Long) target.get("start");
                            Optional<RemoteLogSegmentMetadata> found = rlmm.remoteLogSegmentMetadata(tp, 0, first);
                            if (found.isEmpty() || !found.get().remoteLogSegmentId().id().toString()
                                    .equals(target.get("segment_id"))) {
                                readViolations.add("acknowledged segment " + target.get("segment_id") + " of " + tp
                                        + " not found at " + first + ": " + found);
                            }
                        }
                        switch (random.nextInt(3)) {
                            case 0: op = "listRemoteLogSegments"; list(rlmm.listRemoteLogSegments(tp)); break;
                            case 1: op = "highestOffsetForEpoch"; rlmm.highestOffsetForEpoch(tp, 0); break;
                            default: op = "remoteLogSize"; rlmm.remoteLogSize(tp, 0);
                        }
                        reads.add(List.of(t0, ms(n0), true));
                        lastReadOk.accumulateAndGet(t0, Math::max);
                    } catch (Throwable t) {
                        reads.add(List.of(t0, ms(n0), false));
                        Map<String, Object> failure = error(t);
                        failure.put("op", op);
                        failure.put("start_ms", t0);
                        failure.put("took_ms", ms(n0));
                        readFailures.add(failure);
                    }
                    try {
                        Thread.sleep(5);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "loop-reader-" + r));
        }
        for (Thread t : threads) {
            t.start();
        }
        for (Thread t : threads) {
            t.join(600_000);
        }
        Map<String, Object> answer = ok("reads", reads);
        answer.put("read_failures", first(readFailures, 20));
        answer.put("read_failure_count", readFailures.size());
        Map<String, Integer> failureClasses = new TreeMap<>();
        synchronized (readFailures) {
            for (Object failure : readFailures) {
                failureClasses.merge(String.valueOf(((Map<?, ?>) failure).get("class")), 1, Integer::sum);
            }
        }
        answer.put("read_failure_classes", failureClasses);
        answer.put("read_violations", first(readViolations, 20));
        answer.put("read_violation_count", readViolations.size());
        answer.put("writes", writes);
        answer.put("write_failures", first(writeFailures, 20));
        answer.put("acked", acked.size());
        List<Object> missing = new ArrayList<>();
        for (Map<String, Object> segment : acked) {
            TopicIdPartition tp = (TopicIdPartition) segment.get("tp");
            Map<String, Object> got = outcome(() -> rlmm.remoteLogSegmentMetadata(tp, 0, (Long) segment.get("start"))
                    .map(s -> s.remoteLogSegmentId().id().toString()).orElse(null));
            if (!segment.get("segment_id").equals(got.get("value"))) {
                missing.add(Map.of("segment_id", segment.get("segment_id"), "got", got));
            }
        }
        answer.put("missing", first(missing, 20));
        answer.put("missing_count", missing.size());
        return answer;
    }

    private Map<String, Object> writeSegments(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        TopicIdPartition tp = tp(cmd.get("tp"));
        int count = (int) num(cmd, "count", 10);
        int brokerId = brokerIds.getOrDefault(str(cmd, "id"), 1);
        List<Object> acked = new ArrayList<>();
        List<Object> failures = new ArrayList<>();
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            long first = nextOffset(tp).getAndAdd(100);
            RemoteLogSegmentId id = RemoteLogSegmentId.generateNew(tp);
            try {
                rlmm.addRemoteLogSegmentMetadata(new RemoteLogSegmentMetadata(id, first, first + 99, TS, brokerId, TS,
                        1000, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_STARTED, Map.of(0, first), true))
                        .get(300, TimeUnit.SECONDS);
                rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(id, TS + 1, Optional.empty(),
                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED, brokerId)).get(300, TimeUnit.SECONDS);
                acked.add(Map.of("segment_id", id.id().toString(), "start", first));
            } catch (Throwable t) {
                failures.add(error(t));
            }
        }
        Map<String, Object> answer = ok("acked", acked);
        answer.put("failures", failures);
        answer.put("ms", ms(start));
        return answer;
    }

    /** Each listed segment (acknowledged as finished) must be found by lookup, in the listings, and the highest
     * offset must cover it. */
    private Map<String, Object> checkVisible(Map<String, Object> cmd) {
        RemoteLogMetadataManager rlmm = plugin(cmd);
        TopicIdPartition tp = tp(cmd.get("tp"));
        List<Object> violations = new ArrayList<>();
        List<Object> errors = new ArrayList<>();
        double maxMs = 0;
        int checks = 0;
        long start = System.nanoTime();
        long highestStart = -1;
        Set<String> ids = new HashSet<>();
        for (Object o : (List<?>) cmd.get("segments")) {
            @SuppressWarnings("unchecked")
            Map<String, Object> segment = (Map<String, Object>) o;
            long first = ((Number) segment.get("start")).longValue();
            highestStart = Math.max(highestStart, first);
            ids.add((String) segment.get("segment_id"));
            long t = System.nanoTime();
            Map<String, Object> got = outcome(() -> rlmm.remoteLogSegmentMetadata(tp, 0, first)
                    .map(PluginHarness::canonical).orElse(null));
            maxMs = Math.max(maxMs, ms(t));
            checks++;
            if (got.containsKey("error")) {
                errors.add(got);
            } else {
                @SuppressWarnings("unchecked")
                Map<String, Object> found = (Map<String, Object>) got.get("value");
                if (found == null || !segment.get("segment_id").equals(found.get("segment_id"))
                        || !"COPY_SEGMENT_FINISHED".equals(found.get("state"))) {
                    violations.add(Map.of("segment", segment, "got", String.valueOf(found)));
                }
            }
        }
        long t = System.nanoTime();
        Map<String, Object> listed = outcome(() -> {
            List<String> found = new ArrayList<>();
            for (RemoteLogSegmentMetadata s : list(rlmm.listRemoteLogSegments(tp))) {
                found.add(s.remoteLogSegmentId().id().toString());
            }
            return found;
        });
        maxMs = Math.max(maxMs, ms(t));
        checks++;
        if (listed.containsKey("error")) {
            errors.add(listed);
        } else if (!new HashSet<>((List<?>) listed.get("value")).containsAll(ids)) {
            violations.add(Map.of("listRemoteLogSegments misses some", listed.get("value")));
        }
        final long expectHighest = highestStart + 99;
        Map<String, Object> highest = outcome(() -> rlmm.highestOffsetForEpoch(tp, 0).orElse(null));
        checks++;
        if (highest.containsKey("error")) {
            errors.add(highest);
        } else if (highestStart >= 0 && (highest.get("value") == null
                || ((Number) highest.get("value")).longValue() < expectHighest)) {
            violations.add(Map.of("highestOffsetForEpoch", String.valueOf(highest.get("value")),
                    "expected at least", expectHighest));
        }
        Map<String, Object> answer = ok("checks", checks);
        answer.put("violations", violations);
        answer.put("errors", errors);
        answer.put("max_ms", maxMs);
        answer.put("ms", ms(start));
        return answer;
    }

    // ---- threads ----------------------------------------------------------------------------------------

    /** Threads the JVM itself may start while the plugin runs (not the plugin's). */
    static boolean jvmInternal(Thread t) {
        String name = t.getName();
        return name.equals("Common-Cleaner") || name.equals("Attach Listener") || name.equals("Signal Dispatcher")
                || name.equals("Reference Handler") || name.equals("Finalizer") || name.equals("process reaper")
                || name.equals("Notification Thread") || name.equals("DestroyJavaVM")
                || name.startsWith("ForkJoinPool.commonPool-worker-");
    }

    /** Opens a plugin, uses every kind of call, closes it: which threads it started, which are left. */
    private Map<String, Object> threadCheck(Map<String, Object> cmd) throws Exception {
        @SuppressWarnings("unchecked")
        Map<String, Object> config = (Map<String, Object>) cmd.get("config");
        TopicIdPartition tp = tp(cmd.get("tp"));
        Set<Thread> before = liveThreads();
        RemoteLogMetadataManager rlmm = load(config);
        Map<String, Object> answer = new LinkedHashMap<>();
        Map<String, Object> calls = new LinkedHashMap<>();
        calls.put("register", outcome(() -> {
            rlmm.onPartitionLeadershipChanges(Set.of(tp), Set.of());
            return null;
        }));
        long start = System.nanoTime();
        while (!rlmm.isReady(tp) && ms(start) < num(cmd, "ready_timeout_ms", 20_000)) {
            Thread.sleep(20);
        }
        RemoteLogSegmentId id = RemoteLogSegmentId.generateNew(tp);
        calls.put("add", outcome(() -> rlmm.addRemoteLogSegmentMetadata(new RemoteLogSegmentMetadata(id, 0, 99, TS, 1,
                TS, 1000, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_STARTED, Map.of(0, 0L), true))
                .get(60, TimeUnit.SECONDS)));
        calls.put("update", outcome(() -> rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(id,
                TS + 1, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)).get(60, TimeUnit.SECONDS)));
        calls.put("lookup", outcome(() -> rlmm.remoteLogSegmentMetadata(tp, 0, 50).map(PluginHarness::canonical)
                .orElse(null)));
        calls.put("list", outcome(() -> list(rlmm.listRemoteLogSegments(tp)).size()));
        calls.put("list_epoch", outcome(() -> list(rlmm.listRemoteLogSegments(tp, 0)).size()));
        calls.put("size", outcome(() -> rlmm.remoteLogSize(tp, 0)));
        calls.put("txn", outcome(() -> rlmm.nextSegmentWithTxnIndex(tp, 0, 0).isPresent()));
        calls.put("highest", outcome(() -> rlmm.highestOffsetForEpoch(tp, 0).orElse(null)));
        calls.put("unfinished_listing", outcome(() -> rlmm.listRemoteLogSegments(tp).hasNext())); // left open
        calls.put("stop", outcome(() -> {
            rlmm.onStopPartitions(Set.of(tp));
            return null;
        }));
        Set<Thread> during = liveThreads();
        during.removeAll(before);
        answer.put("calls", calls);
        answer.put("started", threadNames(during));
        long closing = System.nanoTime();
        answer.put("close", outcome(() -> {
            rlmm.close();
            return null;
        }));
        answer.put("close_ms", ms(closing));
        answer.put("close_again", outcome(() -> {
            rlmm.close();
            return null;
        }));
        Set<Thread> left;
        long waited = System.nanoTime();
        while (true) { // close() must wait for its threads; a little slack for threads already ending
            left = liveThreads();
            left.removeAll(before);
            left.removeIf(PluginHarness::jvmInternal);
            if (left.isEmpty() || ms(waited) > num(cmd, "wait_ms", 2_000)) {
                break;
            }
            Thread.sleep(20);
        }
        Set<Thread> internal = liveThreads();
        internal.removeAll(before);
        internal.removeIf(t -> !jvmInternal(t));
        answer.put("left", threadNames(left));
        answer.put("left_stacks", stacks(left));
        answer.put("left_jvm_internal", threadNames(internal));
        answer.put("ok", true);
        return answer;
    }

    private static Set<Thread> liveThreads() {
        Set<Thread> threads = new HashSet<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive()) {
                threads.add(t);
            }
        }
        return threads;
    }

    private static List<String> threadNames(Set<Thread> threads) {
        List<String> names = new ArrayList<>();
        for (Thread t : threads) {
            names.add(t.getName() + (t.isDaemon() ? " (daemon)" : ""));
        }
        Collections.sort(names);
        return names;
    }

    private static Map<String, Object> stacks(Set<Thread> threads) {
        Map<String, Object> stacks = new TreeMap<>();
        for (Thread t : threads) {
            List<String> frames = new ArrayList<>();
            for (StackTraceElement e : t.getStackTrace()) {
                frames.add(e.toString());
                if (frames.size() == 8) {
                    break;
                }
            }
            stacks.put(t.getName(), frames);
        }
        return stacks;
    }

    // ---- calls and their answers ----------------------------------------------------------------------

    /** One call of the interface, on the plugin or on Kafka's store, with Kafka's argument order. */
    static final class Query {
        final String op;
        final TopicIdPartition tp;
        final Integer epoch;
        final Long offset;

        Query(String op, TopicIdPartition tp, Integer epoch, Long offset) {
            this.op = op;
            this.tp = tp;
            this.epoch = epoch;
            this.offset = offset;
        }

        Map<String, Object> json() {
            Map<String, Object> json = new LinkedHashMap<>();
            json.put("op", op);
            json.put("tp", tpJson(tp));
            json.put("leader_epoch", epoch);
            json.put("offset", offset);
            return json;
        }

        Object onPlugin(RemoteLogMetadataManager rlmm) throws Exception {
            switch (op) {
                case "remoteLogSegmentMetadata":
                    return rlmm.remoteLogSegmentMetadata(tp, epoch, offset).map(PluginHarness::canonical).orElse(null);
                case "highestOffsetForEpoch":
                    return rlmm.highestOffsetForEpoch(tp, epoch).orElse(null);
                case "listRemoteLogSegments":
                    return canonical(epoch == null ? rlmm.listRemoteLogSegments(tp)
                            : rlmm.listRemoteLogSegments(tp, epoch));
                case "remoteLogSize":
                    return rlmm.remoteLogSize(tp, epoch);
                case "nextSegmentWithTxnIndex":
                    return rlmm.nextSegmentWithTxnIndex(tp, epoch, offset).map(PluginHarness::canonical).orElse(null);
                case "isReady":
                    return rlmm.isReady(tp);
                default:
                    throw new IllegalArgumentException("unknown op " + op);
            }
        }

        Object onKafka(KafkaStoreDriver kafka) throws Exception {
            switch (op) {
                case "remoteLogSegmentMetadata":
                    return kafka.remoteLogSegmentMetadata(tp, epoch, offset).map(PluginHarness::canonical).orElse(null);
                case "highestOffsetForEpoch":
                    return kafka.highestOffsetForEpoch(tp, epoch).orElse(null);
                case "listRemoteLogSegments":
                    return canonical(epoch == null ? kafka.listRemoteLogSegments(tp)
                            : kafka.listRemoteLogSegments(tp, epoch));
                case "remoteLogSize":
                    return kafka.remoteLogSize(tp, epoch);
                case "nextSegmentWithTxnIndex":
                    return kafka.nextSegmentWithTxnIndex(tp, epoch, offset).map(PluginHarness::canonical).orElse(null);
                case "isReady":
                    return kafka.isReady(tp);
                default:
                    throw new IllegalArgumentException("unknown op " + op);
            }
        }
    }

    /** A write as a broker makes it: the call (which may throw synchronously), then its future. */
    private static Map<String, Object> writeRecord(RemoteLogMetadataManager rlmm, RemoteLogMetadata record,
                                                   long waitMs) {
        Map<String, Object> outcome = new LinkedHashMap<>();
        long start = System.nanoTime();
        CompletableFuture<Void> future;
        try {
            if (record instanceof RemoteLogSegmentMetadata) {
                future = rlmm.addRemoteLogSegmentMetadata((RemoteLogSegmentMetadata) record);
            } else if (record instanceof RemoteLogSegmentMetadataUpdate) {
                future = rlmm.updateRemoteLogSegmentMetadata((RemoteLogSegmentMetadataUpdate) record);
            } else {
                future = rlmm.putRemotePartitionDeleteMetadata((RemotePartitionDeleteMetadata) record);
            }
        } catch (Throwable t) {
            outcome.put("sync_error", error(t));
            outcome.put("ms", ms(start));
            return outcome;
        }
        outcome.put("returned_ms", ms(start));
        if (future == null) {
            outcome.put("write_error", Map.of("error", "NullFuture"));
            return outcome;
        }
        try {
            future.get(waitMs, TimeUnit.MILLISECONDS);
            outcome.put("write", "ok");
        } catch (TimeoutException e) {
            outcome.put("write_error", Map.of("error", "HarnessTimeout", "message",
                    "the future did not complete within " + waitMs + " ms"));
        } catch (Throwable t) {
            outcome.put("write_error", error(t));
        }
        outcome.put("ms", ms(start));
        return outcome;
    }

    interface Call {
        Object run() throws Exception;
    }

    /** {"value": answer} or the exception: {"error": SimpleName, "class", "message"}. */
    static Map<String, Object> outcome(Call call) {
        Map<String, Object> outcome = new LinkedHashMap<>();
        try {
            Object value = call.run();
            outcome.put("value", value instanceof CompletableFuture ? "future" : value);
        } catch (Throwable t) {
            outcome.putAll(error(t));
        }
        return outcome;
    }

    static Map<String, Object> error(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        Map<String, Object> error = new LinkedHashMap<>();
        error.put("error", t.getClass().getSimpleName());
        error.put("class", t.getClass().getName());
        error.put("message", t.getMessage());
        if (t.getCause() != null) {
            error.put("cause", t.getCause().getClass().getName() + ": " + t.getCause().getMessage());
        }
        error.put("thrown_by_plugin_loader", t.getClass().getClassLoader() instanceof ChildFirstClassLoader);
        return error;
    }

    static Map<String, Object> canonical(RemoteLogSegmentMetadata m) {
        Map<String, Object> json = new LinkedHashMap<>();
        TopicIdPartition tp = m.topicIdPartition();
        json.put("type", "RemoteLogSegmentMetadata");
        json.put("topic_id", tp.topicId().toString());
        json.put("topic", tp.topic());
        json.put("partition", tp.partition());
        json.put("segment_id", m.remoteLogSegmentId().id().toString());
        json.put("start_offset", m.startOffset());
        json.put("end_offset", m.endOffset());
        json.put("max_timestamp_ms", m.maxTimestampMs());
        json.put("broker_id", m.brokerId());
        json.put("event_timestamp_ms", m.eventTimestampMs());
        json.put("segment_size_in_bytes", m.segmentSizeInBytes());
        json.put("custom_metadata", m.customMetadata().map(c -> toHex(c.value())).orElse(null));
        json.put("state", m.state().name());
        json.put("state_id", (int) m.state().id());
        List<Object> epochs = new ArrayList<>();
        for (Map.Entry<Integer, Long> e : m.segmentLeaderEpochs().entrySet()) {
            epochs.add(List.of(e.getKey(), e.getValue()));
        }
        json.put("segment_leader_epochs", epochs);
        json.put("txn_index_empty", m.isTxnIdxEmpty());
        return json;
    }

    static List<Object> canonical(Iterator<RemoteLogSegmentMetadata> segments) {
        List<Object> list = new ArrayList<>();
        while (segments.hasNext()) {
            list.add(canonical(segments.next()));
        }
        return list;
    }

    static List<RemoteLogSegmentMetadata> list(Iterator<RemoteLogSegmentMetadata> segments) {
        List<RemoteLogSegmentMetadata> list = new ArrayList<>();
        segments.forEachRemaining(list::add);
        return list;
    }

    // ---- small things -----------------------------------------------------------------------------------

    private AtomicLong nextOffset(TopicIdPartition tp) {
        return nextOffsets.computeIfAbsent(tp.topicId() + ":" + tp.topic() + ":" + tp.partition(),
                k -> new AtomicLong());
    }

    static TopicIdPartition tp(Object json) {
        @SuppressWarnings("unchecked")
        Map<String, Object> map = (Map<String, Object>) json;
        return new TopicIdPartition(Uuid.fromString((String) map.get("topic_id")),
                ((Number) map.get("partition")).intValue(), (String) map.get("topic"));
    }

    static Set<TopicIdPartition> tps(Object json) {
        Set<TopicIdPartition> set = new LinkedHashSet<>();
        for (Object o : (List<?>) json) {
            set.add(tp(o));
        }
        return set;
    }

    static Map<String, Object> tpJson(TopicIdPartition tp) {
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("topic_id", tp.topicId().toString());
        json.put("topic", tp.topic());
        json.put("partition", tp.partition());
        return json;
    }

    static List<Object> tpList(Set<TopicIdPartition> tps) {
        List<Object> list = new ArrayList<>();
        for (TopicIdPartition tp : tps) {
            list.add(tpJson(tp));
        }
        return list;
    }

    static Integer intOrNull(Object value) {
        return value == null ? null : ((Number) value).intValue();
    }

    static String str(Map<String, Object> map, String key) {
        Object value = map.get(key);
        if (!(value instanceof String)) {
            throw new IllegalArgumentException("missing string " + key);
        }
        return (String) value;
    }

    /** The epoch ms a file holds; Long.MAX_VALUE while it does not exist. */
    static long epochMsIn(Path file) {
        try {
            return Long.parseLong(Files.readString(file).trim());
        } catch (NoSuchFileException e) {
            return Long.MAX_VALUE;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static long num(Map<String, Object> map, String key, long otherwise) {
        Object value = map.get(key);
        return value == null ? otherwise : ((Number) value).longValue();
    }

    static Map<String, Object> ok(String key, Object value) {
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("ok", true);
        answer.put(key, value);
        return answer;
    }

    static double ms(long startNanos) {
        return Math.round((System.nanoTime() - startNanos) / 10_000.0) / 100.0;
    }

    static List<Object> first(List<Object> list, int n) {
        synchronized (list) {
            return new ArrayList<>(list.subList(0, Math.min(n, list.size())));
        }
    }

    static List<Map<String, Object>> jsonLines(Path path) throws Exception {
        List<Map<String, Object>> lines = new ArrayList<>();
        for (String line : Files.readAllLines(path, StandardCharsets.UTF_8)) {
            if (!line.isBlank()) {
                lines.add(Json.parseObject(line));
            }
        }
        return lines;
    }

    static byte[] hex(String hex) {
        byte[] bytes = new byte[hex.length() / 2];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return bytes;
    }

    static String toHex(byte[] bytes) {
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) {
            out.append(String.format("%02x", b & 0xff));
        }
        return out.toString();
    }

    static String stackTrace(Throwable t) {
        StringWriter out = new StringWriter();
        t.printStackTrace(new PrintWriter(out));
        return out.toString();
    }
}
