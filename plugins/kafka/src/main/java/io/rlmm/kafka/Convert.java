package io.rlmm.kafka;

import com.google.protobuf.ByteString;
import io.rlmm.v1.SegmentLeaderEpoch;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * Kafka's tiered-storage types to rlmm's messages and back. Uuids travel in Kafka's text form; a proto state
 * is Kafka's state id plus one (zero is "unspecified").
 */
final class Convert {
    private Convert() {
    }

    static io.rlmm.v1.TopicIdPartition toProto(TopicIdPartition partition) {
        return io.rlmm.v1.TopicIdPartition.newBuilder()
                .setTopicId(partition.topicId().toString())
                .setTopic(partition.topic())
                .setPartition(partition.partition())
                .build();
    }

    static List<io.rlmm.v1.TopicIdPartition> toProto(Collection<TopicIdPartition> partitions) {
        return partitions.stream().map(Convert::toProto).toList();
    }

    static io.rlmm.v1.RemoteLogSegmentMetadata toProto(RemoteLogSegmentMetadata segment) {
        io.rlmm.v1.RemoteLogSegmentMetadata.Builder builder = io.rlmm.v1.RemoteLogSegmentMetadata.newBuilder()
                .setRemoteLogSegmentId(toProto(segment.remoteLogSegmentId()))
                .setStartOffset(segment.startOffset())
                .setEndOffset(segment.endOffset())
                .setBrokerId(segment.brokerId())
                .setMaxTimestampMs(segment.maxTimestampMs())
                .setEventTimestampMs(segment.eventTimestampMs())
                .setSegmentSizeInBytes(segment.segmentSizeInBytes())
                .setState(toProto(segment.state()))
                .setTxnIndexEmpty(segment.isTxnIdxEmpty());
        segment.segmentLeaderEpochs().forEach((epoch, offset) ->
                builder.addSegmentLeaderEpochs(
                        SegmentLeaderEpoch.newBuilder().setLeaderEpoch(epoch).setStartOffset(offset)));
        segment.customMetadata().ifPresent(custom -> builder.setCustomMetadata(ByteString.copyFrom(custom.value())));
        return builder.build();
    }

    static io.rlmm.v1.RemoteLogSegmentMetadataUpdate toProto(RemoteLogSegmentMetadataUpdate update) {
        io.rlmm.v1.RemoteLogSegmentMetadataUpdate.Builder builder =
                io.rlmm.v1.RemoteLogSegmentMetadataUpdate.newBuilder()
                .setRemoteLogSegmentId(toProto(update.remoteLogSegmentId()))
                .setEventTimestampMs(update.eventTimestampMs())
                .setState(toProto(update.state()))
                .setBrokerId(update.brokerId());
        update.customMetadata().ifPresent(custom -> builder.setCustomMetadata(ByteString.copyFrom(custom.value())));
        return builder.build();
    }

    static io.rlmm.v1.RemotePartitionDeleteMetadata toProto(RemotePartitionDeleteMetadata deletion) {
        return io.rlmm.v1.RemotePartitionDeleteMetadata.newBuilder()
                .setTopicIdPartition(toProto(deletion.topicIdPartition()))
                .setState(io.rlmm.v1.RemotePartitionDeleteState.forNumber(deletion.state().id() + 1))
                .setEventTimestampMs(deletion.eventTimestampMs())
                .setBrokerId(deletion.brokerId())
                .build();
    }

    static RemoteLogSegmentMetadata fromProto(io.rlmm.v1.RemoteLogSegmentMetadata segment) {
        Map<Integer, Long> epochs = new TreeMap<>();
        segment.getSegmentLeaderEpochsList()
                .forEach(epoch -> epochs.put(epoch.getLeaderEpoch(), epoch.getStartOffset()));
        Optional<CustomMetadata> custom = segment.hasCustomMetadata()
                ? Optional.of(new CustomMetadata(segment.getCustomMetadata().toByteArray()))
                : Optional.empty();
        return new RemoteLogSegmentMetadata(
                fromProto(segment.getRemoteLogSegmentId()),
                segment.getStartOffset(),
                segment.getEndOffset(),
                segment.getMaxTimestampMs(),
                segment.getBrokerId(),
                segment.getEventTimestampMs(),
                segment.getSegmentSizeInBytes(),
                custom,
                fromProto(segment.getState()),
                epochs,
                segment.getTxnIndexEmpty());
    }

    private static io.rlmm.v1.RemoteLogSegmentId toProto(RemoteLogSegmentId id) {
        return io.rlmm.v1.RemoteLogSegmentId.newBuilder()
                .setTopicIdPartition(toProto(id.topicIdPartition()))
                .setId(id.id().toString())
                .build();
    }

    private static io.rlmm.v1.RemoteLogSegmentState toProto(RemoteLogSegmentState state) {
        return io.rlmm.v1.RemoteLogSegmentState.forNumber(state.id() + 1);
    }

    private static RemoteLogSegmentId fromProto(io.rlmm.v1.RemoteLogSegmentId id) {
        return new RemoteLogSegmentId(fromProto(id.getTopicIdPartition()), Uuid.fromString(id.getId()));
    }

    private static TopicIdPartition fromProto(io.rlmm.v1.TopicIdPartition partition) {
        return new TopicIdPartition(
                Uuid.fromString(partition.getTopicId()), partition.getPartition(), partition.getTopic());
    }

    private static RemoteLogSegmentState fromProto(io.rlmm.v1.RemoteLogSegmentState state) {
        if (state == io.rlmm.v1.RemoteLogSegmentState.REMOTE_LOG_SEGMENT_STATE_UNSPECIFIED
                || state == io.rlmm.v1.RemoteLogSegmentState.UNRECOGNIZED) {
            throw new IllegalStateException("rlmm answered a segment without a known state: " + state);
        }
        return RemoteLogSegmentState.forId((byte) (state.getNumber() - 1));
    }
}
