"""The metadata image and ``replay``: every record type and rule, with hand-built events, then the
real Kafka logs in ../shared/fixtures/kafka-logs against their independently computed images."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from kraftlake import codec
from kraftlake.metadata import uuids
from kraftlake.image.cluster_image import (DIR_MIGRATING, DIR_UNASSIGNED, Acl, ClusterImage, DelegationToken, Endpoint,
    PartitionRegistration, ScramCredential, SupportedFeature, Voter, VoterRegistration)
from kraftlake.codec.events import check_struct
from kraftlake.image.replay import replay
from kraftlake.metadata.schemas import registry

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures" / "kafka-logs"

T1 = uuids.from_bytes(bytes([1] * 16))
T2 = uuids.from_bytes(bytes([2] * 16))
INC1 = uuids.from_bytes(bytes([0xA1] * 16))
INC2 = uuids.from_bytes(bytes([0xA2] * 16))
DIR_A = uuids.from_bytes(bytes([0x7A] * 16))
DIR_B = uuids.from_bytes(bytes([0x7B] * 16))
TS = 1_763_580_879_457


# --- events as the codec produces them (ADR 0001) -----------------------------------------------

def ev(type_: str, version: int = 0, *, offset: int = 0, leader_epoch: int = 1, **fields) -> dict:
    """An event with every field of ``type_`` present, nested ones too: given, or Kafka's default
    for ``version`` (the same validation hand-written events get). Naming a field the version does
    not have is a mistake in the test, so it raises.
    """
    data = check_struct(registry()[type_], fields, version, type_)
    return {"offset": offset, "leader_epoch": leader_epoch, "timestamp": TS + offset, "type": type_,
            "version": version, "data": data}


def ok(image: ClusterImage, event: dict):
    result = replay(image, event)
    assert result.rejected is None, result.rejected
    return result


def rejected(image: ClusterImage, event: dict) -> str:
    before = image.to_bytes()
    result = replay(image, event)
    assert result.rejected, f"{event['type']} should have been rejected"
    assert not result.partition_changes and not result.broker_changes
    assert image.to_bytes() == before, "a rejected event changed the image"
    return result.rejected


def endpoint(name="PLAINTEXT", host="b1", port=9092, protocol=0) -> dict:
    return {"Name": name, "Host": host, "Port": port, "SecurityProtocol": protocol}


def register(image, broker_id=1, epoch=10, incarnation=INC1, version=3, rack=None, **fields):
    return ok(image, ev("RegisterBrokerRecord", version, BrokerId=broker_id, BrokerEpoch=epoch,
                        IncarnationId=incarnation, EndPoints=[endpoint()], Rack=rack, **fields))


def topic(image, name="t", topic_id=T1):
    return ok(image, ev("TopicRecord", Name=name, TopicId=topic_id))


def partition(image, partition_id=0, topic_id=T1, replicas=(1, 2, 3), leader=1, version=0, offset=5, **fields):
    return ok(image, ev("PartitionRecord", version, offset=offset, PartitionId=partition_id, TopicId=topic_id,
                        Replicas=list(replicas), Isr=list(replicas), Leader=leader, LeaderEpoch=0,
                        PartitionEpoch=0, **fields))


def change(partition_id=0, topic_id=T1, version=0, offset=20, **fields) -> dict:
    return ev("PartitionChangeRecord", version, offset=offset, PartitionId=partition_id, TopicId=topic_id, **fields)


@pytest.fixture
def image() -> ClusterImage:
    return ClusterImage()


@pytest.fixture
def cluster() -> ClusterImage:
    """Brokers 1-3 registered and unfenced, topic t (T1) with partition 0 on [1, 2, 3] led by 1."""
    image = ClusterImage()
    for b in (1, 2, 3):
        register(image, b, epoch=10 + b, Fenced=False)
    topic(image)
    partition(image)
    return image


# --- brokers: RegisterBrokerRecord v0-v3 ---------------------------------------------------------

def test_register_broker_v0_takes_kafka_defaults(image):
    result = ok(image, ev("RegisterBrokerRecord", 0, BrokerId=1, BrokerEpoch=7, IncarnationId=INC1,
                          EndPoints=[endpoint("SSL", port=9093, protocol=1), endpoint()],
                          Features=[{"Name": "metadata.version", "MinSupportedVersion": 1,
                                     "MaxSupportedVersion": 27}],
                          Rack="r1"))
    broker = image.brokers[1]
    assert (broker.epoch, broker.incarnation_id, broker.rack) == (7, INC1, "r1")
    assert broker.fenced is True  # Fenced defaults to true: a new broker starts fenced
    assert broker.in_controlled_shutdown is False and broker.is_migrating_zk_broker is False
    assert broker.directories == ()
    assert broker.listeners == (Endpoint("PLAINTEXT", "b1", 9092, 0), Endpoint("SSL", "b1", 9093, 1))
    assert broker.supported_features == (SupportedFeature("metadata.version", 1, 27),)
    assert result.broker_changes == [(None, broker)]


def test_register_broker_v1_carries_in_controlled_shutdown(image):
    register(image, version=1, InControlledShutdown=True, Fenced=False)
    assert image.brokers[1].in_controlled_shutdown and not image.brokers[1].fenced


def test_register_broker_v2_carries_zk_migration_flag(image):
    register(image, version=2, IsMigratingZkBroker=True)
    assert image.brokers[1].is_migrating_zk_broker


def test_register_broker_v3_log_dirs_in_kafka_uuid_order(image):
    # Uuid.compareTo compares signed longs: a first byte 0x80 sorts before 0x01.
    high_bit, low = uuids.from_bytes(b"\x80" + bytes(15)), uuids.from_bytes(b"\x01" + bytes(15))
    register(image, LogDirs=[low, high_bit])
    assert image.brokers[1].directories == (high_bit, low)


def test_register_broker_accepts_dashed_hex_uuids(image):
    register(image, incarnation=uuids.to_hex(INC1))
    assert image.brokers[1].incarnation_id == INC1


def test_new_registration_replaces_the_old_one_whole(image):
    register(image, version=1, epoch=10, InControlledShutdown=True, rack="r1")
    old = image.brokers[1]
    result = register(image, version=1, epoch=42, incarnation=INC2, Fenced=False)
    new = image.brokers[1]
    assert (new.epoch, new.incarnation_id, new.rack, new.in_controlled_shutdown, new.fenced) == (
        42, INC2, None, False, False)
    assert result.broker_changes == [(old, new)]


# --- brokers: unregister, fence, unfence, registration changes ----------------------------------

def test_unregister_broker_only_with_its_epoch(cluster):
    assert "epoch 99" in rejected(cluster, ev("UnregisterBrokerRecord", BrokerId=2, BrokerEpoch=99))
    assert "not registered" in rejected(cluster, ev("UnregisterBrokerRecord", BrokerId=9, BrokerEpoch=1))
    before = cluster.brokers[2]
    result = ok(cluster, ev("UnregisterBrokerRecord", BrokerId=2, BrokerEpoch=12))
    assert 2 not in cluster.brokers and result.broker_changes == [(before, None)]


def test_fence_and_unfence_need_a_registered_broker_and_its_epoch(cluster):
    result = ok(cluster, ev("FenceBrokerRecord", Id=1, Epoch=11))
    assert cluster.brokers[1].fenced and result.broker_changes[0][1] == cluster.brokers[1]
    ok(cluster, ev("UnfenceBrokerRecord", Id=1, Epoch=11))
    assert not cluster.brokers[1].fenced
    rejected(cluster, ev("FenceBrokerRecord", Id=1, Epoch=12))
    rejected(cluster, ev("UnfenceBrokerRecord", Id=1, Epoch=10))
    rejected(cluster, ev("FenceBrokerRecord", Id=7, Epoch=11))
    rejected(cluster, ev("UnfenceBrokerRecord", Id=7, Epoch=11))


def test_fencing_a_fenced_broker_changes_nothing(cluster):
    ok(cluster, ev("FenceBrokerRecord", Id=1, Epoch=11))
    assert ok(cluster, ev("FenceBrokerRecord", Id=1, Epoch=11)).broker_changes == []


@pytest.mark.parametrize("fenced, expected", [(1, True), (-1, False), (0, None)])
def test_registration_change_v0_fenced_values(cluster, fenced, expected):
    ok(cluster, ev("FenceBrokerRecord", Id=2, Epoch=12))
    ok(cluster, ev("BrokerRegistrationChangeRecord", 0, BrokerId=2, BrokerEpoch=12, Fenced=fenced))
    assert cluster.brokers[2].fenced is (True if expected is None else expected)
    assert not cluster.brokers[2].in_controlled_shutdown  # v0 has no InControlledShutdown: default 0


def test_registration_change_v1_enters_controlled_shutdown(cluster):
    before = cluster.brokers[3]
    result = ok(cluster, ev("BrokerRegistrationChangeRecord", 1, BrokerId=3, BrokerEpoch=13, InControlledShutdown=1))
    after = cluster.brokers[3]
    assert after.in_controlled_shutdown and not after.fenced
    assert result.broker_changes == [(before, after)]
    # 0 is "no change": nothing leaves controlled shutdown but a new registration.
    ok(cluster, ev("BrokerRegistrationChangeRecord", 1, BrokerId=3, BrokerEpoch=13, InControlledShutdown=0))
    assert cluster.brokers[3].in_controlled_shutdown


def test_registration_change_rejects_unknown_values_and_stale_epochs(cluster):
    rejected(cluster, ev("BrokerRegistrationChangeRecord", 1, BrokerId=1, BrokerEpoch=11, Fenced=2))
    rejected(cluster, ev("BrokerRegistrationChangeRecord", 1, BrokerId=1, BrokerEpoch=11, InControlledShutdown=-1))
    rejected(cluster, ev("BrokerRegistrationChangeRecord", 1, BrokerId=1, BrokerEpoch=5, Fenced=1))
    rejected(cluster, ev("BrokerRegistrationChangeRecord", 1, BrokerId=8, BrokerEpoch=11, Fenced=1))


def test_registration_change_v2_replaces_log_dirs_unless_empty(image):
    register(image, LogDirs=[DIR_A])
    ok(image, ev("BrokerRegistrationChangeRecord", 2, BrokerId=1, BrokerEpoch=10, LogDirs=[DIR_B, DIR_A]))
    assert image.brokers[1].directories == (DIR_A, DIR_B)
    ok(image, ev("BrokerRegistrationChangeRecord", 2, BrokerId=1, BrokerEpoch=10, Fenced=-1))
    assert image.brokers[1].directories == (DIR_A, DIR_B) and not image.brokers[1].fenced


def test_register_controller(image):
    ok(image, ev("RegisterControllerRecord", ControllerId=3000, IncarnationId=INC1, ZkMigrationReady=True,
                 EndPoints=[endpoint("CONTROLLER", "c1", 9093)],
                 Features=[{"Name": "kraft.version", "MinSupportedVersion": 0, "MaxSupportedVersion": 1}]))
    controller = image.controllers[3000]
    assert controller.incarnation_id == INC1 and controller.zk_migration_ready
    assert controller.listeners == (Endpoint("CONTROLLER", "c1", 9093, 0),)


# --- topics and partitions ----------------------------------------------------------------------

def test_partition_record_v0_has_no_directories_or_elr(image):
    topic(image)
    result = partition(image, offset=5)
    p = image.partition(T1, 0)
    assert p == PartitionRegistration(T1, 0, (1, 2, 3), (1, 2, 3), (), (), 1, 0, 0, 0, (), (),
                                      (DIR_MIGRATING,) * 3, 5, TS + 5)
    assert result.partition_changes == [(None, p)]


def test_partition_record_v1_directories_must_match_replicas(image):
    topic(image)
    partition(image, version=1, Directories=[DIR_A, DIR_B, DIR_A])
    assert image.partition(T1, 0).directories == (DIR_A, DIR_B, DIR_A)
    assert "directories" in rejected(image, ev("PartitionRecord", 1, PartitionId=1, TopicId=T1, Replicas=[1, 2],
                                               Isr=[1, 2], Leader=1, Directories=[DIR_A]))


def test_partition_record_v2_carries_elr(image):
    topic(image)
    partition(image, version=2, EligibleLeaderReplicas=[2], LastKnownElr=[3])
    assert (image.partition(T1, 0).elr, image.partition(T1, 0).last_known_elr) == ((2,), (3,))


def test_partition_record_rejections(image):
    topic(image)
    assert "unknown topic" in rejected(image, ev("PartitionRecord", PartitionId=0, TopicId=T2, Replicas=[1], Isr=[1]))
    rejected(image, ev("PartitionRecord", PartitionId=0, TopicId=T1, Replicas=[1], Isr=[1], LeaderRecoveryState=3))


def test_partition_record_for_an_existing_partition_replaces_it(cluster):
    before = cluster.partition(T1, 0)
    result = partition(cluster, replicas=(2, 3), leader=2, offset=30)
    assert result.partition_changes == [(before, cluster.partition(T1, 0))]
    assert cluster.partition(T1, 0).replicas == (2, 3)


def test_topic_names_and_ids_are_unique(image):
    topic(image, "t", T1)
    assert "already exists" in rejected(image, ev("TopicRecord", Name="t", TopicId=T2))
    rejected(image, ev("TopicRecord", Name="u", TopicId=T1))
    topic(image, "u", T2)
    assert image.topic_ids == {"t": T1, "u": T2}


def test_partition_change_leader_minus_two_keeps_leader_and_leader_epoch(cluster):
    before = cluster.partition(T1, 0)
    result = ok(cluster, change(Isr=[1, 2], offset=21))
    after = cluster.partition(T1, 0)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (1, 0, 1)
    assert after.isr == (1, 2) and after.replicas == (1, 2, 3)
    assert (after.last_offset, after.last_timestamp) == (21, TS + 21)
    assert result.partition_changes == [(before, after)]


@pytest.mark.parametrize("leader", [1, 2, -1])
def test_partition_change_any_other_leader_bumps_leader_epoch(cluster, leader):
    ok(cluster, change(Leader=leader))
    after = cluster.partition(T1, 0)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (leader, 1, 1)


def test_partition_change_null_lists_keep_values_and_every_record_bumps_partition_epoch(cluster):
    ok(cluster, change(RemovingReplicas=[3], AddingReplicas=[4], Replicas=[1, 2, 3, 4]))
    ok(cluster, change())  # all null: only the partition epoch moves
    p = cluster.partition(T1, 0)
    assert (p.replicas, p.removing_replicas, p.adding_replicas, p.isr) == ((1, 2, 3, 4), (3,), (4,), (1, 2, 3))
    assert (p.leader_epoch, p.partition_epoch) == (0, 2)


def test_partition_change_leader_recovery_state(cluster):
    ok(cluster, change(LeaderRecoveryState=1))
    assert cluster.partition(T1, 0).leader_recovery_state == 1
    ok(cluster, change())  # -1: unchanged
    assert cluster.partition(T1, 0).leader_recovery_state == 1
    ok(cluster, change(LeaderRecoveryState=0))
    assert cluster.partition(T1, 0).leader_recovery_state == 0
    rejected(cluster, change(LeaderRecoveryState=7))


def test_partition_change_elr_and_last_known_elr(cluster):
    ok(cluster, change(version=2, Isr=[], Leader=-1, EligibleLeaderReplicas=[1, 2], LastKnownElr=[3]))
    ok(cluster, change(version=1, Isr=[1]))  # v1 has no ELR fields: they stay
    p = cluster.partition(T1, 0)
    assert (p.isr, p.elr, p.last_known_elr, p.leader) == ((1,), (1, 2), (3,), -1)
    ok(cluster, change(version=2, EligibleLeaderReplicas=[]))
    assert cluster.partition(T1, 0).elr == () and cluster.partition(T1, 0).last_known_elr == (3,)


def test_partition_change_directories(image):
    topic(image)
    partition(image, replicas=(1, 2), version=1, Directories=[DIR_A, DIR_B])
    ok(image, change(Replicas=[2, 3]))  # 2 keeps its directory, 3 is not placed yet
    assert image.partition(T1, 0).directories == (DIR_B, DIR_UNASSIGNED)
    ok(image, change(version=1, Directories=[DIR_A, DIR_A]))
    assert image.partition(T1, 0).directories == (DIR_A, DIR_A)
    ok(image, change(Isr=[2]))
    assert image.partition(T1, 0).directories == (DIR_A, DIR_A)
    assert "directories" in rejected(image, change(version=1, Replicas=[1, 2, 3], Directories=[DIR_A]))
    rejected(image, change(version=1, Directories=[DIR_A]))


def test_partition_change_of_an_unknown_partition_or_topic_is_rejected(cluster):
    assert "no partition" in rejected(cluster, change(partition_id=5, Leader=2))
    rejected(cluster, change(topic_id=T2, Leader=2))


def test_remove_topic_drops_partitions_name_and_topic_configs(cluster):
    partition(cluster, 1)
    ok(cluster, ev("ConfigRecord", ResourceType=2, ResourceName="t", Name="retention.ms", Value="1"))
    ok(cluster, ev("ConfigRecord", ResourceType=4, ResourceName="", Name="x", Value="y"))
    parts = [cluster.partition(T1, 0), cluster.partition(T1, 1)]
    result = ok(cluster, ev("RemoveTopicRecord", TopicId=T1))
    assert result.partition_changes == [(p, None) for p in parts]
    assert cluster.topics == {} and cluster.topic_ids == {}
    assert cluster.configs == {(4, ""): {"x": "y"}}
    assert "no topic" in rejected(cluster, ev("RemoveTopicRecord", TopicId=T1))
    topic(cluster, "t", T2)  # the name is free again


# --- configs, quotas, features, producer ids, security -----------------------------------------

def test_config_set_and_delete(image):
    ok(image, ev("ConfigRecord", ResourceType=4, ResourceName="1", Name="a", Value="1"))
    ok(image, ev("ConfigRecord", ResourceType=4, ResourceName="1", Name="b", Value="2"))
    ok(image, ev("ConfigRecord", ResourceType=4, ResourceName="1", Name="a", Value=None))
    assert image.configs == {(4, "1"): {"b": "2"}}
    ok(image, ev("ConfigRecord", ResourceType=4, ResourceName="1", Name="b", Value=None))
    ok(image, ev("ConfigRecord", ResourceType=4, ResourceName="1", Name="never-set", Value=None))
    assert image.configs == {}


def test_client_quotas(image):
    entity = [{"EntityType": "user", "EntityName": None}, {"EntityType": "client-id", "EntityName": "app"}]
    ok(image, ev("ClientQuotaRecord", Entity=entity, Key="producer_byte_rate", Value=1024.0))
    ok(image, ev("ClientQuotaRecord", Entity=entity[::-1], Key="consumer_byte_rate", Value=2048.5))
    key = (("client-id", "app"), ("user", None))
    assert image.client_quotas == {key: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.5}}
    ok(image, ev("ClientQuotaRecord", Entity=entity, Key="producer_byte_rate", Remove=True))
    ok(image, ev("ClientQuotaRecord", Entity=entity, Key="consumer_byte_rate", Remove=True))
    assert image.client_quotas == {}


def test_feature_levels_and_zk_migration_state(image):
    ok(image, ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=27))
    ok(image, ev("FeatureLevelRecord", Name="group.version", FeatureLevel=1))
    ok(image, ev("FeatureLevelRecord", Name="group.version", FeatureLevel=0))
    assert image.features == {"metadata.version": 27}
    ok(image, ev("ZkMigrationStateRecord", ZkMigrationState=3))
    assert image.zk_migration_state == 3
    rejected(image, ev("ZkMigrationStateRecord", ZkMigrationState=9))


def test_producer_ids_only_move_forward(image):
    ok(image, ev("ProducerIdsRecord", BrokerId=1, BrokerEpoch=5, NextProducerId=1000))
    assert image.next_producer_id == 1000
    rejected(image, ev("ProducerIdsRecord", BrokerId=1, BrokerEpoch=5, NextProducerId=1000))
    ok(image, ev("ProducerIdsRecord", BrokerId=2, BrokerEpoch=6, NextProducerId=2000))
    assert image.next_producer_id == 2000


def test_acls(image):
    acl_id = uuids.from_bytes(bytes([9] * 16))
    ok(image, ev("AccessControlEntryRecord", Id=acl_id, ResourceType=2, ResourceName="t", PatternType=3,
                 Principal="User:alice", Host="*", Operation=3, PermissionType=3))
    assert image.acls == {acl_id: Acl(2, "t", 3, "User:alice", "*", 3, 3)}
    ok(image, ev("RemoveAccessControlEntryRecord", Id=uuids.to_hex(acl_id)))
    assert image.acls == {}
    assert "no ACL" in rejected(image, ev("RemoveAccessControlEntryRecord", Id=acl_id))


def test_scram_credentials(image):
    ok(image, ev("UserScramCredentialRecord", Name="alice", Mechanism=1, Salt=b"s", StoredKey=b"k",
                 ServerKey=b"v", Iterations=4096))
    assert image.scram_credentials == {("alice", 1): ScramCredential(b"s", b"k", b"v", 4096)}
    rejected(image, ev("RemoveUserScramCredentialRecord", Name="alice", Mechanism=2))
    ok(image, ev("RemoveUserScramCredentialRecord", Name="alice", Mechanism=1))
    assert image.scram_credentials == {}


def test_delegation_tokens(image):
    ok(image, ev("DelegationTokenRecord", Owner="User:a", Requester="User:b", Renewers=["User:c"],
                 IssueTimestamp=1, MaxTimestamp=3, ExpirationTimestamp=2, TokenId="tok"))
    assert image.delegation_tokens == {"tok": DelegationToken("User:a", "User:b", ("User:c",), 1, 3, 2)}
    ok(image, ev("RemoveDelegationTokenRecord", TokenId="tok"))
    ok(image, ev("RemoveDelegationTokenRecord", TokenId="tok"))  # Kafka does not mind
    assert image.delegation_tokens == {}


# --- control records, dispatch, malformed input ------------------------------------------------

def test_leader_change_message_sets_leader_and_epoch_from_the_event(image):
    ok(image, ev("LeaderChangeMessage", 0, leader_epoch=6, LeaderId=2,
                 Voters=[{"VoterId": 1}, {"VoterId": 2}], GrantingVoters=[{"VoterId": 2}]))
    q = image.quorum
    assert (q.leader_id, q.leader_epoch) == (2, 6)
    assert q.voters == (Voter(1, uuids.ZERO_UUID), Voter(2, uuids.ZERO_UUID))
    assert q.granting_voters == (Voter(2, uuids.ZERO_UUID),)
    ok(image, ev("LeaderChangeMessage", 1, leader_epoch=7, LeaderId=1,
                 Voters=[{"VoterId": 1, "VoterDirectoryId": DIR_A}], GrantingVoters=[]))
    assert image.quorum.voters == (Voter(1, DIR_A),) and image.quorum.leader_epoch == 7


def test_voters_and_kraft_version_records(image):
    ok(image, ev("KRaftVersionRecord", KRaftVersion=1))
    ok(image, ev("VotersRecord", Voters=[{
        "VoterId": 1, "VoterDirectoryId": DIR_A, "Endpoints": [{"Name": "CONTROLLER", "Host": "c1", "Port": 9093}],
        "KRaftVersionFeature": {"MinSupportedVersion": 0, "MaxSupportedVersion": 1}}]))
    assert image.quorum.kraft_version == 1
    assert image.quorum.voter_set == (VoterRegistration(1, DIR_A, (Endpoint("CONTROLLER", "c1", 9093, -1),), 0, 1),)


def test_noop_record_is_accepted_and_changes_nothing(image):
    assert replay(image, ev("NoOpRecord")).rejected is None
    assert image == ClusterImage()


def test_unknown_types_requests_and_malformed_events_are_rejected(cluster):
    assert "unknown record type" in rejected(cluster, {"type": "FooRecord", "data": {}})
    rejected(cluster, {"type": "BrokerHeartbeatRequest", "version": 1, "data": {"BrokerId": 1}})
    rejected(cluster, {"offset": 1})
    assert "malformed" in rejected(cluster, {"type": "PartitionChangeRecord", "offset": 1, "data": {"TopicId": T1}})
    # malformed as only a bypassed validation could make them: build valid, then break the Uuid
    bad_change = change(Leader=2)
    bad_change["data"]["TopicId"] = "not-a-uuid"
    rejected(cluster, bad_change)
    bad_topic = ev("TopicRecord", Name="x", TopicId=T2)
    bad_topic["data"]["TopicId"] = "zz"
    rejected(cluster, bad_topic)


# --- transactions ------------------------------------------------------------------------------

def test_transaction_takes_effect_at_its_end(image):
    ok(image, ev("BeginTransactionRecord", Name="create t"))
    deferred = [replay(image, e) for e in (
        ev("TopicRecord", offset=2, Name="t", TopicId=T1),
        ev("PartitionRecord", offset=3, PartitionId=0, TopicId=T1, Replicas=[1], Isr=[1], Leader=1,
           LeaderEpoch=0, PartitionEpoch=0),
        change(offset=4, Leader=1),
        ev("RegisterBrokerRecord", offset=5, BrokerId=1, BrokerEpoch=5, IncarnationId=INC1),
    )]
    assert all(r.deferred and r.rejected is None and not r.partition_changes for r in deferred)
    assert image.topics == {} and image.brokers == {}
    result = ok(image, ev("EndTransactionRecord", offset=6))
    p = image.partition(T1, 0)
    assert (p.leader_epoch, p.partition_epoch, p.last_offset) == (1, 1, 4)
    assert result.partition_changes == [(None, p)]  # one change per partition, as one delta
    assert result.broker_changes == [(None, image.brokers[1])]
    assert image.pending_kind is None and image.pending_events == []


def test_abort_drops_the_transaction(cluster):
    before = cluster.copy()
    ok(cluster, ev("BeginTransactionRecord"))
    replay(cluster, change(Leader=2))
    replay(cluster, ev("RemoveTopicRecord", TopicId=T1))
    ok(cluster, ev("AbortTransactionRecord", Reason="controller failover"))
    assert cluster == before


def test_transaction_markers_out_of_place_are_rejected(image):
    rejected(image, ev("EndTransactionRecord"))
    rejected(image, ev("AbortTransactionRecord"))
    ok(image, ev("BeginTransactionRecord"))
    rejected(image, ev("BeginTransactionRecord"))
    assert "unknown record type" in rejected(image, {"type": "FooRecord", "data": {}})


def test_a_record_that_fails_inside_a_transaction_is_reported_at_its_end(cluster):
    ok(cluster, ev("BeginTransactionRecord"))
    replay(cluster, change(offset=31, partition_id=9, Leader=2))
    replay(cluster, change(offset=32, Leader=2))
    result = ok(cluster, ev("EndTransactionRecord", offset=33))
    assert [(o, t) for o, t, _ in result.deferred_rejections] == [(31, "PartitionChangeRecord")]
    assert cluster.partition(T1, 0).leader == 2


def test_a_topic_created_and_removed_in_one_transaction_leaves_no_change(image):
    ok(image, ev("BeginTransactionRecord"))
    replay(image, ev("TopicRecord", Name="t", TopicId=T1))
    replay(image, ev("PartitionRecord", PartitionId=0, TopicId=T1, Replicas=[1], Isr=[1]))
    replay(image, ev("RemoveTopicRecord", TopicId=T1))
    result = ok(image, ev("EndTransactionRecord"))
    assert result.partition_changes == [] and image.topics == {}


def test_control_records_apply_inside_a_transaction(image):
    ok(image, ev("BeginTransactionRecord"))
    ok(image, ev("LeaderChangeMessage", leader_epoch=3, LeaderId=1))
    assert image.quorum.leader_epoch == 3 and image.pending_events == []


def test_an_open_transaction_survives_serialisation(cluster):
    ok(cluster, ev("BeginTransactionRecord"))
    replay(cluster, ev("UserScramCredentialRecord", Name="a", Mechanism=1, Salt=b"\x00\xff", Iterations=1))
    replay(cluster, change(Leader=3))
    restored = ClusterImage.from_bytes(cluster.to_bytes())
    assert restored == cluster
    ok(restored, ev("EndTransactionRecord"))
    assert restored.partition(T1, 0).leader == 3
    assert restored.scram_credentials[("a", 1)].salt == b"\x00\xff"


# --- snapshots ---------------------------------------------------------------------------------

def test_a_snapshot_replaces_the_metadata_but_not_the_quorum(cluster):
    ok(cluster, ev("LeaderChangeMessage", leader_epoch=4, LeaderId=1))
    old_brokers, old_partition = [cluster.brokers[2], cluster.brokers[3]], cluster.partition(T1, 0)
    ok(cluster, ev("SnapshotHeaderRecord", LastContainedLogTimestamp=TS))
    for e in (ev("RegisterBrokerRecord", 3, BrokerId=1, BrokerEpoch=11, IncarnationId=INC1, EndPoints=[endpoint()],
                 Rack=None, Fenced=False),
              ev("TopicRecord", Name="u", TopicId=T2),
              ev("PartitionRecord", offset=50, PartitionId=0, TopicId=T2, Replicas=[1], Isr=[1], Leader=1)):
        assert replay(cluster, e).deferred
    assert cluster.topic_ids == {"t": T1}  # nothing changes before the footer
    result = ok(cluster, ev("SnapshotFooterRecord"))
    assert set(cluster.brokers) == {1} and cluster.topic_ids == {"u": T2}
    assert cluster.quorum.leader_epoch == 4
    # Broker 1 is registered exactly as before, so only the brokers the snapshot lacks change.
    assert result.broker_changes == [(b, None) for b in old_brokers]
    assert result.partition_changes == [(old_partition, None), (None, cluster.partition(T2, 0))]


def test_snapshot_markers_out_of_place(image):
    rejected(image, ev("SnapshotFooterRecord"))
    ok(image, ev("BeginTransactionRecord"))
    replay(image, ev("TopicRecord", Name="t", TopicId=T1))
    ok(image, ev("SnapshotHeaderRecord"))  # like Kafka's loader, a snapshot discards an open transaction
    rejected(image, ev("SnapshotHeaderRecord"))
    rejected(image, ev("BeginTransactionRecord"))
    ok(image, ev("SnapshotFooterRecord"))
    assert image == ClusterImage()


# --- the image: copy and serialisation ---------------------------------------------------------

def _rich_image() -> ClusterImage:
    image = ClusterImage()
    for b in (1, 2, 3):
        register(image, b, epoch=b, LogDirs=[DIR_A], rack=None if b == 1 else f"r{b}")
    ok(image, ev("RegisterControllerRecord", ControllerId=9, IncarnationId=INC2, EndPoints=[endpoint("C")]))
    topic(image)
    partition(image, 0, version=2, EligibleLeaderReplicas=[3])
    partition(image, 1, replicas=(2, 3), leader=2)
    ok(image, change(1, Replicas=[3, 2, 1], AddingReplicas=[1], LeaderRecoveryState=1))
    ok(image, ev("ConfigRecord", ResourceType=2, ResourceName="t", Name="cleanup.policy", Value="compact"))
    ok(image, ev("ClientQuotaRecord", Entity=[{"EntityType": "user", "EntityName": None}], Key="k", Value=0.1))
    ok(image, ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=27))
    ok(image, ev("ProducerIdsRecord", NextProducerId=1000))
    ok(image, ev("AccessControlEntryRecord", Id=INC1, ResourceType=2, ResourceName="t", Principal="User:x"))
    ok(image, ev("UserScramCredentialRecord", Name="u", Mechanism=2, Salt=b"\x01\x02", StoredKey=b"", Iterations=8))
    ok(image, ev("DelegationTokenRecord", TokenId="tok", Renewers=["a", "b"]))
    ok(image, ev("ZkMigrationStateRecord", ZkMigrationState=1))
    ok(image, ev("LeaderChangeMessage", 1, leader_epoch=2, LeaderId=1,
                 Voters=[{"VoterId": 1, "VoterDirectoryId": DIR_B}]))
    ok(image, ev("BeginTransactionRecord"))
    replay(image, change(0, Leader=2))
    return image


def test_serialisation_round_trips_everything():
    image = _rich_image()
    raw = image.to_bytes()
    restored = ClusterImage.from_bytes(raw)
    assert restored == image
    assert restored.to_bytes() == raw


def test_serialisation_does_not_depend_on_history_order():
    a, b = ClusterImage(), ClusterImage()
    for broker_id in (1, 2):
        register(a, broker_id)
    for broker_id in (2, 1):
        register(b, broker_id)
    for name, tid in (("t", T1), ("u", T2)):
        topic(a, name, tid)
    for name, tid in (("u", T2), ("t", T1)):
        topic(b, name, tid)
    assert a == b and a.to_bytes() == b.to_bytes()


def test_unknown_serialisation_format_is_refused():
    with pytest.raises(ValueError, match="format"):
        ClusterImage.from_bytes(zlib.compress(b"[99]"))


def test_copy_is_independent():
    image = _rich_image()
    copy = image.copy()
    assert copy == image
    ok(copy, ev("EndTransactionRecord"))
    ok(copy, ev("ConfigRecord", ResourceType=2, ResourceName="t", Name="cleanup.policy", Value="delete"))
    ok(copy, ev("ClientQuotaRecord", Entity=[{"EntityType": "user", "EntityName": None}], Key="k", Value=0.2))
    ok(copy, ev("RemoveTopicRecord", TopicId=T1))
    ok(copy, ev("FenceBrokerRecord", Id=1, Epoch=1))
    assert image == _rich_image()


def test_a_10k_partition_image_serialises_to_under_200_kb_and_back_unchanged(cluster):
    for p in range(1, 10_000):
        partition(cluster, p, replicas=(p % 3 + 1, (p + 1) % 3 + 1), leader=p % 3 + 1, version=1,
                  Directories=[DIR_A, DIR_B], offset=p)
    raw = cluster.to_bytes()
    assert ClusterImage.from_bytes(raw) == cluster
    assert len(raw) < 200_000, len(raw)


# --- the real logs -----------------------------------------------------------------------------

FIXTURE_NAMES = ["single-broker-shutdown", "single-broker-snapshot", "single-broker-restarts", "three-brokers-restarts"]


def _replay_all(events, results: list | None = None) -> ClusterImage:
    image = ClusterImage()
    for event in events:
        assert isinstance(event, dict), f"the codec rejected part of a real log: {event}"
        result = replay(image, event)
        assert result.rejected is None and not result.deferred_rejections, (event, result)
        if results is not None:
            results.append(result)
    assert image.pending_kind is None
    return image


def _as_oracle(image: ClusterImage) -> dict:
    """The image in expected-image.json's terms (topic ids and incarnations in dashed hex)."""
    return {
        "brokers": {str(b.id): {"epoch": b.epoch, "incarnation": uuids.to_hex(b.incarnation_id), "fenced": b.fenced,
                                "in_controlled_shutdown": b.in_controlled_shutdown, "rack": b.rack}
                    for b in image.brokers.values()},
        "topics": {uuids.to_hex(t.id): t.name for t in image.topics.values()},
        "partitions": sorted(
            ({"topic": image.topics[p.topic_id].name, "topic_id": uuids.to_hex(p.topic_id),
              "partition": p.partition_id, "replicas": list(p.replicas), "isr": list(p.isr),
              "removing": list(p.removing_replicas), "adding": list(p.adding_replicas), "leader": p.leader,
              "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
              "leader_recovery_state": p.leader_recovery_state} for p in image.iter_partitions()),
            key=lambda row: (row["topic"], row["partition"])),
    }


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_real_log_replays_to_the_independent_image(name):
    expected = json.loads((FIXTURES / name / "expected-image.json").read_text())
    results = []
    image = _replay_all(codec.read_partition_dir(FIXTURES / name / "__cluster_metadata-0"), results)
    got = _as_oracle(image)
    assert got["brokers"] == expected["brokers"]
    assert got["topics"] == expected["topics"]
    assert got["partitions"] == sorted(expected["partitions"], key=lambda row: (row["topic"], row["partition"]))
    elections = [after for r in results for before, after in r.partition_changes
                 if before and after and after.leader_epoch != before.leader_epoch]
    assert len(elections) == expected["leader_changes"]
    # the oracle counts the config entries the log leaves (ConfigRecords net of deletions)
    assert sum(len(entries) for entries in image.configs.values()) == expected["configs"]
    assert ClusterImage.from_bytes(image.to_bytes()) == image


