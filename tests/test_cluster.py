"""The jobs on a real Spark standalone cluster (a master and two one-core workers on 127.0.0.1, from the
pinned pyspark), submitted with ``./spark-submit.sh --master spark://...`` as a user would: ingest, the
controller (``--once``, then running while new events are ingested), which runs the quorum query
beside it, the quorum view and SQL. Every table must equal a local-mode run of the same log.

The cluster is started once per test session (``spark_cluster`` in conftest), only when a test here runs.
Executors are separate processes on other "hosts" (their own work directories and Python workers), so
this also proves what must travel to them does: the library zip, the data source with its options.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from kraftlake.cli import quorum as quorum_job
from kraftlake.sim.quorum import SimConfig, Simulation
from kraftlake.sim.quorum_traffic import write_files
from kraftlake.sim.sample import write_sample
from kraftlake.storage import Warehouse
from kraftlake.storage.ingest import ingest
from servers import start, stop, wait_for
from streaming_helpers import REPO_ROOT, run_controller, sorted_rows, why_failed

SHARDS = 4  # kraftlake.shards' default, which the submitted jobs use


def submit(cluster, job: str, *args: str, timeout: float = 300) -> tuple[str, float]:  # noqa: ANN001
    """Run ``./spark-submit.sh --master <cluster> jobs/<job> args``; (stdout, seconds)."""
    started = time.monotonic()
    out = subprocess.run(cluster.submit_command(job, *args), cwd=REPO_ROOT, env=cluster.submit_env(),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{job} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout, time.monotonic() - started


def all_tables(warehouse: Warehouse) -> dict[str, list[dict]]:
    return {name: sorted_rows(warehouse.read_arrow(name).to_pylist()) for name in warehouse.names()}


def assert_same_warehouse(cluster_side: Warehouse, local: Warehouse) -> None:
    actual, expected = all_tables(cluster_side), all_tables(local)
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert len(actual[name]) == len(expected[name]), f"{name}: {len(actual[name])} rows, local {len(expected[name])}"
        assert actual[name] == expected[name], f"table {name} differs from the local-mode run"


@pytest.mark.slow
def test_jobs_on_a_standalone_cluster_equal_local_mode(spark_cluster, spark, tmp_path: Path,  # noqa: ANN001
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    log_dir, what_if = write_sample(tmp_path / "sample")
    quorum = Simulation(3, SimConfig(voters=3, duration_ms=2000)).run()
    _, traffic = write_files(quorum, tmp_path / "quorum")
    first = [str(log_dir), str(traffic)]
    requests = what_if.read_text().splitlines(keepends=True)
    parts = [tmp_path / "requests-1.jsonl", tmp_path / "requests-2.jsonl"]
    parts[0].write_text("".join(requests[:2]))
    parts[1].write_text("".join(requests[2:]))
    on_cluster = tmp_path / "cluster-warehouse"
    times: dict[str, float] = {}

    out, times["ingest"] = submit(spark_cluster, "ingest.py", "--warehouse", str(on_cluster), *first)
    assert "0 rejected" in out.splitlines()[-1]
    out, times["controller --once"] = submit(spark_cluster, "controller.py", "--warehouse", str(on_cluster), "--once")
    assert "quorum_state" in out

    out, times["sql"] = submit(spark_cluster, "sql.py", "--warehouse", str(on_cluster), "--format", "json",
                               "SELECT broker_id, fenced, in_controlled_shutdown FROM brokers ORDER BY broker_id")
    brokers = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert brokers == [{k: r[k] for k in ("broker_id", "fenced", "in_controlled_shutdown")}
                       for r in sorted(Warehouse(str(on_cluster)).read_arrow("brokers").to_pylist(),
                                       key=lambda r: r["broker_id"])]
    out, times["quorum describe"] = submit(spark_cluster, "quorum.py", "--warehouse", str(on_cluster),
                                           "describe", "--status", "--format", "json")
    status = json.loads(out.splitlines()[-1])

    # the controller keeps running on the cluster while the what-if requests are ingested
    warehouse = Warehouse(str(on_cluster))
    log = tmp_path / "controller-continuous.log"
    controller = start(spark_cluster.submit_command("controller.py", "--warehouse", str(on_cluster),
                                      "--override", "kraftlake.controller.trigger.interval.ms=500"),
                       log, spark_cluster.submit_env(), cwd=REPO_ROOT)
    try:
        # fed twice: the answers to the first part show the query is up before the second part lands
        for part in parts:
            expected = warehouse.read_arrow("responses").num_rows + len(part.read_text().splitlines())
            fed = time.monotonic()
            ingest(warehouse, [str(part)])
            answered = wait_for(lambda: warehouse.read_arrow("responses").num_rows >= expected
                                or controller.poll() is not None, 180, every=0.5)
            times[f"continuous: {part.name} ingested to answered"] = time.monotonic() - fed
            assert answered and controller.poll() is None, \
                f"no answers from the running controller:\n{why_failed(log.read_text())}"
    finally:
        stop(controller)

    local = Warehouse(str(tmp_path / "local-warehouse"), spark=spark)
    started = time.monotonic()
    ingest(local, [*first, *map(str, parts)])
    run_controller(local, local.root + "/_checkpoints/controller", SHARDS, None)
    times["local mode (in-process): ingest and controller"] = time.monotonic() - started
    with capsys.disabled():
        print("\ncluster vs local, seconds:", json.dumps({k: round(v, 1) for k, v in times.items()}))

    assert_same_warehouse(warehouse, local)
    capsys.readouterr()
    assert quorum_job.main(["--warehouse", local.root, "describe", "--status", "--format", "json"]) == 0
    assert status == json.loads(capsys.readouterr().out.splitlines()[-1])
    assert status["LeaderEpoch"] == max(r["leader_epoch"] for r in local.read_arrow("quorum_state").to_pylist())
