"""How one consumed record was handled, in the compat README's ``apply_result`` form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApplyResult:
    status: str  # applied | ignored | skipped | error
    # ignored: unknown_segment | invalid_transition; skipped: not_assigned | already_processed
    reason: str | None = None
    stage: str | None = None  # error: deserialize | route | handle
    error: str | None = None  # Kafka exception name
    cause: str | None = None

    @property
    def counter(self) -> str:
        """Name of the view counter this result adds to, e.g. ``ignored:invalid_transition``."""
        detail = self.reason or self.error
        return self.status if detail is None else f"{self.status}:{detail}"

    def to_json(self) -> dict:
        out = {"status": self.status}
        for name in ("reason", "stage", "error", "cause"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


APPLIED = ApplyResult("applied")
IGNORED_UNKNOWN_SEGMENT = ApplyResult("ignored", reason="unknown_segment")
IGNORED_INVALID_TRANSITION = ApplyResult("ignored", reason="invalid_transition")
SKIPPED_NOT_ASSIGNED = ApplyResult("skipped", reason="not_assigned")
SKIPPED_ALREADY_PROCESSED = ApplyResult("skipped", reason="already_processed")


def handle_error(error: str) -> ApplyResult:
    return ApplyResult("error", stage="handle", error=error)
