"""``kraftlake_delta``: a Spark Python Data Source over Delta tables committed by delta-rs.

It is how a session without the Delta Spark connector reads the warehouse in a distributed way:
planning (file lists, offsets) runs in a Python worker on the driver, and each task opens the
table with delta-rs and ships Arrow batches to the JVM. The classes are pickled to executors, so
everything here must import on a plain executor with pyspark, pyarrow and deltalake.

Streaming position is the table's integer offset column, not the Delta version: the metadata log is
appended in increasing offset order (ADR 0001), so "offset in (start, end]" names the same rows in
every later version of the table, whatever files compaction produced, and a micro-batch can be cut
at any row rather than at commit boundaries (which is what makes ``maxRecordsPerBatch`` possible);
in ``metadata_log``, at the end of a Kafka record batch (``deltars.batch_end``).

With ``readChangeFeed`` the source reads a table's change data feed instead (Delta's option names and
columns: ``_change_type``, ``_commit_version``, ``_commit_timestamp``), through delta-rs' ``load_cdf``, which
Delta's own ``readChangeFeed`` cannot do here without the native connector. There the position is the Delta
version: the rows a version changed are fixed once it is committed, so a micro-batch of versions (a, b] reads
the same rows whenever it is run again, and a stream restarted from its checkpoint sees each change once.
"""

from __future__ import annotations

import importlib
import json
import sys
import weakref
from datetime import datetime, timezone
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType

from kraftlake.codec.events import json_bytes
from kraftlake.storage.deltars import PAYLOAD
from kraftlake.storage.deltars import (StorageOptions, as_inserts, batch_end, change_data_from, change_schema, changes,
                                       column_max, commit_times, dataset, nth_value_after, read_range, split_range,
                                       version_at)
from kraftlake.storage.pacing import Pace

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "kraftlake_delta"
# Options ``secret.storage.<key>`` are delta-rs storage options (endpoint, credentials): they travel with
# the pickled reader to the executors, which open the table themselves. Spark shows a source's options in
# plans (explain, the UI, event logs) unless a key matches spark.redaction.regex, whose default
# (secret|password|token|access.key) misses object_store's azure_storage_account_key, sas keys, service
# account keys...: the word "secret" in every key's prefix has Spark redact them all, whatever the
# session's configuration, new object_store keys included.
STORAGE_OPTION = "secret.storage."
# A batch-read task gets about this many bytes of Parquet; a streaming task about this many rows
# (a streaming task sorts its range in memory, so rows bound its memory).
BATCH_PARTITION_BYTES = 128 << 20
STREAM_PARTITION_ROWS = 200_000
# A stream's micro-batch is cut into at least this many tasks where its row groups allow (Spark's Kafka source
# has the same option): one of 200,000 requests was one task, which a core ran alone (2.4 s of its 7 s).
MIN_PARTITIONS = "minPartitions"
# A change feed's task reads this many versions' change data at most (the controller commits a version of
# each table it changes per micro-batch: a day of a continuous controller is tens of thousands).
CHANGE_VERSIONS_PER_TASK = 64
# Delta's options for a change feed, as its own readChangeFeed takes them.
READ_CHANGE_FEED = "readChangeFeed"
# Micro-batches sized to take about this many milliseconds at most (``pacing``), below ``maxRecordsPerBatch``.
MAX_BATCH_MILLIS = "maxBatchMillis"
# A stream's rows handed, in its read tasks, to a function of a layer above this one (``module:function``, of
# kraftlake only) with the JSON object of ``transformArgs`` as keyword arguments, which gives the batches of the
# schema the stream was given; ``transformInput``: the columns it reads (comma-separated). The controller routes
# and packs its events so (``spark.routing``): the JVM then never takes in the log's wide rows one by one.
TRANSFORM, TRANSFORM_ARGS, TRANSFORM_INPUT = "transform", "transformArgs", "transformInput"


def spark_schema(table: DeltaTable) -> StructType:
    return from_arrow_schema(pa.schema(table.schema().to_arrow()))


def source_options(storage_options: StorageOptions) -> dict[str, str]:
    """Storage options as this source's options (see ``STORAGE_OPTION``)."""
    return {f"{STORAGE_OPTION}{k}": v for k, v in (storage_options or {}).items()}


