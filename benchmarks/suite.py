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
- ``profile``: the core replay's hottest functions (cProfile), by cumulative and by own time;
- ``target`` (``--target`` alone): the records stage (``--target-events`` over ``--target-partitions``, end to
  end) and the requests stage (``--target-requests`` of the soak's mix, the pure core against the Spark job);
- ``soak`` (``--soak`` alone): the continuous controller fed simulated cluster traffic for minutes, killed
  with SIGKILL at intervals, its tables checked against one replay by the core, its memory sampled;
- ``restart`` (``--restart`` alone): the continuous controller over ``--restart-partitions`` partitions killed
  with SIGKILL right after its first committed micro-batch, ``--restart-count`` times: from its process start
  to the Spark session, the controller query started and the first micro-batch committed (p50 / max);
- ``scale_out`` (``--scale-out`` alone, added to the ``--report`` file): ingest and replay of one log on a
  standalone cluster of one one-core worker, then two, and the replay's time split from Spark's event log.

Everything but the soak, the restart and the scale-out runs in one process on the same machine, so ratios
between numbers mean something even where absolute times on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator

from kraftlake import codec
from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.runtime import kafka_configs, meter, open_warehouse
from kraftlake.codec.writer import write_partition_dir
from kraftlake.metadata.config import Config
from kraftlake.metadata.progress import Meter
from kraftlake.sim.cluster import ClusterSimulator, SimulationOptions
from kraftlake.sim.cluster_traffic import write_requests
from kraftlake.sim.workload import generate
from kraftlake.spark.controller_query import ControllerSettings, run
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.ingest import ingest_source

from benchmarks.chart import chart
from benchmarks.continuous import measure_latency
from benchmarks.core import (core_replay_chunked, decode_all, measure_failover, profile_core, scaling,
                             simulated_requests, state_sizes)
from benchmarks.memory import PeakMemory, job_root, roles_of
from benchmarks.restart import measure_restart
from benchmarks.scale_out import measure_scale_out
from benchmarks.soak import measure_soak, replay_once, table_multisets
from benchmarks.stats import chunks, log, timed

# The pure core in one process: the shards' steps over the log in micro-batch sized chunks (what the Spark job
# runs, without Spark), outputs made but not folded into tables.
CORE = "core replay"
# ... and on one shard, every request decided once: the broadcast's cost is the difference
CORE_ONE_SHARD = "core replay, 1 shard"

# The generated logs of --target and --scale-out are of topics of this many partitions each.
PARTITIONS_PER_TOPIC = 1000

# Sizes of a full run and of --quick (which must stay a few seconds of core time: a test runs it).
FULL = {"events": 1_000_000, "topics": 100, "partitions_per_topic": 100, "failover_partitions": 100_000,
        "scaling_partitions": [10_000, 100_000, 1_000_000],
        "scaling_events": [100_000, 1_000_000], "profile_events": 200_000, "rate": 20_000,
        "latency_seconds": 30, "trigger_ms": 500, "target_requests": 10_000_000}
QUICK = {"events": 3_000, "topics": 10, "partitions_per_topic": 10, "failover_partitions": 2_000,
         "scaling_partitions": [200, 1_000, 5_000],
         "scaling_events": [2_000, 10_000], "profile_events": 2_000, "rate": 300,
         "latency_seconds": 2, "trigger_ms": 100, "target_requests": 3_000}


def write_log_streaming(log_dir: Path, events: Iterable[dict], segment_events: int = 2_000_000,
                        chunk: int = 100_000, meter: Meter | None = None) -> tuple[int, int]:
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
            if meter is not None:
                meter.update(count, f"{size / 1e6:,.0f} MB")
    finally:
        if handle is not None:
            handle.close()
    return count, size


def cluster_events(events: int, partitions: int, brokers: int) -> Iterator[dict]:
    """The generated log of ``--target`` and ``--scale-out``: ``events`` over ``partitions`` partitions in topics
    of ``PARTITIONS_PER_TOPIC`` (the parser accepts only whole topics, so the cluster has exactly as many)."""
    return generate(events, brokers=brokers, topics=partitions // PARTITIONS_PER_TOPIC,
                    partitions_per_topic=PARTITIONS_PER_TOPIC)


def write_cluster_log(config: Config, folder: Path, events: int, partitions: int, brokers: int) -> tuple[Path, int, int]:
    """``cluster_events`` written chunk by chunk into ``folder``/__cluster_metadata-0, ``folder`` emptied first;
    (the log's directory, events, bytes)."""
    shutil.rmtree(folder, ignore_errors=True)
    log_dir = folder / "__cluster_metadata-0"
    count, size = write_log_streaming(log_dir, cluster_events(events, partitions, brokers),
                                      meter=meter(config, "bench generate", "events", events))
    return log_dir, count, size


def core_stage(stages: dict, seconds: float, records: int) -> None:
    stages[CORE] = {"seconds": round(seconds, 3), "records": records, "records_per_s": round(records / seconds)}
    log(f"{CORE}: {records:,} records in {seconds:.2f} s = {stages[CORE]['records_per_s']:,} records/s")


def measure_target(config, work: Path, args: argparse.Namespace) -> dict:
    """The issue's headline: a 10,000,000-event log of a 1,000,000-partition cluster replayed end to end
    by the Spark job (AvailableNow), against the raw Delta scan of the same log and the pure core's steps
    over it in one process. Nothing holds the log in memory: it is generated into segments chunk by chunk,
    ingested, scanned and replayed; the core replays it as it is generated (generation not timed)."""
    events, partitions = args.target_events, args.target_partitions
    out: dict = {"events": events, "partitions": partitions, "shards": args.shards,
                 "max_records_per_batch": args.target_batch}
    started = time.perf_counter()
    log_dir, count, size = write_cluster_log(config, work / "target", events, partitions, args.brokers)
    out["generate_and_encode_s"] = round(time.perf_counter() - started, 1)
    out["log_bytes"] = size
    log(f"target: {count:,} events, {size / 1e6:,.0f} MB in {out['generate_and_encode_s']} s")
    warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(work / "target" / "warehouse")}),
                               "kraftlake-bench-target")
    stages: dict = {}
    timed("ingest into Delta", stages, count,
          lambda: ingest_source(warehouse, str(log_dir), meter=meter(config, "bench ingest")))
    scan = lambda: warehouse.read_df("metadata_log").selectExpr("sum(hash(*))").collect()
    scan()
    timed("raw Delta scan (Spark)", stages, count, scan)
    settings = ControllerSettings(shards=args.shards, checkpoint=str(work / "target" / "checkpoint"), once=True,
                                  max_records_per_batch=args.target_batch)
    me = os.getpid()
    root = job_root(me)
    with PeakMemory(lambda: roles_of(root, lambda pid, _: pid == me, proportional=True)) as memory:
        timed("Spark replay (AvailableNow)", stages, count,
              lambda: run(warehouse, settings, meter(config, "bench replay", "offsets")))
    out["peak_pss_bytes"] = memory.peak
    gc.collect()
    seconds, replayed, _ = core_replay_chunked(cluster_events(events, partitions, args.brokers), args.shards,
                                               chunk=args.target_batch,
                                               meter=meter(config, "bench core", "events", events))
    core_stage(stages, seconds, replayed)
    replay = stages["Spark replay (AvailableNow)"]
    out["stages"] = stages
    out["spark/raw scan"] = round(replay["records_per_s"] / stages["raw Delta scan (Spark)"]["records_per_s"], 3)
    out["spark/core"] = round(replay["records_per_s"] / stages[CORE]["records_per_s"], 3)
    out["replay_under_2_min"] = replay["seconds"] < 120
    out["partitions_rows"] = warehouse.read_arrow("partitions", columns=[]).num_rows
    return out


