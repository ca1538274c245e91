"""jobs/report.py: the incident timeline, checked three ways.

- The counting (offline and under min.insync.replicas from the anomalies table's episodes, reassigning and
  per-broker changes from partition_history) is column-wise numpy; a property test holds it equal to a
  plain replay of the same history, row by row, in any row order.
- On warehouses the controller built (the real single-broker-shutdown log, and a simulated cluster with
  crashes, ISR shrinks and reassignments), its numbers equal the oracle's and what Spark SQL says, and
  every moment's SQL returns what the moment claims; on the real three-brokers-restarts log every anomaly
  moment is a row of the anomalies table, with its start and end.
- The time axis draws every stretch where something changed wide and compresses only quiet ones; on the
  real three-brokers-restarts log every incident is wide enough to see, and its moments' counts equal
  what Spark SQL says at each millisecond.
- In a real browser (headless Chromium), the page shows the bands and counts a person reads.
- Hostile data: names that are shell or SQL code in the tables never run when the page's command lines
  are pasted into bash, and SQL literals mean exactly the name; a value the report cannot use (a
  timestamp of 10^15 ms) is one notice, not a failure.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlake.cli import report as report_job
from kraftlake.cli import simulate as simulate_job
from kraftlake.cli.launcher import USAGE, run_job
from kraftlake.cli.sql_session import Session
from kraftlake.cli.sql_shell import Shell
from kraftlake.metadata.config import load_config
from kraftlake.metadata.tables import metadata_log_schema, table_arrow_schema
from kraftlake.report.html import PLOT, render
from kraftlake.report.timeline import (ANOMALY_COLUMNS, FENCED, HISTORY_COLUMNS, OFFLINE, QUIET_MS, REASSIGNING,
                                       REGISTERED, SHUTTING_DOWN, UNDER_MIN_ISR, UNFENCED, Timeline, build,
                                       count_episodes, count_partitions, sql_string, time_axis)
from kraftlake.storage.tables import events_to_arrow
from kraftlake.spark.catalog import Catalog
from kraftlake.spark.views import register_views
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.ingest import ingest_source

from streaming_helpers import run_controller

SHUTDOWN_WINDOW = "2026-01-30T17:23:54Z"  # the last two seconds of single-broker-shutdown: the incident


# --- the counting, against a plain replay -----------------------------------------------------------------

def _plain_levels(rows: list[dict], min_isr: dict[str, int], default: int) -> list[tuple[int, int, dict[str, int]]]:
    """(offset, time, {condition: partitions in it}) after each offset, replaying the rows one by one."""
    state: dict[tuple[str, int], tuple[bool, bool, bool]] = {}
    out = []
    for offset in sorted({r["offset"] for r in rows}):
        for r in sorted((r for r in rows if r["offset"] == offset), key=lambda r: r["applied_offset"]):
            key = (r["topic"], r["partition"])
            if r["change"] == "delete":
                state.pop(key, None)
            else:
                state[key] = (r["leader"] == -1, len(r["isr"] or []) < min_isr.get(r["topic"], default),
                              bool(r["adding_replicas"] or r["removing_replicas"]))
        time = next(r["timestamp"] for r in rows if r["offset"] == offset)
        out.append((offset, time, {OFFLINE: sum(s[0] for s in state.values()),
                                   UNDER_MIN_ISR: sum(s[1] for s in state.values()),
                                   REASSIGNING: sum(s[2] for s in state.values())}))
    return out


def _plain_bucket(levels: list[tuple[int, int, dict[str, int]]], name: str, lo: int, hi: int) -> int:
    """The most partitions in the condition at any moment of [lo, hi): after any change in it, and before
    its first change (the state it opened with)."""
    at_start = [lv[name] for _, t, lv in levels if t < lo]
    inside = [lv[name] for _, t, lv in levels if lo <= t < hi]
    return max([at_start[-1] if at_start else 0] + inside)


def _plain_moments(levels: list[tuple[int, int, dict[str, int]]], name: str, lo: int, hi: int) -> list[tuple[int, str]]:
    """The moments a person expects, millisecond by millisecond: where the count leaves zero (the count
    after that millisecond), where it at least doubles to a new high of the same outage, and where it
    returns to zero (with the most of the outage)."""
    expected, level, high, most = [], 0, 0, 0
    for time in sorted({t for _, t, _ in levels}):
        at = [lv[name] for _, t, lv in levels if t == time]
        before, after, peak = level, at[-1], max(at)
        if before == 0 and peak > 0:
            high, most = after, peak
            what = f"{after:,} partition(s) {name}" if after else f"{peak:,} partition(s) {name} and back within"
        elif before > 0 and after == 0:
            most = max(most, peak)
            what = f"no partition {name} any more (at most {most:,}"
        elif before > 0 and after >= 2 * high:
            what = f"{after:,} partition(s) {name} ({after - before:,} more)"
        else:
            what = None
        if before > 0:
            high, most = max(high, after), max(most, peak)
        if what and lo <= time <= hi:
            expected.append((time, what))
        level = after
    return expected


@st.composite
def histories(draw: st.DrawFn) -> list[dict]:
    """partition_history rows as the controller writes them: a partition is created, changed, maybe
    deleted and created again; several partitions may change at one offset; time never goes back."""
    partitions = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    state: dict[tuple[str, int], dict] = {}
    rows, offset, time = [], 0, 1_000
    for _ in range(draw(st.integers(1, 30))):
        offset += draw(st.integers(1, 3))
        time += draw(st.sampled_from([0, 0, 1, 7, 50, 3_000]))  # 3 s: a quiet stretch on the time axis
        for key in draw(st.lists(st.sampled_from(partitions), min_size=1, max_size=3, unique=True)):
            old = state.get(key)
            if old is not None and draw(st.integers(0, 9)) == 0:
                change, new = "delete", None
            else:
                isr = draw(st.lists(st.integers(0, 3), max_size=3, unique=True))
                new = {"leader": draw(st.sampled_from([-1] + isr)), "isr": isr,
                       "adding_replicas": draw(st.sampled_from([None, [], [3]])),
                       "removing_replicas": draw(st.sampled_from([None, [], [0]]))}
                change = "create" if old is None else "change"
            rows.append({"offset": offset, "applied_offset": offset, "timestamp": time, "change": change,
                         "topic": key[0], "partition": key[1],
                         "leader_before": None if old is None else old["leader"],
                         "isr_before": None if old is None else old["isr"],
                         **(new or {"leader": old["leader"], "isr": old["isr"], "adding_replicas": None,
                                    "removing_replicas": None})})
            if new is None:
                state.pop(key)
            else:
                state[key] = new
    return rows


def _plain_episodes(rows: list[dict], min_isr: dict[str, int], default: int) -> list[dict]:
    """The anomalies rows of offline and under-min.insync.replicas partitions in ``rows``, by their rules
    (docs/anomalies.md) applied one change at a time: open at the change after which the condition holds,
    closed at the one after which it does not, or at the topic's deletion."""
    rules = {"offline_partition": lambda r: r["leader"] == -1,
             "under_min_isr": lambda r: len(r["isr"] or []) < min_isr.get(r["topic"], default)}
    opened: dict[tuple[str, str], dict] = {}
    episodes = []
    for r in sorted(rows, key=lambda r: (r["offset"], r["applied_offset"])):
        for kind, holds in rules.items():
            key = (kind, f"{r['topic']}-{r['partition']}")
            now = r["change"] != "delete" and holds(r)
            if now and key not in opened:
                opened[key] = {"kind": kind, "entity": key[1], "topic": r["topic"], "partition": r["partition"],
                               "start_offset": r["offset"], "start_ms": r["timestamp"], "end_offset": None,
                               "end_ms": None}
                episodes.append(opened[key])
            elif not now and key in opened:
                opened.pop(key).update(end_offset=r["offset"], end_ms=r["timestamp"])
    return episodes


