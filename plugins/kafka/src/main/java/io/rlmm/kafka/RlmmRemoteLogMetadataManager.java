package io.rlmm.kafka;

import io.grpc.Metadata;
import io.rlmm.v1.AddRemoteLogSegmentMetadataRequest;
import io.rlmm.v1.HighestOffsetForEpochRequest;
import io.rlmm.v1.HighestOffsetForEpochResponse;
import io.rlmm.v1.IsReadyRequest;
import io.rlmm.v1.ListRemoteLogSegmentsRequest;
import io.rlmm.v1.NextSegmentWithTxnIndexRequest;
import io.rlmm.v1.NextSegmentWithTxnIndexResponse;
import io.rlmm.v1.PutRemotePartitionDeleteMetadataRequest;
import io.rlmm.v1.RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub;
import io.rlmm.v1.RemoteLogSegmentMetadataRequest;
import io.rlmm.v1.RemoteLogSegmentMetadataResponse;
import io.rlmm.v1.RemoteLogSizeRequest;
import io.rlmm.v1.UpdateRemoteLogSegmentMetadataRequest;
import io.rlmm.v1.WritePosition;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Collections;
import java.util.Iterator;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/**
 * Kafka's RemoteLogMetadataManager answered by rlmm servers over gRPC (see docs/kafka-broker.md). Its only
 * state: the channels, the partitions this broker follows and the position of its last write per partition.
 */
public final class RlmmRemoteLogMetadataManager implements RemoteLogMetadataManager {
    private static final Logger log = LoggerFactory.getLogger(RlmmRemoteLogMetadataManager.class);
    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

    private final WritePositions positions = new WritePositions();
    private RlmmChannels channels;
    private Registrations registrations;
    private FailoverCaller caller;
    private Metadata writeHeaders;
    private volatile boolean configured;
    private volatile boolean closed;

    @Override
    public synchronized void configure(Map<String, ?> configs) {
        if (configured) {
            throw new IllegalStateException("RlmmRemoteLogMetadataManager is configured already");
        }
        RlmmConfig config = RlmmConfig.parse(configs);
        writeHeaders = new Metadata();
        config.writeToken().ifPresent(token -> writeHeaders.put(AUTHORIZATION, "Bearer " + token));
        channels = new RlmmChannels(config);
        registrations = new Registrations(channels.targets, channels.executor, writeHeaders, config.brokerId(),
                config.callTimeoutMs());
        caller = new FailoverCaller(config, channels, registrations);
        configured = true;
        log.info("RlmmRemoteLogMetadataManager configured: {}", config);
    }

    @Override
    public CompletableFuture<Void> addRemoteLogSegmentMetadata(RemoteLogSegmentMetadata segment) {
        Objects.requireNonNull(segment, "remoteLogSegmentMetadata");
        if (segment.state() != RemoteLogSegmentState.COPY_SEGMENT_STARTED) {
            throw new IllegalArgumentException("an added segment must be " + RemoteLogSegmentState.COPY_SEGMENT_STARTED
                    + ", not " + segment.state());
        }
        AddRemoteLogSegmentMetadataRequest request = AddRemoteLogSegmentMetadataRequest.newBuilder()
                .setRemoteLogSegmentMetadata(Convert.toProto(segment))
                .build();
        return write("addRemoteLogSegmentMetadata", segment.topicIdPartition(), stub -> {
            var response = stub.addRemoteLogSegmentMetadata(request);
            return response.hasPosition() ? Optional.of(response.getPosition()) : Optional.empty();
        });
    }

    @Override
    public CompletableFuture<Void> updateRemoteLogSegmentMetadata(RemoteLogSegmentMetadataUpdate update) {
        Objects.requireNonNull(update, "remoteLogSegmentMetadataUpdate");
        if (update.state() == RemoteLogSegmentState.COPY_SEGMENT_STARTED) {
            throw new IllegalArgumentException("an update cannot move a segment to " + update.state());
        }
        UpdateRemoteLogSegmentMetadataRequest request = UpdateRemoteLogSegmentMetadataRequest.newBuilder()
                .setRemoteLogSegmentMetadataUpdate(Convert.toProto(update))
                .build();
        return write("updateRemoteLogSegmentMetadata", update.topicIdPartition(), stub -> {
            var response = stub.updateRemoteLogSegmentMetadata(request);
            return response.hasPosition() ? Optional.of(response.getPosition()) : Optional.empty();
        });
    }

