"""``kraftlake.controller.elections``: the election and ISR rules of Kafka's ``PartitionChangeBuilder``, checked by
replaying the records they produce. ``Cluster`` and ``check_kip841`` are shared with test_replication."""

from __future__ import annotations

import pytest

from kraftlake.metadata import uuids
from kraftlake.controller.decisions import record
from kraftlake.controller.elections import (RECOVERING, Election, change_partition, default_dir, eligible_replicas,
    partition_record_version, unclean_election_enabled)
from kraftlake.image.cluster_image import DIR_MIGRATING, DIR_UNASSIGNED, ClusterImage, PartitionRegistration
from kraftlake.image.replay import replay

TS = 1_763_580_879_457


def topic_id(n: int) -> str:
    return uuids.from_bytes(bytes([n] * 16))


class Cluster:
    """An image built by replaying records, as a real log would build it."""

    def __init__(self, metadata_version: int | None = None):
        self.image = ClusterImage()
        self.offset = 0
        if metadata_version is not None:
            self.apply([record("FeatureLevelRecord", {"Name": "metadata.version",
                                                      "FeatureLevel": metadata_version})])

    def apply(self, records: list[dict]) -> None:
        for rec in records:
            self.offset += 1
            result = replay(self.image, {**rec, "offset": self.offset, "leader_epoch": 1,
                                         "timestamp": TS + self.offset})
            assert result.rejected is None, (rec, result.rejected)

    def broker(self, broker_id: int, *, fenced: bool = False, shutdown: bool = False, rack: str | None = None,
               epoch: int = 100, log_dirs: tuple[str, ...] = ()) -> None:
        self.apply([record("RegisterBrokerRecord", {
            "BrokerId": broker_id, "BrokerEpoch": epoch, "Fenced": fenced, "InControlledShutdown": shutdown,
            "Rack": rack, "LogDirs": list(log_dirs),
            "EndPoints": [{"Name": "PLAINTEXT", "Host": f"b{broker_id}", "Port": 9092, "SecurityProtocol": 0}],
        })])

    def brokers(self, *ids: int, **kwargs) -> None:
        for broker_id in ids:
            self.broker(broker_id, **kwargs)

    def broker_change(self, broker_id: int, *, fenced: bool | None = None, shutdown: bool = False) -> dict:
        return record("BrokerRegistrationChangeRecord", {
            "BrokerId": broker_id, "BrokerEpoch": self.image.brokers[broker_id].epoch,
            "Fenced": {None: 0, True: 1, False: -1}[fenced], "InControlledShutdown": int(shutdown)})

    def set_broker(self, broker_id: int, **change) -> None:
        self.apply([self.broker_change(broker_id, **change)])

    def topic(self, name: str, assignments: list[list[int]], *, n: int = 1, isr: list[list[int]] | None = None,
              leaders: list[int] | None = None, configs: dict[str, str] | None = None, **fields) -> str:
        tid = topic_id(n)
        records = [record("TopicRecord", {"Name": name, "TopicId": tid})]
        records += [record("ConfigRecord", {"ResourceType": 2, "ResourceName": name, "Name": k, "Value": v})
                    for k, v in (configs or {}).items()]
        for pid, replicas in enumerate(assignments):
            part_isr = replicas if isr is None else isr[pid]
            leader = part_isr[0] if leaders is None else leaders[pid]
            records.append(record("PartitionRecord", {
                "TopicId": tid, "PartitionId": pid, "Replicas": replicas, "Isr": part_isr, "Leader": leader,
                "LeaderEpoch": 5, "PartitionEpoch": 10, **fields}))
        self.apply(records)
        return tid

    def partition(self, name: str, pid: int = 0) -> PartitionRegistration:
        return self.image.partition(self.image.topic_ids[name], pid)


def _can_serve(image: ClusterImage, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


def check_kip841(cluster: Cluster, records: list[dict]) -> None:
    """Replay ``records`` into ``cluster`` and assert both KIP-841 invariants for every partition they
    create or change: no fenced / shutting-down replica joins an ISR or is elected leader. Brokers are
    judged as they stand once all the records are in (a fencing's partition changes come first)."""
    before = {(p.topic_id, p.partition_id): p for p in cluster.image.iter_partitions()}
    cluster.apply(records)
    image = cluster.image
    for after in image.iter_partitions():
        old = before.get((after.topic_id, after.partition_id))
        joined = set(after.isr) - (set() if old is None else set(old.isr))
        assert all(_can_serve(image, r) for r in joined), f"ineligible replica joined the ISR: {after}"
        if old is None or after.leader_epoch != old.leader_epoch or after.leader != old.leader:
            assert after.leader == -1 or _can_serve(image, after.leader), f"ineligible leader elected: {after}"
        assert after.leader == -1 or after.leader in after.isr, f"leader outside the ISR: {after}"


def state(p: PartitionRegistration) -> tuple:
    return list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch


def changed_fields(rec: dict) -> dict:
    """The fields a PartitionChangeRecord sets, as ``kafka-dump-log`` would show them."""
    defaults = record("PartitionChangeRecord", {}, rec["version"])["data"]
    return {k: v for k, v in rec["data"].items() if k in ("TopicId", "PartitionId") or v != defaults[k]}


# --- the leader and the ISR -------------------------------------------------------------------------

def change(cluster: Cluster, name: str = "t", pid: int = 0, **kwargs) -> dict | None:
    kwargs.setdefault("mv", cluster.image.features.get("metadata.version"))
    return change_partition(cluster.partition(name, pid), eligible_replicas(cluster.image), **kwargs)


def test_nothing_to_change_is_no_record():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]])
    assert change(c) is None
    assert change(c, isr=[1, 2, 3], election=Election.PREFERRED) is None


