"""Reading delta-rs tables into Spark: the ``kraftlake_delta`` data source behind ``Warehouse``."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from kraftlake.storage import DELTA_RS, Warehouse, native

LOG = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", "UTC")),
        pa.field("type", pa.string()),
        pa.field("version", pa.int16()),
        pa.field("PartitionChangeRecord", pa.struct([("PartitionId", pa.int32()), ("Isr", pa.list_(pa.int32()))])),
    ]
)
LOG_DDL = (
    "offset BIGINT NOT NULL, timestamp TIMESTAMP, type STRING, version SMALLINT, "
    "PartitionChangeRecord STRUCT<PartitionId: INT, Isr: ARRAY<INT>>"
)
T0 = 1763580879457


def log_rows(offsets: list[int]) -> pa.Table:
    return pa.table(
        {
            "offset": offsets,
            "timestamp": [(T0 + o) * 1000 for o in offsets],
            "type": ["PartitionChangeRecord"] * len(offsets),
            "version": [0] * len(offsets),
            "PartitionChangeRecord": [{"PartitionId": o % 4, "Isr": [1, o % 3]} for o in offsets],
        },
        schema=LOG,
    )


def expected_row(o: int) -> tuple:
    ts = datetime.fromtimestamp((T0 + o) / 1000, tz=timezone.utc).replace(tzinfo=None)
    return (o, ts, "PartitionChangeRecord", 0, (o % 4, [1, o % 3]))


@pytest.fixture
def warehouse(tmp_path: Path, spark: SparkSession) -> Warehouse:
    return Warehouse(str(tmp_path / "warehouse"), spark=spark)


def append_chunks(warehouse: Warehouse, chunks: list[list[int]]) -> None:
    """One commit, hence at least one file, per chunk: the source must cope with many small files."""
    for chunk in chunks:
        warehouse.append("metadata_log", log_rows(chunk), LOG)


def run_available_now(df: DataFrame, checkpoint: Path) -> list[tuple[int, list[int]]]:
    """Runs a Trigger.AvailableNow query; returns (batch id, offsets in arrival order) per micro-batch."""
    batches: list[tuple[int, list[int]]] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        batches.append((batch_id, [row.offset for row in batch.select("offset").collect()]))

    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(120)
    return batches


def test_auto_engine_is_delta_rs_without_the_connector(warehouse: Warehouse, spark: SparkSession) -> None:
    assert warehouse.engine == DELTA_RS
    assert not native.has_connector(spark)
    with pytest.raises(native.ConnectorMissing, match="--packages io.delta:delta-spark_2.13:4.4.1"):
        Warehouse(warehouse.root, engine="native", spark=spark)


def test_read_df_is_the_table(warehouse: Warehouse, spark: SparkSession) -> None:
    offsets = [0, 1, 2, 5, 6, 9, 10, 11, 20]
    append_chunks(warehouse, [offsets[:3], offsets[3:4], offsets[4:7], offsets[7:]])
    expected = spark.createDataFrame([expected_row(o) for o in offsets], LOG_DDL)
    assert_df_equality(warehouse.read_df("metadata_log"), expected, ignore_row_order=True)


def test_read_df_of_an_empty_and_of_an_evolved_table(warehouse: Warehouse, spark: SparkSession) -> None:
    warehouse.create_if_missing("metadata_log", LOG)
    empty = warehouse.read_df("metadata_log")
    assert empty.count() == 0
    assert empty.schema == spark.createDataFrame([], LOG_DDL).schema

    warehouse.append("metadata_log", log_rows([0]), LOG)
    wider = LOG.append(pa.field("FenceBrokerRecord", pa.struct([("Id", pa.int32())])))
    fenced = log_rows([1]).append_column("FenceBrokerRecord", pa.array([{"Id": 3}], wider.field(-1).type))
    warehouse.append("metadata_log", fenced, wider)
    got = warehouse.read_df("metadata_log").orderBy("offset").select("offset", "FenceBrokerRecord.Id")
    assert [tuple(r) for r in got.collect()] == [(0, None), (1, 3)]


def test_spark_dataframes_are_written_through_arrow(warehouse: Warehouse, spark: SparkSession) -> None:
    df = spark.createDataFrame([expected_row(o) for o in (3, 4)], LOG_DDL)
    assert warehouse.append("metadata_log", df, LOG, txn=("q", 0))
    assert not warehouse.append("metadata_log", df, LOG, txn=("q", 0))
    keys = spark.createDataFrame([(3,)], "offset BIGINT")
    assert warehouse.upsert("metadata_log", df.limit(0), ["offset"], LOG, ("u", 0), delete_keys=keys)
    assert warehouse.read_arrow("metadata_log").column("offset").to_pylist() == [4]


def test_stream_bounded_by_rows_arrives_once_in_order_and_resumes(warehouse: Warehouse, tmp_path: Path) -> None:
    first = [[0, 1], [2, 5, 6, 9], [10], [11, 12, 20], [21], [22, 30, 31]]  # gaps, 6 small files
    append_chunks(warehouse, first)
    checkpoint = tmp_path / "checkpoint"
    batches = run_available_now(warehouse.read_stream("metadata_log", max_records_per_batch=3), checkpoint)
    expected = [o for chunk in first for o in chunk]
    assert [b for b, _ in batches] == [0, 1, 2, 3, 4]
    assert [offsets for _, offsets in batches] == [expected[i : i + 3] for i in range(0, len(expected), 3)]

    second = [[40, 41], [45], [50, 51, 52, 53]]
    append_chunks(warehouse, second)
    resumed = run_available_now(warehouse.read_stream("metadata_log", max_records_per_batch=3), checkpoint)
    assert [b for b, _ in resumed] == [5, 6, 7]
    assert [o for _, offsets in resumed for o in offsets] == [40, 41, 45, 50, 51, 52, 53]
    assert all(len(offsets) <= 3 for _, offsets in resumed)


def test_stream_without_a_limit_and_from_a_starting_offset(
    warehouse: Warehouse, spark: SparkSession, tmp_path: Path
) -> None:
    append_chunks(warehouse, [[0, 1, 2], [5, 6], [9, 12]])
    whole = run_available_now(warehouse.read_stream("metadata_log"), tmp_path / "whole")
    assert whole == [(0, [0, 1, 2, 5, 6, 9, 12])]
    tail = spark.readStream.format("kraftlake_delta").option("startingOffset", 6).load(warehouse.path("metadata_log"))
    assert [o for _, offsets in run_available_now(tail, tmp_path / "tail") for o in offsets] == [6, 9, 12]


def test_stream_sees_rows_appended_while_running_and_stops_on_schema_change(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    warehouse.create_if_missing("metadata_log", LOG)
    seen: list[int] = []
    checkpoint = str(tmp_path / "checkpoint")

    def start():
        return (
            warehouse.read_stream("metadata_log", max_records_per_batch=2)
            .writeStream.foreachBatch(lambda batch, _: seen.extend(r.offset for r in batch.select("offset").collect()))
            .option("checkpointLocation", checkpoint)
            .start()
        )

    query = start()
    try:
        for chunk in ([0, 1, 2], [7], [8, 9, 15, 16, 17]):
            warehouse.append("metadata_log", log_rows(chunk), LOG)
            query.processAllAvailable()
        assert seen == [0, 1, 2, 7, 8, 9, 15, 16, 17]

        wider = LOG.append(pa.field("FenceBrokerRecord", pa.struct([("Id", pa.int32())])))
        fenced = log_rows([18]).append_column("FenceBrokerRecord", pa.nulls(1, wider.field(-1).type))
        warehouse.append("metadata_log", fenced, wider)
        with pytest.raises(StreamingQueryException, match="restart the query"):
            query.processAllAvailable()
    finally:
        query.stop()
    query = start()  # from the checkpoint, with the new schema
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert seen == [0, 1, 2, 7, 8, 9, 15, 16, 17, 18]


def test_stream_of_some_columns_and_types_only(warehouse: Warehouse, tmp_path: Path) -> None:
    rows = log_rows(list(range(10)))
    kinds = ["NoOpRecord" if o % 3 else "PartitionChangeRecord" for o in range(10)]
    warehouse.append("metadata_log", rows.set_column(2, "type", pa.array(kinds)), LOG)
    df = warehouse.read_stream("metadata_log", max_records_per_batch=4, columns=["offset", "type"],
                               types=["PartitionChangeRecord"])
    assert df.columns == ["offset", "type"]
    batches = run_available_now(df, tmp_path / "checkpoint")
    # batches are still bounded by offsets (0-3, 4-7, 8-9); only the rows of the type come through
    assert batches == [(0, [0, 3]), (1, [6]), (2, [9])]


def test_a_stream_skipping_empty_batches_plans_none_for_ranges_without_its_types(warehouse: Warehouse,
                                                                                   tmp_path: Path) -> None:
    rows = log_rows(list(range(20)))
    kinds = ["PartitionChangeRecord" if o in (5, 6, 15) else "NoOpRecord" for o in range(20)]
    warehouse.append("metadata_log", rows.set_column(2, "type", pa.array(kinds)), LOG)

    df = warehouse.read_stream("metadata_log", max_records_per_batch=4, columns=["offset"],
                               types=["PartitionChangeRecord"], skip_empty=True)
    # bounded by offsets alone the micro-batches would be 0-3, 4-7, 8-11, 12-15, 16-19, three of them empty;
    # skipping, one starts where the range holds the types' rows (4 rows on from the first: 5-8, 15-18), and
    # none is planned for the tail without them
    assert run_available_now(df, tmp_path / "checkpoint") == [(0, [5, 6]), (1, [15])]


# object_store's credential keys (its AmazonS3ConfigKey, AzureConfigKey and GoogleConfigKey documentation,
# aliases included): the values a warehouse on object storage hands the data source.
CREDENTIAL_KEYS = [
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_token",
    "azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key", "account_key",
    "access_key", "master_key", "azure_client_secret", "client_secret", "azure_storage_sas_key",
    "azure_storage_sas_token", "sas_key", "sas_token", "azure_storage_token", "bearer_token", "token",
    "google_service_account_key", "service_account_key", "google_application_credentials",
]


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_storage_credentials_never_show_in_plans(warehouse: Warehouse, spark: SparkSession,
                                                 capsys: pytest.CaptureFixture, streaming: bool) -> None:
    """Spark prints a source's options in plans (explain, the UI's SQL tab, event logs) unless their key
    matches spark.redaction.regex; the session here keeps Spark's default, which alone would show
    azure_storage_account_key and most others in clear."""
    from kraftlake.storage import datasource

    append_chunks(warehouse, [[0, 1]])
    secrets = {key: f"hunter2-{i}-x" for i, key in enumerate(CREDENTIAL_KEYS)}
    datasource.register(spark)
    reader = spark.readStream if streaming else spark.read
    frame = reader.format(datasource.NAME).options(**datasource.source_options(secrets)) \
        .load(warehouse.path("metadata_log"))
    frame.explain(extended=True)
    shown = capsys.readouterr().out
    assert [key for key, value in secrets.items() if value in shown] == []
    if streaming:  # the streaming relation lists every option: each one there, redacted
        assert [key for key in secrets if f"{key}=*********(redacted)" not in shown] == []
    if not streaming:  # the options still reach the reader: it opens the (local) table with them ignored
        assert frame.count() == 2


def test_starting_a_stream_changes_nothing_in_the_registered_source_s_environment(
    warehouse: Warehouse, spark: SparkSession, tmp_path: Path
) -> None:
    """Each stream's start writes its worker settings into the registered source's environment, one
    java.util.HashMap all the source's queries share and serialise into their tasks: two starting at
    once inserted into it from two threads, and both queries' tasks then failed to deserialise on every
    attempt (java.io.OptionalDataException). Registering puts those settings there first, so a start
    only rewrites equal values; a Spark that adds another would fail here."""
    from kraftlake.storage import datasource

    append_chunks(warehouse, [[0, 1, 2]])
    datasource._registered.discard(spark)
    datasource.register(spark)  # a new registration: a new environment, no stream started over it yet
    registered = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource(datasource.NAME)
    environment = registered.dataSourceCls().envVars()
    before = dict(environment)
    assert [(b, offsets) for b, offsets in run_available_now(warehouse.read_stream("metadata_log"),
                                                             tmp_path / "checkpoint")] == [(0, [0, 1, 2])]
    assert dict(environment) == before
    assert "SPARK_PYTHON_RUNTIME" in before


def test_the_default_redaction_pattern_covers_every_credential_key(spark: SparkSession) -> None:
    """Spark settings that carry credentials (spark.executorEnv.AZURE_STORAGE_ACCOUNT_KEY, ...) are shown
    redacted in the UI and event logs when their key matches spark.redaction.regex: ours covers
    object_store's keys where Spark's default does not. Matched with Java's regex engine, as Spark does."""
    from kraftlake.metadata.config import defaults

    pattern = spark.sparkContext._jvm.java.util.regex.Pattern.compile(defaults()["spark.redaction.regex"])
    names = CREDENTIAL_KEYS + [f"spark.executorEnv.{key.upper()}" for key in CREDENTIAL_KEYS]
    assert [name for name in names if not pattern.matcher(name).find()] == []
    harmless = ["spark.app.name", "spark.sql.shuffle.partitions", "kraftlake.storage.aws_region"]
    assert [name for name in harmless if pattern.matcher(name).find()] == []


