"""Partition reassignments (KIP-455) through the streaming job, across a SIGKILL, and through
``jobs/reassign.py``.

Every expected state is written by hand from KIP-455 and Kafka's KRaft rules (the same walk-through as
``test_reassignments``, but with partitions created by CreateTopics at leader epoch 0, partition epoch 0),
never computed by the code under test; the job's tables are also compared with ``replay_log`` in-process.
A partition's state is written ``(replicas, isr, leader, leader epoch, partition epoch, adding, removing)``.
"""

from __future__ import annotations

import json
from argparse import Namespace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from controller_scenarios import RequestLog, core_tables, ingest, isr_change, logged_events, new_topic, spark_tables
from streaming_helpers import committed_batches, controller_command, kill_controller_when, run_controller
from kraftlake.cli.config import config_from_args
from kraftlake.storage.ingest import ingest_source
from kraftlake.cli.runtime import kafka_configs
from kraftlake.spark.views import register_views
from kraftlake.storage import DeltaRsTables, Warehouse
from kraftlake.controller.topics import new_topic_id
from reassign_scenarios import cluster, list_reassignments, reassign

from kraftlake.cli import controller as controller_job
from kraftlake.cli import reassign as reassign_job
from kraftlake.cli.launcher import run_job

REPO_ROOT = Path(__file__).resolve().parent.parent
START_MS = 1_763_590_000_000
SHARDS = 3
CONFIG: dict[str, str] = {}  # Kafka's defaults: the logs span well under broker.session.timeout.ms
TABLES = ("brokers", "topics", "configs", "partitions", "partition_history", "rejected", "controller_log", "responses")

# Kafka's error codes (org.apache.kafka.common.protocol.Errors), by hand.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REPLICA_ASSIGNMENT = 39
NO_REASSIGNMENT_IN_PROGRESS = 85
INELIGIBLE_REPLICA = 107
NEW_LEADER_ELECTED = 108


def state(tables: dict[str, list[dict]], topic: str, partition: int) -> tuple:
    [p] = [r for r in tables["partitions"] if r["topic"] == topic and r["partition"] == partition]
    return (p["replicas"], p["isr"], p["leader"], p["leader_epoch"], p["partition_epoch"],
            list(p["adding_replicas"] or []), list(p["removing_replicas"] or []))


def history(tables: dict[str, list[dict]], topic: str, partition: int) -> list[tuple]:
    """Every state the partition went through: (offset, state), in log order."""
    rows = sorted((r for r in tables["partition_history"] if r["topic"] == topic and r["partition"] == partition),
                  key=lambda r: r["applied_offset"])
    return [(r["offset"], (r["replicas"], r["isr"], r["leader"], r["leader_epoch"], r["partition_epoch"],
                           list(r["adding_replicas"] or []), list(r["removing_replicas"] or []))) for r in rows]


def response(tables: dict[str, list[dict]], offset: int) -> dict:
    [row] = [r for r in tables["responses"] if r["offset"] == offset]
    return row


def partition_errors(row: dict, key: str = "Responses") -> dict[tuple, int]:
    """(topic name or id, partition) -> ErrorCode of an AlterPartitionReassignments / AlterPartition answer."""
    assert row["error_code"] == NONE, row
    return {(t.get("Name") or t.get("TopicId"), p["PartitionIndex"]): p["ErrorCode"]
            for t in row["data"][key] for p in t["Partitions"]}


def listing(row: dict) -> dict[tuple, tuple]:
    assert row["type"] == "ListPartitionReassignmentsResponse" and row["error_code"] == NONE
    return {(t["Name"], p["PartitionIndex"]): (p["Replicas"], p["AddingReplicas"], p["RemovingReplicas"])
            for t in row["data"]["Topics"] for p in t["Partitions"]}


def assert_same_table(actual: list[dict], expected: list[dict], what: str) -> None:
    missing = [r for r in expected if r not in actual]
    unexpected = [r for r in actual if r not in expected]
    assert actual == expected, (f"{what}: {len(actual)} rows, expected {len(expected)}\n"
                                f"  missing: {missing[:3]}\n  unexpected: {unexpected[:3]}")


