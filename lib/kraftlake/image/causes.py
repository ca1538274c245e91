"""Why things changed: the cause of each partition change and broker state change, read from the log.

Kafka's controller writes everything one decision produces as one ``ControllerResult``, appended together,
so in one record batch of the log; and it writes them in an order the decision fixes
(``ReplicationControlManager``): a fencing (``handleBrokerFenced``), an unregistration, a directory failure
and a new incarnation replacing the old one write the partitions' changes first and the broker's record
after them; a controlled shutdown (``handleBrokerInControlledShutdown``) and an unfencing
(``handleBrokerUnfenced``) write the broker's record first. The Raft layer may put several decisions in one
batch. So a partition change is caused by the nearest broker record of its batch, on the side its kind
writes, that concerns the partition: the broker led it or was in its ISR or ELR (a fencing, a shutdown ...),
or it had no leader and got one (an unfencing). What no broker record explains is named by
what changed (``shape``). A batch is what shares a (source, position) in ``metadata_log``; the records one
request made this controller decide, and the records of one metadata transaction, are one batch too.

Broker states (``broker_transitions``) and their causes (``broker_cause``) follow Kafka's lifecycle
(``BrokerHeartbeatManager``, KIP-841): a broker registers fenced, is unfenced once it has caught up with
its registration, may enter a controlled shutdown at its request, is fenced when that ends or when it stops
heartbeating, and is gone at an UnregisterBrokerRequest. A state that only appeared because a snapshot was
loaded is no event: its cause says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np

from kraftlake.image.cluster_image import NO_LEADER, BrokerRegistration, PartitionRegistration, normalize_uuid

# Broker states (broker_history.state). A broker that registers again, as a new incarnation or the same one,
# is "registered" again: the state says where the broker is, its cause says how it got there.
REGISTERED, UNFENCED, FENCED, CONTROLLED_SHUTDOWN, UNREGISTERED = (
    "registered", "unfenced", "fenced", "controlled_shutdown", "unregistered")
# A change of the broker's log directories (BrokerRegistrationChangeRecord v2: a JBOD failure); a cause of
# partition changes, no broker state.
LOG_DIRS_OFFLINE = "log_dirs_offline"
# Broker records whose partition changes follow them in the batch; every other kind's precede them.
_RECORD_FIRST = frozenset({CONTROLLED_SHUTDOWN, UNFENCED})

# Causes of broker states (broker_history.cause).
REGISTRATION, NEW_INCARNATION, SAME_INCARNATION = "registration", "new_incarnation", "same_incarnation"
CAUGHT_UP = "caught_up"  # unfenced: its heartbeat reported the offset of its registration
SHUTDOWN_REQUESTED = "shutdown_requested"  # its heartbeat asked to shut down (WantShutDown)
CONTROLLED_SHUTDOWN_COMPLETED = "controlled_shutdown_completed"
# Fenced while not in a controlled shutdown. In a log this is all one can say: Kafka writes the same records
# when a broker's session expires and when a broker that leads no partition asks to shut down (it is fenced
# at once, without a controlled shutdown); this controller's own decisions know which (SESSION_EXPIRED, ...).
NO_CONTROLLED_SHUTDOWN = "no_controlled_shutdown"
SESSION_EXPIRED = "session_expired"
FENCE_REQUESTED = "fence_requested"  # its heartbeat asked to be fenced (WantFence)
UNREGISTRATION_REQUEST = "unregistration_request"
SNAPSHOT_LOADED = "snapshot_loaded"

# Causes of partition changes (partition_history.cause_kind) besides the broker states above.
TOPIC_CREATED, PARTITIONS_CREATED, TOPIC_DELETED = "topic_created", "partitions_created", "topic_deleted"
TYPE_OF_KIND = {TOPIC_CREATED: "TopicRecord"}  # the causes whose kind says the type of the event they name
REASSIGNMENT, LEADER_ELECTION, ISR_CHANGE = "reassignment", "leader_election", "isr_change"
DIRECTORY_ASSIGNMENT = "directory_assignment"


class Cause(NamedTuple):
    """What caused a change: its kind, the offset of the event that did (None: no event but the change's own
    record), and the broker whose change it was (None: not a broker's)."""

    kind: str
    offset: int | None = None
    broker: int | None = None


def broker_record_kinds(event: dict) -> list[tuple[str, int]]:
    """What a record does to a broker, as (kind, broker id); nothing for records that are not a broker's.
    Read from the record alone, so a fencing of a broker already fenced still counts (Kafka writes the
    failover before it all the same)."""
    kind, data = event["type"], event["data"]
    if kind == "RegisterBrokerRecord":
        return [(REGISTERED, data["BrokerId"])]
    if kind == "UnregisterBrokerRecord":
        return [(UNREGISTERED, data["BrokerId"])]
    if kind == "FenceBrokerRecord":
        return [(FENCED, data["Id"])]
    if kind == "UnfenceBrokerRecord":
        return [(UNFENCED, data["Id"])]
    if kind != "BrokerRegistrationChangeRecord":
        return []
    broker = data["BrokerId"]
    kinds = [(CONTROLLED_SHUTDOWN, broker)] if data["InControlledShutdown"] == 1 else []
    kinds += [(FENCED, broker)] if data["Fenced"] == 1 else [(UNFENCED, broker)] if data["Fenced"] == -1 else []
    return kinds + ([(LOG_DIRS_OFFLINE, broker)] if data.get("LogDirs") else [])


# The records that can be the cause of others in their batch.
CAUSE_TYPES = frozenset({"RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                         "BrokerRegistrationChangeRecord", "TopicRecord"})


@dataclass
class Batch:
    """The records of one batch that cause others: broker records by place, and the topics created.

    A place orders the batch's records (the offset of a record read from the log, the index of a record
    among a decision's); ``offset`` is what a cause names (a decision's records all carry its request's).
    """

    brokers: list[tuple[int, int, str, int, Cause]]  # (place, offset, kind, broker id, the cause it is)
    topics: dict[str, int]  # topic id -> offset of its TopicRecord

    @classmethod
    def of(cls, records: Iterable[tuple[int, int, dict]]) -> Batch:
        """From (place, offset, event) of the batch's records, in any order; records that cause nothing are
        left out."""
        batch = cls([], {})
        for place, offset, event in records:
            if event["type"] in CAUSE_TYPES:
                batch.add(place, offset, event)
        return batch

    def add(self, place: int, offset: int, event: dict) -> None:
        if event["type"] == "TopicRecord":
            self.topics[normalize_uuid(event["data"]["TopicId"])] = offset
        self.brokers.extend((place, offset, kind, broker, Cause(kind, offset, broker))
                            for kind, broker in broker_record_kinds(event))

    def broker_cause(self, place: int, before: PartitionRegistration, after: PartitionRegistration) -> Cause | None:
        """The nearest broker record on the side its kind writes its partition changes that explains the change."""
        best, nearest = None, 0
        for at, _, kind, broker, cause in self.brokers:
            if at == place or (at < place) != (kind in _RECORD_FIRST) or not explains(kind, broker, before, after):
                continue
            if best is None or abs(place - at) < nearest:
                best, nearest = cause, abs(place - at)
        return best


def explains(kind: str, broker: int, before: PartitionRegistration, after: PartitionRegistration) -> bool:
    """Whether a broker's change of ``kind`` can have made this partition change: an unfencing elects
    leaders where there were none; every other kind's failover visits the partitions the broker leads or is
    in the ISR or ELR of (``generateLeaderAndIsrUpdates``), even where nothing but the leader epoch changes
    (its last ISR member keeps its place)."""
    if kind == UNFENCED:
        return before.leader == NO_LEADER and after.leader != NO_LEADER
    return before.leader == broker or broker in before.isr or broker in before.elr


def shape(before: PartitionRegistration, after: PartitionRegistration) -> str:
    """A change no other event explains, named by what it changed: new replicas (a reassignment, begun,
    cancelled or completed), a new leader, else the ISR, ELR or leader recovery state (what a leader's
    AlterPartition asks for), or only where replicas live (AssignReplicasToDirs)."""
    if (before.replicas != after.replicas or before.adding_replicas != after.adding_replicas
            or before.removing_replicas != after.removing_replicas):
        return REASSIGNMENT
    if before.leader != after.leader:
        return LEADER_ELECTION
    if before.directories != after.directories and (before.isr, before.elr, before.last_known_elr,
                                                    before.leader_recovery_state) == (
            after.isr, after.elr, after.last_known_elr, after.leader_recovery_state):
        return DIRECTORY_ASSIGNMENT
    return ISR_CHANGE


def partition_cause(batch: Batch | None, place: int, before: PartitionRegistration | None,
                    after: PartitionRegistration | None, offset: int | None) -> Cause:
    """The cause of one partition change of a record at ``place`` in ``batch``. ``offset``: what names a cause
    found in nothing but the change itself (None for a log's record, the request for a decision's)."""
    if after is None:
        return Cause(TOPIC_DELETED, offset)
    if before is None:
        created = None if batch is None else batch.topics.get(after.topic_id)
        return Cause(TOPIC_CREATED, created) if created is not None else Cause(PARTITIONS_CREATED, offset)
    found = None if batch is None else batch.broker_cause(place, before, after)
    return found if found is not None else Cause(shape(before, after), offset)


# Kinds of ``change_causes`` as codes, in this order.
COLUMN_KINDS = (LEADER_ELECTION, ISR_CHANGE, FENCED, CONTROLLED_SHUTDOWN, UNFENCED, REGISTERED, UNREGISTERED,
                LOG_DIRS_OFFLINE)
_CODE = {kind: code for code, kind in enumerate(COLUMN_KINDS)}


def change_causes(places: np.ndarray, groups: np.ndarray, batches: list[Batch], leader: tuple[np.ndarray, np.ndarray],
                  isr: tuple[np.ndarray, np.ndarray], elr: np.ndarray, isr_values: list[tuple[int, ...]]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``partition_cause`` for a run of changes of the leader, ISR and recovery state only (what the columns
    apply at once), column-wise: the kinds as codes into ``COLUMN_KINDS``, cause offsets and brokers (-1:
    none). ``groups[i]`` is the index in ``batches`` of change i's batch, -1 if it has none that causes
    anything; ISRs and ELRs (which such changes keep) are codes into ``isr_values``. The same rule as
    ``partition_cause``, which tests hold."""
    n = len(places)
    kinds = np.where(leader[0] != leader[1], _CODE[LEADER_ELECTION], _CODE[ISR_CHANGE]).astype(np.int8)
    offsets = np.full(n, -1, np.int64)
    brokers = np.full(n, -1, np.int32)
    for group in np.unique(groups[groups >= 0]).tolist():
        batch = batches[group]
        if not batch.brokers:
            continue
        rows = np.flatnonzero(groups == group)
        at = places[rows]
        before, after = leader[0][rows], leader[1][rows]
        held = isr[0][rows], elr[rows]
        codes = np.unique(np.concatenate(held))
        best = np.full(len(rows), np.iinfo(np.int64).max)
        for place, offset, kind, broker, _ in batch.brokers:
            if kind == UNFENCED:
                explained = (before == NO_LEADER) & (after != NO_LEADER)
            else:
                member = np.fromiter((broker in isr_values[c] for c in codes.tolist()), bool, len(codes))
                explained = ((before == broker) | member[np.searchsorted(codes, held[0])]
                             | member[np.searchsorted(codes, held[1])])
            side = at > place if kind in _RECORD_FIRST else at < place
            distance = np.abs(at - place)
            take = explained & side & (distance < best)
            best[take] = distance[take]
            kinds[rows[take]] = _CODE[kind]
            offsets[rows[take]] = offset
            brokers[rows[take]] = broker
    return kinds, offsets, brokers


def broker_transitions(before: BrokerRegistration | None, after: BrokerRegistration | None,
                       registration: bool) -> list[str]:
    """The states a broker went through in one change, in order. A registration starts from a new
    incarnation's state (fenced, not shutting down) unless the same incarnation registers again."""
    if after is None:
        return [UNREGISTERED]
    same = before is not None and before.incarnation_id == after.incarnation_id
    fenced, shutting_down = ((before.fenced, before.in_controlled_shutdown) if same or not registration
                             else (True, False))
    states = [REGISTERED] if registration else []
    if after.in_controlled_shutdown and not shutting_down:
        states.append(CONTROLLED_SHUTDOWN)
    if after.fenced != fenced:
        states.append(FENCED if after.fenced else UNFENCED)
    return states


def is_registration(before: BrokerRegistration | None, after: BrokerRegistration | None) -> bool:
    """Whether a change seen only as before and after (a snapshot's, a transaction's) was a registration."""
    return after is not None and (before is None or (before.incarnation_id, before.epoch) != (
        after.incarnation_id, after.epoch))


# Where a broker's current state began: its registration and the start of its controlled shutdown, as
# (offset, type of the event there), for the causes that name them.
Marks = dict[str, tuple[int, str]]


def broker_cause(state: str, before: BrokerRegistration | None, after: BrokerRegistration | None,
                 registration: bool, marks: Marks) -> tuple[str, tuple[int, str] | None]:
    """The cause of a broker reaching ``state`` by a record of the log, and the event it names, if another:
    the registration an unfencing caught up with, the start of the controlled shutdown a fencing ended."""
    if registration:
        if before is None:
            return REGISTRATION, None
        return (SAME_INCARNATION if after is not None and before.incarnation_id == after.incarnation_id
                else NEW_INCARNATION), None
    if state == UNFENCED:
        return CAUGHT_UP, marks.get(REGISTERED)
    if state == CONTROLLED_SHUTDOWN:
        return SHUTDOWN_REQUESTED, None
    if state == FENCED:
        if before is not None and before.in_controlled_shutdown:
            return CONTROLLED_SHUTDOWN_COMPLETED, marks.get(CONTROLLED_SHUTDOWN)
        return NO_CONTROLLED_SHUTDOWN, None
    return UNREGISTRATION_REQUEST, None


def marked(marks: Marks, state: str, offset: int, event_type: str) -> Marks | None:
    """A broker's marks once it reached ``state`` at ``offset`` (None: it is gone)."""
    if state == UNREGISTERED:
        return None
    if state == REGISTERED:
        return {REGISTERED: (offset, event_type)}
    if state == CONTROLLED_SHUTDOWN:
        return {**marks, CONTROLLED_SHUTDOWN: (offset, event_type)}
    return marks
