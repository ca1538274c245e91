"""A deterministic, seeded simulation of a KRaft metadata quorum (KIP-595) in event time.

N voters (and M observers) run as ``kraftlake.raft.replica.Replica`` over a network that loses, delays,
duplicates and reorders messages, is partitioned and healed, and whose replicas crash, shut down
gracefully (a leader resigns with EndQuorumEpoch) and restart from their durable state (the
``quorum-state`` file and the log). After every step the checker asserts Raft's safety properties:

- election safety: at most one leader per epoch;
- log matching: two logs with an entry of the same epoch at the same offset agree on everything up to it;
- leader completeness: every leader's log holds every committed entry;
- committed entries are never lost: each node's log below its high watermark is the committed prefix;
- the high watermark of a node (per incarnation) never goes backwards.

Everything a replica receives is recorded as a ``metadata_log`` event (``traffic``): the messages
delivered to it, at the time they arrive, and its ReplicaStartup / ReplicaShutdown. The simulation is
event-driven: messages are delivered at their arrival time and timers fire at their exact deadlines
(timers first on a tie), which is exactly how ``Replica.apply`` catches a replica up before each event;
so replaying ``traffic`` through ``quorum.replay_quorum`` (or the streaming job) rebuilds every
replica as it was here.

The same seed always gives the same run: one ``random.Random(seed)`` drives the network and the faults,
and every node's jitter comes from its own RNG seeded by (seed, node id).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field, replace

from kraftlake.raft.config import DRAFT, KAFKA, RaftConfig
from kraftlake.raft.draft import VOTER_ASSIGNMENT
from kraftlake.raft.log import LogEntry
from kraftlake.raft.node import LEADER, RaftNode, message
from kraftlake.raft.replica import Replica, traffic_event

START_MS = 1_763_550_000_000  # event time of the simulation's first instant


@dataclass(frozen=True)
class SimConfig:
    voters: int = 3
    observers: int = 0
    duration_ms: int = 20_000
    step_ms: int = 10
    loss: float = 0.05
    duplicate: float = 0.02
    min_delay_ms: int = 1
    max_delay_ms: int = 30
    partition_every_ms: int = 4_000  # mean time between partitions
    partition_ms: int = 3_000  # mean length of one
    crash_every_ms: int = 6_000  # mean time between crashes
    down_ms: int = 2_000  # mean downtime
    resign_every_ms: int = 8_000  # mean time between graceful shutdowns of the leader (EndQuorumEpoch)
    alter_every_ms: int = 0  # mean time between AlterQuorum requests (0: the voters never change)
    # every newly elected leader is asked at once to remove a voter (the case where Raft's single-server
    # change loses committed entries unless the leader first commits an entry of its own epoch)
    alter_on_election: bool = False
    one_way_every_ms: int = 0  # mean time between one-way link failures (a hears b, b does not hear a)
    log_check_every_ms: int = 100  # log matching is checked every this often (it is quadratic)
    # kafka, or the KIP-595 draft (ADR 0012): then the voters are quorum.voters, the observers start with
    # the voters as bootstrap.servers, and the first leader generates the cluster id
    protocol: str = KAFKA
    grow_to: int = 0  # the draft's bootstrapping example: AlterQuorum grows the voters to this many (0: never)
    # mean time between requests of a stray node of another cluster (FOREIGN) to a replica that knows its
    # cluster id, which must refuse them with INCONSISTENT_CLUSTER_ID (0: none)
    foreign_every_ms: int = 0
    raft: RaftConfig = field(default_factory=lambda: RaftConfig(
        cluster_id="sim", election_timeout_ms=500, election_backoff_max_ms=500, fetch_timeout_ms=1000,
        request_timeout_ms=300, append_interval_ms=50))


# The mix that finds the single-server voter change bug when the rule against it is off (issue 14):
# 4 voters (an even count, so one leader's added voter and the next one's removal can have disjoint
# majorities), an observer to add, a removal asked of every new leader at once, frequent partitions and
# one-way link failures. With the rule on, it keeps Raft's safety; with it off, seeds 436 and 798 (of 3,000)
# lose committed entries.
VOTER_CHANGE_MIX = SimConfig(voters=4, observers=1, duration_ms=10_000, alter_every_ms=400, alter_on_election=True,
                             partition_every_ms=1000, partition_ms=1000, one_way_every_ms=200, crash_every_ms=4000,
                             resign_every_ms=4000)


@dataclass
class Violation:
    time_ms: int
    rule: str
    detail: str


@dataclass
class SimResult:
    seed: int
    violations: list[Violation]
    leaders: dict[int, int]  # epoch -> leader
    committed: int  # length of the committed prefix at the end
    messages: int
    events: list[dict]  # quorum_events rows, as the replicas reported them
    traffic: list[dict]  # every event a replica received, in delivery order (offsets from 0)
    replicas: dict[int, Replica]
    cluster_ids: tuple[str, ...] = ()  # committed (the KIP-595 draft: the generated one)
    foreign_refused: int = 0  # requests of another cluster refused by replicas that knew their cluster id

    @property
    def ok(self) -> bool:
        return not self.violations


ADMIN = -1  # the source of AlterQuorum and DescribeQuorum requests: a client, not a replica
FOREIGN = 10_000  # a stray node of another cluster
FOREIGN_CLUSTER_ID = "Zm9yZWlnbi1jbHVzdGVyAA"  # its cluster id (a valid Kafka Uuid, not the simulated one's)

# The draft's bootstrapping example (section "Bootstrapping Procedure"): one voter, two observers that
# find it by DiscoverBrokers, AlterQuorum growing the voters to three; partitions, crashes and a stray
# node of another cluster on the way.
DRAFT_BOOTSTRAP_MIX = SimConfig(voters=1, observers=2, duration_ms=6_000, protocol=DRAFT, grow_to=3,
                                foreign_every_ms=300, partition_every_ms=1500, partition_ms=800)


class Simulation:
    def __init__(self, seed: int, config: SimConfig = SimConfig()) -> None:
        self.seed, self.cfg = seed, config
        self.rng = random.Random(seed)
        self.voter_ids = tuple(range(1, config.voters + 1))
        self.ids = tuple(range(1, config.voters + config.observers + 1))
        self.properties = {"kraftlake.quorum.fetch.interval.ms": str(config.raft.fetch_interval_ms),
                           "kraftlake.quorum.fetch.max.records": str(config.raft.fetch_max_records),
                           "kraftlake.quorum.unsafe.grant.any.vote": str(config.raft.unsafe_grant_any_vote).lower()}
        self.raft = config.raft if config.protocol == KAFKA else replace(config.raft, protocol=config.protocol,
                                                                           cluster_id=None)
        self.replicas: dict[int, Replica] = {i: Replica(i) for i in self.ids}
        self.down: dict[int, int] = {}  # node -> restart time
        self.group: dict[int, int] = {i: 0 for i in self.ids}
        self.heal_at: int | None = None
        self.one_way: dict[tuple[int, int], int] = {}  # (source, destination) cut -> heal time
        self.queue: list[tuple[int, int, dict]] = []
        self.seq = 0
        self.traffic: list[dict] = []
        self.violations: list[Violation] = []
        self.leaders: dict[int, int] = {}
        self.checker = SafetyChecker(self.violations)
        self.messages = 0
        self.foreign_refused = 0
        self.events: list[dict] = []

    # ----------------------------------------------------------------------------------- network
    def _send(self, msgs: list[dict], now: int) -> None:
        for m in msgs:
            if m["destination"] in (ADMIN, FOREIGN):
                continue  # answers to the admin client or the stray node: the replay's responses table has them
            self.messages += 1
            if self.rng.random() < self.cfg.loss:
                continue
            copies = 2 if self.rng.random() < self.cfg.duplicate else 1
            for _ in range(copies):
                self.seq += 1
                at = now + self.rng.randint(self.cfg.min_delay_ms, self.cfg.max_delay_ms)
                heapq.heappush(self.queue, (at, self.seq, m))

    def _reachable(self, a: int, b: int) -> bool:
        if a in (ADMIN, FOREIGN):
            return b not in self.down
        return (a not in self.down and b not in self.down and self.group[a] == self.group[b]
                and (a, b) not in self.one_way)

    def _deliver(self, replica_id: int, event: dict) -> None:
        """Record the event as traffic and hand it to the replica, as a replay will."""
        event = {**event, "offset": len(self.traffic), "leader_epoch": -1, "destination_id": replica_id}
        self.traffic.append(event)
        node = self.replicas[replica_id].node
        guarded = event.get("source_id") == FOREIGN and node is not None and node.cluster_id is not None
        rows, sent = self.replicas[replica_id].apply(event, self.properties)
        for table, row in rows:
            if guarded and table == "responses":
                if row["error_name"] != "INCONSISTENT_CLUSTER_ID":
                    self._violate(row["timestamp"], "foreign_cluster_id_accepted",
                                  f"node {replica_id} answered a {row['request_type']} of cluster "
                                  f"{FOREIGN_CLUSTER_ID} with {row['error_name']}")
                self.foreign_refused += 1
            if table == "quorum_events":
                self.events.append(row)
                if row["event"] == "leader_elected":
                    other = self.leaders.setdefault(row["epoch"], replica_id)
                    if other != replica_id:
                        self._violate(row["timestamp"], "election_safety",
                                      f"epoch {row['epoch']}: leaders {other} and {replica_id}")
                    elif self.cfg.alter_on_election:
                        self._remove_a_voter(row["timestamp"], replica_id)
        self._send(sent, event["timestamp"])

    def _lifecycle(self, replica_id: int, now: int, type_: str, **data: object) -> None:
        self._deliver(replica_id, {"type": type_, "version": 0, "timestamp": now, "source_id": None,
                                   "data": {"ReplicaId": replica_id, **data}})

    def _start(self, replica_id: int, now: int) -> None:
        raft = self.raft
        if raft.protocol == DRAFT and replica_id not in self.voter_ids:
            raft = replace(raft, bootstrap_servers=",".join(map(str, self.voter_ids)))
        self._lifecycle(replica_id, now, "ReplicaStartup", ClusterId=raft.cluster_id, Voters=list(self.voter_ids),
                        JitterSeed=self.seed, Configs=[{"Name": k, "Value": v} for k, v in
                                                       sorted(raft.kafka_configs().items())])
        self.checker.restarted(replica_id, self.replicas[replica_id].node.high_watermark)

    def _leader(self) -> int | None:
        live = [(r.node.epoch, i) for i, r in self.replicas.items()
                if i not in self.down and r.node is not None and r.node.state == LEADER]
        return max(live)[1] if live else None

    def _faults(self, now: int) -> None:
        step, cfg = self.cfg.step_ms, self.cfg
        if self.heal_at is not None and now >= self.heal_at:
            self.group = {i: 0 for i in self.ids}
            self.heal_at = None
        elif self.heal_at is None and self.rng.random() < step / cfg.partition_every_ms:
            self.group = {i: self.rng.randrange(2) for i in self.ids}
            self.heal_at = now + self.rng.randint(1, 2 * cfg.partition_ms)
        for link, heal in sorted(self.one_way.items()):
            if now >= heal:
                del self.one_way[link]
        if cfg.one_way_every_ms and self.rng.random() < step / cfg.one_way_every_ms:
            a, b = self.rng.sample(self.ids, 2)
            self.one_way[(a, b)] = now + self.rng.randint(1, 2 * cfg.partition_ms)
        for i, back in sorted(self.down.items()):
            if now >= back:
                del self.down[i]
                self._start(i, now)
        if not self.down and self.rng.random() < step / cfg.crash_every_ms:
            i = self.rng.choice(self.ids)
            self._lifecycle(i, now, "ReplicaShutdown", Graceful=False)
            self.down[i] = now + self.rng.randint(1, 2 * cfg.down_ms)
        leader = self._leader()
        if leader is not None and not self.down and self.rng.random() < step / cfg.resign_every_ms:
            self._lifecycle(leader, now, "ReplicaShutdown", Graceful=True)
            self.down[leader] = now + self.rng.randint(1, 2 * cfg.down_ms)
        if cfg.alter_every_ms and self.rng.random() < step / cfg.alter_every_ms:
            self._alter_quorum(now)
        if cfg.grow_to and leader is not None and self.rng.random() < step / 200:
            self._grow(now, leader)
        if cfg.foreign_every_ms and self.rng.random() < step / cfg.foreign_every_ms:
            self._foreign_request(now)

    def _grow(self, now: int, leader: int) -> None:
        """The bootstrapping example's operator: once the cluster has its id, AlterQuorum to ``grow_to``
        voters (the lowest ids), asked again until the leader's voters are there."""
        node = self.replicas[leader].node
        if node.cluster_id is None or len(node.voters) >= self.cfg.grow_to or node.target_voters is not None:
            return
        target = sorted(set(node.voters) | set(self.ids[:self.cfg.grow_to]))[:max(self.cfg.grow_to, len(node.voters))]
        self._send([{"type": "AlterQuorumRequest", "source": ADMIN, "destination": leader,
                     "data": {"TargetVoters": target}}], now)

    def _foreign_request(self, now: int) -> None:
        """A request of a stray node of another cluster to a replica that knows its own cluster's id."""
        knowing = [i for i, r in self.replicas.items() if i not in self.down and r.node is not None
                   and r.node.cluster_id is not None]
        if not knowing:
            return
        target = self.rng.choice(knowing)
        epoch = self.replicas[target].node.epoch + 1
        fetch = "FetchQuorumRecordsRequest" if self.raft.protocol == DRAFT else "FetchRequest"
        kinds = [
            message("VoteRequest", FOREIGN, target, ClusterId=FOREIGN_CLUSTER_ID, VoterId=target, CandidateEpoch=epoch,
                    CandidateId=FOREIGN, LastOffsetEpoch=epoch - 1, LastOffset=1_000_000),
            message("BeginQuorumEpochRequest", FOREIGN, target, ClusterId=FOREIGN_CLUSTER_ID, VoterId=target,
                    LeaderId=FOREIGN, LeaderEpoch=epoch),
            message("EndQuorumEpochRequest", FOREIGN, target, ClusterId=FOREIGN_CLUSTER_ID, LeaderId=FOREIGN,
                    LeaderEpoch=epoch, PreferredSuccessors=[]),
            message(fetch, FOREIGN, target, ClusterId=FOREIGN_CLUSTER_ID, ReplicaId=FOREIGN,
                    CurrentLeaderEpoch=epoch - 1, FetchOffset=0, LastFetchedEpoch=0)]
        if self.raft.protocol == DRAFT:
            kinds.append(message("DiscoverBrokersRequest", FOREIGN, target, ClusterId=FOREIGN_CLUSTER_ID,
                                 ReplicaId=FOREIGN, Host="stray", Port=9093, BootTimestamp=now))
        self._send([self.rng.choice(kinds)], now)

    def _alter_quorum(self, now: int, target_node: int | None = None) -> None:
        """An operator asks the node it believes leads (or ``target_node``) for new voters: swap one
        voter for a non-voter, add or remove one, or cancel (null)."""
        target_node = target_node or self._leader() or self.rng.choice(self.ids)
        node = self.replicas[target_node].node
        voters = list(node.voters) if node is not None and node.voters else list(self.voter_ids)  # (a draft
        # observer may know no voters yet)
        others = [i for i in self.ids if i not in voters]
        roll = self.rng.random()
        if roll < 0.25:
            target = None
        elif others and (roll < 0.75 or len(voters) <= 1):
            target = sorted(set(voters) - {self.rng.choice(voters)} | {self.rng.choice(others)}) \
                if roll < 0.6 else sorted(voters + [self.rng.choice(others)])
        elif len(voters) > 1:
            target = sorted(set(voters) - {self.rng.choice(voters)})
        else:
            return
        msg = {"type": "AlterQuorumRequest", "source": ADMIN, "destination": target_node,
               "data": {"TargetVoters": target}}
        self._send([msg], now)

    def _remove_a_voter(self, now: int, leader: int) -> None:
        """An operator removes a voter as soon as a leader is elected (never the leader itself)."""
        voters = list(self.replicas[leader].node.voters)
        removable = [v for v in voters if v != leader]
        if len(voters) <= 2 or not removable:
            return
        target = sorted(set(voters) - {self.rng.choice(removable)})
        self._send([{"type": "AlterQuorumRequest", "source": ADMIN, "destination": leader,
                     "data": {"TargetVoters": target}}], now)

    # -------------------------------------------------------------------------------------- run
    def run(self) -> SimResult:
        now = START_MS
        for i in self.ids:
            self._start(i, now)
        end_time = START_MS + self.cfg.duration_ms
        while now <= end_time:
            self._faults(now)
            self._until(now + self.cfg.step_ms)
            self._check(now)
            now += self.cfg.step_ms
        for i in self.ids:  # the tool's DescribeQuorum brings every live replica up to the end time
            if i not in self.down:
                self._deliver(i, {**traffic_event({"type": "DescribeQuorumRequest", "source": ADMIN,
                                                   "destination": i, "data": {}}, now), "source_id": ADMIN})
        return SimResult(self.seed, self.violations, dict(self.leaders), len(self.checker.committed), self.messages,
                         self.events, self.traffic, self.replicas, tuple(sorted(self.checker.cluster_ids)),
                         self.foreign_refused)

    def _until(self, end: int) -> None:
        """Deliver the messages and fire the timers that fall before ``end``, in time order (timers
        first on a tie, as ``Replica.apply`` fires them before the event it is given)."""
        while True:
            deadlines = [(d, i) for i, r in self.replicas.items() if i not in self.down
                         for d in (r.next_deadline(),) if d is not None and d < end]
            timer = min(deadlines) if deadlines else None
            arrival = self.queue[0][0] if self.queue and self.queue[0][0] < end else None
            if timer is None and arrival is None:
                return
            if timer is not None and (arrival is None or timer[0] <= arrival):
                self._send(self.replicas[timer[1]].advance(timer[0]), timer[0])
                continue
            at, _, m = heapq.heappop(self.queue)
            if self._reachable(m["source"], m["destination"]):
                self._deliver(m["destination"], traffic_event(m, at))

    # ---------------------------------------------------------------------------------- checker
    def _violate(self, now: int, rule: str, detail: str) -> None:
        self.violations.append(Violation(now, rule, detail))

    def _check(self, now: int) -> None:
        nodes = {i: r.node for i, r in self.replicas.items() if r.node is not None}
        self.checker.check_cluster_ids(now, {i: n for i, n in nodes.items() if i not in self.down})
        self.checker.check(now, nodes, set(self.down), log_matching=not (now - START_MS) % self.cfg.log_check_every_ms)


