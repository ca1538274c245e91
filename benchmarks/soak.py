"""The soak run: the continuous controller for minutes on end, fed simulated cluster traffic at a steady
rate and killed with SIGKILL at a fixed interval; then its tables against a one-shot replay by the core.

    ./spark-submit.sh jobs/bench.py --soak --soak-minutes 10 --soak-rate 5000 --soak-kill-every 60

- The feeder (this process) generates the simulated cluster's requests (``sim.cluster``) and ingests them
  through ``sim.cluster_traffic.write_requests``, one JSON lines file of ``rate`` requests per second.
- The controller is ``./spark-submit.sh --driver-memory M jobs/controller.py`` without ``--once``, in a
  process group of its own; every ``kill_every`` seconds the whole group gets SIGKILL and a new
  controller starts at once (its lease is taken over at once: the holder on this host is gone). One that
  ends on its own is started again too, and counted as a crash.
- Every few seconds the resident memory of the controller's processes is sampled, by role: the driver's
  JVM, the driver's Python, Spark's Python workers (everything else the controller started); with
  ``--soak-native-memory``, every minute the JVM's committed memory by category too (``jcmd``).
- When the feeding time is up, the last controller is left to catch up with the log, then stopped.
- Check: the pure core replays the whole log once (in chunks, its state carried in memory); every table
  the controller writes must hold the same rows (compared as multisets of row hashes, plus the count).

The machine may be shared: the report records the load average beside the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kraftlake.cli.runtime import kafka_configs
from kraftlake.codec.events import json_bytes
from kraftlake.controller.shards import ShardState, expand, leader_imbalance, merged_responses, routed, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.metadata.tables import table_arrow_schema, table_keys, tables_of
from kraftlake.sim.cluster import ClusterSimulator, SimulationOptions
from kraftlake.sim.cluster_traffic import Written, write_requests
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.deltars import dataset, read_range
from kraftlake.storage.tables import controller_log_schema, controller_log_to_arrow, rows_to_arrow, rows_to_events

from benchmarks.cluster import launcher_free_environ
from benchmarks.memory import NATIVE_MEMORY_TRACKING, all_processes, family, jvm_of, native_memory, role, roles_of
from benchmarks.stats import least_squares, log, percentile

REPO = Path(__file__).resolve().parent.parent
STATE_TABLES = tables_of("controller", "state")
APPEND_TABLES = tables_of("controller", "append")
SAMPLE_EVERY_S = 5.0
NATIVE_EVERY_S = 60.0  # --soak-native-memory: the JVM's memory by category, through jcmd, this often
CONTROLLER_JOB = "jobs/controller.py"
REPLAY_CHUNK = 100_000  # log rows the core replays at a time


# --- the controller's processes ------------------------------------------------------------------------

def runs_controller(_pid: int, cmdline: str) -> bool:
    """Whether a Python process is the controller's driver (the others are Spark's workers)."""
    return CONTROLLER_JOB in cmdline


def memory_by_role(root: int) -> dict[str, int]:
    """Resident bytes of the controller's processes: its JVM, its Python driver, Spark's Python workers."""
    return roles_of(root, runs_controller)


class Controller:
    """The controller job (through ``spark-submit.sh``, as an operator starts it) in its own process group,
    started again after each kill; ``crashes`` counts the times it ended without being killed.

    With a ``standby_checkpoint`` (the controller's), a second process (``jobs/controller.py --standby``)
    waits for the lease beside it, and a kill leaves the standby to take over instead of starting a new
    process; a new standby is started once
    the one that took over has committed (``tend_standby``), so that its start does not compete with the
    takeover for the cores. Every process writes into ``log_path``, after a line saying what started, and
    each kill is marked there too (``restart_times`` reads them)."""

    def __init__(self, command: list[str], log_path: Path, standby_checkpoint: Path | None = None,
                 java_options: str = ""):
        self.command, self.log_path, self.checkpoint = command, log_path, standby_checkpoint
        self.java_options = java_options  # added to JAVA_TOOL_OPTIONS: spark-submit.sh keeps its own driver options
        self.standby_command = [*command, "--standby"] if standby_checkpoint is not None else None
        self.process: subprocess.Popen | None = None
        self.standby: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.starts: list[float] = []  # the processes started (monotonic), standbys included
        self.lives: list[float] = []  # when each active controller began: its start, or the kill it took over at
        self.kills = 0
        self.crashes: list[int] = []  # their exit codes
        self.standby_due: tuple[int, float] | None = None  # (last batch committed at the takeover, when)

    def restart_if_ended(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            self.crashes.append(self.process.returncode)
            self._take_over() if self.standby is not None else self.start()
        if self.standby is not None and self.standby.poll() is not None:
            self.crashes.append(self.standby.returncode)
            self.start_standby()

    def _spawn(self, command: list[str], what: str) -> subprocess.Popen:
        # as from a fresh shell: nothing of the spark-submit that started this process, or the controller would
        # join that JVM
        env = launcher_free_environ()
        if self.java_options:
            env["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, (env.get("JAVA_TOOL_OPTIONS"), self.java_options)))
        self._mark(what, len(self.starts) + 1)
        with self.log_path.open("a") as out:
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.starts.append(time.monotonic())
        return process

    def _mark(self, what: str, number: int) -> None:
        with self.log_path.open("a") as out:
            out.write(f"\n--- {what} {number} at {datetime.now(timezone.utc).isoformat()} ---\n")

    def start(self) -> None:
        self.process = self._spawn(self.command, "start")
        self.lives.append(self.starts[-1])

    def start_standby(self) -> None:
        assert self.standby_command is not None
        self.standby = self._spawn(self.standby_command, "standby")

    def kill(self) -> None:
        """SIGKILL to the controller, its JVM and its workers (the group, then any descendant left); with a
        standby, that one takes over (no process is started)."""
        assert self.process is not None
        _kill_tree(self.process)
        self.kills += 1
        self._mark("kill", self.kills)
        if self.standby is not None:
            self._take_over()

    def _take_over(self) -> None:
        self.process, self.standby = self.standby, None
        self.lives.append(time.monotonic())
        self.standby_due = (committed_batch(self.checkpoint), self.lives[-1]) if self.checkpoint else None

    def tend_standby(self, wait_s: float = 30.0) -> None:
        """Start the next standby once the controller that took over committed a micro-batch (or ``wait_s``
        after the takeover, if it is slow to)."""
        if self.standby_due is None:
            return
        batch, since = self.standby_due
        if committed_batch(self.checkpoint) > batch or time.monotonic() - since > wait_s:
            self.standby_due = None
            self.start_standby()

    def stop(self) -> int:
        """A clean stop: SIGTERM to the Python driver, which ends its queries and gives its lease up. A
        standby is stopped first, or it would take over."""
        if self.standby is not None:
            _stop(self.standby)
            self.standby = None
        assert self.process is not None
        return _stop(self.process)


def _kill_tree(process: subprocess.Popen) -> None:
    pids = family(process.pid, all_processes())
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(60)


def _stop(process: subprocess.Popen) -> int:
    processes = all_processes()
    for pid in family(process.pid, processes):
        if role(pid, processes[pid][1], runs_controller) == "driver_python":
            os.kill(pid, signal.SIGTERM)
    try:
        return process.wait(120)
    except subprocess.TimeoutExpired:
        _kill_tree(process)
        return -9


def committed_batches(checkpoint: Path) -> list[int]:
    """The ids of the micro-batches the controller's checkpoint holds as committed, in order."""
    commits = checkpoint / "commits"
    try:
        return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else []
    except FileNotFoundError:
        return []  # Spark deleted an old commit file as we listed them


def committed_batch(checkpoint: Path) -> int:
    """The controller's last committed micro-batch (-1: none yet)."""
    return max(committed_batches(checkpoint), default=-1)


def committed_offset(checkpoint: Path) -> int:
    """How far into the log the controller's last committed micro-batch reached (-1: none yet)."""
    for batch in reversed(committed_batches(checkpoint)):
        try:
            return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])["offset"]
        except (OSError, ValueError, KeyError, IndexError):
            continue  # written as we read: the one before will do
    return -1


