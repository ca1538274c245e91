"""The quorum's anomalies (quorum_leaderless, quorum_lag): the rules on planted events, the leaders they
track against the replicas' own state over simulated runs, the same episodes in any batching, and two
writers MERGE-ing into one anomalies table at once."""

from __future__ import annotations

import json
import threading

import pytest

from kraftlake.metadata.tables import table_arrow_schema, table_keys
from kraftlake.cli.runtime import replay_configs
from kraftlake.metadata.config import ConfigError, load_config
from kraftlake.raft.anomalies import LAG, LAG_TIME_MAX_MS, LEADERLESS, QuorumAnomalies
from kraftlake.raft.node import LEADER
from kraftlake.raft.replica import Replica, is_quorum_event, replay_quorum
from kraftlake.report.metrics import anomaly_gauges
from kraftlake.sim.quorum import DRAFT_BOOTSTRAP_MIX, VOTER_CHANGE_MIX, SimConfig, simulate
from kraftlake.spark.quorum_query import write_quorum_outputs
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.tables import rows_to_arrow
from streaming_helpers import plain

CFG = SimConfig(voters=3, observers=2, alter_every_ms=1500, crash_every_ms=3000, resign_every_ms=4000)


def ev(offset: int, replica: int, event: str, epoch: int = 1, state: str = "leader", timestamp: int | None = None,
       **detail: object) -> dict:
    return {"offset": offset, "timestamp": 1000 * offset if timestamp is None else timestamp, "replica_id": replica,
            "event": event, "epoch": epoch, "state": state,
            "detail": json.dumps(detail, sort_keys=True) if detail else None}


def episodes(rows: list[dict]) -> dict[tuple, tuple]:
    """The last row of each episode (a MERGE's result): key -> (start, end, cause)."""
    final = {tuple(r[k] for k in table_keys("anomalies")): r for r in rows}
    return {k: (r["start_offset"], r["end_offset"], r["cause"]) for k, r in final.items()}


def test_startup_election_is_not_leaderless_but_a_lost_leader_is_until_the_next_election():
    rows = QuorumAnomalies().rows([
        ev(0, 1, "election_started", state="candidate"), ev(2, 1, "leader_elected"),
        ev(5, 1, "zombie_leader_detected"), ev(5, 1, "leader_resigned", state="resigned"),
        ev(7, 2, "election_started", epoch=2, state="candidate"), ev(9, 2, "leader_elected", epoch=2),
        ev(12, 2, "replica_shutdown", epoch=2), ev(15, 3, "leader_elected", epoch=3)])
    assert episodes(rows) == {(LEADERLESS, "quorum", 5): (5, 9, "zombie_leader_detected"),
                              (LEADERLESS, "quorum", 12): (12, 15, "replica_shutdown")}
    closed = [r for r in rows if r["end_offset"] == 9][0]
    assert closed["end_time"] == 9000 and "replica 2 was elected leader of epoch 2" in closed["detail"]


def test_a_stale_leader_stepping_down_leaves_the_quorum_led_by_the_new_one():
    # replica 1 leads epoch 1, cut off; replica 2 is elected in epoch 2 before 1 learns of it
    rows = QuorumAnomalies().rows([
        ev(1, 1, "leader_elected"), ev(4, 2, "leader_elected", epoch=2),
        ev(6, 1, "leader_step_down", new_epoch=2), ev(8, 2, "leader_resigned", epoch=2, state="resigned")])
    assert episodes(rows) == {(LEADERLESS, "quorum", 8): (8, None, "leader_resigned")}


