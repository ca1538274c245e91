"""``kraftlake.controller.dispatch.cluster_control``: the broker lifecycle decided request by request, the records replayed
into the image exactly like a log's, both KIP-841 invariants checked after every step, and a controlled
shutdown compared with what a real Kafka controller wrote."""

from __future__ import annotations

import json

import pytest

from kraftlake.metadata import uuids
from kraftlake.controller.cluster_control import (ControllerState, decide_broker_heartbeat, decide_broker_registration,
    decide_unregister_broker, expire_sessions, take_over)
from kraftlake.codec import read_partition_dir
from kraftlake.controller.decisions import Context, error_code
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.replay import replay

from controller_harness import CLUSTER, FIXTURES, MV, T1, TIMEOUT, Controller, change, ev, incarnation, types


# --- BrokerRegistrationRequest --------------------------------------------------------------------------

def test_a_new_incarnation_gets_the_record_offset_as_epoch_and_starts_fenced():
    c = Controller()
    resp = c.register(1)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": 0, "BrokerEpoch": c.offset}
    [rec] = c.records
    assert rec["type"] == "RegisterBrokerRecord" and rec["version"] == 3
    assert rec["data"] == {
        "BrokerId": 1, "IsMigratingZkBroker": False, "IncarnationId": incarnation(1), "BrokerEpoch": c.offset,
        "EndPoints": [{"Name": "PLAINTEXT", "Host": "b1", "Port": 9092, "SecurityProtocol": 0}],
        "Features": [{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": MV}],
        "Rack": None, "Fenced": True, "InControlledShutdown": False,
        "LogDirs": [uuids.from_bytes(bytes([0x71] * 16))]}
    broker = c.broker(1)
    assert (broker.epoch, broker.fenced, broker.in_controlled_shutdown) == (c.offset, True, False)


@pytest.mark.parametrize("mv, version", [(7, 1), (8, 2), (16, 2), (17, 3), (None, 3)])
def test_the_registration_record_version_follows_the_metadata_version(mv, version):
    c = Controller(metadata_version=mv)
    assert c.register(1, features=[("metadata.version", 1, 30)])["ErrorCode"] == 0
    [rec] = c.records
    assert rec["version"] == version
    assert rec["data"]["LogDirs"] == ([] if version < 3 else [uuids.from_bytes(bytes([0x71] * 16))])


def test_a_broker_that_lists_no_metadata_version_is_registered_with_the_first_one():
    c = Controller(metadata_version=1)
    assert c.register(1, features=[])["ErrorCode"] == 0
    assert c.records[0]["data"]["Features"] == [
        {"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": 1}]


def test_the_same_incarnation_registering_again_keeps_its_epoch_and_state():
    c = Controller()
    c.start(1)
    epoch = c.broker(1).epoch
    resp = c.register(1, port=9093)  # e.g. a retry after a lost response, or new listeners
    assert resp["BrokerEpoch"] == epoch and resp["ErrorCode"] == 0
    broker = c.broker(1)
    assert (broker.epoch, broker.fenced, broker.listeners[0].port) == (epoch, False, 9093)
    image = c.image.to_bytes()
    c.register(1, port=9093)  # and once more: nothing changes
    latest = c.offset
    assert c.image.to_bytes() == image
    # To be unfenced again, the broker must have seen its latest registration record.
    c.heartbeat(1, fence=True)
    assert c.heartbeat(1, offset=latest - 1)["IsFenced"] is True
    assert c.heartbeat(1, offset=latest)["IsFenced"] is False


def test_another_incarnation_is_refused_while_the_registered_one_is_alive():
    c = Controller()
    c.start(1)
    c.at(c.now + 5000).heartbeat(1)
    before = c.image.to_bytes()
    resp = c.at(c.now + TIMEOUT).register(1, inc=2)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": error_code("DUPLICATE_BROKER_REGISTRATION"), "BrokerEpoch": -1}
    assert c.records == [] and c.image.to_bytes() == before
    # One millisecond later the old session has expired: it is fenced, then the new one registers.
    resp = c.at(c.now + 1).register(1, inc=2)
    assert resp["ErrorCode"] == 0 and resp["BrokerEpoch"] == c.offset
    assert types(c.records) == ["BrokerRegistrationChangeRecord", "RegisterBrokerRecord"]
    assert c.broker(1).incarnation_id == incarnation(2)


def test_a_fenced_broker_that_still_heartbeats_keeps_its_id():
    c = Controller()
    c.start(1)
    c.heartbeat(1, fence=True)
    assert c.register(1, inc=2)["ErrorCode"] == error_code("DUPLICATE_BROKER_REGISTRATION")


def test_a_new_incarnation_clears_controlled_shutdown_even_within_the_old_session():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]])  # it leads a partition: its shutdown is a controlled one
    c.heartbeat(1, shutdown=True)
    assert c.broker(1).in_controlled_shutdown
    resp = c.register(1, inc=2)  # KAFKA-19047: a broker in controlled shutdown may restart at once
    assert resp["ErrorCode"] == 0
    broker = c.broker(1)
    assert (broker.epoch, broker.fenced, broker.in_controlled_shutdown) == (c.offset, True, False)


