"""``kraftlake.replication``: scenarios replayed through the image, each checked against both KIP-841
invariants, and the failover of a real Kafka log compared with what its controller wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftlake.codec.logdir import read_partition_dir
from kraftlake.decisions import Context, error_code
from kraftlake.events import check_struct
from kraftlake.image import ClusterImage
from kraftlake.replay import replay
from kraftlake.replication import alter_partition, broker_failover, elect_leaders
from kraftlake.schemas import registry

from test_elections import Cluster, changed_fields, check_kip841, state, topic_id

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-logs"


def ctx(offset: int = 1000, **config: str) -> Context:
    return Context(now_ms=0, offset=offset, config={k.replace("_", "."): v for k, v in config.items()})


# --- broker failover (fence and controlled shutdown) ---------------------------------------------------

@pytest.mark.parametrize("how", ["fence", "shutdown"])
def test_failover_leaves_isrs_and_moves_leadership(how):
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3], [2, 1, 3], [3, 2, 1], [2, 3]], isr=[[3, 1, 2], [2, 1, 3], [3, 2, 1], [2, 3]],
            leaders=[1, 2, 3, 2])
    records = broker_failover(c.image, 1, ctx())
    assert len(records) == 3  # partition 3 has no replica on broker 1
    # Kafka persists a fencing after the partition changes, a controlled shutdown before them.
    if how == "fence":
        check_kip841(c, records + [c.broker_change(1, fenced=True)])
    else:
        check_kip841(c, [c.broker_change(1, shutdown=True)] + records)
    # ISR order is kept; the new leader is the first *assigned* replica in the ISR.
    assert state(c.partition("t", 0)) == ([1, 2, 3], [3, 2], 2, 6, 11)
    assert state(c.partition("t", 1)) == ([2, 1, 3], [2, 3], 2, 5, 11)
    assert state(c.partition("t", 2)) == ([3, 2, 1], [3, 2], 3, 5, 11)
    assert state(c.partition("t", 3)) == ([2, 3], [2, 3], 2, 5, 10)


def test_failover_of_the_last_isr_member_goes_offline_and_keeps_it():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]])
    [rec] = broker_failover(c.image, 1, ctx())
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Leader": -1}
    c.set_broker(1, fenced=True)
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2], [1], -1, 6, 11)
    assert broker_failover(c.image, 1, ctx()) == []  # nothing left to take away


def test_failover_never_elects_a_fenced_or_shutting_down_replica():
    c = Cluster()
    c.brokers(1, 4)
    c.broker(2, fenced=True)
    c.broker(3, shutdown=True)
    c.topic("t", [[1, 2, 3, 4], [1, 2, 3]], isr=[[1, 2, 3, 4], [1, 2, 3]])
    records = broker_failover(c.image, 1, ctx())
    check_kip841(c, records)
    assert state(c.partition("t", 0))[1:3] == ([2, 3, 4], 4)
    assert state(c.partition("t", 1))[1:3] == ([2, 3], -1)


def test_failover_unclean_where_the_topic_allows_it():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("dirty", [[1, 2]], n=1, isr=[[1]], configs={"unclean.leader.election.enable": "true"})
    c.topic("clean", [[1, 2]], n=2, isr=[[1]])
    records = broker_failover(c.image, 1, ctx())
    check_kip841(c, records)
    dirty, clean = c.partition("dirty"), c.partition("clean")
    assert state(dirty) == ([1, 2], [2], 2, 6, 11) and dirty.leader_recovery_state == 1
    assert state(clean) == ([1, 2], [1], -1, 6, 11)


def test_failover_unclean_from_the_cluster_default():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]])
    records = broker_failover(c.image, 1, ctx(unclean_leader_election_enable="true"))
    check_kip841(c, records)
    assert state(c.partition("t")) == ([1, 2], [2], 2, 6, 11)


def test_failover_touches_only_this_shards_topics():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("mine", [[1, 2]], n=1)
    c.topic("theirs", [[1, 2]], n=2)
    records = broker_failover(c.image, 1, Context(now_ms=0, offset=1, owns=lambda tid: tid == topic_id(1)))
    assert [r["data"]["TopicId"] for r in records] == [topic_id(1)]


def test_failover_does_not_mutate_the_image():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]])
    before = c.image.to_bytes()
    broker_failover(c.image, 1, ctx())
    assert c.image.to_bytes() == before


def test_failover_matches_the_real_controller_on_single_broker_shutdown():
    """Replay the log up to the record that starts broker 1's controlled shutdown, apply it, and
    compare what ``broker_failover`` writes with what Kafka's controller wrote next."""
    events = list(read_partition_dir(FIXTURES / "single-broker-shutdown" / "__cluster_metadata-0"))
    start = next(i for i, e in enumerate(events) if e["type"] == "BrokerRegistrationChangeRecord"
                 and e["data"]["InControlledShutdown"] == 1)
    image = ClusterImage()
    for e in events[:start + 1]:
        assert replay(image, e).rejected is None
    real = [e for e in events[start + 1:] if e["type"] == "PartitionChangeRecord"]
    assert len(real) == 54

    ours = broker_failover(image, 1, ctx(offset=events[start]["offset"]))

    def key(rec: dict) -> tuple:
        return rec["data"]["TopicId"], rec["data"]["PartitionId"]

    assert sorted(map(key, ours)) == sorted(map(key, real))
    real_by_key = {key(r): r for r in real}
    for rec in ours:
        theirs = real_by_key[key(rec)]
        assert rec["version"] == theirs["version"]
        assert rec["data"] == {k: theirs["data"][k] for k in rec["data"]}
    # Replayed, both give the same partitions: leader -1, ISR [1], epochs one up.
    expected, actual = image.copy(), image.copy()
    for rec in real:
        replay(expected, rec)
    for i, rec in enumerate(ours):
        replay(actual, {**rec, "offset": real[i]["offset"], "timestamp": real[i]["timestamp"]})
    assert {key_: state(p) for key_, p in _partitions(actual)} == {key_: state(p) for key_, p in _partitions(expected)}
    assert all(p.leader == -1 and p.isr == (1,) for _, p in _partitions(actual))


