"""A job in local mode listens on loopback only: its driver's RPC and block manager have no
authentication by default, so every interface would expose them to the network (issue 28, point 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servers import listening_addresses, start, stop, wait_for_line

REPO = Path(__file__).resolve().parent.parent

# A job's first steps (the session every job gets), then it waits to be inspected.
JOB = """
import sys, time
from kraftlake.metadata.config import load_layers
from kraftlake.spark.session import get_spark
spark = get_spark(load_layers(None, []), "binding-test")
spark.range(4).count()
print("session ready", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from Linux's /proc")
def test_a_local_session_listens_on_loopback_only(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "PYSPARK_SUBMIT_ARGS")}
    env.update(PYTHONPATH=str(REPO / "lib"), PYSPARK_PYTHON=sys.executable)
    log = tmp_path / "job.log"
    process = start([sys.executable, "-c", JOB], log, env)
    try:
        wait_for_line(log, "session ready", process, 180)
        addresses = listening_addresses(process.pid)
    finally:
        stop(process)
    assert addresses, "the session's JVM listens somewhere (driver RPC, block manager): none was found"
    assert sorted(a for a in addresses if not a.startswith("127.0.0.1:")) == []