def test_a_registration_for_another_cluster_is_refused():
    c = Controller(cluster_id=CLUSTER)
    assert c.register(1, cluster="WIjw3grwRZmR2uOpdpVXbg")["ErrorCode"] == error_code("INCONSISTENT_CLUSTER_ID")
    assert c.records == [] and not c.image.brokers
    assert c.register(1)["ErrorCode"] == 0
    # Without a known cluster id every id is taken at its word.
    assert Controller().register(1, cluster="WIjw3grwRZmR2uOpdpVXbg")["ErrorCode"] == 0


@pytest.mark.parametrize("features", [
    [("metadata.version", 1, MV - 1)],  # too old for the finalized metadata.version
    [("metadata.version", MV + 1, MV + 5)],  # too new
    [],  # assumed to run metadata.version 1 only
    [("metadata.version", 1, MV), ("kraft.version", 1, 1)],  # kraft.version 0 is finalized
])
def test_a_broker_that_cannot_run_the_finalized_features_is_refused(features):
    c = Controller()
    resp = c.register(1, features=features)
    assert resp["ErrorCode"] == error_code("UNSUPPORTED_VERSION") and c.records == []
    assert not c.image.brokers


def test_every_finalized_feature_counts_and_unlisted_ones_are_level_zero():
    c = Controller()
    c.log(ev("FeatureLevelRecord", Name="group.version", FeatureLevel=1))
    assert c.register(1)["ErrorCode"] == error_code("UNSUPPORTED_VERSION")
    assert c.register(1, features=[("metadata.version", 1, MV), ("group.version", 0, 1)])["ErrorCode"] == 0
    # Features the cluster has not finalized are not checked.
    assert c.register(2, features=[("metadata.version", 1, MV), ("group.version", 0, 1),
                                   ("share.version", 3, 3)])["ErrorCode"] == 0


def test_zookeeper_brokers_are_not_registered():
    c = Controller()
    assert c.register(1, IsMigratingZkBroker=True)["ErrorCode"] == error_code("BROKER_ID_NOT_REGISTERED")
    assert c.records == []


# --- BrokerHeartbeatRequest ----------------------------------------------------------------------------

def test_a_fenced_broker_is_unfenced_once_it_has_caught_up_with_its_registration():
    c = Controller()
    registered = c.register(1)["BrokerEpoch"]
    resp = c.heartbeat(1, offset=registered - 1)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": False, "IsFenced": True,
                    "ShouldShutDown": False}
    assert c.records == [] and c.broker(1).fenced
    resp = c.heartbeat(1, offset=registered)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": True, "IsFenced": False,
                    "ShouldShutDown": False}
    assert c.records == [change(1, registered, 0, fenced=-1)]
    assert not c.broker(1).fenced
    assert c.heartbeat(1)["IsFenced"] is False and c.records == []


