"""The checks of ``snapshot build`` that need no Spark, run before Spark starts (it takes seconds): the
output directory, the input (the broker reachable and the topic there, or the archive), and an older
snapshot of the same topic for an incremental build."""

from __future__ import annotations

from pathlib import Path

from rlmm.errors import SnapshotError
from snapshots.format import read_manifest


def check_build_inputs(
    out: str | Path, *, bootstrap: str | None, topic: str, archive_dir: str | Path | None, base_dir: str | Path | None
) -> None:
    """Raises ``SnapshotError`` (or what the Kafka client raises for an unreachable broker) for a build that
    cannot succeed."""
    if Path(out).exists():
        raise SnapshotError(f"{out} exists: a snapshot is written into a new directory")
    if archive_dir is not None:
        from snapshots.archive import read_archive_manifest

        topic = read_archive_manifest(archive_dir)["topic"]
    else:
        from snapshots.kafka_io import num_partitions

        num_partitions(str(bootstrap), topic)
    if base_dir is not None:
        base_topic = read_manifest(base_dir).get("topic")
        if base_topic is not None and base_topic != topic:
            raise SnapshotError(
                f"{base_dir} is a snapshot of the topic {base_topic!r}, the input is {topic!r}: "
                f"folding one on the other would mix two histories"
            )
