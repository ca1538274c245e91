"""The controller when storage fails under it: a disk that fills up during a run, and checkpoint files
damaged between runs. It stops with an error that says what happened, which file and what to do; it
never writes tables it cannot vouch for; and once the cause is gone it ends exactly where an
uninterrupted run ends."""

from __future__ import annotations

import errno
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

from streaming_helpers import (assert_same_tables, committed_batches, generate_log, in_background, ingest_jsonl,
                               logged_events, reference_tables, run_controller, wait_for, warehouse_tables, write_jsonl)
from kraftlake.metadata.tables import table_arrow_schema, tables_of
from kraftlake.spark import controller_query as streaming
from kraftlake.spark.errors import spark_error
from kraftlake.spark.queries import failure_message
from kraftlake.storage import DeltaRsTables, Warehouse
from kraftlake.storage.tables import rows_to_arrow

SHARDS = 2


# --- a full disk ----------------------------------------------------------------------------------------

class SmallDisk:
    """A 32 MB tmpfs mounted for the test, filled on demand; where mounting is not allowed (no root),
    the same fault is injected where the sink writes: ``OSError(ENOSPC)`` from every Delta append."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        path.mkdir()
        self.path = path
        self.filler = path / "filler"
        self.mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "kraftlake-small-disk", str(path)],
                                      capture_output=True).returncode == 0
        self.full = False
        if not self.mounted:
            append = DeltaRsTables.append

            def append_unless_full(tables, *args, **kwargs):
                if self.full:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return append(tables, *args, **kwargs)

            monkeypatch.setattr(DeltaRsTables, "append", append_unless_full)

    def fill(self) -> None:
        if self.mounted:
            try:  # the run may have filled the disk already: then even creating the filler fails
                with self.filler.open("wb") as out:
                    while True:
                        out.write(bytes(1 << 16))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        self.full = True

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)
        self.full = False

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    disk = SmallDisk(tmp_path / "disk", monkeypatch)
    try:
        yield disk
    finally:
        disk.unmount()


def test_a_disk_that_fills_up_mid_run_stops_the_controller_clearly_and_a_restart_ends_exact(
        spark: SparkSession, small_disk: SmallDisk, tmp_path: Path) -> None:
    log = generate_log(seed=8, size=120)
    warehouse = Warehouse(str(small_disk.path / "warehouse"), spark=spark)
    ingest_jsonl(warehouse, write_jsonl(log.events, tmp_path / "log.jsonl"))
    checkpoint = small_disk.path / "warehouse" / "_checkpoints" / "controller"

    thread, errors = in_background(lambda: run_controller(warehouse, checkpoint, SHARDS, 10))
    assert wait_for(lambda: bool(committed_batches(checkpoint)) or not thread.is_alive(), 180)
    small_disk.fill()  # a micro-batch or two in: the next writes find no space
    thread.join(300)
    assert not thread.is_alive()
    done_when_full = committed_batches(checkpoint)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
    message = str(errors[0])
    assert "query stopped: no space left on the device" in message and "Free space, then start" in message, message
    assert len(done_when_full) < -(-len(log.events) // 10), "the disk filled up after the run had finished"

    small_disk.free()
    run_controller(warehouse, checkpoint, SHARDS, None)
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged_events(warehouse), SHARDS),
                       f"disk full after batch {done_when_full[-1] if done_when_full else None}, then restarted "
                       f"({'a real tmpfs' if small_disk.mounted else 'ENOSPC injected'})")


# --- damaged checkpoint files -----------------------------------------------------------------------------

def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_file_is_named_with_the_remedy_and_no_table_changes(
        spark: SparkSession, tmp_path: Path) -> None:
    log = generate_log(seed=9, size=80)
    root = tmp_path / "warehouse"
    warehouse = Warehouse(str(root), spark=spark)
    checkpoint = root / "_checkpoints" / "controller"
    ingest_jsonl(warehouse, write_jsonl(log.events[:40], tmp_path / "first.jsonl"))
    run_controller(warehouse, checkpoint, SHARDS, None)
    ingest_jsonl(warehouse, write_jsonl(log.events[40:], tmp_path / "second.jsonl"))
    before = warehouse_tables(warehouse)

    # the state store: the shards' images; Spark reads them back at the next batch
    state = max((p for p in (checkpoint / "state").rglob("*.delta")), key=lambda p: p.stat().st_size)
    flip_a_byte(state)
    with pytest.raises(RuntimeError) as stopped:
        run_controller(warehouse, checkpoint, SHARDS, None)
    message = str(stopped.value)
    assert f"cannot continue from its checkpoint: {state} is damaged" in message, message
    assert "Remedy: start the controller with --reset" in message
    assert warehouse_tables(warehouse) == before, "a damaged state store must not reach the tables"

    streaming.reset(warehouse, str(checkpoint))  # the remedy
    run_controller(warehouse, checkpoint, SHARDS, None)
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged_events(warehouse), SHARDS),
                       "rebuilt with --reset after a damaged state file")

    # the commit log: what the restart reads first
    commit = checkpoint / "commits" / str(committed_batches(checkpoint)[-1])
    commit.write_text("not a commit")
    after = warehouse_tables(warehouse)
    with pytest.raises(RuntimeError) as stopped:
        run_controller(warehouse, checkpoint, SHARDS, None)
    assert f"{commit} is damaged" in str(stopped.value) and "--reset" in str(stopped.value), str(stopped.value)
    assert warehouse_tables(warehouse) == after
    shutil.rmtree(root)


# --- killed before the first checkpoint ----------------------------------------------------------------

def test_a_controller_killed_before_spark_wrote_its_checkpoint_starts_again(tmp_path: Path) -> None:
    """Found by the soak run: a controller killed after it created its (empty) tables but before Spark
    wrote the checkpoint was refused at every restart, as if those tables held an earlier run's rows."""
    warehouse = Warehouse(str(tmp_path / "warehouse"))
    ingest_jsonl(warehouse, write_jsonl(generate_log(seed=1, size=10).events, tmp_path / "log.jsonl"))
    checkpoint = str(tmp_path / "warehouse" / "_checkpoints" / "controller")
    for name in tables_of("controller"):
        warehouse.create_if_missing(name, table_arrow_schema(name))
    streaming.check_start(warehouse, checkpoint)  # nothing to replay into twice
    warehouse.append("partition_history", rows_to_arrow("partition_history", []), table_arrow_schema(
        "partition_history"), ("kraftlake-controller-earlier", 0))
    with pytest.raises(RuntimeError, match="partition_history exist: they were built by an earlier run"):
        streaming.check_start(warehouse, checkpoint)


