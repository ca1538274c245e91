"""Helpers for the streaming tests: a generator of believable metadata logs, and the tables as rows.

The generator keeps its own small model of the cluster (brokers, topics, partitions) so that the
records it writes apply, except the ones it breaks on purpose; it knows which those are, which gives
the tests an oracle for ``rejected`` that does not come from the code under test.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from servers import wait_for  # noqa: F401 (the tests take it from here too)
from kraftlake.spark import controller_query as streaming
from kraftlake.metadata import uuids
from kraftlake.storage.ingest import ingest_source
from kraftlake.metadata.tables import table_arrow_schema
from kraftlake.controller.shards import iter_rows, replay_log
from kraftlake.raft.replica import replay_quorum
from kraftlake.sim.cluster import DEFAULT_MIX, SimulationOptions, simulate
from kraftlake.storage import Warehouse
from kraftlake.storage.tables import rows_to_events

START_MS = 1_763_580_000_000
BROKER_IDS = (1, 2, 3, 4)
TABLES = ("brokers", "topics", "configs", "partitions", "partition_history", "broker_history", "features", "anomalies",
          "rejected")
REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_BROKER, CONFIG_TOPIC = 4, 2  # ConfigResource.Type


@dataclass
class Partition:
    replicas: list[int]
    isr: list[int]
    leader: int
    adding: list[int] = field(default_factory=list)


@dataclass
class Topic:
    name: str
    topic_id: str
    partitions: dict[int, Partition]


@dataclass
class GeneratedLog:
    events: list[dict]  # JSON lines objects: type, version, timestamp, data (no offsets)
    invalid: list[int]  # indices of the events that must end up in `rejected`
    # the generator's own final state: {broker: (epoch, fenced, in controlled shutdown)} and
    # {(topic, partition): (replicas, isr, leader, adding replicas)}
    brokers: dict[int, tuple[int, bool, bool]]
    partitions: dict[tuple[str, int], tuple[list[int], list[int], int, list[int]]]


# Every operation the cluster simulator knows, often: its logs hold every request the controller decides.
EVERY_OPERATION = {**DEFAULT_MIX, "crash": 1.0, "rolling_restart": 0.5, "create_partitions": 0.5,
                   "list_reassignments": 0.5, "unclean_election": 0.5, "unregister": 0.5}


def simulated_requests(seed: int, size: int) -> list[dict]:
    """``size`` requests of a small, busy simulated cluster (four brokers on two racks, three topics of
    three partitions, an operation every 4 s of event time) as JSON lines objects without offsets: the
    brokers' registrations and heartbeats, AlterPartitions, and every operator request."""
    options = SimulationOptions(brokers=4, topics=3, partitions_per_topic=3, racks=2, seed=seed,
                                operation_interval_ms=4_000, mix=EVERY_OPERATION, stale_share=0.05)
    return [{k: e[k] for k in ("type", "version", "timestamp", "data")} for e in simulate(size, options)]


def kill_seed(default: int) -> int:
    """The seed of a test that kills processes at drawn moments: fixed by default, so a failure replays;
    KRAFTLAKE_KILL_SEED sets another (a failing run's message names the one it used)."""
    return int(os.environ.get("KRAFTLAKE_KILL_SEED", default))


