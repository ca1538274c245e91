"""A job in local mode listens on loopback only: its driver's RPC and block manager, and Spark's web UI
when enabled, have no authentication by default, so every interface would expose them to the network
(issue 28, point 7). Both ways a job starts: plain python, and through spark-submit.sh. Either way a failed
task is retried, as on a cluster, plain python takes the master its config names, and the session's catalog
directory is not left in the directory the job ran in."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from servers import listening_addresses, start, stop, wait_for_line

REPO = Path(__file__).resolve().parent.parent

# A job's first steps (the session every job gets, with the web UI on), then it waits to be inspected.
JOB = """
import sys, time
from kraftlake.metadata.config import load_layers
from kraftlake.spark.session import get_spark
settings = {"spark.ui.enabled": "true", **dict(a.split("=", 1) for a in sys.argv[1:])}
spark = get_spark(load_layers(None, [(settings, "test")]), "binding-test")
spark.range(4).count()
context = spark.sparkContext
print("master", context.master, context._jsc.sc().taskScheduler().maxTaskFailures(), flush=True)
spark.sql("SHOW TABLES").collect()  # (the catalog, whose directory Spark makes)
print("catalog", spark.conf.get("spark.sql.warehouse.dir"), flush=True)
print("session ready", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from Linux's /proc")
@pytest.mark.parametrize("launcher", ["python", "spark-submit.sh"])
def test_a_local_session_listens_on_loopback_only(tmp_path: Path, launcher: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "PYSPARK_SUBMIT_ARGS", "MASTER")}
    env.update(PYTHONPATH=str(REPO / "lib"), PYSPARK_PYTHON=sys.executable)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    # plain python: the config's master (the JVM's launcher sets local[*] of its own, which must not win)
    command = [sys.executable, str(job), "spark.master=local[1,3]"] if launcher == "python" else \
        [str(REPO / "spark-submit.sh"), str(job)]
    log, cwd = tmp_path / "job.log", tmp_path / "cwd"
    cwd.mkdir()
    process = start(command, log, env, cwd=cwd)
    try:
        wait_for_line(log, "session ready", process, 240)
        addresses = listening_addresses(process.pid)
    finally:
        stop(process)
    # the driver's RPC endpoint, its block manager and the web UI at least
    assert len(addresses) >= 3, addresses
    assert sorted(a for a in addresses if not a.startswith("127.0.0.1:")) == []
    expected = "master local[1,3] 3" if launcher == "python" else "master local[*,4] 4"
    lines = log.read_text().splitlines()
    assert expected in lines, log.read_text()[-2000:]
    assert list(cwd.iterdir()) == []
    catalog = [line.split(" ", 1)[1] for line in lines if line.startswith("catalog ")]
    assert catalog and catalog[0].endswith(f"kraftlake-{os.getuid()}/spark-warehouse"), catalog