def _partitions(image: ClusterImage):
    return [((p.topic_id, p.partition_id), p) for p in image.iter_partitions()]


# --- requests -----------------------------------------------------------------------------------------

def request(type_: str, version: int, **data) -> dict:
    """A request as ingest hands it over: validated, every field of its version present."""
    return {"type": type_, "version": version, "data": check_struct(registry()[type_], data, version, type_)}


def decide(c: Cluster, fn, req: dict, context: Context | None = None) -> tuple[list[dict], dict]:
    """Decide, check the image was left alone, then replay the records with the KIP-841 checks."""
    before = c.image.to_bytes()
    decision = fn(c.image, req, context or ctx())
    assert c.image.to_bytes() == before, "a decision mutated the image"
    check_kip841(c, decision.records)
    return decision.records, decision.response


def error(name: str) -> int:
    return error_code(name)


# --- AlterPartition ----------------------------------------------------------------------------------

def alter(c: Cluster, version: int = 2, *, isr: list[int], sender: int = 1, broker_epoch: int = 100,
          leader_epoch: int = 5, partition_epoch: int = 10, name: str = "t", pid: int = 0,
          recovery: int | None = None, epochs: dict[int, int] | None = None):
    partition = {"PartitionIndex": pid, "LeaderEpoch": leader_epoch, "PartitionEpoch": partition_epoch}
    if version >= 3:
        partition["NewIsrWithEpochs"] = [{"BrokerId": b, "BrokerEpoch": (epochs or {}).get(b, 100)} for b in isr]
    else:
        partition["NewIsr"] = isr
    if recovery is not None:
        partition["LeaderRecoveryState"] = recovery
    topic = ({"TopicId": c.image.topic_ids.get(name, topic_id(99))} if version >= 2
             else {"TopicName": name})
    req = request("AlterPartitionRequest", version, BrokerId=sender, BrokerEpoch=broker_epoch,
                  Topics=[{**topic, "Partitions": [partition]}])
    return decide(c, alter_partition, req)


