"""Measure where the time goes: one command, a JSON report and a PNG chart.

    ./spark-submit.sh jobs/bench.py --report bench-report.json --chart bench.png
    ./spark-submit.sh jobs/bench.py --quick              # everything at small sizes (a smoke test)
    ./spark-submit.sh jobs/bench.py --target --report target.json   # 10^7 events, 10^6 partitions

Sections of the report (docs/performance.md says what each number means):
- ``stages``: decoding, encoding, ingest, the pure core, the raw Delta scan and the Spark job in batch
  replay (AvailableNow), all on one generated log in one run, and their ratios;
- ``latency``: micro-batch durations (p50 / p99) and end-to-end lag of the continuous controller while
  events are appended to ``metadata_log`` at ``--rate`` events/s;
- ``state``: each shard's serialised state, in the core and in Spark's state store;
- ``failover``: a broker in every one of ``--failover-partitions`` partitions shuts down or its session
  expires: the controller's decision, replaying its records, and the whole shard step;
- ``scaling``: core replay time (a log creating the partitions, then as many changes), state size and
  failover time from 10^4 to 10^6 partitions, core
  throughput from 10^5 to 10^6 events (10^7 with ``--events-1e7``), each with its log-log slope;
- ``profile``: the core replay's hottest functions (cProfile), by cumulative and by own time.

Everything runs in one process on the same machine, so ratios between numbers mean something even
where absolute times on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import itertools
import json
import math
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from kraftlake import codec
from kraftlake.controller.cluster_control import ControllerState, expire_sessions, take_over
from kraftlake.codec.writer import write_partition_dir
from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.controller.dispatch import decide
from kraftlake.controller.decisions import Context
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.storage.ingest import ingest_source
from kraftlake.image.replay import replay
from kraftlake.cli.runtime import open_warehouse
from kraftlake.metadata.tables import metadata_log_schema
from kraftlake.controller.shards import ShardState, replay_log, routes, step
from kraftlake.spark.controller_query import ControllerSettings, run, start
from kraftlake.storage.tables import events_to_arrow
from kraftlake.sim.workload import failover_cluster, generate

# Sizes of a full run and of --quick (which must stay a few seconds of core time: a test runs it).
FULL = {"events": 1_000_000, "topics": 100, "partitions_per_topic": 100, "failover_partitions": 100_000,
        "scaling_partitions": [10_000, 100_000, 1_000_000],
        "scaling_events": [100_000, 1_000_000], "profile_events": 200_000, "rate": 20_000,
        "latency_seconds": 30, "trigger_ms": 500}
QUICK = {"events": 3_000, "topics": 10, "partitions_per_topic": 10, "failover_partitions": 2_000,
         "scaling_partitions": [200, 1_000, 5_000],
         "scaling_events": [2_000, 10_000], "profile_events": 2_000, "rate": 300,
         "latency_seconds": 2, "trigger_ms": 100}
LINEAR_SLOPE = 1.15  # a log-log slope up to this is "linear": the fits of noisy timings scatter by ~0.1


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def timed(label: str, report: dict, records: int, fn: Callable, nbytes: int | None = None):
    start_ = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start_
    entry = {"seconds": round(seconds, 3), "records": records, "records_per_s": round(records / seconds)}
    if nbytes is not None:
        entry["mb_per_s"] = round(nbytes / seconds / 1e6, 2)
    report[label] = entry
    log(f"{label}: {records:,} records in {seconds:.2f} s = {entry['records_per_s']:,} records/s"
        + (f", {entry['mb_per_s']} MB/s" if nbytes is not None else ""))
    return result


def decode_all(path: Path, full_history: bool = False) -> int:
    return sum(1 for item in codec.decode_partition_dir(path, full_history) if isinstance(item, dict))


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile by linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) over log(x): 1 is linear growth, 2 quadratic."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return None if sxx == 0 else round(sum((x - mx) * (y - my) for x, y in points) / sxx, 3)


def fit(xs: list[float], ys: list[float]) -> dict:
    slope = loglog_slope(xs, ys)
    verdict = None if slope is None else "linear" if slope <= LINEAR_SLOPE else "worse than linear"
    return {"loglog_slope": slope, "fit": verdict}


def chunks(items: Iterable[dict], size: int) -> Iterator[list[dict]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


# --- the core ------------------------------------------------------------------------------------

def core_replay_chunked(events: Iterable[dict], shards: int, chunk: int = 50_000) -> tuple[float, int, list[ShardState]]:
    """The shards' steps over the log in chunks of ``chunk`` events, as the streaming job runs them per
    micro-batch (state kept, outputs dropped). Only routing and the steps are timed, not generating the
    events, and the log is never held whole: memory stays that of the images."""
    states = [ShardState(ClusterImage()) for _ in range(shards)]
    seconds, count = 0.0, 0
    for batch in chunks(events, chunk):
        started = time.perf_counter()
        per_shard: list[list[dict]] = [[] for _ in range(shards)]
        for event in batch:
            for shard in routes(event, shards):
                per_shard[shard].append(event)
        for shard in range(shards):
            step(shard, shards, states[shard], per_shard[shard])
        seconds += time.perf_counter() - started
        count += len(batch)
    return seconds, count, states


def state_sizes(states: list[ShardState]) -> list[int]:
    return [len(s.to_bytes()) for s in states]


def build_image(events: Iterable[dict]) -> tuple[ClusterImage, dict]:
    """The image of a generated log, and its last event."""
    image = ClusterImage()
    last: dict = {}
    for last in events:
        result = replay(image, last)
        if result.rejected is not None:
            raise RuntimeError(f"generated record rejected: {result.rejected}")
    return image, last


def shutdown_request(image: ClusterImage, broker: int, offset: int, now_ms: int) -> dict:
    return {"offset": offset, "leader_epoch": 1, "timestamp": now_ms, "type": "BrokerHeartbeatRequest",
            "version": 1, "source": None, "position": None,
            "data": {"BrokerId": broker, "BrokerEpoch": image.brokers[broker].epoch, "CurrentMetadataOffset": offset,
                     "WantFence": False, "WantShutDown": True}}


def measure_failover(partitions: int, brokers: int, repeats: int, full_step: bool) -> dict:
    """Broker 1 is in every partition's ISR and leads a third of them. Timed: the controller's decision
    for its controlled shutdown (``BrokerHeartbeatRequest`` with ``WantShutDown``, through
    ``controller.decide``) and for its session expiring (``expire_sessions``), best and median of
    ``repeats``; replaying the decision's records into the image; and, with ``full_step``, the whole
    shard step over that request as the streaming job runs it (take-over, decision, replay, rows)."""
    broker = 1
    started = time.perf_counter()
    image, last = build_image(failover_cluster(partitions, brokers=brokers, broker=broker))
    build_s = time.perf_counter() - started
    now, offset = last["timestamp"] + 1000, last["offset"] + 1
    state = ControllerState()
    take_over(image, state, now)
    request = shutdown_request(image, broker, offset, now)
    ctx = Context(now_ms=now, offset=offset)
    decide_s, records = [], []
    for _ in range(repeats):
        fresh = copy.deepcopy(state)
        t = time.perf_counter()
        records = decide(image, fresh, request, ctx).records
        decide_s.append(time.perf_counter() - t)
    expiry_s = []
    timeout = 9000
    for _ in range(repeats):
        fresh = copy.deepcopy(state)
        for broker_id, session in fresh.sessions.items():
            session.contact_ms = now + timeout if broker_id != broker else now - 1
        expiry_ctx = Context(now_ms=now + timeout, offset=offset)
        t = time.perf_counter()
        expired = expire_sessions(image, fresh, expiry_ctx)
        expiry_s.append(time.perf_counter() - t)
    changed = sum(1 for r in records if r["type"] == "PartitionChangeRecord")
    led = sum(1 for p in image.iter_partitions() if p.leader == broker)
    t = time.perf_counter()
    for rec in records:
        replay(image, {**rec, "offset": offset, "leader_epoch": 1, "timestamp": now})
    apply_s = time.perf_counter() - t
    out = {"partitions": partitions, "brokers": brokers, "broker_led": led, "partition_changes": changed,
           "expiry_records": len(expired), "build_image_s": round(build_s, 3),
           "decide_controlled_shutdown_s": {"min": round(min(decide_s), 3),
                                            "median": round(statistics.median(decide_s), 3)},
           "decide_session_expiry_s": {"min": round(min(expiry_s), 3),
                                       "median": round(statistics.median(expiry_s), 3)},
           "replay_records_s": round(apply_s, 3)}
    if full_step:
        image = records = None
        gc.collect()
        image, last = build_image(failover_cluster(partitions, brokers=brokers, broker=broker))
        shard = ShardState(image, last_offset=last["offset"])
        t = time.perf_counter()
        rows = step(0, 1, shard, [request])
        out["shard_step_s"] = round(time.perf_counter() - t, 3)
        out["shard_step_rows"] = len(rows)
    log(f"failover over {partitions:,} partitions: decide {out['decide_controlled_shutdown_s']['min']:.3f} s "
        f"(controlled shutdown), {out['decide_session_expiry_s']['min']:.3f} s (session expiry), "
        f"replay {apply_s:.3f} s" + (f", shard step {out['shard_step_s']:.2f} s" if full_step else ""))
    return out


def profile_core(events: list[dict], shards: int, top: int = 15) -> dict:
    profiler = cProfile.Profile()
    profiler.enable()
    replay_log(events, shards)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        short = filename.split("/lib/", 1)[-1] if "/lib/kraftlake/" in filename else Path(filename).name
        rows.append({"function": f"{short}:{line}({name})" if line else name, "calls": ncalls,
                     "own_s": round(tottime, 3), "cumulative_s": round(cumtime, 3)})
    return {"events": len(events), "shards": shards, "total_s": round(stats.total_tt, 3),
            "by_cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:top],
            "by_own_time": sorted(rows, key=lambda r: -r["own_s"])[:top]}


def scaling(sizes: dict, args: argparse.Namespace) -> dict:
    out: dict = {"partitions": [], "events": []}
    ppt = args.partitions_per_topic
    for partitions in sizes["scaling_partitions"]:
        topics = max(1, partitions // ppt)
        # as many changes as partitions, so that the log grows with the cluster and the slope says how
        # the cost per event does
        total = 2 * args.brokers + topics + 2 * topics * ppt
        seconds, count, states = core_replay_chunked(
            generate(total, brokers=args.brokers, topics=topics, partitions_per_topic=ppt), args.shards)
        sizes_ = state_sizes(states)
        states = None
        gc.collect()
        failover = measure_failover(partitions, args.brokers, repeats=1, full_step=False)
        gc.collect()
        out["partitions"].append({"partitions": topics * ppt, "events": count, "replay_s": round(seconds, 3),
                                  "records_per_s": round(count / seconds), "state_bytes": sum(sizes_),
                                  "state_bytes_per_shard": sizes_,
                                  "failover_decide_s": failover["decide_controlled_shutdown_s"]["min"]})
        log(f"scaling: {topics * ppt:,} partitions, {count:,} events replayed in {seconds:.2f} s, "
            f"state {sum(sizes_):,} bytes")
    events_sizes = list(sizes["scaling_events"]) + ([10_000_000] if args.events_1e7 else [])
    for events in events_sizes:
        seconds, count, states = core_replay_chunked(
            generate(events, brokers=args.brokers, topics=args.topics, partitions_per_topic=ppt), args.shards)
        out["events"].append({"events": count, "partitions": args.topics * ppt, "replay_s": round(seconds, 3),
                              "records_per_s": round(count / seconds), "state_bytes": sum(state_sizes(states))})
        states = None
        gc.collect()
        log(f"scaling: {count:,} events over {args.topics * ppt:,} partitions in {seconds:.2f} s")
    rows = out["partitions"]
    xs = [r["partitions"] for r in rows]
    out["fits"] = {
        "replay_time_vs_partitions": fit(xs, [r["replay_s"] for r in rows]),
        "state_bytes_vs_partitions": fit(xs, [r["state_bytes"] for r in rows]),
        "failover_time_vs_partitions": fit(xs, [r["failover_decide_s"] for r in rows]),
        "replay_time_vs_events": fit([r["events"] for r in out["events"]], [r["replay_s"] for r in out["events"]]),
    }
    return out


# --- the continuous job --------------------------------------------------------------------------

def _progress_end(progress: dict) -> int | None:
    sources = progress.get("sources") or []
    end = sources[0].get("endOffset") if sources else None
    if isinstance(end, str):
        end = json.loads(end)
    return end.get("offset") if isinstance(end, dict) else None


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
        ends = [e for e in (_progress_end(p) for p in progress.values()) if e is not None]
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
    batches = [p for b, p in sorted(progress.items()) if b >= first_batch and p["numInputRows"] > 0]
    trigger = [p["durationMs"].get("triggerExecution", 0) for p in batches]
    add = [p["durationMs"].get("addBatch", 0) for p in batches]
    ends = [(_progress_time(p) + p["durationMs"].get("triggerExecution", 0) / 1000, _progress_end(p)) for p in batches]
    lags = []
    for at, last_offset in appended:
        done = [finish for finish, end in ends if end is not None and end >= last_offset]
        if done:
            lags.append(round((min(done) - at) * 1000, 1))
    rows = sum(p["numInputRows"] for p in batches)
    busy = sum(trigger) / 1000
    out = {
        "rate_events_per_s": rate, "seconds": seconds, "trigger_interval_ms": trigger_ms, "shards": args.shards,
        "events_appended": rate * len(appended), "batches": len(batches), "drained": drained,
        "rows_per_batch": {"p50": percentile([p["numInputRows"] for p in batches], 50),
                           "max": max((p["numInputRows"] for p in batches), default=None)},
        "trigger_execution_ms": {"p50": percentile(trigger, 50), "p99": percentile(trigger, 99),
                                 "max": max(trigger, default=None)},
        "add_batch_ms": {"p50": percentile(add, 50), "p99": percentile(add, 99), "max": max(add, default=None)},
        "end_to_end_lag_ms": {"p50": percentile(lags, 50), "p99": percentile(lags, 99),
                              "max": max(lags, default=None), "appends_seen": len(lags)},
        "processed_events_per_s": round(rows / busy) if busy else None,
        "per_batch": [{"batch": p["batchId"], "rows": p["numInputRows"],
                       "trigger_ms": p["durationMs"].get("triggerExecution"),
                       "add_batch_ms": p["durationMs"].get("addBatch")} for p in batches],
        "spark_state": [{"rows": s.get("numRowsTotal"), "memory_bytes": s.get("memoryUsedBytes"),
                         "custom": s.get("customMetrics", {})} for s in state_operators],
    }
    log(f"latency at {rate:,} events/s: {len(batches)} batches, triggerExecution p50 "
        f"{out['trigger_execution_ms']['p50']} ms p99 {out['trigger_execution_ms']['p99']} ms, "
        f"lag p50 {out['end_to_end_lag_ms']['p50']} ms, drained: {drained}")
    return out


# --- the chart -----------------------------------------------------------------------------------

def chart(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(f"kraftlake bench ({report['machine']}): {report['events']:,} events, "
                 f"{report['partitions']:,} partitions, {report['shards']} shards"
                 + (" [--quick]" if report.get("quick") else ""))

    ax = axes[0][0]
    stages = report["stages"]
    names = [n for n in ("decode", "ingest into Delta", "raw Delta scan (Spark)", "core replay",
                         "Spark replay (AvailableNow)") if n in stages]
    values = [stages[n]["records_per_s"] for n in names]
    bars = ax.barh(names, values, color=["#999999", "#999999", "#4c72b0", "#55a868", "#c44e52"][:len(names)])
    ax.bar_label(bars, labels=[f"{v:,}" for v in values], padding=3, fontsize=8)
    ax.set_xlabel("records/s")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:,.0f}k"))
    ax.set_title("throughput, one log, one run")
    ax.invert_yaxis()
    ax.margins(x=0.25)

    ax = axes[0][1]
    latency = report.get("latency") or {}
    per_batch = latency.get("per_batch") or []
    if per_batch:
        xs = range(len(per_batch))
        ax.plot(xs, [b["trigger_ms"] for b in per_batch], marker=".", label="triggerExecution")
        ax.plot(xs, [b["add_batch_ms"] for b in per_batch], marker=".", label="addBatch")
        for key, style in (("p50", ":"), ("p99", "--")):
            value = latency["trigger_execution_ms"][key]
            if value is not None:
                ax.axhline(value, linestyle=style, color="gray", label=f"{key} {value:,.0f} ms")
        ax.axhline(2000, color="red", linewidth=0.8, label="target p99 2 s")
        ax.legend(fontsize=8)
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("ms")
    ax.set_title(f"continuous mode at {latency.get('rate_events_per_s', 0):,} events/s")

    ax = axes[1][0]
    rows = report["scaling"]["partitions"]
    fits = report["scaling"]["fits"]
    xs = [r["partitions"] for r in rows]
    ax.loglog(xs, [r["replay_s"] for r in rows], marker="o",
              label=f"core replay s (slope {fits['replay_time_vs_partitions']['loglog_slope']})")
    ax.loglog(xs, [r["state_bytes"] / 1e6 for r in rows], marker="s",
              label=f"state MB (slope {fits['state_bytes_vs_partitions']['loglog_slope']})")
    ax.loglog(xs, [r["failover_decide_s"] for r in rows], marker="^",
              label=f"failover decide s (slope {fits['failover_time_vs_partitions']['loglog_slope']})")
    ax.axhline(1.0, color="red", linewidth=0.8, label="failover target 1 s")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("partitions")
    ax.set_title("scaling with partitions (core)")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    rows = report["scaling"]["events"]
    xs = [r["events"] for r in rows]
    ax.loglog(xs, [r["replay_s"] for r in rows], marker="o",
              label=f"core replay s (slope {fits['replay_time_vs_events']['loglog_slope']})")
    ax2 = ax.twinx()
    ax2.semilogx(xs, [r["records_per_s"] for r in rows], marker="s", color="#55a868", label="records/s")
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("records/s")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("events")
    ax.set_title("scaling with events (core)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper left")

    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- the run -------------------------------------------------------------------------------------

def write_log_streaming(log_dir: Path, events: Iterable[dict], segment_events: int = 2_000_000,
                        chunk: int = 100_000) -> tuple[int, int]:
    """A Kafka partition directory written chunk by chunk, rolling a segment every ``segment_events``
    (memory stays bounded by a chunk); (events, bytes)."""
    from kraftlake.codec.writer import encode_events

    log_dir.mkdir(parents=True, exist_ok=True)
    count = size = 0
    handle = None
    try:
        for part in chunks(events, chunk):
            if count % segment_events == 0:
                if handle is not None:
                    handle.close()
                handle = open(log_dir / f"{count:020d}.log", "wb")
            data = encode_events(part, first_offset=count, batch_records=200)
            handle.write(data)
            count, size = count + len(part), size + len(data)
    finally:
        if handle is not None:
            handle.close()
    return count, size


def measure_target(config, work: Path, args: argparse.Namespace) -> dict:
    """The issue's headline: a 10,000,000-event log of a 1,000,000-partition cluster replayed end to end
    by the Spark job (AvailableNow), against the raw Delta scan of the same log. Nothing holds the log in
    memory: it is generated into segments chunk by chunk, ingested, scanned and replayed."""
    events, topics, per_topic = args.target_events, args.target_partitions // 1000, 1000
    out: dict = {"events": events, "partitions": topics * per_topic, "shards": args.shards,
                 "max_records_per_batch": args.target_batch}
    log_dir = work / "target" / "__cluster_metadata-0"
    shutil.rmtree(work / "target", ignore_errors=True)
    started = time.perf_counter()
    count, size = write_log_streaming(log_dir, generate(events, brokers=args.brokers, topics=topics,
                                                        partitions_per_topic=per_topic))
    out["generate_and_encode_s"] = round(time.perf_counter() - started, 1)
    out["log_bytes"] = size
    log(f"target: {count:,} events, {size / 1e6:,.0f} MB in {out['generate_and_encode_s']} s")
    warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(work / "target" / "warehouse")}),
                               "kraftlake-bench-target")
    stages: dict = {}
    timed("ingest into Delta", stages, count, lambda: ingest_source(warehouse, str(log_dir), progress_every=60))
    scan = lambda: warehouse.read_df("metadata_log").selectExpr("sum(hash(*))").collect()
    scan()
    timed("raw Delta scan (Spark)", stages, count, scan)
    settings = ControllerSettings(shards=args.shards, checkpoint=str(work / "target" / "checkpoint"), once=True,
                                  max_records_per_batch=args.target_batch)
    timed("Spark replay (AvailableNow)", stages, count, lambda: run(warehouse, settings, progress_every=60))
    replay_s = stages["Spark replay (AvailableNow)"]["seconds"]
    out["stages"] = stages
    out["spark/raw scan"] = round(stages["Spark replay (AvailableNow)"]["records_per_s"]
                                  / stages["raw Delta scan (Spark)"]["records_per_s"], 3)
    out["replay_under_2_min"] = replay_s < 120
    out["partitions_rows"] = warehouse.read_arrow("partitions", columns=[]).num_rows
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="every section at small sizes (a smoke test)")
    parser.add_argument("--events", type=int, help=f"events of the stage log (default {FULL['events']:,})")
    parser.add_argument("--topics", type=int, help=f"default {FULL['topics']}")
    parser.add_argument("--partitions-per-topic", type=int, help=f"default {FULL['partitions_per_topic']}")
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rate", type=int, help=f"continuous mode input, events/s (default {FULL['rate']:,})")
    parser.add_argument("--latency-seconds", type=int, help=f"how long to feed it (default {FULL['latency_seconds']})")
    parser.add_argument("--trigger-ms", type=int, help=f"its trigger interval (default {FULL['trigger_ms']})")
    parser.add_argument("--failover-partitions", type=int, help=f"default {FULL['failover_partitions']:,}")
    parser.add_argument("--events-1e7", action="store_true", help="add 10,000,000 events to the scaling series")
    parser.add_argument("--skip-spark", action="store_true", help="core sections only (no ingest, scan, Spark)")
    parser.add_argument("--target", action="store_true",
                        help="only the issue's headline run: --target-events over --target-partitions, end to end")
    parser.add_argument("--target-events", type=int, default=10_000_000)
    parser.add_argument("--target-partitions", type=int, default=1_000_000, help="in topics of 1,000 partitions")
    parser.add_argument("--target-batch", type=int, default=1_000_000, help="max log rows per micro-batch")
    parser.add_argument("--fixtures", default=str(Path(__file__).resolve().parent.parent.parent / "shared" /
                                                  "fixtures" / "kafka-logs"))
    parser.add_argument("--report", default="bench-report.json")
    parser.add_argument("--chart", default="bench.png")
    parser.add_argument("--workdir", help="where the generated log and warehouses go (default: a temp dir)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    for key in ("events", "topics", "partitions_per_topic", "rate", "latency_seconds", "trigger_ms",
                "failover_partitions"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    args.events, args.topics, args.partitions_per_topic = sizes["events"], sizes["topics"], sizes["partitions_per_topic"]
    config = config_from_args(args)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kraftlake-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
                    "quick": args.quick, "events": args.events, "topics": args.topics,
                    "partitions": args.topics * args.partitions_per_topic, "brokers": args.brokers,
                    "shards": args.shards, "stages": {}}
    stages = report["stages"]
    if args.target:
        report = {"machine": report["machine"], "target": measure_target(config, work, args)}
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return 0

    fixtures = Path(args.fixtures)
    for fixture in sorted(fixtures.glob("*/__cluster_metadata-0")) if fixtures.is_dir() else []:
        size = sum(f.stat().st_size for f in fixture.iterdir() if f.suffix == ".log")
        count = decode_all(fixture, full_history=True)
        timed(f"decode fixture {fixture.parent.name}", stages, count,
              lambda f=fixture: decode_all(f, full_history=True), size)

    events = timed("generate", stages, args.events, lambda: list(generate(
        args.events, brokers=args.brokers, topics=args.topics, partitions_per_topic=args.partitions_per_topic)))
    log_dir = work / "__cluster_metadata-0"
    shutil.rmtree(log_dir, ignore_errors=True)
    timed("encode (Kafka format)", stages, len(events), lambda: write_partition_dir(log_dir, events, batch_records=200))
    size = sum(f.stat().st_size for f in log_dir.iterdir())
    report["log_bytes"] = size
    timed("decode", stages, len(events), lambda: decode_all(log_dir), size)
    _, states = timed("core replay", stages, len(events), lambda: replay_log(events, args.shards))
    core_sizes = state_sizes(states)
    report["state"] = {"core_bytes_per_shard": core_sizes, "core_bytes_total": sum(core_sizes)}
    states = None
    report["profile"] = profile_core(events[:sizes["profile_events"]], args.shards)
    events = None  # free them before the other stages
    gc.collect()
    log(f"profile: top by own time {report['profile']['by_own_time'][0]['function']}")

    report["failover"] = measure_failover(sizes["failover_partitions"], args.brokers, repeats=5, full_step=True)
    gc.collect()
    report["scaling"] = scaling(sizes, args)

    if not args.skip_spark:
        warehouse_dir = work / "warehouse"
        shutil.rmtree(warehouse_dir, ignore_errors=True)
        shutil.rmtree(work / "checkpoint", ignore_errors=True)
        shutil.rmtree(work / "latency-checkpoint", ignore_errors=True)
        warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(warehouse_dir)}),
                                   "kraftlake-bench")
        timed("ingest into Delta", stages, args.events,
              lambda: ingest_source(warehouse, str(log_dir), progress_every=30))
        scan = lambda: warehouse.read_df("metadata_log").selectExpr("sum(hash(*))").collect()
        # twice, the second timed: the first also pays for starting the Python data source's workers
        scan()
        timed("raw Delta scan (Spark)", stages, args.events, scan)
        settings = ControllerSettings(shards=args.shards, checkpoint=str(work / "checkpoint"), once=True,
                                      max_records_per_batch=config.get_int("kraftlake.controller.max.records.per.batch"))
        timed("Spark replay (AvailableNow)", stages, args.events, lambda: run(warehouse, settings, progress_every=30))
        spark_rate = stages["Spark replay (AvailableNow)"]["records_per_s"]
        report["ratios"] = {
            "spark/core": round(spark_rate / stages["core replay"]["records_per_s"], 3),
            "spark/raw scan": round(spark_rate / stages["raw Delta scan (Spark)"]["records_per_s"], 3),
            "core/raw scan": round(stages["core replay"]["records_per_s"]
                                   / stages["raw Delta scan (Spark)"]["records_per_s"], 3),
        }
        report["spark_version"] = warehouse.spark.version
        report["latency"] = measure_latency(config, work, args, sizes)
        report["state"]["spark_state_store"] = report["latency"]["spark_state"]

    Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    chart(report, args.chart)
    log(f"report: {args.report}, chart: {args.chart}")
    summary = {k: v for k, v in report.items() if k not in ("profile", "latency", "scaling")}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