MARK = re.compile(r"^--- (start|standby|kill) (\d+) at (\S+) ---$", re.MULTILINE)  # ``Controller``'s lines


def restart_times(log_path: Path, checkpoint: Path, since: str = "start") -> dict:
    """Seconds from each restart to the first micro-batch committed after it, from the lines of the
    controller's log and the times of the checkpoint's commit files: p50 and max, and the restarts that
    committed nothing before the next one (killed first). A restart is, with ``since="start"``, each start
    after the first (a SIGKILL's, or a crash's); with ``since="kill"``, each kill (a standby's takeover)."""
    marks = [datetime.fromisoformat(m.group(3)).timestamp() for m in MARK.finditer(log_path.read_text())
             if m.group(1) == since]
    restarts = marks[1:] if since == "start" else marks
    commits = checkpoint / "commits"
    written = sorted(p.stat().st_mtime for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else []
    times, none = [], 0
    for start, following in zip(restarts, restarts[1:] + [float("inf")]):
        first = next((t for t in written if start < t < following), None)
        if first is None:
            none += 1
        else:
            times.append(first - start)
    return {"p50": round(percentile(times, 50), 1) if times else None,
            "max": round(max(times), 1) if times else None, "starts": len(restarts),
            "starts_without_a_commit": none}


def replayed_once_created(simulator: ClusterSimulator, replay: Controller, written: Written,
                          what: str) -> dict | None:
    """Once every topic of the simulated cluster is created, the controller replays the log so far
    (``--once``, as a process) and this says how many requests that was and how long it took; before that,
    None. A cluster of 10^5 partitions is made by requests that take one long micro-batch, which a
    controller killed every minute, or a restart timed from its start, would pay again and again."""
    if simulator.sent["CreateTopicsRequest"] < simulator.options.topics:
        return None
    log(f"{what}: {written.requests:,} requests ingested, every topic created; replaying them (--once)")
    began = time.monotonic()
    replay.start()
    code = replay.process.wait()
    if code != 0:
        raise RuntimeError(f"the controller's replay ended with exit code {code}; see {replay.log_path}")
    prepared = {"requests": written.requests, "replay_s": round(time.monotonic() - began, 1)}
    log(f"{what}: replayed in {prepared['replay_s']} s")
    return prepared


# --- the one-shot replay and the comparison ---------------------------------------------------------------

def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, bytes):
        return value.hex()
    return value


