"""The checks of ``snapshot build`` that need no Spark, run before Spark starts (it takes seconds): the
output directory, the input (the broker reachable and the topic there, or the archive), and an older
snapshot of the same topic for an incremental build."""

from __future__ import annotations

from pathlib import Path

from rlmm.errors import SnapshotError
from snapshots.format import manifest_topic_id, read_manifest


def check_build_inputs(
    out: str | Path, *, bootstrap: str | None, topic: str, archive_dir: str | Path | None, base_dir: str | Path | None
) -> str | None:
    """The id of the topic the build reads (None where it is not known). Raises ``SnapshotError`` (or what the
    Kafka client raises for an unreachable broker) for a build that cannot succeed."""
    if Path(out).exists():
        raise SnapshotError(f"{out} exists: a snapshot is written into a new directory")
    if archive_dir is not None:
        from snapshots.archive import read_archive_manifest

        archived = read_archive_manifest(archive_dir)
        topic, topic_id = archived["topic"], manifest_topic_id(archived)
    else:
        from snapshots.kafka_io import topic_id as described_id

        topic_id = described_id(str(bootstrap), topic)  # the topic's description: refused when it is missing
    if base_dir is not None:
        check_base(base_dir, topic, topic_id)
    return topic_id


def check_base(base_dir: str | Path, topic: str, topic_id: str | None) -> None:
    """An incremental build folds the records after the base's offsets onto the base's state: the base must
    hold every partition of the topic, and be of the same topic, not of one deleted and created again since
    (or of another cluster's topic of the same name)."""
    base = read_manifest(base_dir)
    base_topic, base_id = base.get("topic"), manifest_topic_id(base)
    if base_topic is not None and base_topic != topic:
        raise SnapshotError(
            f"{base_dir} is a snapshot of the topic {base_topic!r}, the input is {topic!r}: "
            f"folding one on the other would mix two histories"
        )
    if base.get("source", {}).get("kind") == "export":
        raise SnapshotError(
            f"{base_dir} was exported from a view, which holds only the partitions it served: the records of "
            f"the others before its offsets would be missing. Build on a snapshot made by `rlmm snapshot build`, "
            f"or build a full one"
        )
    if base_id is None or topic_id is None:
        which = "the older snapshot" if base_id is None else "the input"
        raise SnapshotError(
            f"cannot tell whether {base_dir} and the input are the same topic: {which} records no topic id "
            f"(made by an older rlmm, or by a broker without topic ids); build a full snapshot"
        )
    if base_id != topic_id:
        raise SnapshotError(
            f"{base_dir} was built from the topic {topic!r} with id {base_id}, the input has id {topic_id}: the "
            f"topic was deleted and created again since (or is another cluster's); build a full snapshot"
        )
