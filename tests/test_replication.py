"""``kraftlake.controller.dispatch.replication``: scenarios replayed through the image, each checked against both KIP-841
invariants, and the failover of a real Kafka log compared with what its controller wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftlake.metadata import uuids
from kraftlake.codec.logdir import read_partition_dir
from kraftlake.controller.decisions import Context, error_code
from kraftlake.codec.events import check_struct
from kraftlake.image.cluster_image import DIR_MIGRATING, ClusterImage
from kraftlake.image.replay import replay
from kraftlake.controller.replication import alter_partition, broker_failover, elect_leaders
from kraftlake.metadata.schemas import registry
from kraftlake.controller.topics import create_partitions, create_topics, delete_topics, new_topic_id

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
    # Kafka writes a fencing after the partition changes, a controlled shutdown before them: the
    # failover must not depend on whether the image already shows the broker's new state.
    if how == "fence":
        records = broker_failover(c.image, 1, ctx())
        check_kip841(c, records + [c.broker_change(1, fenced=True)])
    else:
        c.set_broker(1, shutdown=True)
        records = broker_failover(c.image, 1, ctx())
        check_kip841(c, records)
    assert len(records) == 3  # partition 3 has no replica on broker 1
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


# --- CreateTopics ------------------------------------------------------------------------------------

def creatable(name: str, partitions: int = -1, rf: int = -1, assignments: list[list[int]] | None = None,
              configs: dict[str, str | None] | None = None) -> dict:
    return {"Name": name, "NumPartitions": partitions, "ReplicationFactor": rf,
            "Assignments": [{"PartitionIndex": i, "BrokerIds": b} for i, b in enumerate(assignments or [])],
            "Configs": [{"Name": k, "Value": v} for k, v in (configs or {}).items()]}


def create(c: Cluster, *topics: dict, version: int = 7, validate_only: bool = False, context: Context | None = None):
    fields = {"validateOnly": validate_only} if version >= 1 else {}
    return decide(c, create_topics, request("CreateTopicsRequest", version, Topics=list(topics), **fields), context)


def outcome(resp: dict, key: str = "Topics", name: str = "Name") -> dict:
    return {t[name]: t["ErrorCode"] for t in resp["data"][key]}


def racked(c: Cluster, racks: dict[str, list[int]], **kwargs) -> None:
    for rack, ids in racks.items():
        for broker_id in ids:
            c.broker(broker_id, rack=rack, **kwargs)


def test_create_topic_places_replicas_across_racks():
    c = Cluster()
    racked(c, {"a": [1, 2], "b": [3, 4], "c": [5, 6]})
    records, resp = create(c, creatable("t", 6, 3))
    [result] = resp["data"]["Topics"]
    assert result["ErrorCode"] == 0 and result["NumPartitions"] == 6 and result["ReplicationFactor"] == 3
    assert result["TopicId"] == c.image.topic_ids["t"] and result["ErrorMessage"] is None
    rack = {b.id: b.rack for b in c.image.brokers.values()}
    partitions = [c.partition("t", i) for i in range(6)]
    for p in partitions:
        assert sorted(rack[r] for r in p.replicas) == ["a", "b", "c"]
        assert p.isr == p.replicas and p.leader == p.replicas[0] and (p.leader_epoch, p.partition_epoch) == (0, 0)
    # Striping: consecutive partitions start on consecutive racks, and every broker leads once.
    assert sorted(p.leader for p in partitions) == [1, 2, 3, 4, 5, 6]
    assert [rack[p.leader] for p in partitions[:3]] in (["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"])


def test_create_topic_placement_is_deterministic_per_offset():
    def place(offset: int) -> list[tuple[int, ...]]:
        c = Cluster()
        c.brokers(*range(1, 8))
        create(c, creatable("t", 12, 3), context=ctx(offset))
        return [c.partition("t", i).replicas for i in range(12)]

    assert place(41) == place(41)
    assert {place(o)[0] for o in range(20)} != {place(41)[0]}  # the offset seeds the start
    assert all(len(set(r)) == 3 for r in place(41))


def test_create_topic_never_leads_or_syncs_on_fenced_or_shutting_down_brokers():
    """Broker 4 is shutting down by its registration only (no heartbeat of this controller said so):
    Kafka still places replicas on it, and KIP-841 keeps it out of every ISR and leadership."""
    c = Cluster()
    c.brokers(1, 2)
    c.broker(3, fenced=True)
    c.broker(4, shutdown=True)
    records, resp = create(c, creatable("t", 8, 3))
    assert outcome(resp) == {"t": 0}
    placed = set()
    for i in range(8):
        p = c.partition("t", i)
        placed.update(p.replicas)
        assert p.leader in (1, 2) and p.isr == tuple(r for r in p.replicas if r not in (3, 4))
    assert 4 in placed


@pytest.mark.parametrize("topic, expected", [
    (creatable("t", 1, 4), "INVALID_REPLICATION_FACTOR"),  # 3 brokers
    (creatable("t", 1, 0), "INVALID_REPLICATION_FACTOR"),
    (creatable("t", 1, -2), "INVALID_REPLICATION_FACTOR"),
    (creatable("t", 0, 1), "INVALID_PARTITIONS"),
    (creatable("t", -5, 1), "INVALID_PARTITIONS"),
    (creatable("t", 1, 1, configs={"retention.ms": None}), "INVALID_CONFIG"),
    (creatable("a..b!"), "INVALID_TOPIC_EXCEPTION"),
    (creatable(".."), "INVALID_TOPIC_EXCEPTION"),
    (creatable(""), "INVALID_TOPIC_EXCEPTION"),
    (creatable("x" * 250), "INVALID_TOPIC_EXCEPTION"),
    (creatable("my.topic"), "INVALID_TOPIC_EXCEPTION"),  # collides with my_topic
    (creatable("my_topic"), "TOPIC_ALREADY_EXISTS"),
])
def test_create_topic_errors(topic, expected):
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("my_topic", [[1]], n=9)
    records, resp = create(c, topic)
    assert records == [] and outcome(resp) == {topic["Name"]: error(expected)}
    assert resp["data"]["Topics"][0]["ErrorMessage"]


def test_create_topic_with_every_broker_fenced():
    c = Cluster()
    c.brokers(1, 2, fenced=True)
    records, resp = create(c, creatable("t", 1, 1))
    assert outcome(resp) == {"t": error("INVALID_REPLICATION_FACTOR")}
    assert resp["data"]["Topics"][0]["ErrorMessage"] == "Unable to replicate the partition 1 time(s): " \
                                                       "All brokers are currently fenced."


def test_create_topic_defaults_and_name_limits():
    c = Cluster()
    c.brokers(1, 2, 3)
    records, resp = create(c, creatable("x" * 249), creatable("a-b_c.D9"),
                           context=ctx(num_partitions="4", default_replication_factor="2"))
    assert outcome(resp) == {"x" * 249: 0, "a-b_c.D9": 0}
    assert len(c.image.topics[c.image.topic_ids["a-b_c.D9"]].partitions) == 4
    assert all(len(p.replicas) == 2 for p in c.image.iter_partitions())


def test_create_topic_with_manual_assignments():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.broker(4, fenced=True)
    records, resp = create(c, creatable("t", assignments=[[4, 2, 1], [3, 4, 1]]))
    assert outcome(resp) == {"t": 0}
    assert [r["type"] for r in records] == ["TopicRecord", "PartitionRecord", "PartitionRecord"]
    assert state(c.partition("t", 0)) == ([4, 2, 1], [2, 1], 2, 0, 0)
    assert state(c.partition("t", 1)) == ([3, 4, 1], [3, 1], 3, 0, 0)


@pytest.mark.parametrize("assignments, expected", [
    ([[1, 2], [1, 7]], "INVALID_REPLICA_ASSIGNMENT"),  # unregistered
    ([[1, 1]], "INVALID_REPLICA_ASSIGNMENT"),  # twice
    ([[1, 2], [3]], "INVALID_REPLICA_ASSIGNMENT"),  # inconsistent replication factor
    ([[]], "INVALID_REPLICA_ASSIGNMENT"),
    ([[4, 5]], "INVALID_REPLICA_ASSIGNMENT"),  # only fenced / shutting down
])
def test_create_topic_manual_assignment_errors(assignments, expected):
    c = Cluster()
    c.brokers(1, 2, 3)
    c.broker(4, fenced=True)
    c.broker(5, shutdown=True)
    records, resp = create(c, creatable("t", assignments=assignments))
    assert records == [] and outcome(resp) == {"t": error(expected)}


def test_create_topic_manual_assignment_shape_errors():
    c = Cluster()
    c.brokers(1, 2)
    bad_index = creatable("a", assignments=[[1], [2]])
    bad_index["Assignments"][1]["PartitionIndex"] = 2
    dup_index = creatable("b", assignments=[[1], [2]])
    dup_index["Assignments"][1]["PartitionIndex"] = 0
    with_rf = creatable("c", rf=1, assignments=[[1]])
    with_count = creatable("d", partitions=1, assignments=[[1]])
    records, resp = create(c, bad_index, dup_index, with_rf, with_count)
    assert records == [] and outcome(resp) == {
        "a": error("INVALID_REPLICA_ASSIGNMENT"), "b": error("INVALID_REPLICA_ASSIGNMENT"),
        "c": error("INVALID_REQUEST"), "d": error("INVALID_REQUEST")}


def test_create_topics_duplicate_names_in_one_request():
    c = Cluster()
    c.brokers(1)
    records, resp = create(c, creatable("t"), creatable("u"), creatable("t"))
    assert outcome(resp) == {"t": error("INVALID_REQUEST"), "u": 0}
    assert list(c.image.topic_ids) == ["u"]


def test_create_topic_configs_become_config_records():
    c = Cluster()
    c.brokers(1)
    records, resp = create(c, creatable("t", configs={"cleanup.policy": "compact", "retention.ms": "1000"}))
    assert [r["type"] for r in records] == ["TopicRecord", "ConfigRecord", "ConfigRecord", "PartitionRecord"]
    assert c.image.configs[(2, "t")] == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert [cfg["Name"] for cfg in resp["data"]["Topics"][0]["Configs"]] == ["cleanup.policy", "retention.ms"]


def test_create_topics_validate_only_writes_nothing():
    c = Cluster()
    c.brokers(1, 2)
    records, resp = create(c, creatable("t", 2, 2), creatable("bad!"), validate_only=True)
    assert records == [] and outcome(resp) == {"t": 0, "bad!": error("INVALID_TOPIC_EXCEPTION")}
    assert c.image.topics == {}


def test_create_topic_ids_derive_from_name_and_offset():
    def topic_id_at(offset: int, name: str = "t") -> str:
        c = Cluster()
        c.brokers(1)
        create(c, creatable(name), context=ctx(offset))
        return c.image.topic_ids[name]

    assert topic_id_at(5) == topic_id_at(5)
    assert len({topic_id_at(5), topic_id_at(6), topic_id_at(5, "u")}) == 3
    assert new_topic_id("t", 5, [topic_id_at(5)]) != topic_id_at(5)


def test_create_topics_only_for_owned_ids():
    c = Cluster()
    c.brokers(1)
    mine = new_topic_id("mine", 1000, [])
    records, resp = create(c, creatable("mine"), creatable("theirs"),
                           context=Context(now_ms=0, offset=1000, owns=lambda tid: tid == mine))
    assert outcome(resp) == {"mine": 0} and list(c.image.topic_ids) == ["mine"]


def test_partition_records_follow_the_metadata_version():
    old, new = Cluster(metadata_version=16), Cluster(metadata_version=17)
    log_dir = uuids.from_bytes(bytes([7] * 16))
    for c in (old, new):
        c.broker(1, log_dirs=(log_dir,))
        c.broker(2)
    old_records, _ = create(old, creatable("t", assignments=[[1, 2]]))
    new_records, _ = create(new, creatable("t", assignments=[[1, 2]]))
    assert old_records[1]["version"] == 0 and new_records[1]["version"] == 1
    assert old.partition("t").directories == (DIR_MIGRATING, DIR_MIGRATING)
    assert new.partition("t").directories == (log_dir, DIR_MIGRATING)


def test_create_topics_v0_response():
    c = Cluster()
    c.brokers(1)
    records, resp = create(c, creatable("t"), version=0)
    assert resp["version"] == 0 and outcome(resp) == {"t": 0}


# --- CreatePartitions --------------------------------------------------------------------------------

def grow(c: Cluster, *topics: tuple, validate_only: bool = False, context: Context | None = None):
    entries = [{"Name": name, "Count": count, "Assignments": None if a is None else [{"BrokerIds": b} for b in a]}
               for name, count, a in topics]
    req = request("CreatePartitionsRequest", 3, Topics=entries, TimeoutMs=1000, ValidateOnly=validate_only)
    return decide(c, create_partitions, req, context)


def test_create_partitions_by_placement():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.broker(4, shutdown=True)
    c.topic("t", [[1, 2]])
    records, resp = grow(c, ("t", 4, None))
    assert outcome(resp, "Results") == {"t": 0} and len(records) == 3
    for pid in (1, 2, 3):  # 4 shuts down by its registration only: placed, never in sync (as in Kafka)
        p = c.partition("t", pid)
        assert len(set(p.replicas)) == 2 and p.isr == tuple(r for r in p.replicas if r != 4)
        assert (p.leader, p.leader_epoch, p.partition_epoch) == (p.isr[0], 0, 0)


def test_create_partitions_with_assignments():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.broker(4, fenced=True)
    c.topic("t", [[1, 2]])
    records, resp = grow(c, ("t", 3, [[4, 3], [2, 3]]))
    assert outcome(resp, "Results") == {"t": 0}
    assert state(c.partition("t", 1)) == ([4, 3], [3], 3, 0, 0)
    assert state(c.partition("t", 2)) == ([2, 3], [2, 3], 2, 0, 0)


@pytest.mark.parametrize("entry, expected", [
    (("t", 2, None), "INVALID_PARTITIONS"),  # no increase
    (("t", 1, None), "INVALID_PARTITIONS"),
    (("t", 4, [[1, 2]]), "INVALID_REPLICA_ASSIGNMENT"),  # 2 new partitions, 1 assignment
    (("t", 3, [[1]]), "INVALID_REPLICA_ASSIGNMENT"),  # replication factor 2
    (("t", 3, [[1, 9]]), "INVALID_REPLICA_ASSIGNMENT"),
    (("t", 3, [[4, 5]]), "INVALID_REPLICA_ASSIGNMENT"),  # nobody eligible
    (("nope", 3, None), "UNKNOWN_TOPIC_OR_PARTITION"),
])
def test_create_partitions_errors(entry, expected):
    c = Cluster()
    c.brokers(1, 2, 3)
    c.broker(4, fenced=True)
    c.broker(5, shutdown=True)
    c.topic("t", [[1, 2], [2, 3]])
    records, resp = grow(c, entry)
    assert records == [] and outcome(resp, "Results") == {entry[0]: error(expected)}


def test_create_partitions_validate_only_and_duplicates():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1]], n=1)
    c.topic("u", [[1]], n=2)
    records, resp = grow(c, ("t", 2, None), ("u", 2, None), ("u", 3, None), validate_only=True)
    assert records == [] and outcome(resp, "Results") == {"t": 0, "u": error("INVALID_REQUEST")}


# --- DeleteTopics ------------------------------------------------------------------------------------

def delete(c: Cluster, version: int = 6, *, names: list[str] = (), ids: list[str] = (), entries=(), context=None):
    if version < 6:
        req = request("DeleteTopicsRequest", version, TopicNames=list(names), TimeoutMs=1000)
    else:
        topics = [{"Name": n} for n in names] + [{"TopicId": i} for i in ids] + list(entries)
        req = request("DeleteTopicsRequest", version, Topics=topics, TimeoutMs=1000)
    return decide(c, delete_topics, req, context)


def deletions(resp: dict) -> list[tuple]:
    return [(r["Name"], r["TopicId"], r["ErrorCode"]) for r in resp["data"]["Responses"]]


@pytest.mark.parametrize("version", [0, 5, 6])
def test_delete_topics_by_name(version):
    c = Cluster()
    c.brokers(1)
    c.topic("t", [[1], [1]], n=1, configs={"retention.ms": "5"})
    c.topic("u", [[1]], n=2)
    records, resp = delete(c, version, names=["t", "nope"])
    assert deletions(resp) == [("t", topic_id(1), 0), ("nope", uuids.ZERO_UUID, error("UNKNOWN_TOPIC_OR_PARTITION"))]
    assert [r["type"] for r in records] == ["RemoveTopicRecord"]
    assert list(c.image.topic_ids) == ["u"] and (2, "t") not in c.image.configs


def test_delete_topics_by_id():
    c = Cluster()
    c.brokers(1)
    c.topic("t", [[1]], n=1)
    records, resp = delete(c, ids=[topic_id(1), topic_id(7)])
    assert deletions(resp) == [("t", topic_id(1), 0), (None, topic_id(7), error("UNKNOWN_TOPIC_ID"))]
    assert c.image.topics == {}


def test_delete_topics_request_errors():
    c = Cluster()
    c.brokers(1)
    c.topic("t", [[1]], n=1)
    c.topic("u", [[1]], n=2)
    records, resp = delete(c, names=["t", "t"], ids=[topic_id(2), topic_id(2)],
                           entries=[{"Name": "u", "TopicId": topic_id(2)}, {}])
    assert records == [] and deletions(resp) == [
        ("t", uuids.ZERO_UUID, error("INVALID_REQUEST")),
        (None, topic_id(2), error("INVALID_REQUEST")),
        ("u", topic_id(2), error("INVALID_REQUEST")),  # both name and id
        (None, uuids.ZERO_UUID, error("INVALID_REQUEST")),  # neither
    ]


@pytest.mark.parametrize("version, expected", [(2, "INVALID_REQUEST"), (3, "TOPIC_DELETION_DISABLED")])
def test_delete_topics_disabled(version, expected):
    c = Cluster()
    c.brokers(1)
    c.topic("t", [[1]])
    records, resp = delete(c, version, names=["t"], context=ctx(delete_topic_enable="false"))
    assert records == [] and deletions(resp) == [("t", topic_id(1), error(expected))]


def test_delete_topics_only_owned():
    c = Cluster()
    c.brokers(1)
    c.topic("t", [[1]], n=1)
    c.topic("u", [[1]], n=2)
    records, resp = delete(c, names=["t", "u", "nope"],
                           context=Context(now_ms=0, offset=1, owns=lambda tid: tid == topic_id(2)))
    assert [r[0] for r in deletions(resp)] == ["u", "nope"] and list(c.image.topic_ids) == ["t"]