def write_jsonl(events: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


class _Generator:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.now = START_MS
        self.events: list[dict] = []
        self.invalid: list[int] = []
        self.epochs: dict[int, int] = {}
        self.fenced: dict[int, bool] = {}
        self.shutting_down: dict[int, bool] = {}
        self.topics: dict[str, Topic] = {}
        self.topic_count = 0

    def uuid(self) -> str:
        return uuids.from_bytes(self.random.getrandbits(128).to_bytes(16, "big"))

    def add(self, type_: str, data: dict, version: int = 0, invalid: bool = False) -> None:
        self.now += self.random.randint(1, 700)
        if invalid:
            self.invalid.append(len(self.events))
        self.events.append({"type": type_, "version": version, "timestamp": self.now, "data": data})

    # --- brokers -------------------------------------------------------------------------------

    def register(self, broker: int) -> None:
        self.epochs[broker] = len(self.events) + 100
        self.fenced[broker] = True
        self.shutting_down[broker] = False
        self.add("RegisterBrokerRecord", {
            "BrokerId": broker, "IncarnationId": self.uuid(), "BrokerEpoch": self.epochs[broker],
            "EndPoints": [{"Name": "PLAINTEXT", "Host": f"broker-{broker}", "Port": 9092, "SecurityProtocol": 0}],
            "Rack": f"rack-{broker % 2}", "Fenced": True}, version=3)

    def set_fenced(self, broker: int, fenced: bool) -> None:
        self.fenced[broker] = fenced
        if self.random.random() < 0.5:
            self.add("BrokerRegistrationChangeRecord", {
                "BrokerId": broker, "BrokerEpoch": self.epochs[broker], "Fenced": 1 if fenced else -1}, version=1)
        else:
            self.add("FenceBrokerRecord" if fenced else "UnfenceBrokerRecord",
                     {"Id": broker, "Epoch": self.epochs[broker]})

    def controlled_shutdown(self, broker: int) -> None:
        """KIP-841: the broker leaves every ISR and leads nothing, then it is fenced."""
        self.shutting_down[broker] = True
        self.add("BrokerRegistrationChangeRecord", {
            "BrokerId": broker, "BrokerEpoch": self.epochs[broker], "InControlledShutdown": 1}, version=1)
        for topic in self.topics.values():
            for pid, p in sorted(topic.partitions.items()):
                if broker in p.isr and len(p.isr) > 1:
                    p.isr = [b for b in p.isr if b != broker]
                    change = {"PartitionId": pid, "TopicId": topic.topic_id, "Isr": list(p.isr)}
                    if p.leader == broker:
                        p.leader = p.isr[0]
                        change["Leader"] = p.leader
                    self.add("PartitionChangeRecord", change)
        self.set_fenced(broker, True)

    # --- topics and partitions -----------------------------------------------------------------

    def create_topic(self) -> None:
        self.topic_count += 1
        name = f"topic-{self.topic_count}"
        topic_id = self.uuid()
        self.add("TopicRecord", {"Name": name, "TopicId": topic_id})
        if self.random.random() < 0.5:
            self.add("ConfigRecord", {"ResourceType": CONFIG_TOPIC, "ResourceName": name,
                                      "Name": "min.insync.replicas", "Value": str(self.random.randint(1, 2))})
        topic = Topic(name, topic_id, {})
        for pid in range(self.random.randint(1, 3)):
            replicas = self.random.sample(BROKER_IDS, 3)
            p = Partition(replicas, list(replicas), replicas[0])
            topic.partitions[pid] = p
            self.add("PartitionRecord", {"PartitionId": pid, "TopicId": topic_id, "Replicas": replicas,
                                         "Isr": list(replicas), "Leader": p.leader})
        self.topics[name] = topic

    def change_partition(self) -> None:
        topic = self.random.choice(sorted(self.topics.values(), key=lambda t: t.name))
        pid = self.random.choice(sorted(topic.partitions))
        p = topic.partitions[pid]
        change: dict = {"PartitionId": pid, "TopicId": topic.topic_id}
        roll = self.random.random()
        if p.adding:  # finish the reassignment: the added replica joined, the first one leaves
            p.replicas = [b for b in p.replicas if b != p.replicas[0]]
            p.isr = [b for b in p.isr if b in p.replicas] or [p.adding[0]]
            p.leader = p.isr[0]
            p.adding = []
            change.update(Replicas=list(p.replicas), Isr=list(p.isr), Leader=p.leader, AddingReplicas=[])
        elif roll < 0.3 and len(p.isr) > 1:
            p.isr = p.isr[:-1] if p.isr[-1] != p.leader else p.isr[1:]
            change["Isr"] = list(p.isr)
        elif roll < 0.55 and len(p.isr) < len(p.replicas):
            p.isr = p.isr + [next(b for b in p.replicas if b not in p.isr)]
            change["Isr"] = list(p.isr)
        elif roll < 0.8:
            p.leader = self.random.choice(p.isr)
            change["Leader"] = p.leader
        else:  # start a reassignment onto the broker that is not a replica yet
            new = next(b for b in BROKER_IDS if b not in p.replicas)
            p.replicas = p.replicas + [new]
            p.adding = [new]
            change.update(Replicas=list(p.replicas), AddingReplicas=[new])
        self.add("PartitionChangeRecord", change)

    def remove_topic(self) -> None:
        name = self.random.choice(sorted(self.topics))
        self.add("RemoveTopicRecord", {"TopicId": self.topics.pop(name).topic_id})

    # --- records that must not apply -----------------------------------------------------------

    def unknown_partition(self) -> None:
        topic = self.random.choice(sorted(self.topics.values(), key=lambda t: t.name))
        self.add("PartitionChangeRecord", {"PartitionId": 50 + len(topic.partitions),
                                           "TopicId": topic.topic_id, "Isr": [1]}, invalid=True)

    def stale_unregister(self) -> None:
        broker = self.random.choice(BROKER_IDS)
        self.add("UnregisterBrokerRecord", {"BrokerId": broker, "BrokerEpoch": self.epochs[broker] + 1},
                 invalid=True)

    # --- whole steps ---------------------------------------------------------------------------

    def bootstrap(self) -> None:
        self.add("BeginTransactionRecord", {"Name": "Bootstrap records"})
        self.add("FeatureLevelRecord", {"Name": "metadata.version", "FeatureLevel": 19})
        self.add("EndTransactionRecord", {})
        for broker in BROKER_IDS:
            self.register(broker)
        for broker in BROKER_IDS:
            self.set_fenced(broker, False)

    def transaction(self) -> None:
        """A committed transaction creating a topic and changing another; sometimes with a bad record."""
        self.add("BeginTransactionRecord", {"Name": "CreateTopics"})
        self.create_topic()
        if self.random.random() < 0.5:
            self.unknown_partition()
        self.change_partition()
        self.add("EndTransactionRecord", {})

    def aborted_transaction(self) -> None:
        self.add("BeginTransactionRecord", {"Name": "aborted"})
        self.add("TopicRecord", {"Name": f"aborted-{len(self.events)}", "TopicId": self.uuid()})
        self.add("AbortTransactionRecord", {"Reason": "controller failover"})

    def action(self) -> None:
        unfenced = [b for b in BROKER_IDS if not self.fenced[b]]
        fenced = [b for b in BROKER_IDS if self.fenced[b]]
        choices = [(self.create_topic, 3), (self.transaction, 1), (self.aborted_transaction, 0.5),
                   (lambda: self.add("NoOpRecord", {}), 1), (self.stale_unregister, 0.5),
                   (lambda: self.add("ConfigRecord", {
                       "ResourceType": CONFIG_BROKER, "ResourceName": str(self.random.choice(BROKER_IDS)),
                       "Name": "log.retention.ms",
                       "Value": self.random.choice([None, "1000", "60000"])}), 1)]
        if self.topics:
            choices += [(self.change_partition, 6), (self.unknown_partition, 0.5), (self.remove_topic, 0.7)]
        if fenced:
            choices.append((lambda: self.set_fenced(self.random.choice(fenced), False), 1.5))
            choices.append((lambda: self.register(self.random.choice(fenced)), 0.5))
        if len(unfenced) > 3:
            choices.append((lambda: self.controlled_shutdown(self.random.choice(unfenced)), 1))
        actions, weights = zip(*choices)
        self.random.choices(actions, weights)[0]()


def generate_log(seed: int, size: int) -> GeneratedLog:
    """About ``size`` events (whole steps, so a few more) of a cluster of four brokers."""
    generator = _Generator(seed)
    generator.bootstrap()
    while len(generator.events) < size:
        generator.action()
    return GeneratedLog(
        generator.events, generator.invalid,
        {b: (generator.epochs[b], generator.fenced[b], generator.shutting_down[b]) for b in BROKER_IDS},
        {(t.name, pid): (p.replicas, p.isr, p.leader, p.adding)
         for t in generator.topics.values() for pid, p in t.partitions.items()})


# --- running the controller and reading its tables ----------------------------------------------

def ingest_jsonl(warehouse: Warehouse, path: Path) -> None:
    summary = ingest_source(warehouse, str(path))
    assert summary.rejected == 0, f"the generated log should be valid input, but ingest rejected {summary.rejected}"


def run_controller(warehouse: Warehouse, checkpoint: Path, shards: int, max_records_per_batch: int | None,
                   config: Mapping[str, str] | None = None, max_batch_ms: int | None = None) -> None:
    streaming.run(warehouse, streaming.ControllerSettings(
        shards=shards, checkpoint=str(checkpoint), once=True, max_records_per_batch=max_records_per_batch,
        max_batch_ms=max_batch_ms, kafka_config=dict(config or {})), out=io.StringIO())


# --- the controller job in a subprocess, for real kills ---------------------------------------------

def controller_command(warehouse: Path, batch: int, once: bool = True) -> list[str]:
    """The controller job run by this venv's python (its JVM the job's child); ``once``: to the log's end."""
    return [sys.executable, "jobs/controller.py", "--warehouse", str(warehouse), *(["--once"] if once else []),
            "--max-records-per-batch", str(batch), "--shards", "2", "--override", "spark.master=local[2,4]",
            "--override", "spark.sql.shuffle.partitions=2"]


def controller_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in [str(REPO_ROOT / "lib"), os.environ.get("PYTHONPATH")] if p)
    return {**os.environ, "PYTHONPATH": path, "PYSPARK_PYTHON": sys.executable}