def _episodes_table(episodes: list[dict]) -> pa.Table:
    """Episodes as ``read_episodes`` gives them: the anomalies table's columns and times in milliseconds."""
    schema = table_arrow_schema("anomalies")
    rows = [{"detail": f"{e['entity']} at {e['start_offset']}", **e} for e in episodes]
    columns = {name: pa.array([r.get(name) for r in rows], schema.field(name).type) for name in ANOMALY_COLUMNS
               if not name.endswith("_time")}
    columns["start_time"] = pa.array([r["start_ms"] for r in rows], pa.timestamp("ms", "UTC"))
    columns["end_time"] = pa.array([r["end_ms"] for r in rows], pa.timestamp("ms", "UTC"))
    columns["start_ms"] = pa.array([r["start_ms"] for r in rows], pa.int64())
    columns["end_ms"] = pa.array([r["end_ms"] for r in rows], pa.int64())
    return pa.table({name: columns[name] for name in [*ANOMALY_COLUMNS, "start_ms", "end_ms"]})


def _history_table(rows: list[dict]) -> pa.Table:
    """The rows as the warehouse's partition_history columns (timestamps given in milliseconds)."""
    schema = table_arrow_schema("partition_history")
    columns = {name: pa.array([r[name] for r in rows], schema.field(name).type) for name in HISTORY_COLUMNS
               if name != "timestamp"}
    columns["timestamp"] = pa.array([r["timestamp"] for r in rows], pa.timestamp("ms", "UTC")).cast(
        schema.field("timestamp").type)
    return pa.table({name: columns[name] for name in HISTORY_COLUMNS})


@settings(max_examples=150, deadline=None)
@given(rows=histories(), window=st.tuples(st.integers(900, 30_000), st.integers(0, 60_000)),
       buckets=st.integers(1, 12), linear=st.booleans(), order=st.randoms(use_true_random=False))
def test_counts_equal_a_plain_replay_in_any_row_order(rows, window, buckets, linear, order):
    start, length = window
    end = start + length
    min_isr, default = {"a": 2}, 1
    shuffled, episodes = list(rows), _plain_episodes(rows, min_isr, default)
    order.shuffle(shuffled)
    order.shuffle(episodes)
    axis = time_axis(start, end, np.array([r["timestamp"] for r in rows], dtype=np.int64), linear)
    tl = Timeline.over(start, end, axis, buckets)
    count_episodes(tl, _episodes_table(episodes))
    count_partitions(tl, _history_table(shuffled))

    levels = _plain_levels([r for r in rows if r["timestamp"] <= end], min_isr, default)
    for name in (OFFLINE, UNDER_MIN_ISR, REASSIGNING):
        expected = [_plain_bucket(levels, name, tl.bucket_start(i), tl.bucket_start(i + 1)) for i in range(buckets)]
        assert tl.series[name].buckets == expected, name
        assert tl.series[name].at_end == (levels[-1][2][name] if levels else 0)
        moments = [(m.timestamp, m.what) for m in tl.moments if name in m.what]
        plain = _plain_moments(levels, name, start, end)
        assert len(moments) == len(plain) and all(w.startswith(p) for (_, w), (_, p) in zip(moments, plain)), name
        assert [t for t, _ in moments] == [t for t, _ in plain], name
    window_rows = [r for r in rows if start <= r["timestamp"] <= end]
    assert tl.changes == len(window_rows)
    gained, lost, joins, leaves = Counter(), Counter(), Counter(), Counter()
    for r in window_rows:
        if r["change"] != "change":
            continue
        if r["leader"] != r["leader_before"]:
            gained.update([r["leader"]] if r["leader"] >= 0 else [])
            lost.update([r["leader_before"]] if r["leader_before"] >= 0 else [])
        joins.update(set(r["isr"]) - set(r["isr_before"]))
        leaves.update(set(r["isr_before"]) - set(r["isr"]))
    assert (tl.leaderships_gained, tl.leaderships_lost, tl.isr_joins, tl.isr_leaves) == (gained, lost, joins, leaves)


# --- the time axis ----------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(activity=st.lists(st.one_of(st.integers(0, 3_000), st.integers(0, 10**8)), max_size=80),
       window=st.tuples(st.integers(-1_000, 2_000), st.integers(0, 10**8)))