class Multiset:
    """Rows of one table as a count and a sum of 64-bit row hashes: equal multisets, equal digests."""

    def __init__(self) -> None:
        self.count = 0
        self.digest = 0

    def add(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            text = json.dumps({k: _plain(v) for k, v in row.items()}, sort_keys=True, default=repr)
            self.digest = (self.digest + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(),
                                                        "big")) % (1 << 64)
            self.count += 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Multiset) and (self.count, self.digest) == (other.count, other.digest)


def _table_rows(name: str, rows: list[dict]) -> pa.Table:
    """Core rows as the sink writes them (its converters), so both sides go through one Arrow layout."""
    if name == "controller_log":
        return controller_log_to_arrow(rows)
    if name == "responses":
        rows = [{**r, "data": json.dumps(r["data"], default=json_bytes)} for r in rows]
    return rows_to_arrow(name, [{c: r.get(c) for c in table_arrow_schema(name).names} for r in rows])


def replay_once(tables: DeltaRsTables, shards: int, config: dict[str, str]) -> tuple[dict[str, Multiset], int]:
    """The core over the whole ``metadata_log``, in order: every controller table as a ``Multiset``."""
    states = [ShardState(ClusterImage()) for _ in range(shards)]
    appended = {name: Multiset() for name in APPEND_TABLES}
    current: dict[str, dict[tuple, dict]] = {name: {} for name in STATE_TABLES}
    log_table = tables.table("metadata_log")
    end = tables.max_value("metadata_log", "offset")
    events = 0
    for lo in range(-1, end, REPLAY_CHUNK):
        chunk = rows_to_events(read_range(log_table, "offset", lo, min(lo + REPLAY_CHUNK, end)))
        events += len(chunk)
        per_shard = routed(chunk, shards)
        # (a failover's records applied on the columns come as Blocks: row by row here)
        outputs = expand([o for shard in range(shards) for o in step(shard, shards, states[shard], per_shard[shard],
                                                                      config)])
        outputs += leader_imbalance(outputs, current["anomalies"].values(), config)  # as the sink judges it
        by_table: dict[str, list[dict]] = {"responses": merged_responses(outputs)}
        for o in sorted(outputs, key=lambda o: (o.offset, o.seq)):
            if o.op == "append":
                by_table.setdefault(o.table, []).append(o.row)
            elif o.op in ("upsert", "delete"):
                key = tuple(o.row[k] for k in table_keys(o.table))
                if o.op == "delete":
                    current[o.table].pop(key, None)
                else:
                    current[o.table][key] = o.row
        for name, rows in by_table.items():
            if rows:
                appended[name].add(_table_rows(name, rows))
    result = dict(appended)
    for name, rows in current.items():
        result[name] = Multiset()
        if rows:
            result[name].add(_table_rows(name, list(rows.values())))
    return result, events


