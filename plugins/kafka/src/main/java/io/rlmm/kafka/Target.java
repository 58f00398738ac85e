package io.rlmm.kafka;

import io.grpc.Deadline;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.stub.MetadataUtils;
import io.rlmm.v1.RemoteLogMetadataServiceGrpc;
import io.rlmm.v1.RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub;

import java.util.concurrent.TimeUnit;

/**
 * One rlmm server: its channel, whether it missed registrations this broker sent, and whether it failed lately
 * (then calls try it after the others).
 */
final class Target {
    final String address;
    final ManagedChannel channel;
    /** True until this server holds the broker's registrations (see {@link Registrations}). */
    volatile boolean outOfSync = true;
    private volatile long avoidUntilNanos = System.nanoTime();

    Target(String address, ManagedChannel channel) {
        this.address = address;
        this.channel = channel;
    }

    boolean avoided() {
        return System.nanoTime() - avoidUntilNanos < 0;
    }

    void failed(long avoidMs) {
        avoidUntilNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(avoidMs);
    }

    void answered() {
        avoidUntilNanos = System.nanoTime();
    }

    RemoteLogMetadataServiceBlockingStub stub(Deadline deadline, Metadata headers) {
        return RemoteLogMetadataServiceGrpc.newBlockingStub(channel)
                .withDeadline(deadline)
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
    }

    @Override
    public String toString() {
        return address;
    }
}
