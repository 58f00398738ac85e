"""Fixtures of the broker tests: one broker for the session (see ``tests/kafka_broker.py``, one per pytest-xdist
worker), a fresh metadata topic per test; and the order in which the workers take the modules."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from consumers.config import RlmmConfig
from tests.kafka_broker import BrokerUnavailable, start_broker


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> Iterator:
    try:
        broker = start_broker(tmp_path_factory.mktemp("broker"))
    except BrokerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield broker
    broker.stop()


@pytest.fixture
def rlmm_config(kafka) -> Callable[..., RlmmConfig]:
    """``rlmm_config(num_partitions=3, **settings)``: a configuration with a topic of its own."""

    def make(num_partitions: int = 3, **settings) -> RlmmConfig:
        return RlmmConfig(
            kafka.bootstrap_servers,
            topic=f"rlmm-test-{uuid.uuid4().hex[:12]}",
            num_partitions=num_partitions,
            replication_factor=1,
            min_insync_replicas=1,
            **settings,
        )

    return make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that hold a test marked ``slow`` first, in their order, then the others: pytest-xdist's workers
    (``--dist loadfile``, pyproject.toml) take modules in this order, and the short ones fill the end of the run."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)