def table_multisets(tables: DeltaRsTables) -> dict[str, Multiset]:
    """The controller's tables as written, read batch by batch (``rejected``: the replay's rows only)."""
    out = {}
    for name in STATE_TABLES + APPEND_TABLES:
        out[name] = Multiset()
        if not tables.exists(name):
            continue
        columns = (controller_log_schema() if name == "controller_log" else table_arrow_schema(name)).names
        for batch in dataset(tables.table(name)).to_batches(columns=columns):
            table = pa.Table.from_batches([batch])
            if name == "rejected":
                table = table.filter(pc.equal(table.column("stage"), "replay"))
            out[name].add(table)
    return out


# --- the run ---------------------------------------------------------------------------------------------

def trend(points: list[tuple[float, float]], unit: str) -> dict:
    """A memory trend under the report's names (``unit``: what y grows by, per what x is): the least-squares
    slope and its noise band (``least_squares``), and growth only when the slope less its band is above zero
    (samples scatter with garbage collection and each micro-batch's buffers); None for each with fewer than
    three points."""
    fitted = least_squares(points)
    if fitted is None or fitted[1] is None:
        return {f"slope_{unit}": None, f"noise_band_{unit}": None, "grows": None}
    value, band = round(fitted[0], 2), round(fitted[1], 2)
    return {f"slope_{unit}": value, f"noise_band_{unit}": band, "grows": value - band > 0}


def native_trends(samples: list[dict]) -> dict[str, dict]:
    """The JVM's committed memory by Native Memory Tracking's category (``jvm_native`` of the samples that
    have it): first and last MB and the trend, so that what its resident size's slope is made of shows (heap
    committed, the JIT's code cache, metaspace, threads, off-heap); categories under 1 MB throughout are left
    out."""
    names = sorted({name for s in samples for name, size in s["jvm_native"].items() if size >= 1e6})
    return {name: {"first_mb": round(samples[0]["jvm_native"].get(name, 0) / 1e6, 1),
                   "last_mb": round(samples[-1]["jvm_native"].get(name, 0) / 1e6, 1),
                   "within_lives": trend([(s["t"] / 60, s["jvm_native"].get(name, 0) / 1e6) for s in samples],
                                         "mb_per_min")}
            for name in names}


