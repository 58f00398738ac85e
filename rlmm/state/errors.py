"""Query errors, each named after the Kafka exception a broker would see."""


class KafkaStateError(Exception):
    kafka_name = "KafkaException"


class RemoteResourceNotFound(KafkaStateError):
    """Partition not assigned, its metadata removed, or an epoch listing names a segment that is gone."""

    kafka_name = "RemoteResourceNotFoundException"


class ReplicaNotAvailable(KafkaStateError):
    """Partition assigned but its metadata is not loaded up to the assignment-time end offset yet."""

    kafka_name = "ReplicaNotAvailableException"


class ViewError(Exception):
    """The view cannot be used: missing, of another schema, held by another process, or its storage failed."""


class ViewNotFound(ViewError):
    pass


class ViewSchemaMismatch(ViewError):
    pass


class ViewInUse(ViewError):
    """Another process holds the view's lock (RocksDB opens a view for writing in one process only)."""


class ViewStorageFailed(ViewError):
    """RocksDB failed a read or a write (an I/O error, a full disk): the operation did not happen."""


class ViewDamaged(ViewStorageFailed):
    """RocksDB found the view's files damaged (a block checksum mismatch, a truncated file). Nothing read from
    the view can be trusted any more: it must be restored from a snapshot or rebuilt from the topic."""
