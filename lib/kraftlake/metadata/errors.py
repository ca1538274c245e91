"""Kafka's error codes by name (``schemas/error-codes.json``): responses and rejections speak Kafka's names."""

from __future__ import annotations

import json
from functools import lru_cache

from kraftlake.metadata.schemas import schema_dir


@lru_cache(maxsize=1)
def error_codes() -> dict[str, int]:
    """Kafka's error names and codes (``schemas/error-codes.json``), e.g. ``STALE_BROKER_EPOCH``: 77."""
    return json.loads((schema_dir() / "error-codes.json").read_text())


def error_code(name: str) -> int:
    """The code of a Kafka error name; an unknown name is a bug, so it raises."""
    return error_codes()[name]


def error_name(code: int | None) -> str | None:
    """Kafka's name of an error code (``NONE`` for 0); None for None or a code Kafka does not define."""
    return None if code is None else _error_names().get(code)


@lru_cache(maxsize=1)
def _error_names() -> dict[int, str]:
    return {code: name for name, code in error_codes().items()}


# Kafka's default message (``Errors.message()``) of the errors whose message the controller's answers
# show or compare with; the texts of Kafka's ``Errors`` enum.
DEFAULT_MESSAGES = {
    "UNKNOWN_TOPIC_OR_PARTITION": "This server does not host this topic-partition.",
    "PREFERRED_LEADER_NOT_AVAILABLE": "The preferred leader was not available.",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": "Eligible topic partition leaders are not available.",
    "ELECTION_NOT_NEEDED": "Leader election not needed for topic partition.",
    "NO_REASSIGNMENT_IN_PROGRESS": "No partition reassignment is in progress.",
}


def api_message(error: str, message: str | None) -> str | None:
    """The message a response carries for an exception, as Kafka's ``ApiError.fromThrowable`` gives it:
    none when the exception only repeats the error's default message."""
    return None if message is not None and message == DEFAULT_MESSAGES.get(error) else message

