package io.rlmm.kafka;

import io.netty.buffer.ByteBufAllocator;
import io.netty.handler.ssl.ApplicationProtocolNegotiator;
import io.netty.handler.ssl.JdkApplicationProtocolNegotiator;
import io.netty.handler.ssl.SslContext;

import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.SSLSessionContext;
import java.lang.reflect.Constructor;
import java.util.List;

/**
 * A client TLS context that negotiates ALPN "h2", which gRPC requires. Debian's netty 4.1.48 cannot do it with
 * the JDK's TLS (its JDK ALPN negotiator went with Jetty's ALPN), but it kept the engine that negotiates with the
 * JDK's own ALPN API (Java 9+), package-private: engines of the JDK context are wrapped in it by reflection.
 */
@SuppressWarnings("deprecation")  // netty's JdkApplicationProtocolNegotiator, the type that engine takes
final class H2SslContext extends SslContext {
    private static final List<String> H2 = List.of("h2");

    private final SslContext jdk;
    private final Constructor<?> alpnEngine;
    private final JdkApplicationProtocolNegotiator negotiator = new Negotiator();

    H2SslContext(SslContext jdk) throws ReflectiveOperationException {
        this.jdk = jdk;
        alpnEngine = Class.forName("io.netty.handler.ssl.Java9SslEngine")
                .getDeclaredConstructor(SSLEngine.class, JdkApplicationProtocolNegotiator.class, boolean.class);
        alpnEngine.setAccessible(true);
    }

    @Override
    public boolean isClient() {
        return true;
    }

    @Override
    public List<String> cipherSuites() {
        return jdk.cipherSuites();
    }

    @Override
    public long sessionCacheSize() {
        return jdk.sessionCacheSize();
    }

    @Override
    public long sessionTimeout() {
        return jdk.sessionTimeout();
    }

    @Override
    public ApplicationProtocolNegotiator applicationProtocolNegotiator() {
        return negotiator;
    }

    @Override
    public SSLEngine newEngine(ByteBufAllocator alloc) {
        return withAlpn(jdk.newEngine(alloc));
    }

    @Override
    public SSLEngine newEngine(ByteBufAllocator alloc, String peerHost, int peerPort) {
        return withAlpn(jdk.newEngine(alloc, peerHost, peerPort));
    }

    @Override
    public SSLSessionContext sessionContext() {
        return jdk.sessionContext();
    }

    private SSLEngine withAlpn(SSLEngine engine) {
        try {
            return (SSLEngine) alpnEngine.newInstance(engine, negotiator, false);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("netty's Java9SslEngine cannot be made", e);
        }
    }

    /** Offers h2 and accepts only it (a server that selects nothing fails gRPC's own ALPN check). */
    private final class Negotiator implements JdkApplicationProtocolNegotiator {
        @Override
        public List<String> protocols() {
            return H2;
        }

        @Override
        public SslEngineWrapperFactory wrapperFactory() {
            return (engine, negotiator, isServer) -> withAlpn(engine);
        }

        @Override
        public ProtocolSelectorFactory protocolSelectorFactory() {
            throw new UnsupportedOperationException("a client context selects no protocol");
        }

        @Override
        public ProtocolSelectionListenerFactory protocolListenerFactory() {
            return (engine, protocols) -> new ProtocolSelectionListener() {
                @Override
                public void unsupported() {
                }

                @Override
                public void selected(String protocol) throws SSLHandshakeException {
                    if (!H2.contains(protocol)) {
                        throw new SSLHandshakeException("the server selected ALPN protocol " + protocol + ", not h2");
                    }
                }
            };
        }
    }
}
