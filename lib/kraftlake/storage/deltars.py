"""Delta tables through delta-rs (the ``deltalake`` package): commits and reads without Spark.

No pyspark import here: the Spark data source imports this module on executors, and the jobs write
from the driver through it whether or not a SparkSession exists. Every write that must happen once
carries a Delta application transaction ``(app_id, version)`` in the same commit as its data (ADR 0001),
so a retried micro-batch is skipped instead of duplicated.

Several processes may write one warehouse at once (two ingests, an ingest and the controller). Every
commit is a conditional create of the next ``_delta_log`` entry, on local disks and on object stores
alike, so a write that must not interleave with others (ingest's offsets continue the log) is committed
on top of the version it was planned on, or not at all (``Conflict``); and an append carrying a
transaction re-checks it after losing a race, so two writers of one transaction commit it once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError

from kraftlake.metadata.tables import (CHANGE_DATA_FEED, FORMAT_PROPERTY, FORMAT_VERSION, FORMATS, READABLE_FORMATS,
                                       UNMARKED_FORMAT, table_properties)

ArrowData = Union[pa.Table, pa.RecordBatchReader, Iterable[pa.RecordBatch]]
Txn = tuple[str, int]
# delta-rs' storage options (object_store's keys: aws_endpoint_url, aws_access_key_id, ...), as given by
# the ``kraftlake.storage.*`` settings; None for a local warehouse
StorageOptions = Union[Mapping[str, str], None]

# Rows per Parquet row group: the unit a streaming micro-batch is split at into parallel tasks
# (``split_range``), so a log ingested in one commit still keeps every core busy.
ROW_GROUP_ROWS = 131_072
WRITER = WriterProperties(max_row_group_size=ROW_GROUP_ROWS)

# The string column a stream's ``json_payload`` columns are folded into (``Warehouse.read_stream``).
PAYLOAD = "payload"

# Retries of a request the store failed (5xx, a dropped connection, a timeout): object_store's default,
# which delta-rs uses unless ``max_retries`` is among the storage options; ``filesystem`` follows it.
OBJECT_STORE_RETRIES = 10

# Commits an append makes before giving up when other writers keep committing first (each loss costs
# one small log read; losing this often means the table is written in a tight loop by someone else).
COMMIT_ATTEMPTS = 100


class Conflict(RuntimeError):
    """Another writer committed to the table after the version a conditional write was planned on."""


class FormatError(RuntimeError):
    """The warehouse holds a table in a format this release does not read (``metadata.tables.FORMATS``)."""


# The key of a backfill's note in its commit's info (``DeltaRsTables.backfill``).
BACKFILL = "kraftlake.backfill"

# Marks the rows of an upsert's source that delete their key; never reaches the target table.
_DELETE_FLAG = "__kraftlake_delete"


def local_path(uri: str) -> str | None:
    """The absolute local path a path or a ``file:`` URI names; None for any other URI. A URI's path is
    percent-encoded (delta-rs gives a table's URI so: ``x y/{w}`` as ``x%20y/%7Bw%7D``), a path is not."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    if parsed.scheme == "":
        return os.path.abspath(uri)
    return None


def normalize_root(root: str) -> str:
    """Absolute path for local roots: executors and the Delta log must not depend on a cwd."""
    path = local_path(root)
    return root.rstrip("/") if path is None else path


def is_local(root: str) -> bool:
    return urlparse(root).scheme in ("", "file")


def _option(options: Mapping[str, str], *names: str) -> str | None:
    """An object_store option by any of its names, whatever the case (delta-rs accepts both)."""
    lowered = {k.lower(): v for k, v in options.items()}
    return next((lowered[n] for n in names if n in lowered), None)


def with_retries_at_most(storage_options: StorageOptions, retries: int) -> StorageOptions:
    """The options with the clients' ``max_retries`` (delta-rs' and ``filesystem``'s) at most ``retries``: for a
    caller that must not wait on one call for long (the lease: 11 attempts on a store that drops every
    connection take 109 s through pyarrow, ~25 s through delta-rs). None (a local path) stays None."""
    if storage_options is None:
        return None
    configured = int(_option(storage_options, "max_retries") or OBJECT_STORE_RETRIES)
    return {**storage_options, "max_retries": str(min(configured, retries))}


def filesystem(uri: str, storage_options: StorageOptions = None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path in it for a local path or a URI, for what delta-rs does not do
    (listing the warehouse, a checkpoint's files, the lease's renewals). ``s3://`` and Hadoop's ``s3a://``
    name the same objects; they reach the endpoint with the credentials of delta-rs' storage options, so
    one set of ``kraftlake.storage.*`` settings serves both, ``max_retries`` included (pyarrow's own
    default is 3 attempts, against delta-rs' 11)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        options = storage_options or {}
        endpoint = _option(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
        s3 = pafs.S3FileSystem(
            access_key=_option(options, "aws_access_key_id", "access_key_id"),
            secret_key=_option(options, "aws_secret_access_key", "secret_access_key"),
            session_token=_option(options, "aws_session_token", "session_token", "token"),
            region=_option(options, "aws_region", "region") or "us-east-1",
            endpoint_override=None if endpoint is None else urlparse(endpoint).netloc or endpoint,
            scheme="http" if endpoint is not None and endpoint.startswith("http://") else "https",
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1 + int(_option(options, "max_retries")
                                                                                 or OBJECT_STORE_RETRIES)))
        return s3, f"{parsed.netloc}{parsed.path}".rstrip("/")
    path = local_path(uri)
    return pafs.FileSystem.from_uri(uri) if path is None else (pafs.LocalFileSystem(), path)


@dataclass(frozen=True)
class FileRange:
    """One active data file and the range of one integer column in it, from the Delta log's stats.

    ``lo``/``hi`` are None when the log has no statistics for the column in this file, which callers
    must treat as "may hold any value".
    """

    path: str
    num_records: int
    lo: int | None
    hi: int | None

    def may_hold_above(self, value: int) -> bool:
        return self.hi is None or self.hi > value

    def may_hold_in(self, lo: int, hi: int) -> bool:
        """Whether the file may hold a value v with lo < v <= hi."""
        return (self.hi is None or self.hi > lo) and (self.lo is None or self.lo <= hi)


def _log_stats(actions: pa.Table, stat: str) -> list[Any]:
    """One statistic (``min.offset``, ``null_count.end_offset``, ...) of each file in ``actions`` (the
    flattened add actions), None for every file when the log records none."""
    return actions.column(stat).to_pylist() if stat in actions.column_names else [None] * actions.num_rows


def file_ranges(table: DeltaTable, column: str) -> list[FileRange]:
    """Active files with their min/max of ``column``, taken from the log so no data file is opened."""
    actions = pa.table(table.get_add_actions(flatten=True))
    lows, highs = _log_stats(actions, f"min.{column}"), _log_stats(actions, f"max.{column}")
    return [
        FileRange(path, records or 0, lo, hi)
        for path, records, lo, hi in zip(
            actions.column("path").to_pylist(),
            actions.column("num_records").to_pylist(),
            lows,
            highs,
        )
    ]


def dataset(table: DeltaTable, paths: Iterable[str] | None = None, dictionary: Sequence[str] = ()) -> pads.Dataset:
    """The table's active files (or ``paths`` of them, relative to the table) as a pyarrow dataset; the
    string columns in ``dictionary`` are read as Parquet stores them, dictionary-encoded (a column of few
    distinct values, such as ``source``, then costs its indices: 0.24 s instead of 4.8 s for 10^7 rows).

    For local tables the files are opened with pyarrow's own LocalFileSystem: delta-rs' dataset goes
    through a filesystem implemented in Python, which Arrow's I/O threads may still call while the
    interpreter shuts down, aborting the process after the job's work is done (apache/arrow#34314).
    Other URIs keep delta-rs' filesystem (its object-store credentials). Our tables use neither
    deletion vectors nor column mapping nor partitions (delta-rs does not write them), so the files
    plus the table schema are the whole snapshot; files that predate a column read it as null.
    """
    root = local_path(table.table_uri)
    schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
                        for f in pa.schema(table.schema().to_arrow())])
    options = pads.ParquetReadOptions(dictionary_columns=list(dictionary))
    if root is None:
        full = table.to_pyarrow_dataset(parquet_read_options=options, schema=schema) if dictionary else \
            table.to_pyarrow_dataset()
        if paths is None:
            return full
        wanted = set(paths)
        return pads.FileSystemDataset([f for f in full.get_fragments() if f.path in wanted], full.schema,
                                      full.format, full.filesystem)
    relative = [r["path"] for r in pa.table(table.get_add_actions(flatten=True)).select(["path"]).to_pylist()] \
        if paths is None else list(paths)
    return pads.dataset([os.path.join(root, path) for path in relative], schema=schema,
                        format=pads.ParquetFileFormat(read_options=options), filesystem=pafs.LocalFileSystem())


def _fragments(table: DeltaTable, paths: list[str]) -> dict[str, pads.Fragment]:
    """Fragments keyed by their path relative to the table, as the Delta log names them."""
    root = local_path(table.table_uri)
    return {(os.path.relpath(f.path, root) if root else f.path): f
            for f in dataset(table, paths).get_fragments()}


def column_max(table: DeltaTable, column: str) -> Any:
    """Max of ``column`` from file statistics; only files without usable statistics are read."""
    ranges = file_ranges(table, column)
    known = [r.hi for r in ranges if r.hi is not None]
    unknown = [r.path for r in ranges if r.hi is None and r.num_records > 0]
    if unknown:
        fragments = _fragments(table, unknown)
        for path in unknown:
            values = fragments[path].to_table(columns=[column]).column(column)
            best = pc.max(values).as_py()
            if best is not None:
                known.append(best)
    return max(known) if known else None


def backfills_since(table: DeltaTable, version: int) -> tuple[list[dict], bool]:
    """The notes of the backfills (``DeltaRsTables.backfill``) committed to ``table`` (as loaded) after
    ``version``, oldest first, each with its ``version``; and whether the log still holds every commit
    since (old commit files expire: the backfills among those cannot be known)."""
    current = table.version()
    if current <= version:
        return [], True
    commits = table.history(limit=current - version)
    complete = {c.get("version") for c in commits} >= set(range(version + 1, current + 1))
    return [{**json.loads(c[BACKFILL]), "version": c["version"]}
            for c in sorted(commits, key=lambda c: c["version"]) if BACKFILL in c], complete


def nth_value_after(table: DeltaTable, column: str, after: int, n: int) -> int | None:
    """The n-th smallest value of ``column`` greater than ``after``; None when fewer than n exist.

    Files are visited in order of their minimum, and the walk stops as soon as no unread file can
    hold a value below the current candidate: with an append-only log of small files this reads only
    the files covering the next n rows, not the whole tail of the table. Correct for overlapping or
    statistics-free files too (e.g. after OPTIMIZE), which are simply read.
    """
    candidates = [r for r in file_ranges(table, column) if r.num_records and r.may_hold_above(after)]
    candidates.sort(key=lambda r: -np.inf if r.lo is None else r.lo)
    fragments = _fragments(table, [c.path for c in candidates]) if candidates else {}
    smallest = np.empty(0, dtype=np.int64)
    for file in candidates:
        if len(smallest) >= n and file.lo is not None and file.lo > smallest[n - 1]:
            break
        values = fragments[file.path].to_table(columns=[column], filter=pc.field(column) > after)
        found = values.column(column).drop_null().to_numpy().astype(np.int64, copy=False)
        smallest = np.sort(np.concatenate([smallest, found]))[:n]
    return int(smallest[n - 1]) if len(smallest) >= n else None


# The most records Kafka's controller writes in one record batch (QuorumController.MAX_RECORDS_PER_BATCH): how far
# ``batch_end`` looks for the end of a batch.
MAX_BATCH_RECORDS = 10_000


def batch_end(table: DeltaTable, column: str, at: int, bound: int = MAX_BATCH_RECORDS) -> int:
    """The last value of ``column`` in the record batch that holds the row at ``at``: the rows from it on that
    share its ``source`` and ``position`` (a Kafka record batch, whose records ingest gives one position), at
    most ``bound`` values on. A row without a source or position is a batch of its own.

    The window read grows from a few hundred rows: most batches are short, and a long one is read once more.
    """
    size = min(256, bound)
    while True:
        rows = read_range(table, column, at - 1, at + size, [column, "source", "position"])
        values = rows.column(column).to_numpy()
        source, position = rows.column("source")[0], rows.column("position")[0]
        if not source.is_valid or not position.is_valid:
            return at
        same = pc.and_(pc.equal(rows.column("source"), source), pc.equal(rows.column("position"), position))
        same = pc.fill_null(same, False).to_numpy(zero_copy_only=False)
        if not same.all():
            return int(values[int(np.argmin(same)) - 1])
        if size >= bound:
            return int(values[-1])
        size = min(size * 8, bound)


def split_range(table: DeltaTable, column: str, lo: int, hi: int, target_rows: int) -> list[tuple[int, int]]:
    """Cut (lo, hi] into consecutive ranges of about ``target_rows`` rows each, at row-group boundaries.

    A log written in one commit is one file; cutting only between files would give a micro-batch one
    task and leave every other core idle. Row groups (``ROW_GROUP_ROWS`` at most, their statistics in
    the files' footers) are the unit a reader can skip, so the cuts fall between them. Sizes are
    estimates (a boundary row group counts fully); the ranges always tile (lo, hi] exactly.
    """
    files = [r for r in file_ranges(table, column) if r.num_records and r.may_hold_in(lo, hi)]
    groups: list[tuple[float, int | None, int]] = []  # (min, max, rows) per row group
    fragments = _fragments(table, [f.path for f in files]) if files else {}
    for file in files:
        fragment = fragments[file.path]
        fragment.ensure_complete_metadata()  # the footer: row groups and their statistics
        for group in fragment.row_groups:
            stats = group.statistics.get(column) or {}
            groups.append((-np.inf if stats.get("min") is None else stats["min"], stats.get("max"), group.num_rows))
    groups.sort(key=lambda g: g[0])
    cuts: list[int] = []
    rows = 0
    for _, top, count in groups:
        rows += count
        if rows >= target_rows and top is not None and lo < top < hi and (not cuts or top > cuts[-1]):
            cuts.append(top)
            rows = 0
    bounds = [lo, *cuts, hi]
    return list(zip(bounds, bounds[1:]))


# (a column, the values wanted in it): rows of a few kinds, e.g. ("type", the quorum's message types)
Only = tuple[str, Sequence[str]]


def _may_hold(group: Any, only: Only | None) -> bool:
    """Whether a row group can hold a row whose ``only[0]`` is one of ``only[1]``, by its statistics."""
    if only is None:
        return True
    stats = group.statistics.get(only[0]) if group.statistics else None
    if not stats or stats.get("min") is None or stats.get("max") is None:
        return True
    return any(stats["min"] <= value <= stats["max"] for value in only[1])


def read_range(table: DeltaTable, column: str, lo: int, hi: int, columns: list[str] | None = None,
               only: Only | None = None) -> pa.Table:
    """Rows with lo < column <= hi, sorted by it; with ``only`` = (a column, values), only the rows whose
    value in that column is one of those.

    Files and row groups outside the range (or holding none of ``only``) are skipped by their statistics,
    and so are the columns a row
    group holds no value of: ``metadata_log`` has a struct column per message type, nearly all of them
    null in any row group, and decoding those nulls was most of a read (3.7 s against 1.0 s for 700,000
    rows); they are made as null columns instead."""
    files = [r.path for r in file_ranges(table, column) if r.num_records and r.may_hold_in(lo, hi)]
    condition = (pc.field(column) > lo) & (pc.field(column) <= hi)
    condition = condition if only is None else condition & pc.field(only[0]).isin(list(only[1]))
    data = dataset(table, files)
    schema = data.schema if columns is None else pa.schema([data.schema.field(c) for c in columns])
    parts = []
    for fragment in data.get_fragments():
        fragment.ensure_complete_metadata()
        by_columns: dict[tuple[str, ...], list[int]] = {}
        for i, group in enumerate(fragment.row_groups):
            stats = group.statistics.get(column) or {}
            if stats.get("max") is not None and stats["max"] <= lo or stats.get("min") is not None and stats["min"] > hi:
                continue
            if not _may_hold(group, only):
                continue
            by_columns.setdefault(_columns_with_values(fragment.metadata.row_group(i), schema.names), []).append(i)
        for present, groups in by_columns.items():
            rows = fragment.subset(row_group_ids=groups).to_table(schema=data.schema, columns=list(present),
                                                                  filter=condition)
            if rows.num_rows:
                parts.append(_sorted(rows, column))  # while narrow: taking rows of null columns costs
    parts.sort(key=lambda part: part.column(column)[0].as_py())
    rows = pa.concat_tables([pa.Table.from_arrays(
        [p.column(f.name) if f.name in p.column_names else pa.nulls(p.num_rows, f.type) for f in schema],
        schema=schema) for p in parts]) if parts else schema.empty_table()
    return _sorted(rows, column)  # parts of files that overlap (after an OPTIMIZE) interleave


# Delta's change data feed (a table with ``CHANGE_DATA_FEED``): the table's columns, then these, named and
# typed as Delta's own readChangeFeed gives them.
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
CHANGE_FIELDS = (pa.field(CHANGE_TYPE, pa.string()), pa.field(COMMIT_VERSION, pa.int64()),
                 pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")))
INSERT = "insert"


class NoChangeData(ValueError):
    """A change feed asked of versions for which the table recorded none."""


def change_schema(table: DeltaTable) -> pa.Schema:
    """The rows of the table's change feed: its columns (nullable: a delete's row is as it was), then Delta's."""
    return pa.schema([f.with_nullable(True) for f in pa.schema(table.schema().to_arrow())] + list(CHANGE_FIELDS))


def commit_times(table: DeltaTable, first: int) -> dict[int, int]:
    """Each version's commit time (ms, the commit's own ``timestamp``, which the change feed reports too),
    from ``first`` to the table's version as loaded."""
    return {c["version"]: c["timestamp"] for c in table.history(limit=max(table.version() - first + 1, 1))
            if c.get("version") is not None and c["version"] >= first}


def change_data_from(uri: str, first: int, storage_options: StorageOptions = None) -> None:
    """``NoChangeData`` unless the table at ``uri`` recorded its changes from version ``first`` on (it does
    from the commit that set ``CHANGE_DATA_FEED``: a state table an earlier release created, from the first
    start of this release's controller)."""
    at = DeltaTable(uri, version=first, storage_options=storage_options)
    if at.metadata().configuration.get(CHANGE_DATA_FEED) != "true":
        raise NoChangeData(f"{uri} recorded no change data at version {first} ({CHANGE_DATA_FEED} was not set "
                           "then): start its change feed at a later version, or with none (the table's rows at "
                           "first, then their changes)")


def changes(table: DeltaTable, first: int, last: int) -> pa.Table:
    """The change data of versions first..last (``change_schema``), in Delta's types."""
    target = change_schema(table)
    rows = pa.table(table.load_cdf(starting_version=first, ending_version=last))
    return pa.Table.from_arrays([rows.column(f.name).cast(f.type) for f in target], schema=target)


def as_inserts(rows: pa.Table, version: int, committed_ms: int) -> pa.Table:
    """Rows of a table's snapshot at ``version`` in its change feed's layout: each an insert of that
    version (how a change feed begins when it is given no starting version, as Delta's does)."""
    n = rows.num_rows
    return pa.Table.from_arrays(
        list(rows.columns) + [pa.repeat(pa.scalar(INSERT), n), pa.repeat(pa.scalar(version, pa.int64()), n),
                              pa.repeat(pa.scalar(committed_ms * 1000, pa.timestamp("us", tz="UTC")), n)],
        names=rows.column_names + [f.name for f in CHANGE_FIELDS])


def version_at(table: DeltaTable, ms: int, after: bool) -> int | None:
    """The first version committed at or after ``ms`` (``after``), else the last at or before it; None
    when there is none: how Delta resolves a change feed's starting and ending timestamps."""
    times = commit_times(table, 0)
    found = [v for v, t in times.items() if (t >= ms if after else t <= ms)]
    return (min(found) if after else max(found)) if found else None


def _present(table: DeltaTable, delete_keys: pa.Table, keys: list[str]) -> pa.Table:
    """The keys of ``delete_keys`` the table has. A MERGE source row that no clause takes (a delete of a key
    the table never had: a topic created and deleted within one micro-batch) is written by delta-rs 1.6 into
    the change data feed as a row of nulls, which the table's non-null columns then refuse; so those rows
    are left out of the source (they would delete nothing anyway)."""
    # the keys are compared after the read: a scan filter on a string key meets the files' string_view
    # statistics, which pyarrow cannot compare with a string ("no kernel matching (string, string_view)")
    there = dataset(table).to_table(columns=keys)
    there = pa.Table.from_arrays([there.column(k).cast(delete_keys.schema.field(k).type) for k in keys], names=keys)
    return delete_keys.select(keys).join(there, keys, join_type="left semi")


def _sorted(rows: pa.Table, column: str) -> pa.Table:
    """``rows`` by ``column``; the log is written in its order, so usually nothing is moved."""
    keys = rows.column(column).to_numpy()
    return rows if len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1])) else rows.sort_by(column)