def test_unfencing_gives_leaderless_partitions_a_leader():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2], [2, 1]], isr=[[1], [2, 1]])
    c.heartbeat(1, fence=True)
    assert c.partition(T1, 0) == (-1, [1], 6, 11)  # its last ISR member is gone: offline
    assert c.partition(T1, 1) == (2, [2], 5, 11)
    c.heartbeat(1)
    assert types(c.records) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    assert c.partition(T1, 0) == (1, [1], 7, 12)
    assert c.partition(T1, 1) == (2, [2], 5, 11)  # led already: the preferred leader does not come back


def test_want_fence_fences_and_fails_over_and_a_fenced_broker_stays_fenced():
    c = Controller()
    c.start(1, 2, 3)
    c.topic(T1, "t", [[1, 2, 3], [2, 1, 3], [3, 2]])
    epoch = c.broker(1).epoch
    resp = c.heartbeat(1, fence=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, False)
    # Kafka moves the partitions first and writes the fencing last.
    assert types(c.records) == ["PartitionChangeRecord"] * 2 + ["BrokerRegistrationChangeRecord"]
    assert c.records[-1] == change(1, epoch, 0, fenced=1)
    assert c.broker(1).fenced
    assert c.partition(T1, 0) == (2, [2, 3], 6, 11)
    assert c.partition(T1, 1) == (2, [2, 3], 5, 11)
    assert c.partition(T1, 2) == (3, [3, 2], 5, 10)
    resp = c.heartbeat(1, fence=True)
    assert resp["IsFenced"] is True and c.records == []


def test_want_shut_down_persists_a_controlled_shutdown_then_shuts_down_once_others_caught_up():
    c = Controller()
    c.start(1, 2, 3)
    c.topic(T1, "t", [[1, 2, 3], [1, 2], [1, 3], [2, 3]], isr=[[1, 2, 3], [1, 2], [1], [2, 3]])
    epoch = c.broker(1).epoch
    resp = c.heartbeat(1, shutdown=True)
    started = c.offset
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": True, "IsFenced": False,
                    "ShouldShutDown": False}
    # The state is persisted first (v1 has the field), then leaderships move and the ISRs shrink.
    assert c.records[0] == change(1, epoch, 1, shutdown=1)
    assert types(c.records[1:]) == ["PartitionChangeRecord"] * 3
    broker = c.broker(1)
    assert (broker.fenced, broker.in_controlled_shutdown) == (False, True)
    assert c.partition(T1, 0) == (2, [2, 3], 6, 11)
    assert c.partition(T1, 1) == (2, [2], 6, 11)
    assert c.partition(T1, 2) == (-1, [1], 6, 11)  # no one else in sync: offline, it stays in the ISR
    assert c.partition(T1, 3) == (2, [2, 3], 5, 10)
    assert c.leads(1) == []
    # Broker 3 has not seen those records yet: broker 1 must wait.
    c.heartbeat(2, offset=started)
    resp = c.heartbeat(1, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (False, False) and c.records == []
    c.heartbeat(3, offset=started)
    resp = c.heartbeat(1, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert c.records == [change(1, epoch, 0, fenced=1)]  # nothing left to move
    broker = c.broker(1)
    assert (broker.fenced, broker.in_controlled_shutdown) == (True, True)


def test_should_shut_down_only_once_it_leads_nothing():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]] * 3)
    answers = []
    for _ in range(4):
        resp = c.heartbeat(1, shutdown=True)
        c.heartbeat(2)
        answers.append(resp["ShouldShutDown"])
        if resp["ShouldShutDown"]:
            assert c.leads(1) == []
    assert answers == [False, True, True, True]


def test_a_fenced_broker_that_wants_to_shut_down_may_at_once():
    c = Controller()
    c.register(1)
    epoch = c.broker(1).epoch
    resp = c.heartbeat(1, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert c.records == [change(1, epoch, 0, fenced=1)]  # Kafka writes it, though it changes nothing


def test_want_fence_and_shut_down_together_fence_at_once():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]])
    resp = c.heartbeat(1, fence=True, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert types(c.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert not c.broker(1).in_controlled_shutdown


def test_a_broker_unfenced_again_after_a_controlled_shutdown_is_never_elected():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]], isr=[[1]])
    c.heartbeat(1, shutdown=True)
    c.heartbeat(2, offset=c.offset)
    assert c.heartbeat(1, shutdown=True)["ShouldShutDown"] is True
    resp = c.heartbeat(1)  # the same incarnation changes its mind
    assert resp["IsFenced"] is False
    assert types(c.records) == ["BrokerRegistrationChangeRecord"]
    assert c.partition(T1, 0)[:2] == (-1, [1])


