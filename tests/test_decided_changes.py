"""A decision's PartitionChangeRecords replayed and recorded in one pass (``shards._Step.decided_change``, on the
fast path) give what ``_Step.apply`` gives record by record (the plain path, ``step(fast=False)``): the same rows
in every table and the same state bytes.

The logs are test_request_fast_path's hard logs (AlterPartitions at every version, stale broker epochs, unknown
topics, other requests and other controllers' records between them), bent further so that the decisions refuse
some proposals -- a stale leader or partition epoch, an epoch ahead of ours, an ISR member of another incarnation,
an unknown partition -- and so that some AlterPartitions fall inside a transaction of another controller, whose
records replay holds back: ``decided_change`` must leave those to ``apply``. A third log is the soak's mix (most
proposals accepted) at every version of AlterPartition, bent alike.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from test_request_fast_path import CONFIG, _alter_partition_at, _versions, hard_log, replayed, replayed_alike

from kraftlake.codec.events import validate_event
from kraftlake.controller import shards
from kraftlake.metadata.errors import error_name
from kraftlake.sim.cluster import ClusterSimulator, SimulationOptions


def _bent_partition(part: dict, version: int, rng: random.Random) -> dict | None:
    """One proposal of an AlterPartition made one the decision refuses, now and then (None: not bent). Far off,
    so that no proposal the simulator sent stale becomes a valid one."""
    part = dict(part)
    roll = rng.random()
    if roll < 0.04:
        part["LeaderEpoch"] -= 1000  # FENCED_LEADER_EPOCH
    elif roll < 0.08:
        part["PartitionEpoch"] -= 1000  # INVALID_UPDATE_VERSION
    elif roll < 0.10:
        part["PartitionEpoch"] += 1000  # NOT_CONTROLLER
    elif roll < 0.13:
        part["PartitionIndex"] += 1000  # UNKNOWN_TOPIC_OR_PARTITION
    elif roll < 0.20 and version >= 3 and len(part["NewIsrWithEpochs"]) > 1:
        members = [dict(m) for m in part["NewIsrWithEpochs"]]
        members[-1]["BrokerEpoch"] += 1000  # another incarnation: INELIGIBLE_REPLICA (KIP-841)
        part["NewIsrWithEpochs"] = members
    else:
        return None
    return part


def _bent_copy(event: dict, rng: random.Random) -> dict | None:
    """A copy of an AlterPartition with only its bent proposals (None: none bent), sent before it. Each is
    refused and changes nothing, so the original is decided as the simulator expects: bending the original
    itself would refuse its change, and the partition's later proposals after it."""
    topics = []
    for topic in event["data"]["Topics"]:
        parts = [bent for bent in (_bent_partition(p, event["version"], rng) for p in topic["Partitions"]) if bent]
        if parts:
            topics.append({**topic, "Partitions": parts})
    return {**event, "data": {**event["data"], "Topics": topics}} if topics else None


def _soak_mix(seed: int, count: int = 4000) -> list[dict]:
    """The soak's traffic of a small cluster (``soak_log``'s), its AlterPartitions at every version: most of
    them accepted, one or two records each."""
    rng = random.Random(seed)
    sim = ClusterSimulator(SimulationOptions(seed=seed, brokers=8, topics=12, partitions_per_topic=10), {})
    names: dict[str, str] = {}
    events = []
    for event in sim.events(count):
        for tid, topic in sim.image.topics.items():
            names.setdefault(tid, topic.name)
        if event["type"] == "AlterPartitionRequest":
            version = rng.choice(_versions("AlterPartitionRequest"))
            event = {**event, "version": version, "data": _alter_partition_at(event["data"], version, names)}
        events.append({**validate_event(event), "source": "soak", "position": len(events) + 1})
    return events


# The share of AlterPartitions sent inside a transaction: few, as each starts a new term (another controller's
# records), which the simulator does not expect
TRANSACTIONS = 0.003


def decided_log(events: list[dict], seed: int, bend: bool = True) -> list[dict]:
    """``events`` with refused AlterPartitions among theirs (``_bent_copy``), and some AlterPartitions inside
    another controller's transaction: committed around the original, or aborted around a copy sent before it
    (whose records are dropped). Renumbered. ``bend``: False for none of the refused ones (their number does not
    matter; in the soak's mix they are followed by fenced brokers the simulator does not expect)."""
    rng = random.Random(seed)
    made: list[dict] = []
    for event in events:
        if event["type"] != "AlterPartitionRequest":
            made.append(event)
            continue
        bent = _bent_copy(event, rng) if bend else None
        if bent is not None:
            made.append(bent)
        if rng.random() < TRANSACTIONS:
            begin = {**event, "type": "BeginTransactionRecord", "version": 0, "data": {"Name": "other"}}
            if rng.random() < 0.7:
                made += [begin, event, {**event, "type": "EndTransactionRecord", "version": 0, "data": {}}]
            else:
                made += [begin, event, {**event, "type": "AbortTransactionRecord", "version": 0, "data": {}}, event]
        else:
            made.append(event)
    return [{**e, "offset": i, "position": i + 1} for i, e in enumerate(made)]


