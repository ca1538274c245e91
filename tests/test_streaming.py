"""The streaming controller end to end: metadata_log → shards → Delta tables, against independent
oracles (the real clusters' images, the generator's own model) and against the in-process core.

Every Spark run here costs about half a second per micro-batch on two cores, so logs are small and
the batch sizes are chosen to make each run count.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

import pyarrow.compute as pc
import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from kraftlake.spark import controller_query as streaming
from kraftlake.metadata import uuids
from kraftlake.codec.events import validate_event
from kraftlake.storage.ingest import ingest_source
from kraftlake.controller.shards import TOPIC_SCOPED, shard_of_topic
from kraftlake.storage import DeltaRsTables, Warehouse
from streaming_helpers import (
    TABLES,
    GeneratedLog,
    assert_same_tables,
    generate_log,
    ingest_jsonl,
    kill_seed,
    committed_batches,
    committed_offset,
    committed_offsets,
    controller_command,
    controller_env,
    kill_controller_when,
    logged_events,
    reference_decisions,
    reference_tables,
    run_controller,
    simulated_requests,
    why_failed,
    warehouse_decisions,
    warehouse_tables,
    write_jsonl,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARDS = 3
_INGEST_STAGE = pc.field("stage") == "ingest"

BROKERS_DDL = ("broker_id INT, epoch BIGINT, incarnation_id STRING, fenced BOOLEAN, "
               "in_controlled_shutdown BOOLEAN, rack STRING")
TOPICS_DDL = "topic_id STRING, name STRING, partitions INT"
PARTITIONS_DDL = ("topic STRING, topic_id STRING, partition INT, replicas ARRAY<INT>, isr ARRAY<INT>, leader INT, "
                  "leader_epoch INT, partition_epoch INT, adding_replicas ARRAY<INT>, "
                  "removing_replicas ARRAY<INT>, leader_recovery_state TINYINT")


def _expected_frames(spark: SparkSession, image: dict) -> dict[str, DataFrame]:
    """The oracle's image as the three tables; Uuids in Kafka's form, as the tables hold them."""
    brokers = [(int(b), v["epoch"], uuids.normalize(v["incarnation"]), v["fenced"], v["in_controlled_shutdown"],
                v["rack"]) for b, v in image["brokers"].items()]
    counts: dict[str, int] = {}
    for p in image["partitions"]:
        counts[p["topic_id"]] = counts.get(p["topic_id"], 0) + 1
    topics = [(uuids.normalize(tid), name, counts.get(tid, 0)) for tid, name in image["topics"].items()]
    partitions = [(p["topic"], uuids.normalize(p["topic_id"]), p["partition"], p["replicas"], p["isr"], p["leader"],
                   p["leader_epoch"], p["partition_epoch"], p["adding"], p["removing"], p["leader_recovery_state"])
                  for p in image["partitions"]]
    return {"brokers": spark.createDataFrame(brokers, BROKERS_DDL),
            "topics": spark.createDataFrame(topics, TOPICS_DDL),
            "partitions": spark.createDataFrame(partitions, PARTITIONS_DDL)}


@pytest.mark.parametrize("name", ["single-broker-shutdown", "single-broker-snapshot", "single-broker-restarts",
                                  "three-brokers-restarts"])
def test_real_log_ends_in_the_clusters_own_image(name: str, spark: SparkSession, fixtures_dir: Path,
                                                 tmp_path: Path) -> None:
    fixture = fixtures_dir / name
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    ingest_source(warehouse, str(fixture / "__cluster_metadata-0"))
    run_controller(warehouse, tmp_path / "checkpoint", SHARDS, None)

    expected = _expected_frames(spark, json.loads((fixture / "expected-image.json").read_text()))
    for table, keys in [("brokers", ["broker_id"]), ("topics", ["topic_id"]), ("partitions", ["topic_id", "partition"])]:
        actual = warehouse.read_df(table).select(*expected[table].columns)
        assert_df_equality(actual.orderBy(*keys), expected[table].orderBy(*keys), ignore_nullable=True)
    assert warehouse.read_df("configs").count() == json.loads((fixture / "expected-image.json").read_text())["configs"]


# --- generated logs -------------------------------------------------------------------------------

def _held_in_transaction(events: list[dict], index: int) -> bool:
    opened = False
    for event in events[:index]:
        if event["type"] == "BeginTransactionRecord":
            opened = True
        elif event["type"] in ("EndTransactionRecord", "AbortTransactionRecord"):
            opened = False
    return opened


def assert_matches_the_generator(tables: dict[str, list[dict]], log: GeneratedLog) -> None:
    """What the generator meant: its broker and partition model, and exactly its broken records rejected."""
    offsets = {row["offset"] for row in tables["rejected"]}
    assert sorted(offsets) == log.invalid, "replay rejected other records than the ones broken on purpose"
    assert len(tables["rejected"]) == len(offsets), "a rejected record is reported more than once"
    brokers = {r["broker_id"]: (r["epoch"], r["fenced"], r["in_controlled_shutdown"]) for r in tables["brokers"]}
    assert brokers == log.brokers
    partitions = {(r["topic"], r["partition"]): (r["replicas"], r["isr"], r["leader"], r["adding_replicas"])
                  for r in tables["partitions"]}
    assert partitions == log.partitions


@pytest.mark.slow
def test_one_record_per_batch_equals_one_batch_and_the_core(spark: SparkSession, tmp_path: Path) -> None:
    log = generate_log(seed=445, size=28)  # a small log (33 rows) that covers the cases below
    kinds = {e["type"] for e in log.events}
    assert {"PartitionChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord", "RemoveTopicRecord",
            "EndTransactionRecord", "AbortTransactionRecord"} <= kinds, "seed 445 no longer covers the cases"
    # a bad record held in a transaction, on a shard other than 0: its rejection must still be written
    assert any(_held_in_transaction(log.events, i) and log.events[i]["type"] in TOPIC_SCOPED
               and shard_of_topic(log.events[i]["data"]["TopicId"], SHARDS) != 0 for i in log.invalid)
    source = write_jsonl(log.events, tmp_path / "log.jsonl")

    results = {}
    for limit in (None, 1):
        warehouse = Warehouse(str(tmp_path / f"limit-{limit}" / "warehouse"), spark=spark)
        ingest_jsonl(warehouse, source)
        run_controller(warehouse, tmp_path / f"limit-{limit}" / "checkpoint", SHARDS, limit)
        results[limit] = warehouse_tables(warehouse)

    assert_same_tables(results[1], results[None], "1 record per batch vs 1 batch")
    assert_same_tables(results[None], reference_tables(logged_events(warehouse), SHARDS), "streaming vs replay_log")
    assert_matches_the_generator(results[None], log)


# each example is one streaming run, about 6 s plus 1 s per micro-batch on two cores
STREAMING_EXAMPLES = int(os.environ.get("KRAFTLAKE_STREAMING_EXAMPLES", "4"))
EXAMPLES = settings(max_examples=STREAMING_EXAMPLES, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@EXAMPLES
@pytest.mark.slow
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(30, 120), batches=st.integers(1, 5),
       shards=st.integers(1, 4))
def test_random_logs_in_random_batches_equal_the_core(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
                                                      seed: int, size: int, batches: int, shards: int) -> None:
    """Generated logs of records (broken ones among them) in one micro-batch or several: the tables of
    ``replay_log`` and the generator's own model. A fixed sequence of examples by default;
    KRAFTLAKE_STREAMING_EXAMPLES for more."""
    root = tmp_path_factory.mktemp("property")
    log = generate_log(seed, size)
    warehouse = Warehouse(str(root / "warehouse"), spark=spark)
    ingest_jsonl(warehouse, write_jsonl(log.events, root / "log.jsonl"))
    limit = -(-len(log.events) // batches)
    run_controller(warehouse, root / "checkpoint", shards, limit)
    tables = warehouse_tables(warehouse)
    assert_same_tables(tables, reference_tables(logged_events(warehouse), shards),
                       f"seed {seed}, {limit} records per batch, {shards} shards")
    assert_matches_the_generator(tables, log)


@EXAMPLES
@pytest.mark.slow
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(150, 300), batches=st.integers(1, 5),
       shards=st.integers(1, 4))
def test_random_request_logs_in_random_batches_decide_as_the_core(
        spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, seed: int, size: int, batches: int,
        shards: int) -> None:
    """Logs of requests of every kind the controller decides (a simulated cluster's, every operation on):
    the streaming job, in one micro-batch or several, writes exactly the records, answers and tables of
    ``replay_log`` (stream == batch == core). A fixed sequence of examples by default;
    KRAFTLAKE_STREAMING_EXAMPLES for more."""
    root = tmp_path_factory.mktemp("requests")
    events = simulated_requests(seed, size)
    warehouse = Warehouse(str(root / "warehouse"), spark=spark)
    ingest_jsonl(warehouse, write_jsonl(events, root / "log.jsonl"))
    limit = -(-size // batches)
    run_controller(warehouse, root / "checkpoint", shards, limit)
    what = f"seed {seed}, {size} requests, {limit} per batch, {shards} shards"
    assert len(committed_batches(root / "checkpoint")) == -(-size // limit), what  # as many micro-batches
    logged = logged_events(warehouse)
    assert_same_tables(warehouse_decisions(warehouse), reference_decisions(logged, shards), what)
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged, shards), what)


@pytest.mark.slow
def test_micro_batches_bounded_by_time_decide_as_the_core(spark: SparkSession, tmp_path: Path) -> None:
    """``max_batch_ms`` (``storage.pacing``) moves where micro-batches end, never what they decide. Bounded by
    1 ms every micro-batch is late, so each is planned at the floor (1,000 rows) below the cap that would
    take the whole log at once; the tables are the core's all the same."""
    events = simulated_requests(seed=27, size=2_500)
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    ingest_jsonl(warehouse, write_jsonl(events, tmp_path / "log.jsonl"))
    run_controller(warehouse, tmp_path / "checkpoint", SHARDS, 2_500, max_batch_ms=1)
    logged = logged_events(warehouse)
    offsets = sorted(e["offset"] for e in logged)
    assert len(offsets) == 2_500
    assert committed_offsets(tmp_path / "checkpoint") == [offsets[999], offsets[1_999], offsets[-1]]
    assert_same_tables(warehouse_decisions(warehouse), reference_decisions(logged, SHARDS), "bounded by time")
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged, SHARDS), "bounded by time")


