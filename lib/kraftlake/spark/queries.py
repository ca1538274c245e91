"""What the controller query and the quorum query share: ids, triggers, exactly-once sinks, supervision.

Both queries are ``applyInPandasWithState`` over ``metadata_log`` with a ``foreachBatch`` sink into Delta;
they differ in how they group and what they write. Keeping the plumbing here (and not in either query's
module) lets each depend on it without depending on the other.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping, TextIO, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from kraftlake.storage.lease import Lease

Sink = Callable[[Any, tuple[str, int]], Any]


def uri(path: str) -> str:
    """``path`` as a URI pyarrow's filesystems accept (local paths become ``file://`` URIs)."""
    # as_uri() percent-encodes: a bare "file://" + path is no URI once the path has a space or '#'
    return path if "://" in path else Path(os.path.abspath(path)).as_uri()


def query_id(checkpoint: str) -> str | None:
    """The streaming query's id from its checkpoint (stable across restarts of the same checkpoint)."""
    filesystem, path = pafs.FileSystem.from_uri(uri(checkpoint))
    info = filesystem.get_file_info(f"{path}/metadata")
    if info.type != pafs.FileType.File:
        return None
    with filesystem.open_input_stream(f"{path}/metadata") as stream:
        return json.loads(stream.read().decode().splitlines()[0])["id"]


def delete_dir(target: str) -> None:
    """Remove a directory (a checkpoint, a table) if it is there, on any filesystem pyarrow knows."""
    filesystem, path = pafs.FileSystem.from_uri(uri(target))
    if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
        filesystem.delete_dir(path)


def start_sink(outputs: Any, name: str, checkpoint: str, once: bool, trigger_interval_ms: int, write: Sink) -> Any:
    """Start ``outputs`` as query ``kraftlake_<name>``: each micro-batch goes to ``write(batch_df, txn)``.

    ``txn`` is the Delta application transaction ``(kraftlake-<name>-<query id>, batch id)``: a batch Spark
    runs again after a crash carries the same pair, so every table that already has it skips it. The id is
    read from the checkpoint once Spark has written it (at the first batch).
    """
    app_id: list[str] = []

    def sink(batch_df: Any, batch_id: int) -> None:
        if not app_id:
            app_id.append(f"kraftlake-{name}-{query_id(checkpoint)}")
        write(batch_df, (app_id[0], batch_id))

    writer = (outputs.writeStream.queryName(f"kraftlake_{name}").option("checkpointLocation", checkpoint)
              .foreachBatch(sink))
    writer = writer.trigger(availableNow=True) if once else \
        writer.trigger(processingTime=f"{trigger_interval_ms} milliseconds")
    return writer.start()


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
    filesystem, base = pafs.FileSystem.from_uri(uri(checkpoint))
    damaged = []
    for info in filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        folder, name = os.path.split(info.path)
        if info.type != pafs.FileType.File or not (name.startswith(".") and name.endswith(".crc")):
            continue
        data_path = f"{folder}/{name[1:-4]}"
        with filesystem.open_input_stream(info.path) as stream:
            sums = stream.read()
        try:
            with filesystem.open_input_stream(data_path) as stream:
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
        return f"the {name} query failed: {error}"
    local = unquote(urlparse(uri(checkpoint)).path)
    files = damaged_files(checkpoint) or sorted(set(re.findall(re.escape(local) + r"/[^\s:;,'\"()\[\]]+", error)))
    where = ", ".join(files) if files else \
        f"a file it reads back (Spark does not say which, and no file under {checkpoint} fails its checksum)"
    return (f"the {name} query cannot continue from its checkpoint: {where} is damaged "
            f"({_cause(error, marker)}). The tables are as the last completed micro-batch left them and nothing "
            "more is written. Remedy: start the controller with --reset, which deletes the checkpoint and the "
            "tables derived from metadata_log and replays the log from offset 0.")


def supervise(queries: Mapping[str, Any], once: bool, checkpoint: str, progress_every: float = 10.0,
              out: TextIO | None = None, lease: Lease | None = None) -> bool:
    """Wait for the queries (the first one's progress is printed) until they end (``once``) or forever;
    False if stopped by a signal. One failed query stops the others and raises, saying why (see
    ``failure_message``; ``checkpoint`` is the folder holding every query's checkpoint); so does losing
    ``lease`` (another process took the warehouse over: writing on would race it).

    SIGINT and SIGTERM only set a flag that the loop checks every second before it stops the queries: the
    driver's main thread is usually inside a py4j call when they arrive, and stopping a query from the
    handler itself would re-enter py4j (pyspark's own SIGINT handler does, and prints tracebacks). A batch
    in flight is cut short; the checkpoint and the Delta transactions make the next start finish it.
    """
    from pyspark.errors import StreamingQueryException

    out = out or sys.stderr
    main_name, main = next(iter(queries.items()))
    stop_requested: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, lambda signum, frame: stop_requested.append(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
    last_batch, last_print = None, -progress_every
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
            if not once and not all(q.isActive for q in queries.values()):
                break  # one query failed: stop the others and report
            progress = main.lastProgress
            quiet = time.monotonic() - last_print < progress_every
            if progress and progress["batchId"] != last_batch and progress["numInputRows"] and not quiet:
                last_batch, last_print = progress["batchId"], time.monotonic()
                end = progress["sources"][0].get("endOffset") if progress.get("sources") else None
                print(f"[{main_name}] batch {last_batch}: {progress['numInputRows']:,} log rows, "
                      f"log offset {end}, {progress.get('processedRowsPerSecond', 0):,.0f} rows/s",
                      file=out, flush=True)
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
                raise RuntimeError(failure_message(name, str(q.exception()), checkpoint))
        return True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
