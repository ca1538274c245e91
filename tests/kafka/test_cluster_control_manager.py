"""Kafka's ``ClusterControlManagerTest`` (metadata module, Kafka 4.x) translated to
``kraftlake.controller.cluster_control`` and the image's replay.

Kafka's test drives a ``ClusterControlManager`` directly (``replay``, ``registerBroker``,
``checkBrokerEpoch``); here the same steps are records replayed into a ``ClusterImage`` and requests
decided by the controller in miniature of ``tests/controller_harness.py`` (whose records are replayed
too). What Kafka checks with exceptions is checked with the response's error code: a
BrokerRegistrationResponse has no message field, so Kafka's exception texts are asserted where the
project keeps them (``_invalid_log_dirs``)."""

from __future__ import annotations

import random

import pytest

from controller_harness import CLUSTER, Controller, change, ev, incarnation, log_dir, types
from kraftlake.controller.cluster_control import _invalid_log_dirs, take_over
from kraftlake.controller.decisions import error_code
from kraftlake.controller.elections import default_dir
from kraftlake.controller.topics import StripedPlacer
from kraftlake.image.cluster_image import DIR_MIGRATING, DIR_UNASSIGNED, ClusterImage
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids

ENDPOINT = {"Name": "PLAINTEXT", "Host": "example.com", "Port": 9092, "SecurityProtocol": 0}


def apply(image: ClusterImage, *records: dict) -> None:
    for n, rec in enumerate(records):
        result = replay(image, {**rec, "offset": 100 + n, "leader_epoch": 1, "timestamp": 0})
        assert result.rejected is None, result.rejected