    @Override
    public CompletableFuture<Void> putRemotePartitionDeleteMetadata(RemotePartitionDeleteMetadata deletion) {
        Objects.requireNonNull(deletion, "remotePartitionDeleteMetadata");
        PutRemotePartitionDeleteMetadataRequest request = PutRemotePartitionDeleteMetadataRequest.newBuilder()
                .setRemotePartitionDeleteMetadata(Convert.toProto(deletion))
                .build();
        return write("putRemotePartitionDeleteMetadata", deletion.topicIdPartition(), stub -> {
            var response = stub.putRemotePartitionDeleteMetadata(request);
            return response.hasPosition() ? Optional.of(response.getPosition()) : Optional.empty();
        });
    }

    @Override
    public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(TopicIdPartition partition, int epochForOffset,
                                                                       long offset) throws RemoteStorageException {
        if (answersNothing(partition, epochForOffset, offset)) {
            return Optional.empty();
        }
        RemoteLogSegmentMetadataRequest request = RemoteLogSegmentMetadataRequest.newBuilder()
                .setTopicIdPartition(Convert.toProto(partition))
                .setLeaderEpoch(epochForOffset)
                .setOffset(offset)
                .build();
        RemoteLogSegmentMetadataResponse response = read("remoteLogSegmentMetadata", partition,
                stub -> stub.remoteLogSegmentMetadata(request));
        return response.hasRemoteLogSegmentMetadata()
                ? Optional.of(Convert.fromProto(response.getRemoteLogSegmentMetadata()))
                : Optional.empty();
    }

    @Override
    public Optional<Long> highestOffsetForEpoch(TopicIdPartition partition, int leaderEpoch)
            throws RemoteStorageException {
        if (answersNothing(partition, leaderEpoch, 0)) {
            return Optional.empty();
        }
        HighestOffsetForEpochResponse response = highestOffset("highestOffsetForEpoch", partition, leaderEpoch);
        return response.hasOffset() ? Optional.of(response.getOffset()) : Optional.empty();
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition partition)
            throws RemoteStorageException {
        return list(partition, ListRemoteLogSegmentsRequest.newBuilder()
                .setTopicIdPartition(Convert.toProto(partition)));
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition partition, int leaderEpoch)
            throws RemoteStorageException {
        if (answersNothing(partition, leaderEpoch, 0)) {
            return Collections.emptyIterator();
        }
        return list(partition, ListRemoteLogSegmentsRequest.newBuilder()
                .setTopicIdPartition(Convert.toProto(partition))
                .setLeaderEpoch(leaderEpoch));
    }

    @Override
    public long remoteLogSize(TopicIdPartition partition, int leaderEpoch) throws RemoteStorageException {
        if (answersNothing(partition, leaderEpoch, 0)) {
            return 0;
        }
        RemoteLogSizeRequest request = RemoteLogSizeRequest.newBuilder()
                .setTopicIdPartition(Convert.toProto(partition))
                .setLeaderEpoch(leaderEpoch)
                .build();
        return read("remoteLogSize", partition, stub -> stub.remoteLogSize(request)).getSizeInBytes();
    }

    @Override
    public Optional<RemoteLogSegmentMetadata> nextSegmentWithTxnIndex(TopicIdPartition partition, int epoch,
                                                                      long offset) throws RemoteStorageException {
        if (answersNothing(partition, epoch, offset)) {
            return Optional.empty();
        }
        NextSegmentWithTxnIndexRequest request = NextSegmentWithTxnIndexRequest.newBuilder()
                .setTopicIdPartition(Convert.toProto(partition))
                .setLeaderEpoch(epoch)
                .setOffset(offset)
                .build();
        NextSegmentWithTxnIndexResponse response = read("nextSegmentWithTxnIndex", partition,
                stub -> stub.nextSegmentWithTxnIndex(request));
        return response.hasRemoteLogSegmentMetadata()
                ? Optional.of(Convert.fromProto(response.getRemoteLogSegmentMetadata()))
                : Optional.empty();
    }

