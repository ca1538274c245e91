"""The native engine: the Delta Spark connector (delta-spark), for sessions that have its jars.

It reads and writes with Delta's own JVM code, distributed, and streams with Delta's source, whose
offsets are table versions and files: micro-batches can be bounded by files (``maxFilesPerTrigger``)
but not by rows, and rows within a micro-batch come in file order. Row-level admission control
(``maxRecordsPerBatch``) is therefore a delta-rs engine feature. Kept thin on purpose: the jars
cannot be fetched on these machines, so this path is exercised on clusters only, while the engine
selection below is tested everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DELTA_PACKAGE = "io.delta:delta-spark_2.13:4.4.1"
EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
_PROBE_CLASS = "io.delta.tables.DeltaTable"
# Delta's idempotent-DML session confs: the only way to attach a transaction id to a MERGE.
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_DELETE_FLAG = "__kraftlake_delete"

MISSING_CONNECTOR = (
    "The native Delta engine needs the Delta Spark connector in this Spark session, and it is missing. "
    f"Provide it with `--packages {DELTA_PACKAGE}` (needs access to Maven) or, offline, "
    "`--jars delta-spark_2.13-4.4.1.jar,delta-storage-4.4.1.jar`, together with "
    f"`--conf spark.sql.extensions={EXTENSION} --conf spark.sql.catalog.spark_catalog={CATALOG}`; "
    "or use the delta-rs engine (engine='delta-rs'), which needs no jars."
)


class ConnectorMissing(RuntimeError):
    """The session cannot run the native engine."""


def class_loadable(spark: SparkSession, name: str) -> bool:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM here; the server's configured extension is all we can see.
        return True
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:  # py4j raises Py4JJavaError wrapping ClassNotFoundException
        return False
    return True


def has_connector(spark: SparkSession) -> bool:
    """The Delta extension is configured and its classes load: both are needed for MERGE and txn ids."""
    extensions = [e.strip() for e in (spark.conf.get("spark.sql.extensions", "") or "").split(",")]
    return EXTENSION in extensions and class_loadable(spark, _PROBE_CLASS)


def require_connector(spark: SparkSession) -> None:
    if not has_connector(spark):
        raise ConnectorMissing(MISSING_CONNECTOR)


def read_df(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def read_stream(spark: SparkSession, path: str, max_files_per_trigger: int | None = None) -> DataFrame:
    """Delta's own stream of an append table. A commit that removes files is skipped (``skipChangeCommits``),
    where Delta's stream would stop at it: the log's compaction (``DeltaRsTables.compact``) rewrites rows the
    stream has read, and a backfill's rows below the log's end stop the controller anyway (its
    ``BackfillGuard``)."""
    reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.load(path)


def read_changes(spark: SparkSession, path: str, options: dict[str, str], stream: bool) -> DataFrame:
    """Delta's own change data feed (``readChangeFeed``), with its options (startingVersion, ...)."""
    reader = spark.readStream if stream else spark.read
    return reader.format("delta").option("readChangeFeed", "true").options(**options).load(path)


def append(df: DataFrame, path: str, txn: tuple[str, int] | None) -> None:
    """Delta skips the write itself when ``txn`` is already committed for its app id."""
    writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
    writer.save(path)


def merge(
    spark: SparkSession,
    path: str,
    data: DataFrame,
    keys: list[str],
    delete_keys: DataFrame | None,
    txn: tuple[str, int] | None,
) -> None:
    """Same contract as the delta-rs upsert: one MERGE (deletes as flagged source rows), one commit.

    The transaction id travels in session confs, so two MERGEs of the same session must not run
    concurrently.
    """
    from delta.tables import DeltaTable

    source = data.withColumn(_DELETE_FLAG, F.lit(False))
    if delete_keys is not None:
        deletes = delete_keys.select(*keys).withColumn(_DELETE_FLAG, F.lit(True))
        source = source.unionByName(deletes, allowMissingColumns=True)
    values = {f"`{c}`": f"s.`{c}`" for c in data.columns}
    flag = f"s.`{_DELETE_FLAG}`"
    builder = (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys))
        .whenMatchedDelete(condition=flag)
        .whenMatchedUpdate(condition=f"NOT {flag}", set=values)
        .whenNotMatchedInsert(condition=f"NOT {flag}", values=values)
        .withSchemaEvolution()
    )
    if txn is None:
        builder.execute()
        return
    spark.conf.set(_TXN_APP_ID, txn[0])
    spark.conf.set(_TXN_VERSION, str(txn[1]))
    try:
        builder.execute()
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)
