package org.apache.kafka.server.log.remote.metadata.storage;

import java.util.Iterator;
import java.util.Optional;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * Kafka's own in-memory store ({@link RemotePartitionMetadataStore}, what TopicBasedRemoteLogMetadataManager
 * answers from), driven as Kafka's ConsumerTask and TopicBasedRemoteLogMetadataManager drive it. Its query
 * methods are package-private, hence this class's package. Test code only: it is not part of the plugin.
 */
public final class KafkaStoreDriver {
    private final RemotePartitionMetadataStore store = new RemotePartitionMetadataStore();

    /** ConsumerTask's assignment of a user partition (its metadata loaded, not ready yet). */
    public void load(TopicIdPartition tp) {
        store.maybeLoadPartition(tp);
    }

    /** ConsumerTask marking a user partition ready (throws as Kafka does for a removed partition). */
    public void markInitialized(TopicIdPartition tp) {
        store.markInitialized(tp);
    }

    /** TopicBasedRemoteLogMetadataManager.isReady. */
    public boolean isReady(TopicIdPartition tp) {
        return store.isInitialized(tp);
    }

    /** ConsumerTask handing a record to the store (throws what the store throws). */
    public void handle(RemoteLogMetadata record) {
        store.handleRemoteLogMetadata(record);
    }

    /** onStopPartitions: ConsumerTask forgets the partition's metadata. */
    public void clear(TopicIdPartition tp) {
        store.clearTopicPartition(tp);
    }

    public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(TopicIdPartition tp, int epoch, long offset)
            throws RemoteStorageException {
        return store.remoteLogSegmentMetadata(tp, offset, epoch);
    }

    public Optional<Long> highestOffsetForEpoch(TopicIdPartition tp, int epoch) throws RemoteStorageException {
        return store.highestLogOffset(tp, epoch);
    }

    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp) throws RemoteStorageException {
        return store.listRemoteLogSegments(tp);
    }

    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition tp, int epoch)
            throws RemoteStorageException {
        return store.listRemoteLogSegments(tp, epoch);
    }

    /** TopicBasedRemoteLogMetadataManager.remoteLogSize: the sizes of the epoch's listing. */
    public long remoteLogSize(TopicIdPartition tp, int epoch) throws RemoteStorageException {
        long size = 0;
        Iterator<RemoteLogSegmentMetadata> segments = store.listRemoteLogSegments(tp, epoch);
        while (segments.hasNext()) {
            size += segments.next().segmentSizeInBytes();
        }
        return size;
    }

    public Optional<RemoteLogSegmentMetadata> nextSegmentWithTxnIndex(TopicIdPartition tp, int epoch, long offset)
            throws RemoteStorageException {
        return store.nextSegmentWithTxnIndex(tp, epoch, offset);
    }
}
