"""Kafka's ``PartitionChangeBuilderTest`` (metadata module, Kafka 4.x) translated to
``kraftlake.controller.elections.change_partition``, case by case.

Kafka's builder is configured with setters; here the same inputs are keyword arguments:
``setTargetIsr`` → ``isr``, ``setTargetReplicas`` → ``replicas``, ``setElection`` → ``election``,
``setEligibleLeaderReplicasEnabled`` → ``elr``, the builder's ``minISR`` → ``min_isr``,
``setUncleanShutdownReplicas`` → ``unclean_shutdown``, ``setUseLastKnownLeaderInBalancedRecovery`` →
``last_known_leader``, the acceptable-leader predicate → the eligibility predicate. Kafka's tests run
each case at PartitionChangeRecord v0, v1 and v2 through the metadata.version that writes it; ELR is on
at v2. (Kafka first put v2 at 3.8-IV0 and later moved ELR to 4.0-IV1, the level used here.)

The expected records are Kafka's, written out by hand: only the fields a Kafka test sets, every other
field "unchanged" (Leader -2, LeaderRecoveryState -1, lists null).
"""

from __future__ import annotations

import pytest

from kraftlake.controller.elections import Election, change_partition
from kraftlake.image.cluster_image import DIR_MIGRATING, DIR_UNASSIGNED, PartitionRegistration
from kraftlake.image.partitions import merge

VERSIONS = (0, 1, 2)
MV_OF_VERSION = {0: 15, 1: 17, 2: 23}  # 3.7-IV0, 3.7-IV2, 4.0-IV1
UNCHANGED = {"Leader": -2, "LeaderRecoveryState": -1}
RECOVERING = 1
FOO_ID, BAR_ID, BAZ_ID = "FbrrdcfiR-KC2CPSTHaJrg", "LKfUsCBnQKekvL9O5dY9nw", "wQzt5gkSTwuQNXZF5gIw7A"
OFFLINE_ID = "LKfUsCBnQKekvL9O5dY9nw"


def part(topic_id: str, replicas, isr, leader: int, *, elr=(), last_known=(), removing=(), adding=(),
         recovery: int = 0, directories=None) -> PartitionRegistration:
    return PartitionRegistration(
        topic_id=topic_id, partition_id=0, replicas=tuple(replicas), isr=tuple(isr),
        removing_replicas=tuple(removing), adding_replicas=tuple(adding), leader=leader,
        leader_recovery_state=recovery, leader_epoch=100, partition_epoch=200, elr=tuple(elr),
        last_known_elr=tuple(last_known),
        directories=tuple(directories) if directories is not None else (DIR_MIGRATING,) * len(replicas),
        last_offset=0, last_timestamp=0)


FOO = part(FOO_ID, [2, 1, 3], [2, 1, 3], 1,
           directories=["dpdvA5AZSWySmnPFTnu5Kw", "V60B3cglScq3Xk8BX1NxAQ", DIR_UNASSIGNED])
BAR = part(BAR_ID, [1, 2, 3, 4], [1, 2, 3], 1, removing=[1], adding=[4],
           directories=[DIR_UNASSIGNED, "X5FnAcIgTheWgTMzeO5WHw", "GtrcdoSOTm2vFMGFeZq0eg", "YcOqPw5ARmeKr1y9W3AkFw"])
BAZ = part(BAZ_ID, [2, 1, 3], [1, 3], 3,
           directories=["ywnfFpTBTbOsFdZ6uAdOmw", "Th0x70ecRbWvZNNV33jyRA", "j216tuSoQsC9JFd1Z5ZP6w"])
OFFLINE_WITHOUT_ELR = part(OFFLINE_ID, [2, 1, 3], [3], -1)
OFFLINE_WITH_ELR = part(OFFLINE_ID, [2, 1, 3], [], -1, elr=[3], last_known=[2])


def not3(r: int) -> bool:
    return r != 3


def build(partition: PartitionRegistration, version: int, acceptable=not3, *, min_isr: int = 2, **kw):
    """``createFooBuilder(version)`` and friends: ELR on from v2, the default directory UNASSIGNED."""
    kw.setdefault("elr", version >= 2)
    return change_partition(partition, acceptable, mv=MV_OF_VERSION[version], min_isr=min_isr, **kw)


