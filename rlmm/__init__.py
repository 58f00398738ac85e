"""rlmm: Kafka tiered storage's RemoteLogMetadataManager as a service."""

from rlmm.compiled import choose_build

choose_build()