def only_partition(resp: dict) -> dict:
    [topic] = resp["data"]["Topics"]
    [partition] = topic["Partitions"]
    return partition


def three_brokers(**topic_fields) -> Cluster:
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3]], **topic_fields)
    return c


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_alter_partition_shrinks_and_expands_the_isr(version):
    c = three_brokers()
    records, resp = alter(c, version, isr=[1, 3])
    assert len(records) == 1 and resp["data"]["ErrorCode"] == 0
    assert only_partition(resp) == {"PartitionIndex": 0, "ErrorCode": 0, "LeaderId": 1, "LeaderEpoch": 5,
                                    "Isr": [1, 3], "LeaderRecoveryState": 0, "PartitionEpoch": 11}
    assert state(c.partition("t")) == ([1, 2, 3], [1, 3], 1, 5, 11)
    records, resp = alter(c, version, isr=[1, 3, 2], partition_epoch=11)
    assert only_partition(resp)["Isr"] == [1, 3, 2]
    assert state(c.partition("t")) == ([1, 2, 3], [1, 3, 2], 1, 5, 12)


def test_alter_partition_without_a_change_answers_the_current_state():
    c = three_brokers()
    records, resp = alter(c, isr=[1, 2, 3])
    assert records == [] and only_partition(resp)["PartitionEpoch"] == 10


def test_alter_partition_stale_broker_epoch_is_refused_whole():
    c = three_brokers()
    records, resp = alter(c, isr=[1, 2], broker_epoch=99)
    assert records == [] and resp["data"]["ErrorCode"] == error("STALE_BROKER_EPOCH")
    records, resp = alter(c, isr=[1, 2], sender=7)
    assert resp["data"]["ErrorCode"] == error("STALE_BROKER_EPOCH")


@pytest.mark.parametrize("version, expected", [(0, "UNKNOWN_TOPIC_OR_PARTITION"), (1, "UNKNOWN_TOPIC_OR_PARTITION"),
                                               (2, "UNKNOWN_TOPIC_ID"), (3, "UNKNOWN_TOPIC_ID")])
def test_alter_partition_unknown_topic(version, expected):
    c = three_brokers()
    records, resp = alter(c, version, isr=[1, 2], name="nope")
    assert records == [] and only_partition(resp)["ErrorCode"] == error(expected)
    records, resp = alter(c, version, isr=[1, 2], pid=5)
    assert only_partition(resp)["ErrorCode"] == error("UNKNOWN_TOPIC_OR_PARTITION")


@pytest.mark.parametrize("kwargs, expected", [
    (dict(leader_epoch=6), "NOT_CONTROLLER"),
    (dict(partition_epoch=11), "NOT_CONTROLLER"),
    (dict(leader_epoch=4, sender=2), "FENCED_LEADER_EPOCH"),  # epoch checks come before the sender's
    (dict(sender=2), "INVALID_REQUEST"),
    (dict(partition_epoch=9), "INVALID_UPDATE_VERSION"),
    (dict(isr=[1, 4]), "INVALID_REQUEST"),  # not a replica
    (dict(isr=[1, 1, 2]), "INVALID_REQUEST"),  # duplicates
    (dict(isr=[2, 3]), "INVALID_REQUEST"),  # without the leader
    (dict(isr=[]), "INVALID_REQUEST"),
    (dict(isr=[1], recovery=1), "INVALID_REQUEST"),  # RECOVERED cannot go back to RECOVERING
])
def test_alter_partition_validation_order(kwargs, expected):
    c = three_brokers()
    kwargs.setdefault("isr", [1, 2])
    records, resp = alter(c, **kwargs)
    assert records == [] and only_partition(resp)["ErrorCode"] == error(expected)
    assert state(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 5, 10)