def changed(rec: dict | None) -> dict | None:
    """The fields a record changes (Kafka's ``setX`` calls), without TopicId and PartitionId."""
    if rec is None:
        return None
    return {k: v for k, v in rec["data"].items()
            if k not in ("TopicId", "PartitionId") and v is not None and UNCHANGED.get(k) != v}


def leader_of(partition: PartitionRegistration, version: int, acceptable=not3, **kw) -> int:
    """The leader ``electLeader`` picks: the record's, or the current one when the record keeps it."""
    rec = build(partition, version, acceptable, **kw)
    return partition.leader if rec is None or rec["data"]["Leader"] == -2 else rec["data"]["Leader"]


@pytest.mark.parametrize("version", VERSIONS)
def test_elect_leader(version):
    """PartitionChangeBuilderTest.testElectLeader"""
    assert leader_of(FOO, version, election=Election.PREFERRED) == 2
    assert leader_of(FOO, version) == 1
    assert leader_of(FOO, version, election=Election.UNCLEAN) == 1
    assert leader_of(FOO, version, isr=[1, 3]) == 1
    assert leader_of(FOO, version, election=Election.UNCLEAN, isr=[1, 3]) == 1
    assert leader_of(FOO, version, isr=[3]) == -1
    unclean = build(FOO, version, election=Election.UNCLEAN, isr=[3])
    assert (unclean["data"]["Leader"], unclean["data"]["Isr"]) == (2, [2])  # unclean: ISR reset to it
    clean = build(FOO, version, election=Election.UNCLEAN, isr=[4], replicas=[2, 1, 3, 4])
    assert clean["data"]["Leader"] == 4 and clean["data"]["LeaderRecoveryState"] == -1
    assert leader_of(BAZ, version, lambda r: True, election=Election.PREFERRED) == 3
    assert leader_of(BAZ, version, lambda r: True) == 3
    assert leader_of(BAZ, version, lambda r: True, election=Election.UNCLEAN) == 3


# KAFKA-16624 replaced testTriggerLeaderEpochBumpIfNeeded by one test per case, each at the metadata
# versions it names: 3.4-IV0, 3.5-IV2, 3.6-IV0, 3.7-IV2, 4.0-IV0 as Kafka's MetadataVersion levels.
MV_NAMED = {"3.4-IV0": 8, "3.5-IV2": 11, "3.6-IV0": 12, "3.7-IV2": 17, "4.0-IV0": 22}


def foo_at(mv_name: str, **kw) -> dict | None:
    """``createFooBuilder(metadataVersion)``: FOO, leaders other than 3 acceptable, ELR as the level has
    it (none of these levels has it)."""
    return change_partition(FOO, not3, mv=MV_NAMED[mv_name], min_isr=2, **kw)


@pytest.mark.parametrize("version", VERSIONS)
def test_no_leader_epoch_bump_if_nothing_changed(version):
    """PartitionChangeBuilderTest.testNoLeaderEpochBumpIfNothingChanged: no change, no record."""
    assert build(FOO, version) is None


@pytest.mark.parametrize("mv", ["3.6-IV0", "3.7-IV2", "4.0-IV0"])
def test_no_leader_epoch_bump_on_isr_shrink(mv):
    """PartitionChangeBuilderTest.testNoLeaderEpochBumpOnIsrShrink: from 3.6 a shrink keeps the leader
    epoch."""
    assert changed(foo_at(mv, isr=[2, 1])) == {"Isr": [2, 1]}


@pytest.mark.parametrize("mv", ["3.4-IV0", "3.5-IV2"])
def test_leader_epoch_bump_on_isr_shrink(mv):
    """PartitionChangeBuilderTest.testLeaderEpochBumpOnIsrShrink: before 3.6 a shrink bumps the leader
    epoch, by naming the current leader (KAFKA-15021)."""
    assert changed(foo_at(mv, isr=[2, 1])) == {"Isr": [2, 1], "Leader": 1}


@pytest.mark.parametrize("mv", list(MV_NAMED))
def test_no_leader_epoch_bump_on_isr_expansion(mv):
    """PartitionChangeBuilderTest.testNoLeaderEpochBumpOnIsrExpansion: an expansion never bumps it."""
    assert changed(foo_at(mv, isr=[2, 1, 3, 4])) == {"Isr": [2, 1, 3, 4]}


