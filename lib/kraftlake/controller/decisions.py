"""What a controller decision is made of (ADR 0003): records to append plus the response.

Decisions never mutate the image: the caller replays ``Decision.records`` into it exactly like records
read from a real log, so a decided log and a replayed log cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

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


@dataclass
class Decision:
    records: list[dict] = field(default_factory=list)
    response: dict = field(default_factory=dict)


def record(type_: str, data: dict, version: int | None = None) -> dict:
    """A record to append: every field present (Kafka defaults for the rest), newest version by default."""
    spec = registry()[type_]
    return {"type": type_, "version": spec.valid_versions.high if version is None else version,
            "data": {**spec.defaults(), **data}}


def response(type_: str, data: dict, version: int) -> dict:
    spec = registry()[type_]
    return {"type": type_, "version": version, "data": {**spec.defaults(), **data}}


__all__ = ["Context", "Decision", "error_code", "record", "response"]
