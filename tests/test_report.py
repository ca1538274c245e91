"""jobs/report.py: the incident timeline, checked three ways.

- The counting (offline, under min.insync.replicas, reassigning, per-broker changes) is column-wise numpy;
  a property test holds it equal to a plain replay of the same history, row by row, in any row order.
- On warehouses the controller built (the real single-broker-shutdown log, and a simulated cluster with
  crashes, ISR shrinks and reassignments), its numbers equal the oracle's and what Spark SQL says, and
  every moment's SQL returns what the moment claims.
- In a real browser (headless Chromium), the page shows the bands and counts a person reads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlake.cli import report as report_job
from kraftlake.cli import simulate as simulate_job
from kraftlake.cli.launcher import USAGE, run_job
from kraftlake.metadata.tables import table_arrow_schema
from kraftlake.report.html import render
from kraftlake.report.timeline import (FENCED, HISTORY_COLUMNS, OFFLINE, REASSIGNING, SHUTTING_DOWN, UNDER_MIN_ISR,
                                       UNFENCED, Timeline, build, count_partitions)
from kraftlake.spark.views import register_views
from kraftlake.storage import Warehouse
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


@st.composite
def histories(draw: st.DrawFn) -> list[dict]:
    """partition_history rows as the controller writes them: a partition is created, changed, maybe
    deleted and created again; several partitions may change at one offset; time never goes back."""
    partitions = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    state: dict[tuple[str, int], dict] = {}
    rows, offset, time = [], 0, 1_000
    for _ in range(draw(st.integers(1, 30))):
        offset += draw(st.integers(1, 3))
        time += draw(st.sampled_from([0, 1, 7, 50]))
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


def _history_table(rows: list[dict]) -> pa.Table:
    """The rows as the warehouse's partition_history columns (timestamps given in milliseconds)."""
    schema = table_arrow_schema("partition_history")
    columns = {name: pa.array([r[name] for r in rows], schema.field(name).type) for name in HISTORY_COLUMNS
               if name != "timestamp"}
    columns["timestamp"] = pa.array([r["timestamp"] for r in rows], pa.timestamp("ms", "UTC")).cast(
        schema.field("timestamp").type)
    return pa.table({name: columns[name] for name in HISTORY_COLUMNS})


@settings(max_examples=150, deadline=None)
@given(rows=histories(), window=st.tuples(st.integers(900, 1_400), st.integers(0, 600)),
       buckets=st.integers(1, 12), order=st.randoms(use_true_random=False))
def test_counts_equal_a_plain_replay_in_any_row_order(rows, window, buckets, order):
    start, length = window
    end = start + length
    min_isr, default = {"a": 2}, 1
    shuffled = list(rows)
    order.shuffle(shuffled)
    tl = Timeline(start, end, max(1, -(-(end - start + 1) // buckets)), buckets)
    count_partitions(tl, _history_table(shuffled), min_isr, default)

    levels = _plain_levels([r for r in rows if r["timestamp"] <= end], min_isr, default)
    for name in (OFFLINE, UNDER_MIN_ISR, REASSIGNING):
        expected = [_plain_bucket(levels, name, tl.bucket_start(i), tl.bucket_start(i + 1) if i + 1 < buckets
                                  else end + 1) for i in range(buckets)]
        assert tl.series[name].buckets == expected, name
        assert tl.series[name].at_end == (levels[-1][2][name] if levels else 0)
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


# --- warehouses the controller built ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def shutdown_warehouse(spark, fixtures_dir, tmp_path_factory) -> Warehouse:
    root = tmp_path_factory.mktemp("report-shutdown")
    warehouse = Warehouse(str(root / "warehouse"), engine="delta-rs", spark=spark)
    ingest_source(warehouse, str(fixtures_dir / "single-broker-shutdown" / "__cluster_metadata-0"))
    run_controller(warehouse, root / "checkpoint", shards=2, max_records_per_batch=None)
    return warehouse


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
    assert [q[2] for q in tl.quorum] == [1]  # one LeaderChangeMessage: node 1 leads
    _check_against_sql(shutdown_warehouse, tl, 1)
    shutdown = next(m for m in tl.moments if m.what == f"broker 1: {SHUTTING_DOWN}")
    assert len(_sql(shutdown_warehouse, shutdown.sql)) == 54  # every partition's leadership moved off broker 1


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
    tl = build(simulated_warehouse, kafka_config=MIN_ISR)
    assert tl.series[OFFLINE].worst > 0 or tl.series[UNDER_MIN_ISR].worst > 0
    assert tl.series[UNDER_MIN_ISR].worst > 0 and tl.series[REASSIGNING].worst > 0
    assert any(span.state == FENCED for spans in tl.brokers.values() for span in spans)
    assert tl.isr_leaves and tl.isr_joins
    _check_against_sql(simulated_warehouse, tl, 3)


def test_the_job_refuses_an_empty_warehouse_clearly(tmp_path, capsys):
    assert run_job("report", report_job.main, ["--warehouse", str(tmp_path / "none"), "--out", str(tmp_path / "r.html")]) \
        == USAGE
    assert "ingest a log first" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


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
        self.bands: list[tuple[int, str]] = []
        self.kpis: dict[str, str] = {}
        self.bars: Counter = Counter()
        self.moments: list[int] = []
        self._metric: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if "band" in (a.get("class") or ""):
            self.bands.append((int(a["data-broker"]), a["data-state"]))
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
    assert report_job.main(["--warehouse", shutdown_warehouse.root, "--from", SHUTDOWN_WINDOW, "--out", str(out),
                            "--screenshot", str(png), "--engine", "delta-rs"]) == 0
    page = _Page()
    page.feed(report_job.chromium(out, "--dump-dom").stdout)  # the DOM as the browser built it
    assert page.bands == [(1, UNFENCED), (1, SHUTTING_DOWN), (1, FENCED)]
    offline = _sql(shutdown_warehouse, "SELECT count(*) AS n FROM partitions WHERE leader = -1")[0]["n"]
    total = _sql(shutdown_warehouse, "SELECT count(*) AS n FROM partitions")[0]["n"]
    assert page.kpis["offline-now"] == str(offline) and page.kpis["partitions"] == str(total)
    assert page.bars[OFFLINE] == offline and page.kpis["under-min-isr-max"] == "0"
    assert page.moments == sorted(page.moments) and len(page.moments) == 3

    # the screenshot: a PNG of the page, where the bands' colours are really painted
    import matplotlib.image as mpimg

    pixels = (mpimg.imread(png)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    colours = {tuple(p) for p in pixels[::7]}
    for hex_colour in ("#41ab5d", "#fdae6b", "#d62728"):  # unfenced, controlled shutdown, fenced
        rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, f"{hex_colour} is not on the screenshot"


def test_render_escapes_what_it_is_given():
    tl = Timeline(0, 10, 1, 10)
    count_partitions(tl, _history_table([]), {}, 1)
    page = render(tl, "<script>alert(1)</script>", "/tmp/w'<b>")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched when it opens