def assert_no_duplicates(tables: dict[str, list[dict]]) -> None:
    history_keys = [(r["applied_offset"], r["topic_id"], r["partition"]) for r in tables["partition_history"]]
    assert len(history_keys) == len(set(history_keys)), "partition_history has duplicate rows"
    log_keys = [(r["offset"], r["shard"], r["seq"]) for r in tables["controller_log"]]
    assert len(log_keys) == len(set(log_keys)), "controller_log has duplicate rows"
    answered = [r["offset"] for r in tables["responses"]]
    assert len(answered) == len(set(answered)), "a request is answered twice"


# --- 1. the KIP-455 walk-through through the streaming job ---------------------------------------------

def test_walk_through_cancellation_and_fenced_target_through_the_streaming_job(
        spark: SparkSession, tmp_path: Path) -> None:
    """Topic "moves", three partitions on [1,2,3] led by 1: partition 0 goes R [1,2,3] -> T [4,5,6] to
    completion, partition 1 starts the same move and is cancelled half-way, partition 2 moves to
    [4,5,7] where broker 7 is registered but fenced, so it stays pending. Two runs of one query (the
    AlterPartition requests of the second part name the topic by the id the first part's CreateTopics
    answered), 4 records per micro-batch."""
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    checkpoint = tmp_path / "checkpoint"

    log = RequestLog(first_offset=0, start_ms=START_MS)
    epoch = cluster(log, range(1, 8), fenced=(7,))
    assert epoch == {b: b for b in range(1, 8)} and log.last_offset == 13
    create = log.create_topics(new_topic("moves", assignments=[[1, 2, 3], [1, 2, 3], [1, 2, 3]]))
    start = reassign(log, {"moves": {0: [4, 5, 6], 1: [4, 5, 6], 2: [4, 5, 7], 9: [4, 5, 6]},
                           "nowhere": {0: [4, 5, 6]}})
    listed_at_start = list_reassignments(log)
    ingest(warehouse, log, tmp_path / "first.jsonl")
    run_controller(warehouse, checkpoint, SHARDS, 4, CONFIG)
    first = spark_tables(warehouse)
    [topic_id] = [t["TopicId"] for t in response(first, create)["data"]["Topics"] if t["Name"] == "moves"]

    rest = RequestLog(first_offset=log.last_offset + 1, start_ms=log.now + log.step_ms)

    def alter(*parts: tuple[int, int, list[int]]) -> int:
        """Leader 1's AlterPartition v2 at leader epoch 0: (partition, partition epoch, new ISR)."""
        return rest.alter_partition(1, epoch[1], [{"TopicId": topic_id, "Partitions": [
            isr_change(p, 0, partition_epoch, isr) for p, partition_epoch, isr in parts]}])

    add_4 = alter((0, 1, [1, 2, 3, 4]), (1, 1, [1, 2, 3, 4]), (2, 1, [1, 2, 3, 4]))
    cancel = reassign(rest, {"moves": {1: None}})
    add_5 = alter((0, 2, [1, 2, 3, 4, 5]), (2, 2, [1, 2, 3, 4, 5]))
    cancel_again = reassign(rest, {"moves": {1: None}})
    add_last = alter((0, 3, [1, 2, 3, 4, 5, 6]), (2, 3, [1, 2, 3, 4, 5, 7]))
    listed_all = list_reassignments(rest)
    listed_some = list_reassignments(rest, {"moves": [1, 0, 2], "nowhere": [0]})
    ingest(warehouse, rest, tmp_path / "second.jsonl")
    run_controller(warehouse, checkpoint, SHARDS, 4, CONFIG)
    tables = spark_tables(warehouse)

    # The tables equal replay_log in-process, in one go and one event at a time.
    events = logged_events(warehouse)
    core = core_tables(events, SHARDS, CONFIG)
    one_by_one = core_tables(events, SHARDS, CONFIG, batch=1)
    for table in TABLES:
        assert_same_table(tables[table], core[table], f"{table}: Spark vs replay_log")
        assert_same_table(one_by_one[table], core[table], f"{table}: one event per batch vs replay_log")
    assert_no_duplicates(tables)
    assert tables["rejected"] == []

    # The start: per-partition answers; the replicas become target + the current ones it drops,
    # adding = T - R, removing = R - T; the ISR and the leader are untouched.
    assert partition_errors(response(tables, start)) == {
        ("moves", 0): NONE, ("moves", 1): NONE, ("moves", 2): NONE,
        ("moves", 9): UNKNOWN_TOPIC_OR_PARTITION, ("nowhere", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert state(first, "moves", 2) == ([4, 5, 7, 1, 2, 3], [1, 2, 3], 1, 0, 1, [4, 5, 7], [1, 2, 3])
    assert listing(response(tables, listed_at_start)) == {
        ("moves", 0): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3]),
        ("moves", 1): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3]),
        ("moves", 2): ([4, 5, 7, 1, 2, 3], [4, 5, 7], [1, 2, 3])}

    # Partition 0, step by step: the adding replicas join the ISR, the reassignment stays pending until
    # the last target replica is in; then one change: replicas = T, ISR = T, the removed leader 1 hands
    # over to 4 (the first target replica in the ISR) at a new leader epoch.
    assert history(tables, "moves", 0) == [
        (create, ([1, 2, 3], [1, 2, 3], 1, 0, 0, [], [])),
        (start, ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 0, 1, [4, 5, 6], [1, 2, 3])),
        (add_4, ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4], 1, 0, 2, [4, 5, 6], [1, 2, 3])),
        (add_5, ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4, 5], 1, 0, 3, [4, 5, 6], [1, 2, 3])),
        (add_last, ([4, 5, 6], [4, 5, 6], 4, 1, 4, [], []))]
    assert state(tables, "moves", 0) == ([4, 5, 6], [4, 5, 6], 4, 1, 4, [], [])

    # Partition 1: cancelled once 4 had caught up; 4 is dropped all the same, [1,2,3] is back, 1 leads.
    assert history(tables, "moves", 1)[2:] == [
        (add_4, ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4], 1, 0, 2, [4, 5, 6], [1, 2, 3])),
        (cancel, ([1, 2, 3], [1, 2, 3], 1, 1, 3, [], []))]
    assert partition_errors(response(tables, cancel)) == {("moves", 1): NONE}
    assert partition_errors(response(tables, cancel_again)) == {("moves", 1): NO_REASSIGNMENT_IN_PROGRESS}
    assert state(tables, "moves", 1) == ([1, 2, 3], [1, 2, 3], 1, 1, 3, [], [])

    # Partition 2: the fenced broker 7 may not join the ISR (KIP-841): INELIGIBLE_REPLICA, no change.
    assert history(tables, "moves", 2)[2:] == [
        (add_4, ([4, 5, 7, 1, 2, 3], [1, 2, 3, 4], 1, 0, 2, [4, 5, 7], [1, 2, 3])),
        (add_5, ([4, 5, 7, 1, 2, 3], [1, 2, 3, 4, 5], 1, 0, 3, [4, 5, 7], [1, 2, 3]))]
    assert state(tables, "moves", 2) == ([4, 5, 7, 1, 2, 3], [1, 2, 3, 4, 5], 1, 0, 3, [4, 5, 7], [1, 2, 3])

    # The AlterPartition answers: the one that completed partition 0 tells leader 1 it leads no more.
    assert partition_errors(response(tables, add_4), "Topics") == {
        (topic_id, 0): NONE, (topic_id, 1): NONE, (topic_id, 2): NONE}
    answers = {p["PartitionIndex"]: p for t in response(tables, add_4)["data"]["Topics"] for p in t["Partitions"]}
    assert [(answers[i]["LeaderId"], answers[i]["Isr"], answers[i]["PartitionEpoch"]) for i in (0, 1, 2)] == [
        (1, [1, 2, 3, 4], 2)] * 3
    assert partition_errors(response(tables, add_5), "Topics") == {(topic_id, 0): NONE, (topic_id, 2): NONE}
    assert partition_errors(response(tables, add_last), "Topics") == {
        (topic_id, 0): NEW_LEADER_ELECTED, (topic_id, 2): INELIGIBLE_REPLICA}
    assert [r["type"] for r in tables["controller_log"] if r["offset"] == add_last] == ["PartitionChangeRecord"]

    # ListPartitionReassignments at the end: only partition 2; unknown topics and idle partitions left out.
    pending = {("moves", 2): ([4, 5, 7, 1, 2, 3], [4, 5, 7], [1, 2, 3])}
    assert listing(response(tables, listed_all)) == pending
    assert listing(response(tables, listed_some)) == pending

    # The reassignments view: partition 2, started by the request at `start`, aged to the log's end.
    register_views(warehouse)
    view = [r.asDict() for r in spark.sql("SELECT * FROM reassignments").collect()]
    started_at = START_MS + start * log.step_ms  # one line every 10 ms from START_MS
    assert view == [{
        "topic": "moves", "partition": 2, "current_replicas": [4, 5, 7, 1, 2, 3], "target_replicas": [4, 5, 7],
        "adding_replicas": [4, 5, 7], "removing_replicas": [1, 2, 3], "isr": [1, 2, 3, 4, 5], "leader": 1,
        "started_offset": start, "started_at": datetime.fromtimestamp(started_at / 1000, timezone.utc).replace(
            tzinfo=None),
        "age_ms": (listed_some - start) * log.step_ms}]
    described = spark.sql("SELECT partition, target_replicas FROM describe WHERE topic = 'moves'").collect()
    assert [(r.partition, r.target_replicas) for r in described] == [(0, None), (1, None), (2, [4, 5, 7])]


