"""A quorum node's settings under Kafka's ``controller.quorum.*`` names, defaults from the shipped config.

Kept apart from the node so that what a replica ran with (recorded by ``ReplicaStartup``) can be read and
written without the state machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kraftlake.metadata.config import defaults

_CONFIG_KEYS = {
    # field: the Kafka config name (`controller.quorum.*`); the seed's `quorum.*` spelling is accepted too.
    "election_timeout_ms": "controller.quorum.election.timeout.ms",
    "election_jitter_max_ms": "controller.quorum.election.jitter.max.ms",
    "election_backoff_max_ms": "controller.quorum.election.backoff.max.ms",
    "fetch_timeout_ms": "controller.quorum.fetch.timeout.ms",
    "request_timeout_ms": "controller.quorum.request.timeout.ms",
    "retry_backoff_ms": "controller.quorum.retry.backoff.ms",
    "append_interval_ms": "metadata.max.idle.interval.ms",
    # not Kafka configs: how the sans-IO node stands in for the long poll, and the checker's test hook
    "fetch_interval_ms": "kraftlake.quorum.fetch.interval.ms",
    "fetch_max_records": "kraftlake.quorum.fetch.max.records",
    "unsafe_grant_any_vote": "kraftlake.quorum.unsafe.grant.any.vote",
    # which protocol the node speaks: Kafka's shipped one, or the KIP-595 draft's (ADR 0012)
    "protocol": "kraftlake.quorum.protocol",
    # the draft's discovery (DiscoverBrokers): the nodes a starting node asks first, by id
    "bootstrap_servers": "bootstrap.servers",
}
KAFKA = "kafka"
DRAFT = "draft"
PROTOCOLS = (KAFKA, DRAFT)
# Settings that are text, not numbers.
_TEXT_FIELDS = ("protocol", "bootstrap_servers")
# What a draft replica's ReplicaStartup records besides Kafka's configs (a Kafka replica's records none of
# them, so its traffic is what it was before the draft existed).
DRAFT_CONFIG_FIELDS = ("protocol", "bootstrap_servers")
# The RaftConfig fields a ReplicaStartup records (Kafka's configs), so that a replay runs the same node.
KAFKA_CONFIG_FIELDS = ("election_timeout_ms", "election_jitter_max_ms", "election_backoff_max_ms", "fetch_timeout_ms",
                       "request_timeout_ms", "retry_backoff_ms", "append_interval_ms")


def parse_voters(value: str | None) -> tuple[int, ...]:
    """Ids of ``controller.quorum.voters`` (``1@host:9093,2@host:9093``), or of plain ``1,2``."""
    if not value:
        return ()
    return tuple(sorted(int(part.split("@", 1)[0]) for part in value.split(",") if part.strip()))


def _default(name: str) -> int:
    """A RaftConfig field's default: its Kafka config's value in the shipped defaults."""
    return int(defaults()[_CONFIG_KEYS[name]])


@dataclass(frozen=True)
class RaftConfig:
    election_timeout_ms: int = field(default_factory=lambda: _default("election_timeout_ms"))
    # Kafka draws the election timeout uniformly from [T, 2T): the jitter defaults to T.
    election_jitter_max_ms: int | None = None
    election_backoff_max_ms: int = field(default_factory=lambda: _default("election_backoff_max_ms"))
    fetch_timeout_ms: int = field(default_factory=lambda: _default("fetch_timeout_ms"))
    request_timeout_ms: int = field(default_factory=lambda: _default("request_timeout_ms"))
    retry_backoff_ms: int = field(default_factory=lambda: _default("retry_backoff_ms"))
    # How long a follower waits to fetch again after an empty fetch: stands in for the leader holding
    # the fetch (Kafka's long poll, MaxWaitMs), which a sans-IO node cannot do.
    fetch_interval_ms: int = 50
    fetch_max_records: int = 100
    check_quorum_timeout_factor: float = 1.5
    # The active controller appends a NoOpRecord this often (Kafka's metadata.max.idle.interval.ms, 500 by
    # default), so that the high watermark moves and followers see a live leader; None: no such appends.
    append_interval_ms: int | None = None
    cluster_id: str | None = None
    seed: int = 0
    # Test hook for the simulator's checker: break "one vote per epoch" on purpose.
    unsafe_grant_any_vote: bool = False
    protocol: str = KAFKA
    # The draft's bootstrap.servers as node ids ("1,2" or "1@host:9093,2@host:9093"); empty: none.
    bootstrap_servers: str = ""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"kraftlake.quorum.protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")

    @property
    def jitter_ms(self) -> int:
        return self.election_timeout_ms if self.election_jitter_max_ms is None else self.election_jitter_max_ms

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **overrides: Any) -> RaftConfig:
        values: dict[str, Any] = {}
        for name, key in _CONFIG_KEYS.items():
            for k in (key, key.removeprefix("controller.")):
                if k in props:
                    values[name] = props[k].lower() == "true" if name == "unsafe_grant_any_vote" else \
                        props[k].strip() if name in _TEXT_FIELDS else int(props[k])
        values.update(overrides)
        return cls(**values)

    def kafka_configs(self) -> dict[str, str]:
        """The Kafka configs this node runs with, by Kafka's names (what a ReplicaStartup records)."""
        values = {name: getattr(self, name) for name in KAFKA_CONFIG_FIELDS}
        values.update(election_jitter_max_ms=self.jitter_ms, append_interval_ms=self.append_interval_ms or 0)
        if self.protocol == DRAFT:
            values.update({name: getattr(self, name) for name in DRAFT_CONFIG_FIELDS})
        return {_CONFIG_KEYS[name]: str(v) for name, v in values.items()}
