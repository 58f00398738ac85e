"""Query errors, each named after the Kafka exception a broker would see."""


class KafkaStateError(Exception):
    kafka_name = "KafkaException"


class RemoteResourceNotFound(KafkaStateError):
    """Partition not assigned, its metadata removed, or an epoch listing names a segment that is gone."""

    kafka_name = "RemoteResourceNotFoundException"


class ReplicaNotAvailable(KafkaStateError):
    """Partition assigned but its metadata is not loaded up to the assignment-time end offset yet."""

    kafka_name = "ReplicaNotAvailableException"
