"""The one logging setup of every command: lines on stderr, as text for people or one JSON object per line
(``--log-format json``, the default of ``rlmm serve``) with the fields a call adds through ``extra=``
(method, code, peer, ...). A JSON line's ``ts`` is ISO-8601 in UTC to the millisecond
(``2026-11-28T05:10:46.123Z``), as log pipelines parse it."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": _iso_utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update((k, v) for k, v in vars(record).items() if k not in _STANDARD)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def _iso_utc(epoch_seconds: float) -> str:
    """``2026-11-28T05:10:46.123Z``: ISO-8601, UTC, milliseconds."""
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def setup_logging(level: str, fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
