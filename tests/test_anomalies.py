"""Anomaly episodes (controller/anomalies.py) without Spark: each kind's rule on a log written for it, a log with
every kind planted replayed in any batching and sharding (row by row and on the columns), and the real logs."""

from __future__ import annotations

import json
import random

import pytest

from kraftlake.controller.shards import ShardState, apply_outputs, iter_rows, replay_log, routes, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.metadata import uuids
from kraftlake.storage.ingest import detect_kind, read_source

from controller_harness import FIXTURES, ev
from test_causes import T1, T2, Log, change, cluster, moved, partition, topic

T3 = uuids.from_bytes(bytes([3] * 16))
WIDE = 40  # partitions of T3: runs of their simple changes are applied on the columns (shards.FAST_RUN)
MINUTE = 60_000


def anomalies(events: list[dict], shards: int = 2, **config: str) -> list[tuple]:
    """(kind, entity, start_offset, end_offset, cause, cause_offset, cause_type) of every episode, sorted."""
    tables, _ = replay_log(events, shards, {k.replace("_", "."): v for k, v in config.items()})
    return sorted((r["kind"], r["entity"], r["start_offset"], r["end_offset"], r["cause"], r["cause_offset"],
                   r["cause_type"]) for r in iter_rows(tables.get("anomalies", {})))


def min_isr(topic_name: str, value: str) -> dict:
    return ev("ConfigRecord", ResourceType=2, ResourceName=topic_name, Name="min.insync.replicas", Value=value)


def later(log: Log, ms: int) -> int:
    """Event time moves on by ``ms``, then an event every shard sees (a config): its offset."""
    log.now += ms
    [offset] = log.batch(ev("ConfigRecord", ResourceType=4, ResourceName="", Name="log.retention.ms", Value=str(ms)))
    return offset


# --- each kind's rule ----------------------------------------------------------------------------------

def test_offline_from_the_change_that_takes_the_last_leader_to_the_one_that_elects_a_new_one():
    log = Log()
    epochs = cluster(log, 1, 2)
    # handleBrokerFenced: the partitions first, then the broker's record
    gone, fencing = log.batch(moved(T2, 0, leader=-1, isr=[1]), change(1, epochs[1], fenced=1))
    _, back = log.batch(change(1, epochs[1], fenced=-1), moved(T2, 0, leader=1))  # handleBrokerUnfenced
    assert anomalies(log.events) == [
        ("offline_partition", "t2-0", gone, back, "fenced", fencing, "BrokerRegistrationChangeRecord")]


def test_under_min_isr_counts_the_isr_against_the_topics_min_insync_replicas_when_it_changes():
    log = Log()
    cluster(log, 1, 2, 3)
    log.each(min_isr("t1", "2"), min_isr("t2", "not a number"))  # t2's cannot be used: the cluster's (1) holds
    shrunk, _, alone = log.each(moved(T1, 0, isr=[1, 2]), moved(T1, 0, isr=[1]), moved(T2, 0, isr=[1]))
    [grown] = log.each(moved(T1, 0, isr=[1, 3]))
    assert anomalies(log.events) == [
        ("under_min_isr", "t1-0", shrunk + 1, grown, "isr_change", shrunk + 1, "PartitionChangeRecord")]
    assert anomalies(log.events, min_insync_replicas="2")[1] == (
        "under_min_isr", "t2-0", alone, None, "isr_change", alone, "PartitionChangeRecord")
    # a new min.insync.replicas counts at once: the cluster's (t2's own is unusable), then t1's, then t2's
    [raised] = log.each(ev("ConfigRecord", ResourceType=4, ResourceName="", Name="min.insync.replicas", Value="3"))
    [t1_raised, t2_lowered] = log.each(min_isr("t1", "3"), min_isr("t2", "1"))
    assert anomalies(log.events)[1:] == [
        ("under_min_isr", "t1-0", t1_raised, None, "min_insync_replicas_config", t1_raised, "ConfigRecord"),
        ("under_min_isr", "t2-0", raised, t2_lowered, "min_insync_replicas_config", raised, "ConfigRecord")]


def test_an_unclean_election_lasts_while_the_new_leader_recovers_and_is_an_instant_without_recovery():
    log = Log()
    cluster(log, 1, 2, 3)
    log.each(moved(T1, 0, isr=[1]), moved(T1, 0, leader=-1))
    [unclean] = log.each(moved(T1, 0, leader=2, isr=[2], LeaderRecoveryState=1))
    [recovered] = log.each(moved(T1, 0, LeaderRecoveryState=0))
    log.each(moved(T1, 1, isr=[2]), moved(T1, 1, leader=-1))
    [old_style] = log.each(moved(T1, 1, leader=3, isr=[3]))  # before leader recovery states (MV < 3.2)
    found = [a for a in anomalies(log.events) if a[0] == "unclean_election"]
    assert found == [("unclean_election", "t1-0", unclean, recovered, "leader_election", unclean, "PartitionChangeRecord"),
                     ("unclean_election", "t1-1", old_style, old_style, "leader_election", old_style,
                      "PartitionChangeRecord")]


