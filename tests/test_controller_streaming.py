"""The controller through the streaming job: hand-written request logs decided by Spark with 3 shards.

Every scenario is checked three ways:
1. the job's tables (brokers, topics, partitions, controller_log, responses, ...) equal ``replay_log`` run
   in-process on the same events read back from ``metadata_log``;
2. the outcomes Kafka's rules give, written here by hand: error names, the records each request caused,
   leaders, ISRs and epochs, brokers fenced or in controlled shutdown;
3. the KIP-841 invariants hold at the end.

A Spark run costs seconds on two cores, so the scenarios share one cluster and one log, decided in two
runs of one query (the second part of the log needs the topic ids the first part created, as a person
writing it would: AlterPartition v2+ names topics by id). Event time is explicit: sessions expire after
``broker.session.timeout.ms`` = 6000 (not Kafka's default, so the setting must reach the executors).
``auto.leader.rebalance.enable`` keeps Kafka's default (true), but the log spans seconds, less than one
``leader.imbalance.check.interval.seconds`` (300): no preferred leader comes back unless asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming_helpers import run_controller
from controller_scenarios import (
    ingest,
    logged_events,
    RequestLog,
    core_tables,
    incarnation,
    isr_change,
    new_topic,
    spark_tables,
)
from kraftlake.storage.ingest import ingest_source
from kraftlake.metadata import uuids
from kraftlake.controller.shards import shard_of_topic
from kraftlake.storage import Warehouse

SHARDS = 3
TIMEOUT = 6000
CONFIG = {"broker.session.timeout.ms": str(TIMEOUT)}
START_MS = 1_763_580_000_000
BATCH = 8  # records per micro-batch in the first run: sessions must survive the state store

# Kafka's error codes (org.apache.kafka.common.protocol.Errors), by hand.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_ALREADY_EXISTS = 36
INVALID_REPLICATION_FACTOR = 38
OPERATION_NOT_ATTEMPTED = 55
FENCED_LEADER_EPOCH = 74
STALE_BROKER_EPOCH = 77
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_ID = 100
DUPLICATE_BROKER_REGISTRATION = 101
BROKER_ID_NOT_REGISTERED = 102
INELIGIBLE_REPLICA = 107

NO_LEADER, UNCHANGED = -1, -2  # PartitionChangeRecord.Leader: none, and "leader unchanged"
FENCE, UNFENCE = 1, -1  # BrokerRegistrationChangeRecord.Fenced
GHOST_ID = uuids.from_bytes(bytes([0x42] * 16))  # a topic id no one created


@dataclass
class Run:
    at: dict[str, int]  # offsets of the scenario's requests, by what they do
    epoch: dict[int, int]  # broker epochs: the offset of the registration (Kafka's rule)
    spark: dict[str, list[dict]]
    core: dict[str, list[dict]]
    events: list[dict]  # metadata_log, read back

    def response(self, name: str) -> dict:
        [row] = [r for r in self.spark["responses"] if r["offset"] == self.at[name]]
        return row

    def records(self, name: str) -> list[dict]:
        """What the request wrote to controller_log (expired sessions first), in each shard's order."""
        rows = [r for r in self.spark["controller_log"] if r["offset"] == self.at[name]]
        return sorted(rows, key=lambda r: (r["shard"], r["seq"]))

    def broker(self, broker_id: int) -> tuple[int, bool, bool] | None:
        rows = [r for r in self.spark["brokers"] if r["broker_id"] == broker_id]
        return (rows[0]["epoch"], rows[0]["fenced"], rows[0]["in_controlled_shutdown"]) if rows else None

    def partition(self, topic: str, partition: int) -> tuple:
        """(replicas, leader, ISR, leader epoch, partition epoch)."""
        [p] = [r for r in self.spark["partitions"] if r["topic"] == topic and r["partition"] == partition]
        return p["replicas"], p["leader"], p["isr"], p["leader_epoch"], p["partition_epoch"]

    def topic_ids(self) -> dict[str, str]:
        """Every topic the log created, from the CreateTopics responses."""
        return {t["Name"]: t["TopicId"] for r in self.spark["responses"] if r["request_type"] == "CreateTopicsRequest"
                for t in r["data"]["Topics"] if t["ErrorCode"] == NONE}


def changes(records: list[dict], ids: dict[str, str]) -> dict[tuple[str, int], tuple[int, list[int] | None]]:
    """PartitionChangeRecords as {(topic, partition): (Leader, Isr)}: -2 and None mean unchanged."""
    names = {topic_id: name for name, topic_id in ids.items()}
    out = {}
    for r in records:
        if r["type"] == "PartitionChangeRecord":
            key = (names[r["data"]["TopicId"]], r["data"]["PartitionId"])
            assert key not in out, f"two changes of {key} for one request"
            out[key] = (r["data"]["Leader"], r["data"]["Isr"])
    return out


