"""The warehouse: one directory (or URI) of Delta tables, behind one interface for both engines.

Writes of Arrow data always go through delta-rs and need no Spark, so the pure parts (ingest,
tests, tools) can commit without a session. Spark DataFrames are written by the session's engine.
Reads into Spark go through the engine picked from the session: the native Delta connector when it
is loaded, else the ``kraftlake_delta`` Python data source over delta-rs. Both produce and read the
same standard Delta tables, so a warehouse moves freely between a laptop and a cluster.

This package imports pyspark lazily: ``kraftlake.storage.deltars`` must stay importable without it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kraftlake.storage.deltars import PAYLOAD, ArrowData, Conflict, DeltaRsTables, StorageOptions, Txn

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

AUTO, NATIVE, DELTA_RS = "auto", "native", "delta-rs"
ENGINES = (AUTO, NATIVE, DELTA_RS)


def resolve_engine(engine: str, spark: SparkSession | None) -> str:
    """``auto`` means native exactly when the session has the Delta connector; forcing native without
    it fails now, with how to add the jars, rather than at the first read."""
    if engine not in ENGINES:
        raise ValueError(f"unknown storage engine {engine!r}; expected one of {', '.join(ENGINES)}")
    if engine == DELTA_RS or (engine == AUTO and spark is None):
        return DELTA_RS
    from kraftlake.storage import native

    if spark is None:
        raise native.ConnectorMissing("the native Delta engine reads and writes through a SparkSession; none was given")
    if engine == NATIVE:
        native.require_connector(spark)
        return NATIVE
    return NATIVE if native.has_connector(spark) else DELTA_RS


def _is_spark(data: Any) -> bool:
    return type(data).__module__.startswith("pyspark.")


class Warehouse(DeltaRsTables):
    """Tables ``<root>/<name>``; ``engine`` is ``auto``, ``native`` or ``delta-rs`` (e.g. from conf).

    ``read_df`` on delta-rs uses the Python data source rather than ``spark.read.parquet`` over the
    active files: it reads exactly the Delta snapshot through delta-rs (which refuses deletion
    vectors and column mapping instead of returning deleted rows or wrong columns), reaches object
    stores with delta-rs' own URIs and credentials (s3:// rather than Hadoop's s3a://), fills
    columns added by schema evolution with nulls, and shares its code with the streaming reader.
    The price is a Python worker per task and an Arrow hop into the JVM.
    """

    def __init__(self, root: str, engine: str = AUTO, spark: SparkSession | None = None,
                 storage_options: StorageOptions = None) -> None:
        super().__init__(root, storage_options)
        self.spark = spark
        self.engine = resolve_engine(engine, spark)

    def _session(self) -> SparkSession:
        if self.spark is None:
            raise ValueError("reading tables as Spark DataFrames needs Warehouse(..., spark=session)")
        return self.spark

    def append(self, name: str, data: ArrowData | DataFrame, schema: pa.Schema, txn: Txn | None = None,
               read_version: int | None = None) -> bool:
        """As :meth:`DeltaRsTables.append`; a DataFrame is written by the native connector when the
        engine is native, else collected to the driver as Arrow (fine for micro-batch outputs)."""
        if _is_spark(data):
            if self.engine == NATIVE and read_version is None:
                from kraftlake.storage import native

                if self._already_committed(name, txn):
                    return False
                self.create_if_missing(name, schema)
                native.append(data, self.path(name), txn)
                return True
            data = data.toArrow()
        return super().append(name, data, schema, txn, read_version)

    def upsert(
        self,
        name: str,
        data: pa.Table | DataFrame,
        keys: list[str],
        schema: pa.Schema,
        txn: Txn | None = None,
        delete_keys: pa.Table | DataFrame | None = None,
    ) -> bool:
        """As :meth:`DeltaRsTables.upsert`, with DataFrames handled like in :meth:`append`."""
        if _is_spark(data) and self.engine == NATIVE:
            from kraftlake.storage import native

            if self._already_committed(name, txn):
                return False
            self.create_if_missing(name, schema)
            if delete_keys is not None and not _is_spark(delete_keys):
                delete_keys = self._session().createDataFrame(delete_keys)
            native.merge(self._session(), self.path(name), data, keys, delete_keys, txn)
            return True
        if _is_spark(data):
            data = data.toArrow()
        if _is_spark(delete_keys):
            delete_keys = delete_keys.toArrow()
        return super().upsert(name, data, keys, schema, txn, delete_keys)

    def read_df(self, name: str) -> DataFrame:
        spark = self._session()
        if self.engine == NATIVE:
            from kraftlake.storage import native

            return native.read_df(spark, self.path(name))
        from kraftlake.storage import datasource

        datasource.register(spark)
        return (spark.read.format(datasource.NAME).options(**datasource.source_options(self.storage_options))
                .load(self.path(name)))

    def read_changes(self, name: str, stream: bool = True, starting_version: int | None = None,
                     ending_version: int | None = None) -> DataFrame:
        """The table's change data feed (a state table's: ``metadata.tables.CHANGE_DATA_FEED``), with Delta's
        columns ``_change_type``, ``_commit_version``, ``_commit_timestamp`` after the table's, on either engine.
        A stream without ``starting_version`` begins with the table's rows as inserts, then their changes; a
        batch read needs one. ``ending_version``: batch reads only."""
        options = {k: str(v) for k, v in (("startingVersion", starting_version),
                                          ("endingVersion", ending_version)) if v is not None}
        spark = self._session()
        if self.engine == NATIVE:
            from kraftlake.storage import native

            return native.read_changes(spark, self.path(name), options, stream)
        from kraftlake.storage import datasource

        datasource.register(spark)
        reader = (spark.readStream if stream else spark.read).format(datasource.NAME)
        return (reader.options(**datasource.source_options(self.storage_options))
                .option(datasource.READ_CHANGE_FEED, "true").options(**options).load(self.path(name)))

    def read_stream(
        self, name: str, max_records_per_batch: int | None = None, max_files_per_trigger: int | None = None,
        columns: list[str] | None = None, types: list[str] | None = None, json_payload: list[str] | None = None,
        skip_empty: bool = False, max_batch_ms: int | None = None, min_partitions: int | None = None,
        transform: tuple[str, dict, str] | None = None,
    ) -> DataFrame:
        """A stream of the table's rows; each engine bounds micro-batches its own way (see ``native``):
        delta-rs by rows of the ``offset`` column, and below ``max_records_per_batch`` by the time the last
        micro-batches took (``max_batch_ms``: ``pacing``), native by files. ``columns``: read only these (a query
        that needs a few columns of a wide table then reads only their Parquet column chunks); ``types``:
        only rows whose ``type`` is one of these (filtered before they reach Spark); ``json_payload``
        (delta-rs): these struct columns reach Spark as one string column ``payload``, each row's value
        as JSON (the native engine gives the struct columns themselves); ``skip_empty`` (delta-rs, with
        ``types``): no micro-batch for rows none of which is of ``types``; ``min_partitions`` (delta-rs): tasks a
        micro-batch is cut into at least, where its row groups allow (native cuts by files); ``transform``
        (delta-rs, with ``columns``): (``module:function``, its keyword arguments, the schema it gives as DDL), what
        the read tasks hand the rows to (``datasource.TRANSFORM``), whose batches are the stream's rows."""
        spark = self._session()
        if self.engine == NATIVE:
            from kraftlake.storage import native

            if max_records_per_batch is not None or max_batch_ms is not None:
                raise ValueError(
                    "max_records_per_batch and max_batch_ms need the delta-rs engine: the native Delta source "
                    "can only bound micro-batches by files (max_files_per_trigger)"
                )
            stream = native.read_stream(spark, self.path(name), max_files_per_trigger)
            if types is not None:
                from pyspark.sql import functions as F

                stream = stream.where(F.col("type").isin(*types))
            return stream if columns is None else stream.select(*columns, *(json_payload or []))
        if max_files_per_trigger is not None:
            raise ValueError("max_files_per_trigger is a native-engine option; delta-rs bounds batches by rows")
        from kraftlake.storage import datasource

        datasource.register(spark)
        reader = spark.readStream.format(datasource.NAME).options(**datasource.source_options(self.storage_options))
        if max_records_per_batch is not None:
            reader = reader.option("maxRecordsPerBatch", max_records_per_batch)
        if max_batch_ms is not None:
            reader = reader.option(datasource.MAX_BATCH_MILLIS, max_batch_ms)
        if min_partitions is not None:
            reader = reader.option(datasource.MIN_PARTITIONS, min_partitions)
        if types is not None:
            reader = reader.option("typeIn", ",".join(types))
            if skip_empty:
                reader = reader.option("skipEmptyBatches", "true")
        if json_payload:
            reader = reader.option("jsonPayload", ",".join(json_payload))
        if transform is not None:
            if columns is None:
                raise ValueError("a transform reads the columns it is given: pass columns")
            function, arguments, schema = transform
            return (reader.option(datasource.TRANSFORM, function)
                    .option(datasource.TRANSFORM_ARGS, json.dumps(arguments))
                    .option(datasource.TRANSFORM_INPUT, ",".join(columns)).schema(schema).load(self.path(name)))
        if columns is not None or json_payload:  # the source reads the columns of the schema it is given
            from pyspark.sql.types import StringType, StructField, StructType

            full = datasource.spark_schema(self.table(name))
            fields = [full[c] for c in columns] if columns is not None else \
                [f for f in full if f.name not in (json_payload or ())]
            payload = [StructField(PAYLOAD, StringType())] if json_payload else []
            reader = reader.schema(StructType(fields + payload))
        return reader.load(self.path(name))


__all__ = ["DELTA_RS", "NATIVE", "AUTO", "PAYLOAD", "Conflict", "DeltaRsTables", "Warehouse", "resolve_engine"]
