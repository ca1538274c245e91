"""Generated metadata logs of any size: records a Kafka controller could have written.

Deterministic for a seed. Brokers register and are unfenced, topics and partitions are created, then
followers drop out of and rejoin ISRs and leaders move to another ISR member, between the NoOpRecords
the active controller appends. Every record applies to the image (no rejections), so throughput
measures the real replay path.
"""

from __future__ import annotations

import random
from typing import Iterator

from kraftlake import uuids
from kraftlake.schemas import registry

START_MS = 1_763_550_000_000


def _full(type_: str, data: dict) -> dict:
    return {**registry()[type_].defaults(), **data}


def generate(events: int, brokers: int = 6, topics: int = 20, partitions_per_topic: int = 50,
             seed: int = 1, noop_share: float = 0.3) -> Iterator[dict]:
    """``events`` records in offset order (offsets from 0), ADR 0001 dicts with every field set."""
    rng = random.Random(seed)
    now = START_MS
    offset = 0
    epochs: dict[int, int] = {}

    def emit(type_: str, data: dict, version: int = 0) -> dict:
        nonlocal now, offset
        now += rng.randint(1, 20)
        event = {"offset": offset, "leader_epoch": 1, "timestamp": now, "type": type_, "version": version,
                 "data": _full(type_, data)}
        offset += 1
        return event

    def uuid() -> str:
        return uuids.from_bytes(rng.getrandbits(128).to_bytes(16, "big"))

    setup: list[dict] = []
    for b in range(1, brokers + 1):
        epochs[b] = offset
        setup.append(emit("RegisterBrokerRecord", {"BrokerId": b, "IncarnationId": uuid(), "BrokerEpoch": offset,
                                                   "Rack": f"rack-{b % 3}", "Fenced": True}, 1))
    for b in range(1, brokers + 1):
        setup.append(emit("BrokerRegistrationChangeRecord", {"BrokerId": b, "BrokerEpoch": epochs[b], "Fenced": -1}))
    state: list[dict] = []  # per partition: topic id, id, replicas, isr, leader
    for t in range(topics):
        topic_id = uuid()
        setup.append(emit("TopicRecord", {"Name": f"topic-{t}", "TopicId": topic_id}))
        for p in range(partitions_per_topic):
            replicas = rng.sample(range(1, brokers + 1), min(3, brokers))
            state.append({"TopicId": topic_id, "PartitionId": p, "Replicas": replicas, "Isr": list(replicas),
                          "Leader": replicas[0]})
            setup.append(emit("PartitionRecord", {"PartitionId": p, "TopicId": topic_id, "Replicas": replicas,
                                                  "Isr": list(replicas), "Leader": replicas[0]}, 1))
    for event in setup[:events]:
        yield event
    while offset < events:
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
