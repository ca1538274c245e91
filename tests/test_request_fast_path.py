"""The fast paths for requests that change nothing (a steady heartbeat, a heartbeat of another incarnation,
an AlterPartition about other shards' topics; ``shards._Step.settled``) decide exactly as the plain path
(``step(fast=False)``).

The logs are the cluster simulator's, made harder on purpose and seeded: heartbeats and AlterPartitions
are sent at every version of their schemas (``schemas/request``), and some of them are bent so that the
fast path must refuse them (stale epochs, WantFence, offline directories, event time going back,
unknown brokers and topics); the request types the simulator never sends (UnregisterBroker,
CreatePartitions, ListPartitionReassignments) and records of another controller (a new term) are mixed
in. Each log is cut into micro-batches at seeded random places and replayed by 1 to 4 shards both ways;
the tables must hold the same rows and the shards' states must serialise to the same bytes.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from kraftlake.codec.events import validate_event
from kraftlake.controller import shards
from kraftlake.controller.cluster_control import (ControllerState, decide_broker_heartbeat, running_sessions,
                                                  steady_heartbeat)
from kraftlake.controller.decisions import Context
from kraftlake.controller.dispatch import BROKER_REQUESTS, PARTITION_REQUESTS, TOPIC_REQUESTS
from kraftlake.controller.shards import ShardState, apply_outputs, routed, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.metadata.schemas import registry
from kraftlake.sim.cluster import DEFAULT_MIX, ClusterSimulator, SimulationOptions

EVENTS = 2500
# A short session timeout and frequent leader-imbalance checks, so that sessions expire and checks fall due
# between steady heartbeats; crashes and rolling restarts often, so that brokers fence and unfence, and
# topics created and reassigned often, so that some are placed while a broker is in controlled shutdown.
CONFIG = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "2000",
          "leader.imbalance.check.interval.seconds": "20"}
OPTIONS = dict(brokers=6, topics=8, partitions_per_topic=4, operation_interval_ms=15_000,
               mix={**DEFAULT_MIX, "crash": 1.5, "rolling_restart": 1.0, "create_topic": 2.0, "reassign": 2.0})


def _versions(type_: str) -> list[int]:
    versions = registry()[type_].valid_versions
    return list(range(versions.low, versions.high + 1))


def _alter_partition_at(data: dict, version: int, names: dict[str, str]) -> dict:
    """An AlterPartitionRequest v3 body (as the simulator writes it) at ``version``: topics by name
    before v2, the new ISR as ids before v3, no LeaderRecoveryState before v1."""
    topics = []
    for topic in data["Topics"]:
        parts = []
        for part in topic["Partitions"]:
            wire = {"PartitionIndex": part["PartitionIndex"], "LeaderEpoch": part["LeaderEpoch"],
                    "PartitionEpoch": part["PartitionEpoch"]}
            if version >= 1:
                wire["LeaderRecoveryState"] = part["LeaderRecoveryState"]
            if version >= 3:
                wire["NewIsrWithEpochs"] = part["NewIsrWithEpochs"]
            else:
                wire["NewIsr"] = [member["BrokerId"] for member in part["NewIsrWithEpochs"]]
            parts.append(wire)
        key = {"TopicId": topic["TopicId"]} if version >= 2 else {"TopicName": names.get(topic["TopicId"], "gone")}
        topics.append({**key, "Partitions": parts})
    return {"BrokerId": data["BrokerId"], "BrokerEpoch": data["BrokerEpoch"], "Topics": topics}


def _bent(event: dict, rng: random.Random, sim: ClusterSimulator, names: dict[str, str]) -> dict:
    """The event at a random version of its type, and now and then changed so that it is no longer the
    steady case (only heartbeats and AlterPartitions; the others as they are)."""
    type_, data = event["type"], dict(event["data"])
    if type_ == "BrokerHeartbeatRequest":
        version = rng.choice(_versions(type_))
        roll = rng.random()
        if roll < 0.02:
            data["WantFence"] = True
        elif roll < 0.04:
            data["BrokerEpoch"] += 1
        elif roll < 0.05:
            data["BrokerId"] = 99
        elif roll < 0.07 and version >= 1:
            data["OfflineLogDirs"] = [sim.brokers[data["BrokerId"]].log_dir]
        elif roll < 0.09:
            event = {**event, "timestamp": event["timestamp"] - rng.randrange(1, 8000)}
        if version < 1:
            data.pop("OfflineLogDirs", None)
        return {**event, "version": version, "data": data}
    if type_ == "AlterPartitionRequest":
        version = rng.choice(_versions(type_))
        roll = rng.random()
        if roll < 0.03:
            data["BrokerEpoch"] -= 1
        elif roll < 0.05 and data["Topics"]:
            data["Topics"] = [*data["Topics"], {**data["Topics"][0], "TopicId": "AAAAAAAAAAAAAAAAAAAAAQ"}]
        return {**event, "version": version, "data": _alter_partition_at(data, version, names)}
    return event


def _extra(rng: random.Random, event: dict, sim: ClusterSimulator, names: dict[str, str]) -> dict | None:
    """Now and then, a request the simulator never sends, or a record of another controller."""
    roll = rng.random()
    broker = rng.randrange(1, OPTIONS["brokers"] + 1)
    name = rng.choice(sorted(names.values())) if names else "topic-0"
    if roll < 0.002:
        return {"type": "UnregisterBrokerRequest", "version": 0, "data": {"BrokerId": broker}}
    if roll < 0.004:
        return {"type": "CreatePartitionsRequest", "version": rng.choice(_versions("CreatePartitionsRequest")),
                "data": {"Topics": [{"Name": name, "Count": OPTIONS["partitions_per_topic"] + rng.randrange(1, 3),
                                     "Assignments": None}], "TimeoutMs": 1000, "ValidateOnly": False}}
    if roll < 0.006:
        return {"type": "ListPartitionReassignmentsRequest", "version": 0, "data": {"Topics": None}}
    if roll < 0.007:
        return {"type": "ConfigRecord", "version": 0,
                "data": {"ResourceType": 2, "ResourceName": name, "Name": "min.insync.replicas", "Value": "1"}}
    return None


def hard_log(seed: int) -> list[dict]:
    """A simulated log (as ingest hands it on) with every request type, its fast-path types at every version."""
    rng = random.Random(seed)
    sim = ClusterSimulator(SimulationOptions(seed=seed, **OPTIONS), CONFIG)
    names: dict[str, str] = {}
    events: list[dict] = []
    for event in sim.events(EVENTS):
        for tid, topic in sim.image.topics.items():
            names.setdefault(tid, topic.name)
        extra = _extra(rng, event, sim, names)
        items = ([extra] if extra else []) + [_bent(event, rng, sim, names)]
        if event["type"] == "BrokerHeartbeatRequest" and event["data"]["WantShutDown"] and rng.random() < 0.5:
            # a topic placed while the broker may be in controlled shutdown (placement skips it)
            items.append({"type": "CreateTopicsRequest", "version": 7, "data": {"Topics": [
                {"Name": f"placed-{len(events)}", "NumPartitions": 6, "ReplicationFactor": 3}]}})
        for item in items:
            line = validate_event({**item, "timestamp": item.get("timestamp", event["timestamp"])})
            events.append({**line, "offset": len(events), "source": "hard.jsonl", "position": len(events) + 1})
    return events


def replayed(events: list[dict], shards: int, cuts: list[int], fast: bool, config: dict = CONFIG
             ) -> tuple[dict, list[bytes]]:
    """Tables and shard states after the shards' steps over the log cut into micro-batches at ``cuts``."""
    states = [ShardState(ClusterImage()) for _ in range(shards)]
    tables: dict = {}
    for lo, hi in zip([0, *cuts], [*cuts, len(events)]):
        per_shard = routed(events[lo:hi], shards)
        outputs = [o for shard in range(shards)
                   for o in step(shard, shards, states[shard], per_shard[shard], config, fast=fast)]
        apply_outputs(tables, outputs, config)
    return tables, [s.to_bytes() for s in states]


