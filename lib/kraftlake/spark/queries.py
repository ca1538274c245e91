"""What the controller query and the quorum query share: ids, triggers, exactly-once sinks, supervision.

Both queries are ``applyInPandasWithState`` over ``metadata_log`` with a ``foreachBatch`` sink into Delta;
they differ in how they group and what they write. Keeping the plumbing here (and not in either query's
module) lets each depend on it without depending on the other.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import threading
import time
import zlib
from typing import Any, Callable, Collection, Mapping, TextIO, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kraftlake.metadata.progress import Meter
from kraftlake.report.metrics import Gauge, MetricsServer, cluster_gauges, progress_gauges
from kraftlake.spark.errors import spark_error
from kraftlake.storage.deltars import DeltaRsTables, StorageOptions, backfills_since, file_ranges, filesystem
from kraftlake.storage.lease import Lease

Sink = Callable[[Any, tuple[str, int]], Any]
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def query_id(checkpoint: str, storage_options: StorageOptions = None) -> str | None:
    """The streaming query's id from its checkpoint (stable across restarts of the same checkpoint)."""
    fs, path = filesystem(checkpoint, storage_options)
    info = fs.get_file_info(f"{path}/metadata")
    if info.type != pafs.FileType.File:
        return None
    with fs.open_input_stream(f"{path}/metadata") as stream:
        return json.loads(stream.read().decode().splitlines()[0])["id"]


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int (Murmur3_x86_32.hashInt, seed 42): how it places a group key of a
    ``groupBy`` in a shuffle partition (``pmod(hash, partitions)``)."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = rotl((value & mask) * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def spread_keys(groups: int, partitions: int) -> list[int]:
    """A group key per group such that group ``g`` lands in shuffle partition ``g % partitions``.

    Spark places a key by its hash, and the keys 0..3 fall in partitions 3, 3, 2, 3 of four: three of
    four controller shards ran one after the other in one task while the other core idled. Keys found
    this way give every partition its share."""
    keys: list[int] = []
    candidate = 0
    for group in range(groups):
        while murmur3_int(candidate) % partitions != group % partitions or candidate in keys:
            candidate += 1
        keys.append(candidate)
        candidate = 0
    return keys


def group_keys(checkpoint: str, groups: int, partitions: int, storage_options: StorageOptions = None) -> list[int]:
    """The group keys of a stateful query: its state is stored by key, so a checkpoint keeps the keys it
    was started with (``kraftlake-keys.json`` in it). A new checkpoint gets ``spread_keys``; one written
    before that file existed keeps the keys it has (0..groups-1)."""
    fs, path = filesystem(checkpoint, storage_options)
    marker = f"{path}/kraftlake-keys.json"
    if fs.get_file_info(marker).type == pafs.FileType.File:
        with fs.open_input_stream(marker) as stream:
            keys = json.loads(stream.read().decode())["keys"]
        if len(keys) != groups:
            raise RuntimeError(f"the checkpoint {checkpoint} was written with {len(keys)} shards, not {groups}: "
                               f"run with --shards {len(keys)}, or --reset to replay with {groups}")
        return keys
    if fs.get_file_info(f"{path}/offsets").type == pafs.FileType.Directory:
        return list(range(groups))  # a checkpoint of an earlier release
    keys = spread_keys(groups, partitions)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(marker) as stream:
        stream.write(json.dumps({"keys": keys}).encode())
    return keys