# --- 2. SIGKILL in the middle of a reassignment, then restart ------------------------------------------

KILL_BATCH = 3


def kill_log() -> tuple[RequestLog, dict[str, int]]:
    """Six brokers, "moves" on [1,2,3] twice: partition 0 moves to [4,5,6] step by step, partition 1 to
    [4,5,6] and is cancelled half-way; brokers 4, 5 and 6 heartbeat between the steps, which spreads the
    reassignment over more micro-batches."""
    log = RequestLog(first_offset=0, start_ms=START_MS)
    epoch = cluster(log, range(1, 7))
    at = {"create": log.create_topics(new_topic("moves", assignments=[[1, 2, 3], [1, 2, 3]]))}
    topic_id = new_topic_id("moves", at["create"], [])  # what the CreateTopics answer tells (checked below)
    at["start"] = reassign(log, {"moves": {0: [4, 5, 6], 1: [4, 5, 6]}})

    def beats() -> None:  # the new replicas' brokers, fetching
        for b in (4, 5, 6):
            log.heartbeat(b, epoch[b])

    steps = [("add 4", [(0, 1, [1, 2, 3, 4]), (1, 1, [1, 2, 3, 4])]), ("add 5", [(0, 2, [1, 2, 3, 4, 5])]),
             ("add 6", [(0, 3, [1, 2, 3, 4, 5, 6])])]
    for name, parts in steps:
        beats()
        at[name] = log.alter_partition(1, epoch[1], [{"TopicId": topic_id, "Partitions": [
            isr_change(p, 0, partition_epoch, isr) for p, partition_epoch, isr in parts]}])
        if name == "add 5":
            beats()
            at["cancel"] = reassign(log, {"moves": {1: None}})
    beats()
    at["list"] = list_reassignments(log)
    return log, at