def test_restart_reads_only_rows_appended_since(spark: SparkSession, tmp_path: Path) -> None:
    log = generate_log(seed=6, size=36)
    cut = 24
    assert _held_in_transaction(log.events, cut), "the restart should have to carry an open transaction over"
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    checkpoint = tmp_path / "checkpoint"
    ingest_jsonl(warehouse, write_jsonl(log.events[:cut], tmp_path / "first.jsonl"))
    run_controller(warehouse, checkpoint, SHARDS, None)
    ingest_jsonl(warehouse, write_jsonl(log.events[cut:], tmp_path / "second.jsonl"))

    query = streaming.start(warehouse, streaming.ControllerSettings(
        shards=SHARDS, checkpoint=str(checkpoint), once=True))
    assert query.awaitTermination(120), "the restarted query did not finish within 2 minutes"
    assert query.exception() is None, f"the restarted query failed: {query.exception()}"
    # (numInputRows counts the packed rows the source hands Spark, a few per shard: the offsets say what was read)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    offsets = [{k: json.loads(v) if isinstance(v, str) else v for k, v in p["sources"][0].items()
                if k in ("startOffset", "endOffset")} for p in progress]
    assert offsets[0]["startOffset"] == {"offset": cut - 1}
    assert offsets[-1]["endOffset"] == {"offset": len(log.events) - 1}
    assert all(a["endOffset"] == b["startOffset"] for a, b in zip(offsets, offsets[1:]))

    tables = warehouse_tables(warehouse)
    assert_same_tables(tables, reference_tables(logged_events(warehouse), SHARDS), "after the restart vs replay_log")
    assert_matches_the_generator(tables, log)