def measure_soak(config: Any, work: Path, args: Any) -> dict:
    rate, seconds, kill_every = args.soak_rate, int(args.soak_minutes * 60), args.soak_kill_every
    root = work / "soak-warehouse"
    shutil.rmtree(root, ignore_errors=True)
    tables = DeltaRsTables(str(root))
    checkpoint = root / "_checkpoints" / "controller"
    options = SimulationOptions(brokers=args.soak_brokers, topics=args.soak_topics, partitions_per_topic=10)
    simulator = ClusterSimulator(options, kafka_configs(config))
    overrides = [f"kraftlake.controller.max.records.per.batch={args.soak_batch}", *args.override]
    command = [str(REPO / "spark-submit.sh"), "--driver-memory", args.soak_driver_memory,
               str(REPO / "jobs" / "controller.py"), "--warehouse", str(root), "--shards", str(args.shards),
               *sum((["--override", o] for o in overrides), [])]
    controller = Controller(command, work / "soak-controller.log", checkpoint if args.soak_standby else None,
                            NATIVE_MEMORY_TRACKING if args.soak_native_memory else "")
    samples: list[dict] = []
    lag: list[tuple[float, int]] = []
    written_box: list[Written] = []
    feeding, stop = threading.Event(), threading.Event()
    feeding.set()
    prepared: dict[str, Any] = {}
    before: list[Written] = []  # the totals when the soak began: what the preparation wrote
    began = time.monotonic()
    loads = [os.getloadavg()]

    class Fed(Exception):
        """The soak's requests are all written."""

    def watch() -> None:
        """Samples memory (and the lag) every few seconds; kills and restarts the controller on schedule."""
        next_kill = began + kill_every if kill_every else None
        next_native = began if args.soak_native_memory else None
        while not stop.wait(SAMPLE_EVERY_S):
            now = time.monotonic()
            with controller.lock:
                if next_kill is not None and now >= next_kill and feeding.is_set():
                    controller.kill()
                    if controller.standby_command is None:
                        controller.start()
                    next_kill += kill_every
                    loads.append(os.getloadavg())
                    continue
                controller.restart_if_ended()
                controller.tend_standby()
                process = controller.process
            if process is not None and process.poll() is None:
                samples.append({"t": round(now - began, 1), "life": len(controller.lives),
                                **memory_by_role(process.pid)})
                if next_native is not None and now >= next_native:  # (jcmd: a JVM's start, so not every sample)
                    jvm = jvm_of(process.pid)
                    samples[-1]["jvm_native"] = {} if jvm is None else native_memory(jvm)
                    next_native = now + NATIVE_EVERY_S
            end = written_box[-1].last_offset if written_box else None
            if end is not None:
                lag.append((round(now - began, 1), end - committed_offset(checkpoint)))

    def begin(written: Written) -> None:
        nonlocal began
        before.append(written)
        log(f"soak: {seconds} s at {rate:,} events/s, SIGKILL every {kill_every} s"
            f"{' (a standby takes over)' if args.soak_standby else ''}, {args.shards} shards, micro-batches "
            f"of at most {args.soak_batch:,} events, driver memory {args.soak_driver_memory}")
        began = time.monotonic()
        controller.start()
        if args.soak_standby:
            controller.start_standby()
        watcher.start()

    def on_chunk(written: Written) -> None:
        written_box.append(written)
        if not before:  # still making the cluster (--soak-prepare)
            done = replayed_once_created(simulator, replay, written, "soak")
            if done is not None:
                prepared.update(done)
                begin(Written(requests=written.requests, chunks=written.chunks))
            return
        if written.requests - before[0].requests >= rate * seconds:
            raise Fed
        wait = began + written.chunks - before[0].chunks - time.monotonic()  # a chunk of ``rate`` requests a second
        if wait > 0:
            time.sleep(wait)

    watcher = threading.Thread(target=watch, name="soak-watch", daemon=True)
    replay = Controller([*command, "--once"], work / "soak-prepare.log")
    if not args.soak_prepare:
        begin(Written())
    try:
        try:  # as many requests as it takes: the simulator makes them as they are read
            write_requests(tables, simulator, 1 << 40, "soak", rate, on_chunk=on_chunk)
        except Fed:
            pass
        written = written_box[-1]
        fed_s = time.monotonic() - began
        fed = written.requests - before[0].requests
        log(f"soak: fed {fed:,} requests in {fed_s:.0f} s; waiting for the controller to catch up")
        feeding.clear()  # no more kills; memory is still sampled while the controller catches up
        last = written.last_offset
        drain_start = time.monotonic()
        deadline = drain_start + 600.0 + 3 * seconds  # a backlog of the whole feed, at a third of the rate
        while committed_offset(checkpoint) < last and time.monotonic() < deadline:
            time.sleep(1.0)  # the watcher restarts a controller that ended on its own
        drained = committed_offset(checkpoint) >= last
        drain_s = time.monotonic() - drain_start
        stop.set()
        watcher.join()
        with controller.lock:
            exit_code = controller.stop()
    finally:
        stop.set()
        for process in (controller.standby, controller.process):
            if process is not None and process.poll() is None:
                _kill_tree(process)
    loads.append(os.getloadavg())
    log(f"soak: controller drained: {drained} after {drain_s:.0f} s; replaying the log once in the core")
    started = time.monotonic()
    expected, events = replay_once(tables, args.shards, kafka_configs(config))
    replay_s = time.monotonic() - started
    actual = table_multisets(tables)
    compare = {name: {"rows": actual[name].count, "core_rows": expected[name].count,
                      "equal": actual[name] == expected[name]} for name in expected}
    memory = {}
    lives = sorted({s["life"] for s in samples})
    # within each controller's life, past its first 20 s (Spark starting, the state store loading)
    steady = [s for s in samples if s["t"] - (controller.lives[s["life"] - 1] - began) >= 20]
    for name in ("driver_jvm", "driver_python", "workers"):
        peaks = [max(s[name] for s in samples if s["life"] == life) / 1e6 for life in lives]
        memory[name] = {"peak_mb_per_life": [round(p) for p in peaks],
                        "peaks": trend(list(enumerate(peaks)), "mb_per_life"),
                        "within_lives": trend([(s["t"] / 60, s[name] / 1e6) for s in steady], "mb_per_min"),
                        "max_mb": round(max(peaks, default=0))}
    if args.soak_native_memory:
        memory["driver_jvm_native"] = native_trends([s for s in steady if s.get("jvm_native")])
    report = {
        "minutes": args.soak_minutes, "rate_events_per_s": rate, "kill_every_s": kill_every,
        "shards": args.shards, "cluster": {"brokers": options.brokers, "topics": options.topics,
                                           "partitions": options.topics * options.partitions_per_topic},
        "prepared": prepared or None, "events_fed": fed, "feeding_s": round(fed_s, 1),
        "fed_events_per_s": round(fed / fed_s), "events_in_log": events,
        "by_type": dict(sorted(written.by_type.items())),
        "driver_memory": args.soak_driver_memory, "max_records_per_batch": args.soak_batch,
        "standby": args.soak_standby, "controller_starts": len(controller.starts), "kills": controller.kills,
        "crashes": controller.crashes,
        "drained": drained, "drain_s": round(drain_s, 1), "last_exit_code": exit_code,
        "restart_s": restart_times(controller.log_path, checkpoint, "kill" if args.soak_standby else "start"),
        "lag_events": {"max": max((v for _, v in lag), default=None),
                       "at_feed_end": next((v for t, v in reversed(lag) if t <= fed_s), None)},
        "tables": compare, "tables_equal_one_shot_replay": all(c["equal"] for c in compare.values()),
        "rows_compared": sum(c["rows"] for c in compare.values()),
        "core_replay_s": round(replay_s, 1), "memory": memory, "memory_samples": samples,
        "lag_samples": lag, "load_average": [[round(x, 2) for x in load] for load in loads],
    }
    log(f"soak: {events:,} events, {report['kills']} kills, tables equal to one replay: "
        f"{report['tables_equal_one_shot_replay']} ({report['rows_compared']:,} rows), memory "
        + ", ".join(f"{name} peak {m['max_mb']} MB ({m['within_lives']['slope_mb_per_min']} "
                    f"± {m['within_lives']['noise_band_mb_per_min']} MB/min)"
                    for name, m in memory.items() if "max_mb" in m))
    return report


__all__ = ["Multiset", "family", "memory_by_role", "measure_soak", "replay_once", "table_multisets"]

