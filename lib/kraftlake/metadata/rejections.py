"""What could not be used, and where it was: every reader reports bad input this way, so it lands in ``rejected``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

RAW_LIMIT = 1024 * 1024  # raw bytes kept per rejection; the location always points at the whole part


@dataclass
class Rejection:
    """A part of the input that could not be used."""

    source: str
    position: int | None
    offset: int | None
    error: str  # Kafka's error name where one fits
    reason: str
    raw: bytes | None = None
    raw_length: int | None = None
    type: str | None = None
    version: int | None = None
    unit: str = "byte"  # what position counts: byte (binary files), line (JSON lines), record (Avro)

    def describe(self) -> str:
        where = self.source
        if self.position is not None:
            where += f" at {self.unit} {self.position}"
        if self.offset is not None:
            where += f" (offset {self.offset})"
        return f"{where}: {self.error}: {self.reason}"


Item = Union[dict, Rejection]
