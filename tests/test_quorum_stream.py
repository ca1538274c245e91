"""The quorum query: the streaming job's quorum tables equal the in-process replay of the same log,
whatever the micro-batches, after a real kill and restart too; and the replay equals the simulation
that wrote the traffic (the replicas are rebuilt exactly from what they received)."""

from __future__ import annotations

import json
import subprocess

import pytest

from kraftlake.cli import controller as controller_job
from kraftlake.raft.anomalies import LAG, LEADERLESS
from kraftlake.raft.replica import replay_quorum
from kraftlake.raft.describe import LogView, status
from kraftlake.sim.quorum import SimConfig, simulate
from kraftlake.sim.quorum_traffic import write_simulation
from kraftlake.raft.node import LEADER
from kraftlake.storage import Warehouse
from kraftlake.storage.tables import rows_to_events
from streaming_helpers import (REPO_ROOT, committed_batches, controller_command, controller_env, kill_controller_when,
                               plain, run_controller, sorted_rows, why_failed)

CFG = SimConfig(voters=3, observers=2, alter_every_ms=1500, crash_every_ms=3000, resign_every_ms=4000)
TABLES = ("quorum_state", "quorum_replicas", "quorum_events", "anomalies")


def test_replay_of_the_traffic_rebuilds_every_simulated_replica():
    for seed in range(40):
        result = simulate(seed, SimConfig(**{**CFG.__dict__, "duration_ms": 8000}))
        assert result.ok, result.violations[:2]
        _, replicas = replay_quorum(result.traffic)
        assert set(replicas) == set(result.replicas)
        for rid, simulated in result.replicas.items():
            assert replicas[rid].node.to_dict() == simulated.node.to_dict(), (seed, rid)
            assert replicas[rid].down == simulated.down


def core_tables(warehouse: Warehouse) -> dict[str, list[dict]]:
    events = sorted(rows_to_events(warehouse.read_arrow("metadata_log")), key=lambda e: e["offset"])
    tables, _ = replay_quorum(events)
    out = {"quorum_state": list(tables["quorum_state"].values()),
           "quorum_replicas": list(tables["quorum_replicas"].values()),
           "quorum_events": tables["quorum_events"],
           "responses": tables["responses"],
           "anomalies": list(tables["anomalies"].values())}
    return out


def table_rows(warehouse: Warehouse) -> dict[str, list[dict]]:
    return {name: [{k: plain(v) for k, v in row.items()} for row in warehouse.read_arrow(name).to_pylist()]
            for name in TABLES + ("responses",)}


def normalised(tables: dict[str, list[dict]]) -> dict[str, list]:
    return {name: sorted_rows(rows) for name, rows in tables.items()}