def test_tables_without_their_checkpoint_are_refused_until_reset(spark: SparkSession, tmp_path: Path) -> None:
    log = generate_log(seed=11, size=30)
    assert log.invalid, "seed 11 should give the replay something to reject"
    source = write_jsonl(log.events, tmp_path / "log.jsonl")
    with source.open("a") as handle:
        handle.write("not json\n")  # an ingest-stage rejection, which is input, not derived state
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    checkpoint = tmp_path / "checkpoint"
    with pytest.raises(RuntimeError, match="no metadata_log"):
        streaming.check_start(warehouse, str(checkpoint))
    ingest_source(warehouse, str(source))
    run_controller(warehouse, checkpoint, SHARDS, None)
    before = warehouse_tables(warehouse)
    ingest_rejections = warehouse.read_arrow("rejected").filter(_INGEST_STAGE).num_rows
    assert ingest_rejections == 1

    shutil.rmtree(checkpoint)
    with pytest.raises(RuntimeError, match=r"checkpoint .* is missing.*--reset"):
        streaming.check_start(warehouse, str(checkpoint))
    with pytest.raises(RuntimeError, match="--reset"):
        run_controller(warehouse, checkpoint, SHARDS, None)

    streaming.reset(warehouse, str(checkpoint))
    assert [n for n in ("brokers", "topics", "configs", "partitions", "partition_history") if warehouse.exists(n)] == []
    assert warehouse.exists("metadata_log")
    run_controller(warehouse, checkpoint, SHARDS, None)
    assert_same_tables(warehouse_tables(warehouse), before, "rebuilt after --reset vs the first build")
    assert warehouse.read_arrow("rejected").filter(_INGEST_STAGE).num_rows == ingest_rejections


# --- a real crash: SIGKILL of the whole controller process group ------------------------------------

KILL_LOG_SIZE = 200
KILL_BATCH = 5


