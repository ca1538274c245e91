"""Partitions under the controller's care (Kafka's ``ReplicationControlManager``): failover of a broker
that is fenced or shutting down, AlterPartition and ElectLeaders. Topic creation and deletion are in
``kraftlake.controller.topics``.

Every function returns what the controller writes and never touches the image; the caller replays the
records (ADR 0003). Per-topic results follow ADR 0003's sharding: a shard answers for the topics it
owns (``ctx.owns``); an entry that names no known topic is answered alike by every shard, so merging
the shards' responses keeps one of each.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterator, Mapping

import numpy as np

from kraftlake.controller.decisions import Context, Decision, Records, error_code, response
from kraftlake.controller.elections import (Eligible, Election, change_partition, eligible_replicas, elr_policy,
    metadata_version, unclean_election_enabled)
from kraftlake.image.cluster_image import NO_LEADER, ClusterImage, PartitionRegistration, TopicImage, normalize_uuid
from kraftlake.image.partition_changes import Shaped
from kraftlake.image.partitions import merge
from kraftlake.metadata.errors import DEFAULT_MESSAGES
from kraftlake.metadata.schemas import StructSpec, registry

ELECTION_TYPES = {0: Election.PREFERRED, 1: Election.UNCLEAN}
# From this many partitions a failover decides each shape once (``PartitionStore.shapes``); below, each partition
# is decided on its own. Finding the shapes costs about as much as 25 decisions (~130 µs), and a broker in a few
# dozen of a shard's partitions is in about as many shapes: 13,296 shapes for 13,468 partitions in the soak's
# failovers (50 brokers, 2,000 partitions, 4 shards).
SHAPES_FROM = 64


def struct_defaults(message: str, *path: str) -> dict:
    """Kafka's defaults for a nested struct of ``message`` (e.g. one partition of a response)."""
    return _struct(message, path).defaults()


@functools.cache
def _struct(message: str, path: tuple[str, ...]) -> StructSpec:
    spec = registry()[message]
    for name in path:
        spec = spec.by_name[name].struct
    return spec


def topic_election(image: ClusterImage, topic_name: str, ctx: Context) -> Election:
    cache = ctx.elections
    election = None if cache is None else cache.get(topic_name)
    if election is None:
        election = Election.UNCLEAN if unclean_election_enabled(image, topic_name, ctx.config) else Election.ONLINE
        if cache is not None:
            cache[topic_name] = election
    return election