def test_snapshot_fixture_isr_is_empty_because_elr_took_the_last_replica():
    """Kafka 4 with eligible.leader.replicas.version=1 (KIP-966): when broker 1, the only replica,
    went into controlled shutdown, the controller wrote PartitionChangeRecord v2 with Isr [],
    Leader -1 and EligibleLeaderReplicas [1]: the replica left the ISR for the ELR instead of
    staying as the last ISR member (as it does in single-broker-shutdown, which predates ELR)."""
    image = _replay_all(codec.read_partition_dir(FIXTURES / "single-broker-snapshot" / "__cluster_metadata-0"))
    assert image.features["eligible.leader.replicas.version"] == 1
    assert {(p.isr, p.elr, p.leader) for p in image.iter_partitions()} == {((), (1,), -1)}
    shutdown = _replay_all(codec.read_partition_dir(FIXTURES / "single-broker-shutdown" / "__cluster_metadata-0"))
    assert "eligible.leader.replicas.version" not in shutdown.features
    assert {(p.isr, p.elr, p.leader) for p in shutdown.iter_partitions()} == {((1,), (), -1)}


def test_snapshot_then_tail_equals_the_whole_segment():
    directory = FIXTURES / "single-broker-snapshot" / "__cluster_metadata-0"
    from_snapshot = _replay_all(codec.read_partition_dir(directory))
    from_segment = _replay_all(codec.decode_file(directory / "00000000000000000000.log"))
    assert _as_oracle(from_snapshot) == _as_oracle(from_segment)
    assert from_snapshot.features == from_segment.features and from_snapshot.configs == from_segment.configs


def test_restarts_fixture_quorum_state():
    image = _replay_all(codec.read_partition_dir(FIXTURES / "single-broker-restarts" / "__cluster_metadata-0"))
    assert (image.quorum.leader_id, image.quorum.leader_epoch) == (1, 6)
    assert image.quorum.voters == (Voter(1, uuids.ZERO_UUID),)
