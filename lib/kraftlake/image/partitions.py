"""Replaying topic and partition records.

Rules from Kafka's ``PartitionRegistration`` (the PartitionRecord constructor and ``merge``),
``DirectoryId.createDirectoriesFrom``, ``LeaderRecoveryState.changeTo`` and the controller's
``ReplicationControlManager.replay`` (which, unlike the broker's ``TopicsDelta``, refuses a
duplicate topic name and an unknown topic id instead of failing later).
"""

from __future__ import annotations

from kraftlake.image.cluster_image import (CONFIG_TOPIC, DIR_MIGRATING, DIR_UNASSIGNED, NO_LEADER_CHANGE, ClusterImage,
    PartitionRegistration, ReplayResult, normalize_uuid)

_LEADER_RECOVERY_STATES = (0, 1)  # RECOVERED, RECOVERING
LRS_NO_CHANGE = -1
_tuple_new = tuple.__new__


def _ints(values: list[int] | None) -> tuple[int, ...]:
    return () if values is None else tuple(values)


def _directories(values: list[str] | None) -> tuple[str, ...]:
    return () if values is None else tuple(normalize_uuid(v) for v in values)


def replay_topic(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    name = data["Name"]
    topic_id = normalize_uuid(data["TopicId"])
    if name in image.topic_ids:
        return ReplayResult(rejected=f"topic {name!r} already exists with id {image.topic_ids[name]}")
    if topic_id in image.topics:
        return ReplayResult(rejected=f"topic id {topic_id} already belongs to {image.topics[topic_id].name!r}")
    image.add_topic(name, topic_id)
    return ReplayResult()


def replay_remove_topic(image: ClusterImage, event: dict) -> ReplayResult:
    """Drops the topic, its partitions and its topic configs (MetadataDelta does all three)."""
    topic_id = normalize_uuid(event["data"]["TopicId"])
    topic = image.topics.get(topic_id)
    if topic is None:
        return ReplayResult(rejected=f"no topic with id {topic_id} to remove")
    removed = [(p, None) for p in topic.partitions.values()]  # made before its columns go
    image.remove_topic(topic_id)
    image.configs.pop((CONFIG_TOPIC, topic.name), None)
    return ReplayResult(partition_changes=removed)


def replay_partition(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    topic_id = normalize_uuid(data["TopicId"])
    partition_id = data["PartitionId"]
    topic = image.topics.get(topic_id)
    if topic is None:
        return ReplayResult(rejected=f"partition {partition_id} of unknown topic id {topic_id}")
    after = registration(topic_id, event)
    if isinstance(after, str):
        return ReplayResult(rejected=after)
    before = topic.partitions.get(partition_id)
    topic.partitions[partition_id] = after
    return ReplayResult(partition_changes=[(before, after)])


def registration(topic_id: str, event: dict) -> PartitionRegistration | str:
    """The partition a PartitionRecord describes, or why it cannot be one."""
    data = event["data"]
    replicas = tuple(data["Replicas"])
    directories = _directories(data["Directories"])
    if not directories:
        directories = (DIR_MIGRATING,) * len(replicas)
    elif len(directories) != len(replicas):
        return f"{len(directories)} directories for {len(replicas)} replicas"
    leader_recovery_state = data["LeaderRecoveryState"]
    if leader_recovery_state not in _LEADER_RECOVERY_STATES:
        return f"invalid LeaderRecoveryState {leader_recovery_state}"
    return PartitionRegistration(topic_id, data["PartitionId"], replicas, tuple(data["Isr"]),
                                 _ints(data["RemovingReplicas"]), _ints(data["AddingReplicas"]), data["Leader"],
                                 leader_recovery_state, data["LeaderEpoch"], data["PartitionEpoch"],
                                 _ints(data["EligibleLeaderReplicas"]), _ints(data["LastKnownElr"]), directories,
                                 event["offset"], event["timestamp"])


def replay_partition_change(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    topic_id = normalize_uuid(data["TopicId"])
    partition_id = data["PartitionId"]
    topic = image.topics.get(topic_id)
    before = None if topic is None else topic.partitions.get(partition_id)
    if before is None:
        return ReplayResult(rejected=f"no partition {topic_id}:{partition_id} to change")
    after = merge(before, data, event["offset"], event["timestamp"])
    if isinstance(after, str):
        return ReplayResult(rejected=after)
    topic.partitions[partition_id] = after
    return ReplayResult(partition_changes=[(before, after)])


def merge(before: PartitionRegistration, data: dict, offset: int, timestamp: int) -> PartitionRegistration | str:
    """Apply a PartitionChangeRecord's fields to a partition, or say why they cannot apply.

    A null list means "unchanged"; Leader -2 means "unchanged" and any other value, even the current
    leader, starts a new leader epoch; LeaderRecoveryState -1 means "unchanged"; every record is a
    new partition epoch.
    """
    new_replicas = data["Replicas"]
    replicas = before.replicas if new_replicas is None else tuple(new_replicas)
    record_directories = data["Directories"]
    if record_directories:
        directories = _directories(record_directories)
    elif new_replicas is not None:
        # Replicas that stay keep their directory; new ones are not placed yet.
        placed = dict(zip(before.replicas, before.directories))
        directories = tuple(placed.get(r, DIR_UNASSIGNED) for r in replicas)
    else:
        directories = before.directories
    if not directories:
        # Kafka sizes this by the replicas *before* the change (PartitionRegistration.merge).
        directories = (DIR_MIGRATING,) * len(before.replicas)
    if len(directories) != len(replicas):
        return f"{len(directories)} directories for {len(replicas)} replicas"

    leader_recovery_state = data["LeaderRecoveryState"]
    if leader_recovery_state == LRS_NO_CHANGE:
        leader_recovery_state = before.leader_recovery_state
    elif leader_recovery_state not in _LEADER_RECOVERY_STATES:
        return f"invalid LeaderRecoveryState {leader_recovery_state}"

    leader = data["Leader"]
    if leader == NO_LEADER_CHANGE:
        leader, leader_epoch = before.leader, before.leader_epoch
    else:
        leader_epoch = before.leader_epoch + 1

    # In field order, lists read in the order of the fields (as before), through ``tuple.__new__``, which
    # ``PartitionRegistration(...)`` calls by way of a Python function: this runs once per partition of a
    # failover, and twice per record of an AlterPartition (its decision, its replay).
    return _tuple_new(PartitionRegistration, (
        before.topic_id,
        before.partition_id,
        replicas,
        before.isr if data["Isr"] is None else tuple(data["Isr"]),
        before.removing_replicas if data["RemovingReplicas"] is None else tuple(data["RemovingReplicas"]),
        before.adding_replicas if data["AddingReplicas"] is None else tuple(data["AddingReplicas"]),
        leader,
        leader_recovery_state,
        leader_epoch,
        before.partition_epoch + 1,
        before.elr if data["EligibleLeaderReplicas"] is None else tuple(data["EligibleLeaderReplicas"]),
        before.last_known_elr if data["LastKnownElr"] is None else tuple(data["LastKnownElr"]),
        directories,
        offset,
        timestamp,
    ))
