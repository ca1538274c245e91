"""The cluster simulator (``kraftlake.sim.cluster``, ``jobs/simulate.py``).

The simulator decides every request with the project's own controller (``dispatch.handle_request``), so
comparing its answers with ``shards.replay_log`` (two shards, the streaming job's in-process twin) checks
the sharding and that the log says what the simulator meant, not that a decision is Kafka's: that is
``test_decision_oracle.py``'s, against a controller written from Kafka's rules alone. The rest is checked
against Kafka's rules as written here (heartbeat interval, session timeout, KIP-841).
"""

from __future__ import annotations

from collections import Counter

import pytest

from kraftlake.sim.cluster import DEFAULT_MIX, ClusterSimulator, SimulationOptions, simulate
from kraftlake.codec.events import validate_event
from kraftlake.controller.invariants import check_events, merge_logs
from kraftlake.controller.shards import replay_log
from kraftlake.storage import Warehouse
from kraftlake.storage.tables import rows_to_events

from kraftlake.cli import simulate as simulate_job
from kraftlake.cli.launcher import USAGE, run_job

CONFIG = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
# A busier cluster than the defaults (more crashes and rolling restarts), so that a short log has them.
OPTIONS = SimulationOptions(brokers=6, topics=8, partitions_per_topic=6, seed=11, operation_interval_ms=30_000,
                            mix={**DEFAULT_MIX, "crash": 1.0, "rolling_restart": 0.5})
EVENTS = 6000
SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms default
HEARTBEAT_INTERVAL_MS = 2000  # Kafka's broker.heartbeat.interval.ms default
REQUEST_KINDS = {"BrokerRegistrationRequest", "BrokerHeartbeatRequest", "CreateTopicsRequest", "AlterPartitionRequest",
                 "ElectLeadersRequest", "AlterPartitionReassignmentsRequest", "DeleteTopicsRequest"}
NOT_REFUSED = {0, 84}  # NONE, ELECTION_NOT_NEEDED (Kafka error codes)


@pytest.fixture(scope="module")
def run():
    """One simulated log, what ingest makes of each line, and the reference controller's tables."""
    sim = ClusterSimulator(OPTIONS, CONFIG)
    decide = sim.core.decide
    sim.asked = {}  # what the simulator's own controller was asked and answered, by offset

    def spy(request: dict) -> dict:
        answer = decide(request)
        sim.asked[request["offset"]] = (request, answer)
        return answer

    sim.core.decide = spy
    wire = list(sim.events(EVENTS))
    events = [validate_event(e) for e in wire]  # what ingest does to each JSON line
    tables, _ = replay_log(events, 2, CONFIG)
    return sim, wire, events, tables


def error_codes(value) -> list[int]:
    if isinstance(value, dict):
        return [c for k, v in value.items() for c in ([v] if k == "ErrorCode" else error_codes(v))]
    if isinstance(value, list):
        return [c for item in value for c in error_codes(item)]
    return []


def test_the_same_seed_gives_the_same_log_and_another_seed_another():
    first = list(simulate(1500, OPTIONS, CONFIG))
    again = list(simulate(1500, OPTIONS, CONFIG))
    other = list(simulate(1500, SimulationOptions(brokers=6, topics=8, partitions_per_topic=6, seed=12), CONFIG))
    assert len(first) == 1500
    assert first == again
    assert first != other
    assert [e["offset"] for e in first] == list(range(1500))
    assert all(a["timestamp"] <= b["timestamp"] for a, b in zip(first, first[1:]))


def test_every_request_kind_is_in_the_default_mix():
    """With the default mix each kind is rare enough that a seed may miss one in 6,000 requests (seed 1
    has no DeleteTopics since placement draws as Kafka's does); seed 3 has each at least five times."""
    kinds = Counter(e["type"] for e in simulate(EVENTS, SimulationOptions(brokers=6, topics=8, partitions_per_topic=6,
                                                                          seed=3)))
    assert set(kinds) == REQUEST_KINDS


def test_the_cluster_lives_through_every_kind_of_event(run):
    sim, wire, events, tables = run
    kinds = Counter(e["type"] for e in wire)
    assert set(kinds) == REQUEST_KINDS
    cancels = [e for e in wire if e["type"] == "AlterPartitionReassignmentsRequest"
               and any(p["Replicas"] is None for t in e["data"]["Topics"] for p in t["Partitions"])]
    assert cancels, "no reassignment was cancelled"
    assert any(e["data"]["WantShutDown"] for e in wire if e["type"] == "BrokerHeartbeatRequest")
    assert kinds["BrokerRegistrationRequest"] > OPTIONS.brokers, "no broker registered again"
    assert any(e["data"]["TopicPartitions"] is None for e in wire if e["type"] == "ElectLeadersRequest")
    # what the AlterPartitions did, as the reference controller recorded it
    history = [h for h in tables["partition_history"] if h["cause"] == "AlterPartitionRequest"]
    assert any(len(h["isr"]) < len(h["isr_before"]) for h in history), "no follower fell behind"
    assert any(len(h["isr"]) > len(h["isr_before"]) for h in history), "no follower caught up"
    assert any(h["replicas"] != h["replicas_before"] for h in history), "no reassignment completed"
    assert sim.sent == kinds