def test_isr_shrink_keeps_the_leader_and_its_epoch():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]])
    rec = change(c, isr=[1, 3])
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Isr": [1, 3]}
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2, 3], [1, 3], 1, 5, 11)


def test_isr_shrink_bumps_the_leader_epoch_before_metadata_version_3_6():
    c = Cluster(metadata_version=11)
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]])
    rec = change(c, isr=[1, 3])
    assert rec["data"]["Leader"] == 1 and rec["version"] == 0
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2, 3], [1, 3], 1, 6, 11)
    assert change(c, isr=[1, 3, 2])["data"]["Leader"] == -2  # an expansion never needed one


def test_leader_leaving_the_isr_hands_over_in_assignment_order():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]], isr=[[3, 2, 1]], leaders=[1])
    rec = change(c, isr=[3, 2])
    assert changed_fields(rec)["Leader"] == 2  # the assignment's order, not the ISR's
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2, 3], [3, 2], 2, 6, 11)


def test_online_election_skips_fenced_and_shutting_down_replicas():
    c = Cluster()
    c.brokers(1, 2)
    c.broker(3, fenced=True)
    c.broker(4, shutdown=True)
    c.topic("t", [[1, 3, 4, 2]], isr=[[1, 3, 4, 2]])
    rec = change(c, isr=[3, 4, 2])
    assert rec["data"]["Leader"] == 2
    check_kip841(c, [rec])


def test_no_eligible_leader_goes_offline_and_keeps_the_last_isr_member():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]])
    c.set_broker(1, fenced=True)
    rec = change(c)
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Leader": -1}
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2], [1], -1, 6, 11)


def test_preferred_election_moves_leadership_to_the_first_replica():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]], leaders=[2])
    assert change(c) is None  # an ONLINE election keeps a leader that may lead
    rec = change(c, election=Election.PREFERRED)
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 6, 11)


@pytest.mark.parametrize("first", [dict(fenced=True), dict(shutdown=True), dict()])
def test_preferred_election_keeps_the_leader_when_the_first_replica_cannot_lead(first):
    c = Cluster()
    c.broker(1, **first)
    c.brokers(2, 3)
    c.topic("t", [[1, 2, 3]], isr=[[2, 3]] if not first else [[1, 2, 3]], leaders=[3])
    assert change(c, election=Election.PREFERRED) is None


def test_unclean_election_picks_a_live_replica_outside_the_isr_and_marks_it_recovering():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.set_broker(3, shutdown=True)
    c.topic("t", [[1, 3, 2]], isr=[[1]])
    c.set_broker(1, fenced=True)
    assert change(c)["data"]["Leader"] == -1  # a clean election finds nobody
    rec = change(c, election=Election.UNCLEAN)
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Leader": 2, "Isr": [2],
                                   "LeaderRecoveryState": RECOVERING}
    check_kip841(c, [rec])
    p = c.partition("t")
    assert state(p) == ([1, 3, 2], [2], 2, 6, 11) and p.leader_recovery_state == RECOVERING


def test_unclean_election_prefers_the_isr():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]], isr=[[1, 3]])
    rec = change(c, isr=[3], election=Election.UNCLEAN)
    assert changed_fields(rec)["Leader"] == 3 and "LeaderRecoveryState" not in changed_fields(rec)


def test_unclean_election_before_leader_recovery_existed_leaves_the_state_alone():
    c = Cluster(metadata_version=2)
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]])
    c.set_broker(1, fenced=True)
    rec = change(c, election=Election.UNCLEAN)
    assert rec["data"]["Leader"] == 2 and rec["data"]["LeaderRecoveryState"] == -1


def test_unclean_election_with_nobody_alive_goes_offline():
    c = Cluster()
    c.brokers(1, 2, fenced=True)
    c.topic("t", [[1, 2]], isr=[[1]], leaders=[1])
    rec = change(c, election=Election.UNCLEAN)
    assert changed_fields(rec)["Leader"] == -1 and "Isr" not in changed_fields(rec)


def test_leader_recovery_state_target():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]], LeaderRecoveryState=RECOVERING)
    rec = change(c, leader_recovery_state=0)
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "LeaderRecoveryState": 0}
    check_kip841(c, [rec])
    assert c.partition("t").leader_recovery_state == 0 and c.partition("t").leader_epoch == 5


