"""Measure where the time goes: decoding, ingest, the pure core and the Spark job, on one generated log.

    ./spark-submit.sh jobs/bench.py --events 1000000 --report bench-report.json

Everything is measured in one run on the same log, so the ratios between the stages mean something
even where absolute times on a shared machine are noisy. Prints the report and writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kraftlake import codec
from kraftlake.codec.writer import write_partition_dir
from kraftlake.config import add_common_arguments, config_from_args
from kraftlake.ingest import ingest_source
from kraftlake.runtime import open_warehouse
from kraftlake.shards import replay_log
from kraftlake.streaming import ControllerSettings, run
from kraftlake.workload import generate


def timed(label: str, report: dict, records: int, fn, nbytes: int | None = None):
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    entry = {"seconds": round(seconds, 3), "records": records, "records_per_s": round(records / seconds)}
    if nbytes is not None:
        entry["mb_per_s"] = round(nbytes / seconds / 1e6, 2)
    report[label] = entry
    print(f"[bench] {label}: {records:,} records in {seconds:.2f} s = {entry['records_per_s']:,} records/s"
          + (f", {entry['mb_per_s']} MB/s" if nbytes is not None else ""), file=sys.stderr, flush=True)
    return result


def decode_all(path: Path, full_history: bool = False) -> int:
    return sum(1 for item in codec.decode_partition_dir(path, full_history) if isinstance(item, dict))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--fixtures", default=str(Path(__file__).resolve().parent.parent.parent / "shared" /
                                                  "fixtures" / "kafka-logs"))
    parser.add_argument("--report", default="bench-report.json")
    parser.add_argument("--workdir", help="where the generated log and warehouse go (default: a temp dir)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kraftlake-bench-"))
    report: dict = {"events": args.events, "topics": args.topics, "partitions": args.topics * args.partitions_per_topic,
                    "brokers": args.brokers, "shards": args.shards}

    fixtures = Path(args.fixtures)
    for fixture in sorted(fixtures.glob("*/__cluster_metadata-0")) if fixtures.is_dir() else []:
        size = sum(f.stat().st_size for f in fixture.iterdir() if f.suffix == ".log")
        count = decode_all(fixture, full_history=True)
        timed(f"decode fixture {fixture.parent.name}", report, count,
              lambda f=fixture: decode_all(f, full_history=True), size)

    events = timed("generate", report, args.events, lambda: list(generate(
        args.events, brokers=args.brokers, topics=args.topics, partitions_per_topic=args.partitions_per_topic)))
    log_dir = work / "__cluster_metadata-0"
    shutil.rmtree(log_dir, ignore_errors=True)
    timed("encode (Kafka format)", report, len(events), lambda: write_partition_dir(log_dir, events, batch_records=200))
    size = sum(f.stat().st_size for f in log_dir.iterdir())
    report["log_bytes"] = size
    timed("decode", report, len(events), lambda: decode_all(log_dir), size)
    _, states = timed("core replay", report, len(events), lambda: replay_log(events, args.shards))
    report["core_state_bytes_per_shard"] = [len(s.to_bytes()) for s in states]
    states = events = None  # free them before the Spark stages

    warehouse_dir = work / "warehouse"
    shutil.rmtree(warehouse_dir, ignore_errors=True)
    warehouse = open_warehouse(config.with_overrides({"kraftlake.warehouse": str(warehouse_dir)}), "kraftlake-bench")
    timed("ingest into Delta", report, args.events, lambda: ingest_source(warehouse, str(log_dir), progress_every=30))
    spark = warehouse.spark
    scan = lambda: warehouse.read_df("metadata_log").selectExpr("sum(hash(*))").collect()
    timed("raw Delta scan (Spark)", report, args.events, scan)
    settings = ControllerSettings(shards=args.shards, checkpoint=str(work / "checkpoint"), once=True,
                                  max_records_per_batch=config.get_int("kraftlake.controller.max.records.per.batch"))
    timed("Spark replay (AvailableNow)", report, args.events, lambda: run(warehouse, settings, progress_every=30))
    report["ratio spark/core"] = round(report["Spark replay (AvailableNow)"]["records_per_s"]
                                       / report["core replay"]["records_per_s"], 3)
    report["ratio spark/raw scan"] = round(report["Spark replay (AvailableNow)"]["records_per_s"]
                                           / report["raw Delta scan (Spark)"]["records_per_s"], 3)
    report["spark_version"] = spark.version
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
