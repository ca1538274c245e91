"""Malformed requests, driven by Kafka's message schemas: for a request type and a source of randomness,
an event as a careless or hostile sender might write it.

Every field of the type's version is visited and, at random, left out, given a value of another type or
null, or a value chosen to hurt: negative and huge ids and counts, the edges of its Kafka type (and just
past them), empty and duplicated lists, unknown topics and topic ids, real broker ids and epochs of the
base cluster (so that deep paths run, not only the first check), fields of other versions, unknown
fields, unknown versions. The randomness comes from hypothesis (``st.randoms``), so failures shrink.
"""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field
from typing import Any

from kraftlake.metadata.schemas import INT_RANGES, FieldSpec, StructSpec, registry

UNKNOWN_TOPIC_ID = "QkJCQkJCQkJCQkJCQkJCQg"  # a topic id no one created
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


@dataclass
class Known:
    """What the base cluster (or quorum) holds, for values that reach past the first checks."""

    ids: list[int]  # broker or replica ids
    epochs: list[int]
    epoch_of: dict[int, int] = field(default_factory=dict)  # a broker's current epoch, by id
    topics: list[str] = field(default_factory=list)
    topic_ids: list[str] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)  # well-formed Kafka record batches


def _integer(rng: random.Random, spec: FieldSpec, known: Known) -> int:
    low, high = INT_RANGES[spec.element]
    name = spec.name
    roll = rng.random()
    if roll < 0.15:
        return rng.choice([low, high, low - 1, high + 1, -1, 0])
    if roll < 0.55:
        if "Epoch" in name:
            return rng.choice(known.epochs + [-1, 0, 1])
        if name.endswith(("Id", "Ids", "Replicas", "Isr", "Voters", "Candidates", "Successors")) \
                or "Broker" in name or "Replica" in name or "Leader" in name:
            return rng.choice(known.ids + [-1, 0, 99])
        if "Partition" in name or "Index" in name:
            return rng.choice([0, 1, 2, 7, -1])
        if "Count" in name or "Num" in name or "Factor" in name:
            return rng.choice([-2, -1, 0, 1, 3, 50_000, min(high, 2**31 - 1)])
    return rng.randint(max(low, -5), min(high, 10**6))


def _string(rng: random.Random, spec: FieldSpec, known: Known) -> str:
    return rng.choice(known.topics + ["", "unknown-topic", "__consumer_offsets", "a" * 300, "bad name!",
                                      "..", "PLAINTEXT", "metadata.version", "min.insync.replicas", "-1"])


def _uuid(rng: random.Random, known: Known) -> str:
    return rng.choice(known.topic_ids + [UNKNOWN_TOPIC_ID, ZERO_UUID, "not-a-uuid", "QkJC"])


def _bytes(rng: random.Random, known: Known) -> str:
    roll = rng.random()
    if roll < 0.4 and known.records:
        raw = rng.choice(known.records)
    elif roll < 0.8:
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80)))
    else:
        return "not base64!"
    return base64.b64encode(raw).decode()


WRONG_TYPES = ("text", 1.5, [], {}, True, -1, [1, 2])


def nasty_value(rng: random.Random, spec: FieldSpec, version: int, known: Known) -> Any:
    roll = rng.random()
    if roll < 0.02:
        return None
    if roll < 0.04:
        return rng.choice(WRONG_TYPES)
    if spec.is_array:
        items = [nasty_element(rng, spec, version, known) for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 5]))]
        if items and rng.random() < 0.3:
            items.append(items[rng.randrange(len(items))])  # a duplicate entry
        return items
    return nasty_element(rng, spec, version, known)


def nasty_element(rng: random.Random, spec: FieldSpec, version: int, known: Known) -> Any:
    if spec.struct is not None:
        return nasty_struct(rng, spec.struct, version, known)
    kind = spec.element
    if kind in INT_RANGES:
        return _integer(rng, spec, known)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "string":
        return _string(rng, spec, known)
    if kind == "uuid":
        return _uuid(rng, known)
    if kind in ("bytes", "records"):
        return _bytes(rng, known)
    if kind == "float64":
        return rng.choice([0.0, -1.0, 1e308, 0.5])
    raise AssertionError(f"no generator for {kind}")


def nasty_struct(rng: random.Random, spec: StructSpec, version: int, known: Known) -> dict:
    out: dict[str, Any] = {}
    for f in spec.fields:
        if version not in f.versions:
            if rng.random() < 0.03:
                out[f.name] = nasty_value(rng, f, version, known)  # a field this version does not have
            continue
        if rng.random() < 0.1:
            continue  # missing
        out[f.name] = nasty_value(rng, f, version, known)
    if rng.random() < 0.03:
        out["NoSuchField"] = 1
    broker = out.get("BrokerId")
    if "BrokerEpoch" in out and isinstance(broker, int) and broker in known.epoch_of and rng.random() < 0.6:
        out["BrokerEpoch"] = known.epoch_of[broker]  # the right epoch: the request gets past the epoch check
    return out


def nasty_event(rng: random.Random, type_: str, known: Known, timestamp: int,
                envelope: dict[str, Any] | None = None) -> dict:
    """A JSON lines object of ``type_`` (see the module's docstring)."""
    spec = registry()[type_]
    versions = spec.valid_versions
    high = versions.high if versions.high is not None else versions.low + 3
    version = rng.randint(versions.low, high) if rng.random() < 0.93 else rng.choice([-1, high + 1, 999])
    event: dict[str, Any] = {"type": type_, "version": version, "timestamp": timestamp,
                             "data": nasty_struct(rng, spec, version, known)}
    if rng.random() < 0.02:
        event["timestamp"] = rng.choice(["yesterday", None, -5])
    if rng.random() < 0.02:
        event["extra"] = True
    for key, value in (envelope or {}).items():
        roll = rng.random()
        if roll < 0.05:
            continue
        event[key] = rng.choice([-1, 2**31, "two", 99]) if roll < 0.1 else value
    return event
