"""Kafka UUIDs in text.

Kafka prints a Uuid as URL-safe base64 of its 16 bytes without padding (``Uuid.toString()``), which is
what operators see in ``kafka-topics.sh`` and ``kafka-dump-log.sh``; other tools print the dashed hex
form. Everything in kraftlake stores Kafka's form and accepts both on input.
"""

from __future__ import annotations

import base64
import binascii
import uuid as _uuid

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID: the default of every uuid field


_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def from_bytes(raw: bytes) -> str:
    if len(raw) != 16:
        raise ValueError(f"a Kafka Uuid is 16 bytes, got {len(raw)}")
    # base64.urlsafe_b64encode, without its calls: every topic's records carry one
    return binascii.b2a_base64(raw, newline=False)[:22].translate(_URL_SAFE).decode("ascii")


def to_bytes(text: str) -> bytes:
    """Parse either Kafka's base64 form or the dashed hex form."""
    if not isinstance(text, str):
        raise ValueError(f"a Uuid must be a string, got {type(text).__name__}")
    if len(text) == 22:
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"not a Kafka Uuid: {text!r}") from exc
        if len(raw) == 16 and from_bytes(raw) == text:
            return raw
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    try:
        return _uuid.UUID(text).bytes
    except ValueError as exc:
        raise ValueError(f"not a Uuid (neither Kafka's base64 form nor dashed hex): {text!r}") from exc


def normalize(text: str) -> str:
    """Kafka's form of a Uuid given in either form."""
    return from_bytes(to_bytes(text))


def to_hex(text: str) -> str:
    """The dashed hex form, as written by tools outside Kafka."""
    return str(_uuid.UUID(bytes=to_bytes(text)))
