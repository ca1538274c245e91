"""Generated metadata logs of any size: records a Kafka controller could have written.

Deterministic for a seed. Brokers register and are unfenced, topics and partitions are created, then
followers drop out of and rejoin ISRs and leaders move to another ISR member, between the NoOpRecords
the active controller appends. Every record applies to the image (no rejections), so throughput
measures the real replay path.
"""

from __future__ import annotations

import random
from typing import Iterator

from kraftlake.metadata import uuids
from kraftlake.metadata.schemas import registry

START_MS = 1_763_550_000_000


def _full(type_: str, data: dict) -> dict:
    return {**registry()[type_].defaults(), **data}


class _Log:
    """Offsets from 0 and event times a few milliseconds apart, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = START_MS
        self.offset = 0

    def emit(self, type_: str, data: dict, version: int = 0) -> dict:
        self.now += self.rng.randint(1, 20)
        event = {"offset": self.offset, "leader_epoch": 1, "timestamp": self.now, "type": type_,
                 "version": version, "data": _full(type_, data)}
        self.offset += 1
        return event

    def uuid(self) -> str:
        return uuids.from_bytes(self.rng.getrandbits(128).to_bytes(16, "big"))

    def brokers(self, brokers: int) -> list[dict]:
        """Brokers 1..``brokers`` register (fenced, epoch = the record's offset), then are unfenced."""
        epochs = {}
        records = []
        for b in range(1, brokers + 1):
            epochs[b] = self.offset
            records.append(self.emit("RegisterBrokerRecord", {
                "BrokerId": b, "IncarnationId": self.uuid(), "BrokerEpoch": self.offset, "Rack": f"rack-{b % 3}",
                "Fenced": True}, 1))
        for b in range(1, brokers + 1):
            records.append(self.emit("BrokerRegistrationChangeRecord",
                                     {"BrokerId": b, "BrokerEpoch": epochs[b], "Fenced": -1}))
        return records


def generate(events: int, brokers: int = 6, topics: int = 20, partitions_per_topic: int = 50,
             seed: int = 1, noop_share: float = 0.3) -> Iterator[dict]:
    """``events`` records in offset order (offsets from 0), ADR 0001 dicts with every field set."""
    log = _Log(seed)
    rng, emit = log.rng, log.emit
    setup: list[dict] = log.brokers(brokers)
    state: list[dict] = []  # per partition: topic id, id, replicas, isr, leader
    for t in range(topics):
        topic_id = log.uuid()
        setup.append(emit("TopicRecord", {"Name": f"topic-{t}", "TopicId": topic_id}))
        for p in range(partitions_per_topic):
            replicas = rng.sample(range(1, brokers + 1), min(3, brokers))
            state.append({"TopicId": topic_id, "PartitionId": p, "Replicas": replicas, "Isr": list(replicas),
                          "Leader": replicas[0]})
            setup.append(emit("PartitionRecord", {"PartitionId": p, "TopicId": topic_id, "Replicas": replicas,
                                                  "Isr": list(replicas), "Leader": replicas[0]}, 1))
    for event in setup[:events]:
        yield event
    while log.offset < events:
        roll = rng.random()
        if roll < noop_share:
            yield emit("NoOpRecord", {})
            continue
        part = rng.choice(state)
        change = {"PartitionId": part["PartitionId"], "TopicId": part["TopicId"]}
        outside = [r for r in part["Replicas"] if r not in part["Isr"]]
        if outside and (roll < 0.75 or len(part["Isr"]) == 1):  # a follower caught up
            part["Isr"] = part["Isr"] + [rng.choice(outside)]
        elif len(part["Isr"]) > 1:  # a follower fell behind, or the leader moved to another ISR member
            dropped = rng.choice(part["Isr"])
            part["Isr"] = [r for r in part["Isr"] if r != dropped]
            if dropped == part["Leader"]:
                part["Leader"] = part["Isr"][0]
                change["Leader"] = part["Leader"]
        else:
            yield emit("NoOpRecord", {})
            continue
        change["Isr"] = list(part["Isr"])
        yield emit("PartitionChangeRecord", change)


def failover_cluster(partitions: int, brokers: int = 12, broker: int = 1, partitions_per_topic: int = 100,
                     seed: int = 1) -> Iterator[dict]:
    """A cluster where ``broker`` is a replica and ISR member of every one of ``partitions`` partitions
    (three replicas each) and leads a third of them: its fencing or controlled shutdown changes every
    partition. Records only, in offset order; the brokers are registered and unfenced first."""
    log = _Log(seed)
    yield from log.brokers(brokers)
    others = [b for b in range(1, brokers + 1) if b != broker]
    for t in range((partitions + partitions_per_topic - 1) // partitions_per_topic):
        topic_id = log.uuid()
        yield log.emit("TopicRecord", {"Name": f"topic-{t}", "TopicId": topic_id})
        for p in range(min(partitions_per_topic, partitions - t * partitions_per_topic)):
            replicas = log.rng.sample(others, min(2, len(others)))
            replicas.insert((t * partitions_per_topic + p) % (len(replicas) + 1), broker)
            yield log.emit("PartitionRecord", {"PartitionId": p, "TopicId": topic_id, "Replicas": replicas,
                                               "Isr": list(replicas), "Leader": replicas[0]}, 1)