def core_requests(config: Config, count: int, options: SimulationOptions, kafka: dict, shards: int, batch: int,
                  name: str) -> dict:
    """The pure core's shard steps over ``count`` requests of the soak's mix in chunks of ``batch`` (generation
    not timed): wall and CPU seconds, and each chunk's rate (first, last and range: a chunk's rate follows the
    failovers it holds, which tells that from growth)."""
    per_chunk: list[tuple[int, float, float]] = []
    seconds, replayed, _ = core_replay_chunked(simulated_requests(count, options, kafka), shards, chunk=batch,
                                               meter=meter(config, f"bench {name} requests", "requests", count),
                                               per_chunk=per_chunk)
    rates = [n / s for n, s, _ in per_chunk]
    stage = {"shards": shards, "seconds": round(seconds, 3), "cpu_s": round(sum(c for *_, c in per_chunk), 3),
             "requests": replayed, "requests_per_s": round(replayed / seconds),
             "batch_requests_per_s": {"first": round(rates[0]), "last": round(rates[-1]),
                                      "min": round(min(rates)), "max": round(max(rates))}}
    log(f"requests, {name}: {replayed:,} in {seconds:.2f} s ({stage['cpu_s']:.2f} s CPU) = "
        f"{stage['requests_per_s']:,} requests/s")
    return stage