def replayed_alike(events: list[dict], shards: int, cuts: list[int], config: dict = CONFIG) -> dict:
    """The plain path's tables, once the fast path's are found to hold the same rows and its shards' states to
    serialise to the same bytes."""
    plain, plain_states = replayed(events, shards, cuts, fast=False, config=config)
    fast, fast_states = replayed(events, shards, cuts, fast=True, config=config)
    assert sorted(fast) == sorted(plain)
    for name in plain:
        assert rows(fast[name]) == rows(plain[name]), name
    assert fast_states == plain_states
    return plain


def rows(table: dict | list) -> list[str]:
    """A table's rows as a sorted list (appended rows of several shards at one offset come in no set order)."""
    return sorted(json.dumps(r, sort_keys=True, default=repr) for r in (table.values() if isinstance(table, dict)
                                                                        else table))


@pytest.fixture(scope="module")
def logs() -> dict[int, list[dict]]:
    return {seed: hard_log(seed) for seed in (3, 5)}


def test_the_logs_have_every_request_type_and_fast_path_version(logs):
    seen = {(e["type"], e["version"]) for log in logs.values() for e in log}
    types = {t for t, _ in seen}
    assert set(BROKER_REQUESTS) | set(TOPIC_REQUESTS) | set(PARTITION_REQUESTS) <= types
    for type_ in ("BrokerHeartbeatRequest", "AlterPartitionRequest"):
        assert {(type_, v) for v in _versions(type_)} <= seen


