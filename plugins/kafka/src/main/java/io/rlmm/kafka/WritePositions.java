package io.rlmm.kafka;

import io.grpc.Metadata;
import io.rlmm.v1.WritePosition;
import org.apache.kafka.common.TopicIdPartition;

import java.util.Collection;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

/**
 * Where this broker's last answered write of each user partition landed in the metadata topic, sent with
 * the partition's reads ({@code rlmm-read-after}) so that any server answers them only once it applied it.
 */
final class WritePositions {
    private static final Metadata.Key<String> READ_AFTER =
            Metadata.Key.of("rlmm-read-after", Metadata.ASCII_STRING_MARSHALLER);

    private final ConcurrentMap<TopicIdPartition, WritePosition> last = new ConcurrentHashMap<>();

    void record(TopicIdPartition partition, WritePosition position) {
        last.merge(partition, position, (old, now) -> old.getMetadataPartition() == now.getMetadataPartition()
                && old.getOffset() > now.getOffset() ? old : now);
    }

    void forget(Collection<TopicIdPartition> partitions) {
        last.keySet().removeAll(partitions);
    }

    /** The headers of a read of {@code partition}. */
    Metadata readHeaders(TopicIdPartition partition) {
        Metadata headers = new Metadata();
        WritePosition position = last.get(partition);
        if (position != null) {
            headers.put(READ_AFTER, position.getMetadataPartition() + ":" + position.getOffset());
        }
        return headers;
    }
}