def why_failed(output: str, tail: int = 1500) -> str:
    """A failed job's output cut to what explains it: Spark's plan dumps can fill the whole tail, so the first
    lines naming an exception (with their causes) come first, then the end of the output."""
    lines = output.splitlines()
    causes = [i for i, line in enumerate(lines)
              if ("Exception" in line or "Error" in line) and not line.startswith((" ", "\t", "+-", ":"))]
    picked = [line[:400] for i in causes[:6] for line in lines[i:i + 3]]
    return "\n".join(["first exceptions:", *picked, "", f"last {tail} characters:", output[-tail:]])


def kill_controller_when(command: list[str], ready: Callable[[], bool], log: Path,
                         aim: Callable[[], bool] | None = None) -> None:
    """A real crash: start the controller job in its own process group, wait until ``ready()``, then
    (best effort, up to 10 s) until ``aim()``, and SIGKILL the whole group."""
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=controller_env(), stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            assert wait_for(lambda: ready() or process.poll() is not None, 180) and process.poll() is None, (
                f"expected the controller to be running (exit {process.poll()}):\n{why_failed(log.read_text())}")
            if aim is not None:
                wait_for(lambda: aim() or process.poll() is not None, 10)
                assert process.poll() is None, f"the controller finished before the kill:\n{why_failed(log.read_text())}"
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)


