"""Kafka's ``BrokerHeartbeatManagerTest`` (metadata module, Kafka 4.x) translated to the heartbeat
decisions of ``kraftlake.controller.cluster_control``.

Kafka's test calls ``calculateNextBrokerState`` with a ``hasLeaderships`` callback; here the broker
leads a partition or not, and the transition shows in the response (IsFenced, ShouldShutDown) and the
records. Kafka's heartbeat manager internals (``BrokerHeartbeatStateList``, the metadata-offset
comparator, ``nextCheckTimeNs``) have no counterpart: see README.md.
"""

from __future__ import annotations

from controller_harness import TIMEOUT, Controller, types
from kraftlake.controller.cluster_control import take_over
from kraftlake.metadata import uuids

T1 = uuids.from_bytes(bytes([1] * 16))


def test_calculate_next_broker_state_fenced():
    """BrokerHeartbeatManagerTest.testCalculateNextBrokerState, a FENCED broker: WantShutDown shuts it
    down now; caught up it is unfenced; behind, or asking to stay fenced, it stays fenced."""
    c = Controller()
    c.register(0)
    registered = c.offset
    resp = c.heartbeat(0, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert c.heartbeat(0, offset=registered - 1)["IsFenced"] is True
    resp = c.request("BrokerHeartbeatRequest", BrokerId=0, BrokerEpoch=c.broker(0).epoch,
                     CurrentMetadataOffset=registered, WantFence=True)
    assert resp["IsFenced"] is True and c.records == []
    assert c.heartbeat(0, offset=registered)["IsFenced"] is False


def test_calculate_next_broker_state_unfenced_with_leaderships():
    """testCalculateNextBrokerState, UNFENCED and leading a partition: WantShutDown starts a
    controlled shutdown (its leaderships move); no wish keeps it unfenced."""
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[1, 2]])
    assert c.heartbeat(1)["IsFenced"] is False and c.records == []
    resp = c.heartbeat(1, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (False, False)
    assert types(c.records) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    assert c.broker(1).in_controlled_shutdown and c.leads(1) == []


def test_calculate_next_broker_state_unfenced_without_leaderships():
    """testCalculateNextBrokerState, UNFENCED and leading nothing: WantShutDown shuts it down now
    (fenced, out of the ISRs it was in, ShouldShutDown)."""
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[2, 1]])  # 1 follows only
    resp = c.heartbeat(1, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert types(c.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert c.partition(T1)[1] == [2] and c.broker(1).fenced and not c.broker(1).in_controlled_shutdown


def shutting_down_behind_a_lagging_broker() -> tuple[Controller, int]:
    """Broker 3 leads and begins a controlled shutdown at offset ``started``; broker 1 has seen that
    offset, broker 2 only the one before; 3 has asked again since, so it must wait."""
    c = Controller()
    c.start(1, 2, 3)
    c.topic(T1, "t", [[3, 1, 2]])
    c.heartbeat(3, shutdown=True)
    started = c.offset
    c.heartbeat(1, offset=started)
    c.heartbeat(2, offset=started - 1)  # 2 has not seen the shutdown's records yet
    resp = c.heartbeat(3, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (False, False)
    return c, started


def test_calculate_next_broker_state_controlled_shutdown():
    """testCalculateNextBrokerState, CONTROLLED_SHUTDOWN: it may shut down only once every active
    broker has caught up with the records that started its shutdown (lowestActiveOffset); a lagging
    broker holds it until that broker is fenced."""
    c, _ = shutting_down_behind_a_lagging_broker()
    c.heartbeat(2, fence=True)
    resp = c.heartbeat(3, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)


def test_controlled_shutdown_offset_is_only_updated_once():
    """BrokerHeartbeatManagerTest.testControlledShutdownOffsetIsOnlyUpdatedOnce: the offset a broker's
    controlled shutdown waits for is the end of the batch of the heartbeat that began it
    (``processBatchEndOffset``: here the heartbeat's own offset, which all its records carry); the
    heartbeats after it do not move it, so the lagging broker reaching that offset is enough."""
    c, started = shutting_down_behind_a_lagging_broker()
    c.heartbeat(2, offset=started)
    resp = c.heartbeat(3, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)


def elected_again_while_shutting_down() -> Controller:
    """Broker 3 begins a controlled shutdown at metadata.version 3.3-IV2, where the state is not persisted
    and so does not keep it from leading (``isActive``): its leader 1 takes it back into the ISR, a
    preferred election makes it leader again, and brokers 1 and 2 catch up with all of it."""
    c = Controller(metadata_version=6)
    c.start(1, 2, 3)
    c.topic(T1, "t", [[3, 1, 2]])
    assert c.heartbeat(3, shutdown=True)["ShouldShutDown"] is False
    assert c.leads(3) == [] and not c.broker(3).in_controlled_shutdown
    p = c.image.partition(T1, 0)
    resp = c.request("AlterPartitionRequest", BrokerId=1, BrokerEpoch=c.broker(1).epoch, Topics=[{
        "TopicId": T1, "Partitions": [{"PartitionIndex": 0, "LeaderEpoch": p.leader_epoch,
                                       "PartitionEpoch": p.partition_epoch, "LeaderRecoveryState": 0,
                                       "NewIsrWithEpochs": [{"BrokerId": b, "BrokerEpoch": -1} for b in (1, 2, 3)]}]}])
    assert resp["Topics"][0]["Partitions"][0]["ErrorCode"] == 0
    resp = c.request("ElectLeadersRequest", ElectionType=0, TimeoutMs=1000,
                     TopicPartitions=[{"Topic": "t", "Partitions": [0]}])
    assert resp["ReplicaElectionResults"][0]["PartitionResult"][0]["ErrorCode"] == 0
    assert c.leads(3) == [(T1, 0)]
    c.heartbeat(1)
    c.heartbeat(2)
    return c


def test_calculate_next_broker_state_controlled_shutdown_while_leading():
    """testCalculateNextBrokerState, CONTROLLED_SHUTDOWN with leaderships: a broker that still leads
    stays in controlled shutdown though every active broker has caught up (``hasLeaderships`` is asked
    before ``lowestActiveOffset``); once it leads nothing it shuts down."""
    c = elected_again_while_shutting_down()
    resp = c.heartbeat(3, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (False, False) and c.records == []
    resp = c.request("AlterPartitionReassignmentsRequest", TimeoutMs=1000, Topics=[
        {"Name": "t", "Partitions": [{"PartitionIndex": 0, "Replicas": [1, 2]}]}])
    assert resp["Responses"][0]["Partitions"][0]["ErrorCode"] == 0 and c.leads(3) == []
    resp = c.heartbeat(3, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)


def test_with_several_shards_a_broker_elected_again_is_fenced_with_its_leaderships():
    """Departure (ADR 0007): one shard of several cannot tell whether the broker leads a partition of
    another, so it does not ask; the shutdown ends once every active broker has caught up, and the
    fencing moves the leadership as a session expiry would."""
    c = elected_again_while_shutting_down()
    c.whole_image = False
    resp = c.heartbeat(3, shutdown=True)
    assert (resp["IsFenced"], resp["ShouldShutDown"]) == (True, True)
    assert types(c.records) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"] and c.leads(3) == []


def test_usable_broker_iterator():
    """BrokerHeartbeatManagerTest.testUsableBrokerIterator: placement uses every registered broker
    but those the heartbeat manager has in controlled shutdown; fenced ones only fill followers."""
    c = Controller()
    c.start(0, 1, 2, 3)
    c.register(4)  # fenced
    c.topic(T1, "t", [[2, 0]])
    c.heartbeat(2, shutdown=True)  # 2 leads: a controlled shutdown begins
    assert c.broker(2).in_controlled_shutdown
    resp = c.request("CreateTopicsRequest", Topics=[{"Name": "u", "NumPartitions": 20, "ReplicationFactor": 4,
                                                     "Assignments": [], "Configs": []}], timeoutMs=1000,
                     validateOnly=False)
    assert resp["Topics"][0]["ErrorCode"] == 0
    placed = {r for p in c.image.iter_partitions() if p.topic_id != T1 for r in p.replicas}
    assert placed == {0, 1, 3, 4}


def test_a_broker_shutting_down_only_in_the_log_is_still_placed():
    """The other half of testUsableBrokerIterator: after a failover the new controller's heartbeat
    manager knows no controlled shutdown, so a broker whose registration says so is placed again,
    and kept out of the ISR by KIP-841 (``isActive``). With no active broker to lead, Kafka refuses
    with "...currently fenced or in controlled shutdown."."""
    c = Controller()
    c.start(1, 2)
    c.topic(T1, "t", [[2, 1]])
    c.heartbeat(2, shutdown=True)
    take_over(c.image, c.state, c.now)
    resp = c.request("CreateTopicsRequest", Topics=[{"Name": "u", "NumPartitions": 4, "ReplicationFactor": 2,
                                                     "Assignments": [], "Configs": []}], timeoutMs=1000,
                     validateOnly=False)
    assert resp["Topics"][0]["ErrorCode"] == 0
    new = [p for p in c.image.iter_partitions() if p.topic_id != T1]
    assert all(sorted(p.replicas) == [1, 2] and p.isr == (1,) and p.leader == 1 for p in new)
    c.heartbeat(1, fence=True)
    resp = c.request("CreateTopicsRequest", Topics=[{"Name": "v", "NumPartitions": 1, "ReplicationFactor": 1,
                                                     "Assignments": [], "Configs": []}], timeoutMs=1000,
                     validateOnly=False)
    assert resp["Topics"][0]["ErrorMessage"] == ("Unable to replicate the partition 1 time(s): All brokers are "
                                                 "currently fenced or in controlled shutdown.")


def test_has_valid_session_and_find_one_stale_broker():
    """BrokerHeartbeatManagerTest.testHasValidSession and testFindOneStaleBroker: a session lasts
    broker.session.timeout.ms from the last heartbeat; stale brokers are fenced stalest first."""
    c = Controller()
    c.start(0)
    c.at(c.now + 5)
    c.start(1, 2)
    assert c.expire() == []
    contact_0 = c.state.sessions[0].contact_ms
    c.at(contact_0 + TIMEOUT + 1)
    fenced = c.expire()
    assert types(fenced) == ["BrokerRegistrationChangeRecord"] and fenced[0]["data"]["BrokerId"] == 0
    c.at(c.now + TIMEOUT)
    fenced = c.expire()
    assert [r["data"]["BrokerId"] for r in fenced] == [1, 2]