def broker_changes(records: list[dict]) -> list[tuple]:
    """BrokerRegistrationChangeRecords as (broker, epoch, Fenced, InControlledShutdown)."""
    return [(r["data"]["BrokerId"], r["data"]["BrokerEpoch"], r["data"]["Fenced"], r["data"]["InControlledShutdown"])
            for r in records if r["type"] == "BrokerRegistrationChangeRecord"]


def types(records: list[dict]) -> list[str]:
    return [r["type"] for r in records]


def topic_errors(response: dict, key: str = "Topics", name: str = "Name") -> dict[str, int]:
    entries = response["data"][key]
    assert len(entries) == len({e[name] for e in entries}), f"a topic answered twice: {entries}"
    return {e[name]: e["ErrorCode"] for e in entries}


# --- the scenario log --------------------------------------------------------------------------------

def first_part(log: RequestLog, at: dict[str, int], epoch: dict[int, int]) -> None:
    """Brokers register and heartbeat; topics are assigned by hand; broker 4 shuts down under control;
    broker 3 goes silent and its session expires; it comes back."""
    at["metadata.version"] = log.add("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 19})
    for broker_id, rack in ((1, "a"), (2, "b"), (3, "c"), (4, "a")):
        at[f"register {broker_id}"] = epoch[broker_id] = log.register(broker_id, rack=rack)
    at["heartbeat 1 behind"] = log.heartbeat(1, epoch[1], seen=epoch[1] - 1)
    for broker_id in (1, 2, 3, 4):
        at[f"unfence {broker_id}"] = log.heartbeat(broker_id, epoch[broker_id])
    at["register 2 again"] = log.register(2, generation=2, rack="b")
    at["heartbeat 3 stale"] = log.heartbeat(3, epoch[2])
    at["heartbeat 9 unknown"] = log.heartbeat(9, epoch[1])
    at["create assigned"] = log.create_topics(
        new_topic("orders", assignments=[[1, 2, 3], [2, 3, 4], [4, 1, 2]]),
        new_topic("shipments", assignments=[[4, 3]]),
        new_topic("audit", assignments=[[3, 4, 1]]))

    at["4 wants to shut down"] = log.heartbeat(4, epoch[4], want_shut_down=True)
    at["4 asks again"] = log.heartbeat(4, epoch[4], want_shut_down=True)
    for broker_id in (1, 2, 3):  # the others catch up with the records that moved 4's leaderships
        at[f"{broker_id} caught up"] = log.heartbeat(broker_id, epoch[broker_id])
    silent_since = log.now  # broker 3's last heartbeat
    at["4 shuts down"] = log.heartbeat(4, epoch[4], want_shut_down=True)

    for offset_ms in (3000, 5980):
        log.heartbeat(1, epoch[1], at=silent_since + offset_ms)
        log.heartbeat(2, epoch[2], at=silent_since + offset_ms + 10)
    at["3 silent for the timeout"] = log.heartbeat(1, epoch[1], at=silent_since + TIMEOUT)
    at["3 silent 1 ms more"] = log.heartbeat(2, epoch[2], at=silent_since + TIMEOUT + 1)
    at["elect audit while 3 is fenced"] = log.elect_preferred({"audit": [0]})
    at["3 comes back"] = log.heartbeat(3, epoch[3])
    at["elect audit after 3 is back"] = log.elect_preferred({"audit": [0]})


def second_part(log: RequestLog, at: dict[str, int], epoch: dict[int, int], ids: dict[str, str]) -> None:
    """ISR changes asked by the leaders, preferred elections, topics placed and deleted; broker 5
    registers, leads a partition and is unregistered."""
    at["alter by 1"] = log.alter_partition(1, epoch[1], [
        {"TopicId": ids["orders"], "Partitions": [isr_change(0, 0, 1, [1, 2, 3]), isr_change(2, 0, 1, [1])]},
        {"TopicId": ids["audit"], "Partitions": [isr_change(0, 1, 2, [1, 3])]},
        {"TopicId": GHOST_ID, "Partitions": [isr_change(0, 0, 0, [1])]}])
    at["alter adds 4 (v2)"] = log.alter_partition(1, epoch[1], [
        {"TopicId": ids["orders"], "Partitions": [isr_change(2, 1, 1, [1, 2, 4])]}])
    at["alter adds 4 (v1)"] = log.alter_partition(1, epoch[1], [
        {"TopicName": "orders", "Partitions": [isr_change(2, 1, 1, [1, 2, 4])]}], version=1)
    at["alter shrinks (v3)"] = log.alter_partition(1, epoch[1], [
        {"TopicId": ids["orders"], "Partitions": [isr_change(0, 0, 2, [1, 3], epochs=epoch)]}], version=3)
    at["elect preferred"] = log.elect_preferred({"audit": [0], "orders": [0], "ghost": [0]})
    at["create placed"] = log.create_topics(
        new_topic("placed", 6, 3), new_topic("orders"), new_topic("too-wide", 1, 5), new_topic("refunds", 2, 2))
    at["delete"] = log.delete_topics("refunds", "ghost", "placed")
    at["register 5"] = epoch[5] = log.register(5, rack="b")
    at["unfence 5"] = log.heartbeat(5, epoch[5])
    at["create on 5"] = log.create_topics(new_topic("moved", assignments=[[5, 1]]))
    at["unregister 5"] = log.unregister(5)
    at["unregister 9"] = log.unregister(9)
    at["heartbeat 5 unregistered"] = log.heartbeat(5, epoch[5])


@pytest.fixture(scope="module")
def story(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("controller-story")
    warehouse = Warehouse(str(root / "warehouse"), spark=spark)
    checkpoint = root / "checkpoint"
    at: dict[str, int] = {}
    epoch: dict[int, int] = {}

    log = RequestLog(first_offset=0, start_ms=START_MS)
    first_part(log, at, epoch)
    ingest(warehouse, log, root / "first.jsonl")
    run_controller(warehouse, checkpoint, SHARDS, BATCH, CONFIG)
    ids = Run(at, epoch, spark_tables(warehouse), {}, []).topic_ids()

    rest = RequestLog(first_offset=log.last_offset + 1, start_ms=log.now + log.step_ms)
    second_part(rest, at, epoch, ids)
    ingest(warehouse, rest, root / "second.jsonl")
    run_controller(warehouse, checkpoint, SHARDS, None, CONFIG)
    events = logged_events(warehouse)
    return Run(at, epoch, spark_tables(warehouse), core_tables(events, SHARDS, CONFIG), events)


# --- (1) the streaming job equals the core -------------------------------------------------------------

TABLES = ("brokers", "topics", "configs", "partitions", "partition_history", "broker_history", "features", "rejected",
          "controller_log", "responses")


def assert_same_table(actual: list[dict], expected: list[dict], what: str) -> None:
    missing = [r for r in expected if r not in actual]
    unexpected = [r for r in actual if r not in expected]
    assert actual == expected, (f"{what}: {len(actual)} rows, expected {len(expected)}\n"
                                f"  missing: {missing[:3]}\n  unexpected: {unexpected[:3]}")


@pytest.mark.parametrize("table", TABLES)
def test_the_streaming_tables_equal_replay_log(story: Run, table: str) -> None:
    assert_same_table(story.spark[table], story.core[table], f"{table}: Spark vs replay_log")


def test_one_event_per_batch_in_process_equals_replay_log(story: Run) -> None:
    """The state store between every two events (topics come back sorted, the controller's soft state
    through JSON) changes no table, controller_log's order and seq included."""
    batched = core_tables(story.events, SHARDS, CONFIG, batch=1)
    for table in TABLES:
        assert_same_table(batched[table], story.core[table], f"{table}: one event per batch vs replay_log")


def test_every_request_is_answered_once(story: Run) -> None:
    offsets = [r["offset"] for r in story.spark["responses"]]
    assert len(offsets) == len(set(offsets))
    requests = {offset for name, offset in story.at.items() if name != "metadata.version"}
    assert requests <= set(offsets)
    assert story.spark["rejected"] == []
    span = story.events[-1]["timestamp"] - story.events[0]["timestamp"]
    assert span < 300_000, "the log must stay within one leader-imbalance check interval"


def test_the_scenario_topics_live_on_different_shards(story: Run) -> None:
    """The merges are exercised only if the topics of one request are decided by different shards."""
    shard = {name: shard_of_topic(topic_id, SHARDS) for name, topic_id in story.topic_ids().items()}
    assert len(set(shard.values())) == SHARDS, shard
    assert shard["orders"] != shard["audit"], shard
    assert len({shard["orders"], shard["shipments"], shard["audit"]}) == SHARDS, shard
    assert len({shard["placed"], shard["refunds"]}) > 1, shard


# --- (2) what Kafka's rules say, request by request ----------------------------------------------------

def heartbeat_answer(run: Run, name: str) -> tuple:
    """(error name, IsCaughtUp, IsFenced, ShouldShutDown)."""
    row = run.response(name)
    assert (row["request_type"], row["type"]) == ("BrokerHeartbeatRequest", "BrokerHeartbeatResponse")
    data = row["data"]
    return row["error_name"], data["IsCaughtUp"], data["IsFenced"], data["ShouldShutDown"]


def test_a_new_broker_registers_fenced_with_its_registration_offset_as_epoch(story: Run) -> None:
    for broker_id, rack in ((1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b")):
        name = f"register {broker_id}"
        row = story.response(name)
        assert (row["error_name"], row["data"]["BrokerEpoch"]) == ("NONE", story.at[name])
        [record] = story.records(name)
        assert record["type"] == "RegisterBrokerRecord" and record["shard"] == 0
        data = record["data"]
        assert (data["BrokerId"], data["BrokerEpoch"], data["Fenced"], data["InControlledShutdown"], data["Rack"]) == (
            broker_id, story.at[name], True, False, rack)


def test_another_incarnation_of_a_live_broker_is_refused(story: Run) -> None:
    row = story.response("register 2 again")
    assert (row["error_name"], row["error_code"], row["data"]["BrokerEpoch"]) == (
        "DUPLICATE_BROKER_REGISTRATION", DUPLICATE_BROKER_REGISTRATION, -1)
    assert story.records("register 2 again") == []
    [broker] = [b for b in story.spark["brokers"] if b["broker_id"] == 2]
    assert (broker["epoch"], broker["incarnation_id"]) == (story.epoch[2], incarnation(2, generation=1))


def test_a_broker_is_unfenced_once_it_has_caught_up_with_its_registration(story: Run) -> None:
    assert heartbeat_answer(story, "heartbeat 1 behind") == ("NONE", False, True, False)
    assert story.records("heartbeat 1 behind") == []
    for broker_id in (1, 2, 3, 4, 5):
        name = f"unfence {broker_id}"
        assert heartbeat_answer(story, name) == ("NONE", True, False, False)
        assert broker_changes(story.records(name)) == [(broker_id, story.epoch[broker_id], UNFENCE, 0)]
        assert types(story.records(name)) == ["BrokerRegistrationChangeRecord"]


@pytest.mark.parametrize("name", ["heartbeat 3 stale", "heartbeat 9 unknown", "heartbeat 5 unregistered"])
def test_a_heartbeat_for_another_epoch_or_broker_is_stale(story: Run, name: str) -> None:
    row = story.response(name)
    assert (row["error_name"], row["error_code"]) == ("STALE_BROKER_EPOCH", STALE_BROKER_EPOCH)
    assert story.records(name) == []


def test_want_shut_down_persists_a_controlled_shutdown_and_moves_leadership(story: Run) -> None:
    ids = story.topic_ids()
    assert heartbeat_answer(story, "4 wants to shut down") == ("NONE", True, False, False)
    records = story.records("4 wants to shut down")
    # the persisted state first (v1: the version with the field), written once, by shard 0
    first = records[0]
    assert (first["shard"], first["seq"], first["type"], first["version"]) == (
        0, 0, "BrokerRegistrationChangeRecord", 1)
    assert broker_changes(records) == [(4, story.epoch[4], 0, 1)]
    # then 4 leaves every ISR; where it led, the first replica (assignment order) in the ISR leads
    assert changes(records, ids) == {
        ("orders", 1): (UNCHANGED, [2, 3]),
        ("orders", 2): (1, [1, 2]),
        ("shipments", 0): (3, [3]),
        ("audit", 0): (UNCHANGED, [3, 1]),
    }
    # it leads nothing now, but brokers 1-3 have not seen those records yet
    assert heartbeat_answer(story, "4 asks again") == ("NONE", True, False, False)
    assert story.records("4 asks again") == []
    # once they have, it may shut down: it is fenced, and nothing is left to move
    assert heartbeat_answer(story, "4 shuts down") == ("NONE", True, True, True)
    assert broker_changes(story.records("4 shuts down")) == [(4, story.epoch[4], FENCE, 0)]
    assert types(story.records("4 shuts down")) == ["BrokerRegistrationChangeRecord"]
    assert story.broker(4) == (story.epoch[4], True, True)


def test_a_silent_broker_is_fenced_once_its_session_expired_and_not_a_millisecond_before(story: Run) -> None:
    ids = story.topic_ids()
    assert heartbeat_answer(story, "3 silent for the timeout") == ("NONE", True, False, False)
    assert story.records("3 silent for the timeout") == []
    assert heartbeat_answer(story, "3 silent 1 ms more") == ("NONE", True, False, False)
    records = story.records("3 silent 1 ms more")
    assert changes(records, ids) == {
        ("orders", 0): (UNCHANGED, [1, 2]),
        ("orders", 1): (UNCHANGED, [2]),
        ("shipments", 0): (NO_LEADER, None),  # 3 was its last ISR member: offline, and it stays in the ISR
        ("audit", 0): (1, [1]),
    }
    assert broker_changes(records) == [(3, story.epoch[3], FENCE, 0)]
    shard0 = [r["type"] for r in records if r["shard"] == 0]
    assert shard0[-1] == "BrokerRegistrationChangeRecord", "Kafka fences after the partitions moved"


def test_a_broker_that_comes_back_leads_its_offline_partitions_but_not_its_preferred_ones(story: Run) -> None:
    ids = story.topic_ids()
    assert heartbeat_answer(story, "3 comes back") == ("NONE", True, False, False)
    records = story.records("3 comes back")
    assert broker_changes(records) == [(3, story.epoch[3], UNFENCE, 0)]
    assert changes(records, ids) == {("shipments", 0): (3, None)}
    for name in ("elect audit while 3 is fenced", "elect audit after 3 is back"):  # 3 is not in audit's ISR
        row = story.response(name)
        assert row["error_name"] == "NONE" and story.records(name) == []
        assert row["data"]["ReplicaElectionResults"] == [{"Topic": "audit", "PartitionResult": [
            {"PartitionId": 0, "ErrorCode": PREFERRED_LEADER_NOT_AVAILABLE,
             "ErrorMessage": "The preferred leader was not available."}]}]  # Kafka's ApiError(error) default


def alter_results(run: Run, name: str) -> dict[tuple[str, int], dict]:
    """{(topic id or name, partition): result without PartitionIndex}, each answered once.

    Compared as a mapping: the merged answer lists topics in shard order, where Kafka keeps the
    request's order (clients match answers by topic, so only the order differs)."""
    row = run.response(name)
    assert (row["request_type"], row["type"], row["error_name"]) == ("AlterPartitionRequest", "AlterPartitionResponse",
                                                                     "NONE")
    out = {}
    for topic in row["data"]["Topics"]:
        for p in topic["Partitions"]:
            key = (topic["TopicId"] if row["version"] >= 2 else topic["TopicName"], p["PartitionIndex"])
            assert key not in out, f"{key} answered twice"
            out[key] = {k: v for k, v in p.items() if k != "PartitionIndex"}
    return out


def accepted(leader: int, leader_epoch: int, isr: list[int], partition_epoch: int) -> dict:
    return {"ErrorCode": NONE, "LeaderId": leader, "LeaderEpoch": leader_epoch, "Isr": isr,
            "LeaderRecoveryState": 0, "PartitionEpoch": partition_epoch}


def refused(error: int) -> dict:
    """A refused partition: only the error is set, the rest keeps AlterPartitionResponse.json's defaults
    (no default given: 0), as Kafka's ReplicationControlManager answers."""
    return {"ErrorCode": error, "LeaderId": 0, "LeaderEpoch": 0, "Isr": [], "LeaderRecoveryState": 0,
            "PartitionEpoch": 0}


def test_alter_partition_expands_and_shrinks_isrs_and_refuses_per_partition(story: Run) -> None:
    ids = story.topic_ids()
    # one request over three topics, each decided by its own shard, answered as one
    assert alter_results(story, "alter by 1") == {
        (ids["orders"], 0): accepted(1, 0, [1, 2, 3], 2),  # 3 is back: it may rejoin
        (ids["orders"], 2): refused(FENCED_LEADER_EPOCH),  # the leader epoch is 1 since 4 shut down
        (ids["audit"], 0): accepted(1, 1, [1, 3], 3),
        (GHOST_ID, 0): refused(UNKNOWN_TOPIC_ID),
    }
    assert changes(story.records("alter by 1"), ids) == {("orders", 0): (UNCHANGED, [1, 2, 3]),
                                                        ("audit", 0): (UNCHANGED, [1, 3])}
    # KIP-841: broker 4 is fenced and in controlled shutdown, so it may not join an ISR
    assert alter_results(story, "alter adds 4 (v2)") == {(ids["orders"], 2): refused(INELIGIBLE_REPLICA)}
    assert alter_results(story, "alter adds 4 (v1)") == {("orders", 2): refused(OPERATION_NOT_ATTEMPTED)}
    assert story.records("alter adds 4 (v2)") == story.records("alter adds 4 (v1)") == []
    # v3 names the broker epochs the leader saw
    assert alter_results(story, "alter shrinks (v3)") == {(ids["orders"], 0): accepted(1, 0, [1, 3], 3)}
    assert changes(story.records("alter shrinks (v3)"), ids) == {("orders", 0): (UNCHANGED, [1, 3])}


def test_preferred_election_once_the_preferred_replica_is_back_in_sync(story: Run) -> None:
    ids = story.topic_ids()
    row = story.response("elect preferred")
    assert (row["type"], row["version"], row["error_name"]) == ("ElectLeadersResponse", 1, "NONE")
    results = {(r["Topic"], p["PartitionId"]): p["ErrorCode"]  # a mapping: see alter_results on order
               for r in row["data"]["ReplicaElectionResults"] for p in r["PartitionResult"]}
    assert len(results) == sum(len(r["PartitionResult"]) for r in row["data"]["ReplicaElectionResults"]) == 3
    assert results == {("audit", 0): NONE, ("orders", 0): ELECTION_NOT_NEEDED,
                       ("ghost", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert changes(story.records("elect preferred"), ids) == {("audit", 0): (3, None)}


def test_create_topics_with_assignments(story: Run) -> None:
    ids = story.topic_ids()
    row = story.response("create assigned")
    assert row["error_name"] is None  # CreateTopicsResponse has per-topic errors only
    assert [(t["Name"], t["ErrorCode"], t["NumPartitions"], t["ReplicationFactor"]) for t in row["data"]["Topics"]] == [
        ("orders", NONE, 3, 3), ("shipments", NONE, 1, 2), ("audit", NONE, 1, 3)]
    records = story.records("create assigned")
    assert sorted(r["data"]["Name"] for r in records if r["type"] == "TopicRecord") == ["audit", "orders", "shipments"]
    names = {topic_id: name for name, topic_id in ids.items()}
    created = {(names[r["data"]["TopicId"]], r["data"]["PartitionId"]):
               (r["data"]["Replicas"], r["data"]["Isr"], r["data"]["Leader"], r["data"]["LeaderEpoch"],
                r["data"]["PartitionEpoch"])
               for r in records if r["type"] == "PartitionRecord"}
    assert created == {("orders", 0): ([1, 2, 3], [1, 2, 3], 1, 0, 0),
                       ("orders", 1): ([2, 3, 4], [2, 3, 4], 2, 0, 0),
                       ("orders", 2): ([4, 1, 2], [4, 1, 2], 4, 0, 0),
                       ("shipments", 0): ([4, 3], [4, 3], 4, 0, 0),
                       ("audit", 0): ([3, 4, 1], [3, 4, 1], 3, 0, 0)}
    for r in records:
        if r["type"] == "PartitionRecord":  # partition records are written by their topic's shard
            assert r["shard"] == shard_of_topic(r["data"]["TopicId"], SHARDS)


def test_create_topics_places_replicas_on_serving_brokers_and_answers_every_topic_once(story: Run) -> None:
    ids = story.topic_ids()
    row = story.response("create placed")
    assert [(t["Name"], t["ErrorCode"]) for t in row["data"]["Topics"]] == [
        ("placed", NONE), ("orders", TOPIC_ALREADY_EXISTS), ("too-wide", INVALID_REPLICATION_FACTOR), ("refunds", NONE)]
    by_name = {t["Name"]: t for t in row["data"]["Topics"]}
    assert (by_name["placed"]["NumPartitions"], by_name["placed"]["ReplicationFactor"]) == (6, 3)
    assert (by_name["refunds"]["NumPartitions"], by_name["refunds"]["ReplicationFactor"]) == (2, 2)
    records = story.records("create placed")
    assert sorted(r["data"]["Name"] for r in records if r["type"] == "TopicRecord") == ["placed", "refunds"]
    placed = [r["data"] for r in records if r["type"] == "PartitionRecord" and r["data"]["TopicId"] == ids["placed"]]
    refunds = [r["data"] for r in records if r["type"] == "PartitionRecord" and r["data"]["TopicId"] == ids["refunds"]]
    assert sorted(p["PartitionId"] for p in placed) == list(range(6))
    assert sorted(p["PartitionId"] for p in refunds) == [0, 1]
    rack = {1: "a", 2: "b", 3: "c"}
    for p in placed + refunds:
        # 4 is fenced and shut down, so only 1, 2 and 3 (one per rack) can hold replicas
        assert set(p["Replicas"]) <= {1, 2, 3} and len({rack[b] for b in p["Replicas"]}) == len(p["Replicas"])
        assert p["Isr"] == p["Replicas"] and p["Leader"] == p["Replicas"][0]
        assert (p["LeaderEpoch"], p["PartitionEpoch"]) == (0, 0)
    assert all(len(p["Replicas"]) == 3 for p in placed) and all(len(p["Replicas"]) == 2 for p in refunds)
    # striped placement: leadership of the new partitions is spread evenly over the serving brokers
    assert sorted(p["Leader"] for p in placed) == [1, 1, 2, 2, 3, 3]


def test_delete_topics(story: Run) -> None:
    ids = story.topic_ids()
    row = story.response("delete")
    assert [(t["Name"], t["TopicId"], t["ErrorCode"]) for t in row["data"]["Responses"]] == [
        ("refunds", ids["refunds"], NONE), ("ghost", "AAAAAAAAAAAAAAAAAAAAAA", UNKNOWN_TOPIC_OR_PARTITION),
        ("placed", ids["placed"], NONE)]
    records = story.records("delete")
    assert sorted((r["type"], r["data"]["TopicId"]) for r in records) == sorted(
        [("RemoveTopicRecord", ids["refunds"]), ("RemoveTopicRecord", ids["placed"])])
    assert sorted(t["name"] for t in story.spark["topics"]) == ["audit", "moved", "orders", "shipments"]
    assert {p["topic"] for p in story.spark["partitions"]} == {"audit", "moved", "orders", "shipments"}


def test_unregister_broker_moves_its_partitions_first(story: Run) -> None:
    ids = story.topic_ids()
    assert [(t["Name"], t["ErrorCode"]) for t in story.response("create on 5")["data"]["Topics"]] == [("moved", NONE)]
    [created] = [r["data"] for r in story.records("create on 5") if r["type"] == "PartitionRecord"]
    assert (created["Replicas"], created["Isr"], created["Leader"]) == ([5, 1], [5, 1], 5)
    row = story.response("unregister 5")
    assert row["error_name"] == "NONE"
    records = story.records("unregister 5")
    assert changes(records, ids) == {("moved", 0): (1, [1])}
    [unregister] = [r for r in records if r["type"] == "UnregisterBrokerRecord"]
    assert (unregister["shard"], unregister["data"]["BrokerId"], unregister["data"]["BrokerEpoch"]) == (
        0, 5, story.epoch[5])
    assert story.broker(5) is None
    row = story.response("unregister 9")
    assert (row["error_name"], row["error_code"]) == ("BROKER_ID_NOT_REGISTERED", BROKER_ID_NOT_REGISTERED)
    assert story.records("unregister 9") == []


def test_broker_history_says_why_with_the_request_this_controller_decided(story: Run) -> None:
    """Each state change of the scenario, its cause and the request that decided it (at the row's offset)."""
    rows = {(r["broker_id"], r["state"], r["offset"]): (r["cause"], r["cause_offset"], r["cause_type"], r["record"])
            for r in story.spark["broker_history"]}
    at, heartbeat, change = story.at, "BrokerHeartbeatRequest", "BrokerRegistrationChangeRecord"

    def row(broker: int, state: str, name: str) -> tuple:
        return rows[(broker, state, at[name])]

    for broker in (1, 2, 3, 4, 5):
        assert row(broker, "registered", f"register {broker}") == (
            "registration", at[f"register {broker}"], "BrokerRegistrationRequest", "RegisterBrokerRecord")
        assert row(broker, "unfenced", f"unfence {broker}") == ("caught_up", at[f"unfence {broker}"], heartbeat, change)
    assert row(4, "controlled_shutdown", "4 wants to shut down") == (
        "shutdown_requested", at["4 wants to shut down"], heartbeat, change)
    assert row(4, "fenced", "4 shuts down") == ("controlled_shutdown_completed", at["4 shuts down"], heartbeat, change)
    # broker 2's heartbeat found broker 3 silent for longer than the session timeout
    assert row(3, "fenced", "3 silent 1 ms more") == ("session_expired", at["3 silent 1 ms more"], heartbeat, change)
    assert row(3, "unfenced", "3 comes back") == ("caught_up", at["3 comes back"], heartbeat, change)
    assert row(5, "unregistered", "unregister 5") == (
        "unregistration_request", at["unregister 5"], "UnregisterBrokerRequest", "UnregisterBrokerRecord")
    assert len(rows) == 5 * 2 + 2 + 2 + 1, "a state change the scenario does not make"


def test_partition_history_names_the_event_behind_each_change(story: Run) -> None:
    at = story.at
    kinds: dict[int, set] = {}
    for r in story.spark["partition_history"]:
        kinds.setdefault(r["offset"], set()).add((r["cause_kind"], r["cause_offset"], r["cause_broker"]))
    assert kinds[at["4 wants to shut down"]] == {("controlled_shutdown", at["4 wants to shut down"], 4)}
    assert kinds[at["3 silent 1 ms more"]] == {("fenced", at["3 silent 1 ms more"], 3)}
    assert kinds[at["3 comes back"]] == {("unfenced", at["3 comes back"], 3)}
    assert kinds[at["unregister 5"]] == {("unregistered", at["unregister 5"], 5)}
    assert kinds[at["alter by 1"]] == {("isr_change", at["alter by 1"], None)}
    assert kinds[at["elect preferred"]] == {("leader_election", at["elect preferred"], None)}
    assert kinds[at["create placed"]] == {("topic_created", at["create placed"], None)}
    assert kinds[at["delete"]] == {("topic_deleted", at["delete"], None)}


def test_the_final_brokers_and_partitions(story: Run) -> None:
    e = story.epoch
    assert {b["broker_id"]: story.broker(b["broker_id"]) for b in story.spark["brokers"]} == {
        1: (e[1], False, False), 2: (e[2], False, False), 3: (e[3], False, False), 4: (e[4], True, True)}
    assert {(p["topic"], p["partition"]): story.partition(p["topic"], p["partition"])
            for p in story.spark["partitions"]} == {
        # (replicas, leader, ISR, leader epoch, partition epoch)
        ("orders", 0): ([1, 2, 3], 1, [1, 3], 0, 3),  # -3 (expiry), +3 (alter), -2 (alter v3)
        ("orders", 1): ([2, 3, 4], 2, [2], 0, 2),  # -4 (shutdown), -3 (expiry)
        ("orders", 2): ([4, 1, 2], 1, [1, 2], 1, 1),  # 4 shut down: 1 leads
        ("shipments", 0): ([4, 3], 3, [3], 3, 3),  # 3 leads, offline, leads again
        ("audit", 0): ([3, 4, 1], 3, [1, 3], 2, 4),  # 1 leads while 3 is away, then the preferred 3
        ("moved", 0): ([5, 1], 1, [1], 1, 1),  # 5 unregistered
    }


# --- (3) KIP-841 at the end ----------------------------------------------------------------------------

def assert_kip841(tables: dict[str, list[dict]]) -> None:
    """No fenced or shutting-down broker leads or is in an ISR, except the last ISR member of a
    partition left without a leader; every leader is in its ISR."""
    serving = {b["broker_id"] for b in tables["brokers"] if not b["fenced"] and not b["in_controlled_shutdown"]}
    for p in tables["partitions"]:
        where = f"{p['topic']}-{p['partition']} (leader {p['leader']}, ISR {p['isr']}; serving {sorted(serving)})"
        if p["leader"] == NO_LEADER:
            assert len(p["isr"]) == 1 and p["isr"][0] not in serving, where
        else:
            assert p["leader"] in serving and p["leader"] in p["isr"], where
            assert set(p["isr"]) <= serving, where


def test_kip841_invariants_hold_at_the_end(story: Run) -> None:
    assert_kip841(story.spark)


# --- a real log, then what-if requests ------------------------------------------------------------------

WHAT_IF_LOG = "single-broker-restarts"  # one broker, unfenced at the end of the log; no topics
KAFKA_SESSION_TIMEOUT = 9000  # broker.session.timeout.ms, Kafka's default (no kafka_config given)
HOUR = 3_600_000


def test_what_if_requests_after_a_real_log(spark: SparkSession, fixtures_dir: Path, tmp_path: Path) -> None:
    """A controller takes over the real log an hour after its last record: the heartbeats that kept the
    broker alive meanwhile went to the real controller and were never logged, so its session starts at
    the takeover; then it goes silent, and Kafka's default session timeout fences it."""
    oracle = json.loads((fixtures_dir / WHAT_IF_LOG / "expected-image.json").read_text())
    [(broker_id, broker)] = [(int(b), v) for b, v in oracle["brokers"].items()]
    assert not broker["fenced"] and not broker["in_controlled_shutdown"]
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    summary = ingest_source(warehouse, str(fixtures_dir / WHAT_IF_LOG / "__cluster_metadata-0"))
    assert summary.rejected == 0
    last_ms = max(e["timestamp"] for e in logged_events(warehouse))

    log = RequestLog(first_offset=summary.last_offset + 1, start_ms=last_ms + HOUR)
    at = {"create": log.create_topics(new_topic("what-if", 3, 1), new_topic("too-wide", 1, 2))}
    takeover = log.now
    at["heartbeat at the timeout"] = log.heartbeat(broker_id, broker["epoch"], at=takeover + KAFKA_SESSION_TIMEOUT)
    at["silent 1 ms too long"] = log.unregister(7, at=log.now + KAFKA_SESSION_TIMEOUT + 1)
    ingest(warehouse, log, tmp_path / "what-if.jsonl")
    run_controller(warehouse, tmp_path / "checkpoint", SHARDS, None, {})
    events = logged_events(warehouse)
    run = Run(at, {broker_id: broker["epoch"]}, spark_tables(warehouse), core_tables(events, SHARDS, {}), events)

    for table in TABLES:
        assert_same_table(run.spark[table], run.core[table], f"{table}: Spark vs replay_log after {WHAT_IF_LOG}")
    assert run.spark["rejected"] == []

    # takeover: nobody is fenced for heartbeats that were never logged, so the topic is placed on the broker
    row = run.response("create")
    assert [(t["Name"], t["ErrorCode"]) for t in row["data"]["Topics"]] == [
        ("what-if", NONE), ("too-wide", INVALID_REPLICATION_FACTOR)]  # one broker registered
    records = run.records("create")
    assert sorted(types(records)) == ["PartitionRecord"] * 3 + ["TopicRecord"]
    assert sorted((r["data"]["PartitionId"], r["data"]["Replicas"], r["data"]["Isr"], r["data"]["Leader"])
                  for r in records if r["type"] == "PartitionRecord") == [
        (0, [broker_id], [broker_id], broker_id), (1, [broker_id], [broker_id], broker_id),
        (2, [broker_id], [broker_id], broker_id)]
    # its session began at the takeover: exactly the timeout later it is still alive, and heartbeats
    assert heartbeat_answer(run, "heartbeat at the timeout") == ("NONE", True, False, False)
    assert run.records("heartbeat at the timeout") == []
    # silent for the timeout and 1 ms: fenced, and its partitions go offline keeping it in their ISR
    row = run.response("silent 1 ms too long")
    assert row["error_name"] == "BROKER_ID_NOT_REGISTERED"
    records = run.records("silent 1 ms too long")
    assert changes(records, run.topic_ids()) == {("what-if", p): (NO_LEADER, None) for p in range(3)}
    assert broker_changes(records) == [(broker_id, broker["epoch"], FENCE, 0)]
    assert run.broker(broker_id) == (broker["epoch"], True, False)
    assert {p["partition"]: run.partition("what-if", p["partition"]) for p in run.spark["partitions"]} == {
        p: ([broker_id], NO_LEADER, [broker_id], 1, 1) for p in range(3)}
    assert_kip841(run.spark)