@pytest.fixture(scope="module")
def simulated(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("quorum")
    warehouse = Warehouse(str(root / "w"), spark=spark)
    # seed 103: its leader is killed twice (re-elected after the first), and a voter lags in between
    result = write_simulation(warehouse, seed=103, voters=3, observers=2, duration_ms=6000, config=CFG)
    assert result.ok
    return root, warehouse, result


def test_streaming_quorum_tables_equal_the_core_in_any_batching(spark, simulated, tmp_path):
    root, warehouse, result = simulated
    expected = normalised(core_tables(warehouse))
    assert len(expected["quorum_state"]) == 5 and expected["quorum_events"] and expected["responses"]
    for batch in (None, 97):
        copy = Warehouse(str(tmp_path / f"w{batch}"), spark=spark)
        log = warehouse.read_arrow("metadata_log")
        copy.append("metadata_log", log, log.schema)
        run_controller(copy, tmp_path / f"cp{batch}", shards=2, max_records_per_batch=batch)
        tables = table_rows(copy)
        assert normalised(tables) == expected, batch
    assert_killed_leaders_leave_the_quorum_leaderless(copy, tables)
    # and describe --status names the replica that led at the end of the simulation, with its high watermark
    leaders = [r.node for r in result.replicas.values() if not r.down and r.node.state == LEADER]
    fields = dict(status(tables["quorum_state"], tables["quorum_replicas"], LogView(None, None, None, None)))
    if leaders:
        top = max(leaders, key=lambda n: n.epoch)
        assert (fields["LeaderId"], fields["LeaderEpoch"], fields["HighWatermark"]) == \
            (top.node_id, top.epoch, top.high_watermark)
    else:
        assert fields["LeaderId"] == -1


def assert_killed_leaders_leave_the_quorum_leaderless(warehouse: Warehouse, tables: dict[str, list[dict]]) -> None:
    """Each leader killed (a ReplicaShutdown in the log, not graceful, to the replica whose leader_elected came
    last) begins a quorum_leaderless episode at that very event, which the next leader_elected ends; and a
    voter's lag is the episode between its leader's voter_lagging and voter_lag_ended rows."""
    log = warehouse.read_arrow("metadata_log").to_pylist()
    kills = {r["offset"]: r["destination_id"] for r in log
             if r["type"] == "ReplicaShutdown" and not r["ReplicaShutdown"]["Graceful"]}
    events = sorted(tables["quorum_events"], key=lambda e: e["offset"])
    episodes = sorted((a["start_offset"], a["end_offset"], a["cause"]) for a in tables["anomalies"]
                      if a["kind"] == LEADERLESS)
    expected, leader = [], None
    for e in events:
        if e["event"] == "leader_elected":
            if expected and expected[-1][1] is None:
                expected[-1] = (expected[-1][0], e["offset"], expected[-1][2])
            leader = e["replica_id"]
        elif e["event"] == "replica_shutdown" and leader is not None and kills.get(e["offset"]) == leader:
            expected.append((e["offset"], None, "replica_shutdown"))
            leader = None
    assert len(expected) == 2 and expected[0][1] is not None and expected[1][1] is None
    assert episodes == expected
    lags = [(a["start_offset"], a["end_offset"], a["broker_id"]) for a in tables["anomalies"] if a["kind"] == LAG]
    began = [(e["offset"], json.loads(e["detail"])["voter_id"]) for e in events if e["event"] == "voter_lagging"]
    ended = [e["offset"] for e in events if e["event"] == "voter_lag_ended"]
    assert lags and sorted(lags) == [(start, end, voter) for (start, voter), end in zip(began, ended)]
    # the lag ended with the second kill: its leader stopped leading
    assert lags[0][1] == expected[1][0]


def test_the_kip_595_drafts_bootstrapping_example_through_the_streaming_job(spark, tmp_path):
    """Issue 24: --protocol draft --voters 1 --grow-to 3 --observers 2 written into a warehouse; the quorum
    query replays it as the core does, and describe --status gives the generated ClusterId and the three
    voters, with quorum_state's cluster id and no record rejected."""
    from kraftlake.sim.quorum import DRAFT_BOOTSTRAP_MIX

    warehouse = Warehouse(str(tmp_path / "w"), spark=spark)
    result = write_simulation(warehouse, seed=3, voters=1, observers=2, duration_ms=6000, config=DRAFT_BOOTSTRAP_MIX)
    assert result.ok and len(result.cluster_ids) == 1
    expected = normalised(core_tables(warehouse))
    run_controller(warehouse, tmp_path / "cp", shards=1, max_records_per_batch=None)
    tables = table_rows(warehouse)
    assert normalised(tables) == expected
    assert warehouse.read_arrow("rejected").num_rows == 0
    fields = dict(status(tables["quorum_state"], tables["quorum_replicas"], LogView(None, None, None, None)))
    assert (fields["ClusterId"], fields["CurrentVoters"]) == (result.cluster_ids[0], [1, 2, 3])
    assert {r["cluster_id"] for r in tables["quorum_state"]} == {result.cluster_ids[0]}


@pytest.mark.slow
def test_sigkill_mid_run_then_restart_keeps_the_quorum_tables_exact(spark, tmp_path):
    killed = tmp_path / "killed"
    warehouse = Warehouse(str(killed), spark=spark)
    result = write_simulation(warehouse, seed=4, voters=3, observers=1, duration_ms=2000, config=CFG)
    assert result.ok
    expected = normalised(core_tables(warehouse))
    checkpoint = killed / "_checkpoints" / "controller" / "quorum"
    kill_controller_when(controller_command(killed, 30), lambda: len(committed_batches(checkpoint)) >= 2,
                         tmp_path / "killed.log")
    done_at_kill = committed_batches(checkpoint)
    # the rest in larger micro-batches: the batch cut short is re-run as planned, then come the larger ones
    restarted = subprocess.run(controller_command(killed, 1000), cwd=REPO_ROOT, env=controller_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert restarted.returncode == 0, why_failed(restarted.stdout)
    assert len(committed_batches(checkpoint)) > len(done_at_kill)
    assert normalised(table_rows(warehouse)) == expected, f"killed after quorum batch {done_at_kill[-1]}"


def test_a_malformed_message_is_rejected_with_its_offset_and_the_replica_goes_on():
    result = simulate(2, SimConfig(voters=3, duration_ms=3000))
    traffic = [dict(e) for e in result.traffic]
    fetch = next(i for i, e in enumerate(traffic) if e["type"] == "FetchResponse" and
                 e["data"]["Responses"][0]["Partitions"][0]["Records"])
    part = traffic[fetch]["data"]["Responses"][0]["Partitions"][0]
    damaged = bytearray(part["Records"])
    damaged[-1] ^= 0xFF  # the CRC no longer matches
    traffic[fetch] = {**traffic[fetch], "data": {**traffic[fetch]["data"], "Responses": [
        {**traffic[fetch]["data"]["Responses"][0], "Partitions": [{**part, "Records": bytes(damaged)}]}]}}
    traffic.insert(fetch + 1, {**traffic[fetch], "type": "VoteRequest", "data": {"Topics": []}})
    for offset, event in enumerate(traffic):
        event["offset"] = offset
    tables, replicas = replay_quorum(traffic)
    rejected = tables["rejected"]
    assert [(r["offset"], r["type"]) for r in rejected] == [(fetch, "FetchResponse"), (fetch + 1, "VoteRequest")]
    assert all(r["stage"] == "replay" and str(traffic[fetch]["destination_id"]) in r["reason"] for r in rejected)
    # the replica went on handling what came after, and its log has none of the damaged batch
    replica = traffic[fetch]["destination_id"]
    later = [e["offset"] for e in traffic[fetch + 2:] if e["destination_id"] == replica and e["type"].endswith("Request")]
    answered = {r["offset"] for r in tables["responses"]}
    assert later and set(later) <= answered
    node = replicas[replica].node
    assert node.high_watermark <= node.log.end_offset


def test_decode_limits_given_to_the_controller_job_reach_the_quorum_replay(spark, tmp_path):
    """The record batches a FetchResponse carries are decoded again by the replicas on Spark's executors,
    within the ``kraftlake.decode.*`` limits the job was given, not the shipped ones."""
    warehouse = Warehouse(str(tmp_path / "w"), spark=spark)
    assert write_simulation(warehouse, seed=4, voters=3, observers=1, duration_ms=2000, config=CFG).ok
    events = sorted(rows_to_events(warehouse.read_arrow("metadata_log")), key=lambda e: e["offset"])
    carrying = [e["offset"] for e in events if e["type"] == "FetchResponse"
                and any(p["Records"] for t in e["data"]["Responses"] for p in t["Partitions"])]
    assert carrying and not replay_quorum(events)[0]["rejected"]  # the shipped limits take every batch
    # 49 bytes: the declared length of a batch with no record, so that every batch carrying one is too long
    assert controller_job.main(["--warehouse", str(tmp_path / "w"), "--once",
                                "--override", "kraftlake.decode.batch.max.bytes=49"]) == 0
    rows = [r for r in warehouse.read_arrow("rejected").to_pylist() if r["stage"] == "replay"]
    assert sorted(r["offset"] for r in rows) == carrying
    assert all(r["type"] == "FetchResponse" and "damaged records in a FetchResponse" in r["reason"] for r in rows)
