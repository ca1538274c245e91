"""Partition reassignments (KIP-455) as Kafka's KRaft controller runs them: the
``alterPartitionReassignments`` / ``listPartitionReassignments`` part of ``ReplicationControlManager``,
with ``PartitionReassignmentReplicas`` (where a reassignment starts) and ``PartitionReassignmentRevert``
(what a cancellation leaves).

A reassignment lives in the partition itself, moved by PartitionChangeRecords only:

1. AlterPartitionReassignments with a target: replicas become the target followed by the current
   replicas it drops, ``AddingReplicas`` = target - current, ``RemovingReplicas`` = current - target
   (both ascending, as Kafka's TreeSets give them); the ISR is left alone.
2. The leader's AlterPartition requests add the new replicas to the ISR as they catch up. Fenced or
   shutting-down brokers are refused (KIP-841), so a target on such a broker keeps the reassignment
   pending.
3. The change that puts every target replica in the ISR completes it (``elections.change_partition``):
   replicas = target, the removed replicas leave the ISR, adding/removing are cleared and a removed
   leader is replaced.

A target that needs no new replica completes at once (step 1 and 3 in one record). A new target while a
reassignment runs is computed against the replicas as they stand (the merged list), exactly as Kafka
does: the replicas of the old reassignment that the new target drops become removing replicas.

Cancelling (a null target) drops the adding replicas from the replicas and the ISR and clears both
lists, so the replica set is the original one again; a leader that was an adding replica is replaced.
If only adding replicas are in the ISR the revert needs an unclean election, which Kafka refuses
(INVALID_REPLICA_ASSIGNMENT) unless the topic allows unclean elections.

Sharding as in ``kraftlake.controller.dispatch.replication``: a shard answers for the topics it owns (``ctx.owns``); an
entry naming no known topic is answered alike by every shard.
"""

from __future__ import annotations

from kraftlake.controller.decisions import Context, Decision, Refused, error_code, response
from kraftlake.controller.elections import (Election, change_partition, default_dir, eligible_replicas,
    elr_policy, metadata_version, unclean_election_enabled)
from kraftlake.image.cluster_image import ClusterImage, PartitionRegistration, TopicImage


