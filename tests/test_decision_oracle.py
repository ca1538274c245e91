"""The controller's decisions against an independent reference: ``kafka_reference.ReferenceController``,
a second, small controller written from Kafka's rules that shares no code with ``kraftlake.controller``.

The cluster simulator writes a busy cluster's requests (crashes, rolling restarts, ISR shrinks and
expansions, reassignments started, completed and cancelled, preferred elections, topics created and
deleted); the project's controller decides them (``shards.replay_log``, the streaming job's in-process
twin, with one shard: the whole image, where every answer can be Kafka's). The reference decides the same
requests on its own image, and at every offset the records and the answers must agree. A disagreement
stops the walk at its offset, with both sides shown.
"""

from __future__ import annotations

from collections import Counter
from itertools import groupby

import pytest

from kafka_reference import EVERY_INTERVAL, KAFKA_SCHEDULE, ReferenceController, set_fields
from kraftlake.codec.events import validate_event
from kraftlake.controller.shards import replay_log
from kraftlake.sim.cluster import DEFAULT_MIX, SimulationOptions, refusal, simulate

SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms default
IMBALANCE_CHECK_MS = 300_000  # Kafka's leader.imbalance.check.interval.seconds default, 300
CONFIG = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "broker.heartbeat.interval.ms": "2000"}
# crashes and rolling restarts often enough that a short log holds several
BUSY = {**DEFAULT_MIX, "crash": 1.0, "rolling_restart": 0.5}
# and every operation the simulator knows, the ones off by default too (unregistrations, partitions
# added, reassignments listed, unclean elections)
EVERYTHING = {**BUSY, "create_partitions": 0.5, "list_reassignments": 0.5, "unclean_election": 0.5, "unregister": 0.5}
SIMULATED_KINDS = {"BrokerRegistrationRequest", "BrokerHeartbeatRequest", "CreateTopicsRequest", "AlterPartitionRequest",
                   "ElectLeadersRequest", "AlterPartitionReassignmentsRequest", "DeleteTopicsRequest"}
EVERY_KIND = SIMULATED_KINDS | {"UnregisterBrokerRequest", "CreatePartitionsRequest", "ListPartitionReassignmentsRequest"}
RUNS = [
    pytest.param(SimulationOptions(brokers=6, topics=8, partitions_per_topic=6, seed=11, operation_interval_ms=30_000,
                                   mix=BUSY), 6000, SIMULATED_KINDS, id="6-brokers-3-racks"),
    pytest.param(SimulationOptions(brokers=4, topics=5, partitions_per_topic=4, replication_factor=2, racks=1,
                                   seed=7, operation_interval_ms=20_000, mix=BUSY), 4000, SIMULATED_KINDS,
                 id="4-brokers-no-racks"),
    pytest.param(SimulationOptions(brokers=4, topics=4, partitions_per_topic=3, racks=2, seed=1,
                                   operation_interval_ms=8_000, mix=EVERYTHING, stale_share=0.05), 5000, EVERY_KIND,
                 id="4-brokers-every-request"),
]


def canonical(records: list[dict]) -> list[tuple]:
    """(type, fields set) per record; within a run of PartitionChangeRecords by (topic id, partition),
    since Kafka walks a broker's partitions in hash order."""
    out: list[tuple] = []
    for is_change, run in groupby(records, key=lambda r: r["type"] == "PartitionChangeRecord"):
        items = [(r["type"], set_fields(r["type"], r["data"])) for r in run]
        if is_change:
            items.sort(key=lambda item: (item[1]["TopicId"], item[1]["PartitionId"]))
        out += items
    return out


def project_answer(request_type: str, data: dict, expected: dict) -> dict:
    """The project's response in the terms the reference predicts."""
    if request_type == "BrokerRegistrationRequest":
        return {k: data[k] for k in expected}
    if request_type == "BrokerHeartbeatRequest":
        return {k: data[k] for k in expected}
    if request_type == "CreateTopicsRequest":
        return {"Topics": [{k: t[k] for k in ("Name", "ErrorCode", "TopicId", "NumPartitions", "ReplicationFactor")
                            if k in e} for t, e in zip(data["Topics"], expected["Topics"])]}
    if request_type == "AlterPartitionRequest":
        return {"ErrorCode": data["ErrorCode"], "Topics": [
            {"TopicId": t["TopicId"], "Partitions": [{k: p[k] for k in e} for p, e in zip(t["Partitions"], et["Partitions"])]}
            for t, et in zip(data["Topics"], expected["Topics"])]}
    if request_type == "ElectLeadersRequest":
        return {"ErrorCode": data["ErrorCode"], "results": sorted(
            (t["Topic"], p["PartitionId"], p["ErrorCode"]) for t in data["ReplicaElectionResults"]
            for p in t["PartitionResult"])}
    if request_type == "AlterPartitionReassignmentsRequest":
        return {"ErrorCode": data["ErrorCode"], "results": sorted(
            (t["Name"], p["PartitionIndex"], p["ErrorCode"]) for t in data["Responses"] for p in t["Partitions"])}
    if request_type == "CreatePartitionsRequest":
        return {"results": [(r["Name"], r["ErrorCode"]) for r in data["Results"]],
                "placements": expected["placements"]}
    if request_type == "UnregisterBrokerRequest":
        return {"ErrorCode": data["ErrorCode"]}
    if request_type == "ListPartitionReassignmentsRequest":
        return {"ErrorCode": data["ErrorCode"], "ongoing": sorted(
            (t["Name"], p["PartitionIndex"], p["Replicas"], p["AddingReplicas"], p["RemovingReplicas"])
            for t in data["Topics"] for p in t["Partitions"])}
    if request_type == "DeleteTopicsRequest":
        return {"results": sorted((t["Name"], t["ErrorCode"]) for t in data["Responses"])}
    raise AssertionError(f"the reference does not decide {request_type}")