def test_the_controller_accepts_the_bulk_and_answers_as_the_simulator_expected(run):
    sim, wire, events, tables = run
    responses = tables["responses"]
    assert [r["offset"] for r in responses] == [e["offset"] for e in events]  # every request was decided
    refused = [r for r in responses if any(c not in NOT_REFUSED for c in error_codes(r["data"]))]
    assert len(refused) / len(responses) < 0.03
    assert refused, "a live cluster sees the odd stale request"
    # the simulator decided every line in-process before writing it: the request as ingest reads the line,
    # and the same errors as the reference
    for event, row in zip(events, responses):
        request, answer = sim.asked[event["offset"]]
        assert request["data"] == event["data"]
        assert sorted(error_codes(answer["data"])) == sorted(error_codes(row["data"]))
    by_kind = Counter((r["request_type"], "NONE" if r not in refused else "refused") for r in responses)
    expected = Counter()
    for (kind, error), count in sim.outcomes.items():
        expected[(kind, "NONE" if error == "NONE" else "refused")] += count
    assert by_kind == expected
    assert not [r for r in tables.get("rejected", []) if r["stage"] == "replay"]


def test_kip_841_holds_throughout(run):
    _, _, events, tables = run
    generated = sorted(tables["controller_log"], key=lambda r: (r["offset"], r["shard"], r["seq"]))
    records = [{**r, "cause_offset": r["offset"]} for r in generated]
    assert records
    assert list(check_events(merge_logs(events, records))) == []


def test_heartbeats_are_one_interval_apart_in_event_time(run):
    _, wire, _, _ = run
    beats: dict[tuple[int, int], list[int]] = {}
    for e in wire:
        if e["type"] == "BrokerHeartbeatRequest":
            beats.setdefault((e["data"]["BrokerId"], e["data"]["BrokerEpoch"]), []).append(e["timestamp"])
    gaps = Counter(b - a for times in beats.values() for a, b in zip(times, times[1:]))
    assert set(gaps) == {HEARTBEAT_INTERVAL_MS}
    assert sum(gaps.values()) > 1000


def test_a_crashed_broker_is_fenced_by_session_expiry(run):
    """A broker incarnation that stops heartbeating without asking to shut down is fenced at the first
    request more than broker.session.timeout.ms after its last heartbeat."""
    _, wire, _, tables = run
    last: dict[tuple[int, int], dict] = {}
    for e in wire:
        if e["type"] == "BrokerHeartbeatRequest":
            last[(e["data"]["BrokerId"], e["data"]["BrokerEpoch"])] = e
    fences = {(r["offset"], r["data"]["BrokerId"], r["data"]["BrokerEpoch"]) for r in tables["controller_log"]
              if r["type"] == "BrokerRegistrationChangeRecord" and r["data"]["Fenced"] == 1}
    crashes = 0
    for (broker, epoch), beat in last.items():
        if beat["data"]["WantShutDown"]:
            continue
        deadline = beat["timestamp"] + SESSION_TIMEOUT_MS
        expiry = next((e for e in wire if e["timestamp"] > deadline), None)
        if expiry is None:
            continue  # the log ends before its session could expire
        crashes += 1
        assert (expiry["offset"], broker, epoch) in fences
    assert crashes >= 1


def test_simulate_job_writes_through_ingest(spark, tmp_path):
    warehouse = tmp_path / "w"
    code = simulate_job.main(["--warehouse", str(warehouse), "--brokers", "4", "--topics", "3",
                              "--partitions-per-topic", "4", "--events", "700", "--seed", "5",
                              "--chunk-lines", "300", "--engine", "delta-rs"])
    assert code == 0
    rows = Warehouse(str(warehouse), engine="delta-rs", spark=spark).read_arrow("metadata_log").sort_by("offset")
    expected = list(simulate(700, SimulationOptions(brokers=4, topics=3, partitions_per_topic=4, seed=5)))
    assert [(e["offset"], e["timestamp"], e["type"]) for e in rows_to_events(rows)] == [
        (e["offset"], e["timestamp"], e["type"]) for e in expected]
    assert not list((warehouse / "_simulate").glob("*.jsonl"))  # chunks removed once ingested
    # a second run into the same warehouse is refused rather than appending a second cluster
    assert run_job("simulate", simulate_job.main, ["--warehouse", str(warehouse), "--events", "10"]) == USAGE
