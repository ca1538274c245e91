"""What the controller query and the quorum query share: ids, triggers, exactly-once sinks, supervision.

Both queries are ``applyInPandasWithState`` over ``metadata_log`` with a ``foreachBatch`` sink into Delta;
they differ in how they group and what they write. Keeping the plumbing here (and not in either query's
module) lets each depend on it without depending on the other.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any, Callable, Mapping, TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kraftlake.metadata.progress import Meter
from kraftlake.storage.deltars import DeltaRsTables, StorageOptions, filesystem

Sink = Callable[[Any, tuple[str, int]], Any]


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


def delete_dir(target: str, storage_options: StorageOptions = None) -> None:
    """Remove a directory (a checkpoint, a table) if it is there, locally or on object storage."""
    fs, path = filesystem(target, storage_options)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def start_sink(outputs: Any, name: str, checkpoint: str, once: bool, trigger_interval_ms: int, write: Sink,
               storage_options: StorageOptions = None) -> Any:
    """Start ``outputs`` as query ``kraftlake_<name>``: each micro-batch goes to ``write(batch_df, txn)``.

    ``txn`` is the Delta application transaction ``(kraftlake-<name>-<query id>, batch id)``: a batch Spark
    runs again after a crash carries the same pair, so every table that already has it skips it. The id is
    read from the checkpoint once Spark has written it (at the first batch).
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
    return writer.start()


def supervise(queries: Mapping[str, Any], once: bool, on_progress: Callable[[dict | None], None] | None = None,
              out: TextIO | None = None) -> bool:
    """Wait for the queries until they end (``once``) or forever; False if stopped by a signal. One failed
    query stops the others and raises. ``on_progress`` sees the first query's ``lastProgress`` about once a
    second (``LogProgress`` turns it into progress and status lines).

    SIGINT and SIGTERM only set a flag that the loop checks every second before it stops the queries: the
    driver's main thread is usually inside a py4j call when they arrive, and stopping a query from the
    handler itself would re-enter py4j (pyspark's own SIGINT handler does, and prints tracebacks). A batch
    in flight is cut short; the checkpoint and the Delta transactions make the next start finish it.
    """
    out = out or sys.stderr
    main_name, main = next(iter(queries.items()))
    stop_requested: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, lambda signum, frame: stop_requested.append(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while any(q.isActive for q in queries.values()) and not stop_requested:
            next((q for q in queries.values() if q.isActive), main).awaitTermination(1)
            if not once and not all(q.isActive for q in queries.values()):
                break  # one query failed: stop the others and report
            if on_progress is not None:
                on_progress(main.lastProgress)
        if stop_requested:
            print(f"[{main_name}] stopping (signal received); restart to continue from the checkpoint",
                  file=out, flush=True)
            for q in queries.values():
                q.stop()
            return False
        for name, q in queries.items():
            if q.exception() is not None:
                for other in queries.values():
                    other.stop()
                raise RuntimeError(f"the {name} query failed: {q.exception()}")
        return True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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


class MetadataLogEnd:
    """Where ``metadata_log`` ends now and the event time of an offset in it: file statistics for the end,
    one pruned row read for a time, so a status line every few seconds costs nothing that matters."""

    def __init__(self, tables: DeltaRsTables) -> None:
        self.tables = tables

    def end_offset(self) -> int:
        end = self.tables.max_value("metadata_log", "offset")
        return -1 if end is None else int(end)

    def timestamp_ms(self, offset: int) -> int | None:
        column = self.tables.read_arrow("metadata_log", columns=["timestamp"],
                                        filter=pc.field("offset") == offset)["timestamp"]
        if len(column) == 0:
            return None
        return pc.cast(column, pa.timestamp("ms", "UTC")).cast(pa.int64())[0].as_py()


class LogProgress:
    """The controller's progress as an operator reads it, from each micro-batch's ``lastProgress``.

    Replaying (``--once``): offsets of ``metadata_log`` done of its end offset, rate and ETA, on the
    ``meter`` (quiet unless asked or on a terminal). Running continuously: a status line every
    ``status_every`` seconds saying how far behind the log's end it is, in offsets and in event time,
    because that is what tells an operator whether the controller keeps up.
    """

    def __init__(self, log: Any, meter: Meter, once: bool, status_every: float | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.meter, self.once, self.status_every, self.clock = log, meter, once, status_every, clock
        self.batch: int | None = None
        self.done = 0
        self.last_status: float | None = None

    def __call__(self, progress: Mapping[str, Any] | None) -> None:
        if progress and progress["batchId"] != self.batch:
            first = self.batch is None
            self.batch = progress["batchId"]
            end = source_offset(progress)
            self.done = end + 1 if end is not None else self.done + progress["numInputRows"]
            if first:  # where this run started: a restart or a log that begins at a snapshot is not work done
                start = source_offset(progress, "startOffset")
                self.meter.base = start + 1 if start is not None else self.done - progress["numInputRows"]
            if self.meter.total is None or self.done > self.meter.total:
                self.meter.total = self.log.end_offset() + 1 if end is not None else None
            self.meter.update(self.done, f"batch {self.batch}")
        if not self.once and self.status_every is not None:
            now = self.clock()
            if self.last_status is None or now - self.last_status >= self.status_every:
                self.last_status = now
                self.meter.emit(self.status())

    def status(self) -> str:
        end = self.log.end_offset()
        if end < 0:
            return f"[{self.meter.label}] waiting: metadata_log is empty"
        behind = end + 1 - self.done
        if behind <= 0:
            return f"[{self.meter.label}] up to date at offset {end:,} (batch {self.batch})"
        newest, reached = self.log.timestamp_ms(end), self.log.timestamp_ms(self.done - 1) if self.done else None
        event_time = "" if newest is None or reached is None else f", {(newest - reached) / 1000:,.1f} s of event time"
        return (f"[{self.meter.label}] {behind:,} offsets{event_time} behind the log's end "
                f"(offset {end:,}; done through {self.done - 1:,}, batch {self.batch})")
