"""Changing one partition: its ISR, its replicas and who leads it (Kafka's ``PartitionChangeBuilder``).

Every controller path that touches a partition (AlterPartition, ElectLeaders, fencing or shutting
down a broker, reassignment) describes the partition it wants and lets ``change_partition`` work out
the leader and the PartitionChangeRecord, so the election rules live in one place. The record holds
only what changes, as Kafka writes it: Leader -2 and null lists mean "unchanged".

Eligibility (KIP-841) is a predicate, not a lookup in the image, because callers must sometimes
exclude a broker that the image still shows as active: Kafka writes the partition changes of a
fencing *before* the record that fences the broker.

Eligible leader replicas (KIP-966) are decided as Kafka 4 does once the log finalizes
``eligible.leader.replicas.version`` >= 1 (``elr_policy``): an ISR shrinking below
``min.insync.replicas`` keeps the replicas it lost in the ELR (a clean shutdown does not make them
ineligible), the ISR may become empty, a leader may be elected from the ELR when the ISR is empty,
and the last leader is remembered (LastKnownElr) for the recovery of a partition left with neither.
Without the feature a change never leaves the ISR empty, and an ELR found in the image is cleared.
"""

from __future__ import annotations

import enum
import functools
from typing import Callable, Collection, Mapping, Sequence

from kraftlake.image.cluster_image import (CONFIG_BROKER, CONFIG_TOPIC, DIR_MIGRATING, DIR_UNASSIGNED, NO_LEADER,
    NO_LEADER_CHANGE, ClusterImage,
    PartitionRegistration, TopicImage)
from kraftlake.metadata.config import setting
from kraftlake.metadata.schemas import registry

RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState

# metadata.version feature levels at which the controller's output changes (Kafka's MetadataVersion).
MV_LEADER_RECOVERY = 3  # 3.2-IV0: an unclean election marks the partition RECOVERING (KIP-704)
MV_NO_EPOCH_BUMP_ON_ISR_SHRINK = 12  # 3.6-IV0: KAFKA-15021
MV_DIRECTORIES = 17  # 3.7-IV2: JBOD, PartitionRecord / PartitionChangeRecord v1
MV_ELR = 23  # 4.0-IV1: KIP-966 fields, PartitionRecord / PartitionChangeRecord v2

Eligible = Callable[[int], bool]


class Election(enum.Enum):
    ONLINE = "online"  # keep the partition led from the ISR, preferring the current leader
    PREFERRED = "preferred"  # the first assigned replica if it can lead
    UNCLEAN = "unclean"  # ONLINE, and failing that any live replica, even outside the ISR


def metadata_version(image: ClusterImage) -> int | None:
    """The finalized metadata.version level; None when the log never said (then the newest applies)."""
    return image.features.get("metadata.version")


def supports(mv: int | None, level: int) -> bool:
    return mv is None or mv >= level


def partition_record_version(mv: int | None) -> int | None:
    """PartitionRecord and PartitionChangeRecord share their version steps; None: the newest."""
    if mv is None:
        return None
    return 2 if mv >= MV_ELR else 1 if mv >= MV_DIRECTORIES else 0


def eligible_replicas(image: ClusterImage, excluded: Sequence[int] = ()) -> Eligible:
    """KIP-841: only a registered broker that is neither fenced nor shutting down may join an ISR or lead."""
    def eligible(broker_id: int) -> bool:
        broker = image.brokers.get(broker_id)
        return (broker is not None and not broker.fenced and not broker.in_controlled_shutdown
                and broker_id not in excluded)
    return eligible