def measure_requests(config, work: Path, args: argparse.Namespace, count: int) -> dict:
    """The issue's second headline: ``count`` requests of the soak's mix (its simulated cluster: --soak-brokers
    brokers, --soak-topics topics of 10 partitions; nine in ten requests are heartbeats) decided by the
    pure core's shard steps in micro-batches of --requests-batch (default: what the job's own setting gives,
    ``kraftlake.controller.max.records.per.batch``) (generation not timed), and by the Spark job
    (AvailableNow, as ``jobs/controller.py --once``) over the same requests ingested into a warehouse; then
    the job's tables against one replay by the core (row multisets, ``benchmarks.soak``)."""
    options = SimulationOptions(brokers=args.soak_brokers, topics=args.soak_topics, partitions_per_topic=10)
    kafka = kafka_configs(config)
    batch = args.requests_batch or config.get_int("kraftlake.controller.max.records.per.batch", minimum=0) or count
    out: dict = {"requests": count, "brokers": options.brokers, "partitions": options.topics * 10,
                 "shards": args.shards, "max_records_per_batch": batch}
    stages: dict = {CORE: core_requests(config, count, options, kafka, args.shards, batch, CORE)}
    if args.shards > 1:
        # what the shards' broadcast costs: each shard passes over every heartbeat and AlterPartition it does not
        # own, and every request is decided once on one (docs/performance.md, "What the shards' broadcast costs")
        stages[CORE_ONE_SHARD] = core_requests(config, count, options, kafka, 1, batch, CORE_ONE_SHARD)
        out["core_cpu_shards/one_shard"] = round(stages[CORE]["cpu_s"] / stages[CORE_ONE_SHARD]["cpu_s"], 3)
    root = work / "requests"
    shutil.rmtree(root, ignore_errors=True)
    written = write_requests(DeltaRsTables(str(root / "warehouse")), ClusterSimulator(options, kafka), count,
                             "requests", 100_000)
    out["by_type"] = dict(written.by_type.most_common())
    warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(root / "warehouse")}),
                               "kraftlake-bench-requests")
    settings = ControllerSettings(shards=args.shards, checkpoint=str(root / "checkpoint"), once=True,
                                  max_records_per_batch=batch, kafka_config=kafka)
    timed("Spark replay (AvailableNow)", stages, count, lambda: run(warehouse, settings, meter(config, "bench replay",
                                                                                                "offsets")))
    spark = stages["Spark replay (AvailableNow)"]
    spark["requests"], spark["requests_per_s"] = spark.pop("records"), spark.pop("records_per_s")
    out["stages"] = stages
    out["spark/core"] = round(spark["requests_per_s"] / stages[CORE]["requests_per_s"], 3)
    tables = DeltaRsTables(str(root / "warehouse"))
    expected, _ = replay_once(tables, args.shards, kafka)
    out["tables_equal_core"] = table_multisets(tables) == expected
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
    parser.add_argument("--target-events", type=int, default=10_000_000, help="records stage (0: skip it)")
    parser.add_argument("--target-requests", type=int,
                        help=f"requests stage, of the soak's mix (--soak-brokers, --soak-topics, --requests-batch; "
                             f"default {FULL['target_requests']:,}, --quick {QUICK['target_requests']:,}; 0: skip it)")
    parser.add_argument("--requests-batch", type=int,
                        help="the requests stage's micro-batches (default: the job's "
                             "kraftlake.controller.max.records.per.batch)")
    parser.add_argument("--target-partitions", type=int, default=1_000_000,
                        help="a multiple of 1,000 (topics of 1,000 partitions)")
    parser.add_argument("--target-batch", type=int, default=1_000_000, help="max log rows per micro-batch")
    parser.add_argument("--soak", action="store_true",
                        help="only the soak run: the continuous controller under steady traffic, killed at intervals")
    parser.add_argument("--soak-minutes", type=float, default=10.0, help="how long to feed it")
    parser.add_argument("--soak-rate", type=int, default=5_000, help="simulated requests per second")
    parser.add_argument("--soak-kill-every", type=int, default=60, help="SIGKILL every this many seconds (0: never)")
    parser.add_argument("--soak-brokers", type=int, default=50, help="brokers of the simulated cluster")
    parser.add_argument("--soak-topics", type=int, default=200, help="its topics (10 partitions each)")
    parser.add_argument("--soak-batch", type=int, default=50_000,
                        help="the soaked controller's kraftlake.controller.max.records.per.batch")
    parser.add_argument("--soak-driver-memory", default="2g", help="the soaked controller's --driver-memory")
    parser.add_argument("--soak-native-memory", action="store_true",
                        help="start the controller's JVM with native memory tracking (-XX:NativeMemoryTracking="
                             "summary, in JAVA_TOOL_OPTIONS) and report its committed memory by category every "
                             "minute (jcmd): what the JVM's resident size grows by")
    parser.add_argument("--soak-standby", action="store_true",
                        help="keep a standby controller (jobs/controller.py --standby) beside the soaked one: a kill "
                             "leaves it to take over, and restart_s is timed from each kill")
    parser.add_argument("--soak-prepare", action="store_true",
                        help="make the cluster before the soak begins: ingest requests until every topic is created and "
                             "replay them once (jobs/controller.py --once); for --soak-topics in the thousands")
    parser.add_argument("--restart", action="store_true",
                        help="only the restart run: the continuous controller killed right after its first micro-batch, "
                             "started again (uses --soak-brokers, --soak-batch, --soak-driver-memory)")
    parser.add_argument("--restart-count", type=int, default=5, help="restarts after a SIGKILL to time")
    parser.add_argument("--restart-partitions", type=int, default=100_000, help="partitions of the warehouse")
    parser.add_argument("--restart-rows", type=int, default=1_000, help="requests appended before each start")
    parser.add_argument("--restart-standby", action="store_true",
                        help="with --restart: a standby waits behind the running controller and takes over at its "
                             "SIGKILL; times from the kill to the standby's first commit")
    parser.add_argument("--scale-out", action="store_true",
                        help="only the scale-out run: ingest and replay on a standalone cluster of 1, then 2 one-core "
                             "workers; adds \"scale_out\" to --report, keeping what it holds")
    parser.add_argument("--scale-out-events", type=int, default=2_000_000, help="events of its log")
    parser.add_argument("--scale-out-partitions", type=int, default=200_000,
                        help="a multiple of 1,000 (topics of 1,000 partitions)")
    parser.add_argument("--fixtures", default=str(Path(__file__).resolve().parent.parent.parent / "shared" /
                                                  "fixtures" / "kafka-logs"))
    parser.add_argument("--report", default="bench-report.json")
    parser.add_argument("--chart", default="bench.png")
    parser.add_argument("--workdir", help="where the generated log and warehouses go (default: a temp dir)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.scale_out and args.scale_out_events < 1:
        parser.error(f"--scale-out-events must be at least 1, not {args.scale_out_events}")
    for flag, used, partitions in (("--target-partitions", args.target and args.target_events, args.target_partitions),
                                   ("--scale-out-partitions", args.scale_out, args.scale_out_partitions)):
        if used and (partitions < PARTITIONS_PER_TOPIC or partitions % PARTITIONS_PER_TOPIC):
            parser.error(f"{flag} must be a positive multiple of {PARTITIONS_PER_TOPIC:,} (whole topics of "
                         f"{PARTITIONS_PER_TOPIC:,} partitions), not {partitions}")
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
    if args.soak:
        report = {"machine": report["machine"], "soak": measure_soak(config, work, args)}
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        summary = {k: v for k, v in report["soak"].items() if not k.endswith("_samples")}
        print(json.dumps(summary, indent=2))
        return 0 if report["soak"]["drained"] and report["soak"]["tables_equal_one_shot_replay"] else 1
    if args.restart:
        report = {"machine": report["machine"], "restart": measure_restart(config, work, args)}
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return 0
    if args.scale_out:
        log_dir, count, size = write_cluster_log(config, work / "scale-out", args.scale_out_events,
                                                 args.scale_out_partitions, args.brokers)
        log(f"scale-out: {count:,} events, {size / 1e6:,.0f} MB")
        path = Path(args.report)
        report = json.loads(path.read_text()) if path.exists() else {"machine": report["machine"]}
        report["scale_out"] = {"events": count, "partitions": args.scale_out_partitions, "shards": args.shards,
                               **measure_scale_out(work, log_dir, args)}
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report["scale_out"], indent=2))
        return 0
    if args.target:
        requests = sizes["target_requests"] if args.target_requests is None else args.target_requests
        report = {"machine": report["machine"]}
        if args.target_events:
            report["target"] = measure_target(config, work, args)
        if requests:
            report["requests"] = measure_requests(config, work, args, requests)
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return 0

    fixtures = Path(args.fixtures)
    for fixture in sorted(fixtures.glob("*/__cluster_metadata-0")) if fixtures.is_dir() else []:
        size = sum(f.stat().st_size for f in fixture.iterdir() if f.suffix == ".log")
        count = decode_all(fixture, codec.FULL_HISTORY)
        timed(f"decode fixture {fixture.parent.name}", stages, count,
              lambda f=fixture: decode_all(f, codec.FULL_HISTORY), size)

    events = timed("generate", stages, args.events, lambda: list(generate(
        args.events, brokers=args.brokers, topics=args.topics, partitions_per_topic=args.partitions_per_topic)))
    log_dir = work / "__cluster_metadata-0"
    shutil.rmtree(log_dir, ignore_errors=True)
    timed("encode (Kafka format)", stages, len(events), lambda: write_partition_dir(log_dir, events, batch_records=200))
    size = sum(f.stat().st_size for f in log_dir.iterdir())
    report["log_bytes"] = size
    timed("decode", stages, len(events), lambda: decode_all(log_dir), size)
    seconds, _, states = core_replay_chunked(events, args.shards,
                                             chunk=config.get_int("kraftlake.controller.max.records.per.batch"))
    core_stage(stages, seconds, len(events))
    core_sizes = state_sizes(states)
    report["state"] = {"core_bytes_per_shard": core_sizes, "core_bytes_total": sum(core_sizes)}
    states = None
    report["profile"] = profile_core(events[:sizes["profile_events"]], args.shards)
    events = None  # free them before the other stages
    gc.collect()
    log(f"profile: top by own time {report['profile']['by_own_time'][0]['function']}")

    report["failover"] = measure_failover(sizes["failover_partitions"], args.brokers, repeats=5, full_step=True)
    gc.collect()
    report["scaling"] = scaling(sizes, args, lambda label, total: meter(config, label, "events", total))

    if not args.skip_spark:
        warehouse_dir = work / "warehouse"
        shutil.rmtree(warehouse_dir, ignore_errors=True)
        shutil.rmtree(work / "checkpoint", ignore_errors=True)
        shutil.rmtree(work / "latency-checkpoint", ignore_errors=True)
        warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(warehouse_dir)}),
                                   "kraftlake-bench")
        timed("ingest into Delta", stages, args.events,
              lambda: ingest_source(warehouse, str(log_dir), meter=meter(config, "bench ingest")))
        scan = lambda: warehouse.read_df("metadata_log").selectExpr("sum(hash(*))").collect()
        # twice, the second timed: the first also pays for starting the Python data source's workers
        scan()
        timed("raw Delta scan (Spark)", stages, args.events, scan)
        settings = ControllerSettings(shards=args.shards, checkpoint=str(work / "checkpoint"), once=True,
                                      max_records_per_batch=config.get_int("kraftlake.controller.max.records.per.batch"))
        timed("Spark replay (AvailableNow)", stages, args.events,
              lambda: run(warehouse, settings, meter(config, "bench replay", "offsets")))
        spark_rate = stages["Spark replay (AvailableNow)"]["records_per_s"]
        report["ratios"] = {
            "spark/core": round(spark_rate / stages[CORE]["records_per_s"], 3),
            "spark/raw scan": round(spark_rate / stages["raw Delta scan (Spark)"]["records_per_s"], 3),
            "core/raw scan": round(stages[CORE]["records_per_s"]
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