# (log, config, bent): the hard logs under test_request_fast_path's short timeouts, with refused proposals; the
# soak's mix under Kafka's defaults, most proposals accepted
LOGS = {"hard-3": (lambda: hard_log(3), CONFIG, True), "hard-5": (lambda: hard_log(5), CONFIG, True),
        "soak-17": (lambda: _soak_mix(17), {}, False)}


@pytest.fixture(scope="module")
def logs() -> dict[str, tuple[list[dict], dict]]:
    return {name: (decided_log(make(), i, bend), config) for i, (name, (make, config, bend)) in enumerate(LOGS.items())}


@pytest.fixture
def taken(monkeypatch) -> Counter:
    """How often ``decided_change`` took a record, and refused one."""
    counts: Counter = Counter()
    original = shards._Step.decided_change

    def counted(self, request, event, batch, place):
        took = original(self, request, event, batch, place)
        counts["took" if took else "refused"] += 1
        return took

    monkeypatch.setattr(shards._Step, "decided_change", counted)
    return counts


def _alter_errors(table: list[dict]) -> Counter:
    return Counter(error_name(p["ErrorCode"]) for r in table if r["request_type"] == "AlterPartitionRequest"
                   for t in r["data"]["Topics"] for p in t["Partitions"])


def test_the_logs_refuse_proposals_in_every_way_bent(logs):
    errors = Counter()
    for events, config in logs.values():  # (two shards: some AlterPartitions about both)
        errors += _alter_errors(replayed(events, 2, [], fast=False, config=config)[0]["responses"])
    assert {"NONE", "FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION", "NOT_CONTROLLER", "UNKNOWN_TOPIC_OR_PARTITION",
            "UNKNOWN_TOPIC_ID", "INELIGIBLE_REPLICA", "OPERATION_NOT_ATTEMPTED"} <= set(errors), errors
    assert errors["NONE"] > 500, errors
    versions = {e["version"] for events, _ in logs.values() for e in events if e["type"] == "AlterPartitionRequest"}
    assert versions == set(_versions("AlterPartitionRequest"))


@pytest.mark.parametrize("name", list(LOGS))
@pytest.mark.parametrize("shards_", [1, 2, 3, 4])
def test_decided_changes_are_recorded_as_record_by_record(logs, taken, name, shards_):
    events, config = logs[name]
    rng = random.Random(f"{name}-{shards_}")
    cuts = sorted(rng.sample(range(1, len(events)), rng.randrange(0, 12)))
    replayed_alike(events, shards_, cuts, config)
    assert taken["took"] > 100, taken


@pytest.mark.parametrize("name", list(LOGS))
def test_every_micro_batch_of_one_event(logs, taken, name):
    """A decision's records are recorded alike however the log is cut (one event per step here)."""
    events, config = logs[name]
    events = events[:900]
    replayed_alike(events, 3, list(range(1, len(events))), config)
    assert taken["took"] > 0


@pytest.mark.parametrize("chunk", [997, 4000])
def test_the_soak_mix_in_four_shards(logs, taken, chunk):
    """The workload it is for: four shards, the Kafka defaults, micro-batches as the bench cuts them."""
    events, config = logs["soak-17"]
    replayed_alike(events, 4, list(range(chunk, len(events), chunk)), config)
    assert taken["took"] > 1000 and taken["refused"] > 0, taken  # (refused: inside the transactions)


def test_a_record_inside_a_transaction_or_of_no_partition_is_left_to_apply(logs):
    """``decided_change`` refuses, with nothing changed, what replay would hold back or reject."""
    state = shards.ShardState.from_bytes(None)
    events, config = logs["soak-17"]
    shards.step(0, 1, state, [e for e in events[:400] if e["type"] != "AlterPartitionRequest"], config)
    step = shards._Step(0, 1, state, config)
    topic = next(t for t in state.image.topics.values() if len(t.partitions))
    partition = next(iter(topic.partitions.values()))
    request = {"type": "AlterPartitionRequest", "offset": 10_000, "timestamp": 1, "leader_epoch": 1}
    data = {"TopicId": topic.id, "PartitionId": partition.partition_id, "Isr": list(partition.isr), "Leader": -2,
            "Replicas": None, "RemovingReplicas": None, "AddingReplicas": None, "LeaderRecoveryState": -1,
            "Directories": None, "EligibleLeaderReplicas": None, "LastKnownElr": None}
    record = {"type": "PartitionChangeRecord", "version": 0, "offset": 10_000, "timestamp": 1, "leader_epoch": 1,
              "source": None, "position": None}
    before = state.to_bytes()
    assert not step.decided_change(request, {**record, "data": {**data, "PartitionId": 999}}, None, 0)
    state.image.pending_kind, state.image.pending_events = "transaction", []
    assert not step.decided_change(request, {**record, "data": data}, None, 0)
    state.image.pending_kind = None
    assert state.to_bytes() == before and not step.out.rows
    assert step.decided_change(request, {**record, "data": data}, None, 0)
    assert state.image.partition(topic.id, partition.partition_id).partition_epoch == partition.partition_epoch + 1