@pytest.mark.parametrize("which", ["stale", "newer", "unknown"])
def test_a_heartbeat_for_another_epoch_or_an_unknown_broker_is_stale(which):
    c = Controller()
    c.start(1)
    epoch = c.broker(1).epoch
    broker_id, epoch = {"stale": (1, epoch - 1), "newer": (1, epoch + 1), "unknown": (7, epoch)}[which]
    resp = c.heartbeat(broker_id, epoch=epoch, shutdown=True)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": error_code("STALE_BROKER_EPOCH"), "IsCaughtUp": False,
                    "IsFenced": True, "ShouldShutDown": False}
    assert c.records == []


def test_a_stale_heartbeat_does_not_keep_the_session_alive():
    c = Controller()
    c.start(1, 2)
    start = c.now
    c.at(start + TIMEOUT).heartbeat(2)
    c.heartbeat(1, epoch=c.broker(1).epoch - 1)
    c.at(start + TIMEOUT + 1).heartbeat(2)
    assert c.broker(1).fenced


# --- session expiry in event time ----------------------------------------------------------------------

def test_a_silent_broker_is_fenced_once_its_session_has_expired_and_not_before():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]])
    last = c.now
    epoch = c.broker(1).epoch
    c.at(last + TIMEOUT).heartbeat(2)
    assert c.records == [] and not c.broker(1).fenced  # exactly the timeout: still alive
    c.at(last + TIMEOUT + 1).heartbeat(2)
    assert types(c.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert c.records[-1] == change(1, epoch, 0, fenced=1)
    assert c.broker(1).fenced
    assert c.partition(T1, 0) == (2, [2], 6, 11)
    assert not c.broker(2).fenced
    assert c.at(c.now + 10 * TIMEOUT).expire()[-1] == change(2, c.broker(2).epoch, 0, fenced=1)
    assert c.partition(T1, 0) == (-1, [2], 7, 12)
    assert c.expire() == []  # fenced brokers are not fenced again


def test_the_session_timeout_is_a_config():
    c = Controller(broker_session_timeout_ms="3000")
    c.start(1)
    last = c.now
    assert c.at(last + 3000).expire() == []
    assert types(c.at(last + 3001).expire()) == ["BrokerRegistrationChangeRecord"]


def test_brokers_that_expire_together_are_fenced_stalest_first_each_seeing_the_last():
    c = Controller()
    c.start(1, 2, 3)
    c.topic(T1, "t", [[1, 2, 3]])
    start = c.now
    c.at(start + 100).heartbeat(2)
    c.at(start + 200).heartbeat(3)
    c.at(start + 100 + TIMEOUT + 1).expire()
    assert types(c.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"] * 2
    assert [r["data"]["BrokerId"] for r in c.records if r["type"] != "PartitionChangeRecord"] == [1, 2]
    # Broker 2 led for a moment before it was fenced too: the log says so, as Kafka's would.
    assert [r["data"]["Leader"] for r in c.records if r["type"] == "PartitionChangeRecord"] == [2, 3]
    assert c.partition(T1, 0) == (3, [3], 7, 12)


def test_a_broker_in_controlled_shutdown_that_goes_silent_is_fenced():
    c = Controller()
    c.start(1, 2)
    c.heartbeat(1, shutdown=True)
    last = c.now
    c.at(last + TIMEOUT + 1).heartbeat(2)
    assert c.broker(1).fenced


def test_expiry_depends_on_event_time_only_not_on_how_often_it_is_checked():
    def run(checks: int) -> list[dict]:
        c = Controller()
        c.start(1, 2)
        c.topic(T1, "t", [[1, 2], [2, 1]])
        start = c.now
        c.at(start + 4000).heartbeat(2)
        for n in range(checks):
            assert c.at(start + 4000 + n * 1000).expire() == []
        c.at(start + TIMEOUT + 1).heartbeat(2)
        return c.records

    assert run(0) == run(5) == run(5)
    assert types(run(0)) == ["PartitionChangeRecord"] * 2 + ["BrokerRegistrationChangeRecord"]


# --- taking over a log ---------------------------------------------------------------------------------

def logged_cluster() -> Controller:
    """A log written by another controller, long before the requests that follow it."""
    c = Controller()
    for broker_id, fenced in ((1, False), (2, False), (3, True)):
        c.log(ev("RegisterBrokerRecord", 3, BrokerId=broker_id, BrokerEpoch=10 + broker_id,
                 IncarnationId=incarnation(broker_id), Fenced=fenced,
                 EndPoints=[{"Name": "PLAINTEXT", "Host": f"b{broker_id}", "Port": 9092, "SecurityProtocol": 0}]))
    c.topic(T1, "t", [[1, 2]])
    c.at(c.now + 3_600_000)  # an hour of heartbeats this controller never saw
    return c


def test_after_a_takeover_sessions_start_at_the_takeover():
    c = logged_cluster()
    take_over(c.image, c.state, c.now)
    assert c.state.takeover_ms == c.now
    assert sorted(c.state.sessions) == [1, 2]  # a fenced broker has no session to keep
    start = c.now
    assert c.at(start + TIMEOUT).expire() == []
    c.heartbeat(1)
    c.at(start + TIMEOUT + 1).expire()
    assert [b.fenced for _, b in sorted(c.image.brokers.items())] == [False, True, True]


def test_a_broker_never_seen_gets_its_session_when_first_looked_at():
    c = logged_cluster()
    assert c.expire() == []  # no takeover called: the same rule applies broker by broker
    assert c.heartbeat(1)["ErrorCode"] == 0
    c.log(ev("RegisterBrokerRecord", 3, BrokerId=4, BrokerEpoch=c.offset + 1, IncarnationId=incarnation(4),
             Fenced=False,
             EndPoints=[{"Name": "PLAINTEXT", "Host": "b4", "Port": 9092, "SecurityProtocol": 0}]))
    assert c.expire() == []  # broker 4's session starts here
    c.at(c.now + TIMEOUT)
    assert c.expire() == []
    c.heartbeat(1)
    c.heartbeat(2)
    c.at(c.now + 1).expire()
    assert [b for b, r in sorted(c.image.brokers.items()) if r.fenced] == [3, 4]


def test_a_takeover_forgets_the_previous_term():
    c = Controller()
    c.start(1, 2)
    c.heartbeat(1, shutdown=True)
    c.at(c.now + 10 * TIMEOUT)  # another controller ran the cluster meanwhile
    take_over(c.image, c.state, c.now)
    assert c.expire() == []
    # Kafka forgets the controlled shutdown's progress too: to the new term's heartbeat manager the
    # broker is simply unfenced, and one that leads nothing asking to shut down is fenced at once.
    resp = c.heartbeat(1, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert c.records == [change(1, c.broker(1).epoch, 0, fenced=1)]


def test_a_fenced_broker_from_the_log_may_register_again_at_once():
    c = logged_cluster()
    take_over(c.image, c.state, c.now)
    assert c.register(3, inc=9)["ErrorCode"] == 0
    assert c.register(2, inc=9)["ErrorCode"] == error_code("DUPLICATE_BROKER_REGISTRATION")


# --- UnregisterBrokerRequest ---------------------------------------------------------------------------

def test_unregistering_fails_its_partitions_over_first():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2], [2, 1]])
    epoch = c.broker(1).epoch
    resp = c.request("UnregisterBrokerRequest", BrokerId=1)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": ""}
    assert types(c.records) == ["PartitionChangeRecord"] * 2 + ["UnregisterBrokerRecord"]
    assert c.records[-1] == ev("UnregisterBrokerRecord", BrokerId=1, BrokerEpoch=epoch)
    assert 1 not in c.image.brokers and 1 not in c.state.sessions
    assert c.partition(T1, 0) == (2, [2], 6, 11)
    assert c.partition(T1, 1) == (2, [2], 5, 11)
    assert c.heartbeat(1, epoch=epoch)["ErrorCode"] == error_code("STALE_BROKER_EPOCH")


