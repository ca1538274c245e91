"""The restart: how long a controller killed with SIGKILL takes, started again, to commit its first micro-batch.

    ./spark-submit.sh jobs/bench.py --restart --restart-count 5 --restart-partitions 100000

A warehouse of the soak's simulated cluster (``--soak-brokers`` brokers, ``--restart-partitions`` in topics of
10) is fed ``--restart-rows`` requests at a time (``sim.cluster_traffic.write_requests``). Once every topic is
created, the controller replays what is there (``jobs/controller.py --once``, as a process). Then, for each
further chunk, the continuous controller is started as the soak starts it (``soak.Controller``) and killed
with SIGKILL as soon as its first micro-batch is committed (its checkpoint's ``commits`` file). Each start
is split where the job says so on stderr (``Spark session ready``, ``controller query started``) and at the commit,
all timed from the moment the process was started. The first continuous start follows a clean exit, not a
kill: it is reported apart.

With ``--restart-standby`` no process is started after the kill: a standby (``jobs/controller.py
--standby``) waits behind the running controller (``STANDBY_SETTLE_S`` at the least), which is killed
with SIGKILL once the next chunk is written; the standby's takeover is timed from the kill to its first
committed micro-batch (split where it says it took the lease over and started its queries), then a new
standby is started behind it. Every controller then triggers once a day
(``kraftlake.controller.trigger.interval.ms``): it commits its first micro-batch at once and leaves the
next chunk to the one taking over.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from kraftlake.cli.runtime import kafka_configs
from kraftlake.sim.cluster import ClusterSimulator, SimulationOptions
from kraftlake.sim.cluster_traffic import Written, write_requests
from kraftlake.storage import DeltaRsTables

from benchmarks.soak import CONTROLLER_JOB, REPO, Controller, committed_batch, replayed_once_created
from benchmarks.stats import log, percentile

POLL_S = 0.05
# what the continuous controller says on stderr as it starts (``cli.controller``, ``controller_query.run``):
# ``queries_s``: its controller query started (the quorum query follows that query's first micro-batch)
QUERY_STARTED = "] controller query started"
MARKS = {"session_s": "] Spark session ready", "queries_s": QUERY_STARTED}
# ... and a standby, once it waits and once the lease is free
WAITING = "] standby: waiting for the controller lease"
TAKEOVER_MARKS = {"lease_s": "] standby: took the controller lease over", "queries_s": QUERY_STARTED}
# what each start / takeover reports: its marks' times, then its first commit's
START_KEYS, TAKEOVER_KEYS = (*MARKS, "first_batch_s"), (*TAKEOVER_MARKS, "first_batch_s")
TIMEOUT_S = 600.0
ONCE_A_DAY_MS = 86_400_000  # a processing-time trigger fires at multiples of its interval since the epoch
# How long a standby waits before the kill at the least: one in service waits for hours. Past Spark's one
# minute after which idle Python workers are stopped, so that none started with the session is left.
STANDBY_SETTLE_S = 70.0


def _seen(log_path: Path, since: int, found: dict[str, float], started: float,
          marks: dict[str, str] = MARKS) -> None:
    """Times (from ``started``) of the lines of ``marks`` that have appeared in the log after byte ``since``."""
    with log_path.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode(errors="replace")
    now = time.monotonic() - started
    for key, mark in marks.items():
        if key not in found and mark in text:
            found[key] = now


def _until_committed(controller: Controller, checkpoint: Path, before: int, since: int, found: dict[str, float],
                     started: float, marks: dict[str, str]) -> None:
    """Wait for a micro-batch after ``before`` in the checkpoint, noting ``marks`` as they appear; the time
    (from ``started``) of the commit lands in ``found["first_batch_s"]``."""
    while committed_batch(checkpoint) <= before:
        ended = controller.process.poll() is not None
        if ended or time.monotonic() - started > TIMEOUT_S:
            if not ended:
                controller.kill()
            raise RuntimeError(f"the controller committed no micro-batch within {TIMEOUT_S:.0f} s "
                               f"(exit code {controller.process.returncode}); see {controller.log_path}")
        _seen(controller.log_path, since, found, started, marks)
        time.sleep(POLL_S)
    found["first_batch_s"] = time.monotonic() - started


def one_start(controller: Controller, checkpoint: Path) -> dict[str, float]:
    """Start the controller, wait for its first committed micro-batch, kill it: the times from its start."""
    before = committed_batch(checkpoint)
    since = controller.log_path.stat().st_size if controller.log_path.exists() else 0
    controller.start()
    started = controller.starts[-1]
    found: dict[str, float] = {}
    _until_committed(controller, checkpoint, before, since, found, started, MARKS)
    controller.kill()
    _seen(controller.log_path, since, found, started)
    return {key: round(found[key], 2) for key in START_KEYS if key in found}


def start_standby(command: list[str], log_path: Path) -> Controller:
    """A standby controller, ``STANDBY_SETTLE_S`` after it said it waits for the lease (its session up)."""
    standby = Controller([*command, "--standby"], log_path)
    standby.start()
    while WAITING not in log_path.read_text(errors="replace"):
        if standby.process.poll() is not None or time.monotonic() - standby.starts[-1] > TIMEOUT_S:
            if standby.process.poll() is None:
                standby.kill()
            raise RuntimeError(f"the standby never waited for the lease (exit code {standby.process.returncode}); "
                               f"see {log_path}")
        time.sleep(POLL_S)
    time.sleep(STANDBY_SETTLE_S)
    return standby


def one_takeover(active: Controller, standby: Controller, checkpoint: Path) -> dict[str, float]:
    """SIGKILL ``active``; the times from the kill to ``standby`` taking the lease over, starting its queries
    and committing its first micro-batch."""
    before = committed_batch(checkpoint)
    since = standby.log_path.stat().st_size
    killed = time.monotonic()
    active.kill()
    found: dict[str, float] = {}
    _until_committed(standby, checkpoint, before, since, found, killed, TAKEOVER_MARKS)
    _seen(standby.log_path, since, found, killed, TAKEOVER_MARKS)
    return {key: round(found[key], 2) for key in TAKEOVER_KEYS if key in found}


def measure_restart(config: Any, work: Path, args: Any) -> dict:
    partitions, chunk, count = args.restart_partitions, args.restart_rows, args.restart_count
    root = work / "restart-warehouse"
    shutil.rmtree(root, ignore_errors=True)
    tables = DeltaRsTables(str(root))
    checkpoint = root / "_checkpoints" / "controller"
    options = SimulationOptions(brokers=args.soak_brokers, topics=max(1, partitions // 10), partitions_per_topic=10)
    simulator = ClusterSimulator(options, kafka_configs(config))
    overrides = [f"kraftlake.controller.max.records.per.batch={args.soak_batch}", *args.override]
    if args.restart_standby:
        # timed between triggers a day apart, the time bound would only ever see late micro-batches: the row cap alone
        overrides += [f"kraftlake.controller.trigger.interval.ms={ONCE_A_DAY_MS}", "kraftlake.controller.max.batch.ms=0"]
    command = [str(REPO / "spark-submit.sh"), "--driver-memory", args.soak_driver_memory,
               str(REPO / CONTROLLER_JOB), "--warehouse", str(root), "--shards", str(args.shards),
               *sum((["--override", o] for o in overrides), [])]
    controller = Controller(command, work / "restart-controller.log")
    replay = Controller(command + ["--once"], work / "restart-controller.log")
    starts: list[dict[str, float]] = []
    prepared: dict[str, Any] = {}
    lives: list[Controller] = []  # with --restart-standby: each controller started, the last one a standby

    class Done(Exception):
        """Every start measured: no more requests wanted."""

    def on_chunk(written: Written) -> None:
        if not prepared:
            prepared.update(replayed_once_created(simulator, replay, written, "restart") or {})
            return
        if args.restart_standby:
            standby_chunk()
            return
        starts.append(one_start(controller, checkpoint))
        log(f"restart {len(starts) - 1}: {starts[-1]}")
        if len(starts) > count:
            raise Done

    def standby_chunk() -> None:
        """The running controller killed and the standby's takeover timed, then a new standby behind it; the
        first time, the first controller started (its first micro-batch the chunk) with its standby."""
        if lives:
            starts.append(one_takeover(lives[-2], lives[-1], checkpoint))
            log(f"takeover {len(starts)}: {starts[-1]}")
            if len(starts) >= count:
                raise Done
        else:
            lives.append(controller)
            controller.start()
            _until_committed(controller, checkpoint, committed_batch(checkpoint), 0, {}, controller.starts[-1], {})
        lives.append(start_standby(command, work / f"restart-standby-{len(lives)}.log"))

    loads = [os.getloadavg()]
    try:  # as many requests as it takes: the simulator makes them as they are read
        write_requests(tables, simulator, 1 << 40, "restart", chunk, on_chunk=on_chunk)
    except Done:
        pass
    finally:
        for life in lives:
            if life.process.poll() is None:
                life.kill()
    loads.append(os.getloadavg())
    # every takeover follows a SIGKILL; of the restarts, the first follows the replay's clean exit
    after_kill = starts if args.restart_standby else starts[1:count + 1]
    keys = TAKEOVER_KEYS if args.restart_standby else START_KEYS
    summary = {key: {"p50": round(percentile([s[key] for s in after_kill], 50), 2),
                     "max": max(s[key] for s in after_kill)}
               for key in keys if all(key in s for s in after_kill)}
    report = {"partitions": options.topics * options.partitions_per_topic, "brokers": options.brokers,
              "shards": args.shards, "requests_per_restart": chunk, "max_records_per_batch": args.soak_batch,
              "driver_memory": args.soak_driver_memory, "prepared": prepared, "split_s": summary,
              "after_sigkill": after_kill, "load_average": [[round(x, 2) for x in load] for load in loads]}
    if args.restart_standby:
        return {**report, "standby": True, "takeover_s": summary.get("first_batch_s")}
    return {**report, "restart_s": summary.get("first_batch_s"), "after_clean_stop": starts[0]}


__all__ = ["measure_restart", "one_start", "one_takeover"]