def _storage(options: Mapping[str, str]) -> StorageOptions:
    # Spark hands data sources their options with lower-cased keys; object_store's keys are too
    found = {k[len(STORAGE_OPTION):]: v for k, v in options.items() if k.lower().startswith(STORAGE_OPTION)}
    return found or None


def json_payload(rows: pa.Table, columns: list[str]) -> pa.Array:
    """Each row's value of whichever of ``columns`` it has, as JSON (bytes as base64, as Spark's
    ``to_json`` writes them): many struct columns that are nearly always null cost Spark far more to
    take in, row by row, than one string column does."""
    payload: list[str | None] = [None] * rows.num_rows
    for name in columns:
        column = rows.column(name)
        if column.null_count == len(column):
            continue
        present = pc.indices_nonzero(pc.is_valid(column)).to_pylist()
        for i, value in zip(present, column.take(present).to_pylist()):
            payload[i] = json.dumps(value, separators=(",", ":"), default=json_bytes)
    return pa.array(payload, pa.string())


def _to_spark_batches(batches: Iterable[pa.RecordBatch], schema: StructType) -> Iterator[pa.RecordBatch]:
    """Cast to exactly the Arrow schema Spark derives from ``schema``: it rejects any other layout."""
    target = to_arrow_schema(schema, timezone="UTC")
    for batch in batches:
        if batch.num_rows:
            yield batch.select(target.names).cast(target)


class _Files(InputPartition):
    """Some data files of one table version."""

    def __init__(self, version: int, paths: list[str]) -> None:
        self.version = version
        self.paths = paths


class _Range(InputPartition):
    """Rows with lo < offset <= hi."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.hi = hi


def _file_groups(table: DeltaTable) -> list[InputPartition]:
    """The table's files (at its version as loaded) in tasks of about ``BATCH_PARTITION_BYTES`` each."""
    actions = pa.table(table.get_add_actions())
    groups: list[list[str]] = []
    group_bytes = BATCH_PARTITION_BYTES
    for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()):
        if group_bytes >= BATCH_PARTITION_BYTES:
            groups.append([])
            group_bytes = 0
        groups[-1].append(path)
        group_bytes += size
    # No partitions would make Spark fall back to one plain InputPartition(None).
    return [_Files(table.version(), paths) for paths in groups or [[]]]


class _BatchReader(DataSourceReader):
    """A snapshot read: the version is pinned when partitions are planned, so tasks agree on the files."""

    def __init__(self, path: str, schema: StructType, storage: StorageOptions) -> None:
        self.path = path
        self.schema = schema
        self.storage = storage

    def partitions(self) -> list[InputPartition]:
        return _file_groups(DeltaTable(self.path, storage_options=self.storage))

    def read(self, partition: _Files) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from self._batches(partition)
        _give_back()

    def _batches(self, partition: _Files) -> Iterator[pa.RecordBatch]:
        files = dataset(DeltaTable(self.path, version=partition.version, storage_options=self.storage), partition.paths)
        scanner = files.scanner(columns=self.schema.fieldNames())
        return _to_spark_batches(scanner.to_batches(), self.schema)


def _give_back() -> None:
    """Hands what Arrow's allocator kept of a finished read back to the system. A Python worker outlives its
    task, idle until Spark reuses it, and would otherwise hold it: after two scans of the headline's
    metadata_log its workers held 13.3 GB (proportional set sizes), more than the controller's replay after
    them ever used."""
    pa.default_memory_pool().release_unused()


def _hung_up(error: BaseException | None) -> bool:
    """Whether ``error`` (or one it was raised while handling) is the JVM's end of a socket closing."""
    while error is not None:
        if isinstance(error, (EOFError, ConnectionError)):
            return True
        error = error.__context__
    return False


class _QuietStop:
    """A stream reader's ``stop``, run by Spark's source runner (a Python process per query) when the JVM
    ends the query: the JVM closes the runner's socket, the runner's read ends (EOFError), and its report
    of that to the JVM fails on the closed socket (BrokenPipeError) and escapes as a traceback on the
    job's stderr, after the job said it is stopping; on SIGTERM (every query stopped) about one stop in
    two printed one. From ``stop`` on, an error that is the socket's end is left unsaid; any other is
    printed as before."""

    def stop(self) -> None:
        said = sys.excepthook

        def unless_hung_up(kind: type[BaseException], error: BaseException, trace: object) -> None:
            if not _hung_up(error):
                said(kind, error, trace)

        sys.excepthook = unless_hung_up


