package io.rlmm.kafka;

import io.netty.util.concurrent.DefaultThreadFactory;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;

/** Every thread the plugin starts (daemon, netty's thread type), so that close() can wait until each ended. */
final class PluginThreads {
    private final Set<Thread> started = ConcurrentHashMap.newKeySet();

    ThreadFactory named(String poolName) {
        return new DefaultThreadFactory(poolName, true) {
            @Override
            protected Thread newThread(Runnable task, String name) {
                Thread thread = super.newThread(task, name);
                started.removeIf(old -> old.getState() == Thread.State.TERMINATED);
                started.add(thread);
                return thread;
            }
        };
    }

    /** Waits until every thread ended (the pools are shut down), at most {@code timeoutMs} in all. */
    void join(long timeoutMs) throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        for (Thread thread : started) {
            long leftMs = TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime());
            if (leftMs <= 0) {
                return;
            }
            thread.join(leftMs);
        }
    }
}