    /** Whether rlmm has loaded the partition's metadata; false when it cannot tell. */
    @Override
    public boolean isReady(TopicIdPartition partition) {
        if (!configured || closed) {
            return false;
        }
        IsReadyRequest request = IsReadyRequest.newBuilder().setTopicIdPartition(Convert.toProto(partition)).build();
        try {
            return read("isReady", partition, stub -> stub.isReady(request)).getReady();
        } catch (RemoteStorageException | RuntimeException e) {
            log.debug("isReady({}): {}", partition, e.toString());
            return false;
        }
    }

    @Override
    public void onPartitionLeadershipChanges(Set<TopicIdPartition> leaderPartitions,
                                             Set<TopicIdPartition> followerPartitions) {
        Objects.requireNonNull(leaderPartitions, "leaderPartitions");
        Objects.requireNonNull(followerPartitions, "followerPartitions");
        ensureOpen();
        registrations.follow(leaderPartitions, followerPartitions);
    }

    @Override
    public void onStopPartitions(Set<TopicIdPartition> partitions) {
        Objects.requireNonNull(partitions, "partitions");
        ensureOpen();
        registrations.stop(partitions);
        positions.forget(partitions);
    }

    @Override
    public synchronized void close() {
        if (!configured || closed) {
            return;
        }
        closed = true;
        channels.close();
        log.info("RlmmRemoteLogMetadataManager closed");
    }

    private void ensureOpen() {
        if (!configured || closed) {
            throw new IllegalStateException(
                    "RlmmRemoteLogMetadataManager is " + (closed ? "closed" : "not configured"));
        }
    }

    /**
     * Kafka's store answers nothing for a negative epoch or offset, once it knows the partition; rlmm refuses
     * negative values. Such a call only checks the partition, with a read that fails as any read of it would.
     */
    private boolean answersNothing(TopicIdPartition partition, int epoch, long offset) throws RemoteStorageException {
        if (epoch >= 0 && offset >= 0) {
            return false;
        }
        highestOffset("check of " + partition, partition, 0);
        return true;
    }

    private HighestOffsetForEpochResponse highestOffset(String what, TopicIdPartition partition, int leaderEpoch)
            throws RemoteStorageException {
        HighestOffsetForEpochRequest request = HighestOffsetForEpochRequest.newBuilder()
                .setTopicIdPartition(Convert.toProto(partition))
                .setLeaderEpoch(leaderEpoch)
                .build();
        return read(what, partition, stub -> stub.highestOffsetForEpoch(request));
    }

    private <T> T read(String what, TopicIdPartition partition, Function<RemoteLogMetadataServiceBlockingStub, T> send)
            throws RemoteStorageException {
        Objects.requireNonNull(partition, "topicIdPartition");
        ensureOpen();
        Metadata headers = positions.readHeaders(partition);
        return caller.call(what, FailoverCaller.Kind.READ,
                (target, deadline) -> send.apply(target.stub(deadline, headers)));
    }

    private Iterator<RemoteLogSegmentMetadata> list(TopicIdPartition partition,
                                                    ListRemoteLogSegmentsRequest.Builder request)
            throws RemoteStorageException {
        Objects.requireNonNull(partition, "topicIdPartition");
        ensureOpen();
        Metadata headers = positions.readHeaders(partition);
        return SegmentIterator.open(() -> caller.call("listRemoteLogSegments", FailoverCaller.Kind.READ,
                (target, deadline) -> {
                    var stream = target.stub(deadline, headers).listRemoteLogSegments(request.build());
                    stream.hasNext();  // the first chunk, or the call's failure, within this attempt
                    return stream;
                }));
    }

    /** Runs the write on the plugin's executor; the future completes once rlmm applied it. */
    private CompletableFuture<Void> write(
            String what, TopicIdPartition partition,
            Function<RemoteLogMetadataServiceBlockingStub, Optional<WritePosition>> send) {
        ensureOpen();
        CompletableFuture<Void> done = new CompletableFuture<>();
        channels.executor.execute(() -> {
            try {
                Optional<WritePosition> position = caller.call(what, FailoverCaller.Kind.WRITE,
                        (target, deadline) -> send.apply(target.stub(deadline, writeHeaders)));
                position.ifPresent(landed -> positions.record(partition, landed));
                done.complete(null);
            } catch (RemoteStorageException | RuntimeException e) {
                done.completeExceptionally(e);
            }
        });
        return done;
    }
}