def elr_change(leader: int, isr: list[int], elr: list[int]) -> dict:
    """A change of t2-0 with its ELR (KIP-966: PartitionChangeRecord v2)."""
    return ev("PartitionChangeRecord", 2, TopicId=T2, PartitionId=0, Leader=leader, Isr=isr, EligibleLeaderReplicas=elr)


def test_a_leader_elected_from_the_elr_is_an_elr_election_not_an_unclean_one():
    log = Log()
    cluster(log, 1, 2)
    log.each(elr_change(leader=-2, isr=[1], elr=[2]), elr_change(leader=-1, isr=[], elr=[1, 2]))
    [elected] = log.each(elr_change(leader=2, isr=[2], elr=[1]))
    found = [a for a in anomalies(log.events) if a[0] in ("elr_election", "unclean_election")]
    assert found == [("elr_election", "t2-0", elected, elected, "leader_election", elected, "PartitionChangeRecord")]


def test_a_reassignment_is_stuck_from_the_first_event_past_the_threshold_until_it_ends():
    log = Log()
    cluster(log, 1, 2, 3, 4)
    [began] = log.each(moved(T1, 0, Replicas=[1, 2, 3, 4], AddingReplicas=[4]))
    [quick] = log.each(moved(T1, 1, Replicas=[2, 3, 1, 4], AddingReplicas=[4]))
    log.each(moved(T1, 1, Replicas=[2, 3, 4], AddingReplicas=[], RemovingReplicas=[]))  # done within the threshold
    later(log, 59 * MINUTE)
    log.each(moved(T1, 0, isr=[1, 2, 3, 4]))  # still in progress, before the threshold
    stuck = later(log, 2 * MINUTE)
    [done] = log.each(moved(T1, 0, Replicas=[2, 3, 4], AddingReplicas=[], isr=[2, 3, 4], leader=2))
    assert anomalies(log.events, kraftlake_anomaly_reassignment_stuck_ms=str(60 * MINUTE)) == [
        ("stuck_reassignment", "t1-0", stuck, done, "reassignment", began, "PartitionChangeRecord")]
    assert quick < stuck
    # nothing every shard sees after the threshold: the partition's own next change is the first event past it
    log = Log()
    cluster(log, 1, 2, 3, 4)
    [began] = log.each(moved(T1, 0, Replicas=[1, 2, 3, 4], AddingReplicas=[4]))
    log.now += 2 * MINUTE
    [seen] = log.each(moved(T1, 0, isr=[1, 2, 3, 4]))
    assert anomalies(log.events, kraftlake_anomaly_reassignment_stuck_ms=str(MINUTE)) == [
        ("stuck_reassignment", "t1-0", seen, None, "reassignment", began, "PartitionChangeRecord")]


def test_a_broker_flaps_when_unfenced_more_than_n_times_in_the_window_until_a_window_without_one():
    log = Log()
    epochs = cluster(log, 1, 2, 3)  # each broker's first unfencing
    unfencings = []
    for _ in range(3):
        log.batch(change(3, epochs[3], fenced=1))
        unfencings += log.batch(change(3, epochs[3], fenced=-1))
    log.now += 5 * MINUTE
    calm = later(log, 6 * MINUTE)  # 11 minutes after the last unfencing: a whole window (10 min) without one
    # the fourth unfencing within 10 minutes is one more than 3
    assert anomalies(log.events) == [
        ("broker_flapping", "broker 3", unfencings[2], calm, "unfenced", unfencings[2], "BrokerRegistrationChangeRecord")]
    assert anomalies(log.events, kraftlake_anomaly_broker_flapping_unfencings="4") == []


def test_leader_imbalance_is_judged_over_every_shard_at_the_events_they_all_see():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    # broker 1 fenced: broker 2 leads t1-0, t1-1 and t2-0, 2 more than the one (t1-1) whose first replica it is
    *_, fencing = log.batch(moved(T1, 0, leader=2, isr=[2, 3]), moved(T1, 2, isr=[3, 2]),
                            moved(T2, 0, leader=2, isr=[2]), change(1, epochs[1], fenced=1))
    log.batch(change(1, epochs[1], fenced=-1), moved(T1, 0, isr=[2, 3, 1]), moved(T2, 0, isr=[2, 1]))
    log.each(moved(T1, 0, leader=1), moved(T2, 0, leader=1))  # preferred elections
    balanced = later(log, MINUTE)
    for shards in (1, 2, 3):
        assert anomalies(log.events, shards) == [
            ("leader_imbalance", "broker 2", fencing, balanced, "leader_election", fencing, None)], shards
    # Kafka's leader.imbalance.per.broker.percentage: 2 more than 1 is 200 %
    assert anomalies(log.events, leader_imbalance_per_broker_percentage="250") == []
    assert len(anomalies(log.events, leader_imbalance_per_broker_percentage="150")) == 1