class SafetyChecker:
    """Raft's safety properties over the nodes of one run, checked as often as the caller likes:
    election safety is the caller's (it sees the elections), the rest is here. ``violations`` is shared
    with the caller."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        self.committed: list[LogEntry] = []
        self.commit_epoch: list[int] = []  # the epoch in which each committed offset was first seen committed
        self.hw_seen: dict[int, int] = {}
        self.checked: dict[int, tuple] = {}  # node -> what its log and hw were when last checked
        self.cluster_ids: set[str] = set()  # the ClusterIds of the committed VoterAssignmentMessages
        self._ids_scanned = 0
        self._two_ids_reported = False

    def check_cluster_ids(self, now: int, nodes: dict[int, RaftNode]) -> None:
        """The KIP-595 draft's cluster id: the committed log holds one ClusterId, and every node that
        knows one knows that one (never two ClusterIds)."""
        for entry in self.committed[self._ids_scanned:]:
            if isinstance(entry.value, dict) and entry.value.get("type") == VOTER_ASSIGNMENT:
                self.cluster_ids.add(entry.value["data"]["ClusterId"])
        self._ids_scanned = len(self.committed)
        if len(self.cluster_ids) > 1 and not self._two_ids_reported:
            self._two_ids_reported = True
            self._violate(now, "two_cluster_ids", f"the committed log holds {sorted(self.cluster_ids)}")
        for i, n in nodes.items():
            if n.config.protocol == DRAFT and n.cluster_id is not None and self.cluster_ids \
                    and n.cluster_id not in self.cluster_ids:
                self._violate(now, "two_cluster_ids", f"node {i} knows {n.cluster_id}, committed: {sorted(self.cluster_ids)}")

    def restarted(self, node_id: int, high_watermark: int) -> None:
        """A node came back: its high watermark may restart lower (it is not durable)."""
        self.hw_seen[node_id] = high_watermark
        self.checked.pop(node_id, None)

    def _violate(self, now: int, rule: str, detail: str) -> None:
        self.violations.append(Violation(now, rule, detail))

    def check(self, now: int, nodes: dict[int, RaftNode], down: set[int], log_matching: bool = True) -> None:
        live = {i: n for i, n in nodes.items() if i not in down}
        # committed prefix: grows from any node's high watermark, which must agree with it
        for i, n in live.items():
            hw = n.high_watermark
            if hw < self.hw_seen.get(i, 0):
                self._violate(now, "high_watermark_monotonic", f"node {i}: {self.hw_seen[i]} -> {hw}")
            self.hw_seen[i] = hw
            entries = n.log.entries
            sig = (hw, len(entries), entries[-1] if entries else None, len(self.committed))
            if self.checked.get(i) == sig:
                continue
            self.checked[i] = sig
            if len(entries) < hw:
                self._violate(now, "committed_lost", f"node {i}: log end {len(entries)} below its hw {hw}")
                continue
            k = min(hw, len(self.committed))
            if entries[:k] != self.committed[:k]:
                self._violate(now, "committed_lost", f"node {i}: committed entries below {k} differ")
            elif hw > len(self.committed):
                self.commit_epoch.extend([n.epoch] * (hw - len(self.committed)))
                self.committed = list(entries[:hw])
        # leader completeness: a leader of epoch E holds every entry committed in an epoch before E
        for i, n in live.items():
            if n.state == LEADER:
                log = n.log.entries
                if log[:len(self.committed)] == self.committed:
                    continue
                for o, (entry, epoch) in enumerate(zip(self.committed, self.commit_epoch)):
                    if epoch < n.epoch and (o >= len(log) or log[o] != entry):
                        self._violate(now, "leader_completeness",
                                      f"leader {i} of epoch {n.epoch} misses offset {o}, committed in epoch {epoch}")
                        break
        if not log_matching:
            return
        logs = [(i, n.log.entries) for i, n in nodes.items()]
        for x in range(len(logs)):
            for y in range(x + 1, len(logs)):
                (i, a), (j, b) = logs[x], logs[y]
                for k in range(min(len(a), len(b)) - 1, -1, -1):
                    if a[k].epoch == b[k].epoch:
                        if a[:k + 1] != b[:k + 1]:
                            self._violate(now, "log_matching", f"nodes {i} and {j} agree on the epoch at {k} "
                                                               f"but not on the log before it")
                        break


def simulate(seed: int, config: SimConfig = SimConfig()) -> SimResult:
    return Simulation(seed, config).run()


__all__ = ["ADMIN", "DRAFT_BOOTSTRAP_MIX", "FOREIGN", "START_MS", "VOTER_CHANGE_MIX", "SafetyChecker", "SimConfig", "SimResult", "Simulation", "Violation",
           "simulate"]
