"""The KIP-841 invariants, checked at every offset of a log by replaying it through the pure core.

A checker that trusts nothing but the records: it does not ask the controller (ours or Kafka's) what
it meant to do, it replays what was written and looks at every partition change with the broker
registry as it stands at that point. That makes it usable on a real cluster's log, on a warehouse the
streaming job produced, and on the records our own controller generated (``controller_log``), which
is where a broken decision would show.

What counts as a break:

- ``INELIGIBLE_LEADER_ELECTED``: a change gives a partition a leader (a new partition with a leader, or
  a new leader epoch: another broker, or the same one re-elected) whose broker is fenced or in
  controlled shutdown;
- ``INELIGIBLE_REPLICA_ADDED_TO_ISR``: a change puts such a broker into an ISR it was not in (for a new
  partition, its whole initial ISR);
- ``UNREGISTERED_LEADER_ELECTED`` / ``UNREGISTERED_REPLICA_ADDED_TO_ISR``: the same for a broker that is
  not registered at all;
- ``LEADER_NOT_IN_ISR``: after any change, the leader is not -1 and not in the ISR.

The first four are about transitions, not states, because Kafka itself leaves ineligible brokers in
place: a fenced or unregistered broker that was the last ISR member stays in the ISR (so that a clean
election stays possible), with leader -1. For the same reason a snapshot, which restates the image
rather than changing it, is only checked for ``LEADER_NOT_IN_ISR``. A metadata transaction is checked
where it takes effect, at its end, against the brokers as the transaction leaves them (Kafka's loader
never publishes the states inside it); its violations carry the offset of the record inside it that
made the change.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from heapq import merge

from kraftlake.image.cluster_image import NO_LEADER, BrokerRegistration, ClusterImage, PartitionRegistration
from kraftlake.image.replay import replay

INELIGIBLE_LEADER_ELECTED = "INELIGIBLE_LEADER_ELECTED"
INELIGIBLE_REPLICA_ADDED_TO_ISR = "INELIGIBLE_REPLICA_ADDED_TO_ISR"
UNREGISTERED_LEADER_ELECTED = "UNREGISTERED_LEADER_ELECTED"
UNREGISTERED_REPLICA_ADDED_TO_ISR = "UNREGISTERED_REPLICA_ADDED_TO_ISR"
LEADER_NOT_IN_ISR = "LEADER_NOT_IN_ISR"

# Broker states as Kafka's BrokerHeartbeatManager names them (BrokerControlState), plus one for "none".
FENCED = "FENCED"
CONTROLLED_SHUTDOWN = "CONTROLLED_SHUTDOWN"
UNFENCED = "UNFENCED"
UNREGISTERED = "UNREGISTERED"

CONTROLLER_LOG = "controller_log"
METADATA_LOG = "metadata_log"


@dataclass(frozen=True)
class Violation:
    """One broken invariant. ``offset`` and ``event_type`` name the record that made the change; for a
    record of ``controller_log``, ``cause_offset``/``cause_type`` name the request that made the
    controller write it (both None for records of ``metadata_log``)."""

    offset: int
    timestamp: int  # ms, event time
    topic: str
    topic_id: str
    partition: int
    kind: str
    broker: int
    broker_state: str
    event_type: str
    leader_before: int | None  # None: the change created the partition
    leader_after: int
    isr_before: tuple[int, ...] | None
    isr_after: tuple[int, ...]
    cause_offset: int | None = None
    cause_type: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def broker_state(broker: BrokerRegistration | None) -> str:
    """Fenced wins over controlled shutdown, as in Kafka's heartbeat manager: a broker that was fenced
    during its shutdown is simply fenced."""
    if broker is None:
        return UNREGISTERED
    if broker.fenced:
        return FENCED
    if broker.in_controlled_shutdown:
        return CONTROLLED_SHUTDOWN
    return UNFENCED


class InvariantChecker:
    """Replays events one by one and reports, per event, the violations its partition changes made.

    Stateful so that callers streaming a long log (the check job) can count as they go; ``check_events``
    is the plain iterator form.
    """

    def __init__(self) -> None:
        self.image = ClusterImage()
        self.events_checked = 0
        self.partition_changes = 0
        self.requests = 0  # not replayed: what they decide is in controller_log
        self.not_applied = 0  # records the image refuses (replay says why; the controller job keeps it)
        self._held: dict[int, dict] = {}  # records of an open transaction or snapshot, by offset
        self._last_log_event: dict | None = None  # the latest metadata_log event: controller records' cause

    def check(self, event: dict) -> list[Violation]:
        self.events_checked += 1
        if event.get("cause_offset") is None:
            self._last_log_event = event
        result = replay(self.image, event)
        if result.deferred:
            self._held[event["offset"]] = event
            return []
        held = self._held
        if self.image.pending_kind is None:  # control records apply inside a transaction too
            self._held = {}
        if result.rejected is not None and event["type"].endswith("Request"):
            self.requests += 1
        else:
            self.not_applied += (result.rejected is not None) + len(result.deferred_rejections)
        snapshot = event["type"] == "SnapshotFooterRecord"
        violations = []
        for before, after in result.partition_changes:
            if after is None:
                continue  # a removed topic breaks nothing
            self.partition_changes += 1
            origin = held.get(after.last_offset, event)
            violations.extend(self._check_change(before, after, origin, transition=not snapshot))
        return violations

    def _check_change(self, before: PartitionRegistration | None, after: PartitionRegistration,
                      origin: dict, transition: bool) -> Iterator[Violation]:
        if transition:
            elected = after.leader != NO_LEADER and (before is None or after.leader_epoch != before.leader_epoch)
            if elected:
                yield from self._eligibility(before, after, origin, after.leader,
                                             INELIGIBLE_LEADER_ELECTED, UNREGISTERED_LEADER_ELECTED)
            already = () if before is None else before.isr
            for replica in after.isr:
                if replica not in already:
                    yield from self._eligibility(before, after, origin, replica,
                                                 INELIGIBLE_REPLICA_ADDED_TO_ISR, UNREGISTERED_REPLICA_ADDED_TO_ISR)
        if after.leader != NO_LEADER and after.leader not in after.isr:
            state = broker_state(self.image.brokers.get(after.leader))
            yield self._violation(before, after, origin, LEADER_NOT_IN_ISR, after.leader, state)

    def _eligibility(self, before: PartitionRegistration | None, after: PartitionRegistration, origin: dict,
                     broker: int, ineligible: str, unregistered: str) -> Iterator[Violation]:
        state = broker_state(self.image.brokers.get(broker))
        if state == UNREGISTERED:
            yield self._violation(before, after, origin, unregistered, broker, state)
        elif state != UNFENCED:
            yield self._violation(before, after, origin, ineligible, broker, state)

    def _violation(self, before: PartitionRegistration | None, after: PartitionRegistration, origin: dict,
                   kind: str, broker: int, state: str) -> Violation:
        cause_offset = origin.get("cause_offset")
        cause = self._last_log_event
        known_cause = cause_offset is not None and cause is not None and cause["offset"] == cause_offset
        return Violation(
            offset=origin["offset"],
            timestamp=origin["timestamp"],
            topic=self.image.topics[after.topic_id].name,
            topic_id=after.topic_id,
            partition=after.partition_id,
            kind=kind,
            broker=broker,
            broker_state=state,
            event_type=origin["type"],
            leader_before=None if before is None else before.leader,
            leader_after=after.leader,
            isr_before=None if before is None else before.isr,
            isr_after=after.isr,
            cause_offset=cause_offset,
            cause_type=cause["type"] if known_cause else None,
        )


def check_events(events: Iterable[dict]) -> Iterator[Violation]:
    """Events in log order (ADR 0001 dicts); records of ``controller_log`` carry ``cause_offset`` and
    must already sit right after the event that caused them (``merge_logs``)."""
    checker = InvariantChecker()
    for event in events:
        yield from checker.check(event)


def merge_logs(log: Iterable[dict], controller: Iterable[dict]) -> Iterator[dict]:
    """One stream in replay order: each controller record right after the event at its ``cause_offset``.
    Both inputs must already be in their own order (``log`` by offset, ``controller`` by cause and then
    as the controller wrote them), which the merge keeps."""
    return merge(log, controller, key=lambda e: (e["offset"], 0) if e.get("cause_offset") is None
                 else (e["cause_offset"], 1))


def controller_order(columns: Iterable[str]) -> tuple[str, list[str]]:
    """The column naming a controller record's cause, and the columns that order the records.

    Two layouts are read: ``cause_offset`` beside the record's own ``offset``; or, as the streaming job
    writes it, ``offset`` = the cause with ``shard`` and ``seq`` (the order within the shard's output).
    There shard 0 comes first: it writes the broker records, and Kafka's controller writes the record
    that makes a broker eligible (an unfence) before the elections it allows, so the other shards'
    partition changes belong after it.
    """
    if "cause_offset" in columns:
        return "cause_offset", ["cause_offset", "offset"]
    return "offset", ["offset", "shard", "seq"]
