"""Progress on long work: the meter's lines, ingest's bytes, the controller's offsets and its status line."""

from __future__ import annotations

import io
import re
import threading
import time

import pytest

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.codec import read_partition_dir
from kraftlake.metadata.config import ConfigError, load_config
from kraftlake.metadata.progress import TERMINAL_ENV, Meter, duration, wanted
from kraftlake.spark import controller_query
from kraftlake.spark.queries import ControllerMetrics, LogProgress, MetadataLogEnd, source_offset
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.ingest import ingest_source

from streaming_helpers import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_meter_says_done_of_total_rate_and_eta_once_per_interval():
    clock, out = Clock(), io.StringIO()
    meter = Meter("replay", "offsets", total=1_000, every=5, out=out, clock=clock)
    clock.now += 1
    assert not meter.update(100)  # short work prints nothing at all
    clock.now += 4
    assert meter.update(250, "batch 3")
    clock.now += 2
    assert not meter.update(300)  # within the interval
    clock.now += 3
    assert meter.update(500)
    meter.finish(1_000)
    assert out.getvalue().splitlines() == [
        "[replay] 250 of 1,000 offsets (25%), 50 offsets/s, ETA 0:15, elapsed 0:05, batch 3",
        "[replay] 500 of 1,000 offsets (50%), 50 offsets/s, ETA 0:10, elapsed 0:10",
        "[replay] 1,000 of 1,000 offsets (100%), 100 offsets/s, ETA 0:00, elapsed 0:10",
    ]


def test_a_meter_counts_its_rate_from_where_it_started_and_scales_units():
    clock, out = Clock(), io.StringIO()
    meter = Meter("ingest", "MB", total=30_000_000, every=0, out=out, clock=clock)
    meter.scale, meter.base = 1e6, 10_000_000
    clock.now += 2
    meter.update(20_000_000)
    assert out.getvalue() == "[ingest] 20.0 of 30.0 MB (67%), 5.0 MB/s, ETA 0:02, elapsed 0:02\n"


def test_a_quiet_meter_prints_nothing_and_finish_only_follows_lines():
    clock, out = Clock(), io.StringIO()
    quiet = Meter("x", every=0, enabled=False, out=out, clock=clock)
    clock.now += 10
    assert not quiet.update(5)
    quiet.finish(5)
    short = Meter("y", every=60, out=out, clock=clock)
    short.finish(5)  # nothing printed before: no last line either
    assert out.getvalue() == ""
    assert duration(3_725) == "1:02:05" and duration(59.6) == "1:00"


def test_progress_is_quiet_off_a_terminal_unless_asked():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert not wanted("auto", io.StringIO()) and wanted("auto", Terminal())
    assert wanted("always", io.StringIO()) and not wanted("never", Terminal())
    with pytest.raises(ValueError, match="kraftlake.progress"):
        wanted("sometimes")


def test_under_spark_submit_the_launcher_says_whether_the_lines_reach_a_terminal(monkeypatch, capsys):
    # The driver's stderr is then a pipe into the JVM: sys.stderr is no terminal either way.
    monkeypatch.delenv(TERMINAL_ENV, raising=False)
    assert not wanted("auto")
    monkeypatch.setenv(TERMINAL_ENV, "1")
    assert wanted("auto") and not wanted("never")
    assert not wanted("auto", io.StringIO())  # a stream of the caller's own is judged by itself


def test_progress_flags_and_settings():
    import argparse

    parser = add_common_arguments(argparse.ArgumentParser())
    assert config_from_args(parser.parse_args(["--progress"]))["kraftlake.progress"] == "always"
    assert config_from_args(parser.parse_args(["--no-progress"]))["kraftlake.progress"] == "never"
    assert config_from_args(parser.parse_args([]))["kraftlake.progress"] == "auto"
    with pytest.raises(ConfigError, match="kraftlake.progress"):
        load_config(overrides=["kraftlake.progress=loud"])


def test_ingest_reports_bytes_of_the_log_read(fixtures_dir, tmp_path):
    log = fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0"
    clock, out = Clock(), io.StringIO()

    class Ticking(Meter):
        def update(self, done, note="", total=None):
            clock.now += 0.01  # 10 ms per record read
            return super().update(done, note, total)

    meter = Ticking("ingest", every=10, out=out, clock=clock)
    summary = ingest_source(DeltaRsTables(str(tmp_path / "w")), str(log), meter=meter)
    lines = out.getvalue().splitlines()
    size = sum(f.stat().st_size for f in log.glob("*.log"))
    assert meter.total == size and meter.unit == "MB"
    assert len(lines) == summary.records // 1_000 + 1  # one per 10 s of the fake clock, and the last
    assert all(f"of {size / 1e6:,.1f} MB" in line for line in lines)
    assert lines[-1].startswith(f"[ingest] {size / 1e6:,.1f} of {size / 1e6:,.1f} MB (100%)")
    assert lines[-1].endswith(f"{summary.records:,} records")
    assert "offset 999" in lines[0]