def test_a_java_heap_space_error_in_a_query_failure_is_told_as_out_of_memory_with_the_remedy(tmp_path: Path) -> None:
    """Found by the soak run: a backlog of 200,000 requests in one micro-batch exhausted a 1 GB driver
    heap, and every restart re-ran the same planned batch into the same error, shown as a stack trace.
    Nothing runs out of memory here: the failure text Spark gave then is turned into the message."""
    error = ("An exception was raised by the Python Proxy ... Caused by: org.apache.spark.SparkException: Job "
             "aborted\\n\\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages\n"
             "java.lang.OutOfMemoryError: Java heap space\n\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)")
    message = failure_message("controller", error, str(tmp_path))
    assert message.startswith("the controller query ran out of memory (java.lang.OutOfMemoryError: Java heap space)")
    assert "re-run at the same size by the next start" in message and "--driver-memory" in message


# As Spark 4 reported a query whose Delta source met a data file deleted under it (jobs/controller.py --once on
# a warehouse with one metadata_log file removed; paths shortened, frames cut)
SOURCE_FAILED = """[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform latestOffset: \
Traceback (most recent call last):
  File "/v/pyspark.zip/pyspark/sql/streaming/python_streaming_source_runner.py", line 281, in main
  File "/r/lib/kraftlake/storage/datasource.py", line 316, in latestOffset
    nth = nth_value_after(table, self.column, first, rows)
          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/v/pyarrow/dataset.py", line 379, in _ensure_multiple_sources
    raise FileNotFoundError(info.path)
FileNotFoundError: /w/metadata_log/part-00000-a3ee5bbb-c000.parquet
 SQLSTATE: 38000
=== Streaming Query ===
Identifier: kraftlake_controller [id = c5d8df7a, runId = e3cc2590]
Current Committed Offsets: {}
Current Available Offsets: {}
"""

# A task's Python error, as the job that ran it is aborted (the executor's part as Spark's executor logged it)
TASK_FAILED = """Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task \
0.0 in stage 3.0 (TID 5) (localhost executor driver): org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] \
An exception was thrown from the Python worker: Traceback (most recent call last):
  File "/r/lib/kraftlake/storage/datasource.py", line 402, in read
    raise OSError("Generic S3 error: request failed")
OSError: Generic S3 error: Error performing GET http://127.0.0.1:9/b/part-0.parquet after 10 retries
During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/r/lib/kraftlake/storage/datasource.py", line 410, in read
    raise OSError(f"{path}: {exc}") from exc
OSError: s3://b/metadata_log/part-0.parquet: Generic S3 error: connection closed before message completed
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:665)
\tat org.apache.spark.scheduler.Task.run(Task.scala:147)

Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)
"""


def test_a_python_error_in_a_failed_query_is_told_in_one_line_by_its_exception() -> None:
    """The job's line named the failed query, then went on with the library's traceback, the JVM's stack and
    the query's description: 39 lines for a data file deleted under the source."""
    assert failure_message("controller", SOURCE_FAILED, "/c") == (
        "the controller query failed: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data "
        "source perform latestOffset: FileNotFoundError: /w/metadata_log/part-00000-a3ee5bbb-c000.parquet")
    line = spark_error(TASK_FAILED)
    assert line.startswith("Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times")
    assert line.endswith(": OSError: s3://b/metadata_log/part-0.parquet: Generic S3 error: connection closed before "
                         "message completed"), "the last exception raised, not the one it was raised from"
    assert "\n" not in line and "Traceback" not in line and "\tat " not in line


def test_a_jvm_error_in_a_failed_query_keeps_spark_s_words_without_its_stack() -> None:
    error = ("Job aborted due to stage failure: Task 2 in stage 7.0 failed 4 times: ExecutorLostFailure (executor 1 "
             "exited caused by one of the running tasks) Reason: Remote RPC client disassociated.\n"
             "Driver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x)\n")
    assert spark_error(error) == ("Job aborted due to stage failure: Task 2 in stage 7.0 failed 4 times: "
                                  "ExecutorLostFailure (executor 1 exited caused by one of the running tasks) "
                                  "Reason: Remote RPC client disassociated.")
