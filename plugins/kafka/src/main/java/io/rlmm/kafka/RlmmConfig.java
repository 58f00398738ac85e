package io.rlmm.kafka;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Range;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigException;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The plugin's settings: the broker's {@code rlmm.*} keys with the prefix stripped, plus {@code broker.id}.
 * A missing or invalid key throws Kafka's {@link ConfigException} naming it.
 */
record RlmmConfig(
        List<String> targets,
        boolean tlsEnabled,
        Optional<Path> tlsCaFile,
        Optional<Path> tlsCertFile,
        Optional<Path> tlsKeyFile,
        Optional<String> tlsServerName,
        Optional<String> writeToken,
        long callTimeoutMs,
        long writeTimeoutMs,
        long retryBackoffMs,
        long retryBackoffMaxMs,
        int brokerId) {

    static final String TARGETS = "targets";
    static final String TLS_ENABLED = "tls.enabled";
    static final String TLS_CA_FILE = "tls.ca.file";
    static final String TLS_CERT_FILE = "tls.cert.file";
    static final String TLS_KEY_FILE = "tls.key.file";
    static final String TLS_SERVER_NAME = "tls.server.name";
    static final String WRITE_TOKEN_FILE = "write.token.file";
    static final String CALL_TIMEOUT_MS = "call.timeout.ms";
    static final String WRITE_TIMEOUT_MS = "write.timeout.ms";
    static final String RETRY_BACKOFF_MS = "retry.backoff.ms";
    static final String RETRY_BACKOFF_MAX_MS = "retry.backoff.max.ms";
    static final String BROKER_ID = "broker.id";

    static final ConfigDef DEFINITION = new ConfigDef()
            .define(TARGETS, Type.LIST, ConfigDef.NO_DEFAULT_VALUE, RlmmConfig::validateTargets, Importance.HIGH,
                    "Comma-separated host:port of the rlmm replicas consuming the same metadata topic, "
                            + "in order of preference.")
            .define(TLS_ENABLED, Type.BOOLEAN, false, Importance.MEDIUM,
                    "Connect with TLS (on by itself when tls.ca.file is set); without a CA file the JVM's trust "
                            + "store verifies the servers.")
            .define(TLS_CA_FILE, Type.STRING, null, Importance.MEDIUM, "PEM CA certificates that verify the servers.")
            .define(TLS_CERT_FILE, Type.STRING, null, Importance.MEDIUM,
                    "PEM client certificate (mutual TLS), with tls.key.file.")
            .define(TLS_KEY_FILE, Type.STRING, null, Importance.MEDIUM, "PKCS#8 PEM key of tls.cert.file.")
            .define(TLS_SERVER_NAME, Type.STRING, null, Importance.LOW,
                    "The name to verify in the server certificates instead of each target's host.")
            .define(WRITE_TOKEN_FILE, Type.STRING, null, Importance.MEDIUM,
                    "File whose first line is the bearer token sent with writes and registrations.")
            .define(CALL_TIMEOUT_MS, Type.LONG, 30_000L, Range.atLeast(1), Importance.MEDIUM,
                    "Deadline of a read or a registration, retries and failover included.")
            .define(WRITE_TIMEOUT_MS, Type.LONG, 150_000L, Range.atLeast(1), Importance.MEDIUM,
                    "Deadline of a write, retries and failover included (rlmm answers once it applied the write).")
            .define(RETRY_BACKOFF_MS, Type.LONG, 100L, Range.atLeast(1), Importance.LOW,
                    "First pause before trying the targets again after each of them failed.")
            .define(RETRY_BACKOFF_MAX_MS, Type.LONG, 1_000L, Range.atLeast(1), Importance.LOW,
                    "Longest pause between rounds of attempts (the pause doubles from retry.backoff.ms).")
            .define(BROKER_ID, Type.INT, ConfigDef.NO_DEFAULT_VALUE, Range.atLeast(0), Importance.HIGH,
                    "The broker's id, given by the broker.");

    static RlmmConfig parse(Map<String, ?> props) {
        Map<String, Object> values = DEFINITION.parse(props);
        Optional<Path> caFile = readableFile(values, TLS_CA_FILE);
        Optional<Path> certFile = readableFile(values, TLS_CERT_FILE);
        Optional<Path> keyFile = readableFile(values, TLS_KEY_FILE);
        if (certFile.isPresent() != keyFile.isPresent()) {
            String given = certFile.isPresent() ? TLS_CERT_FILE : TLS_KEY_FILE;
            throw new ConfigException(given, values.get(given),
                    "mutual TLS needs both " + TLS_CERT_FILE + " and " + TLS_KEY_FILE);
        }
        long backoffMs = (Long) values.get(RETRY_BACKOFF_MS);
        long backoffMaxMs = (Long) values.get(RETRY_BACKOFF_MAX_MS);
        if (backoffMaxMs < backoffMs) {
            throw new ConfigException(RETRY_BACKOFF_MAX_MS, backoffMaxMs,
                    "less than " + RETRY_BACKOFF_MS + "=" + backoffMs);
        }
        @SuppressWarnings("unchecked")
        List<String> targets = List.copyOf((List<String>) values.get(TARGETS));
        return new RlmmConfig(
                targets,
                (Boolean) values.get(TLS_ENABLED) || caFile.isPresent() || certFile.isPresent(),
                caFile,
                certFile,
                keyFile,
                Optional.ofNullable((String) values.get(TLS_SERVER_NAME)),
                readableFile(values, WRITE_TOKEN_FILE).map(RlmmConfig::readToken),
                (Long) values.get(CALL_TIMEOUT_MS),
                (Long) values.get(WRITE_TIMEOUT_MS),
                backoffMs,
                backoffMaxMs,
                (Integer) values.get(BROKER_ID));
    }

    @Override
    public String toString() {  // without the token
        return "RlmmConfig[targets=" + targets + ", tls=" + tlsEnabled + ", brokerId=" + brokerId
                + ", callTimeoutMs=" + callTimeoutMs + ", writeTimeoutMs=" + writeTimeoutMs + "]";
    }

    private static void validateTargets(String name, Object value) {
        List<?> targets = (List<?>) value;
        if (targets.isEmpty()) {
            throw new ConfigException(name, value, "no target: give host:port of at least one rlmm server");
        }
        for (Object target : targets) {
            String text = (String) target;
            int colon = text.lastIndexOf(':');
            if (colon <= 0 || !isPort(text.substring(colon + 1))) {
                throw new ConfigException(name, value, "'" + text + "' is not host:port");
            }
        }
    }

    private static boolean isPort(String text) {
        try {
            int port = Integer.parseInt(text);
            return port > 0 && port < 65536;
        } catch (NumberFormatException e) {
            return false;
        }
    }

    private static Optional<Path> readableFile(Map<String, Object> values, String key) {
        String value = (String) values.get(key);
        if (value == null) {
            return Optional.empty();
        }
        Path path = Path.of(value);
        if (!Files.isRegularFile(path) || !Files.isReadable(path)) {
            throw new ConfigException(key, value, "not a readable file");
        }
        return Optional.of(path);
    }

    private static String readToken(Path file) {
        try (BufferedReader reader = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line = reader.readLine();
            if (line == null || line.isBlank()) {
                throw new ConfigException(WRITE_TOKEN_FILE, file.toString(), "the first line holds no token");
            }
            return line.strip();
        } catch (IOException e) {
            throw new ConfigException(WRITE_TOKEN_FILE, file.toString(), "cannot be read: " + e);
        }
    }
}