def test_a_lagging_voter_that_catches_up_then_lags_under_the_next_leader():
    lagging = {"threshold_ms": 2000}
    rows = QuorumAnomalies().rows([
        ev(1, 1, "leader_elected"),
        ev(4, 1, "voter_lagging", voter_id=3, lag_time_ms=2100, **lagging),
        ev(6, 1, "voter_lag_ended", voter_id=3, reason="caught_up", since_offset=4, since_time=4000,
           since_lag_time_ms=2100, since_epoch=1, **lagging),
        ev(7, 1, "voter_lagging", voter_id=3, lag_time_ms=2050, **lagging),
        # the leader changes while voter 3 lags: its episode ends with that leadership, the next leader's begins
        ev(9, 1, "leader_resigned", state="resigned"),
        ev(9, 1, "voter_lag_ended", state="resigned", voter_id=3, reason="not_leading", since_offset=7,
           since_time=7000, since_lag_time_ms=2050, since_epoch=1, **lagging),
        ev(10, 2, "leader_elected", epoch=2),
        ev(13, 2, "voter_lagging", epoch=2, voter_id=3, lag_time_ms=3000, **lagging)])
    found = episodes(rows)
    assert found == {(LEADERLESS, "quorum", 9): (9, 10, "leader_resigned"),
                     (LAG, "quorum voter 3", 4): (4, 6, "voter_lagging"),
                     (LAG, "quorum voter 3", 7): (7, 9, "voter_lagging"),
                     (LAG, "quorum voter 3", 13): (13, None, "voter_lagging")}
    final = {r["start_offset"]: r for r in rows if r["kind"] == LAG}
    assert final[7]["broker_id"] == 3 and final[7]["start_time"] == 7000
    assert "leader 1 (epoch 1)" in final[7]["detail"] and "replica 1 stopped leading" in final[7]["detail"]
    assert "leader 2 (epoch 2)" in final[13]["detail"]
    # the closed row of an episode is its open row with the end set: a MERGE replaces one with the other
    opened = [r for r in rows if r["start_offset"] == 7 and r["end_offset"] is None][0]
    assert {k: v for k, v in final[7].items() if k not in ("end_offset", "end_time", "detail")} == \
        {k: v for k, v in opened.items() if k not in ("end_offset", "end_time", "detail")}
    assert final[7]["detail"].startswith(opened["detail"])


def _replicas_leading(replicas: dict[int, Replica]) -> set[int]:
    return {r for r, x in replicas.items() if x.node is not None and not x.down and x.node.state == LEADER}


def test_the_leaders_tracked_from_the_events_are_the_replicas_leading_after_every_event():
    """The rules know who leads only from the events; the replicas' own states say it independently."""
    checked = 0
    for config in (CFG, VOTER_CHANGE_MIX, DRAFT_BOOTSTRAP_MIX):
        for seed in range(12):
            result = simulate(seed, SimConfig(**{**config.__dict__, "duration_ms": 6000}))
            replicas: dict[int, Replica] = {}
            rules = QuorumAnomalies()
            for event in result.traffic:
                if not is_quorum_event(event) or event.get("destination_id") is None:
                    continue
                replica = replicas.setdefault(event["destination_id"], Replica(event["destination_id"]))
                rules.rows([row for table, row in replica.apply(event, {})[0] if table == "quorum_events"])
                assert rules.leaders == _replicas_leading(replicas), (seed, event["offset"])
                checked += 1
    assert checked > 10_000


def _in_batches(events: list[dict], size: int) -> list[dict]:
    """The quorum's anomalies as the quorum query's sink makes them, ``size`` traffic events per batch: each
    batch resumes from the tables the previous ones left (quorum_state, the open anomalies rows)."""
    replicas: dict[int, Replica] = {}
    table: dict[tuple, dict] = {}
    for start in range(0, len(events), size):
        # what the last batch left in quorum_state: each replica as of its last event
        state = [row for r in replicas.values() for t, row in r.state_rows() if t == "quorum_state"]
        rules = QuorumAnomalies.resume(state, [r for r in table.values() if r["end_offset"] is None])
        batch_events = []
        for event in events[start:start + size]:
            replica = replicas.setdefault(event["destination_id"], Replica(event["destination_id"]))
            batch_events += [row for t, row in replica.apply(event, {})[0] if t == "quorum_events"]
        for row in rules.rows(batch_events):
            table[tuple(row[k] for k in table_keys("anomalies"))] = row
    return table


def test_quorum_anomalies_are_the_same_in_any_batching():
    for seed in (2, 7):
        result = simulate(seed, SimConfig(**{**CFG.__dict__, "duration_ms": 8000}))
        events = [e for e in result.traffic if is_quorum_event(e) and e.get("destination_id") is not None]
        expected = replay_quorum(events)[0]["anomalies"]
        assert {k[0] for k in expected} == {LEADERLESS, LAG}, seed
        for size in (1, 7, 500):
            assert _in_batches(events, size) == expected, (seed, size)