def _columns_with_values(group: Any, names: list[str]) -> tuple[str, ...]:
    """The top-level columns of ``names`` with a value in a row group: a column whose every leaf is null
    in all its rows (by the footer's statistics) holds none; without statistics, a column may."""
    all_null: dict[str, bool] = {}
    for j in range(group.num_columns):
        chunk = group.column(j)
        top = chunk.path_in_schema.split(".")[0]
        stats = chunk.statistics
        null = stats is not None and stats.has_null_count and stats.null_count == group.num_rows
        all_null[top] = all_null.get(top, True) and null
    return tuple(n for n in names if not all_null.get(n, False))


def _conform_batches(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch.select(schema.names).cast(schema)


def _as_reader(data: ArrowData, schema: pa.Schema) -> pa.RecordBatchReader:
    """One lazy stream in the target schema: a reader is consumed batch by batch, never collected."""
    if isinstance(data, pa.Table):
        return data.select(schema.names).cast(schema).to_reader()
    return pa.RecordBatchReader.from_batches(schema, _conform_batches(data, schema))


def _source_schema(schema: pa.Schema, keys: list[str], table: pa.Schema) -> pa.Schema:
    """An upsert source: values nullable (delete rows carry only keys), keys as nullable as in the table.

    A key more nullable than the table's makes delta-rs 1.6 (merge_schema=True) reject the target rows
    the source does not match, as if their key were null (delta-rs#4527).
    """
    def key_nullable(field: pa.Field) -> bool:
        return table.field(field.name).nullable if field.name in table.names else field.nullable

    return pa.schema([field.with_nullable(key_nullable(field) if field.name in keys else True) for field in schema])


class DeltaRsTables:
    """A warehouse directory (local path or URI) of Delta tables, ``<root>/<name>``, written with delta-rs.

    ``storage_options`` (endpoint, credentials, ...) go to every delta-rs call on a non-local root;
    a local one needs none, so they are dropped there.
    """

    def __init__(self, root: str, storage_options: StorageOptions = None) -> None:
        self.root = normalize_root(root)
        self.storage_options = None if is_local(self.root) or not storage_options else dict(storage_options)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.path(name), self.storage_options)

    def names(self) -> list[str]:
        fs, base = filesystem(self.root, self.storage_options)
        entries = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        dirs = sorted(entry.base_name for entry in entries if entry.type == pafs.FileType.Directory)
        return [name for name in dirs if self.exists(name)]

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(self.path(name), storage_options=self.storage_options)

    def version(self, name: str) -> int:
        return self.table(name).version()

    def create_if_missing(self, name: str, schema: pa.Schema) -> None:
        """Create the table with its properties (``metadata.tables.table_properties``: the warehouse format
        this release writes, the change data feed of a state table), unless it exists; a concurrent creator
        winning the race is fine."""
        if self.exists(name):
            return
        try:  # no retry: a creator that lost the race would commit a second creation on top
            DeltaTable.create(self.path(name), schema, mode="ignore", configuration=table_properties(name),
                              raise_if_key_not_exists=False, commit_properties=CommitProperties(max_commit_retries=0),
                              storage_options=self.storage_options)
        except CommitFailedError:
            if not self.exists(name):
                raise

    def prepare(self, name: str, schema: pa.Schema) -> None:
        """``create_if_missing``; a state table an earlier release created gets its change data feed from
        this commit on (Delta records no change data for the commits before it). Its writer calls this once,
        before it writes: it is the table's only writer then. The format is left as it was: a format-1
        warehouse stays format 1."""
        self.create_if_missing(name, schema)
        wanted = table_properties(name).get(CHANGE_DATA_FEED)
        table = self.table(name)
        if wanted is not None and table.metadata().configuration.get(CHANGE_DATA_FEED) != wanted:
            table.alter.set_table_properties({CHANGE_DATA_FEED: wanted})

    def format_versions(self) -> dict[str, str]:
        """Each table's ``FORMAT_PROPERTY`` (``UNMARKED_FORMAT`` for a table made before formats were written)."""
        return {name: self.table(name).metadata().configuration.get(FORMAT_PROPERTY, str(UNMARKED_FORMAT))
                for name in self.names()}

    def check_format(self) -> dict[str, str]:
        """``format_versions``, or ``FormatError`` naming the first table this release cannot read and
        what to do: a newer release's table needs that release; an older, unreadable one a rebuild."""
        versions = self.format_versions()
        readable = {str(v) for v in READABLE_FORMATS}
        for name, version in versions.items():
            if version in readable:
                continue
            known = "; ".join(f"{v}: {FORMATS[v]}" for v in READABLE_FORMATS)
            newer = version.isdigit() and int(version) > FORMAT_VERSION
            remedy = ("it was written by a newer kraftlake: run that release (or a later one) on this warehouse"
                      if newer else
                      "no release reads it as it is: ingest the original logs and events into a new warehouse "
                      "with this release, and run the controller there")
            raise FormatError(f"{self.path(name)} has warehouse format {version!r} ({FORMAT_PROPERTY}), and this "
                              f"release reads formats {known}. Migration: {remedy}.")
        return versions

    def txn_version(self, name: str, app_id: str) -> int | None:
        if not self.exists(name):
            return None
        return self.table(name).transaction_version(app_id)

    def _already_committed(self, name: str, txn: Txn | None) -> bool:
        if txn is None:
            return False
        committed = self.txn_version(name, txn[0])
        return committed is not None and committed >= txn[1]

    @staticmethod
    def _commit_properties(txn: Txn | None) -> CommitProperties | None:
        return None if txn is None else CommitProperties(app_transactions=[Transaction(txn[0], txn[1])])

    def append(self, name: str, data: ArrowData, schema: pa.Schema, txn: Txn | None = None,
               read_version: int | None = None) -> bool:
        """Append in one commit, carrying ``txn``; False (nothing written) if ``txn`` is already committed.

        A reader or iterable is streamed to the writer batch by batch, so memory stays bounded by the
        writer's file buffer. ``schema_mode="merge"`` lets a schema that gained nullable columns (a
        new message type's struct column) extend the table; it adds no metadata action when nothing
        changed. An empty append still commits ``txn``, so the batch counts as done.

        ``read_version``: commit exactly on top of that version, or raise ``Conflict`` (nothing
        committed) if anyone committed since. Without it, an append that loses a race to another
        writer is tried again on the new version (appends commute), ``txn`` checked again first; a
        stream, which cannot be read twice, is left to delta-rs' own retries instead.
        """
        self.create_if_missing(name, schema)
        reusable = isinstance(data, pa.Table)
        retries = 0 if reusable or read_version is not None else None
        for _ in range(COMMIT_ATTEMPTS):
            table = self.table(name) if read_version is None else \
                DeltaTable(self.path(name), version=read_version, storage_options=self.storage_options)
            committed = None if txn is None else table.transaction_version(txn[0])
            if committed is not None and committed >= txn[1]:
                return False
            properties = CommitProperties(app_transactions=None if txn is None else [Transaction(txn[0], txn[1])],
                                          max_commit_retries=retries)
            try:
                write_deltalake(table, _as_reader(data, schema), mode="append", schema_mode="merge",
                                commit_properties=properties, writer_properties=WRITER)
                return True
            except CommitFailedError as exc:
                if read_version is not None:
                    raise Conflict(f"{self.path(name)}: another writer committed after version {read_version}") \
                        from exc
                if not reusable:
                    raise
        raise Conflict(f"{self.path(name)}: {COMMIT_ATTEMPTS} appends in a row lost to other writers' commits")

    def scan_at(self, name: str, version: int, columns: list[str], filter: pc.Expression,
                dictionary: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
        """The rows of ``version`` of the table that match ``filter``, batch by batch and in no particular
        order (a long range costs the memory of one batch); ``dictionary``: as in ``dataset``."""
        table = DeltaTable(self.path(name), version=version, storage_options=self.storage_options)
        yield from dataset(table, dictionary=dictionary).to_batches(columns=columns, filter=filter)

    def backfill(self, name: str, data: ArrowData, schema: pa.Schema, txn: Txn, read_version: int,
                 replaced: str | None, note: Mapping[str, Any]) -> None:
        """Commit ``data`` on top of exactly ``read_version`` (else ``Conflict``, nothing committed), with
        ``txn``, deleting the rows ``replaced`` matches (a SQL predicate, which every row of ``data`` must
        match too: delta-rs refuses the write otherwise) in the same commit, and ``note`` in the commit's
        info under ``BACKFILL``: rows written below a table's end are never seen by a stream that read
        past them, and that note is how its readers learn of them (``backfills_since``)."""
        table = DeltaTable(self.path(name), version=read_version, storage_options=self.storage_options)
        properties = CommitProperties(app_transactions=[Transaction(txn[0], txn[1])], max_commit_retries=0,
                                      custom_metadata={BACKFILL: json.dumps(dict(note))})
        try:
            write_deltalake(table, _as_reader(data, schema), mode="append" if replaced is None else "overwrite",
                            predicate=replaced, schema_mode="merge", commit_properties=properties,
                            writer_properties=WRITER)
        except CommitFailedError as exc:
            raise Conflict(f"{self.path(name)}: another writer committed after version {read_version}") from exc

    def compact(self, name: str, column: str, files: int) -> bool:
        """Rewrite the oldest ``files`` small files (``kraftlake.ingest.compact.files``; 0: never) into one, once that
        many follow each other in ``column``'s order with no larger file between them; whether it committed.
        Every load of a table reads each active file's statistics (``metadata_log``'s: a struct column per type),
        and a continuous ingest commits a small file a second: after an hour, 3,600 of them, 0.09 s of CPU a load.

        The rows of the range those files cover, lo <= ``column`` <= hi, are read from every file that may hold
        one and replace that range in one commit on top of the version read (another writer first: nothing is
        committed, the next call tries again). So the table holds the same rows at every version, and a file
        stays one contiguous range of ``column``, which is what the range readers (``read_range``) and the
        streaming source's planning prune by. Rows without a value in ``column`` stay where they are."""
        if files <= 0 or not self.exists(name):
            return False
        table = self.table(name)
        run: list[FileRange] = []
        ordered = sorted((r for r in file_ranges(table, column) if r.num_records),
                         key=lambda r: -np.inf if r.lo is None else r.lo)
        for file in ordered:
            if file.lo is None or file.hi is None or file.num_records >= ROW_GROUP_ROWS:
                run = []
                continue
            run.append(file)
            if len(run) == files:
                break
        if len(run) < files:
            return False
        lo, hi = run[0].lo, max(r.hi for r in run)
        # read a file's range at a time, in order: the ranges tile lo..hi, and memory holds one of them
        bounds = [f.lo - 1 for f in run] + [hi]
        parts = (batch for a, b in zip(bounds, bounds[1:]) for batch in read_range(table, column, a, b).to_batches())
        rows = _as_reader(parts, pa.schema(table.schema().to_arrow()))
        try:
            write_deltalake(table, rows, mode="overwrite", predicate=f"`{column}` >= {lo} AND `{column}` <= {hi}",
                            commit_properties=CommitProperties(max_commit_retries=0), writer_properties=WRITER)
        except CommitFailedError:
            return False
        return True

    def snapshot_max(self, name: str, column: str) -> tuple[int | None, Any]:
        """(version, max of ``column`` in that version): what a write planned on the table's current end
        passes as ``read_version``; (None, None) when there is no table yet."""
        if not self.exists(name):
            return None, None
        table = self.table(name)
        return table.version(), column_max(table, column)

    def upsert(
        self,
        name: str,
        data: pa.Table,
        keys: list[str],
        schema: pa.Schema,
        txn: Txn | None = None,
        delete_keys: pa.Table | None = None,
    ) -> bool:
        """MERGE by ``keys``: rows of ``data`` replace or insert, keys in ``delete_keys`` are removed.

        Updates and deletes go through one MERGE (deletes as flagged source rows) so they land in a
        single commit with ``txn``. A key must not appear twice in the source, nor in both ``data``
        and ``delete_keys``: Delta rejects a target row matched by several source rows.

        A table with two writers (``anomalies``: the controller query and the quorum query, each MERGE-ing
        its own kinds) may see the other commit between its read and its commit: the MERGE that lost is done
        again on the new version, ``txn`` checked again first. Their keys are disjoint, so redoing it
        changes nothing the winner wrote. The same check finds a commit of ours whose answer was lost on an
        object store (the connection dropped after the put: the client's retry meets our own entry and
        fails as a conflict with it): the MERGE is done, nothing is redone.
        """
        for _ in range(COMMIT_ATTEMPTS):
            if self._already_committed(name, txn):
                return False
            try:
                return self._merge(name, data, keys, schema, txn, delete_keys)
            except CommitFailedError:
                continue
        raise Conflict(f"{self.path(name)}: {COMMIT_ATTEMPTS} MERGEs in a row lost to other writers' commits")

    def _merge(self, name: str, data: pa.Table, keys: list[str], schema: pa.Schema, txn: Txn | None,
               delete_keys: pa.Table | None) -> bool:
        """One attempt of ``upsert`` on the table's current version."""
        self.create_if_missing(name, schema)
        table = self.table(name)
        row_schema = _source_schema(schema, keys, pa.schema(table.schema().to_arrow()))
        source_schema = row_schema.append(pa.field(_DELETE_FLAG, pa.bool_(), nullable=False))
        upserts = data.select(schema.names).cast(row_schema)
        parts = [upserts.append_column(_DELETE_FLAG, pa.repeat(False, upserts.num_rows))]
        if delete_keys is not None and delete_keys.num_rows:
            delete_keys = _present(table, delete_keys, keys)
        if delete_keys is not None and delete_keys.num_rows:
            n = delete_keys.num_rows
            columns = [
                delete_keys.column(f.name).cast(f.type) if f.name in keys else pa.nulls(n, f.type)
                for f in source_schema
            ]
            columns[-1] = pa.repeat(True, n)
            parts.append(pa.Table.from_arrays(columns, schema=source_schema))
        source = pa.concat_tables([p.cast(source_schema) for p in parts])
        if source.num_rows == 0:
            return self.append(name, upserts, schema, txn)
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        flag = f"s.`{_DELETE_FLAG}`"
        merge = (
            table.merge(source, on, source_alias="s", target_alias="t", merge_schema=True,
                        commit_properties=self._commit_properties(txn))
            .when_matched_delete(predicate=flag)
            .when_matched_update_all(predicate=f"NOT {flag}", except_cols=[_DELETE_FLAG])
            .when_not_matched_insert_all(predicate=f"NOT {flag}", except_cols=[_DELETE_FLAG])
        )
        merge.execute()
        return True

    def read_arrow(self, name: str, columns: list[str] | None = None, filter: pc.Expression | None = None) -> pa.Table:
        """Read through the table's pyarrow dataset, whose Parquet statistics prune row groups for ``filter``."""
        return dataset(self.table(name)).to_table(columns=columns, filter=filter)

    def read_offsets(self, name: str, lo: int, hi: int, columns: list[str] | None = None) -> pa.Table:
        """The rows with ``lo <= offset <= hi``, sorted by offset: ``read_range``, which opens only the files
        whose log statistics hold the range. A filtered ``read_arrow`` opens every file's footer, and
        ``metadata_log``'s (a column per message type) cost ~9 ms of CPU each: a continuous ingest writes a
        file a second, so a status line's two lookups took 33 s of CPU after an hour, and their footers'
        memory, freed and never given back, grew the driver by ~80 MB a minute."""
        if columns is not None and "offset" not in columns:
            return read_range(self.table(name), "offset", lo - 1, hi, ["offset", *columns]).select(columns)
        return read_range(self.table(name), "offset", lo - 1, hi, columns)

    def read_nulls(self, name: str, column: str) -> pa.Table:
        """The rows whose ``column`` is null, from the files whose log statistics count a null in it (or have
        none): ``anomalies``' open episodes, read every micro-batch, are in one or two of its hundreds of files
        (207 after an hour's soak: 0.25 s of CPU a micro-batch to read them all)."""
        table = self.table(name)
        actions = pa.table(table.get_add_actions(flatten=True))
        nulls = _log_stats(actions, f"null_count.{column}")
        paths = [path for path, count in zip(actions.column("path").to_pylist(), nulls) if count is None or count > 0]
        return dataset(table, paths).to_table(filter=pc.field(column).is_null())

    def max_value(self, name: str, column: str) -> Any:
        """Max of a top-level column from the log's file statistics (no data read when stats exist)."""
        if not self.exists(name):
            return None
        return column_max(self.table(name), column)
