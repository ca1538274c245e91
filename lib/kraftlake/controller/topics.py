"""Creating and deleting topics and adding partitions (the topic half of Kafka's
``ReplicationControlManager``, with the request checks of ``ControllerApis``), and replica placement
(Kafka's ``StripedReplicaPlacer``).

Kafka draws topic ids and placement offsets at random; here both derive from the request's log offset
(``ctx.offset``), so replaying a log always creates the same topics in the same places.

Sharding follows ADR 0003: a topic's result (and records) come from the shard that owns its id, the
new id for a topic being created; an entry that names no known topic is answered alike by every
shard.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Iterator, Mapping, TypeVar

from kraftlake.codec.bounds import topic_name_problem
from kraftlake.controller.decisions import Context, Decision, Refused, error_code, record, response
from kraftlake.controller.elections import (MV_DIRECTORIES, MV_ELR, default_dir, eligible_replicas, metadata_version,
    partition_record_version, supports)
from kraftlake.controller.replication import struct_defaults
from kraftlake.image.cluster_image import CONFIG_TOPIC, ClusterImage, normalize_uuid
from kraftlake.metadata import uuids
from kraftlake.metadata.config import setting

T = TypeVar("T")

# Kafka's bounds on what one request may create (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, checked
# before anything else; QuorumController.MAX_RECORDS_PER_USER_OP, the length of its BoundedList of records)
MAX_PARTITIONS_PER_BATCH = 10_000
MAX_RECORDS_PER_USER_OP = 10_000
_METADATA_TOPIC_ID = uuids.from_bytes(bytes(15) + b"\x01")  # reserved for __cluster_metadata
_TOPIC_CONFIG_SOURCE = 1  # DescribeConfigs ConfigSource TOPIC_CONFIG


# --- names ----------------------------------------------------------------------------------------

def _unify(name: str) -> str:
    return name.replace(".", "_")


def check_topic_name(image: ClusterImage, name: str) -> None:
    """Kafka's ``validateNewTopicNames``: ``Topic.validate``, then the refusal of a name that differs from
    an existing one only by '.' versus '_' (both become '_' in metric names). Kafka checks the collision
    even for a name ``Topic.validate`` refused, and that error replaces the first; it names the first
    colliding topic in sorted order (its set of them is a ``TreeSet``)."""
    problem = topic_name_problem(name)
    if "." in name or "_" in name:
        colliding = [existing for existing in image.topic_ids if existing != name and _unify(existing) == _unify(name)]
        if colliding:
            problem = f"Topic '{name}' collides with existing topic: {min(colliding)}"
    if problem is not None:
        raise Refused("INVALID_TOPIC_EXCEPTION", problem)


def new_topic_id(name: str, offset: int, taken: Iterable[str]) -> str:
    """A topic id that depends only on the name and the request's offset, avoiding the ids Kafka never
    hands out (zero, the metadata topic's, one starting with '-') and those already in use."""
    taken = set(taken)
    attempt = 0
    while True:
        digest = hashlib.sha256(f"{offset}\0{name}\0{attempt}".encode()).digest()
        candidate = uuids.from_bytes(digest[:16])
        if (candidate not in taken and candidate not in (uuids.ZERO_UUID, _METADATA_TOPIC_ID)
                and not candidate.startswith("-")):
            return candidate
        attempt += 1


# --- placement ------------------------------------------------------------------------------------

@dataclass
class _Ring:
    """Brokers handed out round-robin from a moving start, each at most once per round. A new ring is in
    round 0, as Kafka's ``BrokerList`` starts at epoch 0: its first broker is the one at its offset."""

    brokers: list[int]
    offset: int = 0
    taken: int = 0
    round: int = 0

    def next(self, round_: int) -> int | None:
        if not self.brokers:
            return None
        if round_ != self.round:
            self.round, self.taken = round_, 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.taken >= len(self.brokers):
            return None
        self.taken += 1
        return self.brokers[(self.offset + self.taken - 1) % len(self.brokers)]


@dataclass
class _Rack:
    unfenced: _Ring
    fenced: _Ring

    def next(self, round_: int) -> int | None:
        broker = self.unfenced.next(round_)
        return self.fenced.next(round_) if broker is None else broker


@dataclass
class StripedPlacer:
    """Kafka's striped placement: each partition starts on the next rack, takes its leader from an
    unfenced broker there and its followers from the following racks in turn, so replicas spread
    over racks first and brokers second. Fenced brokers only fill follower slots once the unfenced
    ones of a rack are used up. Brokers shutting down are not used: those the controller's heartbeat
    soft state knows as shutting down (``shutting_down``), as Kafka's ``usableBrokers``; a broker
    whose registration alone says so (a shutdown begun under another controller) is still placed,
    and kept out of the ISR by KIP-841.

    The random numbers are drawn in Kafka's order (each rack's fenced brokers' start, then its unfenced
    ones', then the first rack), so Kafka's random numbers give Kafka's placement; racks are taken in
    name order where Kafka takes its hash map's. Unlike Kafka's, a reshuffle restarts every rack's
    round, so a broker cannot be skipped for good.
    """

    image: ClusterImage
    rng: random.Random
    shutting_down: frozenset[int] = frozenset()
    racks: dict[str | None, _Rack] = field(default_factory=dict)
    rack_names: list[str | None] = field(default_factory=list)
    unfenced: int = 0
    total: int = 0
    round: int = 0
    offset: int = 0

    def __post_init__(self) -> None:
        members: dict[str | None, tuple[list[int], list[int]]] = {}
        for broker in sorted(self.image.brokers.values(), key=lambda b: b.id):
            if broker.id in self.shutting_down:
                continue
            unfenced, fenced = members.setdefault(broker.rack, ([], []))
            (fenced if broker.fenced else unfenced).append(broker.id)
        self.rack_names = sorted(members, key=lambda r: (r is not None, r or ""))
        for name in self.rack_names:
            unfenced, fenced = members[name]
            fenced_ring = self._ring(fenced)  # drawn before the unfenced one, as Rack.initialize does
            self.racks[name] = _Rack(self._ring(unfenced), fenced_ring)
            self.unfenced += len(unfenced)
            self.total += len(unfenced) + len(fenced)
        self.offset = self.rng.randrange(len(self.rack_names)) if self.rack_names else 0

    def _ring(self, brokers: list[int]) -> _Ring:
        return _Ring(brokers, self.rng.randrange(len(brokers)) if brokers else 0)

    def check(self, replication_factor: int) -> None:
        if replication_factor <= 0:
            raise Refused("INVALID_REPLICATION_FACTOR", f"Invalid replication factor {replication_factor}: "
                          "the replication factor must be positive.")
        if self.unfenced == 0:
            raise Refused("INVALID_REPLICATION_FACTOR", "All brokers are currently fenced.")
        if replication_factor > self.total:
            raise Refused("INVALID_REPLICATION_FACTOR", f"The target replication factor of {replication_factor} "
                          f"cannot be reached because only {self.total} broker(s) are registered.")

    def _reshuffle(self) -> None:
        """After as many partitions as there are unfenced brokers, vary the order so the same
        replica sets do not repeat."""
        self.rng.shuffle(self.rack_names)
        for rack in self.racks.values():
            for ring in (rack.fenced, rack.unfenced):
                self.rng.shuffle(ring.brokers)
                ring.round = -1
        self.round = 0

    def place(self, replication_factor: int) -> list[int]:
        self.check(replication_factor)
        if self.round == self.unfenced and self.unfenced > 1:
            self._reshuffle()
        count = len(self.rack_names)
        self.offset %= count
        leader_rack = self.offset
        while (leader := self.racks[self.rack_names[leader_rack]].unfenced.next(self.round)) is None:
            leader_rack = (leader_rack + 1) % count
        replicas = [leader]
        skip_leader_rack = True
        index = self.offset
        while len(replicas) < replication_factor:
            if index == leader_rack and skip_leader_rack:
                skip_leader_rack = False
            else:
                broker = self.racks[self.rack_names[index]].next(self.round)
                if broker is not None:
                    replicas.append(broker)
            index = (index + 1) % count
        self.round += 1
        self.offset += 1
        return replicas


# --- partitions -----------------------------------------------------------------------------------

def check_manual_assignment(image: ClusterImage, replicas: list[int], replication_factor: int | None) -> None:
    """``validateManualPartitionAssignment``: registered, distinct brokers, as many as the other partitions."""
    if not replicas:
        raise Refused("INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise Refused("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes broker "
                          f"{broker_id}, but no such broker is registered.")
        if broker_id == previous:
            raise Refused("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes the broker "
                          f"{broker_id} more than once.")
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise Refused("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes a partition with "
                      f"{len(replicas)} replica(s), but this is not consistent with previous partitions, which "
                      f"have {replication_factor} replica(s).")


def _in_sync(image: ClusterImage, replicas: list[int]) -> list[int]:
    """A new partition's ISR (KIP-841): its replicas that may serve now, the first one leading."""
    eligible = eligible_replicas(image)
    return [r for r in replicas if eligible(r)]


def _manual_isr(image: ClusterImage, replicas: list[int], partition_id: int) -> list[int]:
    isr = _in_sync(image, replicas)
    if not isr:
        raise Refused("INVALID_REPLICA_ASSIGNMENT", f"All brokers specified in the manual partition assignment "
                      f"for partition {partition_id} are fenced or in controlled shutdown.")
    return isr


def _placed_isr(image: ClusterImage, replicas: list[int], replication_factor: int) -> list[int]:
    isr = _in_sync(image, replicas)
    if not isr:
        raise Refused("INVALID_REPLICATION_FACTOR", f"Unable to replicate the partition {replication_factor} "
                      "time(s): All brokers are currently fenced or in controlled shutdown.")
    return isr


def _place_all(placer: StripedPlacer, image: ClusterImage, count: int,
               replication_factor: int) -> list[tuple[list[int], list[int]]]:
    """One topic's new partitions from a placer of its own: Kafka's ``StripedReplicaPlacer.place``
    builds a new rack list (new random starts) for every topic."""
    try:
        placer.check(replication_factor)
    except Refused as refused:
        raise Refused(refused.error, f"Unable to replicate the partition {replication_factor} time(s): "
                      f"{refused.message}") from None
    placed = []
    for _ in range(count):
        replicas = placer.place(replication_factor)
        placed.append((replicas, _placed_isr(image, replicas, replication_factor)))
    return placed


def _partition_record(image: ClusterImage, topic_id: str, partition_id: int, replicas: list[int],
                      isr: list[int]) -> dict:
    mv = metadata_version(image)
    data = {"TopicId": topic_id, "PartitionId": partition_id, "Replicas": replicas, "Isr": isr,
            "Leader": isr[0], "LeaderRecoveryState": 0, "LeaderEpoch": 0, "PartitionEpoch": 0}
    if supports(mv, MV_DIRECTORIES):
        data["Directories"] = [default_dir(image, r) for r in replicas]
    if supports(mv, MV_ELR):
        data["EligibleLeaderReplicas"], data["LastKnownElr"] = [], []
    return record("PartitionRecord", data, partition_record_version(mv))


def _duplicates(names: list[str]) -> set[str]:
    seen: set[str] = set()
    return {n for n in names if n in seen or seen.add(n)}


def _first_of_each(items: Iterable[T], key: Callable[[T], Hashable]) -> Iterator[T]:
    """Each entry once: a name (or id) repeated in one request is answered once, by its first entry."""
    seen: set[Hashable] = set()
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            yield item


# --- CreateTopics ---------------------------------------------------------------------------------

def _topic_partitions(image: ClusterImage, topic: dict, placer: Callable[[], StripedPlacer],
                      config: Mapping[str, str]) -> list[tuple[list[int], list[int]]]:
    """(replicas, ISR) per partition of a new topic, in partition order (``createTopic``)."""
    if topic["Assignments"]:
        if topic["ReplicationFactor"] != -1:
            raise Refused("INVALID_REQUEST", "A manual partition assignment was specified, but replication "
                          "factor was not set to -1.")
        if topic["NumPartitions"] != -1:
            raise Refused("INVALID_REQUEST", "A manual partition assignment was specified, but numPartitions "
                          "was not set to -1.")
        by_index: dict[int, tuple[list[int], list[int]]] = {}
        replication_factor = None
        for assignment in topic["Assignments"]:
            index, replicas = assignment["PartitionIndex"], list(assignment["BrokerIds"])
            if index in by_index:
                raise Refused("INVALID_REPLICA_ASSIGNMENT",
                              f"Found multiple manual partition assignments for partition {index}")
            check_manual_assignment(image, replicas, replication_factor)
            replication_factor = len(replicas)
            by_index[index] = (replicas, _manual_isr(image, replicas, index))
        if sorted(by_index) != list(range(len(by_index))):
            raise Refused("INVALID_REPLICA_ASSIGNMENT", "partitions should be a consecutive 0-based integer sequence")
        return [by_index[i] for i in range(len(by_index))]
    if topic["ReplicationFactor"] < -1 or topic["ReplicationFactor"] == 0:
        raise Refused("INVALID_REPLICATION_FACTOR",
                      "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic["NumPartitions"] < -1 or topic["NumPartitions"] == 0:
        raise Refused("INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value.")
    count = int(setting(config, "num.partitions")) if topic["NumPartitions"] == -1 else topic["NumPartitions"]
    replication_factor = (int(setting(config, "default.replication.factor")) if topic["ReplicationFactor"] == -1
                          else topic["ReplicationFactor"])
    return _place_all(placer(), image, count, replication_factor)


def _topic_configs(topic: dict) -> dict[str, str]:
    nulls = [c["Name"] for c in topic["Configs"] if c["Value"] is None]
    if nulls:
        raise Refused("INVALID_CONFIG", "Null value not supported for topic configs: " + ",".join(nulls))
    return {c["Name"]: c["Value"] for c in topic["Configs"]}


def _total_partitions(topics: list[dict], config: Mapping[str, str]) -> int:
    """The partitions a CreateTopics request asks for at most (``validateTotalNumberOfPartitions``)."""
    default = int(setting(config, "num.partitions"))
    return sum(len(t["Assignments"]) if t["Assignments"] else default if t["NumPartitions"] == -1
               else max(t["NumPartitions"], 0) for t in topics)


def create_topics(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """CreateTopicsRequest v0-7: TopicRecord, then the topic's ConfigRecords, then its PartitionRecords,
    per topic created; nothing at all when ``validateOnly``. A request for more than
    ``MAX_PARTITIONS_PER_BATCH`` partitions in all fails whole, every topic POLICY_VIOLATION, as Kafka's
    error response to the PolicyViolationException it throws before looking at any topic."""
    version, body = request["version"], request["data"]
    names = [t["Name"] for t in body["Topics"]]
    duplicates = _duplicates(names)
    too_many = _total_partitions(body["Topics"], ctx.config) > MAX_PARTITIONS_PER_BATCH
    rng = random.Random(ctx.offset)
    taken = set(image.topics)
    records, results = [], []
    for topic in _first_of_each(body["Topics"], lambda t: t["Name"]):
        name = topic["Name"]
        topic_id = image.topic_ids.get(name) or new_topic_id(name, ctx.offset, taken)
        taken.add(topic_id)
        result = {**struct_defaults("CreateTopicsResponse", "Topics"), "Name": name, "ErrorMessage": None}
        try:
            if too_many:
                raise Refused("POLICY_VIOLATION", "Excessively large number of partitions per request.")
            if name in duplicates:
                raise Refused("INVALID_REQUEST", "Duplicate topic name.")
            if name in image.topic_ids:  # Kafka's answer even where the name also collides with another
                raise Refused("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
            check_topic_name(image, name)
            configs = _topic_configs(topic)
            partitions = _topic_partitions(image, topic, lambda: StripedPlacer(image, rng, ctx.shutting_down),
                                           ctx.config)
        except Refused as refused:
            result.update(ErrorCode=error_code(refused.error), ErrorMessage=refused.message)
        else:
            result.update(TopicId=topic_id, NumPartitions=len(partitions),
                          ReplicationFactor=len(partitions[0][0]),
                          Configs=[{"Name": k, "Value": v, "ReadOnly": False, "ConfigSource": _TOPIC_CONFIG_SOURCE,
                                    "IsSensitive": False} for k, v in configs.items()])
            if ctx.owns(topic_id):
                records.append(record("TopicRecord", {"Name": name, "TopicId": topic_id}))
                records += [record("ConfigRecord", {"ResourceType": CONFIG_TOPIC, "ResourceName": name,
                                                    "Name": k, "Value": v}) for k, v in configs.items()]
                records += [_partition_record(image, topic_id, pid, replicas, isr)
                            for pid, (replicas, isr) in enumerate(partitions)]
        if ctx.owns(topic_id):
            results.append(result)
    if body["validateOnly"]:
        records = []
    return Decision(records, response("CreateTopicsResponse", {"Topics": results}, version))


# --- CreatePartitions -----------------------------------------------------------------------------

def _new_partitions(image: ClusterImage, topic: dict, placer: Callable[[], StripedPlacer]) -> list[dict]:
    """The PartitionRecords that grow a topic to ``Count`` partitions (``createPartitions``)."""
    topic_id = image.topic_ids.get(topic["Name"])
    if topic_id is None:
        raise Refused("UNKNOWN_TOPIC_OR_PARTITION")
    existing = image.topics[topic_id].partitions
    count, current = topic["Count"], len(existing)
    if count == current:
        raise Refused("INVALID_PARTITIONS", f"Topic already has {current} partition(s).")
    if count < current:
        raise Refused("INVALID_PARTITIONS", f"The topic {topic['Name']} currently has {current} partition(s); "
                      f"{count} would not be an increase.")
    additional = count - current
    if additional > MAX_RECORDS_PER_USER_OP:
        # Kafka's BoundedList of records overflows (after placing them all, which for 2^31 partitions
        # never ends); refused before placing here, and per topic: a shard sees its own topics' counts only
        raise Refused("UNKNOWN_SERVER_ERROR", "Cannot add another element to the list because it would exceed "
                      f"the maximum length of {MAX_RECORDS_PER_USER_OP}")
    assignments = topic["Assignments"]
    if assignments is not None and len(assignments) != additional:
        raise Refused("INVALID_REPLICA_ASSIGNMENT", f"Attempted to add {additional} additional partition(s), "
                      f"but only {len(assignments)} assignment(s) were specified.")
    replication_factor = len(existing[min(existing)].replicas)
    if assignments is None:
        placed = _place_all(placer(), image, additional, replication_factor)
    else:
        placed = []
        for i, assignment in enumerate(assignments):
            replicas = list(assignment["BrokerIds"])
            check_manual_assignment(image, replicas, replication_factor)
            placed.append((replicas, _manual_isr(image, replicas, current + i)))
    return [_partition_record(image, topic_id, current + i, replicas, isr)
            for i, (replicas, isr) in enumerate(placed)]


def create_partitions(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """CreatePartitionsRequest v0-3: new partitions for existing topics, never fewer."""
    version, body = request["version"], request["data"]
    duplicates = _duplicates([t["Name"] for t in body["Topics"]])
    rng = random.Random(ctx.offset)
    records, results = [], []
    for topic in _first_of_each(body["Topics"], lambda t: t["Name"]):
        name = topic["Name"]
        topic_id = image.topic_ids.get(name)
        if topic_id is not None and not ctx.owns(topic_id):
            continue
        result = {"Name": name, "ErrorCode": 0, "ErrorMessage": None}
        try:
            if name in duplicates:
                raise Refused("INVALID_REQUEST", "Duplicate topic name.")
            records += _new_partitions(image, topic, lambda: StripedPlacer(image, rng, ctx.shutting_down))
        except Refused as refused:
            result.update(ErrorCode=error_code(refused.error), ErrorMessage=refused.message)
        results.append(result)
    if body["ValidateOnly"]:
        records = []
    return Decision(records, response("CreatePartitionsResponse", {"Results": results}, version))


# --- DeleteTopics ---------------------------------------------------------------------------------

def _deletion_targets(body: dict, version: int) -> list[tuple[str | None, str]]:
    """(name, id) per entry: v0-5 name topics, v6+ name or id them (ZERO_UUID id: by name)."""
    if version < 6:
        return [(name, uuids.ZERO_UUID) for name in body["TopicNames"]]
    return [(t["Name"], normalize_uuid(t["TopicId"])) for t in body["Topics"]]


def _deletion(image: ClusterImage, name: str | None, topic_id: str, dup_names: set, dup_ids: set,
              enabled: bool, version: int) -> tuple[str | None, str, str, str | None]:
    """(name, id, error, message) for one entry, as ``ControllerApis.deleteTopics`` checks it."""
    by_id = topic_id != uuids.ZERO_UUID
    if name is None and not by_id:
        return None, topic_id, "INVALID_REQUEST", "Neither topic name nor id were specified."
    if name is not None and by_id:
        return name, topic_id, "INVALID_REQUEST", "You may not specify both topic name and topic id."
    if (topic_id if by_id else name) in (dup_ids if by_id else dup_names):
        return name, topic_id, "INVALID_REQUEST", "Duplicate topic id." if by_id else "Duplicate topic name."
    if by_id:
        topic = image.topics.get(topic_id)
        if topic is None:
            return None, topic_id, "UNKNOWN_TOPIC_ID", None
        name = topic.name
    else:
        topic_id = image.topic_ids.get(name, uuids.ZERO_UUID)
        if topic_id == uuids.ZERO_UUID:
            return name, topic_id, "UNKNOWN_TOPIC_OR_PARTITION", None
    if not enabled:
        # Versions before 3 have no error for this; Kafka fails the request as invalid.
        disabled = "TOPIC_DELETION_DISABLED" if version >= 3 else "INVALID_REQUEST"
        return name, topic_id, disabled, "Topic deletion is disabled."
    return name, topic_id, "NONE", None


def delete_topics(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """DeleteTopicsRequest v0-6: one RemoveTopicRecord per topic deleted (its partitions and configs
    go with it on replay)."""
    version, body = request["version"], request["data"]
    targets = _deletion_targets(body, version)
    dup_names = _duplicates([n for n, i in targets if n is not None and i == uuids.ZERO_UUID])
    dup_ids = _duplicates([i for n, i in targets if n is None and i != uuids.ZERO_UUID])
    enabled = setting(ctx.config, "delete.topic.enable").strip().lower() == "true"
    records, results = [], []
    for target in _first_of_each(targets, lambda t: t):
        name, topic_id, error, message = _deletion(image, *target, dup_names, dup_ids, enabled, version)
        if topic_id in image.topics and not ctx.owns(topic_id):
            continue
        if error == "NONE":
            records.append(record("RemoveTopicRecord", {"TopicId": topic_id}))
        results.append({"Name": name, "TopicId": topic_id, "ErrorCode": error_code(error), "ErrorMessage": message})
    return Decision(records, response("DeleteTopicsResponse", {"Responses": results}, version))