def test_two_writers_merging_their_own_kinds_into_one_table_at_once_lose_nothing(tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    schema = table_arrow_schema("anomalies")
    keys = list(table_keys("anomalies"))
    tables.prepare("anomalies", schema)
    batches = 12

    def row(kind: str, batch: int, end: int | None) -> dict:
        return {"kind": kind, "entity": f"e{batch}", "start_offset": batch, "start_time": batch, "end_offset": end,
                "end_time": end, "cause": "c", "cause_offset": batch, "detail": "d"}

    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(kind: str) -> None:
        try:
            barrier.wait(30)
            for batch in range(batches):  # each batch opens an episode and closes the previous one
                rows = [row(kind, batch, None)] + ([row(kind, batch - 1, batch)] if batch else [])
                tables.upsert("anomalies", rows_to_arrow("anomalies", rows), keys, schema, (f"app-{kind}", batch))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(kind,)) for kind in ("controller_kind", "quorum_kind")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    written = tables.read_arrow("anomalies").to_pylist()
    for kind in ("controller_kind", "quorum_kind"):
        mine = sorted((r["start_offset"], r["end_offset"]) for r in written if r["kind"] == kind)
        assert mine == [(b, b + 1) for b in range(batches - 1)] + [(batches - 1, None)], kind
        assert tables.txn_version("anomalies", f"app-{kind}") == batches - 1


def test_the_quorum_sink_resumes_from_its_own_tables_and_the_gauge_counts_the_open_episodes(tmp_path):
    """The quorum query's sink (no Spark: it takes the replicas' rows) over a simulated run cut into
    micro-batches of 20 events, the replicas run as the query runs them (one group per replica); its
    anomalies are the whole run's in one piece, and the metrics' gauge by kind counts the open ones. A batch
    written again after a crash (same txn) changes nothing."""
    result = simulate(103, SimConfig(**{**CFG.__dict__, "duration_ms": 6000}))
    events = [e for e in result.traffic if is_quorum_event(e) and e.get("destination_id") is not None]
    expected = replay_quorum(events)[0]["anomalies"]
    warehouse = Warehouse(str(tmp_path / "w"))
    replicas: dict[int, Replica] = {}
    for batch, start in enumerate(range(0, len(events), 20)):
        rows: list[tuple[str, int, int, dict]] = []
        groups: dict[int, list[dict]] = {}
        for event in events[start:start + 20]:
            groups.setdefault(event["destination_id"], []).append(event)
        for rid, mine in groups.items():
            replica = replicas.setdefault(rid, Replica(rid))
            out = [(t, e["offset"], row) for e in mine for t, row in replica.apply(e, {})[0]]
            out += [(t, replica.last_offset, row) for t, row in replica.state_rows()]
            rows += [(t, offset, seq, row) for seq, (t, offset, row) in enumerate(out)]
        write_quorum_outputs(warehouse, rows, ("kraftlake-quorum-test", batch))
        if batch == 3:  # the batch again, as after a crash before Spark's checkpoint: already committed
            versions = [warehouse.version(name) for name in ("anomalies", "quorum_state")]
            write_quorum_outputs(warehouse, rows, ("kraftlake-quorum-test", batch))
            assert [warehouse.version(name) for name in ("anomalies", "quorum_state")] == versions
    table = {tuple(r[k] for k in table_keys("anomalies")): {k: plain(v) for k, v in r.items()}
             for r in warehouse.read_arrow("anomalies").to_pylist()}
    assert table == expected
    gauges = {dict(g.labels)["kind"]: g.value for g in anomaly_gauges(warehouse)}
    assert gauges == {LEADERLESS: 1, LAG: 0}


def test_the_lag_threshold_is_the_jobs_setting_on_the_executors_too():
    """kraftlake.anomaly.quorum.lag.time.max.ms given to the job reaches the replicas (replay_configs: what
    the executors get) and decides: a lower one finds a voter lagging sooner, in more episodes."""
    config = load_config(overrides=[f"{LAG_TIME_MAX_MS}=500"])
    assert replay_configs(config)[LAG_TIME_MAX_MS] == "500"
    with pytest.raises(ConfigError, match=LAG_TIME_MAX_MS):  # a user's mistake: refused at startup, in one line
        load_config(overrides=[f"{LAG_TIME_MAX_MS}=2s"])
    events = [e for e in simulate(103, SimConfig(**{**CFG.__dict__, "duration_ms": 6000})).traffic
              if is_quorum_event(e) and e.get("destination_id") is not None]

    def lags(properties: dict) -> list[tuple[int, int]]:
        rows = replay_quorum(events, properties)[0]["anomalies"].values()
        return sorted((r["start_offset"], r["broker_id"]) for r in rows if r["kind"] == LAG)

    default, lower = lags({}), lags(replay_configs(config))
    assert default and len(lower) > len(default)
    assert all("lag.time.max.ms=500" in r["detail"] for r in replay_quorum(events, {LAG_TIME_MAX_MS: "500"})[0][
        "anomalies"].values() if r["kind"] == LAG)
