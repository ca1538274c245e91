"""SIGTERM stops the continuous controller cleanly wherever it is: while it starts, in the middle of a
micro-batch, idle. Each time it exits 130 with no traceback or Java exception, gives its lease back and
leaves no process behind; once the last run has caught up with the log, the tables equal one replay of
the log by the core (``benchmarks.soak.replay_once``).

The controller is started as an operator starts it (``spark-submit.sh``), and the signal goes to the
launcher's pid only, as ``kill PID`` sends it.
"""

from __future__ import annotations

import json
import os
import signal
from argparse import Namespace
from pathlib import Path

import pytest

from benchmarks.soak import replay_once, table_multisets
from kraftlake.cli.config import config_from_args
from kraftlake.cli.launcher import INTERRUPTED
from kraftlake.cli.runtime import kafka_configs
from kraftlake.sim.cluster import ClusterSimulator, SimulationOptions
from kraftlake.sim.cluster_traffic import write_requests
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.lease import Lease
from servers import _group_alive, start, stop, wait_for
from streaming_helpers import REPO_ROOT, why_failed

EVENTS = 4000
BATCH = 250  # log rows per micro-batch: many batches, so that one is easily caught in flight
SHARDS = 2
STARTUP_S = 600  # a loaded machine starts Spark slowly


def _numbers(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


class Run:
    """One continuous controller on ``warehouse``, its output in ``log``."""

    def __init__(self, warehouse: Path, log: Path, *extra: str):
        self.warehouse, self.log = warehouse, log
        self.checkpoint = warehouse / "_checkpoints" / "controller"
        environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.process = start(["./spark-submit.sh", "--master", "local[2,4]", "jobs/controller.py",
                              "--warehouse", str(warehouse), "--shards", str(SHARDS), "--no-progress",
                              "--override", "kraftlake.controller.trigger.interval.ms=100",
                              "--override", f"kraftlake.controller.max.records.per.batch={BATCH}",
                              "--override", "spark.sql.shuffle.partitions=2", *extra],
                             log, environment, cwd=REPO_ROOT)

    def wait(self, condition, what: str) -> None:
        assert wait_for(lambda: condition() or self.process.poll() is not None, STARTUP_S, every=0.02), \
            f"never {what}:\n{why_failed(self.log.read_text())}"
        assert self.process.poll() is None, f"ended before {what}:\n{why_failed(self.log.read_text())}"

    def committed_offset(self) -> int:
        done = _numbers(self.checkpoint / "commits")
        if not done:
            return -1
        return json.loads((self.checkpoint / "offsets" / str(done[-1])).read_text().splitlines()[-1])["offset"]

    def in_flight(self) -> bool:
        """A micro-batch planned (its offsets written) and not committed, after one that was."""
        planned, done = _numbers(self.checkpoint / "offsets"), _numbers(self.checkpoint / "commits")
        return bool(done) and bool(planned) and planned[-1] > done[-1]

    def terminate(self) -> int:
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(300)
        finally:
            stop(self.process)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stop") / "w"
    write_requests(DeltaRsTables(str(root)), ClusterSimulator(SimulationOptions(brokers=6, topics=12, seed=4)),
                   EVENTS, "stop", 1000)
    return root


def _assert_stopped_cleanly(run: Run, code: int) -> None:
    text = run.log.read_text()
    assert code == INTERRUPTED, text[-3000:]
    assert "Traceback" not in text and "Exception" not in text and "StackOverflowError" not in text, text[-5000:]
    state, _ = Lease(str(run.warehouse), "controller", 60_000).look()
    assert state.holder is None, f"the lease is still held by {state.holder}"
    assert wait_for(lambda: not _group_alive(run.process.pid), 60), "processes left in the launcher's group"


@pytest.mark.slow
def test_sigterm_while_starting_mid_batch_and_idle_stops_cleanly(warehouse: Path, tmp_path: Path) -> None:
    tables = DeltaRsTables(str(warehouse))
    end = tables.max_value("metadata_log", "offset")

    # while starting: the lease is taken (the driver runs) and Spark is not up yet
    starting = Run(warehouse, tmp_path / "starting.log")
    starting.wait(lambda: (warehouse / "_leases" / "controller" / "_renewed").is_dir(), "took the lease")
    _assert_stopped_cleanly(starting, starting.terminate())
    assert _numbers(starting.checkpoint / "commits") == []

    mid = Run(warehouse, tmp_path / "mid.log")
    mid.wait(mid.in_flight, "had a micro-batch in flight")
    _assert_stopped_cleanly(mid, mid.terminate())
    assert mid.committed_offset() < end

    # the rest (micro-batches of up to 4,000, sized by time from 1,000 on), then idle: no micro-batch caught in flight
    idle = Run(warehouse, tmp_path / "idle.log", "--override", f"kraftlake.controller.max.records.per.batch={EVENTS}")
    idle.wait(lambda: idle.committed_offset() == end, "caught up with the log")
    _assert_stopped_cleanly(idle, idle.terminate())

    # the stops lost nothing and doubled nothing: the last run caught up, and every table is one replay
    expected, replayed = replay_once(tables, SHARDS, kafka_configs(config_from_args(Namespace())))
    assert replayed == EVENTS
    actual = table_multisets(tables)
    assert {name: (m.count, m.digest) for name, m in actual.items()} == \
        {name: (m.count, m.digest) for name, m in expected.items()}
