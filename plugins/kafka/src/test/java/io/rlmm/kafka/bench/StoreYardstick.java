package io.rlmm.kafka.bench;

import io.rlmm.kafka.harness.Json;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.metadata.storage.KafkaStoreDriver;

/**
 * Kafka's own serde and store ({@link PluginBench#reread}: what a broker's ConsumerTask does with the topic) on the
 * uploads stream of {@code scripts/bench_core.py}, in this JVM: the yardstick that {@code bench_core.py --kafka}
 * gives rlmm's apply rate, peak RSS and lookup p50 as ratios of, measured in the same run on the same machine.
 *
 * <pre>
 * java -cp ... io.rlmm.kafka.bench.StoreYardstick --partitions FILE --values FILE --metadata-partitions 50
 *     --segment-offsets 100 [--passes 4] [--lookups 20000]
 * </pre>
 *
 * The files are {@link PluginBench}'s. Prints one JSON object on stdout: the events/s of each pass (the first
 * cold, the others warm), the heap the store holds after a full collection, and the p50 of single
 * {@code remoteLogSegmentMetadata} lookups at random offsets (after as many untimed ones).
 */
public final class StoreYardstick {
    private StoreYardstick() {
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err); // stdout is the driver's
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        List<TopicIdPartition> partitions = PluginBench.readPartitions(args.get("partitions"),
                Integer.parseInt(args.get("metadata-partitions")));
        byte[][] values = PluginBench.readValues(args.get("values"));
        long segmentOffsets = Long.parseLong(args.get("segment-offsets"));
        int passes = Integer.parseInt(args.getOrDefault("passes", "4"));
        int lookups = Integer.parseInt(args.getOrDefault("lookups", "20000"));

        long emptyHeap = heapAfterCollection();
        List<Double> rates = new ArrayList<>();
        KafkaStoreDriver kafka = null;
        for (int pass = 0; pass < passes; pass++) {
            kafka = null;
            System.gc();
            long t0 = System.nanoTime();
            kafka = PluginBench.reread(partitions, values);
            rates.add(PluginBench.round(values.length / ((System.nanoTime() - t0) / 1e9), 0));
        }
        long storeHeap = heapAfterCollection() - emptyHeap;

        // the stream's segments: the i-th goes to partition i % P and covers [i / P * offsets, + offsets - 1]
        long segmentsPerPartition = values.length / 2 / partitions.size();
        SplittableRandom random = new SplittableRandom(1);
        long found = 0;
        List<Double> micros = new ArrayList<>();
        for (int round = 0; round < 2; round++) { // the first untimed, for the JIT
            micros.clear();
            for (int i = 0; i < lookups; i++) {
                TopicIdPartition tp = partitions.get(random.nextInt(partitions.size()));
                long offset = random.nextLong(segmentsPerPartition * segmentOffsets);
                long t0 = System.nanoTime();
                found += kafka.remoteLogSegmentMetadata(tp, 0, offset).isPresent() ? 1 : 0;
                micros.add((System.nanoTime() - t0) / 1e3);
            }
        }
        if (found != 2L * lookups) {
            throw new IllegalStateException(found + " of " + 2L * lookups + " lookups found their segment");
        }

        Map<String, Object> result = new LinkedHashMap<>();
        result.put("java", System.getProperty("java.version"));
        result.put("events", values.length);
        result.put("apply_events_per_s", rates);
        result.put("heap_mb", PluginBench.round(storeHeap / 1048576.0, 1));
        result.put("point_query_p50_us", PluginBench.round(PluginBench.median(micros), 3));
        out.println(Json.write(result));
        out.flush();
        System.exit(0);
    }

    private static long heapAfterCollection() throws InterruptedException {
        Runtime runtime = Runtime.getRuntime();
        long used = Long.MAX_VALUE;
        for (int i = 0; i < 4; i++) { // until a collection frees nothing more
            System.gc();
            Thread.sleep(50);
            long now = runtime.totalMemory() - runtime.freeMemory();
            if (now >= used) {
                break;
            }
            used = now;
        }
        return used;
    }
}