def test_unregistering_an_unknown_broker_is_refused():
    c = Controller()
    resp = c.request("UnregisterBrokerRequest", BrokerId=5)
    assert resp == {"ThrottleTimeMs": 0, "ErrorCode": error_code("BROKER_ID_NOT_REGISTERED"),
                    "ErrorMessage": "Broker ID 5 is not currently registered"}
    assert c.records == []


# --- the soft state in the state store -----------------------------------------------------------------

def test_the_controller_state_round_trips_through_plain_json():
    c = Controller()
    c.start(1, 2)
    c.heartbeat(1, shutdown=True)
    take_over(c.image, ControllerState(), c.now)  # (another state, left alone)
    doc = json.loads(json.dumps(c.state.to_dict()))
    assert ControllerState.from_dict(doc) == c.state
    assert ControllerState.from_dict(doc).to_dict() == c.state.to_dict()
    assert ControllerState.from_dict(ControllerState().to_dict()) == ControllerState()


def test_decisions_leave_the_image_alone():
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]])
    before = c.image.to_bytes()
    ctx = Context(now_ms=c.now + 10 * TIMEOUT, offset=c.offset + 1)
    assert expire_sessions(c.image, c.state, ctx)
    decide_broker_heartbeat(c.image, c.state, ev("BrokerHeartbeatRequest", 1, BrokerId=2, BrokerEpoch=c.broker(2).epoch,
                                                 WantShutDown=True), ctx)
    decide_unregister_broker(c.image, c.state, ev("UnregisterBrokerRequest", BrokerId=1), ctx)
    decide_broker_registration(c.image, c.state, ev("BrokerRegistrationRequest", 4, BrokerId=3,
                                                    IncarnationId=incarnation(3)), ctx)
    assert c.image.to_bytes() == before