def test_the_time_axis_widens_short_stretches_and_compresses_quiet_ones(activity, window):
    start, end = window[0], window[0] + window[1]
    axis = time_axis(start, end, np.array(activity, dtype=np.int64))
    stretches = axis.stretches()
    changes = {t for t in activity if start <= t <= end}
    # the stretches tile the window in order, from the left edge of the drawing to its right edge, and a
    # change is never inside one: they run from one change to the next
    assert stretches[0].start_ms == start and stretches[-1].end_ms == end + 1
    assert stretches[0].x0 == 0.0 and stretches[-1].x1 == 1.0
    assert all(a.end_ms == b.start_ms and a.x1 == b.x0 for a, b in zip(stretches, stretches[1:]))
    assert all(s.start_ms < s.end_ms and s.x0 < s.x1 for s in stretches)
    assert not any(s.start_ms < t < s.end_ms for s in stretches for t in changes)
    if not changes - {start}:
        assert [(s.x0, s.x1) for s in stretches] == [(0.0, 1.0)]
    assert all(s.quiet == (s.end_ms - s.start_ms > QUIET_MS) for s in stretches) or axis.linear

    def scale(s):  # px per ms
        return (s.x1 - s.x0) / (s.end_ms - s.start_ms)

    for a in stretches:
        for b in stretches:
            la, lb = a.end_ms - a.start_ms, b.end_ms - b.start_ms
            if a.quiet == b.quiet and la < lb:  # longer is wider, but never in proportion: compressed
                assert a.x1 - a.x0 <= b.x1 - b.x0 and scale(a) > scale(b)
            if b.quiet and not a.quiet:  # quiet is drawn to a smaller scale than anything else
                assert scale(b) < scale(a)
    # the buckets cut the drawing into equal widths
    edges = axis.edges(24)
    assert edges[0] == start and edges[-1] == end + 1 and all(np.diff(edges) >= 0)
    assert time_axis(start, end, np.array(activity, dtype=np.int64), linear=True).linear


# --- warehouses the controller built ----------------------------------------------------------------------

def _replayed(spark, log_dir: Path, root: Path, from_snapshot: bool = False) -> Warehouse:
    """A Kafka partition directory ingested into ``root``/warehouse and replayed by the controller."""
    warehouse = Warehouse(str(root / "warehouse"), engine="delta-rs", spark=spark)
    ingest_source(warehouse, str(log_dir), from_snapshot=from_snapshot)
    run_controller(warehouse, root / "checkpoint", shards=2, max_records_per_batch=None)
    return warehouse


@pytest.fixture(scope="module")
def shutdown_warehouse(spark, fixtures_dir, tmp_path_factory) -> Warehouse:
    return _replayed(spark, fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0",
                     tmp_path_factory.mktemp("report-shutdown"))


MIN_ISR = {"min.insync.replicas": "3"}


@pytest.fixture(scope="module")
def simulated_warehouse(spark, tmp_path_factory) -> Warehouse:
    """A small cluster with broker crashes, restarts, ISR shrinks and reassignments, decided by the
    controller with min.insync.replicas=3 (so an ISR shrink of a 3-replica partition is under it)."""
    root = tmp_path_factory.mktemp("report-sim")
    assert simulate_job.main(["--warehouse", str(root / "warehouse"), "--engine", "delta-rs", "--brokers", "5",
                              "--topics", "3", "--partitions-per-topic", "4", "--events", "2500", "--seed", "11",
                              "--operation-interval-ms", "5000", "--isr-shrinks-per-s", "2",
                              "--reassign-copy-ms", "4000", "--chunk-lines", "2500"]) == 0
    warehouse = Warehouse(str(root / "warehouse"), engine="delta-rs", spark=spark)
    run_controller(warehouse, root / "checkpoint", shards=2, max_records_per_batch=None, config=MIN_ISR)
    return warehouse


_REGISTERED: list[str] = []  # the warehouse whose tables the session's views are now (this module's tests)


@pytest.fixture(scope="module", autouse=True)
def _views_of_this_module():
    """Other modules register views of their own warehouses: never trust what they left."""
    _REGISTERED.clear()
    yield
    _REGISTERED.clear()


def _sql(warehouse: Warehouse, query: str) -> list[dict]:
    if _REGISTERED != [warehouse.root]:
        register_views(warehouse)
        _REGISTERED[:] = [warehouse.root]
    return [row.asDict(recursive=True) for row in warehouse.spark.sql(query).collect()]


def _check_against_sql(warehouse: Warehouse, tl: Timeline, min_isr: int) -> None:
    """The page's numbers are what SQL over the same tables says, and every moment's SQL shows it."""
    partitions = _sql(warehouse, "SELECT topic, partition, leader, isr, adding_replicas, removing_replicas "
                                 "FROM partitions")
    assert tl.partitions == len(partitions)
    assert tl.series[OFFLINE].at_end == sum(p["leader"] == -1 for p in partitions)
    assert tl.series[UNDER_MIN_ISR].at_end == sum(len(p["isr"]) < min_isr for p in partitions)
    assert tl.series[REASSIGNING].at_end == sum(bool(p["adding_replicas"] or p["removing_replicas"])
                                                for p in partitions)
    lost = _sql(warehouse, "SELECT leader_before AS b, count(*) AS n FROM partition_history WHERE change = 'change' "
                           "AND leader_before <> leader AND leader_before >= 0 GROUP BY leader_before")
    assert dict(tl.leaderships_lost) == {r["b"]: r["n"] for r in lost}
    kinds: Counter = Counter()
    for moment in tl.moments:
        kinds[re.sub(r"[\d,]+", "N", moment.what)] += 1
        if kinds[re.sub(r"[\d,]+", "N", moment.what)] > 3:
            continue  # three of each kind of moment is proof enough, and each query costs a second
        rows = _sql(warehouse, moment.sql)
        claimed = re.match(r"([\d,]+) partition\(s\) ", moment.what)
        if claimed:  # "N partition(s) offline": its SQL lists the N, as of that offset
            assert len(rows) == int(claimed.group(1).replace(",", "")), moment
        elif moment.what.startswith("no partition"):
            assert rows, moment  # the change that ended it
        elif moment.what.startswith("quorum"):
            assert [r["offset"] for r in rows] == [moment.offset]
        elif moment.sql.startswith("SELECT * FROM anomalies"):  # its episode's row
            assert [r["start_offset"] for r in rows] == [moment.offset], moment


