"""The local Tansu broker's pause: the fault tests rely on a paused broker answering nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from consumers.broker import LocalBroker


def thread_states(pid: int) -> list[str]:
    return [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in Path(f"/proc/{pid}/task").iterdir()]


def test_pause_returns_once_every_thread_has_stopped(tmp_path) -> None:
    with LocalBroker(log_path=tmp_path / "tansu.log").start() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        busy = threading.Event()

        def ask() -> None:  # keeps the broker's threads serving while it is paused
            while not busy.is_set():
                try:
                    admin.list_topics(timeout=0.2)
                except KafkaException:
                    pass

        asker = threading.Thread(target=ask)
        asker.start()
        try:
            for _ in range(20):
                broker.pause()
                states = thread_states(broker.pid)
                assert states and set(states) <= {"T", "t"}, states
                broker.resume()
            broker.pause()
            with pytest.raises(KafkaException):
                AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=1)
            broker.resume()
            assert AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10).brokers
        finally:
            busy.set()
            asker.join()