class FakeLog:
    def __init__(self, end: int, times: dict[int, int], start: int = 0) -> None:
        self.end, self.times, self.start = end, times, start

    def end_offset(self) -> int:
        return self.end

    def start_offset(self) -> int:
        return self.start if self.end >= 0 else -1

    def timestamp_ms(self, offset: int) -> int | None:
        return self.times.get(offset)


def _progress(batch: int, start: int | None, end: int, rows: int, at: str = "2026-11-26T19:56:00.000Z") -> dict:
    """A query's progress report as pyspark gives it (``at``: its trigger's start)."""
    def offset(value):
        return None if value is None else f'{{"offset":{value}}}'

    return {"batchId": batch, "numInputRows": rows, "timestamp": at,
            "sources": [{"startOffset": offset(start), "endOffset": offset(end)}]}


def test_the_controller_reports_offsets_done_of_the_log_end():
    clock, out = Clock(), io.StringIO()
    log = FakeLog(4_999, {})
    progress = LogProgress(log, Meter("controller", "offsets", every=0, out=out, clock=clock), once=True,
                           status_every=1, clock=clock)
    clock.now += 1
    progress(_progress(0, 1_999, 2_999, 1_000))  # a restart: 2,000 offsets were done before
    progress(_progress(0, 1_999, 2_999, 1_000))  # the same batch again: nothing new
    clock.now += 1
    progress(_progress(1, 2_999, 4_999, 2_000))
    assert out.getvalue().splitlines() == [
        "[controller] 3,000 of 5,000 offsets (60%), 1,000 offsets/s, ETA 0:02, elapsed 0:01, batch 0",
        "[controller] 5,000 of 5,000 offsets (100%), 1,500 offsets/s, ETA 0:00, elapsed 0:02, batch 1",
    ]
    assert source_offset({"sources": [{"endOffset": {"sourceVersion": 1, "reservoirVersion": 3}}]}) is None


def test_the_continuous_controller_says_how_far_behind_the_log_end_it_is():
    clock, out = Clock(), io.StringIO()
    log = FakeLog(-1, {})
    progress = LogProgress(log, Meter("controller", "offsets", enabled=False, out=out, clock=clock), once=False,
                           status_every=30, clock=clock)
    progress(None)
    log.end, log.times = 1_499, {499: 10_000, 1_499: 25_500}
    progress(_progress(0, None, 499, 500))  # within 30 s of the last status line: nothing
    clock.now += 30
    progress(_progress(0, None, 499, 500))
    log.end = 499
    clock.now += 30
    progress(None)
    clock.now += 30
    progress(None)  # nothing has changed since: the same line is not printed again
    assert out.getvalue().splitlines() == [
        "[controller] waiting: metadata_log is empty",
        "[controller] 1,000 offsets, 15.5 s of event time behind the log's end (offset 1,499; done through 499, "
        "batch 0)",
        "[controller] up to date at offset 499 (batch 0)",
    ]


def test_a_batch_reported_under_the_id_of_the_idle_report_before_it_is_seen():
    """Seen on a standby that took over an idle controller: Spark's idle report names the batch not run yet
    (1), and when a record arrives, batch 1's own report has the same id. The status line must follow the
    second report at once, not 10 s later with the next idle one."""
    clock, out = Clock(), io.StringIO()
    log = FakeLog(3_071, {3_071: 1_000, 3_072: 2_000})
    progress = LogProgress(log, Meter("controller", "offsets", enabled=False, out=out, clock=clock), once=False,
                           status_every=2, clock=clock)
    progress(_progress(1, 3_071, 3_071, 0, at="2026-11-26T19:56:13.000Z"))  # idle: batch 0 was the last run
    log.end = 3_072
    clock.now += 2
    progress(_progress(1, 3_071, 3_071, 0, at="2026-11-26T19:56:13.000Z"))
    clock.now += 2
    progress(_progress(1, 3_071, 3_072, 1, at="2026-11-26T19:56:23.000Z"))  # batch 1 ran: the record done
    assert out.getvalue().splitlines() == [
        "[controller] up to date at offset 3,071 (batch 1)",
        "[controller] 1 offsets, 1.0 s of event time behind the log's end (offset 3,072; done through 3,071, "
        "batch 1)",
        "[controller] up to date at offset 3,072 (batch 1)",
    ]


