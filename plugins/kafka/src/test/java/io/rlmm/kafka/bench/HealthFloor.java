package io.rlmm.kafka.bench;

import java.io.ByteArrayInputStream;
import java.io.Closeable;
import java.io.InputStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Arrays;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;

/**
 * The floor of a unary call from this JVM to an rlmm server: {@code /grpc.health.v1.Health/Check} with an empty
 * request and a byte[] marshaller (no protobuf on either side of the client), made with
 * {@code ClientCalls.blockingUnaryCall} (what the plugin's blocking stubs call) and a deadline, over a grpc-netty
 * channel built as the plugin builds its own: its own NioEventLoopGroup of 2 threads, NioSocketChannel, its own
 * cached executor as executor and offload executor, plaintext.
 *
 * <p>grpc-java and Netty are not on the class path the test classes are compiled against (Kafka's libs, slf4j
 * and the plugin's jar), and a broker loads them from the plugin's folder: so they are loaded here the same way
 * (the loader given, a ChildFirstClassLoader over the plugin's folder) and called through method handles,
 * resolved once (a handle call costs tens of nanoseconds, the unary call a hundred microseconds or more).
 */
final class HealthFloor implements Closeable {
    static final String METHOD = "grpc.health.v1.Health/Check";
    /** HealthCheckResponse{status=SERVING}. */
    static final byte[] SERVING = {0x08, 0x01};
    private static final byte[] EMPTY = new byte[0];

    private final ClassLoader grpc;
    private final Object channel;
    private final Object eventLoop;
    private final ExecutorService executor;
    private final Object method;
    private final Object callOptions;
    private final MethodHandle withDeadlineAfter;
    private final MethodHandle blockingUnaryCall;
    private final long deadlineMs;

    HealthFloor(ClassLoader grpc, String target, long deadlineMs) throws Exception {
        this.grpc = grpc;
        this.deadlineMs = deadlineMs;
        Class<?> threadFactoryClass = grpc.loadClass("io.netty.util.concurrent.DefaultThreadFactory");
        ThreadFactory loopThreads = (ThreadFactory) threadFactoryClass.getConstructor(String.class, boolean.class)
                .newInstance("floor-netty", true);
        ThreadFactory executorThreads = (ThreadFactory) threadFactoryClass.getConstructor(String.class, boolean.class)
                .newInstance("floor-executor", true);
        executor = Executors.newCachedThreadPool(executorThreads);
        Class<?> eventLoopGroup = grpc.loadClass("io.netty.channel.EventLoopGroup");
        eventLoop = grpc.loadClass("io.netty.channel.nio.NioEventLoopGroup")
                .getConstructor(int.class, ThreadFactory.class).newInstance(2, loopThreads);

        Class<?> builderClass = grpc.loadClass("io.grpc.netty.NettyChannelBuilder");
        Object builder = builderClass.getMethod("forTarget", String.class).invoke(null, target);
        builder = builderClass.getMethod("eventLoopGroup", eventLoopGroup).invoke(builder, eventLoop);
        builder = builderClass.getMethod("channelType", Class.class)
                .invoke(builder, grpc.loadClass("io.netty.channel.socket.nio.NioSocketChannel"));
        builder = builderClass.getMethod("executor", Executor.class).invoke(builder, executor);
        builder = builderClass.getMethod("offloadExecutor", Executor.class).invoke(builder, executor);
        builder = builderClass.getMethod("usePlaintext").invoke(builder);
        channel = builderClass.getMethod("build").invoke(builder);

        Class<?> marshallerClass = grpc.loadClass("io.grpc.MethodDescriptor$Marshaller");
        Object marshaller = Proxy.newProxyInstance(grpc, new Class<?>[] {marshallerClass}, (proxy, m, args) -> {
            switch (m.getName()) {
                case "stream": return new ByteArrayInputStream((byte[]) args[0]);
                case "parse": return ((InputStream) args[0]).readAllBytes();
                case "hashCode": return System.identityHashCode(proxy);
                case "equals": return proxy == args[0];
                case "toString": return "bytes";
                default: throw new UnsupportedOperationException(m.getName());
            }
        });
        Class<?> descriptorClass = grpc.loadClass("io.grpc.MethodDescriptor");
        Object descriptorBuilder = descriptorClass.getMethod("newBuilder", marshallerClass, marshallerClass)
                .invoke(null, marshaller, marshaller);
        Class<?> descriptorBuilderClass = descriptorBuilder.getClass();
        @SuppressWarnings({"unchecked", "rawtypes"})
        Object unary = Enum.valueOf((Class) grpc.loadClass("io.grpc.MethodDescriptor$MethodType"), "UNARY");
        descriptorBuilderClass.getMethod("setType", unary.getClass()).invoke(descriptorBuilder, unary);
        descriptorBuilderClass.getMethod("setFullMethodName", String.class).invoke(descriptorBuilder, METHOD);
        method = descriptorBuilderClass.getMethod("build").invoke(descriptorBuilder);

        Class<?> callOptionsClass = grpc.loadClass("io.grpc.CallOptions");
        callOptions = callOptionsClass.getField("DEFAULT").get(null);
        MethodHandles.Lookup lookup = MethodHandles.publicLookup();
        withDeadlineAfter = lookup.unreflect(callOptionsClass.getMethod("withDeadlineAfter", long.class, TimeUnit.class))
                .asType(MethodType.methodType(Object.class, Object.class, long.class, TimeUnit.class));
        Method call = grpc.loadClass("io.grpc.stub.ClientCalls").getMethod("blockingUnaryCall",
                grpc.loadClass("io.grpc.Channel"), descriptorClass, callOptionsClass, Object.class);
        blockingUnaryCall = lookup.unreflect(call).asType(MethodType.genericMethodType(4));
    }

    /** One Check; returns the response's bytes (SERVING), throws grpc's StatusRuntimeException on failure. */
    byte[] check() throws Exception {
        try {
            Object options = (Object) withDeadlineAfter.invokeExact(callOptions, deadlineMs, TimeUnit.MILLISECONDS);
            return (byte[]) (Object) blockingUnaryCall.invokeExact(channel, method, options, (Object) EMPTY);
        } catch (Exception | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    static boolean serving(byte[] answer) {
        return Arrays.equals(answer, SERVING);
    }

    @Override
    public void close() {
        try {
            Class<?> managedChannel = grpc.loadClass("io.grpc.ManagedChannel");
            managedChannel.getMethod("shutdownNow").invoke(channel);
            managedChannel.getMethod("awaitTermination", long.class, TimeUnit.class)
                    .invoke(channel, 5_000L, TimeUnit.MILLISECONDS);
            grpc.loadClass("io.netty.util.concurrent.EventExecutorGroup")
                    .getMethod("shutdownGracefully", long.class, long.class, TimeUnit.class)
                    .invoke(eventLoop, 0L, 2_000L, TimeUnit.MILLISECONDS);
            ((ExecutorService) eventLoop).awaitTermination(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            System.err.println("closing the floor's channel: " + e);
        }
        executor.shutdownNow();
    }
}