class BackfillGuard:
    """Stops the queries when ``metadata_log`` was backfilled after they read it (ADR 0010).

    Their source reads offsets above its position only, so rows an ingest adds below it (older history,
    a gap) would never reach the tables. Every backfill leaves a note in its commit's info
    (``DeltaRsTables.backfill``); the checkpoint keeps, in ``kraftlake-log.json``, the ``metadata_log``
    version up to which there was none, and each check reads only the commits since (one log listing when
    nothing was committed). A checkpoint of an earlier release, without that file, is checked from the
    table's first commit that its log still holds."""

    FILE = "kraftlake-log.json"

    def __init__(self, tables: DeltaRsTables, checkpoint: str) -> None:
        self.tables, self.checkpoint = tables, checkpoint
        self.version: int | None = None
        self.table: Any = None

    def _path(self) -> tuple[Any, str]:
        fs, path = filesystem(self.checkpoint, self.tables.storage_options)
        return fs, f"{path}/{self.FILE}"

    def _recorded(self) -> int | None:
        fs, path = self._path()
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as stream:
            return int(json.loads(stream.read().decode())["metadata_log_version"])

    def stale(self) -> str | None:
        """Why the tables of this checkpoint no longer match ``metadata_log`` (None: they do, or no checkpoint
        says what they read); advances the version checked when they do."""
        if self.table is None:
            if not self.tables.exists("metadata_log"):
                return None
            self.table = self.tables.table("metadata_log")
            self.version = self._recorded()
            if self.version is None and query_id(self.checkpoint, self.tables.storage_options) is None:
                self.version = self.table.version()  # a new checkpoint: its tables read from here on
                return None
        else:
            self.table.update_incremental()
        recorded = self.version
        notes, complete = backfills_since(self.table, -1 if recorded is None else recorded)
        remedy = (f"rebuild them with jobs/controller.py --warehouse {shlex.quote(self.tables.root)} --once --reset "
                  "(it replays the whole log)")
        if notes:
            note = notes[0]
            return (f"metadata_log was backfilled below offset {note['below']} (ingest of {note['source']}, "
                    f"metadata_log version {note['version']}) after these tables were computed: {remedy}")
        if not complete and recorded is not None:
            return (f"metadata_log's commits after version {recorded}, which these tables were computed up to, "
                    f"have expired from its log, so whether it was backfilled since cannot be told: {remedy}")
        self.version = self.table.version()
        return None

    def check(self) -> None:
        """``RuntimeError`` (one line, with the remedy) when ``stale``."""
        reason = self.stale()
        if reason is not None:
            raise RuntimeError(reason)

    def save(self) -> None:
        """Record the version checked, so that the next start reads only the commits after it."""
        if self.version is None:
            return
        fs, path = self._path()
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as stream:
            stream.write(json.dumps({"metadata_log_version": self.version}).encode())


def delete_dir(target: str, storage_options: StorageOptions = None) -> None:
    """Remove a directory (a checkpoint, a table) if it is there, locally or on object storage."""
    fs, path = filesystem(target, storage_options)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def start_sink(outputs: Any, name: str, checkpoint: str, once: bool, trigger_interval_ms: int, write: Sink,
               storage_options: StorageOptions = None, state_partitions: int | None = None) -> Any:
    """Start ``outputs`` as query ``kraftlake_<name>``: each micro-batch goes to ``write(batch_df, txn)``.

    ``txn`` is the Delta application transaction ``(kraftlake-<name>-<query id>, batch id)``: a batch Spark
    runs again after a crash carries the same pair, so every table that already has it skips it. The id is
    read from the checkpoint once Spark has written it (at the first batch).

    ``state_partitions``: the shuffle partitions of a new checkpoint's stateful stage, instead of the session's
    ``spark.sql.shuffle.partitions``. Every one of them is a task, a state store load and a state store commit
    in every micro-batch, whether it holds a group or not. A checkpoint keeps the number it was started
    with: Spark restores it over any setting.
    """
    app_id: list[str] = []

    def sink(batch_df: Any, batch_id: int) -> None:
        if not app_id:
            app_id.append(f"kraftlake-{name}-{query_id(checkpoint, storage_options)}")
        write(batch_df, (app_id[0], batch_id))

    writer = (outputs.writeStream.queryName(f"kraftlake_{name}").option("checkpointLocation", checkpoint)
              .foreachBatch(sink))
    writer = writer.trigger(availableNow=True) if once else \
        writer.trigger(processingTime=f"{trigger_interval_ms} milliseconds")
    if state_partitions is None:
        return writer.start()
    conf = outputs.sparkSession.conf
    session_partitions = conf.get(SHUFFLE_PARTITIONS)
    conf.set(SHUFFLE_PARTITIONS, str(state_partitions))
    try:
        return writer.start()  # the query takes a copy of the session's settings as it starts
    finally:
        conf.set(SHUFFLE_PARTITIONS, session_partitions)