def test_the_metrics_name_the_last_batch_that_ran_not_an_idle_report(tmp_path):
    """An idle report's id is the batch not run yet and its duration the idle trigger's (milliseconds): the
    gauges of the last micro-batch come from reports of batches that read rows."""
    published: list[dict] = []

    class Server:
        def publish(self, gauges):
            published.append({g.name: g.value for g in gauges})

    clock = Clock()
    log = FakeLog(3_072, {})
    progress = LogProgress(log, Meter("controller", "offsets", enabled=False, clock=clock), once=False,
                           status_every=None, clock=clock)
    metrics = ControllerMetrics(progress, DeltaRsTables(str(tmp_path / "w")), {}, Server())
    batch = {**_progress(1, 3_071, 3_072, 1, at="2026-11-26T19:56:23.000Z"), "durationMs": {"triggerExecution": 2_500}}
    idle = {**_progress(2, 3_072, 3_072, 0, at="2026-11-26T19:56:33.000Z"), "durationMs": {"triggerExecution": 3}}
    metrics(batch)
    metrics(idle)
    last = published[-1]
    assert last["kraftlake_controller_last_batch_id"] == 1
    assert last["kraftlake_controller_batch_duration_seconds"] == 2.5
    assert last["kraftlake_controller_replayed_offset"] == 3_072 and last["kraftlake_controller_lag_offsets"] == 0


def test_a_log_that_begins_at_a_snapshot_is_counted_from_its_first_offset():
    """single-broker-snapshot ingested from its snapshot holds offsets 7,144..7,706: the 7,144 offsets below
    are not in the table, so they are neither work to do nor a backlog."""
    clock, out = Clock(), io.StringIO()
    log = FakeLog(7_706, {}, start=7_144)
    progress = LogProgress(log, Meter("controller", "offsets", every=0, out=out, clock=clock), once=False,
                           status_every=30, clock=clock)
    progress(None)
    clock.now += 1
    progress(_progress(0, None, 7_399, 256))
    clock.now += 30
    progress(None)
    assert out.getvalue().splitlines() == [
        "[controller] starting: metadata_log holds offsets 7,144..7,706, waiting for the first micro-batch",
        "[controller] 256 of 563 offsets (45%), 256 offsets/s, ETA 0:01, elapsed 0:01, batch 0",
        "[controller] 307 offsets behind the log's end (offset 7,706; done through 7,399, batch 0)",
    ]


def test_the_log_end_comes_from_the_table(fixtures_dir, tmp_path):
    log = fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0"
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest_source(tables, str(log))
    records = {r["offset"]: r["timestamp"] for r in read_partition_dir(log)}
    end = MetadataLogEnd(tables)
    assert end.end_offset() == max(records) == 4_928
    assert end.timestamp_ms(4_928) == records[4_928] and end.timestamp_ms(17) == records[17]
    assert end.timestamp_ms(10**9) is None
    assert MetadataLogEnd(DeltaRsTables(str(tmp_path / "empty"))).end_offset() == -1
    assert end.start_offset() == min(records) == 0
    snapshot = DeltaRsTables(str(tmp_path / "snapshot"))
    ingest_source(snapshot, str(fixtures_dir / "single-broker-snapshot" / "__cluster_metadata-0"), from_snapshot=True)
    offsets = snapshot.read_arrow("metadata_log", columns=["offset"])["offset"].to_pylist()
    assert MetadataLogEnd(snapshot).start_offset() == min(offsets) > 0
    assert MetadataLogEnd(DeltaRsTables(str(tmp_path / "empty"))).start_offset() == -1


def test_a_running_controller_prints_its_status_line(spark, fixtures_dir, tmp_path):
    """The real query's progress goes through the same lines: the status line names the log's end offset
    once the controller has caught up with it, and again after more of the log arrives."""
    warehouse = Warehouse(str(tmp_path / "w"), engine="delta-rs", spark=spark)
    ingest_source(warehouse, str(fixtures_dir / "single-broker-restarts" / "__cluster_metadata-0"))
    first_end = MetadataLogEnd(warehouse).end_offset()
    out = io.StringIO()
    settings = controller_query.ControllerSettings(shards=2, checkpoint=str(tmp_path / "cp"), once=False,
                                                   trigger_interval_ms=200)
    runner = threading.Thread(target=controller_query.run, daemon=True,
                              kwargs={"warehouse": warehouse, "settings": settings, "status_every": 0.2, "out": out,
                                      "started": time.monotonic()})
    runner.start()
    try:
        assert wait_for(lambda: f"up to date at offset {first_end:,}" in out.getvalue(), 120), out.getvalue()
        # before any status line, how long starting the query took (a restart's downtime); the quorum query after
        # the controller's first micro-batch
        assert re.match(r"\[controller\] controller query started \d+\.\d s after the job's start; the quorum "
                        r"query starts after its first micro-batch\n", out.getvalue()), out.getvalue()
        assert wait_for(lambda: "[controller] quorum query started" in out.getvalue(), 60), out.getvalue()
        more = tmp_path / "more.jsonl"
        more.write_text('{"type": "NoOpRecord", "version": 0, "timestamp": 1763580879457, "data": {}}\n')
        ingest_source(warehouse, str(more))
        assert wait_for(lambda: f"up to date at offset {first_end + 1:,}" in out.getvalue(), 120), out.getvalue()
    finally:
        for query in spark.streams.active:
            query.stop()
        runner.join(60)
    assert not runner.is_alive()