def test_eligible_leader_replicas_are_cleared_as_kafka_does_with_elr_disabled():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]], isr=[[1, 2]], EligibleLeaderReplicas=[3])
    rec = change(c, isr=[1])
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Isr": [1], "EligibleLeaderReplicas": []}
    check_kip841(c, [rec])
    assert c.partition("t").elr == ()


# --- reassignment completion -------------------------------------------------------------------------

def test_reassignment_completes_once_the_target_replicas_are_in_sync():
    c = Cluster()
    c.brokers(1, 2, 3, 4)
    # Moving [1, 2, 3] to [4, 2, 3]: 1 is being removed, 4 added.
    c.topic("t", [[4, 2, 3, 1]], isr=[[1, 2, 3]], leaders=[1], RemovingReplicas=[1], AddingReplicas=[4])
    assert change(c, isr=[1, 2, 3]) is None
    rec = change(c, isr=[1, 2, 3, 4])
    assert changed_fields(rec) == {
        "TopicId": topic_id(1), "PartitionId": 0, "Leader": 4, "Isr": [2, 3, 4], "Replicas": [4, 2, 3],
        "RemovingReplicas": [], "AddingReplicas": [], "Directories": [DIR_MIGRATING] * 3}
    check_kip841(c, [rec])
    p = c.partition("t")
    assert state(p) == ([4, 2, 3], [2, 3, 4], 4, 6, 11)
    assert p.removing_replicas == () and p.adding_replicas == ()


def test_reassignment_start_adds_replicas_in_their_default_directories():
    c = Cluster()
    log_dir = uuids.from_bytes(bytes([7] * 16))
    c.brokers(1, 2, 3)
    c.broker(4, log_dirs=(log_dir,))
    c.topic("t", [[1, 2, 3]])
    rec = change(c, replicas=[1, 2, 3, 4], adding=[4], new_replica_dir=lambda b: default_dir(c.image, b))
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Replicas": [1, 2, 3, 4],
                                   "AddingReplicas": [4], "Directories": [DIR_MIGRATING] * 3 + [log_dir]}
    check_kip841(c, [rec])
    p = c.partition("t")
    assert state(p) == ([1, 2, 3, 4], [1, 2, 3], 1, 5, 11) and p.adding_replicas == (4,)


def test_reassignment_dropping_a_follower_bumps_the_leader_epoch():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]], RemovingReplicas=[3])
    rec = change(c, isr=[1, 2, 3])
    assert changed_fields(rec)["Leader"] == 1  # same leader, new epoch: 3 must stop fetching
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2], [1, 2], 1, 6, 11)


def test_directories_are_written_only_from_metadata_version_3_7():
    old = Cluster(metadata_version=16)
    old.brokers(1, 2, 3)
    old.topic("t", [[1, 2, 3]], RemovingReplicas=[3])
    rec = change(old, isr=[1, 2, 3])
    assert rec["version"] == 0 and rec["data"]["Directories"] is None


# --- the helpers ------------------------------------------------------------------------------------

def test_record_versions_follow_the_metadata_version():
    assert [partition_record_version(mv) for mv in (None, 7, 16, 17, 22, 23, 30)] == [None, 0, 0, 1, 1, 2, 2]


def test_default_dir():
    c = Cluster()
    one, two = uuids.from_bytes(bytes([7] * 16)), uuids.from_bytes(bytes([8] * 16))
    c.broker(1, log_dirs=(one,))
    c.broker(2, log_dirs=(one, two))
    c.broker(3)
    assert [default_dir(c.image, b) for b in (1, 2, 3, 4)] == [one, DIR_UNASSIGNED, DIR_MIGRATING, DIR_UNASSIGNED]


def test_unclean_election_config_topic_first():
    c = Cluster()
    c.brokers(1)
    c.topic("on", [[1]], n=1, configs={"unclean.leader.election.enable": "TRUE"})
    c.topic("off", [[1]], n=2, configs={"unclean.leader.election.enable": "false"})
    c.topic("default", [[1]], n=3)
    assert unclean_election_enabled(c.image, "on", {})
    assert not unclean_election_enabled(c.image, "off", {"unclean.leader.election.enable": "true"})
    assert unclean_election_enabled(c.image, "default", {"unclean.leader.election.enable": "true"})
    assert not unclean_election_enabled(c.image, "default", {})


def test_eligibility_is_kip_841():
    c = Cluster()
    c.broker(1)
    c.broker(2, fenced=True)
    c.broker(3, shutdown=True)
    eligible = eligible_replicas(c.image, excluded=(4,))
    c.broker(4)
    assert [eligible(b) for b in (1, 2, 3, 4, 5)] == [True, False, False, False, False]


def test_change_partition_does_not_touch_the_image():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]])
    before = c.image.to_bytes()
    change(c, isr=[2], election=Election.UNCLEAN)
    assert c.image.to_bytes() == before
