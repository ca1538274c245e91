"""``jobs/bench.py --quick``: every section of the report is there and consistent, and the chart is a
PNG. Behaviour only: timings on a shared machine are never asserted."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from benchmarks import stats, suite
from benchmarks.core import core_replay_chunked, simulated_requests
from benchmarks.memory import (NATIVE_MEMORY_TRACKING, all_processes, family, job_root, jvm_of, native_memory,
                               roles_of)
from benchmarks.scale_out import split_of
from benchmarks.soak import native_trends, restart_times, trend
from kraftlake.metadata.config import load_config
from kraftlake.sim.cluster import SimulationOptions


def test_slopes_and_percentiles():
    bench = stats
    assert bench.loglog_slope([10, 100, 1000], [2, 20, 200]) == 1.0
    assert bench.loglog_slope([10, 100, 1000], [1, 100, 10000]) == 2.0
    assert bench.fit([10, 100], [1, 10])["fit"] == "linear"
    assert bench.fit([10, 100], [1, 100])["fit"] == "worse than linear"
    assert bench.fit([10], [1]) == {"loglog_slope": None, "fit": None}
    assert bench.percentile([], 50) is None
    assert bench.percentile([3, 1, 2], 50) == 2
    assert bench.percentile(list(range(101)), 99) == 99


def test_a_replay_split_from_spark_s_event_log_rolled_into_files(tmp_path):
    """Overlapping jobs (the quorum's and the controller's) count once; the driver's time alone is what no
    job covers after the first one; an event log rolled into several files is read whole."""
    def job(job_id, begin, end, name):
        return [{"Event": "SparkListenerJobStart", "Job ID": job_id, "Submission Time": begin,
                 "Properties": {"spark.job.description": f"{name}\nid = 1"}},
                {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": end}]

    def task(executor, launch, finish):
        return {"Event": "SparkListenerTaskEnd", "Task Info": {"Executor ID": executor, "Launch Time": launch,
                                                               "Finish Time": finish}}

    first = [{"Event": "SparkListenerApplicationStart", "Timestamp": 1_000}, *job(0, 3_000, 5_000, "kraftlake_quorum"),
             *job(1, 4_000, 9_000, "kraftlake_controller"), task("0", 4_000, 5_000), task("1", 4_000, 6_000)]
    second = [*job(2, 10_000, 11_000, "kraftlake_controller"), task("0", 10_000, 10_500),
              {"Event": "SparkListenerApplicationEnd", "Timestamp": 12_000}]
    folder = tmp_path / "eventlog_v2_app-1"
    folder.mkdir()
    for name, events in (("events_1_app-1", first), ("events_2_app-1", second)):
        (folder / name).write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "appstatus_app-1").write_text("")

    assert split_of(tmp_path) == {
        "application_s": 11.0, "before_first_job_s": 2.0, "jobs_s": 7.0, "driver_alone_s": 2.0,
        "first_micro_batch_job_s": 5.0, "controller_jobs": 2, "task_s_by_executor": {"0": 1.5, "1": 2.0}}


@pytest.mark.parametrize("argv", [["--scale-out", "--scale-out-partitions", "1500"],
                                  ["--scale-out", "--scale-out-partitions", "0"],
                                  ["--target", "--target-partitions", "999"]])
def test_generated_cluster_partitions_must_be_whole_topics(argv, capsys):
    """The generated logs have topics of 1,000 partitions: any other count is refused before any work, by one
    line naming the flag and what it takes, rather than rounded to a cluster of another size."""
    with pytest.raises(SystemExit) as exit_:
        suite.main(argv)
    assert exit_.value.code == 2
    said = capsys.readouterr().err.splitlines()[-1]
    assert f"{argv[1]} must be a positive multiple of 1,000" in said and said.endswith(f"not {argv[2]}")


def test_core_replay_chunked_records_each_chunk_as_the_job_s_micro_batches_cut_it():
    """What the requests stage reports per micro-batch (first, last, range): one entry a chunk, in order, their
    events adding up to the log, and the same replay as without the record."""
    options = SimulationOptions(brokers=4, topics=3, partitions_per_topic=2)
    per_chunk: list[tuple[int, float, float]] = []
    _, count, states = core_replay_chunked(simulated_requests(2_500, options, {}), 2, chunk=1_000,
                                           per_chunk=per_chunk)
    _, _, plain = core_replay_chunked(simulated_requests(2_500, options, {}), 2, chunk=1_000)
    assert count == 2_500 and [n for n, *_ in per_chunk] == [1_000, 1_000, 500]
    assert all(seconds >= 0 and cpu >= 0 for _, seconds, cpu in per_chunk)
    assert [s.to_bytes() for s in states] == [s.to_bytes() for s in plain]


def test_the_requests_stage_s_core_figures_per_shard_count():
    """The requests stage times the pure core at the job's shards and on one shard (its broadcast's cost is the
    ratio): each figure counts every request, its rate is the count over its own seconds, and the chunks' rates
    bound one another."""
    options = SimulationOptions(brokers=4, topics=3, partitions_per_topic=2)
    config = load_config(overrides=["kraftlake.progress=never"])
    for shards in (1, 3):
        stage = suite.core_requests(config, 2_500, options, {}, shards, 1_000, f"test {shards}")
        assert stage["shards"] == shards and stage["requests"] == 2_500
        # (its seconds are rounded to the millisecond)
        assert stage["requests_per_s"] * stage["seconds"] == pytest.approx(2_500, rel=0.01) and stage["cpu_s"] > 0
        rates = stage["batch_requests_per_s"]
        assert rates["min"] <= min(rates["first"], rates["last"]) <= max(rates["first"], rates["last"]) <= rates["max"]


def test_a_memory_trend_is_growth_only_beyond_its_noise_band():
    """Worked by hand: a straight line has no band; samples that swing ±1 about a flat line have a slope of
    -0.4 per step with a band of 2 standard errors, 2·sqrt(3.2 / 2 / 5) = 1.13, so neither growth nor
    shrinkage is told."""
    assert trend([(0, 0), (1, 2), (2, 4)], "mb_per_min") == {"slope_mb_per_min": 2.0, "noise_band_mb_per_min": 0.0,
                                                             "grows": True}
    assert trend([(0, 1), (1, -1), (2, 1), (3, -1)], "mb_per_life") == {
        "slope_mb_per_life": -0.4, "noise_band_mb_per_life": 1.13, "grows": False}
    # a clear rise through the same swings
    assert trend([(x, 10 * x + (1 if x % 2 else -1)) for x in range(8)], "mb_per_min")["grows"] is True
    assert trend([(0, 1), (1, 2)], "mb_per_min") == {"slope_mb_per_min": None, "noise_band_mb_per_min": None,
                                                     "grows": None}


def test_the_jvm_s_native_memory_trends_by_category():
    """Worked by hand: the code cache grows 1 MB a minute, the heap stays; a category that appears only
    later (jcmd leaves out those under 1 KB) counts as 0 before; one under 1 MB throughout is left out."""
    samples = [{"t": 60.0 * m, "jvm_native": {"Java Heap": 700_000_000, "Code": 40_000_000 + 1_000_000 * m,
                                              "Tracing": 32_768, **({"Arena Chunk": 2_000_000} if m == 3 else {})}}
               for m in range(4)]
    trends = native_trends(samples)
    assert sorted(trends) == ["Arena Chunk", "Code", "Java Heap"]
    assert trends["Code"] == {"first_mb": 40.0, "last_mb": 43.0, "within_lives": {
        "slope_mb_per_min": 1.0, "noise_band_mb_per_min": 0.0, "grows": True}}
    assert trends["Java Heap"]["within_lives"]["grows"] is False and trends["Java Heap"]["last_mb"] == 700.0
    assert (trends["Arena Chunk"]["first_mb"], trends["Arena Chunk"]["last_mb"]) == (0.0, 2.0)


def test_restart_times_from_the_soak_s_start_lines_and_the_checkpoint_s_commit_files(tmp_path):
    """Each start after the first is timed to the first commit written before the next start; a start
    killed before it committed anything is counted, not timed."""
    t0 = 1_795_000_000.0
    log = tmp_path / "soak-controller.log"
    log.write_text("".join(f"\n--- start {i + 1} at {datetime.fromtimestamp(t0 + 60 * i, timezone.utc).isoformat()} ---\n"
                           f"[controller] output of life {i + 1}\n" for i in range(4)))
    commits = tmp_path / "checkpoint" / "commits"
    commits.mkdir(parents=True)
    for batch, at in enumerate([30, 85, 90, 200]):  # lives 1, 2, 2 and 4: life 3 committed nothing
        (commits / str(batch)).write_text("v1\n")
        os.utime(commits / str(batch), (t0 + at, t0 + at))
    (commits / ".0.crc").write_text("")

    assert restart_times(log, tmp_path / "checkpoint") == {"p50": 22.5, "max": 25.0, "starts": 3,
                                                          "starts_without_a_commit": 1}


def test_takeover_times_from_the_soak_s_kill_lines(tmp_path):
    """With a standby, each kill is timed to the first commit after it: the standby's start lines (long
    before) are not restarts."""
    t0 = 1_795_000_000.0

    def line(what: str, number: int, at: float) -> str:
        return f"\n--- {what} {number} at {datetime.fromtimestamp(t0 + at, timezone.utc).isoformat()} ---\n"

    log = tmp_path / "soak-controller.log"
    log.write_text(line("start", 1, 0) + line("standby", 2, 1) + line("kill", 1, 60) + line("standby", 3, 75)
                   + line("kill", 2, 120) + line("kill", 3, 180))
    commits = tmp_path / "checkpoint" / "commits"
    commits.mkdir(parents=True)
    for batch, at in enumerate([30, 71, 73, 131]):  # kill 3 (at 180) is followed by no commit
        (commits / str(batch)).write_text("v1\n")
        os.utime(commits / str(batch), (t0 + at, t0 + at))

    assert restart_times(log, tmp_path / "checkpoint", "kill") == {"p50": 11.0, "max": 11.0, "starts": 3,
                                                                  "starts_without_a_commit": 1}
    assert restart_times(log, tmp_path / "checkpoint")["starts"] == 0  # one start: no restart of a process


def test_memory_roles_of_a_driver_that_spark_submit_started(tmp_path):
    # spark-submit's JVM starts the Python driver and the Python workers: a "java" parent with two
    # Python children stands for it, the first the driver; and a fork of it that has not exec'd (as the
    # JVM is for a moment when it starts a worker), which holds the JVM's pages, not more of them.
    java = tmp_path / "java"
    java.symlink_to(sys.executable)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    parent = subprocess.Popen([str(java), "-c", f"import os, subprocess, time; ps = [subprocess.Popen({sleeper!r}) "
                               "for _ in range(2)]; fork = os.fork(); fork or time.sleep(60); "
                               "print(*(p.pid for p in ps), fork, flush=True); ps[0].wait()"],
                              stdout=subprocess.PIPE, text=True)
    try:
        driver, worker, fork = map(int, parent.stdout.readline().split())
        assert fork in family(parent.pid, all_processes())
        deadline = time.monotonic() + 30
        while job_root(worker) != parent.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job_root(driver) == parent.pid and job_root(os.getpid()) == os.getpid()
        roles = roles_of(parent.pid, lambda pid, _: pid == driver)
        assert all(roles[name] > 0 for name in ("driver_python", "driver_jvm", "workers"))
        jvm = all_processes()[parent.pid][2]
        assert roles["driver_jvm"] < 1.5 * jvm, "the fork's resident size was counted too"
        alone = roles_of(driver, lambda pid, _: pid == driver)
        # a live process's resident size moves by a page between two samples: only its own role is counted
        assert alone["driver_python"] > 0 and alone["driver_jvm"] == alone["workers"] == 0
        shared = roles_of(parent.pid, lambda pid, _: pid == driver, proportional=True)
        assert 0 < shared["workers"] <= roles["workers"] and shared["driver_jvm"] > 0
    finally:
        for pid in (driver, worker, fork):
            os.kill(pid, 9)
        parent.wait(30)


def test_a_jvm_s_native_memory_by_category_adds_up_to_its_total(tmp_path):
    """A real JVM started with native memory tracking (as the soak starts its controller with
    --soak-native-memory): its categories, read through jcmd, add up to jcmd's own total; one started without
    it gives nothing, and a process that is no JVM is not asked (jcmd's SIGQUIT would end it)."""
    (tmp_path / "Sleep.java").write_text("class Sleep { public static void main(String[] a) throws Exception "
                                         "{ System.out.println(\"up\"); Thread.sleep(120000); } }\n")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    started = []
    try:
        for options in ([NATIVE_MEMORY_TRACKING], []):
            process = subprocess.Popen([java, *options, "Sleep.java"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
            started.append(process)
            assert process.stdout.readline() == "up\n"
        tracked, untracked = started
        assert jvm_of(tracked.pid) == tracked.pid
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started.append(sleeper)
        assert jvm_of(sleeper.pid) is None
        committed = native_memory(tracked.pid)
        total = committed.pop("Total")
        assert {"Java Heap", "Class", "Code", "Thread", "GC"} <= committed.keys()
        assert all(size >= 0 for size in committed.values()) and committed["Java Heap"] > 0
        # each category is rounded to a KB by jcmd: their sum is its total within a KB per category
        assert abs(sum(committed.values()) - total) <= 1024 * len(committed)
        assert native_memory(untracked.pid) == {} and native_memory(os.getpid()) == {}
    finally:
        for process in started:
            process.kill()
            process.wait(30)


@pytest.mark.slow
def test_quick_run_writes_every_section_and_a_png(spark, tmp_path):
    bench = suite
    report_path, chart_path = tmp_path / "report.json", tmp_path / "bench.png"
    assert bench.main(["--quick", "--report", str(report_path), "--chart", str(chart_path),
                       "--workdir", str(tmp_path / "work")]) == 0
    report = json.loads(report_path.read_text())
    shards = report["shards"]

    stages = report["stages"]
    for stage in ("generate", "decode", "core replay", "ingest into Delta", "raw Delta scan (Spark)",
                  "Spark replay (AvailableNow)"):
        assert stages[stage]["records"] == report["events"] and stages[stage]["records_per_s"] > 0, stage
    assert set(report["ratios"]) == {"spark/core", "spark/raw scan", "core/raw scan"}

    latency = report["latency"]
    assert latency["drained"] and latency["batches"] >= 1
    assert latency["events_appended"] == latency["rate_events_per_s"] * latency["seconds"]
    assert sum(b["events"] for b in latency["per_batch"]) == latency["events_appended"]
    for key in ("trigger_execution_ms", "add_batch_ms", "end_to_end_lag_ms"):
        assert 0 <= latency[key]["p50"] <= latency[key]["p99"] <= latency[key]["max"], key
    assert latency["end_to_end_lag_ms"]["appends_seen"] == latency["seconds"]

    state = report["state"]
    assert len(state["core_bytes_per_shard"]) == shards and state["core_bytes_total"] > 0
    assert state["spark_state_store"][0]["rows"] == shards

    failover = report["failover"]
    # broker 1 is in every partition's ISR: every partition changes, a third of them lose their leader
    assert failover["partition_changes"] == failover["partitions"]
    assert failover["expiry_records"] == failover["partitions"] + 1  # and the fencing
    assert abs(failover["broker_led"] - failover["partitions"] / 3) <= 1
    assert 0 <= failover["decide_controlled_shutdown_s"]["min"] <= failover["decide_controlled_shutdown_s"]["median"]
    assert failover["shard_step_rows"] > failover["partitions"]

    scaling = report["scaling"]
    assert [r["partitions"] for r in scaling["partitions"]] == bench.QUICK["scaling_partitions"]
    assert [r["events"] for r in scaling["events"]] == bench.QUICK["scaling_events"]
    assert all(len(r["state_bytes_per_shard"]) == shards for r in scaling["partitions"])
    assert set(scaling["fits"]) == {"replay_time_vs_partitions", "state_bytes_vs_partitions",
                                    "failover_time_vs_partitions", "replay_time_vs_events"}
    for name, f in scaling["fits"].items():
        assert isinstance(f["loglog_slope"], float) and f["fit"] in ("linear", "worse than linear"), name

    profile = report["profile"]
    assert len(profile["by_cumulative"]) == len(profile["by_own_time"]) == 15
    own = [r["own_s"] for r in profile["by_own_time"]]
    assert own == sorted(own, reverse=True)
    assert any("replay" in r["function"] for r in profile["by_cumulative"])

    png = chart_path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 500 and height > 300
    assert png.rstrip(b"\x00")[-8:-4] == b"IEND"