@pytest.mark.parametrize("mv", list(MV_NAMED))
def test_leader_epoch_bump_on_new_replica_set_disjoint(mv):
    """PartitionChangeBuilderTest.testLeaderEpochBumpOnNewReplicaSetDisjoint: replicas [2, 1, 4] drop
    replica 3, so the leader epoch is bumped at every level (Leader set to the current leader, 1)."""
    rec = foo_at(mv, replicas=[2, 1, 4])
    assert rec["data"]["Leader"] == 1 and rec["data"]["Replicas"] == [2, 1, 4]


@pytest.mark.parametrize("mv", ["3.4-IV0", "3.5-IV2", "3.6-IV0", "3.7-IV2"])
def test_no_leader_epoch_bump_on_empty_target_isr(mv):
    """PartitionChangeBuilderTest.testNoLeaderEpochBumpOnEmptyTargetIsr (the KAFKA-16624 regression):
    the ISR is the one replica, 2, and the target ISR is empty, which no level without ELR allows, so the
    ISR cannot change and its shrink must not bump the leader epoch. Kafka calls
    ``triggerLeaderEpochBumpForIsrShrinkIfNeeded`` alone on an empty record and checks it sets no
    leader; ``change_partition`` has no separate step, so the case is the one the fix was for, whole: the
    partition already offline (leader -1, as its broker's first fencing left it) and its broker fenced
    again, where older levels wrote a useless record that only bumped the leader epoch."""
    offline = part(FOO_ID, [2], [2], -1, directories=["dpdvA5AZSWySmnPFTnu5Kw"])
    assert change_partition(offline, lambda r: r != 2, isr=[], mv=MV_NAMED[mv], min_isr=2) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_no_change(version):
    """PartitionChangeBuilderTest.testNoChange"""
    assert build(FOO, version) is None
    assert build(FOO, version, election=Election.UNCLEAN) is None
    assert build(BAR, version) is None
    assert build(BAR, version, election=Election.UNCLEAN) is None
    assert build(BAZ, version, lambda r: True, election=Election.PREFERRED) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_isr_change_doesnt_bump_leader_epoch(version):
    """PartitionChangeBuilderTest.testIsrChangeDoesntBumpLeaderEpoch"""
    rec = build(FOO, version, isr=[2, 1])
    assert rec["version"] == version and changed(rec) == {"Isr": [2, 1]}


@pytest.mark.parametrize("version", VERSIONS)
def test_isr_change_and_leader_change(version):
    """PartitionChangeBuilderTest.testIsrChangeAndLeaderChange"""
    assert changed(build(FOO, version, isr=[2, 3])) == {"Isr": [2, 3], "Leader": 2}


