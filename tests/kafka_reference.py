"""A second controller, written from Kafka's rules alone, to check the project's decisions against.

It decides the requests the cluster simulator sends (broker registrations and heartbeats, session
expiry, the periodic leader balance, CreateTopics, AlterPartition, ElectLeaders, reassignments and
DeleteTopics) and says, per request, which records Kafka's controller writes and what it answers. It
shares nothing with ``kraftlake.controller``: its rules are tables and small functions read off Kafka's
``BrokerHeartbeatManager.calculateNextBrokerState``, ``ClusterControlManager.registerBroker``,
``ReplicationControlManager`` (``processBrokerHeartbeat``, ``handleBroker*``, ``alterPartition`` and
``validateAlterPartitionData``, ``electLeader``, ``maybeTriggerLeaderChangeForPartitionsWithoutPreferred
Leader``, ``changePartitionReassignment``, ``cancelPartitionReassignment``), ``PartitionChangeBuilder``
(``build``, ``electPreferredLeader``, ``electAnyLeader``, ``setAssignmentChanges``),
``PartitionReassignmentReplicas`` / ``PartitionReassignmentRevert`` and ``QuorumController``'s
scheduling of the leader-imbalance check; its error codes and record defaults come from
``../shared/kafka-facts`` (Kafka's own JSON), not from the project's schemas. It keeps its own image,
fed only with the records it predicts itself.

What it cannot know is what Kafka draws at random: a new topic's id and its replica placement
(``StripedReplicaPlacer`` starts at random offsets). For those it takes the project's choice
(``adopt``) and checks the placer's guarantees instead. Everything else it predicts.

Where Kafka's rules changed after the source this was read from (Kafka 3.9 / trunk of October 2024),
the Kafka 4.x rule is used and its ticket named: contact times per (broker, epoch), a registration not
counting as contact (``BrokerHeartbeatTracker``), a broker in controlled shutdown replaceable at once
(KAFKA-19047), and the previous incarnation leaving the ISRs at re-registration when ELR is off
(``handleBrokerShutdown``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

FACTS = Path(__file__).resolve().parents[2] / "shared" / "kafka-facts"
ERRORS: dict[str, int] = json.loads((FACTS / "error-codes.json").read_text())
MESSAGES: dict[str, dict] = json.loads((FACTS / "messages.json").read_text())

NO_LEADER, NO_LEADER_CHANGE = -1, -2
RECOVERED, RECOVERING = 0, 1
FENCE, UNFENCE, IN_CONTROLLED_SHUTDOWN = 1, -1, 1  # BrokerRegistrationChangeRecord's Fenced / InControlledShutdown
UNASSIGNED_DIR = "AAAAAAAAAAAAAAAAAAAAAA"  # DirectoryId.UNASSIGNED (the zero uuid)
MIGRATING_DIR = "AAAAAAAAAAAAAAAAAAAAAQ"  # DirectoryId.MIGRATING
PREFERRED, UNCLEAN = 0, 1  # ElectLeadersRequest's ElectionType
# When the leader-imbalance check runs: Kafka's rule, or every interval from the take-over (see
# ``ReferenceController.maybe_schedule_balance``)
KAFKA_SCHEDULE, EVERY_INTERVAL = "kafka", "every interval"


def _default(field_spec: dict) -> object:
    """A field's default as Kafka's generated code sets it."""
    text, kind = field_spec.get("default"), field_spec["type"]
    if text == "null":
        return None
    if kind.startswith("[]"):
        return []
    if kind == "bool":
        return text == "true"
    if kind.startswith("int") or kind.startswith("uint"):
        return int(text, 0) if text is not None else 0
    if kind == "uuid":
        return UNASSIGNED_DIR
    return text if text is not None else ""


def set_fields(type_: str, data: dict) -> dict:
    """The fields of a record that differ from their defaults: what a Kafka record actually says (a
    tagged field left at its default is not even written)."""
    defaults = {f["name"]: _default(f) for f in MESSAGES[type_]["fields"]}
    return {k: v for k, v in data.items() if k not in defaults or v != defaults[k]}


# --- the image this model keeps ---------------------------------------------------------------------

@dataclass
class Broker:
    id: int
    epoch: int
    incarnation: str
    rack: str | None
    dirs: list[str]
    fenced: bool = True
    shutting_down: bool = False  # InControlledShutdown, as the log says


@dataclass
class Partition:
    topic_id: str
    id: int
    replicas: list[int]
    isr: list[int]
    leader: int
    dirs: list[str]
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    recovery: int = RECOVERED


@dataclass
class Session:
    """Kafka's heartbeat soft state of one broker incarnation (BrokerHeartbeatState + tracker)."""

    epoch: int
    registered_offset: int  # offset of its RegisterBrokerRecord
    contact_ms: int | None = None  # a registration is no contact (BrokerHeartbeatTracker, Kafka 4)
    metadata_offset: int = -1
    shutdown_offset: int = -1  # controlledShutdownOffset


