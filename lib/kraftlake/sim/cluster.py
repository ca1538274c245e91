"""A deterministic cluster simulator: the requests a live Kafka cluster sends its KRaft controller.

Brokers register and heartbeat every ``broker.heartbeat.interval.ms`` of event time, topics are created,
followers fall behind and catch up (AlterPartition shrinks and expansions sent by the partition's
leader), brokers crash (they stop heartbeating and the controller's session expiry fences them), rolling
restarts go through controlled shutdown and re-registration, operators run preferred elections, start
and cancel reassignments (completed by the leaders' ISR expansions of the adding replicas) and delete
topics. The output is a request log (ADR 0001 events, no records): what ``jobs/simulate.py`` writes as
JSON lines and ingests, exactly as a user would hand in requests.

Why it drives the controller core in-process instead of a model of its own: a request is only realistic
if it carries the epochs the controller holds at that offset (broker epochs are registration offsets,
partition epochs move with every failover, every leader-balance check and every reassignment step).
Re-implementing those rules would be a second controller that drifts from the first. So the simulator
runs the very decisions the streaming job runs (``take_over``, ``expire_sessions``, the periodic
``balance_partition_leaders``, ``controller.decide``) on one image, in the same order as
``shards._Step.request``, reads the answers (broker epochs, ``ShouldShutDown``) and the partitions from
that image, and so knows what the controller will decide for every line before it is written. The only
shortcut is when to call ``expire_sessions``: not before a session could have expired (a lower bound on
the earliest deadline), which decides identically and keeps a heartbeat cheap.

Deterministic per seed: one ``random.Random(seed)`` draws everything, time is event time, ties between
simulated processes are broken by scheduling order, and no set of strings is ever iterated (their order
depends on ``PYTHONHASHSEED``). Memory is the image plus small indexes; the log is a generator.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from kraftlake.controller.cluster_control import ControllerState, session_timeout_ms
from kraftlake.controller.decisions import Context
from kraftlake.controller.dispatch import handle_request
from kraftlake.image.cluster_image import NO_LEADER, BrokerRegistration, ClusterImage, PartitionRegistration
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids
from kraftlake.metadata.config import setting
from kraftlake.metadata.errors import error_name

START_MS = 1_763_550_000_000
HEARTBEAT_INTERVAL = "broker.heartbeat.interval.ms"
ZERO_UUID = uuids.from_bytes(bytes(16))
MAX_METADATA_VERSION = 25  # what the simulated brokers say they support (4.0-IV3)

# Operational events, drawn at random every ``operation_interval_ms`` on average, by these weights.
DEFAULT_MIX: dict[str, float] = {
    "crash": 0.5,                # a broker stops heartbeating; it comes back after a while
    "rolling_restart": 0.1,      # every broker in turn: controlled shutdown, restart, re-registration
    "preferred_election": 1.0,   # kafka-leader-election.sh --election-type PREFERRED
    "reassign": 1.5,             # kafka-reassign-partitions.sh --execute: one replica moves
    "cancel_reassignment": 0.75,  # ... --cancel of a running one
    "delete_topic": 0.5,
    "create_topic": 0.5,
    # off unless asked for (``--mix``), so that a seed's log stays what it was:
    "create_partitions": 0.0,    # kafka-topics.sh --alter --partitions: one or two more
    "list_reassignments": 0.0,   # kafka-reassign-partitions.sh --list
    "unclean_election": 0.0,     # kafka-leader-election.sh --election-type UNCLEAN on a topic
    "unregister": 0.0,           # kafka-cluster.sh unregister of a broker that is down
}

# The error codes a response carries anywhere in it that do not mean "refused".
NOT_REFUSED = {"NONE", "ELECTION_NOT_NEEDED"}


@dataclass(frozen=True)
class SimulationOptions:
    """The simulated cluster and how busy it is. Rates and times are event time."""

    brokers: int = 6
    topics: int = 20
    partitions_per_topic: int = 10
    replication_factor: int = 3
    racks: int = 3
    seed: int = 1
    start_ms: int = START_MS
    topics_created_per_s: float = 20.0  # how fast the initial topics are created
    isr_shrinks_per_s: float = 1.0  # followers falling behind, cluster-wide
    catch_up_ms: float = 5_000.0  # mean time a follower needs to catch up again
    reassign_copy_ms: float = 60_000.0  # mean time a new replica of a reassignment needs to copy its data
    operation_interval_ms: float = 60_000.0  # mean time between operational events (``mix``)
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    crash_downtime_ms: float = 60_000.0  # mean time a crashed broker stays down (at least 1 s)
    restart_ms: float = 15_000.0  # mean time a broker of a rolling restart takes to start again
    roll_pause_ms: float = 20_000.0  # how long the operator waits after a broker is back before the next
    max_down_share: float = 0.1  # at most this share of the brokers down at once (at least one)
    reassign_partitions: int = 5  # at most this many partitions of one topic per reassignment request
    catch_up_batch: int = 50  # at most this many partitions per AlterPartition of a returning follower
    stale_share: float = 0.01  # share of AlterPartitions sent with the partition epoch before the last

    def __post_init__(self) -> None:
        if self.brokers < 1 or self.topics < 0 or self.partitions_per_topic < 1:
            raise ValueError("a cluster needs at least one broker and one partition per topic")
        if not 1 <= self.replication_factor <= self.brokers:
            raise ValueError(f"replication factor {self.replication_factor} needs 1..{self.brokers} brokers")
        unknown = sorted(set(self.mix) - set(DEFAULT_MIX))
        if unknown or any(w < 0 for w in self.mix.values()):
            raise ValueError(f"mix: unknown operation(s) {unknown} or a negative weight "
                             f"(known: {', '.join(DEFAULT_MIX)})")


def parse_mix(text: str) -> dict[str, float]:
    """``crash=1,reassign=2``: weights over ``DEFAULT_MIX``; operations not named keep their default,
    a weight of 0 turns one off."""
    mix = dict(DEFAULT_MIX)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or name.strip() not in DEFAULT_MIX or weight < 0:
            raise ValueError(f"mix: {part!r} is not NAME=WEIGHT with NAME one of {', '.join(DEFAULT_MIX)} and "
                             "WEIGHT a number >= 0")
        mix[name.strip()] = weight
    return mix


def error_names(data: dict) -> list[str]:
    """Every error a response carries, at the top and in its per-topic / per-partition results."""
    found: list[str] = []

    def walk(value: dict) -> None:
        for key, item in value.items():
            if key == "ErrorCode":
                found.append(error_name(item) or str(item))
            elif type(item) is list:
                for element in item:
                    if type(element) is dict:
                        walk(element)
            elif type(item) is dict:
                walk(item)

    walk(data)
    return found


def refusal(data: dict) -> str | None:
    """The first error of a response that means the request (or part of it) was refused, or None."""
    return next((name for name in error_names(data) if name not in NOT_REFUSED), None)


class _Bag:
    """Items with O(1) add, remove and uniform choice, in a deterministic order."""

    def __init__(self) -> None:
        self.items: list = []
        self.index: dict = {}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item: object) -> bool:
        return item in self.index

    def add(self, item: object) -> None:
        if item not in self.index:
            self.index[item] = len(self.items)
            self.items.append(item)

    def discard(self, item: object) -> None:
        at = self.index.pop(item, None)
        if at is None:
            return
        last = self.items.pop()
        if at < len(self.items):
            self.items[at] = last
            self.index[last] = at

    def choice(self, rng: random.Random) -> Any:
        return self.items[rng.randrange(len(self.items))]


class ControllerMirror:
    """The controller's decisions on one image, through the same ``dispatch.handle_request`` as the shards.

    ``on_partition`` / ``on_broker`` see every (before, after) change the generated records make.
    """

    def __init__(self, config: Mapping[str, str],
                 on_partition: Callable[[PartitionRegistration | None, PartitionRegistration | None], None],
                 on_broker: Callable[[BrokerRegistration | None, BrokerRegistration | None], None]):
        self.image = ClusterImage()
        self.state = ControllerState()
        self.config = dict(config)
        self.timeout_ms = session_timeout_ms(self.config)
        self.in_term = False
        self.expiry_bound: int | None = None  # no session can expire at or before this event time
        self.on_partition, self.on_broker = on_partition, on_broker

    def decide(self, request: dict) -> dict:
        """Decide ``request`` (an ADR 0001 event with every field of its version), apply the records;
        the response."""
        now = request["timestamp"]
        ctx = Context(now_ms=now, offset=request["offset"], config=self.config)
        expire = self.expiry_bound is None or now > self.expiry_bound

        def apply(records: list[dict]) -> None:
            self._apply(records, request)
            if expire:  # the expiry step: no session can expire before this bound, until it passes
                self.expiry_bound = self._earliest_deadline(now)

        decision = handle_request(self.image, self.state, request, ctx, apply, starts_term=not self.in_term,
                                  expire=expire)
        self.in_term = True
        if decision is None:
            raise ValueError(f"the controller does not decide {request['type']}")
        self._apply(decision.records, request)
        return decision.response

    def _earliest_deadline(self, now: int) -> int:
        """Sessions only ever get later contacts, and new ones start at their event time, so until this
        moment no session can expire (``expire_sessions`` would return nothing and change nothing)."""
        earliest = None
        for broker in self.image.brokers.values():
            if broker.fenced:
                continue
            session = self.state.sessions.get(broker.id)
            if session is None or session.epoch != broker.epoch:
                return now  # expire_sessions would start this session: call it again next time
            if session.contact_ms is None:
                continue  # never heard from: Kafka's tracker has no contact to expire
            if earliest is None or session.contact_ms < earliest:
                earliest = session.contact_ms
        return now + self.timeout_ms if earliest is None else max(now, earliest + self.timeout_ms)

    def _apply(self, records: list[dict], request: dict) -> None:
        for record in records:
            result = replay(self.image, {**record, "offset": request["offset"], "leader_epoch": -1,
                                         "timestamp": request["timestamp"]})
            if result.rejected is not None:
                raise AssertionError(f"a generated {record['type']} did not apply: {result.rejected}")
            for before, after in result.broker_changes:
                self.on_broker(before, after)
            for before, after in result.partition_changes:
                self.on_partition(before, after)


# Broker process states (the simulated brokers, not the controller's view of them).
DOWN, REGISTERING, RUNNING, STOPPING, CRASHED = "down", "registering", "running", "stopping", "crashed"


@dataclass
class _Broker:
    id: int
    rack: str
    log_dir: str
    state: str = DOWN
    generation: int = 0  # bumped when the process dies: its scheduled heartbeats are void
    incarnation: str = ZERO_UUID
    epoch: int = -1
    rolling: bool = False


Key = tuple[str, int]  # (topic id, partition)


class ClusterSimulator:
    """The simulated cluster; ``events()`` yields its request log, ``sent`` counts the requests yielded
    by type and ``outcomes`` what the controller answers them: (request type, first refusal or "NONE")."""

    def __init__(self, options: SimulationOptions = SimulationOptions(),
                 config: Mapping[str, str] | None = None, first_offset: int = 0):
        self.options = o = options
        self.config = dict(config or {})
        self.interval = int(setting(self.config, HEARTBEAT_INTERVAL))
        self.rng = random.Random(o.seed)
        self.core = ControllerMirror(self.config, self._partition_changed, self._broker_changed)
        self.image = self.core.image
        self.next_offset = first_offset
        self.now = o.start_ms
        self.cluster_id = self._uuid()
        self.brokers = {b: _Broker(b, f"rack-{(b - 1) % max(1, o.racks)}", self._uuid())
                        for b in range(1, o.brokers + 1)}
        self.max_down = max(1, int(o.brokers * o.max_down_share))
        self.topics = _Bag()  # live topic names
        self.topic_counter = 0
        self.reassigning = _Bag()  # keys of partitions with adding or removing replicas
        self.lagging: dict[int, dict[Key, None]] = {b: {} for b in self.brokers}  # replicas outside the ISR
        self.pending: set[tuple[Key, int]] = set()  # catch-ups scheduled
        self.roll_queue: list[int] = []
        self.outcomes: Counter = Counter()
        self.sent: Counter = Counter()
        self._heap: list = []
        self._seq = 0
        self._out: list[dict] = []
        self._handlers: dict[str, Callable[[Any], None]] = {
            "register": self._register, "heartbeat": self._heartbeat, "create_initial": self._create_initial,
            "shrink": self._shrink, "catch_up": self._catch_up, "operation": self._operation,
            "restart": self._restart, "roll_next": self._roll_next,
        }

    # --- the event loop -----------------------------------------------------------------------------

    def events(self, limit: int) -> Iterator[dict]:
        """The first ``limit`` requests, as JSON-ready events (with ``offset``) in log order. A simulator
        runs once: its image is the controller's after exactly these requests."""
        if self._seq:
            raise RuntimeError("a ClusterSimulator yields its log once; make a new one to start again")
        o = self.options
        for broker in self.brokers.values():
            self._schedule(o.start_ms + self.rng.randrange(self.interval), "restart", broker.id)
        begin = o.start_ms + 2 * self.interval  # once the brokers are up
        if o.topics:
            self._schedule(begin, "create_initial", 0)
        if o.isr_shrinks_per_s > 0:
            self._schedule(begin + self._exp(1000.0 / o.isr_shrinks_per_s), "shrink", None)
        if o.operation_interval_ms > 0 and any(o.mix.values()):
            self._schedule(begin + self._exp(o.operation_interval_ms), "operation", None)
        emitted = 0
        while emitted < limit and self._heap:
            at, _, kind, payload = heapq.heappop(self._heap)
            self.now = at
            self._handlers[kind](payload)
            for event, outcome in self._out:
                if emitted == limit:
                    break
                self.sent[event["type"]] += 1
                self.outcomes[outcome] += 1
                yield event
                emitted += 1
            self._out.clear()

    def _schedule(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._heap, (int(at), self._seq, kind, payload))
        self._seq += 1

    def _exp(self, mean: float) -> int:
        return max(1, int(self.rng.expovariate(1.0 / mean))) if mean > 0 else 1

    def _uuid(self) -> str:
        return uuids.from_bytes(self.rng.getrandbits(128).to_bytes(16, "big"))

    def _send(self, type_: str, version: int, wire: dict, full: dict | None = None) -> dict:
        """Write one request (``wire``: the fields of its version, as a user writes them; ``full``: every
        field, as ingest gives it to the controller) and return the controller's answer."""
        event = {"offset": self.next_offset, "timestamp": self.now, "type": type_, "version": version,
                 "data": wire}
        self.next_offset += 1
        response = self.core.decide({**event, "leader_epoch": -1, "data": wire if full is None else full})
        self._out.append((event, (type_, refusal(response["data"]) or "NONE")))
        return response["data"]

    # --- what the controller's records did ----------------------------------------------------------

    def _alive(self, broker_id: int) -> bool:
        """Fetching and eligible: the process runs and the controller has it unfenced, not shutting down."""
        agent = self.brokers.get(broker_id)
        if agent is None or agent.state != RUNNING:
            return False
        broker = self.image.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def _partition_changed(self, before: PartitionRegistration | None, after: PartitionRegistration | None) -> None:
        """Keep the lagging replicas and running reassignments; a replica outside the ISR whose broker is
        alive starts catching up."""
        current = after if after is not None else before
        key = (current.topic_id, current.partition_id)
        if before is not None:
            for replica in before.replicas:
                if replica not in before.isr and replica in self.lagging:
                    self.lagging[replica].pop(key, None)
        if after is None:
            self.reassigning.discard(key)
            return
        if after.adding_replicas or after.removing_replicas:
            self.reassigning.add(key)
        else:
            self.reassigning.discard(key)
        for replica in after.replicas:
            if replica not in after.isr and replica in self.lagging:
                self.lagging[replica][key] = None
                if (key, replica) not in self.pending and self._alive(replica):
                    mean = (self.options.reassign_copy_ms if replica in after.adding_replicas
                            else self.options.catch_up_ms)
                    self.pending.add((key, replica))
                    self._schedule(self.now + self._exp(mean), "catch_up", [(key, replica)])

    def _broker_changed(self, before: BrokerRegistration | None, after: BrokerRegistration | None) -> None:
        """A broker the controller unfences catches up on all its partitions, in batches per leader;
        a rolling restart goes on once the restarted broker is back."""
        if after is None or after.fenced or (before is not None and not before.fenced):
            return
        agent = self.brokers.get(after.id)
        if agent is None:
            return
        by_leader: dict[int, list[Key]] = {}
        for key in self.lagging[after.id]:
            if (key, after.id) not in self.pending:
                partition = self.image.partition(*key)
                by_leader.setdefault(partition.leader if partition else NO_LEADER, []).append(key)
        for keys in by_leader.values():
            for start in range(0, len(keys), self.options.catch_up_batch):
                batch = [(key, after.id) for key in keys[start:start + self.options.catch_up_batch]]
                self.pending.update(batch)
                self._schedule(self.now + self._exp(self.options.catch_up_ms), "catch_up", batch)
        if agent.rolling:
            agent.rolling = False
            self._schedule(self.now + self.options.roll_pause_ms, "roll_next", None)

    # --- brokers ------------------------------------------------------------------------------------

    def _restart(self, broker_id: int) -> None:
        """A broker process starts: a new incarnation registers."""
        agent = self.brokers[broker_id]
        agent.generation += 1
        agent.state = REGISTERING
        agent.incarnation = self._uuid()
        self._register((broker_id, agent.generation))

    def _register(self, payload: tuple[int, int]) -> None:
        broker_id, generation = payload
        agent = self.brokers[broker_id]
        if agent.generation != generation or agent.state != REGISTERING:
            return
        data = {
            "BrokerId": broker_id, "ClusterId": self.cluster_id, "IncarnationId": agent.incarnation,
            "Listeners": [{"Name": "PLAINTEXT", "Host": f"broker-{broker_id}.sim", "Port": 9092,
                           "SecurityProtocol": 0}],
            "Features": [{"Name": "metadata.version", "MinSupportedVersion": 1,
                          "MaxSupportedVersion": MAX_METADATA_VERSION}],
            "Rack": agent.rack, "IsMigratingZkBroker": False, "LogDirs": [agent.log_dir],
            "PreviousBrokerEpoch": agent.epoch,
        }
        answer = self._send("BrokerRegistrationRequest", 4, data)
        if answer["ErrorCode"] != 0:
            # e.g. DUPLICATE_BROKER_REGISTRATION: the old incarnation's session has not expired yet
            self._schedule(self.now + self.interval, "register", payload)
            return
        agent.epoch = answer["BrokerEpoch"]
        agent.state = RUNNING
        # the first heartbeat follows the registration at once, then one every interval
        self._schedule(self.now + 1 + self.rng.randrange(50), "heartbeat", payload)

    def _heartbeat(self, payload: tuple[int, int]) -> None:
        broker_id, generation = payload
        agent = self.brokers[broker_id]
        if agent.generation != generation or agent.state not in (RUNNING, STOPPING):
            return
        # the broker has applied the log up to a few records before this one
        seen = max(-1, self.next_offset - 1 - self.rng.randrange(3))
        answer = self._send("BrokerHeartbeatRequest", 1, {
            "BrokerId": broker_id, "BrokerEpoch": agent.epoch, "CurrentMetadataOffset": seen,
            "WantFence": False, "WantShutDown": agent.state == STOPPING, "OfflineLogDirs": []})
        if answer["ErrorCode"] != 0:  # STALE_BROKER_EPOCH: this incarnation is gone; start again
            agent.state = CRASHED
            self._schedule(self.now + self.interval, "restart", broker_id)
            return
        if answer["ShouldShutDown"]:
            agent.state = DOWN
            agent.generation += 1
            self._schedule(self.now + max(1000, self._exp(self.options.restart_ms)), "restart", broker_id)
            return
        self._schedule(self.now + self.interval, "heartbeat", payload)

    def _down(self) -> int:
        return sum(1 for a in self.brokers.values() if a.state != RUNNING)

    def _crash(self) -> bool:
        candidates = [a for a in self.brokers.values() if a.state == RUNNING and not a.rolling]
        if not candidates or self._down() >= self.max_down:
            return False
        agent = candidates[self.rng.randrange(len(candidates))]
        agent.state = CRASHED
        agent.generation += 1  # no more heartbeats: the controller's session expiry will fence it
        self._schedule(self.now + max(1000, self._exp(self.options.crash_downtime_ms)), "restart", agent.id)
        return True

    def _start_roll(self) -> bool:
        if self.roll_queue or any(a.rolling for a in self.brokers.values()):
            return False
        self.roll_queue = sorted(self.brokers, reverse=True)  # popped from the end: by id
        self._roll_next(None)
        return True

    def _roll_next(self, _: Any) -> None:
        """The operator stops the next broker (its next heartbeat asks to shut down); a broker that is
        down anyway is skipped."""
        while self.roll_queue:
            agent = self.brokers[self.roll_queue.pop()]
            if agent.state == RUNNING:
                agent.state = STOPPING
                agent.rolling = True
                return

    # --- partitions ---------------------------------------------------------------------------------

    def _random_partition(self) -> PartitionRegistration | None:
        if not self.topics:
            return None
        topic = self.image.topics.get(self.image.topic_ids.get(self.topics.choice(self.rng), ""))
        if topic is None or not topic.partitions:
            return None
        return topic.partitions.get(self.rng.randrange(len(topic.partitions)))

    def _leader_can_send(self, partition: PartitionRegistration) -> bool:
        return (partition.leader != NO_LEADER and partition.leader_recovery_state == 0
                and self._alive(partition.leader))

    def _shrink(self, _: Any) -> None:
        """A follower falls behind: its leader takes it out of the ISR."""
        self._schedule(self.now + self._exp(1000.0 / self.options.isr_shrinks_per_s), "shrink", None)
        for _attempt in range(5):
            partition = self._random_partition()
            if partition is None or len(partition.isr) < 2 or not self._leader_can_send(partition):
                continue
            followers = [r for r in partition.isr if r != partition.leader]
            dropped = followers[self.rng.randrange(len(followers))]
            isr = [r for r in partition.isr if r != dropped]
            if not all(self._eligible(r) for r in isr):
                continue
            self._alter_partition(partition.leader, {partition.topic_id: [(partition, isr)]})
            return

    def _eligible(self, broker_id: int) -> bool:
        broker = self.image.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def _catch_up(self, items: list[tuple[Key, int]]) -> None:
        """Followers caught up: each partition's current leader adds them to its ISR, one request per
        leader. Whatever is still lagging afterwards (a stale epoch, say) tries again later; what cannot
        be sent now (the follower or the leader is not alive) is picked up by the next change."""
        proposals: dict[int, dict[Key, list[int]]] = {}
        for key, replica in items:
            self.pending.discard((key, replica))
            partition = self.image.partition(*key)
            if (partition is None or key not in self.lagging[replica] or not self._alive(replica)
                    or not self._leader_can_send(partition)):
                continue
            isr = proposals.setdefault(partition.leader, {}).setdefault(key, list(partition.isr))
            isr.append(replica)
        for leader, by_key in proposals.items():
            topics: dict[str, list] = {}
            for (topic_id, partition_id), isr in by_key.items():
                partition = self.image.partition(topic_id, partition_id)
                if all(self._eligible(r) for r in isr):
                    topics.setdefault(topic_id, []).append((partition, isr))
            if topics:
                self._alter_partition(leader, topics)
        for key, replica in items:
            if key in self.lagging[replica] and (key, replica) not in self.pending and self._alive(replica):
                partition = self.image.partition(*key)
                if partition is not None and self._leader_can_send(partition):
                    self.pending.add((key, replica))
                    self._schedule(self.now + self._exp(self.options.catch_up_ms), "catch_up", [(key, replica)])

    def _alter_partition(self, leader: int, topics: dict[str, list[tuple[PartitionRegistration, list[int]]]]) -> None:
        """AlterPartitionRequest v3 from ``leader``: the epochs it knows and each ISR member's broker epoch.
        Now and then (``stale_share`` of the requests) the leader has not seen the last change of the
        request's first partition yet."""
        epochs = {b.id: b.epoch for b in self.image.brokers.values()}
        stale = self.rng.random() < self.options.stale_share
        wire_topics, full_topics = [], []
        for topic_id, changes in topics.items():
            wire_parts, full_parts = [], []
            for partition, isr in changes:
                partition_epoch = partition.partition_epoch
                if stale and partition_epoch > 0:
                    partition_epoch -= 1
                    stale = False
                part = {"PartitionIndex": partition.partition_id, "LeaderEpoch": partition.leader_epoch,
                        "NewIsrWithEpochs": [{"BrokerId": r, "BrokerEpoch": epochs.get(r, -1)} for r in isr],
                        "LeaderRecoveryState": 0, "PartitionEpoch": partition_epoch}
                wire_parts.append(part)
                full_parts.append({**part, "NewIsr": []})
            wire_topics.append({"TopicId": topic_id, "Partitions": wire_parts})
            full_topics.append({"TopicName": "", "TopicId": topic_id, "Partitions": full_parts})
        self._send("AlterPartitionRequest", 3,
                   {"BrokerId": leader, "BrokerEpoch": epochs.get(leader, -1), "Topics": wire_topics},
                   {"BrokerId": leader, "BrokerEpoch": epochs.get(leader, -1), "Topics": full_topics})

    # --- topics and operations ----------------------------------------------------------------------

    def _create_topic(self) -> None:
        name = f"topic-{self.topic_counter}"
        self.topic_counter += 1
        data = {"Topics": [{"Name": name, "NumPartitions": self.options.partitions_per_topic,
                            "ReplicationFactor": self.options.replication_factor,
                            "Assignments": [], "Configs": []}],
                "timeoutMs": 30000, "validateOnly": False}
        self._send("CreateTopicsRequest", 7, data)
        if name in self.image.topic_ids:
            self.topics.add(name)

    def _create_initial(self, created: int) -> None:
        self._create_topic()
        if created + 1 < self.options.topics:
            gap = 1000.0 / self.options.topics_created_per_s if self.options.topics_created_per_s > 0 else 1
            self._schedule(self.now + max(1, int(gap)), "create_initial", created + 1)

    def _operation(self, _: Any) -> None:
        self._schedule(self.now + self._exp(self.options.operation_interval_ms), "operation", None)
        names = [n for n, w in self.options.mix.items() if w > 0]
        weights = [self.options.mix[n] for n in names]
        # an operation that finds nothing to do now (no reassignment to cancel, ...) gives way to another
        for name in self.rng.choices(names, weights, k=3):
            if getattr(self, f"_op_{name}")():
                return

    def _op_crash(self) -> bool:
        return self._crash()

    def _op_rolling_restart(self) -> bool:
        return self._start_roll()

    def _op_preferred_election(self) -> bool:
        if not self.topics:
            return False
        if self.rng.random() < 0.5:
            partitions = None  # --all-topic-partitions
        else:
            name = self.topics.choice(self.rng)
            count = len(self.image.topics[self.image.topic_ids[name]].partitions)
            partitions = [{"Topic": name, "Partitions": list(range(count))}]
        self._send("ElectLeadersRequest", 2, {"ElectionType": 0, "TopicPartitions": partitions, "TimeoutMs": 60000})
        return True

    def _op_reassign(self) -> bool:
        """One replica of a few partitions of a topic moves to another broker."""
        if not self.topics:
            return False
        name = self.topics.choice(self.rng)
        topic = self.image.topics[self.image.topic_ids[name]]
        count = len(topic.partitions)
        chosen = self.rng.sample(range(count), min(count, 1 + self.rng.randrange(self.options.reassign_partitions)))
        registered = sorted(self.image.brokers)
        plan = []
        for index in sorted(chosen):
            partition = topic.partitions[index]
            if partition.adding_replicas or partition.removing_replicas:
                continue
            others = [b for b in registered if b not in partition.replicas]
            if not others:
                continue
            target = list(partition.replicas)
            target[self.rng.randrange(len(target))] = others[self.rng.randrange(len(others))]
            plan.append({"PartitionIndex": index, "Replicas": target})
        if not plan:
            return False
        self._send("AlterPartitionReassignmentsRequest", 0,
                   {"TimeoutMs": 60000, "Topics": [{"Name": name, "Partitions": plan}]})
        return True

    def _op_cancel_reassignment(self) -> bool:
        if not self.reassigning:
            return False
        topic_id, index = self.reassigning.choice(self.rng)
        name = self.image.topics[topic_id].name
        self._send("AlterPartitionReassignmentsRequest", 0, {"TimeoutMs": 60000, "Topics": [
            {"Name": name, "Partitions": [{"PartitionIndex": index, "Replicas": None}]}]})
        return True

    def _op_delete_topic(self) -> bool:
        if len(self.topics) < 2:
            return False
        name = self.topics.choice(self.rng)
        self._send("DeleteTopicsRequest", 6, {"Topics": [{"Name": name, "TopicId": ZERO_UUID}], "TimeoutMs": 30000},
                   {"Topics": [{"Name": name, "TopicId": ZERO_UUID}], "TopicNames": [], "TimeoutMs": 30000})
        if name not in self.image.topic_ids:
            self.topics.discard(name)
        return True

    def _op_create_topic(self) -> bool:
        self._create_topic()
        return True

    def _op_create_partitions(self) -> bool:
        if not self.topics:
            return False
        name = self.topics.choice(self.rng)
        count = len(self.image.topics[self.image.topic_ids[name]].partitions) + 1 + self.rng.randrange(2)
        self._send("CreatePartitionsRequest", 3, {"Topics": [{"Name": name, "Count": count, "Assignments": None}],
                                                   "TimeoutMs": 30000, "ValidateOnly": False})
        return True

    def _op_list_reassignments(self) -> bool:
        self._send("ListPartitionReassignmentsRequest", 0, {"TimeoutMs": 30000, "Topics": None})
        return True

    def _op_unclean_election(self) -> bool:
        """An operator's unclean election on a topic, one with a leaderless partition if there is one."""
        if not self.topics:
            return False
        offline = [t.name for t in self.image.topics.values()
                   if t.name in self.topics and any(p.leader == NO_LEADER for p in t.partitions.values())]
        name = offline[self.rng.randrange(len(offline))] if offline else self.topics.choice(self.rng)
        count = len(self.image.topics[self.image.topic_ids[name]].partitions)
        self._send("ElectLeadersRequest", 2, {"ElectionType": 1, "TimeoutMs": 60000,
                                              "TopicPartitions": [{"Topic": name, "Partitions": list(range(count))}]})
        return True

    def _op_unregister(self) -> bool:
        """A broker that is down is unregistered; if it comes back it registers as a new broker."""
        down = [a.id for a in self.brokers.values()
                if a.state in (DOWN, CRASHED) and not a.rolling and a.id in self.image.brokers]
        if not down:
            return False
        self._send("UnregisterBrokerRequest", 0, {"BrokerId": down[self.rng.randrange(len(down))]})
        return True


def simulate(events: int, options: SimulationOptions = SimulationOptions(),
             config: Mapping[str, str] | None = None, first_offset: int = 0) -> Iterator[dict]:
    """The first ``events`` requests of a simulated cluster (see ``ClusterSimulator``)."""
    return ClusterSimulator(options, config, first_offset).events(events)
