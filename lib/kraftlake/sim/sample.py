"""The sample cluster the quickstart ships: a small, believable KRaft metadata log in Kafka's format.

Three brokers register and are unfenced, two topics are created, the controller fails over once,
broker 2 goes through a controlled shutdown (leadership moves away, it leaves every ISR, it is fenced)
and comes back with a new incarnation. Then, as what-if requests in JSON lines, broker 3 asks to shut down.
Batches use every compression codec Kafka writes, so the quickstart reads them all.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from kraftlake.codec.writer import write_partition_dir
from kraftlake.metadata import uuids

START_MS = 1_763_550_000_000  # 2025-11-19T11:00:00Z
BROKERS = (1, 2, 3)
TOPICS = {"orders": 6, "payments": 3}


class _Log:
    def __init__(self, seed: int):
        self.events: list[dict] = []
        self.now = START_MS
        self.epoch = 1
        self.random = random.Random(seed)

    def uuid(self) -> str:
        return uuids.from_bytes(self.random.getrandbits(128).to_bytes(16, "big"))

    def add(self, type_: str, data: dict, version: int = 0, advance_ms: int = 5) -> int:
        self.now += advance_ms
        self.events.append({"type": type_, "version": version, "timestamp": self.now,
                            "leader_epoch": self.epoch, "data": data})
        return len(self.events) - 1  # the record's offset

    def idle(self, seconds: int) -> None:
        """The active controller appends a NoOpRecord every 500 ms (metadata.max.idle.interval.ms)."""
        for _ in range(seconds * 2):
            self.add("NoOpRecord", {}, advance_ms=500)

    def leader_change(self, leader: int) -> None:
        self.epoch += 1
        voters = [{"VoterId": v, "VoterDirectoryId": uuids.ZERO_UUID} for v in (100, 101, 102)]
        self.add("LeaderChangeMessage", {"Version": 0, "LeaderId": leader, "Voters": voters,
                                         "GrantingVoters": voters[:2]})


def build_events(seed: int = 7) -> list[dict]:
    log = _Log(seed)
    log.leader_change(100)
    log.add("BeginTransactionRecord", {"Name": "Bootstrap records"})
    log.add("FeatureLevelRecord", {"Name": "metadata.version", "FeatureLevel": 19})
    log.add("EndTransactionRecord", {})
    for controller in (100, 101, 102):
        log.add("RegisterControllerRecord", {"ControllerId": controller, "IncarnationId": log.uuid()})
    epochs = {}
    for broker in BROKERS:
        epochs[broker] = log.add("RegisterBrokerRecord", {
            "BrokerId": broker, "IncarnationId": log.uuid(), "BrokerEpoch": len(log.events),
            "EndPoints": [{"Name": "PLAINTEXT", "Host": f"broker-{broker}", "Port": 9092, "SecurityProtocol": 0}],
            "Rack": f"rack-{broker}", "Fenced": True}, version=3)
    log.idle(2)
    for broker in BROKERS:
        log.add("BrokerRegistrationChangeRecord", {"BrokerId": broker, "BrokerEpoch": epochs[broker], "Fenced": -1})
    partitions: dict[tuple[str, int], dict] = {}
    for topic, count in TOPICS.items():
        topic_id = log.uuid()
        log.add("TopicRecord", {"Name": topic, "TopicId": topic_id})
        log.add("ConfigRecord", {"ResourceType": 2, "ResourceName": topic, "Name": "min.insync.replicas",
                                 "Value": "2"})
        for p in range(count):
            replicas = [BROKERS[(p + i) % 3] for i in range(3)]
            state = {"PartitionId": p, "TopicId": topic_id, "Replicas": replicas, "Isr": list(replicas),
                     "Leader": replicas[0], "LeaderEpoch": 0, "PartitionEpoch": 0}
            partitions[(topic, p)] = state
            log.add("PartitionRecord", dict(state), version=1)
        log.idle(3)
    log.idle(20)
    log.leader_change(101)  # the active controller fails over
    log.idle(10)
    # broker 2: controlled shutdown (KIP-841): it leaves every ISR and leads nothing, then it is fenced
    log.add("BrokerRegistrationChangeRecord", {"BrokerId": 2, "BrokerEpoch": epochs[2], "InControlledShutdown": 1},
            version=1)
    for state in partitions.values():
        if 2 not in state["Isr"]:
            continue
        change = {"PartitionId": state["PartitionId"], "TopicId": state["TopicId"]}
        state["Isr"] = [b for b in state["Isr"] if b != 2]
        change["Isr"] = list(state["Isr"])
        if state["Leader"] == 2:
            state["Leader"] = next(b for b in state["Replicas"] if b in state["Isr"])
            change["Leader"] = state["Leader"]
        log.add("PartitionChangeRecord", change)
    log.idle(5)
    log.add("BrokerRegistrationChangeRecord", {"BrokerId": 2, "BrokerEpoch": epochs[2], "Fenced": 1})
    log.idle(30)
    # broker 2 restarts: a new incarnation and epoch, unfenced once caught up, then back in the ISRs
    epochs[2] = log.add("RegisterBrokerRecord", {
        "BrokerId": 2, "IncarnationId": log.uuid(), "BrokerEpoch": len(log.events),
        "EndPoints": [{"Name": "PLAINTEXT", "Host": "broker-2", "Port": 9092, "SecurityProtocol": 0}],
        "Rack": "rack-2", "Fenced": True}, version=3)
    log.idle(2)
    log.add("BrokerRegistrationChangeRecord", {"BrokerId": 2, "BrokerEpoch": epochs[2], "Fenced": -1})
    log.idle(4)
    for state in partitions.values():
        if state["TopicId"] == partitions[("orders", 0)]["TopicId"] and 2 not in state["Isr"]:
            state["Isr"] = state["Isr"] + [2]
            log.add("PartitionChangeRecord", {"PartitionId": state["PartitionId"], "TopicId": state["TopicId"],
                                              "Isr": list(state["Isr"])})
    log.idle(60)
    return log.events


def what_if_requests(events: list[dict]) -> list[dict]:
    """Hand-written requests continuing the log: broker 3 asks to shut down (KIP-841 controlled
    shutdown), brokers 1 and 2 heartbeat as usual having caught up with it, then broker 3 asks again."""
    last = events[-1]["timestamp"]
    epochs = {e["data"]["BrokerId"]: e["data"]["BrokerEpoch"] for e in events if e["type"] == "RegisterBrokerRecord"}
    shutdown_at = len(events)  # the offset the first request will get, right after the log

    def heartbeat(broker: int, delay_ms: int, metadata_offset: int, shut_down: bool) -> dict:
        return {"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": last + delay_ms,
                "data": {"BrokerId": broker, "BrokerEpoch": epochs[broker],
                         "CurrentMetadataOffset": metadata_offset, "WantShutDown": shut_down}}

    return [heartbeat(3, 1000, shutdown_at - 1, True), heartbeat(1, 1500, shutdown_at, False),
            heartbeat(2, 1600, shutdown_at, False), heartbeat(3, 3000, shutdown_at, True)]


def write_sample(root: str | Path, seed: int = 7) -> tuple[Path, Path]:
    """(``__cluster_metadata-0`` directory, JSON lines of what-if requests) of the sample cluster."""
    root = Path(root)
    events = build_events(seed)
    log_dir = write_partition_dir(
        root / "__cluster_metadata-0", events, batch_records=25,
        codecs=("none", "gzip", "snappy", "lz4", "zstd"),
        quorum_state={"leaderId": 101, "leaderEpoch": events[-1]["leader_epoch"], "votedId": -1,
                      "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in (100, 101, 102)],
                      "data_version": 0})
    requests = root / "what-if-broker-3-shuts-down.jsonl"
    requests.write_text("".join(json.dumps(e) + "\n" for e in what_if_requests(events)))
    return log_dir, requests