def broker_failover(image: ClusterImage, broker_id: int, ctx: Context,
                    directories: frozenset[str] | None = None, *, also_elr: bool = False,
                    unclean_shutdown: bool = False) -> Records:
    """The PartitionChangeRecords that take ``broker_id`` out of every ISR it is in and move its
    leaderships (Kafka's ``generateLeaderAndIsrUpdates`` for a fenced or shutting-down broker), or
    only of the partitions whose replica on it lives in one of ``directories`` (a JBOD failure).
    ``also_elr`` goes on to the partitions whose ELR holds it (unregistration); ``unclean_shutdown``
    (a broker that restarted without a clean shutdown, KIP-966) also takes it out of every ELR.

    The broker is excluded explicitly rather than through the image, because Kafka writes these
    records before the one that fences it. Partitions it is in neither the ISR nor (when asked) the
    ELR of cannot change: it leads none of them. Only this shard's topics are considered
    (``ctx.owns``); records come in topic order, then partition order.

    A broker of a large cluster is in hundreds of thousands of partitions, but they come in few shapes
    (``PartitionStore.shapes``: the same replicas, ISR, leader, ... under the same topic policy), and
    ``change_partition`` reads nothing else but the partition's identity, which it copies into the
    record. So the partitions are found on the columns, each shape is decided once, and each partition's
    record is its shape's with its own TopicId and PartitionId, held as columns (``partition_changes.Shaped``)
    until someone reads it as a dict: the shard step applies them as they are (docs/performance.md: 10^6
    partitions).
    """
    store = image.store
    store.flush()
    rows = store.rows_holding(broker_id, ("isr", "elr") if also_elr or unclean_shutdown else ("isr",))
    # this shard's topics among those of the rows, in the image's order: asked of the few topics the broker is in,
    # not of every topic (most failovers find none: the broker's end of a controlled shutdown, fenced)
    ordinals = store.cols["topic"][rows]
    held = {store.topics.values[o] for o in np.unique(ordinals).tolist()}
    owned = {t for t in held if ctx.owns(t)}
    topics = [t for t in image.topics.values() if t.id in owned] if owned else []
    if not topics:  # (a broker a controlled shutdown or an earlier failover already took out of every ISR)
        return Records()
    rank_of = np.full(len(store.topics.values), -1, np.int64)  # topic ordinal -> place in ``topics``
    rank_of[[store.topics.codes[t.id] for t in topics]] = np.arange(len(topics))
    ranks = rank_of[ordinals]
    rows, ranks = rows[ranks >= 0], ranks[ranks >= 0]
    mv = metadata_version(image)
    eligible = eligible_replicas(image, excluded=(broker_id,))
    shut_down = (broker_id,) if unclean_shutdown else ()
    place = (ranks << 32) | store.cols["partition_id"][rows]
    if np.any(place[1:] < place[:-1]):  # rows are not kept in topic order
        order = np.argsort(place)
        rows, ranks = rows[order], ranks[order]
    policies: dict[tuple[Election, bool, int], int] = {}
    policy_of_rank = np.full(len(topics), -1, np.int64)
    for rank in np.unique(ranks).tolist():
        topic = topics[rank]
        policy = elr_policy(image, topic, ctx.config)
        key = (topic_election(image, topic.name, ctx), policy["elr"], policy["min_isr"])
        policy_of_rank[rank] = policies.setdefault(key, len(policies))
    policy_of_row = policy_of_rank[ranks]
    if len(rows) >= SHAPES_FROM:
        shape, representatives = store.shapes(rows, policy_of_row)
    else:  # each partition its own shape
        shape = representatives = np.arange(len(rows))
    by_policy = list(policies)
    templates: list[dict | None] = []
    places = representatives.tolist()
    for place, partition in zip(places, store.make(rows[representatives], [topics[ranks[p]].id for p in places])):
        election, elr, min_isr = by_policy[policy_of_row[place]]
        change = None
        if directories is None or _directory_of(partition, broker_id) in directories:
            change = change_partition(partition, eligible, isr=[r for r in partition.isr if r != broker_id],
                                      election=election, mv=mv, unclean_shutdown=shut_down, elr=elr,
                                      min_isr=min_isr)
        templates.append(change)
    decided = np.fromiter((t is not None for t in templates), np.bool_, len(templates))  # per shape
    changed = decided[shape]
    renumbered = np.cumsum(decided) - 1  # a changing shape's place among those kept
    rows = rows[changed]
    return Records([Shaped([t for t in templates if t is not None], renumbered[shape[changed]],
                           [t.id for t in topics], ranks[changed], store.cols["partition_id"][rows], rows)])


def _directory_of(partition: PartitionRegistration, broker_id: int) -> str | None:
    for replica, directory in zip(partition.replicas, partition.directories):
        if replica == broker_id:
            return directory
    return None


def balance_partition_leaders(image: ClusterImage, ctx: Context) -> list[dict]:
    """Preferred elections for every partition of this shard whose leader is not its first replica
    while that replica is in the ISR and eligible: what Kafka's controller does every
    ``leader.imbalance.check.interval.seconds`` when ``auto.leader.rebalance.enable`` is true
    (``ReplicationControlManager.maybeBalancePartitionLeaders``). A broker that came back therefore
    leads again at the next check, not at once."""
    mv = metadata_version(image)
    eligible = eligible_replicas(image)
    records = []
    for topic in image.topics.values():
        if not ctx.owns(topic.id):
            continue
        for partition in topic.partitions.values():
            preferred = partition.replicas[0] if partition.replicas else NO_LEADER
            if partition.leader == preferred or preferred not in partition.isr or not eligible(preferred):
                continue
            change = change_partition(partition, eligible, election=Election.PREFERRED, mv=mv,
                                      **elr_policy(image, topic, ctx.config))
            if change is not None:
                records.append(change)
    return records


# --- AlterPartition -------------------------------------------------------------------------------

def _requested_isr(partition_data: dict, version: int) -> list[tuple[int, int]]:
    """(broker id, broker epoch) per proposed ISR member; -1: the sender did not say (before v3)."""
    if version >= 3:
        return [(s["BrokerId"], s["BrokerEpoch"]) for s in partition_data["NewIsrWithEpochs"]]
    return [(broker_id, -1) for broker_id in partition_data["NewIsr"]]


def _ineligible(image: ClusterImage, isr: list[tuple[int, int]]) -> bool:
    """KIP-841: an ISR may only grow by live brokers, and only by the incarnation the leader saw."""
    for broker_id, epoch in isr:
        broker = image.brokers.get(broker_id)
        if (broker is None or broker.in_controlled_shutdown or broker.fenced
                or (epoch != -1 and broker.epoch != epoch)):
            return True
    return False