# --- conformance with a real Kafka controller ---------------------------------------------------------

def test_a_controlled_shutdown_writes_what_kafka_wrote():
    """single-broker-shutdown: replay the log up to the record that starts broker 1's controlled shutdown,
    take over, send the heartbeat that asked for it, and compare with what Kafka's controller wrote."""
    events = list(read_partition_dir(FIXTURES / "single-broker-shutdown" / "__cluster_metadata-0"))
    start = next(i for i, e in enumerate(events) if e["type"] == "BrokerRegistrationChangeRecord"
                 and e["data"]["InControlledShutdown"] == 1)
    image = ClusterImage()
    for e in events[:start]:
        assert replay(image, e).rejected is None
    first = events[start]
    real = [e for e in events[start:] if e["type"] != "NoOpRecord"]
    real_shutdown = [e for e in real if e["timestamp"] == first["timestamp"]]
    real_fence = real[len(real_shutdown)]
    assert real_fence["type"] == "BrokerRegistrationChangeRecord" and real_fence["data"]["Fenced"] == 1

    state = ControllerState()
    take_over(image, state, first["timestamp"])
    broker = image.brokers[1]
    ctx = Context(now_ms=first["timestamp"], offset=first["offset"])
    assert expire_sessions(image, state, ctx) == []
    heartbeat = ev("BrokerHeartbeatRequest", 1, BrokerId=1, BrokerEpoch=broker.epoch,
                   CurrentMetadataOffset=first["offset"] - 1, WantShutDown=True)
    decision = decide_broker_heartbeat(image, state, heartbeat, ctx)
    assert decision.response["data"] == {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": True,
                                         "IsFenced": False, "ShouldShutDown": False}

    def strip(e: dict) -> dict:
        return {"type": e["type"], "version": e["version"], "data": e["data"]}

    # The state change first, exactly as Kafka wrote it; then one change per partition (Kafka's order
    # of partitions is its hash map's), equal field for field.
    assert strip(real_shutdown[0]) == decision.records[0]
    ours = {(r["data"]["TopicId"], r["data"]["PartitionId"]): r for r in decision.records[1:]}
    theirs = {(e["data"]["TopicId"], e["data"]["PartitionId"]): strip(e) for e in real_shutdown[1:]}
    assert len(theirs) == 54 and ours == theirs

    # Replayed, both give the same partitions: leader, ISR and the epochs that follow.
    expected = image.copy()
    for e in real_shutdown:
        assert replay(expected, e).rejected is None
    for rec in decision.records:
        assert replay(image, {**rec, "offset": ctx.offset, "leader_epoch": 1, "timestamp": ctx.now_ms}).rejected is None

    def partitions(img: ClusterImage) -> dict:
        return {(p.topic_id, p.partition_id): (p.leader, p.isr, p.leader_epoch, p.partition_epoch)
                for p in img.iter_partitions()}

    assert partitions(image) == partitions(expected)
    assert all(leader == -1 and isr == (1,) for leader, isr, _, _ in partitions(image).values())

    # Its next heartbeat: no active broker is left to wait for, so it shuts down and is fenced.
    ctx = Context(now_ms=real_fence["timestamp"], offset=real_fence["offset"])
    assert expire_sessions(image, state, ctx) == []
    decision = decide_broker_heartbeat(image, state, heartbeat, ctx)
    assert decision.response["data"]["ShouldShutDown"] is True
    assert decision.records == [strip(real_fence)]