def test_a_bounded_stream_of_the_log_ends_its_micro_batches_with_whole_record_batches(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    """A Kafka record batch (rows sharing source and position) is never split between micro-batches, so the
    controller sees a fencing and the partition changes before it together; one row without a position is a
    batch of its own."""
    positions = [0, 0, 0, 0, 0, 40, 90, 90, 90, 90, 90, 90, 90, None, 150, 150]
    rows = log_rows(list(range(len(positions))))
    rows = rows.append_column("source", pa.array(["00000000000000000000.log"] * len(positions)))
    rows = rows.append_column("position", pa.array(positions, pa.int64()))
    warehouse.append("metadata_log", rows, rows.schema)
    batches = run_available_now(warehouse.read_stream("metadata_log", max_records_per_batch=3), tmp_path / "checkpoint")
    assert [offsets for _, offsets in batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15]]


def test_a_stopped_stream_reader_leaves_the_jvm_s_hang_up_unsaid(monkeypatch, capsys):
    """Spark's source runner calls the reader's ``stop`` when the JVM ends the query, then reports the
    socket's end over the closed socket: that BrokenPipeError (raised while handling the EOFError) escaped
    as a traceback on the controller's stderr after 'stopping'. Any other error is still printed."""
    import sys

    from kraftlake.storage.datasource import _ChangeStreamReader, _StreamReader

    printed: list[type] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, error, trace: printed.append(kind))
    for reader in (_StreamReader, _ChangeStreamReader):
        reader.stop(object.__new__(reader))

        def escaped(error: BaseException, during: BaseException | None = None) -> None:
            try:
                try:
                    raise during or error
                except BaseException:
                    if during is None:
                        raise
                    raise error
            except BaseException as raised:  # noqa: BLE001 (handed to the hook as the interpreter would)
                sys.excepthook(type(raised), raised, raised.__traceback__)

        escaped(BrokenPipeError(32, "Broken pipe"), during=EOFError())
        escaped(ConnectionResetError(104, "Connection reset by peer"))
        escaped(ValueError("a bug"), during=KeyError("x"))
        escaped(RuntimeError("another"))
    assert printed == [ValueError, RuntimeError, ValueError, RuntimeError]


