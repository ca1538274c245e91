"""What one input may hold and what reading it may cost.

Inputs come from strangers: a log directory copied from anywhere, event files written by hand or by
other tools. A reader of them holds, at any moment, at most one batch, one Avro block or one line, each
bounded here by a setting (``kraftlake.decode.*``, defaults in ``conf/kraftlake.properties``) chosen
above anything Kafka itself writes, so every real log passes. Values must also fit the warehouse's
columns and Kafka's own bounds: a part that does not is rejected with its location, never a crash in
Arrow far from where it came in.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

from kraftlake.metadata.config import DECODE_LIMITS, setting
from kraftlake.metadata.schemas import INT_RANGES

INT64 = INT_RANGES["int64"]
INT32 = INT_RANGES["int32"]
# metadata_log keeps event time as Arrow timestamp[us] (schemas/tables): milliseconds beyond int64 / 1000
# cannot be stored
TIMESTAMP_MS = (INT64[0] // 1000 + 1, INT64[1] // 1000)
# Kafka's generated message classes refuse a string longer than this many UTF-8 bytes, reading or writing
STRING_MAX_BYTES = 0x7FFF
# Kafka's Topic.validate
TOPIC_NAME_MAX_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC: a ConfigRecord of this type names a topic

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 80
_SHORT.maxlist = _SHORT.maxdict = 6
_SHORT.maxlevel = 3


@dataclass(frozen=True)
class Limits:
    """The bounds a reader applies, from the ``kraftlake.decode.*`` settings."""

    batch_bytes: int  # a batch's declared size and its records once decompressed; an Avro block decompressed
    record_bytes: int  # one record: a batch of n records decompresses to at most n times this
    event_bytes: int  # one hand-written event: a JSON line, an Avro record's share of its block

    @classmethod
    def from_settings(cls, config: Mapping[str, str] | None = None) -> Limits:
        """From a job's settings, the shipped defaults for what they leave out."""
        batch, record, event = (int(setting(config or {}, key)) for key in DECODE_LIMITS)
        return cls(batch, record, event)

    def decompressed(self, record_count: int) -> int:
        """The most a compressed batch of ``record_count`` records may decompress to."""
        return min(self.batch_bytes, max(record_count, 0) * self.record_bytes)

    def avro_block(self, record_count: int) -> int:
        """The most an Avro block of ``record_count`` records may decompress to."""
        return min(self.batch_bytes, max(record_count, 0) * self.event_bytes)


@lru_cache(maxsize=1)
def default_limits() -> Limits:
    """The shipped defaults' limits, for readers that were handed none."""
    return Limits.from_settings()


class TooLarge(ValueError):
    """An input part that would cost more than its limit; nothing of it beyond the limit was produced."""

    error = "MESSAGE_TOO_LARGE"


def shown(value: Any) -> str:
    """``value`` as a message quotes it: a repr, shortened however large or deep the input's value is
    (a rejection's reason must not become the input), non-printable characters escaped."""
    try:
        return _SHORT.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return f"<{type(value).__name__} too large to print>"


def topic_name_problem(name: str, show: Callable[[str], str] = str) -> str | None:
    """Why Kafka's ``Topic.validate`` refuses ``name``, in its words, or None; ``show`` writes the name
    into the message (Kafka writes it whole)."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LENGTH} characters, "
                f"Topic name: {show(name)}")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (f'Topic name "{show(name)}" is illegal, it contains a character other than ASCII alphanumerics, '
                "'.', '_' and '-'")
    return None


def named_topic_problem(type_: str, data: Mapping[str, Any]) -> str | None:
    """Why a record naming a topic cannot have been written by Kafka, whose controller validates every
    topic name before it writes a record carrying one (``TopicRecord``, and ``ConfigRecord`` of a topic),
    the name shortened and escaped."""
    if type_ == "TopicRecord":
        name = data.get("Name")
    elif type_ == "ConfigRecord" and data.get("ResourceType") == TOPIC_RESOURCE:
        name = data.get("ResourceName")
    else:
        return None
    return topic_name_problem(name, lambda n: shown(n)[1:-1]) if isinstance(name, str) else None