def test_the_real_shutdown_log_agrees_with_the_oracle_and_sql(shutdown_warehouse, fixtures_dir):
    expected = json.loads((fixtures_dir / "single-broker-shutdown" / "expected-image.json").read_text())
    tl = build(shutdown_warehouse)
    assert tl.partitions == len(expected["partitions"]) == 54
    assert tl.series[OFFLINE].at_end == sum(p["leader"] == -1 for p in expected["partitions"]) == 54
    assert tl.series[OFFLINE].worst == 54
    assert sum(tl.leaderships_lost.values()) == expected["leader_changes"]
    states = [span.state for span in tl.brokers[1]]
    assert states[-3:] == [UNFENCED, SHUTTING_DOWN, FENCED]  # the oracle: broker 1 ends fenced, shut down
    assert expected["brokers"]["1"]["fenced"] and expected["brokers"]["1"]["in_controlled_shutdown"]
    assert [q.leader for q in tl.quorum] == [1]  # one LeaderChangeMessage: node 1 leads
    assert (tl.quorum_state.leader, tl.quorum_state.epoch, tl.quorum_state.ahead) == (1, 1, False)  # the file agrees
    _check_against_sql(shutdown_warehouse, tl, 1)
    shutdown = next(m for m in tl.moments if m.what == f"broker 1: {SHUTTING_DOWN}")
    assert len(_sql(shutdown_warehouse, shutdown.sql)) == 54  # every partition's leadership moved off broker 1
    # the 54 partitions went offline in one millisecond, as 54 records: one moment says 54
    went = _sql(shutdown_warehouse, "SELECT timestamp, count(*) AS n FROM partition_history WHERE leader = -1 AND "
                                    "leader_before <> -1 GROUP BY timestamp")
    assert [r["n"] for r in went] == [54]
    assert [m.what for m in tl.moments if OFFLINE in m.what] == ["54 partition(s) offline"]


def _px(tl: Timeline, start_ms: int, end_ms: int) -> float:
    """How wide the page draws event time [start_ms, end_ms)."""
    return PLOT * (tl.axis.fraction(end_ms) - tl.axis.fraction(start_ms))


def _span_widths(tl: Timeline) -> dict[tuple[int, str, int], float]:
    """Each broker state's drawn width, for the states that begin inside the window."""
    return {(b, s.state, s.offset): _px(tl, s.start_ms, nxt.start_ms if nxt else tl.end_ms + 1)
            for b, spans in tl.brokers.items() for s, nxt in zip(spans, spans[1:] + [None]) if s.start_ms > tl.start_ms}


def test_by_default_the_shutdown_is_drawn_wide_with_the_whole_log_as_context(shutdown_warehouse):
    zoomed, linear = build(shutdown_warehouse), build(shutdown_warehouse, linear=True)
    assert (zoomed.start_ms, zoomed.end_ms) == (linear.start_ms, linear.end_ms)  # the whole log, still
    shutdown = _span_widths(zoomed)[(1, SHUTTING_DOWN, 4871)]
    assert _span_widths(linear)[(1, SHUTTING_DOWN, 4871)] < 1 < 30 <= shutdown  # 84 ms of 40 minutes
    offline_since = next(m.timestamp for m in zoomed.moments if OFFLINE in m.what)
    assert _px(zoomed, offline_since, zoomed.end_ms + 1) >= 50 > 100 * _px(linear, offline_since, linear.end_ms + 1)
    assert [zoomed.series[n].buckets for n in zoomed.series] != [linear.series[n].buckets for n in linear.series]
    assert [zoomed.series[n].worst for n in zoomed.series] == [linear.series[n].worst for n in linear.series]


def test_a_window_and_a_topic_narrow_the_partitions_not_the_brokers(shutdown_warehouse):
    whole = build(shutdown_warehouse)
    start = report_job.parse_time(SHUTDOWN_WINDOW)
    late = build(shutdown_warehouse, start_ms=start)
    assert late.start_ms == start and late.end_ms == whole.end_ms
    assert late.changes == 54  # the PartitionChangeRecords of the shutdown, not the creations before it
    assert late.brokers[1][0].state == UNFENCED and late.brokers[1][0].start_ms == start  # the state it opened with
    one = build(shutdown_warehouse, topics=["TestTopicPatient"])
    topic_partitions = _sql(shutdown_warehouse, "SELECT count(*) AS n FROM partitions WHERE topic = 'TestTopicPatient'")
    assert one.partitions == topic_partitions[0]["n"] < whole.partitions
    assert one.brokers == whole.brokers


def test_a_simulated_cluster_agrees_with_sql(simulated_warehouse):
    tl = build(simulated_warehouse)
    assert tl.series[OFFLINE].worst > 0 or tl.series[UNDER_MIN_ISR].worst > 0
    assert tl.series[UNDER_MIN_ISR].worst > 0 and tl.series[REASSIGNING].worst > 0
    assert any(span.state == FENCED for spans in tl.brokers.values() for span in spans)
    assert tl.isr_leaves and tl.isr_joins
    _check_against_sql(simulated_warehouse, tl, 3)


@pytest.fixture(scope="module")
def restarts_warehouse(spark, fixtures_dir, tmp_path_factory) -> Warehouse:
    return _replayed(spark, fixtures_dir / "three-brokers-restarts" / "__cluster_metadata-0",
                     tmp_path_factory.mktemp("report-restarts"))


# Partitions offline after each millisecond of partition_history: each partition's last row at or before
# it (Spark's own plan, by event time, not the report's by offset).
OFFLINE_BY_MILLISECOND = """
SELECT unix_millis(at) AS ms, count_if(last.leader = -1 AND last.change <> 'delete') AS offline FROM (
  SELECT t.at, max_by(struct(h.leader AS leader, h.change AS change), struct(h.offset, h.applied_offset)) AS last
  FROM (SELECT DISTINCT timestamp AS at FROM partition_history) t JOIN partition_history h ON h.timestamp <= t.at
  GROUP BY t.at, h.topic, h.partition)
GROUP BY at ORDER BY at"""


