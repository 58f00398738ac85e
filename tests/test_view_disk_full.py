"""A view on a disk that fills up: the write that fails is not applied, the service turns NOT_SERVING with
the cause in its status, and once space is freed it writes again by itself and applies every record
exactly once, as a clean replay does. A real, small tmpfs (the tests run as root, as CI does) holding a
real view, a real broker."""

from __future__ import annotations

import gc
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from consumers.client_process import ConsumerProcess
from consumers.clients import ConfluentClients
from consumers.consumer import MetadataConsumer
from consumers.manager import RemoteLogMetadataManager
from consumers.topic import ensure_topic
from consumers.watcher import OffsetWatcher
from rlmm.errors import ViewStorageFailed
from rlmm.records import metadata_partition
from rlmm.server.backend import Backend
from rlmm.state import keys as K
from rlmm.state.view import CONSUMER_STATE_PREFIX, View
from tests.grpc_support import fill_view, segment
from tests.kafka_broker import RawProducer
from tests.test_broker_topic_change import TP, finished_records

PARTITIONS = 3
MP = metadata_partition(TP.topic_id, TP.partition, PARTITIONS)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 24 MB tmpfs. Mounting needs root (CI runs as root): without it the test fails, it never skips."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"cannot mount a tmpfs for the full-disk test (run as root): {done.stderr.strip()}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Write a ballast file until the disk has no room left."""
    ballast = disk / "ballast"
    with ballast.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError as exc:
            assert exc.errno == 28  # ENOSPC
    return ballast


def wait_until(condition, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_full_disk_stops_applying_and_recovers_once_space_is_freed(rlmm_config, small_disk, tmp_path) -> None:
    config = rlmm_config(num_partitions=PARTITIONS)
    ensure_topic(AdminClient(config.admin_config()), config)
    producer = RawProducer(config.bootstrap_servers, config.topic)
    records = finished_records(TP, 40)
    with View(small_disk / "view") as view, RemoteLogMetadataManager(view, config, [TP]) as rlmm:
        backend = Backend(view, rlmm)
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        producer.produce(records[:20])
        rlmm.wait_applied(MP, 19, timeout=30)
        ballast = fill(small_disk)
        producer.produce(records[20:])
        assert wait_until(lambda: rlmm.consumer.storage_failure is not None)
        assert not backend.serving() and "No space left on device" in backend.status().failure
        assert view.metadata_offsets() == {MP: 19}  # the batch that failed was not applied
        assert rlmm.queries.is_ready(TP)  # reads go on from the view meanwhile
        time.sleep(1)  # a few attempts fail while the disk stays full
        assert rlmm.consumer.storage_failure is not None and rlmm.consumer.failure is None

        os.remove(ballast)
        assert wait_until(lambda: backend.serving() and view.metadata_offsets() == {MP: len(records) - 1})
        assert backend.failure() is None and rlmm.consumer.storage_failures == 1
        assert rlmm.consumer.wait_ready([TP], timeout=30)
        assert len(list(rlmm.queries.list_remote_log_segments(TP))) == 40
        recovered = {
            cf: [(k, v) for k, v in view.items(cf) if not k.startswith(CONSUMER_STATE_PREFIX)]
            for cf in K.COLUMN_FAMILIES
        }

    with View(tmp_path / "clean") as clean:
        with clean.batch() as batch:
            batch.assign(TP)
            for offset, (mp, value) in enumerate(records):
                batch.apply(mp, offset, value)
            batch.mark_ready(TP)
        assert recovered == {cf: list(clean.items(cf)) for cf in K.COLUMN_FAMILIES}  # every record applied once


class RecordingClients(ConfluentClients):
    """The real clients, each consumer kept to look at."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.consumers: list[ConsumerProcess] = []

    def consumer(self, on_error, on_stats) -> ConsumerProcess:
        self.consumers.append(super().consumer(on_error, on_stats))
        return self.consumers[-1]


def test_the_consumer_takes_a_new_client_from_its_factory_after_the_view_refused_a_write(
    rlmm_config, small_disk
) -> None:
    config = rlmm_config(num_partitions=PARTITIONS)
    ensure_topic(AdminClient(config.admin_config()), config)
    producer = RawProducer(config.bootstrap_servers, config.topic)
    records = finished_records(TP, 10)
    clients = RecordingClients(config)
    with View(small_disk / "view") as view:
        consumer = MetadataConsumer(view, config, OffsetWatcher(), clients, [TP])
        consumer.start()
        try:
            assert consumer.wait_ready([TP], timeout=30)
            assert len(clients.consumers) == 1
            ballast = fill(small_disk)
            producer.produce(records)
            assert wait_until(lambda: consumer.storage_failure is not None)
            os.remove(ballast)
            assert wait_until(lambda: consumer.initialized and view.metadata_offsets() == {MP: len(records) - 1})
            assert len(clients.consumers) == 2
            # the first was closed when the view refused the write: its process ended
            assert not Path(f"/proc/{clients.consumers[0].pid}").exists()
        finally:
            consumer.stop()


def test_reads_while_a_reopening_waits_for_a_stream_fail_as_retryable(tmp_path) -> None:
    """A listing streamed to a client holds an iterator of the database: a reopening (after a failed write) fails
    until the stream ends, and meanwhile a read fails with ``ViewStorageFailed`` (UNAVAILABLE, retried by
    clients), not a KeyError (INTERNAL); once the stream is gone the reopening succeeds and reads answer."""
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, i * 100, i * 100 + 99) for i in range(3)])
        stream = iter(view.queries.list_remote_log_segments(TP))
        assert next(stream).tp == TP  # the stream is under way
        with pytest.raises(ViewStorageFailed, match="lock"):
            view.reopen()
        with pytest.raises(ViewStorageFailed, match="being opened again after a failed write: no partitions"):
            view.queries.is_ready(TP)
        del stream
        gc.collect()
        view.reopen()
        assert sorted(s.start_offset for s in view.queries.list_remote_log_segments(TP)) == [0, 100, 200]


def test_a_view_whose_reopening_failed_closes(tmp_path) -> None:
    """A service stopped while its view could not be opened again (a stream held it) closes it all the same."""
    view = View(tmp_path / "view")
    fill_view(view, TP, [segment(TP, 0, 99)])
    stream = iter(view.queries.list_remote_log_segments(TP))
    assert next(stream).tp == TP
    with pytest.raises(ViewStorageFailed):
        view.reopen()
    view.close()
    del stream
    gc.collect()
    with View(tmp_path / "view") as again:  # the lock was released
        assert again.queries.is_ready(TP)


def test_a_batch_failing_after_its_block_keeps_none_of_its_changes(tmp_path) -> None:
    """A batch can fail after the caller's block, while its rows are written back (a read of the store that
    fails): what its block changed in the rows the writer keeps across batches must go with it, or the next
    batch would write the failed batch's changes as its own (here, a readiness withdrawn)."""
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 99)])
        with pytest.raises(TypeError), view.batch() as batch:
            batch.mark_not_ready(TP)
            batch.counts[b"not a name"] = 1  # type: ignore[index]  # fails where the counters are written back
        assert view.queries.is_ready(TP)
        fill_view(view, TP, [segment(TP, 100, 199)], ready=False)  # the next batch of the partition
        assert view.queries.is_ready(TP) and view.queries.highest_offset_for_epoch(TP, 0) == 199
