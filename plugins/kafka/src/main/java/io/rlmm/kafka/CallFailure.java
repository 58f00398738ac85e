package io.rlmm.kafka;

import com.google.protobuf.InvalidProtocolBufferException;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.rlmm.kafka.details.AnyDetail;
import io.rlmm.kafka.details.ErrorInfo;
import io.rlmm.kafka.details.RetryDelay;
import io.rlmm.kafka.details.RetryInfo;
import io.rlmm.kafka.details.RpcStatus;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

import java.util.Objects;

/**
 * A failed gRPC attempt as rlmm described it: the status, and from the {@code grpc-status-details-bin}
 * trailer the ErrorInfo's reason and Kafka exception and the RetryInfo's delay. A transport failure has
 * no reason.
 */
final class CallFailure {
    private static final Metadata.Key<byte[]> DETAILS =
            Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

    private final Target target;
    private final Status.Code code;
    private final String message;
    private final String reason;
    private final String kafkaException;
    private final long retryDelayMs;

    private CallFailure(Target target, Status.Code code, String message, String reason, String kafkaException,
                        long retryDelayMs) {
        this.target = target;
        this.code = code;
        this.message = message;
        this.reason = reason;
        this.kafkaException = kafkaException;
        this.retryDelayMs = retryDelayMs;
    }

    static CallFailure of(Target target, StatusRuntimeException e) {
        Status status = e.getStatus();
        String message = Objects.toString(status.getDescription(), "")
                + (status.getCause() == null ? "" : " (" + status.getCause() + ")");
        String reason = "";
        String kafkaException = "";
        long retryDelayMs = 0;
        byte[] details = e.getTrailers() == null ? null : e.getTrailers().get(DETAILS);
        if (details != null) {
            try {
                for (AnyDetail detail : RpcStatus.parseFrom(details).getDetailsList()) {
                    if (detail.getTypeUrl().endsWith("/google.rpc.ErrorInfo")) {
                        ErrorInfo info = ErrorInfo.parseFrom(detail.getValue());
                        reason = info.getReason();
                        kafkaException = info.getMetadataOrDefault("kafka_exception", "");
                    } else if (detail.getTypeUrl().endsWith("/google.rpc.RetryInfo")) {
                        RetryDelay delay = RetryInfo.parseFrom(detail.getValue()).getRetryDelay();
                        retryDelayMs = delay.getSeconds() * 1000 + delay.getNanos() / 1_000_000;
                    }
                }
            } catch (InvalidProtocolBufferException ignored) {
                // not rlmm's details: the status alone tells what happened
            }
        }
        return new CallFailure(target, status.getCode(), message, reason, kafkaException, retryDelayMs);
    }

    /** How long the server asked to wait before trying again (0: it did not say). */
    long retryDelayMs() {
        return retryDelayMs;
    }

    /** The partition's metadata is still loading: Kafka's store throws ReplicaNotAvailableException at once. */
    boolean replicaNotAvailable() {
        return reason.equals("REPLICA_NOT_AVAILABLE") || kafkaException.equals("ReplicaNotAvailableException");
    }

    /** Whether another target (or this one, later) may answer. */
    boolean tryAnotherTarget() {
        return switch (code) {
            // transport, a retryable reason, or CONSUMER_STOPPED / VIEW_DAMAGED: this server is done
            case UNAVAILABLE, DATA_LOSS -> true;
            // this server's view is of another metadata topic until it is rebuilt; another server may have been.
            // A write it refused was not sent; one that landed below its view is in the topic, and written again
            // it is a repeated state, as after a server that died before answering
            case FAILED_PRECONDITION -> reason.equals("METADATA_TOPIC_CHANGED");
            // a server that stops cancels the calls in flight (an interrupt of the caller ends the call before)
            case CANCELLED -> true;
            // the attempt's own deadline; rlmm's WRITE_NOT_APPLIED_IN_TIME was written: a retry would write twice
            case DEADLINE_EXCEEDED -> reason.isEmpty();
            default -> false;
        };
    }

    RemoteStorageException toKafka() {
        return code == Status.Code.NOT_FOUND || kafkaException.equals("RemoteResourceNotFoundException")
                ? new RemoteResourceNotFoundException(toString())
                : new RemoteStorageException(toString());
    }

    @Override
    public String toString() {
        String why = reason.isEmpty() || reason.equals(code.name()) ? code.name() : code + " " + reason;
        return message + " (rlmm " + target + ": " + why + ")";
    }
}