def test_every_incident_of_the_three_brokers_restarts_is_visible_and_counted_as_sql_counts(restarts_warehouse,
                                                                                         fixtures_dir):
    expected = json.loads((fixtures_dir / "three-brokers-restarts" / "expected-image.json").read_text())
    tl, linear = build(restarts_warehouse), build(restarts_warehouse, linear=True)
    assert tl.partitions == len(expected["partitions"]) == 52
    assert tl.series[OFFLINE].at_end == sum(p["leader"] == -1 for p in expected["partitions"]) == 0
    assert sorted(tl.brokers) == sorted(int(b) for b in expected["brokers"]) == [1, 2, 3]
    # every broker state, however short (the controlled shutdowns last about 100 ms of the 1.8 hours), and
    # every outage is wide enough to see; drawn to scale, many are not
    widths = _span_widths(tl)
    assert len(widths) > 60 and min(widths.values()) >= 5
    assert sum(w < 1 for w in _span_widths(linear).values()) >= 10
    offline = [m for m in tl.moments if OFFLINE in m.what]
    outages = [(a.timestamp, b.timestamp) for a, b in zip(offline, offline[1:])
               if not a.what.startswith("no ") and b.what.startswith("no ")]
    assert len(outages) == 4 and all(_px(tl, a, b) >= 40 for a, b in outages)
    assert all(tl.start_ms <= m.timestamp <= tl.end_ms for m in tl.moments)
    # the counts are what Spark SQL says: the tables' current state, each moment's own SQL, and the
    # partitions offline after every millisecond, computed by Spark its own way
    _check_against_sql(restarts_warehouse, tl, 1)
    per_ms = _sql(restarts_warehouse, OFFLINE_BY_MILLISECOND)
    levels = [(0, r["ms"], {OFFLINE: r["offline"]}) for r in per_ms]
    plain = _plain_moments(levels, OFFLINE, tl.start_ms, tl.end_ms)
    assert [(m.timestamp, m.what[:len(p)]) for m, (_, p) in zip(offline, plain)] == plain and len(offline) == len(plain)
    assert max(r["offline"] for r in per_ms) == tl.series[OFFLINE].worst == 52
    assert "52 partition(s) offline (51 more)" in [m.what for m in offline]  # 1 went first, 51 28 ms later
    # each outage begins at its first episode's start and ends at its last one's end, as the anomalies table
    # says (Spark SQL over it); every other episode is a moment of its own, at its start
    rows = _sql(restarts_warehouse, "SELECT kind, entity, start_offset, end_offset, detail FROM anomalies")
    ends = [(a, b) for a, b in zip(offline, offline[1:]) if not a.what.startswith("no ") and b.what.startswith("no ")]
    for began, ended in ends:
        during = [r for r in rows
                  if r["kind"] == "offline_partition" and began.offset <= r["start_offset"] < ended.offset]
        assert min(r["start_offset"] for r in during) == began.offset
        assert max(r["end_offset"] for r in during) == ended.offset
    listed = sorted((m.offset, m.what) for m in tl.moments if m.sql.startswith("SELECT * FROM anomalies"))
    assert listed == sorted((r["start_offset"], f"{r['kind'].replace('_', ' ')}: {r['detail']}") for r in rows
                            if r["kind"] not in ("offline_partition", "under_min_isr"))
    assert len(listed) == 7  # the leader imbalances (docs/anomalies.md)


def test_the_job_refuses_an_empty_warehouse_clearly(tmp_path, capsys):
    assert run_job("report", report_job.main, ["--warehouse", str(tmp_path / "none"), "--out", str(tmp_path / "r.html")]) \
        == USAGE
    assert "ingest a log first" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_the_job_refuses_a_log_the_controller_has_not_replayed_naming_the_job(fixtures_dir, tmp_path, capsys):
    root = str(tmp_path / "warehouse")
    ingest_source(Warehouse(root, engine="delta-rs"), str(fixtures_dir / "single-broker-shutdown" /
                                                          "__cluster_metadata-0"))
    assert run_job("report", report_job.main, ["--warehouse", root, "--out", str(tmp_path / "r.html")]) == USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "partition_history" in err and "controller_log" in err
    assert f"jobs/controller.py --warehouse {root} --once" in err
    assert not (tmp_path / "r.html").exists()  # no page of zero changes


# --- the quorum when the log ends without a leader ---------------------------------------------------------

QUORUM_STATE = {"clusterId": "", "leaderId": 1, "leaderEpoch": 1, "votedId": -1, "appliedOffset": 0,
                "currentVoters": [{"voterId": 1}], "data_version": 0}


@pytest.fixture(scope="module")
def snapshot_warehouse(spark, fixtures_dir, tmp_path_factory) -> Warehouse:
    """single-broker-snapshot ingested as Kafka's own loader reads it, from the snapshot on: the log's only
    LeaderChangeMessage (offset 0) is before it, so the log as ingested has no leader. Beside it, the
    quorum-state file such a one-node cluster writes (the fixture has none; single-broker-shutdown's, real,
    has this shape)."""
    root = tmp_path_factory.mktemp("report-snapshot")
    log_dir = root / "__cluster_metadata-0"
    shutil.copytree(fixtures_dir / "single-broker-snapshot" / "__cluster_metadata-0", log_dir)
    (log_dir / "quorum-state").write_text(json.dumps(QUORUM_STATE))
    return _replayed(spark, log_dir, root, from_snapshot=True)


def _copy(warehouse: Warehouse, root: Path) -> DeltaRsTables:
    shutil.copytree(warehouse.root, root)
    return DeltaRsTables(str(root))


