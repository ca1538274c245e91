"""Hand-written request logs for the controller scenario tests, and the tables as the tests read them.

A ``RequestLog`` writes the JSON lines a person would write to ask "what would the controller do": each
request with Kafka's field names, a version Kafka defines and an event time. It only keeps what a person
writing the log knows: the offset each line will get (ingest numbers lines on from the log end) and the
time. Everything the tests expect is written by hand in the tests, never taken from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from kraftlake.metadata import uuids
from kraftlake.metadata.tables import table_arrow_schema, tables_of
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.controller.shards import ShardState, apply_outputs, iter_rows, replay_log, routed, step
from kraftlake.storage.ingest import ingest_source
from kraftlake.storage import Warehouse
from kraftlake.storage.tables import rows_to_events
from streaming_helpers import plain, sorted_rows

STATE_TABLES = tables_of("controller", "state")
APPEND_TABLES = ("partition_history", "broker_history", "features", "rejected")
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
MAX_MV = 19  # the newest metadata.version the hand-written brokers support (3.7-IV4, as in the real logs)


def incarnation(broker_id: int, generation: int = 1) -> str:
    return uuids.from_bytes(bytes([0xA0 + generation]) + bytes([broker_id] * 15))


def log_dir(broker_id: int) -> str:
    return uuids.from_bytes(bytes([0x70 + broker_id] * 16))


class RequestLog:
    """Requests (and the odd record) as JSON lines, ``step_ms`` of event time apart unless told otherwise.

    Every method returns the offset its line will have once ingested after ``first_offset - 1``.
    """

    def __init__(self, first_offset: int, start_ms: int, step_ms: int = 10):
        self.lines: list[dict] = []
        self.first_offset = first_offset
        self.now = start_ms - step_ms
        self.step_ms = step_ms

    @property
    def last_offset(self) -> int:
        """The offset of the last line written so far (what a caught-up broker has seen)."""
        return self.first_offset + len(self.lines) - 1

    def add(self, type_: str, version: int, data: dict, at: int | None = None) -> int:
        self.now = self.now + self.step_ms if at is None else at
        self.lines.append({"type": type_, "version": version, "timestamp": self.now, "data": data})
        return self.last_offset

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return path

    # --- brokers ---

    def register(self, broker_id: int, generation: int = 1, rack: str | None = None, at: int | None = None) -> int:
        return self.add("BrokerRegistrationRequest", 4, {
            "BrokerId": broker_id, "ClusterId": "kraftlake-scenarios",
            "IncarnationId": incarnation(broker_id, generation),
            "Listeners": [{"Name": "PLAINTEXT", "Host": f"broker-{broker_id}", "Port": 9092, "SecurityProtocol": 0}],
            "Features": [{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": MAX_MV}],
            "Rack": rack, "IsMigratingZkBroker": False, "LogDirs": [log_dir(broker_id)], "PreviousBrokerEpoch": -1,
        }, at)

    def heartbeat(self, broker_id: int, epoch: int, seen: int | None = None, want_fence: bool = False,
                  want_shut_down: bool = False, at: int | None = None) -> int:
        """``seen``: the broker's CurrentMetadataOffset; by default every line before this one."""
        return self.add("BrokerHeartbeatRequest", 1, {
            "BrokerId": broker_id, "BrokerEpoch": epoch,
            "CurrentMetadataOffset": self.last_offset if seen is None else seen,
            "WantFence": want_fence, "WantShutDown": want_shut_down, "OfflineLogDirs": []}, at)

    def unregister(self, broker_id: int, at: int | None = None) -> int:
        return self.add("UnregisterBrokerRequest", 0, {"BrokerId": broker_id}, at)

    # --- topics and partitions ---

    def create_topics(self, *topics: dict, at: int | None = None) -> int:
        return self.add("CreateTopicsRequest", 7, {"Topics": list(topics), "timeoutMs": 30000,
                                                   "validateOnly": False}, at)

    def delete_topics(self, *names: str, at: int | None = None) -> int:
        return self.add("DeleteTopicsRequest", 6, {
            "Topics": [{"Name": name, "TopicId": ZERO_UUID} for name in names], "TimeoutMs": 30000}, at)

    def alter_partition(self, broker_id: int, broker_epoch: int, topics: list[dict], version: int = 2,
                        at: int | None = None) -> int:
        return self.add("AlterPartitionRequest", version, {"BrokerId": broker_id, "BrokerEpoch": broker_epoch,
                                                           "Topics": topics}, at)

    def elect_preferred(self, topics: Mapping[str, list[int]], at: int | None = None) -> int:
        return self.add("ElectLeadersRequest", 1, {
            "ElectionType": 0, "TimeoutMs": 30000,
            "TopicPartitions": [{"Topic": name, "Partitions": ids} for name, ids in topics.items()]}, at)


