"""The jobs on a real Spark standalone cluster (a master and two one-core workers on 127.0.0.1, from the
pinned pyspark), submitted with ``./spark-submit.sh --master spark://...`` as a user would: ingest (its
records decoded in the executors' tasks), then the controller, running: it replays the log ingested before
it started, then answers requests ingested while it runs, with the quorum query beside it; then SQL and the
quorum view over the warehouse it left.
Every table must equal a local-mode run of the same log.

The cluster is started once per test session (``spark_cluster`` in conftest), only when a test here runs.
Executors are separate processes on other "hosts" (their own work directories and Python workers), so
this also proves what must travel to them does: the library zip, the data source with its options.
"""

from __future__ import annotations

import json
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
from streaming_helpers import REPO_ROOT, committed_offset, run_controller, sorted_rows, why_failed

SHARDS = 4  # kraftlake.shards' default, which the submitted jobs use


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

    def submit(job: str, *args: str) -> str:
        out, times[job] = spark_cluster.submit(job, "--warehouse", str(on_cluster), *args,
                                               err=tmp_path / f"{job}.err", timeout=300)
        return out

    # its records decoded by the executors' tasks, each piece shipped with its bytes
    assert "0 rejected" in submit("ingest.py", "--override", "kraftlake.ingest.decoders=spark", *first).splitlines()[-1]

    # the controller, started on the cluster, replays the log ingested before it (both queries up to its last
    # offset), then answers the what-if requests ingested while it runs
    warehouse = Warehouse(str(on_cluster))
    end = warehouse.max_value("metadata_log", "offset")
    checkpoint = on_cluster / "_checkpoints" / "controller"
    log = tmp_path / "controller-continuous.log"
    started = time.monotonic()
    controller = start(spark_cluster.submit_command("controller.py", "--warehouse", str(on_cluster),
                                      "--override", "kraftlake.controller.trigger.interval.ms=500"),
                       log, spark_cluster.submit_env(), cwd=REPO_ROOT)
    try:
        replayed = wait_for(lambda: committed_offset(checkpoint) == end == committed_offset(checkpoint / "quorum")
                            or controller.poll() is not None, 240, every=0.5)
        times["continuous: started to the first log replayed"] = time.monotonic() - started
        assert replayed and controller.poll() is None, \
            f"the running controller did not replay the first log:\n{why_failed(log.read_text())}"
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

    out = submit("sql.py", "--format", "json",
                 "SELECT broker_id, fenced, in_controlled_shutdown FROM brokers ORDER BY broker_id")
    brokers = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert brokers == [{k: r[k] for k in ("broker_id", "fenced", "in_controlled_shutdown")}
                       for r in sorted(warehouse.read_arrow("brokers").to_pylist(), key=lambda r: r["broker_id"])]
    status = json.loads(submit("quorum.py", "describe", "--status", "--format", "json").splitlines()[-1])

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
