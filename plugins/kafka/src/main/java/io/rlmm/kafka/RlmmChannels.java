package io.rlmm.kafka;

import io.grpc.ManagedChannel;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioSocketChannel;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import io.netty.handler.ssl.SslProvider;
import io.netty.util.concurrent.GlobalEventExecutor;
import org.apache.kafka.common.config.ConfigException;

import javax.net.ssl.SSLException;
import java.io.Closeable;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * The channels to the targets and every thread the plugin runs: one netty event loop and one executor
 * (gRPC's callbacks and name resolution, the writes, the registrations' fan-out), so that {@link #close()}
 * ends them all.
 */
final class RlmmChannels implements Closeable {
    private static final int EVENT_LOOP_THREADS = 2;
    private static final long CLOSE_WAIT_MS = 5_000;

    final List<Target> targets;
    final ExecutorService executor;
    private final EventLoopGroup eventLoop;
    private final PluginThreads threads = new PluginThreads();
    private final CountDownLatch closing = new CountDownLatch(1);

    RlmmChannels(RlmmConfig config) {
        SslContext ssl = config.tlsEnabled() ? sslContext(config) : null;
        executor = Executors.newCachedThreadPool(threads.named("rlmm-kafka"));
        eventLoop = new NioEventLoopGroup(EVENT_LOOP_THREADS, threads.named("rlmm-netty"));
        targets = config.targets().stream().map(address -> new Target(address, channel(address, ssl, config))).toList();
    }

    boolean isClosing() {
        return closing.getCount() == 0;
    }

    /** Sleeps {@code ms}; true when {@link #close()} woke it. */
    boolean awaitClosing(long ms) throws InterruptedException {
        return closing.await(ms, TimeUnit.MILLISECONDS);
    }

    @Override
    public void close() {
        closing.countDown();
        targets.forEach(target -> target.channel.shutdownNow());
        try {
            for (Target target : targets) {
                target.channel.awaitTermination(CLOSE_WAIT_MS, TimeUnit.MILLISECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        executor.shutdownNow();
        eventLoop.shutdownGracefully(0, CLOSE_WAIT_MS, TimeUnit.MILLISECONDS);
        try {
            threads.join(CLOSE_WAIT_MS);
            // the event loop told its end to listeners on netty's GlobalEventExecutor, whose thread then stops
            // within a second
            GlobalEventExecutor.INSTANCE.awaitInactivity(CLOSE_WAIT_MS, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private ManagedChannel channel(String address, SslContext ssl, RlmmConfig config) {
        NettyChannelBuilder builder = NettyChannelBuilder.forTarget(address)
                .eventLoopGroup(eventLoop)
                .channelType(NioSocketChannel.class)
                .executor(executor)
                .offloadExecutor(executor);
        if (ssl == null) {
            builder.usePlaintext();
        } else {
            builder.sslContext(ssl);
            config.tlsServerName().ifPresent(builder::overrideAuthority);
        }
        return builder.build();
    }

    private static SslContext sslContext(RlmmConfig config) {
        try {
            SslContextBuilder builder = SslContextBuilder.forClient().sslProvider(SslProvider.JDK);
            config.tlsCaFile().ifPresent(ca -> builder.trustManager(ca.toFile()));
            if (config.tlsCertFile().isPresent() && config.tlsKeyFile().isPresent()) {
                builder.keyManager(config.tlsCertFile().get().toFile(), config.tlsKeyFile().get().toFile());
            }
            return new H2SslContext(builder.build());
        } catch (SSLException | IllegalArgumentException e) {  // IllegalArgumentException: a file that is not PEM
            throw new ConfigException("rlmm's TLS settings (tls.*) are not usable: " + e.getMessage());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("this netty cannot negotiate ALPN with the JDK's TLS", e);
        }
    }
}