def open_anomalies(warehouse: Any, kinds: Collection[str]) -> list[dict]:
    """The episodes of ``kinds`` still open in ``anomalies``, as the core makes rows (times in ms): what a
    sink's rules across micro-batches carry over (a few rows)."""
    if not warehouse.exists("anomalies"):
        return []
    rows = warehouse.read_nulls("anomalies", "end_offset")
    # kind compared after the read: a filter on it meets string_view statistics that pyarrow cannot compare
    rows = rows.filter(pc.is_in(rows.column("kind").cast(pa.string()), pa.array(list(kinds), pa.string())))
    for column in ("start_time", "end_time"):
        index = rows.schema.get_field_index(column)
        values = rows.column(column)
        rows = rows.set_column(index, column, pc.cast(values, pa.timestamp("ms", values.type.tz), safe=False)
                               .cast(pa.int64()))
    return rows.to_pylist()


# Starts the error of a state the state store gave back intact but that does not parse: written by a
# release with another state layout, or damaged where no checksum looked.
DAMAGED_STATE = "damaged state:"
# What Spark and the state loaders say when a checkpoint file does not read back as it was written.
# Root causes first: the message quotes the first one found.
DAMAGE_MARKERS = ("Stream is corrupted", "ChecksumException", "java.io.EOFException", DAMAGED_STATE,
                  "MALFORMED_LOG_FILE", "CANNOT_LOAD_STATE_STORE")
NO_SPACE = "No space left on device"
OUT_OF_MEMORY = "java.lang.OutOfMemoryError"
T = TypeVar("T")


def parse_state(what: str, parse: Callable[[], T]) -> T:
    """``parse()``, a state read from the state store; any failure is reported as damage (``DAMAGED_STATE``)."""
    try:
        return parse()
    except Exception as exc:
        raise ValueError(f"{DAMAGED_STATE} {what} in the state store does not parse "
                         f"({type(exc).__name__}: {exc})") from exc


def damaged_files(checkpoint: str) -> list[str]:
    """Checkpoint files whose content no longer matches the CRC32s Hadoop's local file system wrote beside
    them (``.<name>.crc``: a header, the bytes per checksum, then one CRC32 per chunk). Spark does not
    check them when it reads state files back; this says which file broke. Object stores have no such
    files: there the list is empty and the error names the checkpoint folder."""
    fs, base = filesystem(checkpoint)
    damaged = []
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        folder, name = os.path.split(info.path)
        if info.type != pafs.FileType.File or not (name.startswith(".") and name.endswith(".crc")):
            continue
        data_path = f"{folder}/{name[1:-4]}"
        with fs.open_input_stream(info.path) as stream:
            sums = stream.read()
        try:
            with fs.open_input_stream(data_path) as stream:
                data = stream.read()
        except FileNotFoundError:
            continue  # Spark deletes old files and their checksums one after the other
        chunk = int.from_bytes(sums[4:8], "big") if sums[:4] == b"crc\0" else 0
        expected = [int.from_bytes(sums[i:i + 4], "big") for i in range(8, len(sums), 4)]
        if chunk <= 0 or expected != [zlib.crc32(data[i:i + chunk]) for i in range(0, len(data), chunk)]:
            damaged.append(data_path)
    return sorted(damaged)


def _cause(error: str, marker: str) -> str:
    line = next((line for line in error.splitlines() if marker in line), error.splitlines()[0] if error else "")
    return line.strip()[:400]


