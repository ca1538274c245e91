"""Causes through the streaming job: logs in Kafka's format, whose record batches hold records that explain
each other, replayed in micro-batches that would split those batches if the source cut anywhere; the tables
equal the core's replay, and the SQL views name Kafka's codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from kraftlake.codec.events import validate_event
from kraftlake.codec.writer import write_partition_dir
from kraftlake.image.cluster_image import DIR_LOST, DIR_MIGRATING, DIR_UNASSIGNED
from kraftlake.spark.views import cluster_view, decoding_view, register_views
from kraftlake.storage import Warehouse
from kraftlake.storage.ingest import ingest_source
from streaming_helpers import (assert_same_tables, committed_offset, generate_log, logged_events, reference_tables,
                               run_controller, warehouse_tables)

SHARDS = 3
# single-broker-shutdown's rows per micro-batch: the second would end at offset 4871, broker 1's controlled
# shutdown, the first record of the batch that holds the 54 changes it caused (4872-4925)
SPLITTING_LIMIT = 2436


def test_a_real_shutdown_in_micro_batches_that_would_split_its_batch(spark: SparkSession, fixtures_dir: Path,
                                                                     tmp_path: Path) -> None:
    # the log as it lies in its broker's log directory, where Kafka keeps the cluster id
    log_dir = tmp_path / "kraft-combined-logs"
    shutil.copytree(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0", log_dir / "__cluster_metadata-0")
    (log_dir / "meta.properties").write_text("#\n#Fri Jan 30 16:43:54 UTC 2026\nnode.id=1\n"
                                             "directory.id=XHhkr4tkSsD900pOQ8pPfg\nversion=1\n"
                                             "cluster.id=5L6g3nShT-eMCtK--X86sw\n")
    warehouse = Warehouse(str(tmp_path / "warehouse"), spark=spark)
    ingest_source(warehouse, str(log_dir / "__cluster_metadata-0"))
    checkpoint = tmp_path / "checkpoint"
    run_controller(warehouse, checkpoint, SHARDS, SPLITTING_LIMIT)
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged_events(warehouse), SHARDS),
                       f"{SPLITTING_LIMIT} rows per micro-batch vs replay_log")
    ends = [committed_offset_of(checkpoint, batch) for batch in range(3)]
    assert 4925 in ends and not any(4871 <= end < 4925 for end in ends), ends

    names = register_views(warehouse)
    assert {"brokers_decoded", "configs_decoded", "partitions_decoded", "partition_history_decoded",
            "cluster"} <= set(names)
    fenced = spark.sql("SELECT offset, cause, cause_offset FROM broker_history "
                       "WHERE broker_id = 1 AND state = 'fenced'")
    assert [tuple(r) for r in fenced.collect()] == [(4926, "controlled_shutdown_completed", 4871)]
    why = spark.sql("SELECT DISTINCT h.cause_kind, b.offset, b.cause FROM partition_history h JOIN broker_history b "
                    "ON h.cause_offset = b.offset AND h.cause_broker = b.broker_id AND h.cause_kind = b.state "
                    "WHERE h.leader_before = 1 AND h.leader = -1")
    assert [tuple(r) for r in why.collect()] == [("controlled_shutdown", 4871, "shutdown_requested")]
    assert [tuple(r) for r in spark.sql("SELECT DISTINCT resource_type FROM configs_decoded").collect()] == [("TOPIC",)]
    assert [tuple(r) for r in spark.sql("SELECT state FROM brokers_decoded").collect()] == [("fenced",)]
    assert [tuple(r) for r in spark.sql("SELECT DISTINCT leader_recovery_state FROM partitions_decoded").collect()] == [
        ("RECOVERED",)]
    offline = spark.sql("SELECT count(*), min(start_offset), max(start_offset), min(cause_offset) FROM anomalies "
                        "WHERE kind = 'offline_partition' AND end_offset IS NULL")
    assert [tuple(r) for r in offline.collect()] == [(54, 4872, 4925, 4871)]
    # the bootstrap records set metadata.version 19 (offset 2); the log holds no other feature level
    assert [tuple(r) for r in spark.sql("SELECT * FROM cluster").collect()] == [
        ("5L6g3nShT-eMCtK--X86sw", "meta.properties", 19, {"metadata.version": 19})]


def committed_offset_of(checkpoint: Path, batch: int) -> int | None:
    """The last log offset micro-batch ``batch`` read (its offsets file), None if there is none."""
    path = checkpoint / "offsets" / str(batch)
    return json.loads(path.read_text().splitlines()[-1])["offset"] if path.exists() else None


@settings(max_examples=2, deadline=None)
@pytest.mark.slow
@given(seed=st.integers(0, 2**32 - 1), limit=st.integers(2, 12), batch_records=st.integers(2, 12),
       shards=st.integers(1, 3))
def test_generated_logs_in_record_batches_in_any_micro_batches_equal_the_core(
        spark: SparkSession, tmp_path_factory, seed: int, limit: int, batch_records: int, shards: int) -> None:
    """The generator's log in Kafka's format, ``batch_records`` records a batch (shutdowns, fencings and
    partition changes share batches), replayed ``limit`` rows per micro-batch."""
    root = tmp_path_factory.mktemp("causes")
    events = [{**validate_event({**e, "offset": o}), "offset": o, "leader_epoch": 1}
              for o, e in enumerate(generate_log(seed, 30).events)]
    log_dir = write_partition_dir(root / "__cluster_metadata-0", events, batch_records=batch_records)
    warehouse = Warehouse(str(root / "warehouse"), spark=spark)
    ingest_source(warehouse, str(log_dir))
    run_controller(warehouse, root / "checkpoint", shards, limit)
    assert committed_offset(root / "checkpoint") == len(events) - 1
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged_events(warehouse), shards),
                       f"seed {seed}, {batch_records} records per batch, {limit} rows per micro-batch, {shards} shards")


def test_the_decoding_views_name_directory_ids_and_keep_other_codes(spark: SparkSession) -> None:
    """Kafka's reserved directory ids (DirectoryId) by name; a real directory stays its id."""
    real = "XHhkr4tkSsD900pOQ8pPfg"
    spark.createDataFrame([("t", "id", 0, [DIR_MIGRATING, DIR_UNASSIGNED, DIR_LOST, real], 1)],
                          "topic STRING, topic_id STRING, partition INT, directories ARRAY<STRING>, "
                          "leader_recovery_state TINYINT").createOrReplaceTempView("partitions")
    row = spark.sql(decoding_view("partitions", ["topic", "partition", "directories", "leader_recovery_state"])).first()
    assert (row.directories, row.leader_recovery_state) == (["MIGRATING", "UNASSIGNED", "LOST", real], "RECOVERING")
    spark.createDataFrame([(t, "x", "k", "v") for t in (2, 4, 8, 16, 32, 64)],
                          "resource_type TINYINT, resource_name STRING, name STRING, value STRING",
                          ).createOrReplaceTempView("configs")
    names = [r.resource_type for r in spark.sql(decoding_view("configs")).collect()]
    assert names == ["TOPIC", "BROKER", "BROKER_LOGGER", "CLIENT_METRICS", "GROUP", "UNKNOWN"]


def test_the_cluster_view_without_meta_properties_takes_the_id_a_request_names(spark: SparkSession) -> None:
    """No quorum_files (hand-written events only): the id of a BrokerRegistrationRequest; the levels of the
    last row of each feature."""
    spark.createDataFrame([("BrokerHeartbeatRequest", None),
                           ("BrokerRegistrationRequest", ("fPZv1VBsRFmnlRvmGcOW9w",))],
                          "type STRING, BrokerRegistrationRequest STRUCT<ClusterId: STRING>",
                          ).createOrReplaceTempView("metadata_log")
    spark.createDataFrame([(2, 4, "metadata.version", 14), (9, 9, "metadata.version", 19),
                           (12, 12, "kraft.version", 1)],
                          "offset BIGINT, applied_offset BIGINT, feature STRING, level SMALLINT",
                          ).createOrReplaceTempView("features")
    sql = cluster_view(["metadata_log", "features"], ["type", "BrokerRegistrationRequest"])
    assert [tuple(r) for r in spark.sql(sql).collect()] == [
        ("fPZv1VBsRFmnlRvmGcOW9w", "BrokerRegistrationRequest", 19, {"kraft.version": 1, "metadata.version": 19})]
