"""Scale-out: the same ingest and replay with one one-core worker and with two, and where the replay's time goes.

    ./spark-submit.sh jobs/bench.py --scale-out    # 2,000,000 events of 200,000 partitions: 1/5 of --target

For each size of cluster (a standalone master and ``workers`` one-core workers on 127.0.0.1, from the pinned
pyspark: ``cluster.SparkCluster``), the log is ingested into a fresh warehouse and replayed by
``jobs/controller.py --once``, both submitted with ``./spark-submit.sh --master spark://...`` as a user
would, and timed from submission to exit. Ingest decodes the log's records in Spark's tasks on the
executors (``kraftlake.ingest.decoders=spark``); its header pass, sequencer and commit stay in the driver.
Both write Spark's event log, from which each run is split into the time before Spark's first job, the
time some job was running, and the time the driver worked alone between jobs (the sink's Delta writes,
planning, commits; ingest's header pass and commit), with each executor's task seconds: the part of a run
that more executors cannot shorten. The driver's CPU seconds (its JVM and its Python, both children of the
submission) are measured for each run as well.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
from pathlib import Path
from typing import Any, Iterator

from benchmarks.cluster import SparkCluster
from benchmarks.stats import log

WORKERS = (1, 2)
CONTROLLER_JOB = "kraftlake_controller"  # the controller query's name, in its jobs' descriptions


def _events(folder: Path) -> Iterator[dict]:
    """Spark's event log of the one application that wrote into ``folder`` (rolled into several files or not)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus")))
    for path in files:
        with path.open() as handle:
            for line in handle:
                yield json.loads(line)


def _union(intervals: list[tuple[int, int]]) -> int:
    """Milliseconds covered by at least one of ``intervals``."""
    total, reach = 0, None
    for begin, end in sorted(intervals):
        if reach is None or begin > reach:
            total, reach = total + end - begin, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def split_of(folder: Path) -> dict:
    """A run's seconds from its event log: before the first job, covered by jobs, the driver alone; tasks per
    executor; the first controller micro-batch's job."""
    started = ended = None
    jobs: dict[int, list] = {}
    tasks: dict[str, float] = {}
    for event in _events(folder):
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            started = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            ended = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            name = event.get("Properties", {}).get("spark.job.description", "")
            jobs[event["Job ID"]] = [event["Submission Time"], None, CONTROLLER_JOB in name]
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]][1] = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            info = event["Task Info"]
            executor = info["Executor ID"]
            tasks[executor] = tasks.get(executor, 0.0) + (info["Finish Time"] - info["Launch Time"]) / 1000
    done = [(begin, end, controller) for begin, end, controller in jobs.values() if end is not None]
    if started is None or ended is None or not done:
        raise RuntimeError(f"the event log in {folder} holds no finished application with a job")
    covered = _union([(begin, end) for begin, end, _ in done])
    first_job = min(begin for begin, _, _ in done)
    batches = sorted((begin, end) for begin, end, controller in done if controller)
    return {"application_s": round((ended - started) / 1000, 1),
            "before_first_job_s": round((first_job - started) / 1000, 1),
            "jobs_s": round(covered / 1000, 1),
            "driver_alone_s": round((ended - first_job - covered) / 1000, 1),
            "first_micro_batch_job_s": round((batches[0][1] - batches[0][0]) / 1000, 1) if batches else None,
            "controller_jobs": len(batches),
            "task_s_by_executor": {k: round(v, 1) for k, v in sorted(tasks.items())}}


def _last_line(stdout: str) -> str:
    """What a job said last (its summary), or nothing."""
    return (stdout.strip().splitlines() or [""])[-1]


def _submit(cluster: SparkCluster, folder: Path, name: str, job: str, *args: str) -> tuple[str, float, dict]:
    """``job`` submitted to ``cluster`` writing its event log into ``folder/<name>-events``: (its stdout, seconds
    from submission to exit, its split (``split_of``) with the driver's CPU seconds)."""
    events = folder / f"{name}-events"
    events.mkdir()
    conf = ("spark.eventLog.enabled=true", f"spark.eventLog.dir={events}", "spark.eventLog.compress=false")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    stdout, seconds = cluster.submit(job, *args, err=folder / f"{name}.err", conf=conf)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return stdout, seconds, {**split_of(events), "driver_cpu_s": round(cpu, 1)}


def measure_scale_out(work: Path, log_dir: Path, args: Any) -> dict:
    """Ingest and replay of ``log_dir`` on clusters of 1 and 2 one-core workers (``WORKERS``)."""
    import pyspark

    # under spark-submit, pyspark is imported from a zip inside SPARK_HOME, which the launcher sets
    spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    out: dict = {"ingest": {}, "replay": {}, "ingest_split": {}, "replay_split": {}}
    overrides = sum((["--override", o] for o in args.override), [])
    for workers in WORKERS:
        folder = work / f"scale-out-{workers}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        warehouse = str(folder / "warehouse")
        cluster = SparkCluster(spark_home, folder, workers).start()
        try:
            for stage, job, job_args in (
                    ("ingest", "ingest.py", ["--override", "kraftlake.ingest.decoders=spark", *overrides, str(log_dir)]),
                    ("replay", "controller.py", ["--once", "--shards", str(args.shards), *overrides])):
                stdout, seconds, split = _submit(cluster, folder, stage, job, "--warehouse", warehouse, *job_args)
                out[stage][f"workers_{workers}_s"] = round(seconds, 1)
                out[f"{stage}_split"][f"workers_{workers}"] = split
                log(f"scale-out: {stage}, {workers} worker(s): {seconds:.1f} s, driver CPU {split['driver_cpu_s']} s, "
                    f"tasks {split['task_s_by_executor']} ({_last_line(stdout)})")
        finally:
            cluster.stop()
    for stage in ("ingest", "replay"):
        times = out[stage]
        times["speedup"] = round(times["workers_1_s"] / times["workers_2_s"], 2)
    out["ingest"]["decoded_by"] = "Spark tasks on the executors (kraftlake.ingest.decoders=spark); the header " \
                                  "pass, sequencer and commit in the driver"
    return out


__all__ = ["measure_scale_out", "split_of"]