@pytest.mark.parametrize("version", VERSIONS)
def test_reassignment_rearranges_replicas(version):
    """PartitionChangeBuilderTest.testReassignmentRearrangesReplicas"""
    expected = {"Replicas": [3, 2, 1]}
    if version >= 1:
        expected["Directories"] = [DIR_UNASSIGNED, "dpdvA5AZSWySmnPFTnu5Kw", "V60B3cglScq3Xk8BX1NxAQ"]
    assert changed(build(FOO, version, replicas=[3, 2, 1])) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_isr_enlargement_completes_reassignment(version):
    """PartitionChangeBuilderTest.testIsrEnlargementCompletesReassignment"""
    expected = {"Replicas": [2, 3, 4], "Isr": [2, 3, 4], "Leader": 2, "RemovingReplicas": [], "AddingReplicas": []}
    if version >= 1:
        expected["Directories"] = ["X5FnAcIgTheWgTMzeO5WHw", "GtrcdoSOTm2vFMGFeZq0eg", "YcOqPw5ARmeKr1y9W3AkFw"]
    assert changed(build(BAR, version, isr=[1, 2, 3, 4])) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_revert_reassignment(version):
    """PartitionChangeBuilderTest.testRevertReassignment (PartitionReassignmentRevert of BAR: replicas
    and ISR [1, 2, 3])"""
    expected = {"Replicas": [1, 2, 3], "Leader": 1, "RemovingReplicas": [], "AddingReplicas": []}
    if version >= 1:
        expected["Directories"] = [DIR_UNASSIGNED, "X5FnAcIgTheWgTMzeO5WHw", "GtrcdoSOTm2vFMGFeZq0eg"]
    rec = build(BAR, version, replicas=[1, 2, 3], isr=[1, 2, 3], removing=[], adding=[])
    assert changed(rec) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_removing_replica_reassignment(version):
    """PartitionChangeBuilderTest.testRemovingReplicaReassignment: FOO towards [1, 2]"""
    expected = {"Replicas": [1, 2], "Isr": [2, 1], "Leader": 1}
    if version >= 1:
        expected["Directories"] = ["V60B3cglScq3Xk8BX1NxAQ", "dpdvA5AZSWySmnPFTnu5Kw"]
    assert changed(build(FOO, version, replicas=[1, 2, 3], removing=[3])) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_adding_replica_reassignment(version):
    """PartitionChangeBuilderTest.testAddingReplicaReassignment: FOO towards [1, 2, 3, 4]"""
    expected = {"Replicas": [1, 2, 3, 4], "AddingReplicas": [4]}
    if version >= 1:
        expected["Directories"] = ["V60B3cglScq3Xk8BX1NxAQ", "dpdvA5AZSWySmnPFTnu5Kw", DIR_UNASSIGNED, DIR_UNASSIGNED]
    assert changed(build(FOO, version, replicas=[1, 2, 3, 4], adding=[4])) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_unclean_leader_election(version):
    """PartitionChangeBuilderTest.testUncleanLeaderElection"""
    assert changed(build(FOO, version, election=Election.UNCLEAN, isr=[3])) == {
        "Isr": [2], "Leader": 2, "LeaderRecoveryState": RECOVERING}
    offline = OFFLINE_WITH_ELR if version >= 2 else OFFLINE_WITHOUT_ELR
    expected = {"Isr": [1], "Leader": 1, "LeaderRecoveryState": RECOVERING}
    if version >= 2:  # the partition has an ELR: an unclean election clears it and the last known ELR
        expected.update(EligibleLeaderReplicas=[], LastKnownElr=[])
    only_1 = lambda r: r == 1  # noqa: E731
    assert changed(build(offline, version, only_1, election=Election.UNCLEAN)) == expected
    assert changed(build(offline, version, only_1, election=Election.UNCLEAN, isr=[2])) == expected


@pytest.mark.parametrize("recovery_supported", [True, False])
def test_change_in_leadership_does_not_change_recovery_state(recovery_supported):
    """PartitionChangeBuilderTest.testChangeInLeadershipDoesNotChangeRecoveryState"""
    mv = 3 if recovery_supported else 2  # 3.2-IV0 / 3.1-IV0
    registration = part(FOO_ID, [1, 2, 3], [1], 1, recovery=RECOVERING)
    offline = change_partition(registration, lambda r: False, isr=[], mv=mv)
    assert offline["data"]["LeaderRecoveryState"] == -1 and offline["data"]["Leader"] == -1
    registration = merge(registration, offline["data"], 1, 1)
    assert (registration.leader, registration.isr[0], registration.leader_recovery_state) == (-1, 1, RECOVERING)
    online = change_partition(registration, lambda r: True, mv=mv)
    assert online["data"]["LeaderRecoveryState"] == -1
    registration = merge(registration, online["data"], 2, 2)
    assert (registration.leader, registration.isr[0], registration.leader_recovery_state) == (1, 1, RECOVERING)


@pytest.mark.parametrize("recovery_supported", [True, False])
def test_unclean_sets_leader_recovering_state(recovery_supported):
    """PartitionChangeBuilderTest.testUncleanSetsLeaderRecoveringState"""
    mv = 3 if recovery_supported else 2
    registration = part(FOO_ID, [1, 2, 3], [2, 3], -1)
    rec = change_partition(registration, lambda r: r == 1, election=Election.UNCLEAN, mv=mv)
    assert rec["data"]["LeaderRecoveryState"] == (RECOVERING if recovery_supported else -1)
    assert (rec["data"]["Leader"], rec["data"]["Isr"]) == (1, [1])
    registration = merge(registration, rec["data"], 1, 1)
    assert (registration.leader, registration.isr, registration.leader_recovery_state) == (
        1, (1,), RECOVERING if recovery_supported else 0)