def is_reassigning(partition: PartitionRegistration) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def reassignment_replicas(current: list[int], target: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(replicas, adding, removing) for moving ``current`` to ``target`` (PartitionReassignmentReplicas):
    the target first, then the current replicas it drops; adding and removing ascending."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return list(target) + removing, adding, removing


def revert(partition: PartitionRegistration) -> tuple[list[int], list[int], bool]:
    """(replicas, isr, unclean) once the running reassignment is cancelled (PartitionReassignmentRevert):
    the adding replicas leave both lists. An ISR of adding replicas only leaves the first original
    replica, an unclean choice."""
    adding = set(partition.adding_replicas)
    replicas = [r for r in partition.replicas if r not in adding]
    isr = [r for r in partition.isr if r not in adding]
    if isr:
        return replicas, isr, False
    if not replicas:
        raise Refused("INVALID_REPLICA_ASSIGNMENT",
                                "Invalid replica assignment: addingReplicas contains all replicas.")
    return replicas, [replicas[0]], True


def validate_assignment(image: ClusterImage, replicas: list[int]) -> None:
    """Kafka's ``validateManualPartitionAssignment``: non-empty, registered brokers, each once. A
    negative id is never registered. Fenced or shutting-down brokers are valid targets: they only
    cannot join the ISR until they are back."""
    if not replicas:
        raise Refused("INVALID_REPLICA_ASSIGNMENT",
                                "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise Refused("INVALID_REPLICA_ASSIGNMENT",
                                    f"The manual partition assignment includes broker {broker_id}, "
                                    "but no such broker is registered.")
        if broker_id == previous:
            raise Refused("INVALID_REPLICA_ASSIGNMENT",
                                    f"The manual partition assignment includes the broker {broker_id} "
                                    "more than once.")
        previous = broker_id


def _change(image: ClusterImage, topic: TopicImage, partition: PartitionRegistration,
            target: list[int], ctx: Context) -> dict | None:
    """``changePartitionReassignment``: only non-empty adding / removing lists are set, so a target
    that equals the replicas as they stand changes nothing."""
    validate_assignment(image, target)
    replicas, adding, removing = reassignment_replicas(list(partition.replicas), target)
    return change_partition(
        partition, eligible_replicas(image),
        replicas=None if replicas == list(partition.replicas) else replicas,
        adding=adding or None, removing=removing or None,
        mv=metadata_version(image), new_replica_dir=lambda broker_id: default_dir(image, broker_id),
        **elr_policy(image, topic, ctx.config))


def _cancel(image: ClusterImage, topic: TopicImage, partition: PartitionRegistration,
            ctx: Context) -> dict | None:
    """``cancelPartitionReassignment``."""
    if not is_reassigning(partition):
        raise Refused("NO_REASSIGNMENT_IN_PROGRESS", "No partition reassignment is in progress.")
    replicas, isr, unclean = revert(partition)
    allow_unclean = unclean_election_enabled(image, topic.name, ctx.config)
    if unclean and not allow_unclean:
        raise Refused("INVALID_REPLICA_ASSIGNMENT",
                                f"Unable to revert partition assignment for {topic.name}:"
                                f"{partition.partition_id} because it would require an unclean leader election.")
    return change_partition(
        partition, eligible_replicas(image), isr=isr, replicas=replicas, adding=[], removing=[],
        election=Election.UNCLEAN if allow_unclean else Election.ONLINE, mv=metadata_version(image),
        **elr_policy(image, topic, ctx.config))


def alter_partition_reassignments(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """AlterPartitionReassignmentsRequest v0: per partition, a target starts or changes its
    reassignment and a null target cancels it. Partitions not named are left as they are
    (reassignments are incremental). Errors are per partition; the request itself never fails."""
    version, body = request["version"], request["data"]
    records, responses = [], []
    for topic_data in body["Topics"]:
        name = topic_data["Name"]
        topic_id = image.topic_ids.get(name)
        if topic_id is not None and not ctx.owns(topic_id):
            continue
        topic = None if topic_id is None else image.topics.get(topic_id)
        partitions = []
        responses.append({"Name": name, "Partitions": partitions})
        for data in topic_data["Partitions"]:
            index = data["PartitionIndex"]
            try:
                if topic is None:
                    raise Refused("UNKNOWN_TOPIC_OR_PARTITION", f"Unable to find a topic named {name}.")
                partition = topic.partitions.get(index)
                if partition is None:
                    raise Refused("UNKNOWN_TOPIC_OR_PARTITION",
                                            f"Unable to find partition {name}:{index}.")
                if data["Replicas"] is None:
                    change = _cancel(image, topic, partition, ctx)
                else:
                    change = _change(image, topic, partition, list(data["Replicas"]), ctx)
            except Refused as e:
                partitions.append({"PartitionIndex": index, "ErrorCode": error_code(e.error),
                                   "ErrorMessage": e.message})
                continue
            if change is not None:
                records.append(change)
            partitions.append({"PartitionIndex": index, "ErrorCode": 0, "ErrorMessage": None})
    return Decision(records, response("AlterPartitionReassignmentsResponse", {
        "ErrorCode": 0, "ErrorMessage": None, "Responses": responses}, version))


def ongoing(partition: PartitionRegistration) -> dict:
    """One OngoingPartitionReassignment: the replicas as they stand, adding and removing."""
    return {"PartitionIndex": partition.partition_id, "Replicas": list(partition.replicas),
            "AddingReplicas": list(partition.adding_replicas),
            "RemovingReplicas": list(partition.removing_replicas)}


def list_partition_reassignments(image: ClusterImage, request: dict, ctx: Context) -> Decision:
    """ListPartitionReassignmentsRequest v0: every running reassignment (null topics) or those of
    the named partitions. As in Kafka, unknown topics and partitions, and partitions not being
    reassigned, are left out rather than answered with an error; topics are listed by name,
    partitions by index."""
    version, body = request["version"], request["data"]
    wanted: list[tuple[TopicImage, list[int] | None]] = []
    if body["Topics"] is None:
        wanted = [(image.topics[tid], None) for _, tid in sorted(image.topic_ids.items())]
    else:
        for entry in body["Topics"]:
            topic_id = image.topic_ids.get(entry["Name"])
            if topic_id is not None:
                wanted.append((image.topics[topic_id], list(entry["PartitionIndexes"])))
    topics = []
    for topic, indexes in wanted:
        if not ctx.owns(topic.id):
            continue
        ids = sorted(topic.partitions) if indexes is None else indexes
        found = []
        for index in ids:
            partition = topic.partitions.get(index)
            if partition is not None and is_reassigning(partition) and index not in [p["PartitionIndex"] for p in found]:
                found.append(ongoing(partition))
        if found:
            topics.append({"Name": topic.name, "Partitions": found})
    return Decision([], response("ListPartitionReassignmentsResponse", {
        "ErrorCode": 0, "ErrorMessage": None, "Topics": topics}, version))