@pytest.mark.parametrize("seed", [3, 5])
@pytest.mark.parametrize("shards", [1, 2, 3, 4])
def test_fast_path_decides_as_the_plain_path(logs, seed, shards):
    events = logs[seed]
    rng = random.Random(seed * 10 + shards)
    cuts = sorted(rng.sample(range(1, len(events)), rng.randrange(0, 12)))
    plain_tables = replayed_alike(events, shards, cuts)
    # the log made the controller work: sessions expired, brokers were fenced by it, records were written
    assert len(plain_tables["responses"]) == sum(1 for e in events if registry()[e["type"]].kind == "request")
    causes = {r["cause"] for r in plain_tables["broker_history"]}
    assert {"session_expired", "fence_requested"} <= causes, causes
    assert plain_tables["controller_log"]


def test_one_batch_and_one_batch_per_event_agree(logs):
    """The fast path's shortcuts last for one step: batching must not matter to it either."""
    events = logs[3][:800]
    whole, _ = replayed(events, 3, [], fast=True)
    single, _ = replayed(events, 3, list(range(1, len(events))), fast=True)
    plain, _ = replayed(events, 3, list(range(1, len(events))), fast=False)
    for name in whole:
        assert rows(whole[name]) == rows(single[name]) == rows(plain[name]), name


def test_stale_heartbeats_take_the_fast_path(logs, monkeypatch):
    """The logs hold heartbeats of other incarnations (a crashed broker's, bent epochs, an unknown broker)
    that arrive while the step is settled, so the comparison above covers their fast path."""
    answered = []
    stale_heartbeat = shards.stale_heartbeat  # (asked by the fast path only, of heartbeats that are not steady)

    def stale(image, data):
        found = stale_heartbeat(image, data)
        if found:
            answered.append(data)
        return found

    monkeypatch.setattr(shards, "stale_heartbeat", stale)
    replayed(logs[3], 2, [], fast=True)
    assert len(answered) >= 100, len(answered)  # 1,354 on this log (both shards)


def _unclean_elections(table: list[dict]) -> int:
    """Partition changes that elected a leader from outside the ISR (it recovers first: Kafka's unclean election)."""
    return sum(1 for r in table if r["change"] == "change" and r["leader_recovery_state"] == 1
               and r["leader"] not in (r["isr_before"] or []))