# --- the heartbeat state machine: BrokerHeartbeatManager.calculateNextBrokerState as a table ---------

FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = "FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN", "SHUTDOWN_NOW"
ANY = None  # a column that does not matter in that row

# (current state, WantFence, WantShutDown, caught up, leads a partition, lowest active offset reached) -> next;
# the first matching row wins, as the branches of Kafka's switch do.
HEARTBEAT_TRANSITIONS: list[tuple[tuple, str]] = [
    ((FENCED, ANY, True, ANY, ANY, ANY), SHUTDOWN_NOW),
    ((FENCED, False, False, True, ANY, ANY), UNFENCED),
    ((FENCED, ANY, ANY, ANY, ANY, ANY), FENCED),
    ((UNFENCED, True, True, ANY, ANY, ANY), SHUTDOWN_NOW),
    ((UNFENCED, True, False, ANY, ANY, ANY), FENCED),
    ((UNFENCED, False, True, ANY, True, ANY), CONTROLLED_SHUTDOWN),
    ((UNFENCED, False, True, ANY, False, ANY), SHUTDOWN_NOW),
    ((UNFENCED, False, False, ANY, ANY, ANY), UNFENCED),
    ((CONTROLLED_SHUTDOWN, ANY, ANY, ANY, True, ANY), CONTROLLED_SHUTDOWN),
    ((CONTROLLED_SHUTDOWN, ANY, ANY, ANY, False, True), SHUTDOWN_NOW),
    ((CONTROLLED_SHUTDOWN, ANY, ANY, ANY, False, False), CONTROLLED_SHUTDOWN),
]

# What processBrokerHeartbeat writes when the state changes, by the state it moves to.
HEARTBEAT_RECORDS = {
    FENCED: ("failover", "fence"),  # handleBrokerFenced
    SHUTDOWN_NOW: ("failover", "fence"),
    UNFENCED: ("unfence", "elect leaderless"),  # handleBrokerUnfenced
    CONTROLLED_SHUTDOWN: ("enter controlled shutdown", "failover"),  # handleBrokerInControlledShutdown
}


def next_heartbeat_state(key: tuple) -> str:
    for pattern, outcome in HEARTBEAT_TRANSITIONS:
        if all(p is ANY or p == k for p, k in zip(pattern, key)):
            return outcome
    raise AssertionError(f"no row of HEARTBEAT_TRANSITIONS for {key}")


# --- PartitionChangeBuilder --------------------------------------------------------------------------

def elect(p: Partition, replicas: list[int], isr: list[int], acceptable: Callable[[int], bool],
          preferred: bool, unclean: bool) -> tuple[int, bool]:
    """(leader, unclean): ``electPreferredLeader`` / ``electAnyLeader`` without ELR."""
    def valid(r: int) -> bool:
        return r in isr and acceptable(r)

    if preferred and replicas and valid(replicas[0]):
        return replicas[0], False
    if valid(p.leader):
        return p.leader, False
    for r in (replicas[1:] if preferred else replicas):
        if valid(r):
            return r, False
    if unclean and not preferred:
        for r in replicas:
            if acceptable(r):
                return r, True
    return NO_LEADER, False


def build_change(p: Partition, acceptable: Callable[[int], bool], default_dir: Callable[[int], str], *,
                 isr: list[int] | None = None, replicas: list[int] | None = None,
                 adding: list[int] | None = None, removing: list[int] | None = None,
                 preferred: bool = False, unclean: bool = False, recovery: int | None = None) -> dict | None:
    """The fields of the PartitionChangeRecord ``PartitionChangeBuilder.build`` writes (ELR off, a
    metadata.version with directories and without the ISR-shrink epoch bump), or None."""
    t_isr = list(p.isr if isr is None else isr)
    t_replicas = list(p.replicas if replicas is None else replicas)
    t_adding = list(p.adding if adding is None else adding)
    t_removing = list(p.removing if removing is None else removing)
    # completeReassignmentIfNeeded (PartitionReassignmentReplicas.maybeCompleteReassignment)
    if t_adding or t_removing:
        new_isr = [r for r in t_isr if r not in t_removing]
        new_replicas = [r for r in t_replicas if r not in t_removing]
        if new_isr and new_replicas and all(r in new_isr for r in new_replicas):
            t_isr, t_replicas, t_adding, t_removing = new_isr, new_replicas, [], []
    record: dict = {"TopicId": p.topic_id, "PartitionId": p.id}
    leader, was_unclean = elect(p, t_replicas, t_isr, acceptable, preferred, unclean)
    if leader != p.leader:  # tryElection
        record["Leader"] = leader
        if was_unclean:
            record["Isr"] = [leader]
            if p.recovery != RECOVERING:
                record["LeaderRecoveryState"] = RECOVERING
    if "Leader" not in record and not set(p.replicas) <= set(t_replicas):
        record["Leader"] = p.leader  # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded
    if "Isr" not in record and t_isr and t_isr != p.isr:
        record["Isr"] = t_isr
    if t_replicas:  # setAssignmentChanges
        placed = dict(zip(p.replicas, p.dirs))
        dirs = [placed[r] if r in placed else default_dir(r) for r in t_replicas]
        if dirs != p.dirs:
            record["Directories"] = dirs
        if t_replicas != p.replicas:
            record["Replicas"] = t_replicas
    if t_removing != p.removing:
        record["RemovingReplicas"] = t_removing
    if t_adding != p.adding:
        record["AddingReplicas"] = t_adding
    if recovery is not None and recovery != p.recovery:
        record["LeaderRecoveryState"] = recovery
    return record if len(record) > 2 else None