@pytest.mark.parametrize("version, expected", [(0, "OPERATION_NOT_ATTEMPTED"), (1, "OPERATION_NOT_ATTEMPTED"),
                                               (2, "INELIGIBLE_REPLICA"), (3, "INELIGIBLE_REPLICA")])
@pytest.mark.parametrize("broker_state", ["fenced", "shutdown", "unregistered"])
def test_alter_partition_refuses_ineligible_replicas(version, expected, broker_state):
    c = Cluster()
    c.brokers(1, 2)
    if broker_state != "unregistered":
        c.broker(3, **{broker_state: True})
    c.topic("t", [[1, 2, 3]], isr=[[1, 2]])
    records, resp = alter(c, version, isr=[1, 2, 3])
    assert records == [] and only_partition(resp)["ErrorCode"] == error(expected)
    assert alter(c, version, isr=[1])[1]["data"]["Topics"][0]["Partitions"][0]["ErrorCode"] == 0  # shrinking is fine


def test_alter_partition_v3_refuses_a_replica_of_another_incarnation():
    c = three_brokers(isr=[[1, 2]])
    records, resp = alter(c, 3, isr=[1, 2, 3], epochs={3: 99})
    assert only_partition(resp)["ErrorCode"] == error("INELIGIBLE_REPLICA")
    records, resp = alter(c, 3, isr=[1, 2, 3], epochs={3: -1})  # -1: not checked
    assert only_partition(resp)["ErrorCode"] == 0


def test_alter_partition_leader_recovery():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]], LeaderRecoveryState=1)
    records, resp = alter(c, isr=[1, 2], recovery=1)
    assert only_partition(resp)["ErrorCode"] == error("INVALID_REQUEST")  # still recovering: alone
    records, resp = alter(c, isr=[1], recovery=1)
    assert records == [] and only_partition(resp)["LeaderRecoveryState"] == 1
    records, resp = alter(c, isr=[1], recovery=0)
    assert only_partition(resp)["LeaderRecoveryState"] == 0 and c.partition("t").leader_recovery_state == 0
    assert state(c.partition("t")) == ([1, 2], [1], 1, 5, 11)


@pytest.mark.parametrize("version, expected", [(1, "FENCED_LEADER_EPOCH"), (2, "NEW_LEADER_ELECTED")])
def test_alter_partition_completing_a_reassignment_that_drops_the_leader(version, expected):
    c = Cluster()
    c.brokers(1, 2, 3, 4)
    c.topic("t", [[4, 2, 3, 1]], isr=[[1, 2, 3]], leaders=[1], RemovingReplicas=[1], AddingReplicas=[4])
    records, resp = alter(c, version, isr=[1, 2, 3, 4])
    assert len(records) == 1 and only_partition(resp)["ErrorCode"] == error(expected)
    p = c.partition("t")
    assert state(p) == ([4, 2, 3], [2, 3, 4], 4, 6, 11) and p.adding_replicas == p.removing_replicas == ()


def test_alter_partition_completing_a_reassignment_that_keeps_the_leader():
    c = three_brokers(RemovingReplicas=[3])
    records, resp = alter(c, isr=[1, 2, 3])
    assert only_partition(resp) == {"PartitionIndex": 0, "ErrorCode": 0, "LeaderId": 1, "LeaderEpoch": 6,
                                    "Isr": [1, 2], "LeaderRecoveryState": 0, "PartitionEpoch": 11}


def test_alter_partition_answers_only_for_owned_topics():
    c = three_brokers()
    req = request("AlterPartitionRequest", 2, BrokerId=1, BrokerEpoch=100, Topics=[{
        "TopicId": topic_id(1), "Partitions": [{"PartitionIndex": 0, "LeaderEpoch": 5, "PartitionEpoch": 10,
                                                "NewIsr": [1, 2]}]}])
    decision = alter_partition(c.image, req, Context(now_ms=0, offset=1, owns=lambda tid: False))
    assert decision.records == [] and decision.response["data"]["Topics"] == []


