package io.rlmm.kafka;

import io.grpc.Deadline;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.rlmm.v1.OnPartitionLeadershipChangesRequest;
import io.rlmm.v1.OnStopPartitionsRequest;
import io.rlmm.v1.RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub;
import org.apache.kafka.common.TopicIdPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The user partitions this broker follows, registered at every target. A target that missed a registration
 * (and every target at first: it may hold registrations of this broker's previous run) is out of sync; before
 * the next call to it, it gets the whole set ({@code full=true}), which ends its other registrations. Not
 * before the broker registered its partitions, though: an empty set would end registrations the broker is
 * about to make again, and the server would load those partitions again from the metadata topic.
 */
final class Registrations {
    private static final Logger log = LoggerFactory.getLogger(Registrations.class);

    private final List<Target> targets;
    private final Executor executor;
    private final Metadata headers;
    private final int brokerId;
    private final long timeoutMs;
    private final Set<TopicIdPartition> followed = ConcurrentHashMap.newKeySet();
    private final Object order = new Object();  // one change at a time, so that targets see them in order

    Registrations(List<Target> targets, Executor executor, Metadata headers, int brokerId, long timeoutMs) {
        this.targets = targets;
        this.executor = executor;
        this.headers = headers;
        this.brokerId = brokerId;
        this.timeoutMs = timeoutMs;
    }

    void follow(Set<TopicIdPartition> leaders, Set<TopicIdPartition> followers) {
        OnPartitionLeadershipChangesRequest request = OnPartitionLeadershipChangesRequest.newBuilder()
                .addAllLeaderPartitions(Convert.toProto(leaders))
                .addAllFollowerPartitions(Convert.toProto(followers))
                .setBrokerId(brokerId)
                .build();
        synchronized (order) {
            followed.addAll(leaders);
            followed.addAll(followers);
            sendToAll("onPartitionLeadershipChanges", stub -> stub.onPartitionLeadershipChanges(request));
        }
    }

    void stop(Set<TopicIdPartition> partitions) {
        OnStopPartitionsRequest request = OnStopPartitionsRequest.newBuilder()
                .addAllPartitions(Convert.toProto(partitions))
                .setBrokerId(brokerId)
                .build();
        synchronized (order) {
            followed.removeAll(partitions);
            sendToAll("onStopPartitions", stub -> stub.onStopPartitions(request));
        }
    }

    /** Before a call to {@code target}: sends it the whole set if it missed a registration. */
    void syncIfNeeded(Target target, Deadline deadline) {
        if (target.outOfSync && !followed.isEmpty()) {
            synchronized (target) {
                if (target.outOfSync) {
                    try {
                        sendFullSet(target, deadline);
                    } catch (StatusRuntimeException e) {
                        throw e.getStatus()
                                .augmentDescription("while registering this broker's partitions before the call")
                                .asRuntimeException(e.getTrailers());
                    }
                }
            }
        }
    }

    /** Sends to every target in parallel and waits for them (each call ends by the deadline). */
    private void sendToAll(String what, Consumer<RemoteLogMetadataServiceBlockingStub> send) {
        Deadline deadline = Deadline.after(timeoutMs, TimeUnit.MILLISECONDS);
        CompletableFuture.allOf(targets.stream()
                .map(target -> CompletableFuture.runAsync(() -> sendTo(target, deadline, what, send), executor))
                .toArray(CompletableFuture[]::new)).join();
    }

    private void sendTo(Target target, Deadline deadline, String what,
                        Consumer<RemoteLogMetadataServiceBlockingStub> send) {
        synchronized (target) {
            try {
                if (target.outOfSync) {
                    sendFullSet(target, deadline);
                } else {
                    send.accept(target.stub(deadline, headers));
                }
            } catch (StatusRuntimeException e) {
                target.outOfSync = true;
                target.failed(timeoutMs);
                log.warn("{} not sent to rlmm {}; it gets every followed partition before the next call to it: {}",
                        what, target, CallFailure.of(target, e));
            }
        }
    }

    private void sendFullSet(Target target, Deadline deadline) {
        OnPartitionLeadershipChangesRequest request = OnPartitionLeadershipChangesRequest.newBuilder()
                .addAllLeaderPartitions(Convert.toProto(Set.copyOf(followed)))
                .setBrokerId(brokerId)
                .setFull(true)
                .build();
        target.stub(deadline, headers).onPartitionLeadershipChanges(request);
        target.outOfSync = false;
        log.info("rlmm {} holds this broker's {} followed partitions", target, request.getLeaderPartitionsCount());
    }
}