def failure_message(name: str, error: str, checkpoint: str) -> str:
    """A failed query's error as its operator needs it: a full disk, memory run out or a damaged checkpoint
    said in words, with the file and the remedy; anything else as Spark reported it."""
    if NO_SPACE in error:
        return (f"the {name} query stopped: no space left on the device ({_cause(error, NO_SPACE)}). Nothing "
                "is lost or half-written: the micro-batch it was writing is finished by the next start, from "
                "the checkpoint, with the Delta transactions skipping what was committed. Free space, then "
                "start the controller again.")
    if OUT_OF_MEMORY in error:
        return (f"the {name} query ran out of memory ({_cause(error, OUT_OF_MEMORY)}). Its micro-batch is planned "
                "in the checkpoint and is re-run at the same size by the next start: give the driver more "
                "memory (spark-submit --driver-memory, or spark.driver.memory where the launcher reads it), "
                "then start again; kraftlake.controller.max.records.per.batch bounds the micro-batches after it.")
    marker = next((m for m in DAMAGE_MARKERS if m in error), None)
    if marker is None:
        return f"the {name} query failed: {spark_error(error)}"
    local = filesystem(checkpoint)[1]
    files = damaged_files(checkpoint) or sorted(set(re.findall(re.escape(local) + r"/[^\s:;,'\"()\[\]]+", error)))
    # a hidden .tmp file is a write the failure interrupted (another task's state store), not the damage
    files = [f for f in files if not (f.rsplit("/", 1)[-1].startswith(".") and f.endswith(".tmp"))]
    where = ", ".join(files) if files else \
        f"a file it reads back (Spark does not say which, and no file under {checkpoint} fails its checksum)"
    return (f"the {name} query cannot continue from its checkpoint: {where} is damaged "
            f"({_cause(error, marker)}). The tables are as the last completed micro-batch left them and nothing "
            "more is written. Remedy: start the controller with --reset, which deletes the checkpoint and the "
            "tables derived from metadata_log and replays the log from offset 0.")


