"""A quarantined record: a raw value of the topic that does not decode, kept with where it was and why."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Final

from rlmm.errors import DecodeError
from rlmm.state import keys as K

_HEADER_LEN: Final = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    metadata_partition: int
    offset: int
    reason: str
    kafka_error: str
    kafka_cause: str | None
    value: bytes | None

    @classmethod
    def of(cls, metadata_partition: int, offset: int, value: bytes | None, error: DecodeError) -> QuarantinedRecord:
        """The entry of a value that ``rlmm.state.classify.classify`` found undecodable, for ``error``."""
        return cls(metadata_partition, offset, str(error), error.kafka_exception, error.kafka_cause, value)

    def as_json(self, values: bool = True) -> dict[str, object]:
        """The form ``rlmm quarantine`` prints (``values``: with the record's bytes as hex)."""
        line: dict[str, object] = {
            "metadata_partition": self.metadata_partition,
            "offset": self.offset,
            "error": self.kafka_error,
            "cause": self.kafka_cause,
            "reason": self.reason,
            "null": self.value is None,
        }
        if values:
            line["hex"] = None if self.value is None else self.value.hex()
        return line

    def pack(self) -> bytes:
        header = json.dumps(
            {
                "reason": self.reason,
                "kafka_error": self.kafka_error,
                "kafka_cause": self.kafka_cause,
                "null": self.value is None,
            }
        ).encode()
        return _HEADER_LEN.pack(len(header)) + header + (self.value or b"")

    @classmethod
    def unpack(cls, key: bytes, data: bytes) -> QuarantinedRecord:
        (length,) = _HEADER_LEN.unpack_from(data)
        header = json.loads(data[2 : 2 + length])
        value = None if header["null"] else data[2 + length :]
        return cls(
            K.read_u32(key),
            K.read_offset(key, 4),
            header["reason"],
            header["kafka_error"],
            header["kafka_cause"],
            value,
        )
