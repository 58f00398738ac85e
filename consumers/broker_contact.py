"""Whether the consumer reaches the Kafka brokers: the brokers up and the time since the last response (from
librdkafka's statistics), and since when no broker has answered, with the last error, for the status and the
``connection_problem`` that ``rlmm serve`` and ``rlmm consume`` report."""

from __future__ import annotations

import json
import time

UNREACHABLE_AFTER_S = 2.0  # how long no broker may answer before the status says so


class BrokerContact:
    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.brokers_up = 0
        self.ms_since_response: float | None = None
        self._unreachable: tuple[float, str] | None = None  # since when no broker answers, the last error

    def trying(self, error: str = "no answer yet") -> None:
        """An attempt to reach the brokers has not been answered (yet)."""
        since = time.monotonic() if self._unreachable is None else self._unreachable[0]
        self._unreachable = since, error

    def reached(self) -> None:
        self._unreachable = None

    def on_stats(self, stats_json: str) -> None:
        brokers = [b for b in json.loads(stats_json)["brokers"].values() if b["nodeid"] >= 0]
        idle = [b["rxidle"] for b in brokers if b["state"] == "UP" and b["rxidle"] >= 0]
        self.brokers_up = sum(b["state"] == "UP" for b in brokers)
        self.ms_since_response = min(idle) / 1000 if idle else None
        if self.brokers_up:
            self.reached()

    @property
    def problem(self) -> str | None:
        """Why the topic cannot be read now: no broker has answered for a while (the last error)."""
        unreachable = self._unreachable
        if unreachable is None or time.monotonic() - unreachable[0] < UNREACHABLE_AFTER_S:
            return None
        since, error = unreachable
        return (
            f"no Kafka broker of {self.bootstrap_servers} has answered for {time.monotonic() - since:.0f} s ({error})"
        )