class _StreamReader(_QuietStop, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"offset": last_included}``; a micro-batch is offset in (start, end].

    The reader object lives in a Python worker on the driver for the whole query, so the
    Trigger.AvailableNow target set in ``prepareForTriggerAvailableNow`` persists across batches.
    """

    def __init__(self, path: str, schema: StructType, options: Mapping[str, str]) -> None:
        self.path = path
        self.schema = schema
        self.storage = _storage(options)
        self.column = options.get("offsetColumn", "offset")
        self.initial = int(options.get("startingOffset", 0)) - 1
        self.min_partitions = int(options.get(MIN_PARTITIONS, 1))
        if self.min_partitions < 1:
            raise ValueError(f"{MIN_PARTITIONS} must be positive, got {self.min_partitions}")
        max_rows = options.get("maxRecordsPerBatch")
        self.max_rows = int(max_rows) if max_rows is not None else None
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError(f"maxRecordsPerBatch must be positive, got {self.max_rows}")
        # ``maxBatchMillis``: micro-batches of about this many milliseconds at most, below the row cap (``pacing``)
        max_ms = options.get(MAX_BATCH_MILLIS)
        self.pace = None if max_ms is None else self._pace(int(max_ms))
        self.started_with = spark_schema(self._open())
        # a table of the log's records, which ingest gives their record batch's source and position: a micro-batch
        # ends with a whole record batch (``batch_end``), so a batch's records, which explain each other, are
        # never split between micro-batches
        self.batched = {"source", "position"} <= set(self.started_with.fieldNames())
        folded = options.get("jsonPayload")
        self.folded = folded.split(",") if folded else []
        self.transform = options.get(TRANSFORM)
        if self.transform is not None and not self.transform.startswith("kraftlake."):
            raise ValueError(f"{TRANSFORM} must name a function of kraftlake (module:function), not {self.transform!r}")
        self.transform_args = json.loads(options.get(TRANSFORM_ARGS, "{}"))
        self.input = options[TRANSFORM_INPUT].split(",") if self.transform is not None else None
        # the transform's input typed as Spark would have handed it on
        self.input_schema = None if self.input is None else StructType(
            [self.started_with[n] for n in self.input] + ([StructField(PAYLOAD, StringType())] if self.folded else []))
        types = options.get("typeIn")
        # rows of other types never leave Python for Spark: a query that wants a few kinds of a long
        # log (the quorum's traffic) does not pay for converting the rest
        self.types = None if types is None else types.split(",")
        # ``skipEmptyBatches``: no micro-batch at all for a range holding no row of ``typeIn``. Each micro-batch
        # costs its stateful stage's tasks and state store commits however few rows it has, and most of a log
        # holds no quorum traffic. (start, through] of the last range found empty, so that a log growing
        # without such rows is read once, not again at every trigger.
        self.skip_empty = self.types is not None and options.get("skipEmptyBatches") == "true"
        self.empty: tuple[int, int] | None = None
        self.available_now = False
        self.target: int | None = None

    def _open(self) -> DeltaTable:
        return DeltaTable(self.path, storage_options=self.storage)

    def _pace(self, max_ms: int) -> Pace:
        if self.max_rows is None:
            raise ValueError(f"{MAX_BATCH_MILLIS} sizes micro-batches below maxRecordsPerBatch, which is not set")
        if max_ms < 1:
            raise ValueError(f"{MAX_BATCH_MILLIS} must be positive, got {max_ms}")
        return Pace(max_ms, self.max_rows)

    def initialOffset(self) -> dict:
        return {"offset": self.initial}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def _table(self) -> DeltaTable:
        """The current table, refusing a schema change: the query's schema was fixed when it started.

        Rows below an offset already returned were committed before any later schema change, so
        checking here (where offsets are handed out) is enough to never drop a new column's data.
        """
        table = self._open()
        if spark_schema(table) != self.started_with:
            raise RuntimeError(
                f"The schema of the Delta table {self.path} changed since this streaming query started; "
                "restart the query (from its checkpoint) to read the new columns."
            )
        return table

    def _max(self, table: DeltaTable) -> int | None:
        return column_max(table, self.column)

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True
        self.target = self._max(self._table())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        after = start["offset"]
        table = self._table()
        # first, with or without new rows: the micro-batch that ended at ``after`` is timed as soon as it is done
        paced = None if self.pace is None else self.pace.rows(after, lambda lo, hi: self._count(table, lo, hi))
        latest = self.target if self.available_now else self._max(table)
        if latest is None or latest <= after:
            return start
        first = after
        if self.skip_empty:
            first = self._before_first_wanted(table, after, latest)
            if first is None:
                return start
        if isinstance(limit, ReadMaxRows):
            rows = limit.max_rows if paced is None else min(limit.max_rows, paced)
            nth = nth_value_after(table, self.column, first, rows)
            if nth is not None:
                latest = min(latest, batch_end(table, self.column, nth) if self.batched else nth)
            if self.pace is not None:
                self.pace.plan(first, latest, rows)
        elif not isinstance(limit, ReadAllAvailable):
            raise ValueError(f"{NAME} supports ReadAllAvailable and ReadMaxRows limits, not {limit!r}")
        return {"offset": latest}

    def _count(self, table: DeltaTable, after: int, end: int) -> int:
        return read_range(table, self.column, after, end, [self.column]).num_rows

    def _before_first_wanted(self, table: DeltaTable, after: int, latest: int) -> int | None:
        """The offset just before the first row of ``typeIn`` in (after, latest] (None: there is none there)."""
        lo = self.empty[1] if self.empty is not None and self.empty[0] == after else after
        found = read_range(table, self.column, lo, latest, [self.column], self._only()).column(self.column)
        if len(found) == 0:
            self.empty = (after, latest)
            return None
        return found[0].as_py() - 1

    def reportLatestOffset(self) -> dict | None:
        latest = self._max(self._table())
        return None if latest is None else {"offset": latest}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = start["offset"], end["offset"]
        if hi <= lo:
            return []
        if self.pace is not None:
            self.pace.run(lo, hi)
        # Every range, even one whose row groups hold none of ``typeIn`` (its task then reads nothing). Planning
        # no task at all for such a micro-batch was tried once and dropped after a run whose tasks failed to
        # deserialise (java.io.OptionalDataException); that failure was later traced to the source's shared
        # environment map (``_settle_stream_worker_env``), so the idea is open again, untried since.
        # offsets are about one a row: (hi - lo) / min_partitions rows a task, by row groups
        rows = max(1, min(STREAM_PARTITION_ROWS, -(-(hi - lo) // self.min_partitions)))
        return [_Range(a, b) for a, b in split_range(self._open(), self.column, lo, hi, rows)]

    def _only(self) -> tuple[str, list[str]] | None:
        return None if self.types is None else ("type", self.types)

    def read(self, partition: _Range) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        """Reads the current version: any version holding ``hi`` holds exactly the same rows up to it."""
        yield from self._batches(partition)
        _give_back()

    def _batches(self, partition: _Range) -> Iterator[pa.RecordBatch]:
        names = self.input or [n for n in self.schema.fieldNames() if n != PAYLOAD or not self.folded]
        rows = read_range(self._open(), self.column, partition.lo, partition.hi, names + self.folded, self._only())
        if self.folded:
            rows = rows.drop_columns(self.folded).append_column(PAYLOAD, json_payload(rows, self.folded))
        if self.transform is None:
            return _to_spark_batches(rows.to_batches(), self.schema)
        batches = _to_spark_batches(rows.to_batches(max_chunksize=STREAM_PARTITION_ROWS), self.input_schema)
        module, function = self.transform.split(":")
        return _to_spark_batches(getattr(importlib.import_module(module), function)(batches, **self.transform_args),
                                 self.schema)


class _Versions(InputPartition):
    """The change data of versions first..last."""

    def __init__(self, first: int, last: int) -> None:
        self.first = first
        self.last = last


def _version_ranges(first: int, last: int) -> list[InputPartition]:
    return [_Versions(v, min(v + CHANGE_VERSIONS_PER_TASK - 1, last))
            for v in range(first, last + 1, CHANGE_VERSIONS_PER_TASK)]


def _epoch_ms(text: str) -> int:
    """A timestamp option as Delta takes it (``2025-11-19 20:14:39``, ISO 8601; without a zone: UTC)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a timestamp (e.g. 2025-11-19 20:14:39 or 2025-11-19T20:14:39Z)") from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def _version_option(table: DeltaTable, options: Mapping[str, str], which: str) -> int | None:
    """``<which>Version``, else ``<which>Timestamp`` as a version (starting: the first committed at or after
    it; ending: the last at or before it); None when neither is given."""
    version, stamp = options.get(f"{which}Version"), options.get(f"{which}Timestamp")
    if version is not None:
        if not version.strip().isdigit():
            raise ValueError(f"{which}Version must be a Delta version (0, 1, ...), got {version!r}")
        return int(version)
    if stamp is None:
        return None
    found = version_at(table, _epoch_ms(stamp), after=which == "starting")
    if found is None:
        # nothing committed at or after a start: begin after the last version; nothing before an end: none
        return table.version() + 1 if which == "starting" else -1
    return found


