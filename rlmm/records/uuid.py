"""Kafka's text form of a ``Uuid``: URL-safe base64 of its 16 bytes, without padding (22 chars)."""

from __future__ import annotations

import base64
import re

# 21 free characters, then one whose low 4 bits are zero: 22 * 6 = 132 bits carry the 128.
_TEXT = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")
_STANDARD_TO_URL_SAFE = str.maketrans("+/", "-_")


def uuid_to_str(b: bytes) -> str:
    if len(b) != 16:
        raise ValueError(f"a uuid is 16 bytes, got {len(b)}")
    return base64.urlsafe_b64encode(b)[:22].decode("ascii")


def uuid_from_str(s: object) -> bytes:
    """Inverse of :func:`uuid_to_str`; refuses any other text, including non-canonical spellings."""
    if not isinstance(s, str) or not _TEXT.fullmatch(s):
        raise ValueError(f"not a Kafka uuid (22 URL-safe base64 characters, no padding): {s!r}")
    return base64.urlsafe_b64decode(s + "==")


def uuid_text(s: str) -> str:
    """Kafka's text form of a uuid written in it or in standard base64 (``+`` and ``/``, padded or not), as
    librdkafka's ``Uuid`` prints a topic id and as views and snapshots of rlmm 0.1 stored it. Other text is
    returned as it is: an id is compared, never decoded."""
    return s.translate(_STANDARD_TO_URL_SAFE).rstrip("=")