def test_a_reader_bounded_by_time_plans_as_its_micro_batches_took(tmp_path: Path, monkeypatch) -> None:
    """``maxBatchMillis`` on a real table, the reader called as Spark calls it, on a fake clock: the first
    micro-batch at the floor (1,000 rows), then each sized by the last one's pace, twice at most when fast, a
    1,000 at least, never above the cap, and whole Kafka record batches (16 rows here) kept whole."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from kraftlake.storage import datasource
    from kraftlake.storage.deltars import DeltaRsTables
    from kraftlake.storage.pacing import Pace

    offsets = list(range(20_000))
    rows = log_rows(offsets).append_column("source", pa.array(["00000000000000000000.log"] * len(offsets)))
    rows = rows.append_column("position", pa.array([o // 16 * 100 for o in offsets], pa.int64()))
    tables = DeltaRsTables(str(tmp_path / "w"))
    tables.append("metadata_log", rows, rows.schema)
    now = [0.0]
    monkeypatch.setattr(datasource, "Pace", lambda ms, cap: Pace(ms, cap, lambda: now[0]))
    options = {"maxRecordsPerBatch": "6000", "maxBatchMillis": "10000"}
    reader = datasource._StreamReader(tables.path("metadata_log"), None, options)
    cap = ReadMaxRows(6000)

    def batch(start: int, seconds: float) -> int:
        """Spark's calls for one micro-batch from ``start`` that takes ``seconds``; its end."""
        end = reader.latestOffset({"offset": start}, cap)["offset"]
        reader.partitions({"offset": start}, {"offset": end})
        now[0] += seconds
        return end

    ends = [-1]
    for seconds in (2.0, 40.0, 1.0, 1.0, 1.0, 1.0):
        ends.append(batch(ends[-1], seconds))
    # 1,000 rows end inside the record batch 992-1007; fast: 2,016 rows (twice); 40 s: 504 would fit, the floor
    # (1,000, to 4,031 its batch's end); then twice the rows each time, up to the cap (6,000, to 16,079)
    assert ends == [-1, 1007, 3023, 4031, 6047, 10079, 16079]
    # the last micro-batch was cut short by the log's end and in time: the next keeps the cap
    assert batch(16_079, 1.0) == 19_999
    unbatched = log_rows(list(range(20_000, 30_000))).append_column("source", pa.nulls(10_000, pa.string()))
    tables.append("metadata_log", unbatched.append_column("position", pa.nulls(10_000, pa.int64())), rows.schema)
    assert batch(19_999, 1.0) == 25_999

    # a reader made for a restart: the micro-batch planned before it (run, never planned here) is timed from its
    # creation; 6,000 rows in 30 s: 2,000 fit in 10 s
    restarted = datasource._StreamReader(tables.path("metadata_log"), None, options)
    restarted.partitions({"offset": 19_999}, {"offset": 25_999})
    now[0] += 30.0
    assert restarted.latestOffset({"offset": 25_999}, cap) == {"offset": 27_999}

    with pytest.raises(ValueError, match="maxBatchMillis sizes micro-batches below maxRecordsPerBatch"):
        datasource._StreamReader(tables.path("metadata_log"), None, {"maxBatchMillis": "10000"})
    with pytest.raises(ValueError, match="maxBatchMillis must be positive, got 0"):
        datasource._StreamReader(tables.path("metadata_log"), None, {**options, "maxBatchMillis": "0"})


