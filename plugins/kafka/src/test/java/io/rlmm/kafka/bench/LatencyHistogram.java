package io.rlmm.kafka.bench;

/**
 * Latencies in nanoseconds, in log-linear buckets (256 per power of two: under 0.4% error above 256 ns, exact
 * below), so that millions of calls a second cost a counter each. One per thread; {@link #add} merges them.
 */
final class LatencyHistogram {
    private static final int SUB_BITS = 8;
    private static final int SUB = 1 << SUB_BITS;

    private final long[] counts = new long[(64 - SUB_BITS + 1) * SUB];
    private long count;
    private long max;

    void record(long nanos) {
        long v = Math.max(0, nanos);
        counts[index(v)]++;
        count++;
        max = Math.max(max, v);
    }

    void add(LatencyHistogram other) {
        for (int i = 0; i < counts.length; i++) {
            counts[i] += other.counts[i];
        }
        count += other.count;
        max = Math.max(max, other.max);
    }

    long count() {
        return count;
    }

    long maxNanos() {
        return max;
    }

    /** The value at quantile {@code q} (0..1), in nanoseconds (the middle of its bucket). */
    double percentileNanos(double q) {
        if (count == 0) {
            return 0;
        }
        long rank = Math.max(1, (long) Math.ceil(q * count));
        long seen = 0;
        for (int i = 0; i < counts.length; i++) {
            seen += counts[i];
            if (seen >= rank) {
                return Math.min(middle(i), max);
            }
        }
        return max;
    }

    private static int index(long v) {
        if (v < SUB) {
            return (int) v;
        }
        int exponent = 63 - Long.numberOfLeadingZeros(v); // >= SUB_BITS
        int mantissa = (int) (v >>> (exponent - SUB_BITS)); // in [SUB, 2 * SUB)
        return (exponent - SUB_BITS + 1) * SUB + (mantissa - SUB);
    }

    private static double middle(int index) {
        if (index < SUB) {
            return index;
        }
        int exponent = index / SUB - 1 + SUB_BITS;
        long mantissa = index % SUB + SUB;
        long width = 1L << (exponent - SUB_BITS);
        return (mantissa << (exponent - SUB_BITS)) + width / 2.0;
    }
}