def _together(target: Callable[..., object], args: tuple, barrier: Any, results: Any) -> None:
    barrier.wait(120)
    try:
        results.put(target(*args))
    except Exception as exc:
        results.put(("failed", repr(exc)))
    barrier.wait(120)  # everyone stays alive until all have run (a lease's winner keeps holding it)


def at_once(target: Callable[..., object], calls: list[tuple]) -> list[object]:
    """``target(*args)`` for each ``args`` in ``calls``, each in a process of its own (spawned), released
    together by a barrier: what they returned (or ``("failed", repr)``), in the order they finished."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(len(calls)), context.Queue()
    processes = [context.Process(target=_together, args=(target, args, barrier, results)) for args in calls]
    for p in processes:
        p.start()
    try:
        return [results.get(timeout=180) for _ in processes]
    finally:
        for p in processes:
            p.join(60)
            if p.is_alive():
                p.kill()


def in_background(run: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """``run()`` in a thread; what it raised lands in the list."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def committed_batches(checkpoint: Path) -> list[int]:
    commits = checkpoint / "commits"
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else []


def committed_offsets(checkpoint: Path) -> list[int]:
    """The log offset each committed micro-batch reached (the last line of its offsets file), in order."""
    return [json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])["offset"]
            for batch in committed_batches(checkpoint)]