def unfenced(image: ClusterImage, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced


def register_record(broker_id: int, epoch: int = 100, version: int = 3, **fields) -> dict:
    return ev("RegisterBrokerRecord", version, BrokerId=broker_id, BrokerEpoch=epoch, EndPoints=[ENDPOINT], **fields)


@pytest.mark.parametrize("mv", [1, 6])  # 3.0-IV1, 3.3-IV2
def test_replay(mv):
    """ClusterControlManagerTest.testReplay: a broker epoch is checked (100 accepted, 101 and another
    broker's refused), and fencing is replayed from
    Fence/UnfenceBrokerRecord before 3.3-IV2 and from BrokerRegistrationChangeRecord after."""
    c = Controller(metadata_version=mv)
    c.log(register_record(1, version=0))
    assert not unfenced(c.image, 0) and not unfenced(c.image, 1)
    # checkBrokerEpoch(1, 100) passes; (1, 101) and (2, 100) are stale. The heartbeat is the request that
    # checks it; WantFence keeps the broker fenced, as a check alone would.
    resp = c.request("BrokerHeartbeatRequest", BrokerId=1, BrokerEpoch=100, CurrentMetadataOffset=0, WantFence=True)
    assert (resp["ErrorCode"], resp["IsFenced"]) == (0, True)
    for broker_id, epoch in ((1, 101), (2, 100)):
        resp = c.request("BrokerHeartbeatRequest", BrokerId=broker_id, BrokerEpoch=epoch, CurrentMetadataOffset=0)
        assert resp["ErrorCode"] == error_code("STALE_BROKER_EPOCH")
    if mv < 6:
        c.log(ev("UnfenceBrokerRecord", Id=1, Epoch=100))
    else:
        c.log(change(1, 100, 0, fenced=-1))
    assert unfenced(c.image, 1) and not unfenced(c.image, 0)
    if mv < 6:
        c.log(ev("FenceBrokerRecord", Id=1, Epoch=100))
    else:
        c.log(change(1, 100, 0, fenced=1))
    assert not unfenced(c.image, 1)


@pytest.mark.parametrize("mv, fence, unfence", [(5, "FenceBrokerRecord", "UnfenceBrokerRecord"),
                                                 (6, "BrokerRegistrationChangeRecord", "BrokerRegistrationChangeRecord")])
def test_the_controller_writes_the_fencing_records_of_its_metadata_version(mv, fence, unfence):
    """ReplicationControlManager.handleBrokerFenced / handleBrokerUnfenced (the other half of
    testReplay): below 3.3-IV2 the controller writes Fence/UnfenceBrokerRecord."""
    c = Controller(metadata_version=mv)
    assert c.register(1, features=[("metadata.version", 1, 19)])["ErrorCode"] == 0
    assert c.heartbeat(1)["IsFenced"] is False
    assert types(c.records) == [unfence]
    epoch = c.broker(1).epoch
    if mv < 6:
        assert c.records[0]["data"] == {"Id": 1, "Epoch": epoch}
    assert c.heartbeat(1, fence=True)["IsFenced"] is True
    assert types(c.records) == [fence] and c.broker(1).fenced


def test_replay_register_broker_record():
    """ClusterControlManagerTest.testReplayRegisterBrokerRecord"""
    image = ClusterImage()
    apply(image, register_record(0, Fenced=True, InControlledShutdown=True))
    assert not unfenced(image, 0) and image.brokers[0].in_controlled_shutdown
    apply(image, register_record(0, Fenced=True, InControlledShutdown=False))
    assert not unfenced(image, 0) and not image.brokers[0].in_controlled_shutdown
    apply(image, register_record(0, Fenced=False, InControlledShutdown=False))
    assert unfenced(image, 0) and not image.brokers[0].in_controlled_shutdown


def test_replay_broker_registration_change_record():
    """ClusterControlManagerTest.testReplayBrokerRegistrationChangeRecord"""
    image = ClusterImage()
    apply(image, register_record(0, Fenced=False))
    assert unfenced(image, 0) and not image.brokers[0].in_controlled_shutdown
    apply(image, change(0, 100, 1, shutdown=1))
    assert unfenced(image, 0) and image.brokers[0].in_controlled_shutdown
    apply(image, change(0, 100, 1, fenced=-1))
    assert unfenced(image, 0) and image.brokers[0].in_controlled_shutdown


def test_registration_with_incorrect_cluster_id():
    """ClusterControlManagerTest.testRegistrationWithIncorrectClusterId"""
    c = Controller(cluster_id=CLUSTER)
    assert c.register(0, cluster="WIjw3grwRZmR2uOpdpVXbg")["ErrorCode"] == error_code("INCONSISTENT_CLUSTER_ID")
    assert c.records == [] and 0 not in c.image.brokers


@pytest.mark.parametrize("mv, version", [(6, 0), (7, 1), (17, 3), (None, 3)])  # 3.3-IV2, 3.3-IV3, 3.7-IV2, latest
def test_register_broker_record_version(mv, version):
    """ClusterControlManagerTest.testRegisterBrokerRecordVersion: the record's version follows the
    metadata.version, and the new broker is fenced and not shutting down."""
    c = Controller(metadata_version=mv)
    dirs = ["63k9SN1nQOS0dFHSCIMA0A", "Vm1MjsOCR1OjDDydOsDbzg"] if version >= 3 else []
    assert c.register(0, features=[("metadata.version", 1, 30)], log_dirs=dirs)["ErrorCode"] == 0
    [rec] = c.records
    assert rec["type"] == "RegisterBrokerRecord" and rec["version"] == version
    assert (rec["data"]["Fenced"], rec["data"]["InControlledShutdown"]) == (True, False)
    assert rec["data"]["LogDirs"] == (dirs if version >= 3 else [])


def test_unregister():
    """ClusterControlManagerTest.testUnregister"""
    image = ClusterImage()
    apply(image, register_record(1, IncarnationId="fPZv1VBsRFmnlRvmGcOW9w", Rack="arack"))
    broker = image.brokers[1]
    assert (broker.epoch, broker.rack, broker.fenced, broker.in_controlled_shutdown) == (100, "arack", True, False)
    apply(image, ev("UnregisterBrokerRecord", BrokerId=1, BrokerEpoch=100))
    assert 1 not in image.brokers


@pytest.mark.parametrize("usable", [3, 10])
def test_place_replicas(usable):
    """ClusterControlManagerTest.testPlaceReplicas: a hundred placements of 3 replicas over the
    unfenced brokers, each on distinct registered brokers."""
    image = ClusterImage()
    for broker_id in range(usable):
        apply(image, register_record(broker_id), ev("UnfenceBrokerRecord", Id=broker_id, Epoch=100))
    placer = StripedPlacer(image, random.Random(7))
    for _ in range(100):
        replicas = placer.place(3)
        assert len(set(replicas)) == 3 and all(0 <= r < usable for r in replicas)


@pytest.mark.parametrize("features, error", [
    ([("metadata.version", 2, 15)], "UNSUPPORTED_VERSION"),  # 3.1-IV0..3.7-IV0 but not test.feature 1
    ([("metadata.version", 2, 15), ("test.feature.version", 0, 1)], "NONE"),
])
def test_registration_with_unsupported_feature(features, error):
    """ClusterControlManagerTest.testRegistrationWithUnsupportedFeature: a finalized feature the broker
    cannot run (test.feature.version at level 1, the broker wanting 0..0) is refused."""
    c = Controller(metadata_version=15)
    c.log(ev("FeatureLevelRecord", Name="test.feature.version", FeatureLevel=1))
    assert c.register(0, features=features)["ErrorCode"] == error_code(error)


def test_registration_with_unsupported_kraft_version():
    """ClusterControlManagerTest.testRegistrationWithUnsupportedKraftVersion: kraft.version 1 needs a
    broker that supports it; one listing none, or 0..0, is refused."""
    c = Controller(metadata_version=21)  # 3.9-IV0
    c.log(ev("KRaftVersionRecord", Version=0, KRaftVersion=1))
    assert c.register(0, features=[("metadata.version", 21, 21)])["ErrorCode"] == error_code("UNSUPPORTED_VERSION")
    assert c.register(0, features=[("metadata.version", 21, 21), ("kraft.version", 0, 0)])["ErrorCode"] == \
        error_code("UNSUPPORTED_VERSION")
    assert c.register(0, features=[("metadata.version", 21, 21), ("kraft.version", 1, 1)])["ErrorCode"] == 0


def test_registration_with_unsupported_metadata_version():
    """ClusterControlManagerTest.testRegistrationWithUnsupportedMetadataVersion: at 3.3-IV0 (level 4)
    a broker listing no range (so 1..1) or 7..7 is refused."""
    c = Controller(metadata_version=4)
    assert c.register(0, features=[])["ErrorCode"] == error_code("UNSUPPORTED_VERSION")
    assert c.register(0, features=[("metadata.version", 7, 7)])["ErrorCode"] == error_code("UNSUPPORTED_VERSION")
    assert c.records == []


def test_register_with_duplicate_directory_id():
    """ClusterControlManagerTest.testRegisterWithDuplicateDirectoryId: INVALID_REGISTRATION for no
    directories, a reserved one, a duplicate, or one another broker has; the same broker may register
    again with its own."""
    c = Controller()
    mine = [uuids.normalize("yJGxmjfbQZSVFAlNM3uXZg"), uuids.normalize("Mj3CW3OSRi29cFeNJlXuAQ")]
    c.log(register_record(0, LogDirs=mine))
    take_over(c.image, c.state, c.now)
    assert c.register(0, inc=9, log_dirs=mine)["ErrorCode"] == 0  # the fenced broker 0 has no session
    invalid = error_code("INVALID_REGISTRATION")
    other = uuids.normalize("TyNK6XSSQJaJc2q9uflNHg")
    dup = uuids.normalize("aR6lssMrSeyXRf65hiUovQ")
    cases = [([], "No directories specified in request"),
             ([other, mine[1]], f"Broker 0 is already registered with directory {mine[1]}"),
             ([other, DIR_UNASSIGNED], "Reserved directory ID in request"),
             ([dup, dup], "Duplicate directory ID in request")]
    for dirs, message in cases:
        assert c.register(1, log_dirs=dirs)["ErrorCode"] == invalid
        assert _invalid_log_dirs(c.image, 1, dirs) == message
    assert 1 not in c.image.brokers


def test_default_dir():
    """ClusterControlManagerTest.testDefaultDir"""
    image = ClusterImage()
    apply(image, register_record(1, LogDirs=[]),
          register_record(2, LogDirs=[uuids.normalize("singleOnlineDirectoryA")]),
          register_record(3, LogDirs=[uuids.normalize("s4fRmyNFSH6J0vI8AVA5ew"),
                                      uuids.normalize("UbtxBcqYSnKUEMcnTyZFWw")]))
    assert default_dir(image, 1) == DIR_MIGRATING
    assert default_dir(image, 2) == uuids.normalize("singleOnlineDirectoryA")
    assert default_dir(image, 3) == DIR_UNASSIGNED
    assert default_dir(image, 4) == DIR_UNASSIGNED


@pytest.mark.parametrize("new_incarnation", [False, True])
def test_re_registration_and_broker_epoch(new_incarnation):
    """ClusterControlManagerTest.testReRegistrationAndBrokerEpoch: a broker that registered but never
    heartbeated has no session, so a new incarnation registers at once with a new epoch; the same
    incarnation keeps its epoch."""
    c = Controller()
    assert c.register(1, inc=1)["ErrorCode"] == 0
    first = c.broker(1).epoch
    resp = c.register(1, inc=2 if new_incarnation else 1)
    assert resp["ErrorCode"] == 0
    broker = c.broker(1)
    if new_incarnation:
        assert (broker.incarnation_id, broker.epoch) == (incarnation(2), c.offset)
    else:
        assert (broker.incarnation_id, broker.epoch) == (incarnation(1), first)


def test_broker_contact_times_are_updated_on_cluster_control_activation():
    """ClusterControlManagerTest.testBrokerContactTimesAreUpdatedOnClusterControlActivation, as Kafka 4.1
    has it after KAFKA-19130: on activation every registered unfenced broker gets a contact time (so it
    is not fenced at once), and a fenced one none (so a restarted incarnation may register)."""
    c = Controller()
    c.log(register_record(0, Fenced=False, LogDirs=[log_dir(0)]),
          register_record(1, epoch=123, Fenced=True, LogDirs=[log_dir(1)]))
    take_over(c.image, c.state, c.now)
    assert c.state.sessions[0].contact_ms == c.now and 1 not in c.state.sessions