def test_a_log_that_ends_without_a_leader_draws_the_quorum_from_the_quorum_state_file(snapshot_warehouse, tmp_path):
    assert _sql(snapshot_warehouse, "SELECT count(*) AS n FROM metadata_log WHERE type = 'LeaderChangeMessage'") \
        == [{"n": 0}]
    first = _sql(snapshot_warehouse, "SELECT min(offset) AS o FROM metadata_log WHERE leader_epoch >= 1")[0]["o"]
    tl = build(snapshot_warehouse)
    assert [(q.leader, q.epoch, q.offset, q.from_quorum_state) for q in tl.quorum] == [(1, 1, first, True)]
    assert tl.quorum[0].start_ms == tl.start_ms  # the whole log is of that epoch
    page = render(tl, "snapshot", snapshot_warehouse.root)
    assert 'data-source="quorum-state"' in page and "No LeaderChangeMessage" not in page
    assert f"first record of the epoch, offset {first}" in page

    # a later copy of the directory: an election of epoch 2 began after the log's end; said, not drawn
    tables = _copy(snapshot_warehouse, tmp_path / "w")
    schema = table_arrow_schema("quorum_files")
    tables.append("quorum_files", pa.Table.from_pylist([{
        "file": "copy/quorum-state", "kind": "quorum-state", "leader_id": -1, "leader_epoch": 2, "voted_id": 1,
        "current_voters": [1], "epochs": None, "content": "{}"}], schema), schema)
    later = build(tables)
    assert later.quorum == [] and (later.quorum_state.epoch, later.quorum_state.ahead) == (2, True)
    assert "No record of the log is of that epoch: it began after the log" in render(later, "snapshot", tables.root)


# --- hostile and unusable data ----------------------------------------------------------------------------

def _hostile_names(probe: Path) -> list[str]:
    """Topic names a hand-written TopicRecord or ConfigRecord can carry: shell code, quotes, a name that
    ends in a backslash followed by one that reads a file through Spark's ``text.`` source, control
    characters, history expansion, non-ASCII."""
    return [f"$(touch {probe})", f"`touch {probe}`", "it's", "ends-in\\",
            "') OR true UNION ALL SELECT value, 0, 0, 0, 0, 0, 0 FROM text.`/etc/hostname` -- ",
            f"a\\'; touch {probe} #", "tab\tnew\nline\x1b[31m", "!! and !$ and ${HOME}", "名前"]


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def _add_hostile_topics(tables: DeltaRsTables, names: list[str], at_ms: int) -> None:
    """Each name a one-replica partition created, then offline and under min.insync.replicas, then elected
    unclean."""
    schema = table_arrow_schema("partition_history")
    rows = []
    for i, name in enumerate(names):
        common = {"topic": name, "topic_id": f"id{i}", "partition": 0, "replicas_before": [1], "replicas": [1],
                  "leader_epoch": 0, "partition_epoch": 0, "adding_replicas": [], "removing_replicas": []}
        rows.append({**common, "offset": 3000 + i, "applied_offset": 3000 + i, "timestamp": _at(at_ms + i),
                     "cause": "PartitionRecord", "change": "create", "leader": 1, "isr": [1]})
        rows.append({**common, "offset": 3100 + i, "applied_offset": 3100 + i, "timestamp": _at(at_ms + 100),
                     "cause": "PartitionChangeRecord", "change": "change", "leader_before": 1, "leader": -1,
                     "isr_before": [1], "isr": []})
    history = pa.Table.from_pylist(rows, schema)
    tables.append("partition_history", history, schema)
    _add_episodes(tables, [_episode(kind, f"{n}-0", n, 3100 + i, at_ms + 100) for i, n in enumerate(names)
                           for kind in ("offline_partition", "under_min_isr")] +
                  [_episode("unclean_election", f"{n}-0", n, 3200 + i, at_ms + 200) for i, n in enumerate(names)])


def _episode(kind: str, entity: str, topic: str | None, offset: int, ms: int, end: int | None = None,
             end_ms: int | None = None) -> dict:
    """An anomalies row as the controller writes it: a partition's (``topic``) or a broker's."""
    return {"kind": kind, "entity": entity, "topic": topic, "partition": None if topic is None else 0,
            "broker_id": None if topic is not None else 2, "start_offset": offset, "start_time": _at(ms),
            "end_offset": end, "end_time": None if end_ms is None else _at(end_ms), "cause": "leader_election",
            "cause_offset": offset, "detail": f"{entity} at {offset}"}


def _add_episodes(tables: DeltaRsTables, episodes: list[dict]) -> None:
    schema = table_arrow_schema("anomalies")
    tables.append("anomalies", pa.Table.from_pylist(episodes, schema), schema)


