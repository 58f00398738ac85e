"""The metadata topic stays the one the view was built from.

The topic's id and partition count are stored in the view on first sight, and checked at start, every
``TOPIC_CHECK_S`` and before anything is applied after the connection to the broker broke. A change (the id, the
count, the topic gone, or offsets that went backwards, which the consumer sees) raises ``TopicChangedError``
before the batch that showed it is applied: a view never mixes two histories. Used by the consumer's thread only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import NoReturn

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from consumers import view_state
from consumers.config import RlmmConfig
from consumers.topic import describe_topic
from rlmm.errors import KafkaClientCrashed, TopicChangedError, TopicMismatchError
from rlmm.state.view import View

log = logging.getLogger(__name__)

TOPIC_CHECK_S = 5.0  # how often the topic's id and partition count are checked while consuming
TOPIC_CHECK_TIMEOUT_S = 2.0
UNVERIFIED_WAIT_S = 0.1  # wait before a check the broker could not answer is made again


class TopicGuard:
    def __init__(self, view: View, config: RlmmConfig) -> None:
        self.view, self.config = view, config
        self.changes: Counter[str] = Counter()  # changes of the topic detected, by kind
        self.reset()

    def reset(self) -> None:
        """As a start (or a restart after the view failed) finds it: nothing applied before a check."""
        self.topic_id: str | None = None  # stored in the view
        self.view_partitions: int | None = None  # the topic's partition count, stored in the view
        self.unverified = True
        self._check_due = 0.0
        self._missing = 0  # consecutive checks that did not find the topic

    def load(self, state: dict[bytes, bytes]) -> None:
        """What the view recorded of its topic (its consumer state)."""
        self.topic_id = view_state.topic_id_of(state)
        self.view_partitions = view_state.num_partitions_of(state)

    def check_configured_count(self) -> None:
        """A configured partition count that is not the view's is refused (``TopicMismatchError``)."""
        recorded = self.view_partitions
        if recorded is not None and recorded != self.config.num_partitions:
            raise TopicMismatchError(
                f"the view was built from a metadata topic of {recorded} partitions, but "
                f"remote.log.metadata.topic.num.partitions is {self.config.num_partitions}: leave the setting "
                f"out (the view's count is then taken) or set it to {recorded}; for a topic of another count, "
                f"rebuild the view (rlmm serve --reset, rlmm consume --reset)"
            )

    def connection_broke(self) -> None:
        """Nothing more is applied until the topic was checked again (the broker may have lost it)."""
        self.unverified = True

    def checked(self, admin: AdminClient, stopping: threading.Event) -> bool:
        """Check the topic when due; whether records may be applied now (not before a check that the
        broker could not answer since the connection broke)."""
        now = time.monotonic()
        if self.unverified or now >= self._check_due:
            if self.verify(admin):
                self.unverified = False
            self._check_due = now + TOPIC_CHECK_S
        if self.unverified:
            stopping.wait(UNVERIFIED_WAIT_S)
            self._check_due = 0.0
            return False
        return True

    def verify(self, admin: AdminClient) -> bool:
        """Whether the broker confirmed the topic is the view's; raises ``TopicChangedError`` when it is
        not. False when the broker could not tell (unreachable, or the topic missing once)."""
        topic = self.config.topic
        try:
            identity = describe_topic(admin, topic, TOPIC_CHECK_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("cannot check the metadata topic now: %s", exc)
            return False
        finally:
            admin.poll(0)  # serve the client's log lines
        if identity is None:
            self._missing += 1
            if self._missing >= 2:
                self.changed("topic_deleted", f"the broker no longer knows the metadata topic {topic!r}")
            return False
        self._missing = 0
        if identity.partitions != self.config.num_partitions:
            self.changed(
                "partition_count_changed",
                f"the metadata topic {topic!r} now has {identity.partitions} "
                f"partitions, not {self.config.num_partitions}",
            )
        first_sight = {}
        if self.view_partitions is None:
            first_sight[view_state.NUM_PARTITIONS] = view_state.num_partitions_value(identity.partitions)
        if identity.topic_id is not None:
            if self.topic_id is None:
                first_sight[view_state.TOPIC_ID] = identity.topic_id.encode()
            elif identity.topic_id != self.topic_id:
                self.changed(
                    "topic_id_changed",
                    f"the metadata topic {topic!r} now has the topic id "
                    f"{identity.topic_id}, the view was built from topic id {self.topic_id}",
                )
        if first_sight:
            with self.view.batch() as batch:
                for key, value in first_sight.items():
                    batch.put_consumer_state(key, value)
            self.topic_id = self.topic_id or identity.topic_id
            self.view_partitions = identity.partitions
        return True

    def explain(self, admin: AdminClient, crash: KafkaClientCrashed) -> None:
        """The Kafka client crashed: raise ``TopicChangedError`` if the topic changed under it (librdkafka
        crashes on a topic deleted while it fetches, see ``consumers/client_process.py``); the crash is its
        cause."""
        self._missing = max(self._missing, 1)  # the crash was the first sign of a missing topic
        try:
            self.verify(admin)
        except TopicChangedError as exc:
            raise TopicChangedError(exc.kind, self.config.topic, f"{exc.seen} ({crash})") from crash

    def changed(self, kind: str, seen: str) -> NoReturn:
        self.changes[kind] += 1
        raise TopicChangedError(kind, self.config.topic, seen)