def merge(p: Partition, change: dict) -> Partition:
    """``PartitionRegistration.merge``: every change bumps the partition epoch, a Leader field the
    leader epoch."""
    q = replace(p, partition_epoch=p.partition_epoch + 1)
    if change.get("Leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
        q.leader, q.leader_epoch = change["Leader"], p.leader_epoch + 1
    for key, attr in (("Isr", "isr"), ("Replicas", "replicas"), ("AddingReplicas", "adding"),
                      ("RemovingReplicas", "removing"), ("Directories", "dirs")):
        if change.get(key) is not None:
            setattr(q, attr, list(change[key]))
    if change.get("LeaderRecoveryState", -1) != -1:
        q.recovery = change["LeaderRecoveryState"]
    return q


# --- AlterPartition's checks, in validateAlterPartitionData's order ---------------------------------

def alter_partition_checks(model: "ReferenceController", sender: int, p: Partition, data: dict
                           ) -> list[tuple[str, bool]]:
    members = [s["BrokerId"] for s in data["NewIsrWithEpochs"]]

    def ineligible(state: dict) -> bool:
        b = model.brokers.get(state["BrokerId"])
        return (b is None or b.shutting_down or b.fenced
                or (state["BrokerEpoch"] != -1 and b.epoch != state["BrokerEpoch"]))

    return [
        ("NOT_CONTROLLER", data["LeaderEpoch"] > p.leader_epoch),
        ("NOT_CONTROLLER", data["PartitionEpoch"] > p.partition_epoch),
        ("FENCED_LEADER_EPOCH", data["LeaderEpoch"] < p.leader_epoch),
        ("INVALID_REQUEST", sender != p.leader),
        ("INVALID_UPDATE_VERSION", data["PartitionEpoch"] < p.partition_epoch),
        ("INVALID_REQUEST", len(set(members)) != len(members) or not set(members) <= set(p.replicas)),
        ("INVALID_REQUEST", p.leader not in members),
        ("INVALID_REQUEST", data["LeaderRecoveryState"] == RECOVERING and len(members) > 1),
        ("INVALID_REQUEST", p.recovery == RECOVERED and data["LeaderRecoveryState"] == RECOVERING),
        ("INELIGIBLE_REPLICA", any(ineligible(s) for s in data["NewIsrWithEpochs"])),
    ]


# --- the controller ------------------------------------------------------------------------------------

@dataclass
class Decision:
    records: list[dict]  # {"type", "data"} with only the fields the record sets
    response: dict  # the response, as much of it as the model predicts
    adopted: bool = False  # whether a random choice (topic id, placement) was taken from the project


class ReferenceController:
    """Kafka's controller over one log of requests, from an empty cluster, in event time."""

    def __init__(self, session_timeout_ms: int, imbalance_interval_ms: int | None, schedule: str = KAFKA_SCHEDULE):
        self.timeout = session_timeout_ms
        self.interval = imbalance_interval_ms  # None: auto.leader.rebalance.enable=false
        self.schedule = schedule
        self.active_since: int | None = None  # when this controller took over (its first request)
        self.brokers: dict[int, Broker] = {}
        self.sessions: dict[int, Session] = {}
        self.topics: dict[str, str] = {}  # name -> id
        self.names: dict[str, str] = {}  # id -> name
        self.partitions: dict[str, dict[int, Partition]] = {}
        self.balance_at: int | None = None  # the scheduled leader-imbalance check, if one is
        self.checks = 0  # leader-imbalance checks run

    # the image, fed with this model's own records

    def apply(self, records: Iterable[dict], offset: int) -> None:
        for rec in records:
            data = rec["data"]
            kind = rec["type"]
            if kind == "RegisterBrokerRecord":
                self.brokers[data["BrokerId"]] = Broker(
                    data["BrokerId"], data["BrokerEpoch"], data["IncarnationId"], data.get("Rack"),
                    list(data.get("LogDirs", [])), data.get("Fenced", True), data.get("InControlledShutdown", False))
            elif kind == "BrokerRegistrationChangeRecord":
                b = self.brokers[data["BrokerId"]]
                if data.get("Fenced", 0) == FENCE:
                    b.fenced = True
                elif data.get("Fenced", 0) == UNFENCE:
                    b.fenced = False
                if data.get("InControlledShutdown", 0) == IN_CONTROLLED_SHUTDOWN:
                    b.shutting_down = True
            elif kind == "TopicRecord":
                self.topics[data["Name"]], self.names[data["TopicId"]] = data["TopicId"], data["Name"]
                self.partitions[data["TopicId"]] = {}
            elif kind == "PartitionRecord":
                self.partitions[data["TopicId"]][data["PartitionId"]] = Partition(
                    data["TopicId"], data["PartitionId"], list(data["Replicas"]), list(data["Isr"]), data["Leader"],
                    list(data["Directories"]))
            elif kind == "PartitionChangeRecord":
                parts = self.partitions[data["TopicId"]]
                parts[data["PartitionId"]] = merge(parts[data["PartitionId"]], data)
            elif kind == "UnregisterBrokerRecord":
                del self.brokers[data["BrokerId"]]
                self.sessions.pop(data["BrokerId"], None)
            elif kind == "RemoveTopicRecord":
                name = self.names.pop(data["TopicId"])
                del self.topics[name], self.partitions[data["TopicId"]]
            else:
                raise AssertionError(f"the model writes no {kind}")
            if kind == "RegisterBrokerRecord":
                b = self.brokers[data["BrokerId"]]
                if b.shutting_down and not data.get("InControlledShutdown", False):
                    b.shutting_down = False

    def all_partitions(self) -> Iterable[Partition]:
        for topic_id in self.partitions:
            yield from self.partitions[topic_id].values()

    def active(self, broker_id: int) -> bool:
        """``ClusterControlManager.isActive``: registered, unfenced, not in controlled shutdown."""
        b = self.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.shutting_down

    def default_dir(self, broker_id: int) -> str:
        """``ClusterControlManager.defaultDir``."""
        b = self.brokers.get(broker_id)
        if b is None:
            return UNASSIGNED_DIR
        if not b.dirs:
            return MIGRATING_DIR
        return b.dirs[0] if len(b.dirs) == 1 else UNASSIGNED_DIR

    def _session(self, broker: Broker) -> Session | None:
        s = self.sessions.get(broker.id)
        return s if s is not None and s.epoch == broker.epoch else None

    def valid_session(self, broker: Broker, now: int) -> bool:
        s = self._session(broker)
        return s is not None and s.contact_ms is not None and s.contact_ms + self.timeout >= now

    # the steps

    def failover(self, broker_id: int, records: list[dict], *, add: int | None = None,
                 only_leaderless: bool = False) -> None:
        """``generateLeaderAndIsrUpdates``: the partitions whose ISR holds ``broker_id`` lose it and
        elect again without it, or (``only_leaderless``) every leaderless partition elects with ``add``
        acceptable although the image still shows it fenced."""
        def acceptable(r: int) -> bool:
            return r != broker_id and (r == add or self.active(r))

        for p in list(self.all_partitions()):
            if only_leaderless:
                if p.leader != NO_LEADER:
                    continue
                change = build_change(p, acceptable, self.default_dir)
            else:
                if broker_id not in p.isr:
                    continue
                change = build_change(p, acceptable, self.default_dir, isr=[r for r in p.isr if r != broker_id])
            if change is not None:
                records.append({"type": "PartitionChangeRecord", "data": change})

    def fence(self, broker: Broker, records: list[dict]) -> None:
        """``handleBrokerFenced``."""
        self.failover(broker.id, records)
        records.append({"type": "BrokerRegistrationChangeRecord",
                        "data": {"BrokerId": broker.id, "BrokerEpoch": broker.epoch, "Fenced": FENCE}})

    def leads(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for p in self.all_partitions())

    def lowest_active_offset(self) -> int:
        offsets = []
        for b in self.brokers.values():
            s = self._session(b)
            if b.fenced or (s is not None and s.shutdown_offset >= 0):
                continue
            offsets.append(s.metadata_offset if s is not None else -1)
        return min(offsets, default=(1 << 63) - 1)

    def imbalanced(self) -> bool:
        return any(p.replicas and p.leader != p.replicas[0] for p in self.all_partitions())

    def maybe_schedule_balance(self, at_ms: int) -> None:
        """``QuorumController.maybeScheduleNextBalancePartitionLeaders``, called after every write event:
        with no check pending and some partition not led by its preferred replica, the next check comes
        one interval after this event. (EVERY_INTERVAL: the next check one interval after the last, or
        after the take-over, whatever the partitions.)"""
        if self.interval is None or self.balance_at is not None:
            return
        if self.schedule == KAFKA_SCHEDULE and self.imbalanced():
            self.balance_at = at_ms + self.interval
        elif self.schedule == EVERY_INTERVAL:
            self.balance_at = at_ms + self.interval

    def balance(self) -> list[dict]:
        """``maybeBalancePartitionLeaders``: a preferred election for every imbalanced partition."""
        records = []
        for p in list(self.all_partitions()):
            if p.replicas and p.leader != p.replicas[0]:
                change = build_change(p, self.active, self.default_dir, preferred=True)
                if change is not None:
                    records.append({"type": "PartitionChangeRecord", "data": change})
        return records

    def deferred(self, now: int, offset: int) -> list[dict]:
        """The deferred events due before a request at ``now``, in the order of their deadlines: the
        fencing of each stale broker (``maybeFenceOneStaleBroker``: a session is stale once more than the
        timeout has passed since its last contact, so it fires just after contact + timeout) and the
        leader-imbalance check. Each is a write event of its own."""
        records: list[dict] = []
        while True:
            stale = sorted((s.contact_ms + self.timeout, b.id) for b in self.brokers.values()
                           if not b.fenced and (s := self._session(b)) is not None and s.contact_ms is not None
                           and s.contact_ms + self.timeout < now)
            balance_due = self.balance_at is not None and self.balance_at <= now
            if stale and (not balance_due or stale[0][0] < self.balance_at):
                deadline, broker_id = stale[0]
                step: list[dict] = []
                self.fence(self.brokers[broker_id], step)
                self.sessions[broker_id].shutdown_offset = -1
                self.apply(step, offset)
                records += step
                if self.schedule == KAFKA_SCHEDULE:
                    self.maybe_schedule_balance(deadline)
            elif balance_due:
                at = self.balance_at
                self.balance_at = None
                self.checks += 1
                step = self.balance()
                self.apply(step, offset)
                records += step
                self.maybe_schedule_balance(at if self.schedule == KAFKA_SCHEDULE else now)
            else:
                return records

    def handle(self, request: dict, adopt: Callable[[], list[dict]]) -> Decision:
        """The records and response for one request (an event with ``offset`` and ``timestamp``), the
        deferred events due before it first. ``adopt()`` gives the project's records for this request,
        for the random choices Kafka makes."""
        now, offset = request["timestamp"], request["offset"]
        if self.active_since is None:  # the controller's activation is a write event too
            self.active_since = now
            self.maybe_schedule_balance(now)
        before = self.deferred(now, offset)
        handler = getattr(self, "_" + request["type"])
        decision = handler(request["data"], now, offset, adopt)
        self.apply(decision.records, offset)
        if self.schedule == KAFKA_SCHEDULE:
            self.maybe_schedule_balance(now)
        decision.records = before + decision.records
        return decision

    # the requests

    def _BrokerRegistrationRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        existing = self.brokers.get(data["BrokerId"])
        same = existing is not None and existing.incarnation == data["IncarnationId"]
        if (existing is not None and not same and not existing.shutting_down
                and self.valid_session(existing, now)):
            return Decision([], {"ErrorCode": ERRORS["DUPLICATE_BROKER_REGISTRATION"]})
        records: list[dict] = []
        if not same:
            # handleBrokerShutdown without ELR: the previous incarnation leaves every ISR, as at a fencing
            self.failover(data["BrokerId"], records)
        epoch = existing.epoch if same else offset
        register = {"BrokerId": data["BrokerId"], "IncarnationId": data["IncarnationId"], "BrokerEpoch": epoch,
                    "EndPoints": data["Listeners"], "Features": data["Features"], "Rack": data["Rack"],
                    "Fenced": existing.fenced if same else True,
                    "InControlledShutdown": existing.shutting_down if same else False,
                    "LogDirs": data["LogDirs"], "IsMigratingZkBroker": False}
        records.append({"type": "RegisterBrokerRecord", "data": register})
        session = self.sessions.get(data["BrokerId"]) if same else None
        if session is not None and session.epoch == epoch:
            session.registered_offset = offset
        else:
            self.sessions[data["BrokerId"]] = Session(epoch=epoch, registered_offset=offset)
        return Decision(records, {"ErrorCode": 0, "BrokerEpoch": epoch})

    def _BrokerHeartbeatRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        b = self.brokers.get(data["BrokerId"])
        if b is None or b.epoch != data["BrokerEpoch"]:
            return Decision([], {"ErrorCode": ERRORS["STALE_BROKER_EPOCH"]})
        s = self._session(b)
        if s is None:
            s = self.sessions[b.id] = Session(epoch=b.epoch, registered_offset=b.epoch)
        caught_up = data["CurrentMetadataOffset"] >= s.registered_offset
        current = FENCED if b.fenced else CONTROLLED_SHUTDOWN if s.shutdown_offset >= 0 else UNFENCED
        following = next_heartbeat_state((current, data["WantFence"], data["WantShutDown"], caught_up,
                                          self.leads(b.id), s.shutdown_offset <= self.lowest_active_offset()))
        records: list[dict] = []
        if following != current:
            for step in HEARTBEAT_RECORDS[following]:
                if step == "failover":
                    self.failover(b.id, records)
                elif step == "fence":
                    records.append({"type": "BrokerRegistrationChangeRecord",
                                    "data": {"BrokerId": b.id, "BrokerEpoch": b.epoch, "Fenced": FENCE}})
                elif step == "unfence":
                    records.append({"type": "BrokerRegistrationChangeRecord",
                                    "data": {"BrokerId": b.id, "BrokerEpoch": b.epoch, "Fenced": UNFENCE}})
                elif step == "elect leaderless":
                    self.failover(NO_LEADER, records, add=b.id, only_leaderless=True)
                elif step == "enter controlled shutdown" and not b.shutting_down:
                    records.append({"type": "BrokerRegistrationChangeRecord",
                                    "data": {"BrokerId": b.id, "BrokerEpoch": b.epoch,
                                             "InControlledShutdown": IN_CONTROLLED_SHUTDOWN}})
        fenced = following in (FENCED, SHUTDOWN_NOW)
        s.contact_ms, s.metadata_offset = now, data["CurrentMetadataOffset"]
        if fenced:
            s.shutdown_offset = -1
        elif following == CONTROLLED_SHUTDOWN and s.shutdown_offset < 0:
            s.shutdown_offset = offset
        return Decision(records, {"ErrorCode": 0, "IsCaughtUp": caught_up, "IsFenced": fenced,
                                  "ShouldShutDown": following == SHUTDOWN_NOW})

    def _CreateTopicsRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        """Placement and topic ids are Kafka's random draws: taken from the project's records, and the
        placer's guarantees checked (``placement_problems``)."""
        chosen = adopt()
        records, results = [], []
        for topic in data["Topics"]:
            name = topic["Name"]
            if name in self.topics:
                results.append({"Name": name, "ErrorCode": ERRORS["TOPIC_ALREADY_EXISTS"]})
                continue
            if self.cannot_place(topic["ReplicationFactor"]):
                results.append({"Name": name, "ErrorCode": ERRORS["INVALID_REPLICATION_FACTOR"]})
                continue
            mine = [r for r in chosen if r["type"] == "TopicRecord" and r["data"]["Name"] == name]
            if not mine:
                results.append({"Name": name, "ErrorCode": None})  # the model cannot say why not
                continue
            topic_id = mine[0]["data"]["TopicId"]
            placed = [r["data"]["Replicas"] for r in chosen
                      if r["type"] == "PartitionRecord" and r["data"]["TopicId"] == topic_id]
            records.append({"type": "TopicRecord", "data": {"Name": name, "TopicId": topic_id}})
            records += [self._new_partition(topic_id, index, replicas) for index, replicas in enumerate(placed)]
            results.append({"Name": name, "ErrorCode": 0, "TopicId": topic_id, "NumPartitions": len(placed),
                            "ReplicationFactor": len(placed[0]) if placed else None,
                            "placement": placed, "requested": (topic["NumPartitions"], topic["ReplicationFactor"])})
        return Decision(records, {"Topics": results}, adopted=True)

    def cannot_place(self, replication_factor: int) -> bool:
        """``StripedReplicaPlacer.place``'s refusals: the usable brokers (not shutting down, as the
        heartbeat manager knows it) must include an unfenced one and be at least as many as the
        replication factor."""
        usable = [b for b in self.brokers.values() if not self.shutting_down(b.id)]
        return all(b.fenced for b in usable) or replication_factor > len(usable)

    def shutting_down(self, broker_id: int) -> bool:
        """In a controlled shutdown this controller began (the heartbeat manager's soft state)."""
        s = self.sessions.get(broker_id)
        return s is not None and s.shutdown_offset >= 0

    def placement_problems(self, placed: list[list[int]], replication_factor: int,
                           shutting_down: frozenset[int]) -> list[str]:
        """``StripedReplicaPlacer``'s guarantees for a new topic's partitions: as many distinct
        registered brokers as asked, none shutting down, an unfenced leader, and as many racks as the
        usable brokers offer up to the replication factor."""
        usable = [b for b in self.brokers.values() if b.id not in shutting_down]
        racks = {b.rack for b in usable}
        problems = []
        for index, replicas in enumerate(placed):
            if len(replicas) != replication_factor or len(set(replicas)) != len(replicas):
                problems.append(f"partition {index}: {replicas} is not {replication_factor} distinct brokers")
            elif any(r not in self.brokers or r in shutting_down for r in replicas):
                problems.append(f"partition {index}: {replicas} names a broker not registered or shutting down")
            elif self.brokers[replicas[0]].fenced:
                problems.append(f"partition {index}: leader {replicas[0]} is fenced")
            elif len({self.brokers[r].rack for r in replicas}) != min(replication_factor, len(racks)):
                problems.append(f"partition {index}: {replicas} spans too few racks")
        return problems

    def _new_partition(self, topic_id: str, index: int, replicas: list[int]) -> dict:
        """``buildPartitionRegistration``: the active replicas in sync, the first of them leading."""
        isr = [r for r in replicas if self.active(r)]
        return {"type": "PartitionRecord", "data": {
            "PartitionId": index, "TopicId": topic_id, "Replicas": list(replicas), "Isr": isr,
            "RemovingReplicas": [], "AddingReplicas": [], "Leader": isr[0] if isr else NO_LEADER,
            "LeaderRecoveryState": RECOVERED, "LeaderEpoch": 0, "PartitionEpoch": 0,
            "Directories": [self.default_dir(r) for r in replicas], "EligibleLeaderReplicas": [], "LastKnownElr": []}}

    def _CreatePartitionsRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        """``createPartitionsForTopic``; the placement of the new partitions is the project's (random in
        Kafka), its guarantees checked like a new topic's."""
        chosen = adopt()
        records, results, placements = [], [], []
        for topic in data["Topics"]:
            name, topic_id = topic["Name"], self.topics.get(topic["Name"])
            parts = self.partitions.get(topic_id) if topic_id is not None else None
            if parts is None:
                error = "UNKNOWN_TOPIC_OR_PARTITION"
            elif topic["Count"] <= len(parts):
                error = "INVALID_PARTITIONS"
            elif self.cannot_place(len(parts[0].replicas)):
                error = "INVALID_REPLICATION_FACTOR"
            else:
                placed = {r["data"]["PartitionId"]: r["data"]["Replicas"] for r in chosen
                          if r["type"] == "PartitionRecord" and r["data"]["TopicId"] == topic_id}
                new = [placed.get(index) for index in range(len(parts), topic["Count"])]
                if any(replicas is None for replicas in new):
                    results.append((name, None))  # the model cannot say why the project placed none
                    continue
                records += [self._new_partition(topic_id, index, replicas)
                            for index, replicas in zip(range(len(parts), topic["Count"]), new)]
                placements.append((new, len(parts[0].replicas)))
                error = "NONE"
            results.append((name, ERRORS[error]))
        return Decision(records, {"results": results, "placements": placements}, adopted=True)

    def _UnregisterBrokerRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        """``unregisterBroker``: ``handleBrokerUnregistered``, its partitions failing over first."""
        b = self.brokers.get(data["BrokerId"])
        if b is None:
            return Decision([], {"ErrorCode": ERRORS["BROKER_ID_NOT_REGISTERED"]})
        records: list[dict] = []
        self.failover(b.id, records)
        records.append({"type": "UnregisterBrokerRecord", "data": {"BrokerId": b.id, "BrokerEpoch": b.epoch}})
        return Decision(records, {"ErrorCode": 0})

    def _ListPartitionReassignmentsRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        """Every running reassignment (``Topics`` null): no records."""
        ongoing = sorted((self.names[p.topic_id], p.id, p.replicas, p.adding, p.removing)
                         for p in self.all_partitions() if p.adding or p.removing)
        return Decision([], {"ErrorCode": 0, "ongoing": ongoing})

    def _AlterPartitionRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        sender = self.brokers.get(data["BrokerId"])
        if sender is None or sender.epoch != data["BrokerEpoch"]:
            return Decision([], {"ErrorCode": ERRORS["STALE_BROKER_EPOCH"], "Topics": []})
        records, topics = [], []
        for topic_data in data["Topics"]:
            parts = self.partitions.get(topic_data["TopicId"])
            results = []
            topics.append({"TopicId": topic_data["TopicId"], "Partitions": results})
            for pd in topic_data["Partitions"]:
                index = pd["PartitionIndex"]
                p = parts.get(index) if parts is not None else None
                if parts is None or p is None:
                    error = "UNKNOWN_TOPIC_ID" if parts is None else "UNKNOWN_TOPIC_OR_PARTITION"
                    results.append({"PartitionIndex": index, "ErrorCode": ERRORS[error]})
                    continue
                error = next((e for e, broken in alter_partition_checks(self, sender.id, p, pd) if broken), None)
                if error is not None:
                    results.append({"PartitionIndex": index, "ErrorCode": ERRORS[error]})
                    continue
                change = build_change(p, self.active, self.default_dir,
                                      isr=[s["BrokerId"] for s in pd["NewIsrWithEpochs"]],
                                      recovery=pd["LeaderRecoveryState"])
                if change is not None:
                    records.append({"type": "PartitionChangeRecord", "data": change})
                    p = merge(p, change)  # the answer shows the partition as the record leaves it
                    if change.get("Leader", NO_LEADER_CHANGE) not in (NO_LEADER_CHANGE, sender.id):
                        results.append({"PartitionIndex": index, "ErrorCode": ERRORS["NEW_LEADER_ELECTED"]})
                        continue
                results.append({"PartitionIndex": index, "ErrorCode": 0, "LeaderId": p.leader,
                                "LeaderEpoch": p.leader_epoch, "Isr": list(p.isr),
                                "LeaderRecoveryState": p.recovery, "PartitionEpoch": p.partition_epoch})
        return Decision(records, {"ErrorCode": 0, "Topics": topics})

    def _ElectLeadersRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        election = data["ElectionType"]
        if data["TopicPartitions"] is None:
            wanted = [(name, None) for name in self.topics]
        else:
            wanted = [(t["Topic"], t["Partitions"]) for t in data["TopicPartitions"]]
        records, results = [], []
        for name, ids in wanted:
            topic_id = self.topics.get(name)
            every = ids is None
            if every:
                ids = sorted(self.partitions[topic_id])
            for index in ids:
                p = self.partitions[topic_id].get(index) if topic_id is not None else None
                if p is None:
                    error = "UNKNOWN_TOPIC_OR_PARTITION"
                elif (election == PREFERRED and p.replicas and p.leader == p.replicas[0]) or (
                        election == UNCLEAN and p.leader != NO_LEADER):
                    error = "ELECTION_NOT_NEEDED"
                else:
                    change = build_change(p, self.active, self.default_dir, preferred=election == PREFERRED,
                                          unclean=election == UNCLEAN)
                    if change is None:
                        error = "PREFERRED_LEADER_NOT_AVAILABLE" if election == PREFERRED else (
                            "ELIGIBLE_LEADERS_NOT_AVAILABLE")
                    else:
                        error = "NONE"
                        records.append({"type": "PartitionChangeRecord", "data": change})
                if not (every and error == "ELECTION_NOT_NEEDED"):
                    results.append((name, index, ERRORS[error]))
        return Decision(records, {"ErrorCode": 0, "results": sorted(results)})

    def _AlterPartitionReassignmentsRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        records, results = [], []
        for topic in data["Topics"]:
            topic_id = self.topics.get(topic["Name"])
            for pd in topic["Partitions"]:
                index = pd["PartitionIndex"]
                p = self.partitions[topic_id].get(index) if topic_id is not None else None
                if p is None:
                    results.append((topic["Name"], index, ERRORS["UNKNOWN_TOPIC_OR_PARTITION"]))
                    continue
                target = pd["Replicas"]
                if target is None:  # cancelPartitionReassignment, PartitionReassignmentRevert
                    if not p.adding and not p.removing:
                        results.append((topic["Name"], index, ERRORS["NO_REASSIGNMENT_IN_PROGRESS"]))
                        continue
                    replicas = [r for r in p.replicas if r not in p.adding]
                    isr = [r for r in p.isr if r not in p.adding]
                    if not isr:  # unclean.leader.election.enable is false here
                        results.append((topic["Name"], index, ERRORS["INVALID_REPLICA_ASSIGNMENT"]))
                        continue
                    change = build_change(p, self.active, self.default_dir, isr=isr, replicas=replicas,
                                          adding=[], removing=[])
                else:  # changePartitionReassignment
                    if (not target or len(set(target)) != len(target)
                            or any(r not in self.brokers for r in target)):
                        results.append((topic["Name"], index, ERRORS["INVALID_REPLICA_ASSIGNMENT"]))
                        continue
                    removing = sorted(set(p.replicas) - set(target))
                    adding = sorted(set(target) - set(p.replicas))
                    replicas = list(target) + removing
                    change = build_change(p, self.active, self.default_dir,
                                          replicas=None if replicas == p.replicas else replicas,
                                          removing=removing or None, adding=adding or None)
                if change is not None:
                    records.append({"type": "PartitionChangeRecord", "data": change})
                results.append((topic["Name"], index, 0))
        return Decision(records, {"ErrorCode": 0, "results": sorted(results)})

    def _DeleteTopicsRequest(self, data: dict, now: int, offset: int, adopt) -> Decision:
        records, results = [], []
        for topic in data["Topics"]:
            topic_id = self.topics.get(topic["Name"])
            if topic_id is None:
                results.append((topic["Name"], ERRORS["UNKNOWN_TOPIC_OR_PARTITION"]))
                continue
            records.append({"type": "RemoveTopicRecord", "data": {"TopicId": topic_id}})
            results.append((topic["Name"], 0))
        return Decision(records, {"results": sorted(results)})