def committed_offset(checkpoint: Path) -> int | None:
    """The log offset the last committed micro-batch reached."""
    reached = committed_offsets(checkpoint)
    return reached[-1] if reached else None


def plain(value: object) -> object:
    """Timestamps as ms since the epoch (the core's unit), so table rows and core rows compare."""
    if isinstance(value, datetime):
        return (value - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    return value


def sorted_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=repr))


def _table_rows(warehouse: Warehouse, name: str) -> list[dict]:
    """A table's rows, sorted; ``rejected`` only from the replay stage (ingest rejections are not the
    controller's)."""
    rows = [{k: plain(v) for k, v in row.items()} for row in warehouse.read_arrow(name).to_pylist()]
    if name == "rejected":
        rows = [r for r in rows if r["stage"] == "replay"]
    return sorted_rows(rows)


def warehouse_tables(warehouse: Warehouse) -> dict[str, list[dict]]:
    return {name: _table_rows(warehouse, name) for name in TABLES}


def logged_events(warehouse: Warehouse) -> list[dict]:
    return rows_to_events(warehouse.read_arrow("metadata_log").sort_by("offset"))


def reference_tables(events: list[dict], shards: int) -> dict[str, list[dict]]:
    """``replay_log`` in-process, its rows projected onto each table's columns as a Delta row would be; the
    quorum's anomalies from ``replay_quorum`` beside the controller's."""
    tables, _ = replay_log(events, shards)
    quorum = replay_quorum(events)[0]
    out = {}
    for name in TABLES:
        columns = table_arrow_schema(name).names
        rows = list(iter_rows(tables.get(name, [])))
        if name == "anomalies":
            rows += list(iter_rows(quorum[name]))
        out[name] = sorted_rows([{c: row.get(c) for c in columns} for row in rows])
    return out


def warehouse_decisions(warehouse: Warehouse) -> dict[str, list[tuple]]:
    """``controller_log`` and ``responses`` as comparable tuples (records by request offset, shard and
    place; answers with their JSON parsed)."""
    log = warehouse.read_arrow("controller_log") if warehouse.exists("controller_log") else None
    records = [] if log is None else [{**r, **place} for r, place in
                                      zip(rows_to_events(log), log.select(["shard", "seq"]).to_pylist())]
    answers = warehouse.read_arrow("responses").to_pylist() if warehouse.exists("responses") else []
    return _decisions(records, [{**a, "data": json.loads(a["data"])} for a in answers])


def reference_decisions(events: list[dict], shards: int) -> dict[str, list[tuple]]:
    """The same from ``replay_log`` in-process."""
    tables, _ = replay_log(events, shards)
    return _decisions(list(iter_rows(tables.get("controller_log", []))), list(iter_rows(tables.get("responses", []))))


def _decisions(records: list[dict], answers: list[dict]) -> dict[str, list[tuple]]:
    def canonical(value: object) -> str:
        return json.dumps(value, sort_keys=True, default=repr)

    return {"controller_log": sorted((r["offset"], r["shard"], r["seq"], r["type"], r["version"], canonical(r["data"]))
                                     for r in records),
            "responses": sorted((a["offset"], a["request_type"], a["error_code"], canonical(a["data"]))
                                for a in answers)}


def assert_same_tables(actual: dict[str, list[dict]], expected: dict[str, list[dict]], what: str) -> None:
    """Says which rows differ: pytest does not rewrite the asserts of a helper module into diffs."""
    for name in expected:
        missing = [r for r in expected[name] if r not in actual[name]]
        unexpected = [r for r in actual[name] if r not in expected[name]]
        assert actual[name] == expected[name], (
            f"{what}: table {name} differs ({len(actual[name])} rows, expected {len(expected[name])})\n"
            f"  missing: {missing[:3]}\n  unexpected: {unexpected[:3]}")