def test_stopped_leader_is_demoted_after_reassignment_completes_even_if_no_new_eligible_leaders():
    """PartitionChangeBuilderTest.testStoppedLeaderIsDemotedAfterReassignmentCompletesEvenIfNoNewEligibleLeaders"""
    registration = part(FOO_ID, [2, 3, 0, 1], [0, 1], 0, removing=[0, 1], adding=[2, 3])
    rec = change_partition(registration, lambda r: False, isr=[0, 1, 2, 3], mv=2)
    assert rec["version"] == 0
    assert changed(rec) == {"Replicas": [2, 3], "Isr": [2, 3], "RemovingReplicas": [], "AddingReplicas": [],
                            "Leader": -1}


@pytest.mark.parametrize("version", VERSIONS)
def test_eligible_leader_replicas_isr_shrink_below_min_isr(version):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrShrinkBelowMinISR"""
    partition = part(FOO_ID, [1, 2, 3, 4], [1, 2, 3, 4], 1)
    rec = build(partition, version, min_isr=3, election=Election.PREFERRED, last_known_leader=False, isr=[1, 2])
    expected = {"Isr": [1, 2]}
    if version >= 2:
        expected["EligibleLeaderReplicas"] = [3, 4]
    assert changed(rec) == expected
    after = merge(partition, rec["data"], 1, 1)
    assert (after.elr, after.last_known_elr) == (((3, 4), ()) if version >= 2 else ((), ()))


@pytest.mark.parametrize("version", VERSIONS)
def test_eligible_leader_replicas_isr_expand_above_min_isr(version):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrExpandAboveMinISR"""
    partition = part(FOO_ID, [1, 2, 3, 4], [1, 2], 1, elr=[3], last_known=[4])
    rec = build(partition, version, min_isr=3, election=Election.PREFERRED, last_known_leader=False, isr=[1, 2, 3])
    assert changed(rec) == {"Isr": [1, 2, 3], "EligibleLeaderReplicas": [], "LastKnownElr": []}
    after = merge(partition, rec["data"], 1, 1)
    assert (after.elr, after.last_known_elr) == ((), ())


@pytest.mark.parametrize("version", VERSIONS)
def test_eligible_leader_replicas_isr_add_new_member_not_in_elr(version):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrAddNewMemberNotInELR"""
    partition = part(FOO_ID, [1, 2, 3, 4], [1], 1, elr=[3], last_known=[2])
    rec = build(partition, version, min_isr=3, election=Election.PREFERRED, last_known_leader=False, isr=[1, 4])
    expected = {"Isr": [1, 4]}
    if version < 2:
        expected.update(EligibleLeaderReplicas=[], LastKnownElr=[])
    assert changed(rec) == expected
    after = merge(partition, rec["data"], 1, 1)
    assert (after.elr, after.last_known_elr) == (((3,), (2,)) if version >= 2 else ((), ()))


@pytest.mark.parametrize("version", VERSIONS)
def test_eligible_leader_replicas_remove_unclean_shutdown_replicas_from_elr(version):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_RemoveUncleanShutdownReplicasFromElr"""
    partition = part(FOO_ID, [1, 2, 3, 4], [1], 1, elr=[2, 3])
    rec = build(partition, version, min_isr=3, election=Election.PREFERRED, last_known_leader=False,
                unclean_shutdown=[3])
    expected = {"EligibleLeaderReplicas": [2], "LastKnownElr": [3]} if version >= 2 else {"EligibleLeaderReplicas": []}
    assert changed(rec) == expected
    after = merge(partition, rec["data"], 1, 1)
    assert (after.elr, after.last_known_elr) == (((2,), (3,)) if version >= 2 else ((), ()))