class _ChangeReader:
    """What the batch and the streaming change feeds share: the table, its schema as the query started
    with it, and reading a task's rows."""

    def __init__(self, path: str, schema: StructType, storage: StorageOptions) -> None:
        self.path = path
        self.schema = schema
        self.storage = storage

    def _open(self, version: int | None = None) -> DeltaTable:
        return DeltaTable(self.path, version=version, storage_options=self.storage)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, _Files):  # the rows of a version, as its inserts
            table = self._open()
            committed = commit_times(table, partition.version)[partition.version]
            rows = dataset(self._open(partition.version), partition.paths).to_table()
            return _to_spark_batches(as_inserts(rows, partition.version, committed).to_batches(), self.schema)
        return _to_spark_batches(changes(self._open(), partition.first, partition.last).to_batches(), self.schema)


class _ChangeBatchReader(_ChangeReader, DataSourceReader):
    """A change feed read once: ``startingVersion`` (or ``startingTimestamp``) is needed, as Delta's batch
    read needs it; ``endingVersion`` / ``endingTimestamp`` default to the table's version now."""

    def __init__(self, path: str, schema: StructType, options: Mapping[str, str]) -> None:
        super().__init__(path, schema, _storage(options))
        table = self._open()
        first = _version_option(table, options, "starting")
        if first is None:
            raise ValueError(f"a batch read of a change feed needs startingVersion or startingTimestamp ({NAME})")
        last = _version_option(table, options, "ending")
        self.first, self.last = first, table.version() if last is None else min(last, table.version())

    def partitions(self) -> list[InputPartition]:
        if self.last < self.first:
            return [_Versions(0, -1)]
        change_data_from(self.path, self.first, self.storage)
        return _version_ranges(self.first, self.last)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if isinstance(partition, _Versions) and partition.last < partition.first:
            return iter(())
        return super().read(partition)