def new_topic(name: str, partitions: int = -1, replication_factor: int = -1,
              assignments: list[list[int]] | None = None) -> dict:
    """One CreatableTopic: placed (partitions, replication factor) or assigned by hand (-1, -1)."""
    return {"Name": name, "NumPartitions": partitions, "ReplicationFactor": replication_factor,
            "Assignments": [{"PartitionIndex": i, "BrokerIds": replicas}
                            for i, replicas in enumerate(assignments or [])],
            "Configs": []}


def isr_change(partition: int, leader_epoch: int, partition_epoch: int, isr: list[int],
               epochs: Mapping[int, int] | None = None) -> dict:
    """One AlterPartition PartitionData: ``NewIsr`` (v0-2), or ``NewIsrWithEpochs`` when ``epochs`` says the
    broker epochs the leader saw (v3)."""
    data = {"PartitionIndex": partition, "LeaderEpoch": leader_epoch, "PartitionEpoch": partition_epoch,
            "LeaderRecoveryState": 0}
    if epochs is None:
        data["NewIsr"] = isr
    else:
        data["NewIsrWithEpochs"] = [{"BrokerId": b, "BrokerEpoch": epochs[b]} for b in isr]
    return data


# --- the tables, as rows that compare -------------------------------------------------------------

def _json_round_trip(value: object) -> object:
    return json.loads(json.dumps(value, default=repr))


def controller_log_row(row: dict) -> dict:
    """A controller_log row as (offset, shard, seq, type, version, data): the payload from its type's column."""
    return {"offset": row["offset"], "timestamp": plain(row["timestamp"]), "shard": row["shard"], "seq": row["seq"],
            "type": row["type"], "version": row["version"], "data": _json_round_trip(row[row["type"]])}


def response_row(row: dict) -> dict:
    data = row["data"]
    return {**{k: plain(v) for k, v in row.items()}, "data": json.loads(data) if isinstance(data, str) else data}


def spark_tables(warehouse: Warehouse) -> dict[str, list[dict]]:
    """What the streaming job wrote, every derived table (``rejected``: the replay's rows only)."""
    out = {}
    for name in STATE_TABLES + APPEND_TABLES:
        rows = [{k: plain(v) for k, v in row.items()} for row in warehouse.read_arrow(name).to_pylist()]
        if name == "rejected":
            rows = [r for r in rows if r["stage"] == "replay"]
        out[name] = sorted_rows(rows)
    out["controller_log"] = sorted_rows([controller_log_row(r) for r in warehouse.read_arrow("controller_log").to_pylist()])
    out["responses"] = sorted_rows([response_row(r) for r in warehouse.read_arrow("responses").to_pylist()])
    return out


def replay_in_batches(events: list[dict], shards: int, config: Mapping[str, str], batch: int) -> dict:
    """What ``replay_log`` does, but ``batch`` events at a time with each shard's state serialised in
    between, as the streaming job's state store does: a second in-process reference."""
    states = [ShardState(ClusterImage()).to_bytes() for _ in range(shards)]
    tables: dict = {}
    for start in range(0, len(events), batch):
        per_shard = routed(events[start:start + batch], shards)
        outputs = []
        for shard in range(shards):
            if per_shard[shard]:
                state = ShardState.from_bytes(states[shard])
                outputs.extend(step(shard, shards, state, per_shard[shard], config))
                states[shard] = state.to_bytes()
        apply_outputs(tables, outputs)
    return tables


def core_tables(events: list[dict], shards: int, config: Mapping[str, str], batch: int | None = None
                ) -> dict[str, list[dict]]:
    """``replay_log`` in-process on the same events (or ``replay_in_batches``), projected onto each
    table's columns."""
    if batch is None:
        tables = replay_log(events, shards, config)[0]
    else:
        tables = replay_in_batches(events, shards, config, batch)
    out = {}
    for name in STATE_TABLES + APPEND_TABLES:
        columns = table_arrow_schema(name).names
        out[name] = sorted_rows([{c: row.get(c) for c in columns} for row in iter_rows(tables.get(name, []))])
    out["controller_log"] = sorted_rows([
        {"offset": r["offset"], "timestamp": r["timestamp"], "shard": r["shard"], "seq": r["seq"], "type": r["type"],
         "version": r["version"], "data": _json_round_trip(r["data"])} for r in tables.get("controller_log", [])])
    out["responses"] = sorted_rows([{**r, "data": _json_round_trip(r["data"])} for r in tables.get("responses", [])])
    return out


def ingest(warehouse: Warehouse, log: "RequestLog", path: Path) -> None:
    summary = ingest_source(warehouse, str(log.write(path)))
    assert summary.rejected == 0, "a hand-written request was refused at ingest"
    assert (summary.first_offset, summary.last_offset) == (log.first_offset, log.last_offset)


def logged_events(warehouse: Warehouse) -> list[dict]:
    return rows_to_events(warehouse.read_arrow("metadata_log").sort_by("offset"))
