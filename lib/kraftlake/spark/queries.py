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

import pyarrow.fs as pafs

from kraftlake.storage.deltars import StorageOptions, filesystem

Sink = Callable[[Any, tuple[str, int]], Any]


def query_id(checkpoint: str, storage_options: StorageOptions = None) -> str | None:
    """The streaming query's id from its checkpoint (stable across restarts of the same checkpoint)."""
    fs, path = filesystem(checkpoint, storage_options)
    info = fs.get_file_info(f"{path}/metadata")
    if info.type != pafs.FileType.File:
        return None
    with fs.open_input_stream(f"{path}/metadata") as stream:
        return json.loads(stream.read().decode().splitlines()[0])["id"]


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


def supervise(queries: Mapping[str, Any], once: bool, progress_every: float = 10.0, out: TextIO | None = None) -> bool:
    """Wait for the queries (the first one's progress is printed) until they end (``once``) or forever;
    False if stopped by a signal. One failed query stops the others and raises.

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
    last_batch, last_print = None, -progress_every
    try:
        while any(q.isActive for q in queries.values()) and not stop_requested:
            next((q for q in queries.values() if q.isActive), main).awaitTermination(1)
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
                raise RuntimeError(f"the {name} query failed: {q.exception()}")
        return True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
