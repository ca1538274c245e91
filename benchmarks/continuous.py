"""The continuous controller measured while events arrive: micro-batch durations and end-to-end lag."""

from __future__ import annotations

import argparse
import shutil
import time
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from kraftlake.cli.runtime import open_warehouse
from kraftlake.metadata.tables import metadata_log_schema
from kraftlake.sim.workload import generate
from kraftlake.spark.controller_query import ControllerSettings, start
from kraftlake.spark.queries import source_offset
from kraftlake.storage.tables import events_to_arrow

from benchmarks.stats import chunks, log, percentile


def _events(progress: dict, setup_end: int) -> int:
    """Log offsets a micro-batch covered: the events it consumed, NoOpRecords included (the source filters
    those out, so they are not among its input rows)."""
    start = source_offset(progress, "startOffset")
    return (source_offset(progress) or 0) - (setup_end if start is None else max(start, setup_end))


def _progress_time(progress: dict) -> float:
    """When the trigger started, as a Unix time (Spark writes ISO-8601 UTC with a Z)."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def _arrow(events: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([events_to_arrow(events, schema)])


def measure_latency(config, work: Path, args: argparse.Namespace, sizes: dict) -> dict:
    """The continuous controller (``trigger`` = processing time of ``trigger_ms``) on its own warehouse
    while a feeder appends ``rate`` generated events to ``metadata_log`` once a second for
    ``latency_seconds``; then it drains. Per micro-batch with input: Spark's ``durationMs``
    (``triggerExecution``: the whole batch; ``addBatch``: the shard step and the sink). Lag: from an
    append's commit to the end of the first batch that covered its last offset."""
    rate, seconds, trigger_ms = sizes["rate"], sizes["latency_seconds"], sizes["trigger_ms"]
    root = work / "latency-warehouse"
    shutil.rmtree(root, ignore_errors=True)
    warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(root)}), "kraftlake-bench")
    schema = metadata_log_schema()
    ppt = args.partitions_per_topic
    setup_count = 2 * args.brokers + args.topics + args.topics * ppt
    events = generate(setup_count + rate * seconds, brokers=args.brokers, topics=args.topics,
                      partitions_per_topic=ppt)
    setup = [next(events) for _ in range(setup_count)]
    # Arrow is built before the clock starts, so the feeder's own cost during the run is the commit.
    feeds = [(_arrow(batch, schema), batch[-1]["offset"]) for batch in chunks(events, rate)]
    events = None
    warehouse.append("metadata_log", _arrow(setup, schema), schema)
    setup_end = setup[-1]["offset"]
    setup = None
    limit = config.get_int("kraftlake.controller.max.records.per.batch", minimum=0)
    settings = ControllerSettings(shards=args.shards, checkpoint=str(work / "latency-checkpoint"), once=False,
                                  trigger_interval_ms=trigger_ms, max_records_per_batch=limit or None)
    query = start(warehouse, settings)
    progress: dict[int, dict] = {}

    def poll() -> int:
        for p in query.recentProgress:
            progress[p["batchId"]] = p
        ends = [e for e in (source_offset(p) for p in progress.values()) if e is not None]
        return max(ends) if ends else -1

    try:
        deadline = time.monotonic() + 300
        while poll() < setup_end and time.monotonic() < deadline and query.isActive:
            time.sleep(0.1)
        first_batch = max(progress) + 1 if progress else 0
        appended = []
        tick = time.monotonic()
        for table, last_offset in feeds:
            warehouse.append("metadata_log", table, schema)
            appended.append((time.time(), last_offset))
            tick += 1.0
            while time.monotonic() < tick:
                poll()
                time.sleep(0.05)
        final = appended[-1][1] if appended else setup_end
        drain_deadline = time.monotonic() + max(60.0, 4.0 * seconds)
        while poll() < final and time.monotonic() < drain_deadline and query.isActive:
            time.sleep(0.1)
        drained = poll() >= final
        state_operators = (query.lastProgress or {}).get("stateOperators") or []
        error = query.exception()
    finally:
        query.stop()
    if error is not None:
        raise RuntimeError(f"the continuous controller failed: {error}")
    batches = [p for b, p in sorted(progress.items()) if b >= first_batch and _events(p, setup_end) > 0]
    trigger = [p["durationMs"].get("triggerExecution", 0) for p in batches]
    add = [p["durationMs"].get("addBatch", 0) for p in batches]
    ends = [(_progress_time(p) + p["durationMs"].get("triggerExecution", 0) / 1000, source_offset(p)) for p in batches]
    lags = []
    for at, last_offset in appended:
        done = [finish for finish, end in ends if end is not None and end >= last_offset]
        if done:
            lags.append(round((min(done) - at) * 1000, 1))
    covered = sum(_events(p, setup_end) for p in batches)
    busy = sum(trigger) / 1000
    out = {
        "rate_events_per_s": rate, "seconds": seconds, "trigger_interval_ms": trigger_ms, "shards": args.shards,
        "events_appended": rate * len(appended), "batches": len(batches), "drained": drained,
        "events_per_batch": {"p50": percentile([_events(p, setup_end) for p in batches], 50),
                             "max": max((_events(p, setup_end) for p in batches), default=None)},
        "trigger_execution_ms": {"p50": percentile(trigger, 50), "p99": percentile(trigger, 99),
                                 "max": max(trigger, default=None)},
        "add_batch_ms": {"p50": percentile(add, 50), "p99": percentile(add, 99), "max": max(add, default=None)},
        "end_to_end_lag_ms": {"p50": percentile(lags, 50), "p99": percentile(lags, 99),
                              "max": max(lags, default=None), "appends_seen": len(lags)},
        "processed_events_per_s": round(covered / busy) if busy else None,
        # spark_input_rows: what the source handed Spark, packed per task and shard (``spark.routing``), not log rows
        "per_batch": [{"batch": p["batchId"], "events": _events(p, setup_end), "spark_input_rows": p["numInputRows"],
                       "trigger_ms": p["durationMs"].get("triggerExecution"),
                       "add_batch_ms": p["durationMs"].get("addBatch")} for p in batches],
        "spark_state": [{"rows": s.get("numRowsTotal"), "memory_bytes": s.get("memoryUsedBytes"),
                         "custom": s.get("customMetrics", {})} for s in state_operators],
    }
    log(f"latency at {rate:,} events/s: {len(batches)} batches, triggerExecution p50 "
        f"{out['trigger_execution_ms']['p50']} ms p99 {out['trigger_execution_ms']['p99']} ms, "
        f"lag p50 {out['end_to_end_lag_ms']['p50']} ms, drained: {drained}")
    return out