def _sink_ahead_of_checkpoint(warehouse: Path, checkpoint: Path) -> bool:
    """A table already holds a batch the checkpoint has not committed: the kill lands inside the sink."""
    query = streaming.query_id(str(checkpoint))
    done = committed_batches(checkpoint)
    if query is None or not done:
        return False
    tables = DeltaRsTables(str(warehouse))
    app_id = f"kraftlake-controller-{query}"
    return any((tables.txn_version(name, app_id) or -1) > done[-1] for name in TABLES if tables.exists(name))


@pytest.mark.slow
def test_sigkill_mid_run_twice_then_restart_ends_as_an_uninterrupted_run(spark: SparkSession, tmp_path: Path) -> None:
    log = generate_log(seed=3, size=KILL_LOG_SIZE)
    source = write_jsonl(log.events, tmp_path / "log.jsonl")
    killed = tmp_path / "killed"
    checkpoint = killed / "_checkpoints" / "controller"
    ingest_jsonl(DeltaRsTables(str(killed)), source)
    batches = math.ceil(len(log.events) / KILL_BATCH)
    # best effort: aim between a sink commit and the checkpoint's; any kill point must be safe
    kill_controller_when(controller_command(killed, KILL_BATCH), lambda: bool(committed_batches(checkpoint)),
                         tmp_path / "controller-killed.log", aim=lambda: _sink_ahead_of_checkpoint(killed, checkpoint))
    done_at_kill = committed_batches(checkpoint)
    assert len(done_at_kill) < batches, f"killed after all {batches} batches, not mid-run"
    # and at a drawn moment of a drawn micro-batch of the restarted run (KRAFTLAKE_KILL_SEED for another draw)
    seed = kill_seed(3)
    rng = random.Random(seed)
    target, fraction = len(done_at_kill) + rng.randint(1, 3), rng.random()
    commit_times = sorted((checkpoint / "commits" / str(b)).stat().st_mtime for b in done_at_kill)
    batch_seconds = statistics.median(b - a for a, b in zip(commit_times, commit_times[1:])) \
        if len(commit_times) > 1 else 1.0
    kill_controller_when(controller_command(killed, KILL_BATCH), lambda: len(committed_batches(checkpoint)) >= target,
                         tmp_path / "controller-killed-again.log", aim=after(fraction * batch_seconds))
    done_at_second_kill = committed_batches(checkpoint)
    kills = (f"killed after batch {done_at_kill[-1]}, then {fraction:.2f} of a batch ({batch_seconds:.2f} s) after "
             f"batch {target - 1} (seed {seed}; {len(done_at_second_kill)} batches committed by then)")
    # where the second kill was aimed: in or after the drawn batch, and before the run's last one
    assert target <= len(done_at_second_kill) < batches, kills

    # the rest in micro-batches of any size: the batch cut short is re-run as planned, then come larger ones
    restarted = subprocess.run(controller_command(killed, 1000), cwd=REPO_ROOT, env=controller_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    finished = "\ncontroller: brokers" in restarted.stdout
    assert finished and committed_offset(checkpoint) == len(log.events) - 1, (
        f"the restarted controller did not finish (exit {restarted.returncode}):\n{why_failed(restarted.stdout)}")

    warehouse = Warehouse(str(killed), spark=spark)
    after_crash = warehouse_tables(warehouse)
    assert_same_tables(after_crash, reference_tables(logged_events(warehouse), 2),
                       f"{kills} and restarted vs one uninterrupted replay")
    history = [(r["applied_offset"], r["topic_id"], r["partition"]) for r in after_crash["partition_history"]]
    assert len(history) == len(set(history)), "partition_history has duplicate rows"
    assert len({r["offset"] for r in after_crash["rejected"]}) == len(after_crash["rejected"]) == len(log.invalid)
    assert restarted.returncode == 0, f"the restarted controller failed:\n{why_failed(restarted.stdout)}"


def after(seconds: float) -> Callable[[], bool]:
    """An aim for ``kill_controller_when``: true ``seconds`` after it is first asked."""
    start: list[float] = []

    def aim() -> bool:
        start.append(time.monotonic())
        return start[-1] - start[0] >= seconds

    return aim


def test_the_number_of_shards_changes_no_table() -> None:
    log = generate_log(seed=4, size=60)
    events = [{**e, "offset": i, "source": None, "position": None}
              for i, e in enumerate(map(validate_event, log.events))]
    one = reference_tables(events, 1)
    for shards in (2, 3, 4):
        assert_same_tables(reference_tables(events, shards), one, f"{shards} shards vs 1")


def test_checkpoint_paths_may_hold_spaces_and_hashes(tmp_path: Path) -> None:
    checkpoint = tmp_path / "my checkpoints #1" / "controller"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"5f0c7a52-query"}\n')
    assert streaming.query_id(str(checkpoint)) == "5f0c7a52-query"
    streaming.reset(Warehouse(str(tmp_path / "warehouse")), str(checkpoint))
    assert not checkpoint.exists()
