package io.rlmm.kafka;

import io.grpc.Deadline;
import io.grpc.StatusRuntimeException;
import org.apache.kafka.common.errors.ReplicaNotAvailableException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Runs a call against the targets, in their configured order but a target that failed within call.timeout.ms
 * last: an attempt that another server (or the same one later) may answer moves to the next target; once every
 * target failed, a pause (doubling, or longer when a server asked so with RetryInfo) and another round, until
 * the call's deadline. Every attempt has a deadline.
 */
final class FailoverCaller {
    private static final Logger log = LoggerFactory.getLogger(FailoverCaller.class);

    enum Kind {
        READ(RlmmConfig.CALL_TIMEOUT_MS),
        WRITE(RlmmConfig.WRITE_TIMEOUT_MS);

        final String timeoutKey;

        Kind(String timeoutKey) {
            this.timeoutKey = timeoutKey;
        }
    }

    /** One attempt at one target, with the attempt's deadline. */
    @FunctionalInterface
    interface Attempt<T> {
        T run(Target target, Deadline deadline);
    }

    private final RlmmConfig config;
    private final RlmmChannels channels;
    private final Registrations registrations;

    FailoverCaller(RlmmConfig config, RlmmChannels channels, Registrations registrations) {
        this.config = config;
        this.channels = channels;
        this.registrations = registrations;
    }

    <T> T call(String what, Kind kind, Attempt<T> attempt) throws RemoteStorageException {
        List<Target> targets = channels.targets;
        long timeoutMs = kind == Kind.WRITE ? config.writeTimeoutMs() : config.callTimeoutMs();
        Deadline callDeadline = Deadline.after(timeoutMs, TimeUnit.MILLISECONDS);
        // A read attempt gets its share of the call's time, so that a server that does not answer leaves time
        // to the others; a write attempt gets all of it: a write whose attempt timed out may have been written.
        long attemptMs = kind == Kind.WRITE ? timeoutMs : Math.max(1, timeoutMs / targets.size());
        long backoffMs = config.retryBackoffMs();
        CallFailure last = null;
        while (true) {
            long pauseMs = backoffMs;
            for (Target target : targets.stream().sorted(Comparator.comparing(Target::avoided)).toList()) {
                if (channels.isClosing()) {
                    throw new RemoteStorageException(what + ": the RemoteLogMetadataManager is closed");
                }
                if (callDeadline.isExpired()) {
                    break;
                }
                Deadline deadline = callDeadline.minimum(Deadline.after(attemptMs, TimeUnit.MILLISECONDS));
                try {
                    registrations.syncIfNeeded(target, deadline);
                    T answer = attempt.run(target, deadline);
                    target.answered();
                    return answer;
                } catch (StatusRuntimeException e) {
                    if (Thread.currentThread().isInterrupted()) {
                        throw new RemoteStorageException(what + ": interrupted", e);
                    }
                    CallFailure failure = CallFailure.of(target, e);
                    if (failure.replicaNotAvailable()) {
                        throw new ReplicaNotAvailableException(failure.toString());
                    }
                    if (!failure.tryAnotherTarget()) {
                        throw failure.toKafka();
                    }
                    log.debug("{}: {}", what, failure);
                    target.failed(config.callTimeoutMs());
                    last = failure;
                    pauseMs = Math.max(pauseMs, failure.retryDelayMs());
                }
            }
            if (callDeadline.timeRemaining(TimeUnit.MILLISECONDS) <= pauseMs) {
                throw new RemoteStorageException(String.format("%s not answered within %s=%d by any of %s: %s",
                        what, kind.timeoutKey, timeoutMs, targets, last == null ? "no attempt" : last));
            }
            try {
                if (channels.awaitClosing(pauseMs)) {
                    throw new RemoteStorageException(what + ": the RemoteLogMetadataManager is closed");
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new RemoteStorageException(what + ": interrupted", e);
            }
            backoffMs = Math.min(backoffMs * 2, config.retryBackoffMaxMs());
        }
    }
}