def _validate_alter(image: ClusterImage, sender: int, partition: PartitionRegistration | None,
                    data: dict, isr: list[tuple[int, int]], version: int) -> str:
    """The first rule the proposal breaks, in ``validateAlterPartitionData``'s order, or NONE."""
    if partition is None:
        return "UNKNOWN_TOPIC_OR_PARTITION"
    # Epochs ahead of ours mean another controller has moved on: let the leader look for it.
    if data["LeaderEpoch"] > partition.leader_epoch or data["PartitionEpoch"] > partition.partition_epoch:
        return "NOT_CONTROLLER"
    if data["LeaderEpoch"] < partition.leader_epoch:
        return "FENCED_LEADER_EPOCH"
    if sender != partition.leader:
        return "INVALID_REQUEST"
    if data["PartitionEpoch"] < partition.partition_epoch:
        return "INVALID_UPDATE_VERSION"
    members = {broker_id for broker_id, _ in isr}
    if len(members) != len(isr) or not members.issubset(partition.replicas) or partition.leader not in members:
        return "INVALID_REQUEST"
    # A leader still recovering from an unclean election is the only replica with its data.
    if data["LeaderRecoveryState"] == 1 and (len(members) > 1 or partition.leader_recovery_state == 0):
        return "INVALID_REQUEST"
    if _ineligible(image, isr):
        return "INELIGIBLE_REPLICA" if version > 1 else "OPERATION_NOT_ATTEMPTED"
    return "NONE"


def _alter_topic(image: ClusterImage, topic_data: dict, version: int) -> TopicImage | None:
    if version > 1:
        topic_id = normalize_uuid(topic_data["TopicId"])
    else:
        topic_id = image.topic_ids.get(topic_data["TopicName"])
    return None if topic_id is None else image.topics.get(topic_id)


def altered_elsewhere(image: ClusterImage, request: dict, owns: Callable[[str], bool]) -> bool:
    """Whether a shard's answer to this AlterPartitionRequest is empty: no record, no error, no topic,
    because its sender is current and every topic it names is known and owned by another shard (whose
    answers carry them all). Merging the shards' answers then does not need this one."""
    version, body = request["version"], request["data"]
    broker = image.brokers.get(body["BrokerId"])
    if broker is None or broker.epoch != body["BrokerEpoch"]:
        return False
    for topic_data in body["Topics"]:
        topic = _alter_topic(image, topic_data, version)
        if topic is None or owns(topic.id):
            return False
    return True