def test_deleting_a_topic_ends_its_episodes():
    log = Log()
    cluster(log, 1, 2)
    [gone] = log.each(moved(T2, 0, leader=-1, isr=[1]))
    [deleted] = log.each(ev("RemoveTopicRecord", TopicId=T2))
    assert [a[:4] for a in anomalies(log.events)] == [("offline_partition", "t2-0", gone, deleted)]


# --- every kind planted, in any batching ---------------------------------------------------------------

def planted() -> tuple[list[dict], list[tuple]]:
    """A log with incidents of every kind, a run of each wide enough for the columns; the episodes it holds,
    written down by hand as (kind, entity, start_offset, end_offset)."""
    log = Log()
    epochs = cluster(log, 1, 2, 3, 4)
    log.batch(topic(T3, "t3"), *(partition(T3, p, [1, 2]) for p in range(WIDE)))
    expected = []
    # broker 1 is fenced: t3's partitions go offline on the columns, t2-0 row by row
    *offline, fencing = log.batch(*(moved(T3, p, leader=-1, isr=[1]) for p in range(WIDE)),
                                  moved(T2, 0, leader=-1, isr=[1]), change(1, epochs[1], fenced=1))
    # unclean elections of broker 2 on the columns, recovered together later
    unclean = log.batch(*(moved(T3, p, leader=2, isr=[2], LeaderRecoveryState=1) for p in range(WIDE)))
    [t2_back] = log.each(moved(T2, 0, leader=2, isr=[2]))  # t2-0 comes back unclean, without recovery state
    expected += [("offline_partition", f"t3-{p}", offline[p], unclean[p]) for p in range(WIDE)]
    expected += [("offline_partition", "t2-0", offline[WIDE], t2_back), ("unclean_election", "t2-0", t2_back, t2_back)]
    [began] = log.each(moved(T1, 0, Replicas=[1, 2, 3, 4], AddingReplicas=[4]))
    flaps, fencings = [], []
    for _ in range(3):
        fencings += log.batch(change(4, epochs[4], fenced=1))
        flaps += log.batch(change(4, epochs[4], fenced=-1))
    # broker 2 leads t3's 40 partitions since the unclean elections, and is the first replica of one partition:
    # judged at the first event every shard sees after them, and never over
    expected += [("leader_imbalance", "broker 2", fencings[0], None)]
    stuck = later(log, 61 * MINUTE)  # the reassignment is stuck, broker 4 has been quiet for a window
    recovered = log.batch(*(moved(T3, p, LeaderRecoveryState=0, isr=[2, 1]) for p in range(WIDE)))
    expected += [("unclean_election", f"t3-{p}", unclean[p], recovered[p]) for p in range(WIDE)]
    expected += [("broker_flapping", "broker 4", flaps[2], stuck)]
    [done] = log.each(moved(T1, 0, Replicas=[2, 3, 4], AddingReplicas=[], leader=2, isr=[2, 3, 4]))
    expected += [("stuck_reassignment", "t1-0", stuck, done)]
    log.each(min_isr("t1", "3"))
    [shrunk] = log.each(moved(T1, 1, isr=[2, 3]))
    expected += [("under_min_isr", "t1-1", shrunk, None)]
    log.batch(moved(T2, 0, isr=[2, 1]))
    assert fencing > 0 and began > 0
    return log.events, sorted(expected)


def by_step(events: list[dict], shards: int, cuts: list[int], columns: bool) -> list[tuple]:
    """The anomalies of ``events`` stepped micro-batch by micro-batch (the state through its bytes, as the
    state store keeps it), each micro-batch ending before an offset of ``cuts``."""
    states = [b"" for _ in range(shards)]
    tables: dict = {}
    bounds = [0, *cuts, len(events)]
    for start, stop in zip(bounds, bounds[1:]):
        outputs = []
        for shard in range(shards):
            state = ShardState.from_bytes(states[shard] or None)
            mine = [e for e in events[start:stop] if shard in routes(e, shards)]
            outputs += step(shard, shards, state, mine, {}, columns)
            states[shard] = state.to_bytes()
        apply_outputs(tables, outputs)
    return sorted((r["kind"], r["entity"], r["start_offset"], r["end_offset"])
                  for r in iter_rows(tables.get("anomalies", {})))