def default_dir(image: ClusterImage, broker_id: int) -> str:
    """Where a new replica on ``broker_id`` lives before the broker says (ClusterControlManager.defaultDir):
    its only directory, MIGRATING for a broker that never listed any, else not yet known."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        return DIR_UNASSIGNED
    if not broker.directories:
        return DIR_MIGRATING
    return broker.directories[0] if len(broker.directories) == 1 else DIR_UNASSIGNED


def topic_config(image: ClusterImage, topic_name: str, key: str, config: Mapping[str, str]) -> str:
    """A topic config's effective value, looked up as Kafka's controller does
    (``ConfigurationControlManager.getTopicConfig``): the first of ``topic_config_values``."""
    return topic_config_values(image, topic_name, key, config)[0]


def topic_config_values(image: ClusterImage, topic_name: str, key: str, config: Mapping[str, str]) -> list[str]:
    """Every value a topic config has, in Kafka's lookup order: the topic's own config, then the active
    controller node's dynamic broker config, then the cluster-wide dynamic default (``--entity-default``),
    then the static config (always there). The active controller is the quorum's leader as the log last
    named it (LeaderChangeMessage). A reader that must skip a value it cannot use takes the next."""
    scopes = [(CONFIG_TOPIC, topic_name)]
    if image.quorum.leader_id >= 0:
        scopes.append((CONFIG_BROKER, str(image.quorum.leader_id)))
    scopes.append((CONFIG_BROKER, ""))
    values = [image.configs.get(scope, {}).get(key) for scope in scopes]
    return [v for v in values if v is not None] + [setting(config, key)]


ELR_FEATURE = "eligible.leader.replicas.version"


def elr_enabled(image: ClusterImage) -> bool:
    """Kafka's ``FeatureControlManager.isElrFeatureEnabled``: the feature finalized at level 1 or more
    (which itself needs metadata.version 4.0-IV1)."""
    return image.features.get(ELR_FEATURE, 0) >= 1 and supports(metadata_version(image), MV_ELR)


def elr_policy(image: ClusterImage, topic: TopicImage, config: Mapping[str, str]) -> dict:
    """The KIP-966 arguments of ``change_partition`` for a topic: whether ELR is on, and the topic's
    effective ``min.insync.replicas`` (its config, capped at its replication factor, as Kafka's
    ``getTopicEffectiveMinIsr``). Computed once per topic, not per partition."""
    if not elr_enabled(image):
        return {"elr": False, "min_isr": 1}
    min_isr = int(topic_config(image, topic.name, "min.insync.replicas", config))
    first = topic.partitions.get(0)
    if first is not None:
        min_isr = min(min_isr, len(first.replicas))
    return {"elr": True, "min_isr": min_isr}


def unclean_election_enabled(image: ClusterImage, topic_name: str, config: Mapping[str, str]) -> bool:
    return topic_config(image, topic_name, "unclean.leader.election.enable", config).strip().lower() == "true"


def _complete_reassignment(replicas: list[int], isr: list[int], removing: list[int],
                           adding: list[int]) -> tuple[list[int], list[int]] | None:
    """A reassignment is done once every target replica is in the ISR (PartitionReassignmentReplicas):
    the removed replicas then leave both lists. None while it is still running."""
    if not removing and not adding:
        return None
    new_isr = [r for r in isr if r not in removing]
    new_replicas = [r for r in replicas if r not in removing]
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def _elect(partition: PartitionRegistration, replicas: list[int], isr: list[int], elr: Sequence[int],
           eligible: Eligible, election: Election, last_known_leader: bool) -> tuple[int, bool]:
    """(leader, unclean), as ``PartitionChangeBuilder.electLeader``. A replica may lead when it is in
    ``isr`` (or, the ISR being empty, in ``elr``) and eligible. The current leader is kept while it
    may lead, so an ISR change or a failover elsewhere never moves leadership needlessly; PREFERRED
    asks for the first replica first. With ISR and ELR both empty, the last known leader is elected
    (``last_known_leader``, KIP-966's balanced recovery), as an unclean election.

    Unlike Kafka (whose ``canElectLastKnownLeader`` logs "not alive" and elects it anyway), the last
    known leader must be eligible: KIP-841 never makes a fenced or shutting-down broker leader."""
    candidates = isr if isr else elr  # (the tests are inlined: this runs once per partition of a failover)
    if election is Election.PREFERRED and replicas:
        first = replicas[0]
        if first in candidates and eligible(first):
            return first, False
    leader = partition.leader
    if leader in candidates and eligible(leader):
        return leader, False
    for replica in replicas:
        if replica in candidates and eligible(replica):
            return replica, False
    if (last_known_leader and not isr and not elr and len(partition.last_known_elr) == 1
            and eligible(partition.last_known_elr[0])):
        return partition.last_known_elr[0], True
    if election is Election.UNCLEAN:
        for replica in replicas:
            if eligible(replica):
                return replica, True
    return NO_LEADER, False


@functools.lru_cache(maxsize=None)
def _change_record_template(version: int | None) -> tuple[int, dict, tuple[str, ...]]:
    """(version, Kafka's defaults, the fields whose default is a mutable list) of PartitionChangeRecord:
    what ``decisions.record`` computes per call, computed once (a failover writes one per partition)."""
    spec = registry()["PartitionChangeRecord"]
    defaults = spec.defaults()
    return (spec.valid_versions.high if version is None else version, defaults,
            tuple(k for k, v in defaults.items() if isinstance(v, list)))


def _change_record(data: dict, version: int | None) -> dict:
    """``decisions.record("PartitionChangeRecord", data, version)``, without re-deriving the defaults."""
    version, defaults, mutable = _change_record_template(version)
    full = {**defaults, **data}
    for key in mutable:
        if key not in data:
            full[key] = list(defaults[key])
    return {"type": "PartitionChangeRecord", "version": version, "data": full}


def _same_directories(partition: PartitionRegistration, target_replicas: list[int]) -> bool:
    """Whether the directories computed for unchanged replicas are the partition's own: each replica
    placed once, in a known directory. (The general rule in ``change_partition`` gives the same then.)"""
    replicas, directories = partition.replicas, partition.directories
    return (len(target_replicas) == len(replicas) == len(directories) and all(directories)
            and tuple(target_replicas) == replicas and len(set(replicas)) == len(replicas))


def _target_elr(partition: PartitionRegistration, isr: list[int], elr: Sequence[int], last_known: Sequence[int],
                min_isr: int, unclean_shutdown: Collection[int]) -> tuple[list[int], list[int]]:
    """``maybePopulateTargetElr``: below ``min_isr`` the ELR gains the replicas the ISR loses (except
    those that shut down uncleanly), and LastKnownElr keeps everyone else that was in either; at or
    above it both are cleared. Sorted, as Kafka's integer sets iterate."""
    if len(isr) >= min_isr:
        return [], []
    in_isr = set(isr)
    candidates = set(elr) | set(partition.isr)
    new_elr = sorted(r for r in candidates if r not in in_isr and r not in unclean_shutdown)
    new_last_known = sorted(r for r in candidates | set(last_known) if r not in in_isr and r not in new_elr)
    return new_elr, new_last_known


def change_partition(partition: PartitionRegistration, eligible: Eligible, *,
                     isr: Sequence[int] | None = None,
                     replicas: Sequence[int] | None = None,
                     adding: Sequence[int] | None = None,
                     removing: Sequence[int] | None = None,
                     election: Election = Election.ONLINE,
                     leader_recovery_state: int | None = None,
                     mv: int | None = None,
                     new_replica_dir: Callable[[int], str] = lambda broker_id: DIR_UNASSIGNED,
                     elr: bool = False,
                     min_isr: int = 1,
                     unclean_shutdown: Collection[int] = (),
                     last_known_leader: bool = True,
                     ) -> dict | None:
    """The PartitionChangeRecord (an event without offset) that moves ``partition`` to the given
    targets (None: as it is) and elects its leader, or None when nothing would change; the steps of
    Kafka's ``PartitionChangeBuilder.build`` in its order.

    Without ELR (``elr``, see ``elr_policy``) and without a leader to elect, the partition goes
    offline (leader -1) but keeps its last ISR: an empty ISR would lose track of which replica holds
    the committed data. With ELR the ISR may empty: the ELR keeps that knowledge. ``min_isr`` is the
    topic's effective min.insync.replicas; ``unclean_shutdown`` the brokers that restarted without a
    clean shutdown (they leave the ELR); ``last_known_leader`` is Kafka's
    ``useLastKnownLeaderInBalancedRecovery`` (on in Kafka's controller).
    """
    target_isr = list(partition.isr if isr is None else isr)
    target_replicas = list(partition.replicas if replicas is None else replicas)
    target_removing = list(partition.removing_replicas if removing is None else removing)
    target_adding = list(partition.adding_replicas if adding is None else adding)
    if target_removing or target_adding:
        completed = _complete_reassignment(target_replicas, target_isr, target_removing, target_adding)
        if completed is not None:
            target_replicas, target_isr = completed
            target_removing, target_adding = [], []
    same_replicas = tuple(target_replicas) == partition.replicas
    target_elr: Sequence[int] = partition.elr
    target_last_known: Sequence[int] = partition.last_known_elr
    if elr:
        target_elr, target_last_known = _target_elr(partition, target_isr, target_elr, target_last_known,
                                                    min_isr, unclean_shutdown)

    data: dict = {"TopicId": partition.topic_id, "PartitionId": partition.partition_id}
    leader, unclean = _elect(partition, target_replicas, target_isr, target_elr, eligible, election,
                             elr and last_known_leader)
    if leader != partition.leader:
        data["Leader"] = leader
        if elr and leader in target_elr:
            # elected from the ELR: it alone is in sync now, and no longer merely eligible
            target_isr = [leader]
            target_elr = [r for r in target_elr if r != leader]
        if unclean:
            # The new leader's log is all there is now: it alone is in sync, and must recover first.
            data["Isr"] = [leader]
            if partition.leader_recovery_state != RECOVERING and supports(mv, MV_LEADER_RECOVERY):
                data["LeaderRecoveryState"] = RECOVERING
    elif not same_replicas and not set(partition.replicas) <= set(target_replicas):
        # A replica leaving the assignment must see a new leader epoch to stop fetching.
        data["Leader"] = partition.leader

    # maybeUpdateRecordElr: an unclean election (or ELR off) clears both lists
    if "Isr" in data or not elr:
        target_elr, target_last_known = (), ()
    if tuple(target_elr) != partition.elr:
        data["EligibleLeaderReplicas"] = list(target_elr)
    if not last_known_leader and tuple(target_last_known) != partition.last_known_elr:
        data["LastKnownElr"] = list(target_last_known)

    if "Isr" not in data and (target_isr or elr) and tuple(target_isr) != partition.isr:
        data["Isr"] = target_isr
        if ("Leader" not in data and not supports(mv, MV_NO_EPOCH_BUMP_ON_ISR_SHRINK)
                and not set(partition.isr) <= set(target_isr)):
            data["Leader"] = partition.leader  # brokers before 3.6 needed an epoch bump on a shrink
    if elr and last_known_leader:
        _update_last_known_leader(partition, data)
    if target_replicas:
        if supports(mv, MV_DIRECTORIES) and not _same_directories(partition, target_replicas):
            placed = dict(zip(partition.replicas, partition.directories))
            directories = [placed.get(r) or new_replica_dir(r) for r in target_replicas]
            if directories != list(partition.directories):
                data["Directories"] = directories
        if not same_replicas:
            data["Replicas"] = target_replicas
    if target_removing != list(partition.removing_replicas):
        data["RemovingReplicas"] = target_removing
    if target_adding != list(partition.adding_replicas):
        data["AddingReplicas"] = target_adding
    if leader_recovery_state is not None and leader_recovery_state != partition.leader_recovery_state:
        data["LeaderRecoveryState"] = leader_recovery_state
    if len(data) == 2:
        return None
    return _change_record(data, partition_record_version(mv))


def _update_last_known_leader(partition: PartitionRegistration, data: dict) -> None:
    """``maybeUpdateLastKnownLeader``: remember the leader when the ISR first becomes empty; forget it
    once the partition has (or keeps) a leader."""
    new_leader = data.get("Leader", NO_LEADER_CHANGE)
    if data.get("Isr") == [] and list(partition.last_known_elr) != [partition.leader]:
        data["LastKnownElr"] = [partition.leader]
    elif ((new_leader >= 0 or (partition.leader != NO_LEADER and new_leader != NO_LEADER))
          and partition.last_known_elr):
        data["LastKnownElr"] = []