class _ChangeStreamReader(_QuietStop, _ChangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"version": last included, "table": the table's id}``; a micro-batch is the change data
    of versions (start, end].

    Without ``startingVersion`` / ``startingTimestamp`` the stream begins, as Delta's does, with the
    table's rows at the version its first micro-batch ends at, as inserts of that version, then their
    changes: a subscriber gets the whole state, then every change to it. The table's id (Delta's
    ``metaData.id``) is in each offset: a table deleted and created again (``controller --reset``) starts
    its versions over, and a stream that read the old one is stopped rather than fed a mix of the two.
    """

    def __init__(self, path: str, schema: StructType, options: Mapping[str, str]) -> None:
        super().__init__(path, schema, _storage(options))
        table = self._open()
        change_data_from(self.path, table.version(), self.storage)  # a table without a change feed: said now
        self.table_id = table.metadata().id
        self.started_with = spark_schema(table)
        first = _version_option(table, options, "starting")
        self.from_snapshot = first is None
        self.first = 0 if first is None else first
        self.checked = False
        self.available_now = False
        self.target: int | None = None

    def initialOffset(self) -> dict:
        return {"version": -1 if self.from_snapshot else self.first - 1, "table": self.table_id}

    def _current(self) -> DeltaTable:
        """The table now; refused when its schema changed (as ``_StreamReader._table``) or it is another
        table than the one this stream started on."""
        table = self._open()
        if spark_schema(table) != self.started_with:
            raise RuntimeError(f"The schema of the Delta table {self.path} changed since this streaming query "
                               "started; restart the query (from its checkpoint) to read the new columns.")
        if table.metadata().id != self.table_id:
            raise self._recreated()
        return table

    def _recreated(self) -> RuntimeError:
        return RuntimeError(f"The Delta table {self.path} was created again after this stream began reading it "
                            "(jobs/controller.py --reset rebuilds the derived tables): its versions start over, so "
                            "this stream's checkpoint no longer applies; start the stream again with a new checkpoint")

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True
        self.target = self._current().version()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if start["table"] != self.table_id:
            raise self._recreated()
        latest = self.target if self.available_now else self._current().version()
        return {"version": max(latest, start["version"]), "table": self.table_id}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = start["version"], end["version"]
        if hi <= lo:
            return []
        if self.from_snapshot and lo == -1:
            return _file_groups(self._open(hi))
        if not self.checked:
            change_data_from(self.path, lo + 1, self.storage)
            self.checked = True
        return _version_ranges(lo + 1, hi)


class KraftlakeDeltaSource(DataSource):
    """Options: ``path`` (the table), ``secret.storage.<key>`` (delta-rs storage options), and for streams
    ``maxRecordsPerBatch``, ``maxBatchMillis`` (below that cap, micro-batches sized by the time the last ones
    took: ``pacing``), ``minPartitions`` (tasks a micro-batch is cut into at least, by row groups), ``offsetColumn`` (default ``offset``), ``startingOffset`` (first offset to read, default 0) and ``typeIn`` (only rows whose
    ``type`` is one of these, comma-separated). With ``readChangeFeed`` = true: the table's change data feed,
    from ``startingVersion`` or ``startingTimestamp`` (needed by a batch read; a stream without either begins
    with the table's rows as inserts), up to ``endingVersion`` or ``endingTimestamp`` (batch reads)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise ValueError(f"the {NAME} data source needs a path: .load(<table path>) or .option('path', ...)")
        return path

    def _changes(self) -> bool:
        return str(self.options.get(READ_CHANGE_FEED, "false")).strip().lower() == "true"

    def schema(self) -> StructType:
        table = DeltaTable(self._path(), storage_options=_storage(self.options))
        return from_arrow_schema(change_schema(table)) if self._changes() else spark_schema(table)

    def reader(self, schema: StructType) -> DataSourceReader:
        if self._changes():
            return _ChangeBatchReader(self._path(), schema, self.options)
        return _BatchReader(self._path(), schema, _storage(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._changes():
            return _ChangeStreamReader(self._path(), schema, self.options)
        return _StreamReader(self._path(), schema, self.options)


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Registers ``kraftlake_delta`` in ``spark`` (once: the class is pickled and shipped per registration)."""
    if spark not in _registered:
        spark.dataSource.register(KraftlakeDeltaSource)
        _settle_stream_worker_env(spark)
        _registered.add(spark)


def _settle_stream_worker_env(spark: SparkSession) -> None:
    """Adds to the registered source's environment the keys every streaming query's start adds to it.

    Spark 4.2's ``PythonStreamingSourceRunner.init`` puts four keys into the registered function's own
    environment map, a plain ``java.util.HashMap`` that every query over this source shares and that
    each of their tasks serialises. Two queries starting at once (the controller and the quorum query)
    insert the same new keys from two threads: the map can end up counting a different number of
    entries than it holds, and from then on it serialises into a stream no task can read
    (``java.io.OptionalDataException`` on every attempt of both queries' first tasks). With the keys
    present, and the values the runner computes, its puts only replace a value with an equal one.
    """
    jvm = spark.sparkContext._jvm
    env = jvm.org.apache.spark.SparkEnv.get()
    source = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource(NAME)
    settings = source.dataSourceCls().envVars()
    config = getattr(getattr(jvm.org.apache.spark.internal.config, "package$"), "MODULE$")
    local_dirs = env.blockManager().diskBlockManager().localDirs()
    settings.put("SPARK_LOCAL_DIRS", ",".join(local_dirs[i].getPath() for i in range(len(local_dirs))))
    settings.put("SPARK_AUTH_SOCKET_TIMEOUT",
                 str(env.conf().get(jvm.org.apache.spark.internal.config.Python.PYTHON_AUTH_SOCKET_TIMEOUT())))
    settings.put("SPARK_BUFFER_SIZE", str(env.conf().get(config.BUFFER_SIZE())))
    settings.put("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