def _end_offset(checkpoint: Path, batch: int) -> int:
    """The last log offset of a planned batch, from the checkpoint's offset log."""
    last = (checkpoint / "offsets" / str(batch)).read_text().strip().splitlines()[-1]
    return json.loads(last)["offset"]


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_reassignment_then_restart(spark: SparkSession, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    log, at = kill_log()
    source = log.write(tmp_path / "log.jsonl")
    killed = tmp_path / "killed"
    checkpoint = killed / "_checkpoints" / "controller"
    summary = ingest_source(DeltaRsTables(str(killed)), str(source))
    assert (summary.rejected, summary.last_offset) == (0, log.last_offset)
    batches = -(-len(log.lines) // KILL_BATCH)

    def started() -> bool:  # the committed batches hold the start and the first ISR addition
        done = committed_batches(checkpoint)
        return bool(done) and _end_offset(checkpoint, done[-1]) >= at["add 4"]

    kill_controller_when(controller_command(killed, KILL_BATCH), started, tmp_path / "controller-killed.log")
    done_at_kill = committed_batches(checkpoint)
    end_at_kill = _end_offset(checkpoint, done_at_kill[-1])
    assert at["add 4"] <= end_at_kill < at["add 6"], (
        f"killed after offset {end_at_kill}, not between the first ISR addition ({at['add 4']}) and the completion "
        f"({at['add 6']}) of the reassignment")

    # The restart: jobs/controller.py again, in this process (a JVM start less), from the checkpoint.
    capsys.readouterr()
    code = controller_job.main(controller_command(killed, KILL_BATCH)[2:])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("controller: brokers"), f"the restarted controller failed (exit {code}):\n{out}"
    assert len(committed_batches(checkpoint)) == batches

    defaults = kafka_configs(config_from_args(Namespace()))  # what jobs/controller.py passes by default
    warehouse = Warehouse(str(killed), spark=spark)
    after_crash = spark_tables(warehouse)
    uninterrupted = core_tables(logged_events(warehouse), 2, defaults)  # one replay of the whole log
    for table in TABLES:
        assert_same_table(after_crash[table], uninterrupted[table],
                          f"{table}: killed after offset {end_at_kill} and restarted vs one uninterrupted replay")
    assert_no_duplicates(after_crash)
    assert len(after_crash["responses"]) == len(log.lines) - 1  # every request, not the FeatureLevelRecord

    # And the outcome is KIP-455's, by hand.
    [created] = response(after_crash, at["create"])["data"]["Topics"]
    assert created["TopicId"] == new_topic_id("moves", at["create"], [])
    assert state(after_crash, "moves", 0) == ([4, 5, 6], [4, 5, 6], 4, 1, 4, [], [])
    assert state(after_crash, "moves", 1) == ([1, 2, 3], [1, 2, 3], 1, 1, 3, [], [])
    assert partition_errors(response(after_crash, at["add 6"]), "Topics") == {
        (created["TopicId"], 0): NEW_LEADER_ELECTED}
    assert listing(response(after_crash, at["list"])) == {}


# --- 3. jobs/reassign.py end to end --------------------------------------------------------------------

@pytest.mark.slow
def test_the_reassign_tool_end_to_end(spark: SparkSession, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "warehouse"
    warehouse = Warehouse(str(root), spark=spark)
    checkpoint = root / "_checkpoints" / "controller"

    def tool(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = run_job("reassign", reassign_job.main, [*args, "--warehouse", str(root)])
        return code, capsys.readouterr().out

    def plan(name: str, partitions: list[dict]) -> str:
        path = tmp_path / name
        path.write_text(json.dumps({"version": 1, "partitions": partitions}))
        return str(path)

    def decide() -> dict[str, list[dict]]:
        run_controller(warehouse, checkpoint, 2, None, CONFIG)
        return spark_tables(warehouse)

    log = RequestLog(first_offset=0, start_ms=START_MS)
    epoch = cluster(log, range(1, 7))
    create = log.create_topics(new_topic("moves", assignments=[[1, 2, 3], [1, 2, 3]]))
    ingest(warehouse, log, tmp_path / "cluster.jsonl")
    tables = decide()
    [topic_id] = [t["TopicId"] for t in response(tables, create)["data"]["Topics"]]

    move_0 = plan("move-0.json", [{"topic": "moves", "partition": 0, "replicas": [4, 5, 6]}])
    move_1 = plan("move-1.json", [{"topic": "moves", "partition": 1, "replicas": [1, 4, 5]}])
    assert tool("--list") == (0, "{}\n")
    assert tool("--verify", move_0)[0] == 1  # [1,2,3], not [4,5,6]
    (tmp_path / "bad.json").write_text('{"version": 1, "partitions": [{"topic": "moves"}]}')
    assert tool("--execute", str(tmp_path / "bad.json"))[0] == 2

    code, out = tool("--execute", move_0)
    assert code == 0 and "appended at offset 14" in out
    tables = decide()
    assert state(tables, "moves", 0) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 0, 1, [4, 5, 6], [1, 2, 3])
    assert tool("--list") == (0, json.dumps({"version": 1, "partitions": [
        {"topic": "moves", "partition": 0, "replicas": [4, 5, 6]}]}) + "\n")
    code, out = tool("--verify", move_0)
    assert code == 1 and "Reassignment of partition moves-0 is still in progress." in out

    # One is pending: a second plan is refused without --incremental, accepted with it.
    assert tool("--execute", move_1) == (1, "")
    assert len(logged_events(warehouse)) == 15, "the refused plan must not reach the log"
    assert tool("--execute", move_1, "--incremental")[0] == 0
    tables = decide()
    assert state(tables, "moves", 0) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 0, 1, [4, 5, 6], [1, 2, 3])
    assert state(tables, "moves", 1) == ([1, 4, 5, 2, 3], [1, 2, 3], 1, 0, 1, [4, 5], [2, 3])
    assert tool("--list") == (0, json.dumps({"version": 1, "partitions": [
        {"topic": "moves", "partition": 0, "replicas": [4, 5, 6]},
        {"topic": "moves", "partition": 1, "replicas": [1, 4, 5]}]}) + "\n")

    # The leader catches 4, 5, 6 up on partition 0 (completing it) and 4 on partition 1 (5 still missing).
    newest = max(e["timestamp"] for e in logged_events(warehouse))
    catch_up = RequestLog(first_offset=16, start_ms=newest + 10)
    for partition_epoch, isr in ((1, [1, 2, 3, 4]), (2, [1, 2, 3, 4, 5]), (3, [1, 2, 3, 4, 5, 6])):
        parts = [isr_change(0, 0, partition_epoch, isr)]
        if partition_epoch == 1:
            parts.append(isr_change(1, 0, 1, [1, 2, 3, 4]))
        completing = catch_up.alter_partition(1, epoch[1], [{"TopicId": topic_id, "Partitions": parts}])
    ingest(warehouse, catch_up, tmp_path / "catch-up.jsonl")
    tables = decide()
    assert partition_errors(response(tables, completing), "Topics") == {(topic_id, 0): NEW_LEADER_ELECTED}
    assert state(tables, "moves", 0) == ([4, 5, 6], [4, 5, 6], 4, 1, 4, [], [])
    assert state(tables, "moves", 1) == ([1, 4, 5, 2, 3], [1, 2, 3, 4], 1, 0, 2, [4, 5], [2, 3])
    code, out = tool("--verify", move_0)
    assert code == 0 and "Reassignment of partition moves-0 is completed." in out
    assert tool("--verify", move_1)[0] == 1
    assert tool("--list") == (0, json.dumps({"version": 1, "partitions": [
        {"topic": "moves", "partition": 1, "replicas": [1, 4, 5]}]}) + "\n")

    # --cancel-all: the adding replicas 4 (caught up) and 5 leave, the original [1,2,3] is back.
    code, out = tool("--cancel-all")
    assert code == 0 and "cancellation of 1 reassignment(s) appended at offset 19" in out
    tables = decide()
    assert partition_errors(response(tables, 19)) == {("moves", 1): NONE}
    assert state(tables, "moves", 1) == ([1, 2, 3], [1, 2, 3], 1, 1, 3, [], [])
    assert state(tables, "moves", 0) == ([4, 5, 6], [4, 5, 6], 4, 1, 4, [], [])
    assert tool("--list") == (0, "{}\n")
    assert tool("--cancel-all") == (0, "reassign: no reassignment in progress\n")
    assert tool("--verify", move_0)[0] == 0
    assert tool("--verify", move_1)[0] == 1  # cancelled: [1,2,3], not [1,4,5]

    # Every request the tool appended was decided once, as replay_log decides the same log.
    events = logged_events(warehouse)
    assert [e["type"] for e in events[14:]] == ["AlterPartitionReassignmentsRequest"] * 2 + [
        "AlterPartitionRequest"] * 3 + ["AlterPartitionReassignmentsRequest"]
    core = core_tables(events, 2, CONFIG)
    for table in TABLES:
        assert_same_table(tables[table], core[table], f"{table}: Spark vs replay_log")
    assert_no_duplicates(tables)
