"""What a controller decision is made of (ADR 0003): records to append plus the response.

Decisions never mutate the image: the caller replays ``Decision.records`` into it exactly like records
read from a real log, so a decided log and a replayed log cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

from kraftlake.image.partition_changes import Shaped
from kraftlake.metadata.errors import api_message, error_code
from kraftlake.metadata.schemas import registry


class Refused(Exception):
    """A request (or one topic or partition of it) the controller refuses: Kafka's ``ApiException``,
    its error name and message. Managers raise it where Kafka throws; the response carries both."""

    def __init__(self, error: str, message: str | None = None):
        super().__init__(message)
        self.error = error
        self.message = api_message(error, message)  # what the response carries, as ApiError.fromThrowable


@dataclass
class Context:
    """What a decision may depend on besides the image: event time, configs, which topics are ours."""

    now_ms: int
    offset: int
    config: Mapping[str, str] = field(default_factory=dict)
    owns: Callable[[str], bool] = lambda topic_id: True
    cluster_id: str | None = None
    # Brokers the controller's heartbeat soft state has in controlled shutdown (replica placement
    # skips them, as Kafka's BrokerHeartbeatManager.usableBrokers does)
    shutting_down: frozenset[int] = frozenset()
    # Whether the image holds every partition (one controller shard). Only then can a decision tell
    # that a broker leads no partition anywhere (see cluster_control.decide_broker_heartbeat).
    whole_image: bool = True
    # The caller's cache of each topic's leader election (``replication.topic_election``) by topic name,
    # which it empties whenever a config may have changed; None: looked up every time
    elections: dict | None = None


class Records(Sequence):
    """A decision's records in order, some of them held as columns until read one by one
    (``partition_changes.Shaped``: a failover's). Reads as a list of record dicts, and adds up with lists
    and other ``Records`` as a list does, keeping the columns; ``parts`` is what the shard step applies
    (docs/performance.md: a broker's failure at 10^6 partitions)."""

    def __init__(self, parts: Iterable[list[dict] | Shaped] = ()) -> None:
        # lists copied (an append to one sum is not another's), empty parts dropped
        self.parts: list[list[dict] | Shaped] = [p if isinstance(p, Shaped) else list(p) for p in parts if len(p)]

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __iter__(self) -> Iterator[dict]:
        for part in self.parts:
            yield from (part.records() if isinstance(part, Shaped) else part)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return list(self)[index]
        at = index + len(self) if index < 0 else index
        for part in self.parts:
            if 0 <= at < len(part):
                return (part.records() if isinstance(part, Shaped) else part)[at]
            at -= len(part)
        raise IndexError("record index out of range")

    def __add__(self, other: object) -> Records:
        if isinstance(other, Records):
            return Records(self.parts + other.parts)
        return Records(self.parts + [other]) if isinstance(other, list) else NotImplemented

    def __radd__(self, other: object) -> Records:
        return Records([other] + self.parts) if isinstance(other, list) else NotImplemented

    def append(self, item: dict) -> None:
        if self.parts and isinstance(self.parts[-1], list):
            self.parts[-1].append(item)
        else:
            self.parts.append([item])

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, Records)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Records({list(self)!r})"


@dataclass
class Decision:
    records: list[dict] | Records = field(default_factory=list)
    response: dict = field(default_factory=dict)


def record(type_: str, data: dict, version: int | None = None) -> dict:
    """A record to append: every field present (Kafka defaults for the rest), newest version by default."""
    spec = registry()[type_]
    return {"type": type_, "version": spec.valid_versions.high if version is None else version,
            "data": {**spec.defaults(), **data}}


def response(type_: str, data: dict, version: int) -> dict:
    spec = registry()[type_]
    return {"type": type_, "version": version, "data": {**spec.defaults(), **data}}


__all__ = ["Context", "Decision", "Records", "error_code", "record", "response"]
