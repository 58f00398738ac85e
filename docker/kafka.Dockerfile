# Kafka with rlmm's broker plugin (plugins/kafka, docs/kafka-broker.md) in /opt/rlmm-kafka-plugin:
#   docker build -f docker/kafka.Dockerfile -t rlmm-kafka .
# The plugin is built against the Kafka image's own libs/ (KAFKA_LIBS) with Debian's JDK, grpc-java and
# protobuf-java, as scripts/build_kafka_plugin.py builds it anywhere.
ARG KAFKA_IMAGE=apache/kafka:4.3.1
FROM ${KAFKA_IMAGE} AS kafka

FROM debian:bookworm-slim AS plugin
RUN apt-get update && apt-get install -y --no-install-recommends python3 default-jdk-headless libgrpc-java \
    libprotobuf-java protobuf-compiler protobuf-compiler-grpc-java-plugin libnetty-java libperfmark-java \
    libgoogle-gson-java && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml ./
COPY proto ./proto
COPY plugins/kafka/src/main ./plugins/kafka/src/main
COPY scripts/build_kafka_plugin.py ./scripts/
COPY --from=kafka /opt/kafka/libs /opt/kafka/libs
RUN KAFKA_LIBS=/opt/kafka/libs python3 scripts/build_kafka_plugin.py \
 && mv build/rlmm-kafka-plugin-* /opt/rlmm-kafka-plugin

FROM ${KAFKA_IMAGE}
COPY --from=plugin /opt/rlmm-kafka-plugin /opt/rlmm-kafka-plugin