def alter_partition(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """AlterPartitionRequest v0-3: a leader proposes a new ISR (and, after an unclean election, that
    it has recovered). Accepted proposals are answered with the partition as it then stands."""
    version, body = request["version"], request["data"]
    sender = body["BrokerId"]
    broker = image.brokers.get(sender)
    if broker is None or broker.epoch != body["BrokerEpoch"]:
        return Decision([], response("AlterPartitionResponse", {
            "ErrorCode": error_code("STALE_BROKER_EPOCH"), "Topics": []}, version))
    mv = metadata_version(image)
    eligible = eligible_replicas(image)
    answer = _struct("AlterPartitionResponse", ("Topics", "Partitions"))
    records, topics = [], []
    for topic_data in body["Topics"]:
        topic = _alter_topic(image, topic_data, version)
        if topic is not None and not ctx.owns(topic.id):
            continue
        partitions = []
        topics.append({"TopicName": topic_data["TopicName"], "TopicId": topic_data["TopicId"],
                       "Partitions": partitions})
        election = policy = None  # the topic's, read at its first valid proposal (the image does not change here)
        for data in topic_data["Partitions"]:
            result = answer.defaults()
            result["PartitionIndex"] = data["PartitionIndex"]
            partitions.append(result)
            if topic is None:
                result["ErrorCode"] = error_code("UNKNOWN_TOPIC_ID" if version > 1 else "UNKNOWN_TOPIC_OR_PARTITION")
                continue
            partition = topic.partitions.get(data["PartitionIndex"])
            isr = _requested_isr(data, version)
            error = _validate_alter(image, sender, partition, data, isr, version)
            if error != "NONE":
                result["ErrorCode"] = error_code(error)
                continue
            if policy is None:
                election, policy = topic_election(image, topic.name, ctx), elr_policy(image, topic, ctx.config)
            change = change_partition(partition, eligible, isr=[broker_id for broker_id, _ in isr],
                                      election=election, leader_recovery_state=data["LeaderRecoveryState"], mv=mv,
                                      **policy)
            if change is not None:
                records.append(change)
                partition = merge(partition, change["data"], partition.last_offset, partition.last_timestamp)
                if partition.leader != sender:
                    # Completing a reassignment moved leadership away: the sender must refetch metadata.
                    result["ErrorCode"] = error_code("NEW_LEADER_ELECTED" if version > 1 else "FENCED_LEADER_EPOCH")
                    continue
            result.update(LeaderId=partition.leader, LeaderEpoch=partition.leader_epoch, Isr=list(partition.isr),
                          LeaderRecoveryState=partition.leader_recovery_state,
                          PartitionEpoch=partition.partition_epoch)
    return Decision(records, response("AlterPartitionResponse", {"ErrorCode": 0, "Topics": topics}, version))


# --- ElectLeaders ---------------------------------------------------------------------------------

def _requested_partitions(image: ClusterImage, body: dict) -> Iterator[tuple[str, list[int] | None]]:
    """(topic name, partition ids) to elect; None ids: every partition, reporting only real elections."""
    if body["TopicPartitions"] is None:
        for name in image.topic_ids:
            yield name, None
    else:
        for entry in body["TopicPartitions"]:
            yield entry["Topic"], entry["Partitions"]


def _elect_one(image: ClusterImage, topic: TopicImage | None, name: str, partition_id: int,
               election: Election, mv: int | None, eligible: Eligible,
               config: Mapping[str, str]) -> tuple[str, str | None, dict | None]:
    """(error name, message, record) for one partition, as ``ReplicationControlManager.electLeader``."""
    if topic is None:
        return "UNKNOWN_TOPIC_OR_PARTITION", f"No such topic as {name}", None
    partition = topic.partitions.get(partition_id)
    if partition is None:
        return "UNKNOWN_TOPIC_OR_PARTITION", f"No such partition as {name}-{partition_id}", None
    # Kafka answers these with ``new ApiError(error)``, which carries the error's default message.
    if election is Election.PREFERRED:
        if partition.replicas and partition.leader == partition.replicas[0]:
            return "ELECTION_NOT_NEEDED", DEFAULT_MESSAGES["ELECTION_NOT_NEEDED"], None
    elif partition.leader != NO_LEADER:
        return "ELECTION_NOT_NEEDED", DEFAULT_MESSAGES["ELECTION_NOT_NEEDED"], None
    change = change_partition(partition, eligible, election=election, mv=mv, **elr_policy(image, topic, config))
    if change is None:
        unavailable = ("PREFERRED_LEADER_NOT_AVAILABLE" if election is Election.PREFERRED
                       else "ELIGIBLE_LEADERS_NOT_AVAILABLE")
        return unavailable, DEFAULT_MESSAGES[unavailable], None
    return "NONE", None, change


def elect_leaders(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """ElectLeadersRequest v0-2, PREFERRED (0) or UNCLEAN (1). An UNCLEAN request is the operator's
    explicit consent, so ``unclean.leader.election.enable`` does not apply to it."""
    version, body = request["version"], request["data"]
    election = ELECTION_TYPES.get(body["ElectionType"])
    if election is None:
        return Decision([], response("ElectLeadersResponse", {
            "ErrorCode": error_code("INVALID_REQUEST"), "ReplicaElectionResults": []}, version))
    mv = metadata_version(image)
    eligible = eligible_replicas(image)
    records, results = [], []
    for name, partition_ids in _requested_partitions(image, body):
        topic_id = image.topic_ids.get(name)
        if topic_id is not None and not ctx.owns(topic_id):
            continue
        topic = None if topic_id is None else image.topics[topic_id]
        ids = list(topic.partitions) if partition_ids is None else partition_ids
        partition_results = []
        for partition_id in ids:
            error, message, change = _elect_one(image, topic, name, partition_id, election, mv, eligible, ctx.config)
            if change is not None:
                records.append(change)
            if partition_ids is None and error == "ELECTION_NOT_NEEDED":
                continue
            partition_results.append({"PartitionId": partition_id, "ErrorCode": error_code(error),
                                      "ErrorMessage": message})
        results.append({"Topic": name, "PartitionResult": partition_results})
    return Decision(records, response("ElectLeadersResponse", {
        "ErrorCode": 0, "ReplicaElectionResults": results}, version))