def test_a_config_changed_within_a_step_is_read_by_the_decisions_after_it(logs):
    """A step keeps each topic's election and min.insync.replicas until a record may change a config: every
    topic turned to unclean leader election halfway through one batch decides as with one step per event
    (where nothing is kept), and elects unclean leaders after it."""
    events = logs[5][:1500]
    names = sorted({e["data"]["Topics"][0]["Name"] for e in events if e["type"] == "CreateTopicsRequest"})
    half = len(events) // 2
    configs = [{"type": "ConfigRecord", "version": 0, "timestamp": events[half]["timestamp"],
                "data": {"ResourceType": 2, "ResourceName": name, "Name": "unclean.leader.election.enable",
                         "Value": "true"}} for name in names]
    log = [{**e, "offset": i} for i, e in enumerate(events[:half] + [validate_event(c) for c in configs]
                                                    + events[half:])]
    whole, whole_states = replayed(log, 2, [], fast=True)
    single, single_states = replayed(log, 2, list(range(1, len(log))), fast=True)
    for name in whole:
        assert rows(whole[name]) == rows(single[name]), name
    assert whole_states == single_states
    assert _unclean_elections([r for r in whole["partition_history"] if r["applied_offset"] > half])



# Anomaly thresholds short enough that reassignments get stuck and brokers flap between heartbeats: the
# event times at which a tick has work (``Anomalies.idle_until``) fall inside runs of fast-path requests.
SHORT_THRESHOLDS = {**CONFIG, "kraftlake.anomaly.reassignment.stuck.ms": "4000",
                    "kraftlake.anomaly.broker.flapping.unfencings": "1",
                    "kraftlake.anomaly.broker.flapping.window.ms": "30000"}


@pytest.mark.parametrize("shards_, cuts", [(2, 0), (3, 9)])
def test_calm_runs_decide_as_the_plain_path_when_thresholds_fall_due_between_heartbeats(logs, shards_, cuts):
    """The calm loop (``_Step.calm_requests``) skips the tick while no threshold can fall due; with short
    thresholds they fall due between heartbeats, and the anomalies they open must be the plain path's."""
    events = logs[5]
    at = sorted(random.Random(cuts).sample(range(1, len(events)), cuts))
    plain = replayed_alike(events, shards_, at, SHORT_THRESHOLDS)
    kinds = {r["kind"] for r in plain["anomalies"].values()}
    assert {"stuck_reassignment", "broker_flapping"} <= kinds, kinds


def test_the_calm_loop_takes_most_requests_and_finds_a_stale_quiet_bound_again(logs, monkeypatch):
    """The comparisons above cover the calm loop only if it runs: it takes most heartbeats and
    AlterPartitions of the logs; and when event time passes the sessions' bound found earlier
    (``quiet_until``), it finds the bound again instead of leaving the heartbeat to the full path."""
    taken, decided = [], []
    calm_requests, request = shards._Step.calm_requests, shards._Step.request

    def counting(self, events, i, stop):
        end = calm_requests(self, events, i, stop)
        taken.append(end - i)
        return end

    def deciding(self, event):
        if event["type"] == "BrokerHeartbeatRequest":
            decided.append(event["offset"])
        request(self, event)

    monkeypatch.setattr(shards._Step, "calm_requests", counting)
    monkeypatch.setattr(shards._Step, "request", deciding)
    events = logs[3]
    replayed(events, 2, [], fast=True)
    fast_path_types = sum(1 for e in events if e["type"] in ("BrokerHeartbeatRequest", "AlterPartitionRequest"))
    assert sum(taken) > fast_path_types  # both shards: more than half of them
    # 212 heartbeats decided in full by the two shards (of 2 × 1,339); 274 when the bound was not found again
    assert len(decided) < 240, len(decided)


def soak_log(count: int, seed: int) -> list[dict]:
    """The soak's traffic (``benchmarks.core.simulated_requests``: the simulator's default mix, nine in ten
    requests heartbeats) of a small cluster, as ingest hands it on."""
    sim = ClusterSimulator(SimulationOptions(seed=seed, brokers=8, topics=12, partitions_per_topic=10), {})
    return [{**validate_event(e), "offset": i, "source": "soak", "position": i + 1}
            for i, e in enumerate(sim.events(count))]


@pytest.mark.parametrize("chunk", [997, 5000])
def test_the_soak_mix_in_four_shards_decides_as_the_plain_path(chunk):
    """The workload the calm loop is for, at the shape ``benchmarks/core.py:core_replay_chunked`` runs it:
    four shards, micro-batches of ``chunk`` requests, the Kafka defaults."""
    events = soak_log(5000, 11)
    cuts = list(range(chunk, len(events), chunk))
    plain = replayed_alike(events, 4, cuts, {})
    assert len(plain["responses"]) == len(events)


