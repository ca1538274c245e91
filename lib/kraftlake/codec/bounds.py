"""What one input may hold and what reading it may cost.

Inputs come from strangers: a log directory copied from anywhere, event files written by hand or by
other tools. A reader of them holds, at any moment, at most one batch, one Avro block or one line, each
bounded here by a setting (``kraftlake.decode.*``, defaults in ``conf/kraftlake.properties``) chosen
above anything Kafka itself writes, so every real log passes. Values must also fit the warehouse's
columns and Kafka's own bounds: a part that does not is rejected with its location, never a crash in
Arrow far from where it came in.

Where an event lands in the log is bounded too: one offset far past the log's end would become its end
(every later event numbered after it, up to where int64 ends), one timestamp far in the future would be
the moment every broker session expires at. What the log's end and the clock allow is checked where
both are known, as the event enters ``metadata_log`` (``kraftlake.ingest.offset.max.gap``,
``kraftlake.ingest.timestamp.after.max.ms``); the decoders bound event time below, at the epoch.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

from kraftlake.metadata.config import DECODE_LIMITS, INGEST_BOUNDS, setting
from kraftlake.metadata.schemas import INT_RANGES

INT64 = INT_RANGES["int64"]
INT32 = INT_RANGES["int32"]
# metadata_log keeps event time as Arrow timestamp[us] (schemas/tables): milliseconds beyond int64 / 1000
# cannot be stored; and none before the epoch (Kafka's producer refuses a negative timestamp, and KRaft
# stamps every record with its append time)
TIMESTAMP_MS = (0, INT64[1] // 1000)
# the highest offset an event may take: the log's next offset must still be an int64
OFFSET_MAX = INT64[1] - 1
# Kafka's segment keeps offsets relative to its base offset in 4-byte index entries: a batch of a segment
# lies within base..base + this
SEGMENT_OFFSET_SPAN = INT32[1]
# Kafka's generated message classes refuse a string longer than this many UTF-8 bytes, reading or writing
STRING_MAX_BYTES = 0x7FFF
# Kafka's Topic.validate
TOPIC_NAME_MAX_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC: a ConfigRecord of this type names a topic

OFFSET_GAP, TIMESTAMP_AHEAD = INGEST_BOUNDS

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 80
_SHORT.maxlist = _SHORT.maxdict = 6
_SHORT.maxlevel = 3


def _shipped(key: str) -> Callable[[], int]:
    """The shipped default of ``key``, when asked: limits made for decoding alone take the ingest bounds
    the defaults file gives."""
    return lambda: int(setting({}, key))


@dataclass(frozen=True)
class Limits:
    """The bounds a reader applies, from the ``kraftlake.decode.*`` settings, and those an event's offset
    and timestamp must keep as it enters the log (``kraftlake.ingest.offset.max.gap``,
    ``kraftlake.ingest.timestamp.after.max.ms``)."""

    batch_bytes: int  # a batch's declared size and its records once decompressed; an Avro block decompressed
    record_bytes: int  # one record: a batch of n records decompresses to at most n times this
    event_bytes: int  # one hand-written event: a JSON line, an Avro record's share of its block
    offset_gap: int = field(default_factory=_shipped(OFFSET_GAP))  # offsets an event may lie past the log's end
    ahead_ms: int = field(default_factory=_shipped(TIMESTAMP_AHEAD))  # ms an event may lie past the clock

    @classmethod
    def from_settings(cls, config: Mapping[str, str] | None = None) -> Limits:
        """From a job's settings, the shipped defaults for what they leave out."""
        batch, record, event, gap, ahead = (int(setting(config or {}, key)) for key in (*DECODE_LIMITS, *INGEST_BOUNDS))
        return cls(batch, record, event, gap, ahead)

    def decompressed(self, record_count: int) -> int:
        """The most a compressed batch of ``record_count`` records may decompress to."""
        return min(self.batch_bytes, max(record_count, 0) * self.record_bytes)

    def avro_block(self, record_count: int) -> int:
        """The most an Avro block of ``record_count`` records may decompress to."""
        return min(self.batch_bytes, max(record_count, 0) * self.event_bytes)

    def placement_problem(self, offset: int, timestamp: int, log_end: int, now_ms: int) -> tuple[str, str] | None:
        """(Kafka's error name, why) when an event may not enter a log ending at ``log_end`` (-1: empty) at
        ``offset``, written at ``now_ms`` (the clock of the job writing it); None when it may. A timestamp
        so far ahead cannot be a record's append time, and event time drives the controller's timeouts:
        one event far ahead would be the moment every broker session expires."""
        if timestamp - now_ms > self.ahead_ms:
            return "INVALID_TIMESTAMP", (f"timestamp {timestamp} is {timestamp - now_ms:,} ms ahead of this job's "
                                         f"clock ({now_ms}), more than {TIMESTAMP_AHEAD} ({self.ahead_ms:,})")
        problem = self.offset_problem(offset, log_end)
        return None if problem is None else ("INVALID_RECORD", problem)

    def offset_problem(self, offset: int, log_end: int) -> str | None:
        """Why the log ending at ``log_end`` cannot go on at ``offset``, or None: so far past its end that it
        cannot be its next record (a real log's gap after retention is far smaller), or so high that no
        offset is left after it."""
        if offset > OFFSET_MAX:
            return f"offset {offset} leaves no offset for the log's next event (at most {OFFSET_MAX})"
        if offset - log_end > self.offset_gap:
            return (f"offset {offset} is {offset - log_end:,} past the log's end ({log_end}), more than "
                    f"{OFFSET_GAP} ({self.offset_gap:,})")
        return None


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
    """Why Kafka's ``Topic.validate`` refuses ``name``, in its words (Kafka 4), or None; ``show`` writes
    the name into the message (Kafka writes it whole). The length is Java's, in UTF-16 code units, so a
    name of characters beyond the BMP breaks the same rule as in Kafka."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name.encode("utf-16-le", "surrogatepass")) // 2 > TOPIC_NAME_MAX_LENGTH:
        reason = f"the length of '{show(name)}' is longer than the max allowed length {TOPIC_NAME_MAX_LENGTH}"
    elif not _LEGAL_TOPIC_NAME.fullmatch(name):
        reason = f"'{show(name)}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return None
    return f"Topic name is invalid: {reason}"


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