class _Commands(HTMLParser):
    """The page's moments: each one's SQL and the command line offered to run it, as a browser shows them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sql: list[str] = []
        self.cmd: list[str] = []
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "pre":
            self._into = {"sql": self.sql, "cmd": self.cmd}[dict(attrs)["class"]]
            self._into.append("")

    def handle_endtag(self, tag: str) -> None:
        self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self._into[-1] += data


def test_hostile_names_in_the_tables_never_run_when_the_page_is_pasted_into_bash(shutdown_warehouse, spark,
                                                                                 tmp_path):
    probe = tmp_path / "probe"
    names = _hostile_names(probe)
    # the warehouse's path is data too (no space or brace: delta-rs' reads fail on a path holding them)
    root = tmp_path / f"w'$(touch$IFS{probe}-warehouse)"
    tables = _copy(shutdown_warehouse, root)
    _add_hostile_topics(tables, names, report_job.parse_time("2026-01-30T17:00:00Z"))
    stub = tmp_path / "cwd"
    stub.mkdir()
    (stub / "spark-submit.sh").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (stub / "spark-submit.sh").chmod(0o755)
    pages = []
    for extra in ([], [a for n in names for a in ("--topic", n)]):
        out = tmp_path / f"report{len(pages)}.html"
        assert report_job.main(["--warehouse", str(root), "--out", str(out), *extra]) == 0
        page = _Commands()
        page.feed(out.read_text())
        assert len(page.sql) == len(page.cmd) > 5
        pages.append(page)
    for page in pages:
        for sql, cmd in zip(page.sql, page.cmd):
            assert subprocess.run(["bash", "-n", "-c", cmd]).returncode == 0
            # pasted into an interactive bash (history expansion on): it runs jobs/sql.py with exactly these
            # arguments, and nothing else
            ran = subprocess.run(["bash", "--norc", "--noprofile", "-i"], input=cmd + "\n", cwd=stub,
                                 capture_output=True, text=True, timeout=30)
            assert json.loads(ran.stdout) == ["jobs/sql.py", "--warehouse", str(root), sql], ran.stderr
    assert not list(tmp_path.glob("probe*"))
    # each name, as the SQL writes it, is exactly the name for Spark's parser
    for name in names:
        assert spark.sql(f"SELECT {sql_string(name)} AS v").first()["v"] == name
    # and the moments' SQL shows exactly the hostile topics: all offline, all under min.insync.replicas
    hostile = Warehouse(str(root), engine="delta-rs", spark=spark)
    for page in pages:
        listed = [{r["topic"] for r in _sql(hostile, sql)} for sql in page.sql if "end_offset IS NULL OR" in sql]
        assert listed.count(set(names)) == 2
        assert all(topics <= set(names) | {r["topic"] for r in _sql(hostile, "SELECT name AS topic FROM topics")}
                   for topics in listed)
    assert not list(tmp_path.glob("probe*"))


def test_every_anomaly_of_the_page_is_a_row_of_the_anomalies_table_and_the_shell_lists_them(
        shutdown_warehouse, spark, tmp_path, monkeypatch, capsys):
    root = tmp_path / "w"
    tables = _copy(shutdown_warehouse, root)
    whole = build(tables)
    at = whole.start_ms + 1000
    _add_episodes(tables, [_episode("unclean_election", "orders-0", "orders", 100, at, 100, at),
                           _episode("broker_flapping", "broker 2", None, 101, at),
                           _episode("quorum_leaderless", "quorum", None, 102, at),  # a kind this test does not know
                           # counted: under min.insync.replicas from 103 until a ConfigRecord lowered it at 110
                           _episode("under_min_isr", "orders-1", "orders", 103, at, 110, at + 5),
                           _episode("stuck_reassignment", "late-0", "late", 120, whole.end_ms + 1)])  # after the window
    tl = build(tables, end_ms=whole.end_ms)
    listed = [(m.offset, m.what) for m in tl.moments if 100 <= m.offset < 200]
    assert listed == [(100, "unclean election: orders-0 at 100"), (101, "broker flapping: broker 2 at 101"),
                      (102, "quorum leaderless: quorum at 102"), (103, f"1 partition(s) {UNDER_MIN_ISR}"),
                      (110, f"no partition {UNDER_MIN_ISR} any more (at most 1, for 5 ms)")]
    assert tl.series[UNDER_MIN_ISR].worst == 1 and tl.series[UNDER_MIN_ISR].at_end == 0
    # a topic chosen: its episodes, and every episode that is not a partition's
    assert [m.offset for m in build(tables, topics=["TestTopicPatient"]).moments if 100 <= m.offset < 200] == [101, 102]
    sql = {m.offset: m.sql for m in tl.moments}
    copy = Warehouse(str(root), engine="delta-rs", spark=spark)
    assert [(r["kind"], r["entity"]) for r in _sql(copy, sql[100])] == [("unclean_election", "orders-0")]
    assert [r["detail"] for r in _sql(copy, sql[103])] == ["orders-1 at 103"]
    assert [r["end_offset"] for r in _sql(copy, sql[110])] == [110]

    # the SQL shell: \anomalies lists what is open now, \anomalies WHAT a kind's, an entity's or a topic's
    monkeypatch.setattr("sys.stdin", io.StringIO("\\format json\n\\anomalies\n\\anomalies broker 2\n"
                                                 "\\anomalies orders\n\\anomalies unclean_election\n"))
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    capsys.readouterr()
    try:
        shell = Shell(Session(Catalog(copy), "text", 100, timing=True),
                      load_config(overrides=["kraftlake.sql.history.file="]))
        assert shell.run() == 0
    finally:
        _REGISTERED.clear()  # the catalog dropped this module's views
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    counts = [int(n) for n in re.findall(r"(\d+) row\(s\)", err)]
    assert counts == [57, 1, 2, 1], err  # 54 offline (the shutdown), flapping, leaderless, stuck
    now, broker, orders, unclean = (rows[sum(counts[:i]):sum(counts[:i + 1])] for i in range(4))
    offline = _sql(copy, "SELECT entity, start_offset FROM anomalies WHERE kind = 'offline_partition'")
    assert sorted((r["entity"], r["start_offset"]) for r in now if r["kind"] == "offline_partition") == \
        sorted((r["entity"], r["start_offset"]) for r in offline) and len(offline) == 54
    assert {r["kind"] for r in now} == {"offline_partition", "broker_flapping", "quorum_leaderless",
                                        "stuck_reassignment"}
    assert [r["start_offset"] for r in now] == sorted(r["start_offset"] for r in now)
    assert [r["age_ms"] for r in now if r["kind"] == "broker_flapping"] == [whole.end_ms - at]  # to the log's end
    assert [(r["kind"], r["end_offset"]) for r in broker] == [("broker_flapping", None)]
    assert [(r["entity"], r["end_offset"]) for r in orders] == [("orders-0", 100), ("orders-1", 110)]
    assert [r["entity"] for r in unclean] == ["orders-0"]


def test_a_warehouse_without_the_anomalies_table_is_refused_naming_the_replay(shutdown_warehouse, tmp_path, capsys):
    tables = _copy(shutdown_warehouse, tmp_path / "w")
    shutil.rmtree(tables.path("anomalies"))  # as a controller of a release before the table left it
    assert run_job("report", report_job.main, ["--warehouse", tables.root, "--out", str(tmp_path / "r.html")]) == USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no anomalies table" in err
    assert f"jobs/controller.py --warehouse {tables.root} --once --reset" in err
    assert not (tmp_path / "r.html").exists()


def test_a_value_the_report_cannot_use_is_one_notice_not_a_failure(shutdown_warehouse, tmp_path, capsys):
    tables = _copy(shutdown_warehouse, tmp_path / "w")
    before = build(tables)
    end = tables.max_value("metadata_log", "offset")
    schema = metadata_log_schema()
    tables.append("metadata_log", pa.Table.from_batches([events_to_arrow([  # 10^15 ms (year 33658), 10^14 ms BC
        {"offset": end + 1, "leader_epoch": -1, "timestamp": 10**15, "type": "NoOpRecord", "version": 0, "data": {}},
        {"offset": end + 2, "leader_epoch": -1, "timestamp": -(10**14), "type": "UnfenceBrokerRecord", "version": 0,
         "data": {"Id": 1, "Epoch": 6}}], schema)]), schema)
    history = table_arrow_schema("partition_history")
    tables.append("partition_history", pa.Table.from_pylist([{  # the change the controller made of the first
        "offset": end + 1, "applied_offset": end + 1, "timestamp": 10**15 * 1000,  # the table's unit is µs
        "cause": "PartitionChangeRecord", "change": "change", "topic": "TestTopicPatient", "topic_id": "x",
        "partition": 0, "leader_before": -1, "leader": 1, "isr_before": [1], "isr": [1]}], history), history)
    schema = table_arrow_schema("anomalies")  # and the episode it ended, as the controller wrote it
    episode = tables.read_arrow("anomalies").filter(pc.field("entity") == "TestTopicPatient-0").to_pylist()
    assert len(episode) == 1 and episode[0]["end_offset"] is None
    tables.upsert("anomalies", pa.Table.from_pylist([{**episode[0], "end_offset": end + 1, "end_time": 10**15 * 1000}],
                                                    schema), ["kind", "entity", "start_offset"], schema)

    tl = build(tables)
    assert (tl.start_ms, tl.end_ms) == (before.start_ms, before.end_ms)  # drawn at the time of the event before
    assert len(tl.notices) == 1 and f"offset {end + 1:,}" in tl.notices[0] and "2 event(s)" in tl.notices[0]
    last = tl.brokers[1][-1]  # unfenced, still in controlled shutdown: applied, at the log's last good time
    assert (last.state, last.start_ms, last.offset) == (SHUTTING_DOWN, tl.end_ms, end + 2)
    assert tl.series[OFFLINE].at_end == 53  # the partition that came back counts, at the end
    out = tmp_path / "r.html"
    assert report_job.main(["--warehouse", tables.root, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("report: notice: ")] == \
        [f"report: notice: {n}" for n in tl.notices]
    assert out.read_text().count('class="notice"') == 1


# --- what a person sees, in a real browser ----------------------------------------------------------------

@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium: found on PATH, else installed with apt-get when this runs as root (as CI does);
    the test is skipped, saying why, only where neither works."""
    found = report_job.find_chromium()
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
        for command in (install, ["apt-get", "update", "-q"], install):
            try:
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                continue
            if command is install and done.returncode == 0:
                break
        found = report_job.find_chromium()
    if found is None:
        pytest.skip("headless Chromium is not installed and could not be installed here: "
                    "`apt-get install chromium` (Debian) makes this test run")
    return found