def _states(events: list[dict], shards_: int) -> list[ShardState]:
    """The shards' states after one step each over ``events``, read back from their bytes (no registration
    made yet: every partition is only its row)."""
    _, states = replayed(events, shards_, [], fast=True)
    return [ShardState.from_bytes(raw) for raw in states]


def test_a_steady_heartbeat_is_one_the_full_decision_keeps_as_it_is(logs):
    """``steady_heartbeat`` over the sessions ``running_sessions`` found takes a heartbeat only where the full
    decision (``decide_broker_heartbeat``) writes nothing and answers unfenced, not to shut down, with the
    same IsCaughtUp and the same session after; every other heartbeat it leaves alone. Asked of every broker
    of a cluster the hard log left in every state (fenced, shutting down, crashed, ...), with every bend."""
    taken = 0
    for cut in (700, 1500, 2400):
        [state] = _states(logs[5][:cut], 1)
        image, sessions = state.image, state.controller.sessions
        now = max(s.contact_ms for s in sessions.values() if s.contact_ms is not None) + 1
        for broker_id in [*image.brokers, 99]:
            epoch = image.brokers[broker_id].epoch if broker_id in image.brokers else 5
            directories = list(image.brokers[broker_id].directories) if broker_id in image.brokers else []
            for bend in ({}, {"WantShutDown": True}, {"WantFence": True}, {"BrokerEpoch": epoch + 1},
                         {"OfflineLogDirs": directories[:1]}, {"OfflineLogDirs": ["AAAAAAAAAAAAAAAAAAAAAA"]}):
                request = {**validate_event({"type": "BrokerHeartbeatRequest", "timestamp": now, "data": {
                    "BrokerId": broker_id, "BrokerEpoch": epoch, "CurrentMetadataOffset": 40, **bend}}),
                    "offset": cut + 1}
                fast, full = (ControllerState.from_dict(state.controller.to_dict()) for _ in range(2))
                steady = steady_heartbeat(image, running_sessions(image, fast), request["data"], now)
                decision = decide_broker_heartbeat(image.copy(), full, request,
                                                   Context(now_ms=now, offset=cut + 1, whole_image=False))
                if steady is None:
                    assert fast.to_dict() == state.controller.to_dict()  # nothing changed
                    continue
                taken += 1
                assert not decision.records
                assert decision.response["data"] == {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": steady,
                                                     "IsFenced": False, "ShouldShutDown": False}
                assert fast.to_dict() == full.to_dict()
    assert taken >= 10, taken


def test_a_partition_made_from_its_row_is_the_one_made_in_bulk(logs):
    """``PartitionStore.make_one`` (a registration read value by value) against ``make``, for every partition
    of the images the hard logs leave (ELRs, directories, reassignments, recovering leaders among them)."""
    made = 0
    for events in logs.values():
        for state in _states(events, 2):
            store = state.image.store
            for topic_id, topic in state.image.topics.items():
                for row in topic.partitions.rows.values():
                    assert store.make_one(row, topic_id) == store.make([row], topic_id)[0]
                    made += 1
    assert made >= 100, made


def test_a_list_column_is_the_whole_tuple_table_taken_by_its_codes():
    """``shards._lists`` converts only the tuples its codes name; the column is the one the whole table gives."""
    rng = random.Random(4)
    ints = [()] + [tuple(rng.sample(range(9), rng.randrange(1, 4))) for _ in range(300)]
    dirs = [()] + [tuple(rng.choice("ABC") * 22 for _ in range(rng.randrange(1, 3))) for _ in range(20)]
    for values, item in ((ints, pa.int32()), (dirs, pa.string())):
        for size in (0, 1, 7, 500):
            codes = np.array([rng.randrange(len(values)) for _ in range(size)], np.int32)
            whole = pa.array(values, pa.list_(item)).take(pa.array(codes, pa.int32()))
            assert shards._lists(values, codes, item).equals(whole)