def test_only_the_requests_that_place_replicas_skip_the_brokers_this_controller_is_shutting_down():
    """Broker 4 asked to shut down while leading a partition, so it stays registered and unfenced in
    controlled shutdown. ``dispatch.decide`` gives the brokers shutting down to CreateTopics and
    CreatePartitions (``PLACES_REPLICAS``), whose placement skips them as Kafka's ``usableBrokers`` does;
    an AlterPartition, which reads no such set, is decided all the same."""
    c = Controller()
    c.start(1, 2, 3, 4)
    c.topic(T1, "t", [[4, 1]])
    assert c.heartbeat(4, shutdown=True)["ShouldShutDown"] is False
    assert (c.broker(4).fenced, c.broker(4).in_controlled_shutdown) == (False, True)
    resp = c.request("CreateTopicsRequest", Topics=[{"Name": "u", "NumPartitions": 12, "ReplicationFactor": 2,
                                                     "Assignments": [], "Configs": []}])
    assert [t["ErrorCode"] for t in resp["Topics"]] == [0]
    placed = [r["data"]["Replicas"] for r in c.records if r["type"] == "PartitionRecord"]
    assert len(placed) == 12 and all(4 not in replicas for replicas in placed)
    resp = c.request("CreatePartitionsRequest", Topics=[{"Name": "u", "Count": 24, "Assignments": None}],
                     TimeoutMs=1000, ValidateOnly=False)
    assert [t["ErrorCode"] for t in resp["Results"]] == [0]
    placed = [r["data"]["Replicas"] for r in c.records if r["type"] == "PartitionRecord"]
    assert len(placed) == 12 and all(4 not in replicas for replicas in placed)
    leader, isr, leader_epoch, partition_epoch = c.partition(T1, 0)
    assert (leader, isr) == (1, [1])
    proposal = {"PartitionIndex": 0, "LeaderEpoch": leader_epoch, "PartitionEpoch": partition_epoch,
                "LeaderRecoveryState": 0,
                "NewIsrWithEpochs": [{"BrokerId": b, "BrokerEpoch": c.broker(b).epoch} for b in (1, 4)]}
    resp = c.request("AlterPartitionRequest", BrokerId=1, BrokerEpoch=c.broker(1).epoch,
                     Topics=[{"TopicId": T1, "Partitions": [proposal]}])
    assert resp["Topics"][0]["Partitions"][0]["ErrorCode"] == error_code("INELIGIBLE_REPLICA")