# --- ElectLeaders ------------------------------------------------------------------------------------

def elect(c: Cluster, election_type: int | None, topics: dict[str, list[int]] | None, version: int = 1):
    fields = {} if election_type is None else {"ElectionType": election_type}
    partitions = None if topics is None else [{"Topic": t, "Partitions": ps} for t, ps in topics.items()]
    return decide(c, elect_leaders, request("ElectLeadersRequest", version, TopicPartitions=partitions, **fields))


def results(resp: dict) -> dict:
    return {(r["Topic"], p["PartitionId"]): p["ErrorCode"]
            for r in resp["data"]["ReplicaElectionResults"] for p in r["PartitionResult"]}


def test_elect_preferred_leaders():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2], [2, 3], [3, 1], [1, 3]], isr=[[1, 2], [2, 3], [1], [3]], leaders=[2, 2, 1, 3])
    records, resp = elect(c, None, {"t": [0, 1, 2, 3, 9], "nope": [0]}, version=0)  # v0: always PREFERRED
    assert results(resp) == {
        ("t", 0): 0,
        ("t", 1): error("ELECTION_NOT_NEEDED"),
        ("t", 2): error("PREFERRED_LEADER_NOT_AVAILABLE"),  # 3 is not in the ISR
        ("t", 3): error("PREFERRED_LEADER_NOT_AVAILABLE"),
        ("t", 9): error("UNKNOWN_TOPIC_OR_PARTITION"),
        ("nope", 0): error("UNKNOWN_TOPIC_OR_PARTITION"),
    }
    assert len(records) == 1
    assert state(c.partition("t", 0)) == ([1, 2], [1, 2], 1, 6, 11)


@pytest.mark.parametrize("broker_state", [dict(fenced=True), dict(shutdown=True)])
def test_elect_preferred_never_picks_an_ineligible_preferred_replica(broker_state):
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], leaders=[2])
    c.set_broker(1, **broker_state)
    records, resp = elect(c, 0, {"t": [0]})
    assert records == [] and results(resp) == {("t", 0): error("PREFERRED_LEADER_NOT_AVAILABLE")}


def test_elect_all_partitions_reports_only_elections_that_were_needed():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("a", [[1, 2], [2, 1]], n=1, leaders=[2, 2])
    c.topic("b", [[1, 2]], n=2)
    records, resp = elect(c, 0, None)
    assert resp["data"]["ReplicaElectionResults"] == [
        {"Topic": "a", "PartitionResult": [{"PartitionId": 0, "ErrorCode": 0, "ErrorMessage": None}]},
        {"Topic": "b", "PartitionResult": []}]
    assert c.partition("a", 0).leader == 1


def test_elect_unclean_leaders():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2], [1, 3], [1, 2]], isr=[[1], [1], [1]])
    c.set_broker(3, fenced=True)
    c.apply(broker_failover(c.image, 1, ctx()) + [c.broker_change(1, fenced=True)])
    c.topic("u", [[2]], n=2)
    records, resp = elect(c, 1, {"t": [0, 1], "u": [0]})
    assert results(resp) == {("t", 0): 0, ("t", 1): error("ELIGIBLE_LEADERS_NOT_AVAILABLE"),
                             ("u", 0): error("ELECTION_NOT_NEEDED")}
    p = c.partition("t", 0)
    assert state(p) == ([1, 2], [2], 2, 7, 12) and p.leader_recovery_state == 1
    assert c.partition("t", 2).leader == -1  # not asked for


def test_elect_leaders_unknown_election_type():
    c = three_brokers()
    records, resp = elect(c, 2, {"t": [0]})
    assert records == [] and resp["data"]["ErrorCode"] == error("INVALID_REQUEST")