def test_keeps_directories_after_reassignment():
    """PartitionChangeBuilderTest.testKeepsDirectoriesAfterReassignment (broker 5's directory comes
    from the default-directory provider here, Kafka's ``setDirectory`` for a new replica)"""
    registration = part(FOO_ID, [2, 1, 3], [2, 1, 3], 1,
                        directories=["v1PVrX6uS5m8CByXlLfmWg", "iU2znv45Q9yQkOpkTSy3jA", "fM5NKyWTQHqEihjIkUl99Q"])
    dirs = {5: "RNJ5oFjjSSWMMFRwqdCfJg"}
    rec = change_partition(registration, lambda r: True, replicas=[3, 1, 5, 4], mv=17,
                           new_replica_dir=lambda b: dirs.get(b, DIR_UNASSIGNED))
    assert rec["version"] == 1
    assert changed(rec) == {"Leader": 1, "Replicas": [3, 1, 5, 4], "Directories": [
        "fM5NKyWTQHqEihjIkUl99Q", "iU2znv45Q9yQkOpkTSy3jA", "RNJ5oFjjSSWMMFRwqdCfJg", DIR_UNASSIGNED]}


@pytest.mark.parametrize("last_known_leader", [True, False])
def test_eligible_leader_replicas_elr_can_be_elected(last_known_leader):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElrCanBeElected"""
    partition = part(FOO_ID, [1, 2, 3, 4], [1], 1, elr=[3], last_known=[] if last_known_leader else [2])
    rec = build(partition, 2, lambda r: r != 1, min_isr=3, election=Election.PREFERRED,
                last_known_leader=last_known_leader, isr=[])
    assert changed(rec) == {"Isr": [3], "EligibleLeaderReplicas": [1], "Leader": 3}
    after = merge(partition, rec["data"], 1, 1)
    assert (after.elr, after.last_known_elr, after.isr) == ((1,), () if last_known_leader else (2,), (3,))


@pytest.mark.parametrize("last_known_leader", [True, False])
def test_eligible_leader_replicas_isr_can_shrink_to_zero(last_known_leader):
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrCanShrinkToZero"""
    partition = part(FOO_ID, [1, 2, 3, 4], [1, 2, 3, 4], 1)
    rec = build(partition, 2, lambda r: False, min_isr=3, election=Election.PREFERRED,
                last_known_leader=last_known_leader, isr=[])
    expected = {"Isr": [], "Leader": -1, "EligibleLeaderReplicas": [1, 2, 3, 4]}
    if last_known_leader:
        expected["LastKnownElr"] = [1]
    assert changed(rec) == expected
    partition = merge(partition, rec["data"], 1, 1)
    assert partition.elr == (1, 2, 3, 4) and partition.isr == ()
    assert partition.last_known_elr == ((1,) if last_known_leader else ())
    if last_known_leader:
        again = build(partition, 2, lambda r: False, min_isr=3, election=Election.PREFERRED, unclean_shutdown=[2])
        assert again["data"]["LastKnownElr"] is None


def test_eligible_leader_replicas_elect_last_known_leader():
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElectLastKnownLeader"""
    partition = part(FOO_ID, [1, 2, 3, 4], [], -1, last_known=[1])
    rec = build(partition, 2, lambda r: True, min_isr=3, election=Election.PREFERRED, isr=[])
    assert changed(rec) == {"Isr": [1], "Leader": 1, "LeaderRecoveryState": RECOVERING, "LastKnownElr": []}
    after = merge(partition, rec["data"], 1, 1)
    assert (after.elr, after.last_known_elr, after.isr) == ((), (), (1,))


def test_eligible_leader_replicas_elect_last_known_leader_should_fail():
    """PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElectLastKnownLeaderShouldFail"""
    partition = part(FOO_ID, [1, 2, 3, 4], [], -1, elr=[3], last_known=[1])
    assert build(partition, 2, not3, min_isr=3, election=Election.PREFERRED, isr=[]) is None


def test_the_last_known_leader_must_be_able_to_lead():
    """Where this project departs from Kafka on purpose: Kafka's ``canElectLastKnownLeader`` logs that
    the last known leader "is not alive" and elects it anyway; here a fenced or shutting-down last
    known leader is not elected (KIP-841), and the partition stays offline until it comes back."""
    partition = part(FOO_ID, [1, 2, 3, 4], [], -1, last_known=[1])
    assert build(partition, 2, lambda r: r != 1, min_isr=3, isr=[]) is None