class _Page(HTMLParser):
    """What the rendered DOM shows: the bands, the key numbers, the bars and the moments."""

    def __init__(self) -> None:
        super().__init__()
        self.bands: list[tuple[int, str, float]] = []  # broker, state, drawn width
        self.quiet = 0
        self.kpis: dict[str, str] = {}
        self.bars: Counter = Counter()
        self.moments: list[int] = []
        self._metric: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if "band" in (a.get("class") or ""):
            self.bands.append((int(a["data-broker"]), a["data-state"], float(a["width"])))
        elif "quiet" in (a.get("class") or "").split():
            self.quiet += 1
        elif "bar" in (a.get("class") or ""):
            self.bars[a["data-series"]] = max(self.bars[a["data-series"]], int(a["data-value"]))
        elif "moment" in (a.get("class") or ""):
            self.moments.append(int(a["data-offset"]))
        elif tag == "span" and "data-metric" in a:
            self._metric = a["data-metric"]

    def handle_data(self, data: str) -> None:
        if self._metric is not None and data.strip():
            self.kpis[self._metric] = data.strip()
            self._metric = None


def test_the_page_in_headless_chromium_shows_the_incident(shutdown_warehouse, chromium, tmp_path):
    out, png = tmp_path / "report.html", tmp_path / "report.png"
    assert report_job.main(["--warehouse", shutdown_warehouse.root, "--out", str(out), "--screenshot", str(png),
                            "--engine", "delta-rs"]) == 0
    page = _Page()
    page.feed(report_job.chromium(out, "--dump-dom").stdout)  # the DOM as the browser built it
    assert [band[:2] for band in page.bands] == [(1, REGISTERED), (1, UNFENCED), (1, SHUTTING_DOWN), (1, FENCED)]
    assert page.bands[2][2] >= 30  # the 84 ms of controlled shutdown, in a log of 40 minutes
    assert page.quiet >= 3  # the quiet stretches between, hatched
    offline = _sql(shutdown_warehouse, "SELECT count(*) AS n FROM partitions WHERE leader = -1")[0]["n"]
    total = _sql(shutdown_warehouse, "SELECT count(*) AS n FROM partitions")[0]["n"]
    assert page.kpis["offline-now"] == str(offline) and page.kpis["partitions"] == str(total)
    assert page.bars[OFFLINE] == offline and page.kpis["under-min-isr-max"] == "0"
    assert page.moments == sorted(page.moments) and len(page.moments) == 5

    # the screenshot: a PNG of the page, where the bands' colours are really painted
    import matplotlib.image as mpimg

    pixels = (mpimg.imread(png)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    colours = {tuple(p) for p in pixels[::7]}
    for hex_colour in ("#41ab5d", "#fdae6b", "#d62728"):  # unfenced, controlled shutdown, fenced
        rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, f"{hex_colour} is not on the screenshot"


def test_render_escapes_what_it_is_given():
    tl = Timeline.over(0, 10, buckets=10)
    count_episodes(tl, _episodes_table([]))
    count_partitions(tl, _history_table([]))
    page = render(tl, "<script>alert(1)</script>", "/tmp/w'<b>")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched when it opens