def test_a_micro_batch_is_cut_into_min_partitions_tasks_where_its_row_groups_allow(tmp_path: Path) -> None:
    """``minPartitions``: a micro-batch far below the rows a task may hold is still cut into that many tasks
    (one a core), at row groups' boundaries (8 files of 1,000 rows here), tiling its range exactly."""
    from kraftlake.storage import datasource
    from kraftlake.storage.deltars import DeltaRsTables

    tables = DeltaRsTables(str(tmp_path / "w"))
    for first in range(0, 8_000, 1_000):
        rows = log_rows(list(range(first, first + 1_000)))
        tables.append("metadata_log", rows, rows.schema)

    def ranges(options: dict, lo: int = -1, hi: int = 7_999) -> list[tuple[int, int]]:
        reader = datasource._StreamReader(tables.path("metadata_log"), None, options)
        return [(r.lo, r.hi) for r in reader.partitions({"offset": lo}, {"offset": hi})]

    assert ranges({}) == [(-1, 7_999)]
    assert ranges({"minPartitions": "1"}) == [(-1, 7_999)]
    assert ranges({"minPartitions": "2"}) == [(-1, 3_999), (3_999, 7_999)]
    assert ranges({"minPartitions": "4"}) == [(-1, 1_999), (1_999, 3_999), (3_999, 5_999), (5_999, 7_999)]
    assert len(ranges({"minPartitions": "64"})) == 8  # no finer than the row groups
    # 3,500 rows: 1,750 a task; the row group 2,000-2,999 counts whole (an estimate), so the cut follows 3,999
    assert ranges({"minPartitions": "2"}, 2_499, 5_999) == [(2_499, 3_999), (3_999, 5_999)]
    with pytest.raises(ValueError, match="minPartitions must be positive, got 0"):
        ranges({"minPartitions": "0"})