def supervise(queries: Mapping[str, Any], once: bool, checkpoint: str,
              on_progress: Callable[[dict | None], None] | None = None, out: TextIO | None = None,
              lease: Lease | None = None, guard: Callable[[], None] | None = None,
              deferred: Mapping[str, Callable[[], Any]] | None = None) -> bool:
    """Wait for the queries until they end (``once``) or forever; False if stopped by a signal. One failed
    query stops the others and raises, saying why (see ``failure_message``; ``checkpoint`` is the folder
    holding every query's checkpoint); so does losing ``lease`` (another process took the warehouse over:
    writing on would race it), and so does ``guard`` raising (checked about once a second, and once more at
    the end: ``BackfillGuard.check``). ``on_progress`` sees the first query's ``lastProgress`` about once a second
    (``LogProgress`` turns it into progress and status lines).

    ``deferred``: queries started (each by its function) once the first query has finished its first trigger,
    running continuously: a first micro-batch shares the machine with nothing else, since the first trigger
    of a query is its slowest (its source's Python process, its workers, its state stores) and is what a
    restart waits for. A continuous query that ends without an error (stopped by whoever started it) stops
    the others.

    SIGINT and SIGTERM only set a flag that the loop checks every second before it stops the queries: the
    driver's main thread is usually inside a py4j call when they arrive, and stopping a query from the
    handler itself would re-enter py4j (pyspark's own SIGINT handler does, and prints tracebacks). Each
    query is stopped between two micro-batches (``stop_between_batches``): one cut short makes Spark's
    stream thread fail on its interrupt (a StackOverflowError printed, seen with 4.2). A second signal stops
    them at once; the checkpoint and the Delta transactions make the next start finish the batch cut short.
    """
    from pyspark.errors import StreamingQueryException

    out = out or sys.stderr
    queries = dict(queries)
    pending = dict(deferred or {})
    main_name, main = next(iter(queries.items()))
    stop_requested: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, lambda signum, frame: stop_requested.append(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while any(q.isActive for q in queries.values()) and not stop_requested:
            try:
                next((q for q in queries.values() if q.isActive), main).awaitTermination(1)
            except StreamingQueryException:
                pass  # the query failed: said below, once the others are stopped
            if lease is not None and lease.lost is not None:
                for q in queries.values():
                    q.stop()
                raise RuntimeError(f"stopped: {lease.lost}")
            _guarded(queries, guard)
            if not once and not all(q.isActive for q in queries.values()):
                break  # one query failed or was stopped: stop the others (and report a failure)
            if pending and main.lastProgress is not None:
                queries.update((name, begin()) for name, begin in pending.items())
                pending.clear()
            if on_progress is not None:
                on_progress(main.lastProgress)
        if stop_requested:
            print(f"[{main_name}] stopping (signal received) after the micro-batch in flight; restart to "
                  "continue from the checkpoint", file=out, flush=True)
            for q in queries.values():
                stop_between_batches(q, lambda: len(stop_requested) > 1)
            return False
        for name, q in queries.items():
            if q.exception() is not None:
                for other in queries.values():
                    other.stop()
                raise RuntimeError(failure_message(name, str(q.exception()), checkpoint))
        if not once:
            for q in queries.values():
                q.stop()
        _guarded(queries, guard)
        return True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_between_batches(query: Any, at_once: Callable[[], bool], every_s: float = 0.02) -> None:
    """Stop ``query`` once the micro-batch in flight has committed (its progress reported) or no trigger
    runs (``status["isTriggerActive"]``), polled every ``every_s``; at once when ``at_once()`` says so.
    With a backlog the next batch starts right away: it is stopped while it plans, before its tasks run."""
    progress = query.lastProgress
    done = progress["batchId"] if progress else -1
    while query.isActive and query.status.get("isTriggerActive") and not at_once():
        progress = query.lastProgress
        if progress and progress["batchId"] > done:
            break
        time.sleep(every_s)
    query.stop()


def _guarded(queries: Mapping[str, Any], guard: Callable[[], None] | None) -> None:
    if guard is None:
        return
    try:
        guard()
    except RuntimeError:
        for q in queries.values():
            q.stop()
        raise


def source_offset(progress: Mapping[str, Any], key: str = "endOffset") -> int | None:
    """The metadata_log offset a micro-batch's source reached (delta-rs source: ``{"offset": n}``); None for
    sources whose offsets are not log offsets (the native Delta source counts table versions)."""
    sources = progress.get("sources") or []
    value = sources[0].get(key) if sources else None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value.get("offset") if isinstance(value, dict) and isinstance(value.get("offset"), int) else None


def progress_key(progress: Mapping[str, Any]) -> tuple[Any, Any]:
    """What tells one progress report from the next. Not the batch id alone: an idle query reports every
    ``spark.sql.streaming.noDataProgressEventInterval`` under the id of the batch it has not run yet, and
    that batch's own report, once it ran, carries the same id (a controller up to date, then one record
    arriving: taken for the idle report seen before, that record's batch went unseen until the next idle
    report, 10 s later). The trigger's start time differs."""
    return progress["batchId"], progress.get("timestamp")


def ran(progress: Mapping[str, Any]) -> bool:
    """Whether a progress report is of a micro-batch that ran (read rows and committed), not an idle report:
    only the former's id, duration and tables are the last batch's."""
    return bool(progress.get("numInputRows"))


class MetadataLogEnd:
    """Where ``metadata_log`` ends now and the event time of an offset in it: file statistics for the end,
    one pruned row read for a time, so a status line every few seconds costs nothing that matters."""

    def __init__(self, tables: DeltaRsTables) -> None:
        self.tables = tables

    def end_offset(self) -> int:
        end = self.tables.max_value("metadata_log", "offset")
        return -1 if end is None else int(end)

    def start_offset(self) -> int:
        """The lowest offset in the table (-1 when it is empty): a log that begins at a snapshot has none
        below it, so no work there either."""
        if not self.tables.exists("metadata_log"):
            return -1
        ranges = [r for r in file_ranges(self.tables.table("metadata_log"), "offset") if r.num_records]
        if any(r.lo is None for r in ranges):  # a file without statistics: read the column
            column = self.tables.read_arrow("metadata_log", columns=["offset"])["offset"]
            return -1 if len(column) == 0 else int(pc.min(column).as_py())
        return min((int(r.lo) for r in ranges), default=-1)

    def timestamp_ms(self, offset: int) -> int | None:
        column = self.tables.read_offsets("metadata_log", offset, offset, ["timestamp"])["timestamp"]
        if len(column) == 0:
            return None
        return pc.cast(column, pa.timestamp("ms", "UTC")).cast(pa.int64())[0].as_py()


class LogProgress:
    """The controller's progress as an operator reads it, from each micro-batch's ``lastProgress``.

    Replaying (``--once``): offsets of ``metadata_log`` done of those it holds (from its first offset to
    its end: a log that begins at a snapshot has none below), rate and ETA, on the ``meter`` (quiet unless
    asked or on a terminal). Running continuously: a status line every ``status_every`` seconds saying how
    far behind the log's end it is, in offsets and in event time, because that is what tells an operator
    whether the controller keeps up. A line the same as the last one is not repeated: an idle controller
    that is up to date, or one waiting for its first micro-batch, would otherwise fill a service's log with
    copies.
    """

    def __init__(self, log: Any, meter: Meter, once: bool, status_every: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.meter, self.once, self.status_every, self.clock = log, meter, once, status_every, clock
        self.batch: int | None = None
        self.seen: tuple[Any, Any] | None = None  # the last report taken (``progress_key``)
        self.done = 0
        self.first = 0  # the log's first offset, from which the meter counts
        self.last_status: float | None = None
        self.last_line: str | None = None

    def __call__(self, progress: Mapping[str, Any] | None) -> None:
        if progress and progress_key(progress) != self.seen:
            first = self.seen is None
            self.seen = progress_key(progress)
            if first or ran(progress):  # an idle report names the batch that has not run yet
                self.batch = progress["batchId"]
            end = source_offset(progress)
            self.done = end + 1 if end is not None else self.done + progress["numInputRows"]
            if first:  # where this run started: a restart is not work done by this run
                self.first = max(self.log.start_offset(), 0) if end is not None else 0
                start = source_offset(progress, "startOffset")
                self.meter.base = (start + 1 if start is not None else self.done - progress["numInputRows"]) - self.first
            if self.meter.total is None or self.done - self.first > self.meter.total:
                self.meter.total = self.log.end_offset() + 1 - self.first if end is not None else None
            self.meter.update(self.done - self.first, f"batch {self.batch}")
        if not self.once and self.status_every is not None:
            now = self.clock()
            if self.last_status is None or now - self.last_status >= self.status_every:
                self.last_status = now
                line = self.status()
                if line != self.last_line:
                    self.last_line = line
                    self.meter.emit(line)

    def status(self) -> str:
        end = self.log.end_offset()
        if end < 0:
            return f"[{self.meter.label}] waiting: metadata_log is empty"
        if self.batch is None:  # where the query stands is known from its first micro-batch on
            return (f"[{self.meter.label}] starting: metadata_log holds offsets {self.log.start_offset():,}..{end:,}, "
                    "waiting for the first micro-batch")
        behind, seconds = self.lag(end)
        if behind <= 0:
            return f"[{self.meter.label}] up to date at offset {end:,} (batch {self.batch})"
        event_time = "" if seconds is None else f", {seconds:,.1f} s of event time"
        return (f"[{self.meter.label}] {behind:,} offsets{event_time} behind the log's end "
                f"(offset {end:,}; done through {self.done - 1:,}, batch {self.batch})")

    def lag(self, end: int) -> tuple[int, float | None]:
        """How far behind ``end`` (the log's last offset) the replay is: offsets, and seconds of event time
        (None when either time is unknown); (0, 0.0) when it is not behind."""
        behind = end + 1 - self.done
        if behind <= 0:
            return 0, 0.0
        newest, reached = self.log.timestamp_ms(end), self.log.timestamp_ms(self.done - 1) if self.done else None
        return behind, None if newest is None or reached is None else (newest - reached) / 1000


class ControllerMetrics:
    """Keeps a ``MetricsServer``'s text current: after each ``LogProgress`` call (about once a second), the
    lag; after each new micro-batch, the cluster's gauges from the tables it committed (a read of the
    state tables per micro-batch, not per scrape)."""

    def __init__(self, progress: LogProgress, tables: DeltaRsTables, kafka_config: Mapping[str, str],
                 server: MetricsServer) -> None:
        self.progress, self.tables, self.kafka_config, self.server = progress, tables, kafka_config, server
        self.seen: tuple[Any, Any] | None = None
        self.batch: int | None = None
        self.cluster: list[Gauge] = cluster_gauges(tables, kafka_config)
        self.duration_s: float | None = None
        self.server.publish(self.cluster)

    def __call__(self, last: Mapping[str, Any] | None) -> None:
        self.progress(last)
        if last and progress_key(last) != self.seen:
            self.seen = progress_key(last)
            if ran(last):
                self.batch = last["batchId"]
                self.duration_s = last.get("durationMs", {}).get("triggerExecution", 0) / 1000
                self.cluster = cluster_gauges(self.tables, self.kafka_config)
        if self.seen is None:
            return
        end = self.progress.log.end_offset()
        behind, seconds = self.progress.lag(end)
        self.server.publish(progress_gauges(behind, seconds, self.duration_s, self.batch, self.progress.done - 1)
                            + self.cluster)