def walk(options: SimulationOptions, events: int, schedule: str) -> dict:
    """Every request through both controllers; what was compared, by kind. Fails at the first offset
    where they disagree."""
    requests = [validate_event(e) for e in simulate(events, options, CONFIG)]
    tables, _ = replay_log(requests, 1, CONFIG)
    records: dict[int, list[dict]] = {}
    for row in sorted(tables["controller_log"], key=lambda r: (r["offset"], r["seq"])):
        records.setdefault(row["offset"], []).append(row)
    answers = {r["offset"]: r for r in tables["responses"]}
    reference = ReferenceController(SESSION_TIMEOUT_MS, IMBALANCE_CHECK_MS, schedule)
    seen: Counter = Counter()
    for request in requests:
        offset, kind = request["offset"], request["type"]
        actual = records.get(offset, [])
        decision = reference.handle(request, lambda: actual)
        # the brokers the controller knows to be shutting down when it placed (after the fencings
        # due before this request, which end theirs; placing changes none)
        shutting_down = frozenset(b for b in reference.brokers if reference.shutting_down(b))
        where = f"offset {offset}, {kind} {request['data']}"
        assert canonical(actual) == canonical(decision.records), f"records differ at {where}"
        answer = answers[offset]
        expected = decision.response
        if kind == "CreateTopicsRequest":
            for topic in expected["Topics"]:
                if topic["ErrorCode"] is None:
                    pytest.fail(f"the project refused a topic Kafka would create at {where}: {answer['data']}")
                if topic["ErrorCode"] == 0:
                    count, factor = topic.pop("requested")
                    assert (topic["NumPartitions"], topic["ReplicationFactor"]) == (count, factor), where
                    assert reference.placement_problems(topic.pop("placement"), factor, shutting_down) == [], where
        if kind == "CreatePartitionsRequest":
            if any(code is None for _, code in expected["results"]):
                pytest.fail(f"the project placed no partitions where Kafka would at {where}: {answer['data']}")
            for placed, factor in expected["placements"]:
                assert reference.placement_problems(placed, factor, shutting_down) == [], where
        assert project_answer(kind, answer["data"], expected) == expected, f"answers differ at {where}"
        seen[(kind, "adopted placement" if decision.adopted else "exact")] += 1
        seen["records"] += len(actual)
        seen["refused"] += refusal(answer["data"]) is not None
    seen["imbalance checks"] = reference.checks
    return seen


@pytest.mark.parametrize("options,events,kinds", RUNS)
def test_every_decision_of_a_simulated_cluster_is_kafkas(options: SimulationOptions, events: int,
                                                         kinds: set[str]) -> None:
    """All of them but the timing of the leader-imbalance check, taken here as the project documents it
    (every interval from the take-over; the next test has Kafka's)."""
    seen = walk(options, events, EVERY_INTERVAL)
    assert {kind for kind, _ in (k for k in seen if isinstance(k, tuple))} == kinds
    assert seen["imbalance checks"] >= 1 and seen["refused"] >= 1


@pytest.mark.xfail(strict=True, reason="known deviation: kraftlake checks the leader balance every interval from "
                   "its take-over; Kafka one interval after the first write that leaves a partition imbalanced")
def test_the_leader_imbalance_check_comes_when_kafka_schedules_it() -> None:
    """``QuorumController.maybeScheduleNextBalancePartitionLeaders`` runs after every write event and
    schedules the check one interval after the first one that leaves a partition led by another replica
    than its first (seed 11: the first failover, 67 s in, so the check comes at 367 s, not at 300 s)."""
    options, events, _ = RUNS[0].values
    walk(options, events, KAFKA_SCHEDULE)