def test_planted_incidents_are_found_exactly_in_one_micro_batch_or_many_on_any_number_of_shards():
    events, expected = planted()
    assert [a[:4] for a in anomalies(events, 1)] == expected
    # a micro-batch ends between the log's batches only (the streaming source cuts there)
    starts = [i for i, e in enumerate(events) if i and e["position"] != events[i - 1]["position"]]
    rng = random.Random(25)
    for shards in (1, 3):
        for columns in (True, False):
            assert by_step(events, shards, [], columns) == expected, (shards, columns)
            assert by_step(events, shards, starts, columns) == expected, (shards, columns, "every batch")
            cuts = sorted(rng.sample(starts, 12))
            assert by_step(events, shards, cuts, columns) == expected, (shards, columns, cuts)


# --- the real logs --------------------------------------------------------------------------------------

def fixture(name: str) -> tuple[list[dict], dict]:
    path = FIXTURES / name / "__cluster_metadata-0"
    events = [e for e in read_source(path, detect_kind(path), True) if isinstance(e, dict)]
    return events, json.loads((FIXTURES / name / "expected-image.json").read_text())


def episodes(events: list[dict], kind: str) -> list[dict]:
    tables, _ = replay_log(events, 3)
    return sorted((r for r in iter_rows(tables.get("anomalies", {})) if r["kind"] == kind),
                  key=lambda r: (r["start_offset"], r["entity"]))


def outages(rows: list[dict]) -> list[tuple[int, int | None, int]]:
    """Spans of event time with at least one partition offline: (start, end, most at once)."""
    moments = sorted([(r["start_time"], 1) for r in rows] + [(r["end_time"], -1) for r in rows
                                                             if r["end_time"] is not None])
    spans, level, peak, start = [], 0, 0, None
    for ms, step_ in moments:
        if level == 0:
            start, peak = ms, 0
        level += step_
        peak = max(peak, level)
        if level == 0:
            spans.append((start, ms, peak))
    return spans + ([(start, None, peak)] if level else [])


def test_single_broker_shutdown_takes_54_partitions_offline_from_4872_until_the_log_ends():
    events, expected = fixture("single-broker-shutdown")
    offline = episodes(events, "offline_partition")
    leaderless = sorted(f"{expected['topics'][p['topic_id']]}-{p['partition']}" for p in expected["partitions"]
                        if p["leader"] == -1)
    assert sorted(r["entity"] for r in offline) == leaderless and len(leaderless) == 54
    assert [r["start_offset"] for r in offline] == list(range(4872, 4926))
    assert {(r["end_offset"], r["cause"], r["cause_offset"], r["cause_type"]) for r in offline} == {
        (None, "controlled_shutdown", 4871, "BrokerRegistrationChangeRecord")}
    assert episodes(events, "under_min_isr") == []  # ISR [1], min.insync.replicas 1


def test_three_brokers_restarts_has_four_outages_all_over_by_the_end():
    events, expected = fixture("three-brokers-restarts")
    assert all(p["leader"] >= 0 for p in expected["partitions"])
    spans = outages(episodes(events, "offline_partition"))
    assert len(spans) == 4 and all(end is not None for _, end, _ in spans)
    assert max(peak for _, _, peak in spans) == len(expected["partitions"]) == 52


@pytest.mark.parametrize("name", ["single-broker-restarts", "single-broker-snapshot"])
def test_the_other_real_logs_end_with_what_their_image_says(name: str) -> None:
    events, expected = fixture(name)
    still = sorted(r["entity"] for r in episodes(events, "offline_partition") if r["end_offset"] is None)
    assert still == sorted(f"{expected['topics'][p['topic_id']]}-{p['partition']}" for p in expected["partitions"]
                           if p["leader"] == -1)


def test_a_state_written_before_anomalies_existed_loads_with_none_open():
    log = Log()
    cluster(log, 1, 2)
    log.each(moved(T2, 0, leader=-1, isr=[1]))
    state = ShardState(ClusterImage())
    step(0, 1, state, log.events, {})
    raw = state.to_bytes()
    size = int.from_bytes(raw[8:12], "big")
    soft = json.loads(raw[12:12 + size])
    assert list(ShardState.from_bytes(raw).anomalies.open) == [("offline_partition", "t2-0")]
    soft.pop("anomalies")
    old = json.dumps(soft).encode()
    loaded = ShardState.from_bytes(raw[:8] + len(old).to_bytes(4, "big") + old + raw[12 + size:])
    assert loaded.anomalies.open == {} and loaded.image.to_bytes() == state.image.to_bytes()
    # the leadership counts are the image's: (partitions led, partitions whose first replica it is) per broker
    assert loaded.anomalies.counts() == state.anomalies.counts() == {1: (1, 2), 2: (1, 1), 3: (1, 1)}
