"""jobs/sql.py --serve as a SQL client meets it: started through spark-submit.sh, queried with pyspark's
own beeline (a Java JDBC client), compared with Spark SQL over the same tables, and stopped by its pid."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pyspark
import pytest

from kraftlake.spark.catalog import Catalog
from kraftlake.storage import Warehouse
from kraftlake.storage.ingest import ingest_source
from servers import child_pids, listening_addresses, start, stop, wait_for, wait_for_line

REPO = Path(__file__).resolve().parent.parent
BEELINE = Path(pyspark.__file__).parent / "bin" / "beeline"
SHUTDOWN = "single-broker-shutdown/__cluster_metadata-0"
QUESTIONS = ("SELECT type, count(*) AS n FROM metadata_log GROUP BY type ORDER BY type",
             "SELECT epoch, leader, first_offset, records FROM quorum_history ORDER BY epoch")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def beeline(url: str, statement: str) -> list[list[str]]:
    """The rows beeline prints for ``statement`` (csv2: a header line after its prompt, then a line per row)."""
    done = subprocess.run([str(BEELINE), "-u", url, "--silent=true", "--outputformat=csv2", "-e", statement],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line.split("> ", 1)[1] if line.startswith("0: jdbc:") else line for line in done.stdout.splitlines()]
    return list(csv.reader(line for line in lines if line))[1:]


def spark_rows(spark, root: str, statement: str) -> list[list[str]]:  # noqa: ANN001
    """The same statement in this test's own session, as beeline prints values (NULL as empty)."""
    rows = Catalog(Warehouse(root, spark=spark)).sql(statement).collect()
    return [["" if v is None else str(v) for v in row] for row in rows]


@pytest.mark.slow
def test_the_sql_server_answers_beeline_sees_new_commits_listens_on_loopback_and_stops(spark, fixtures_dir,
                                                                                       tmp_path) -> None:  # noqa: ANN001
    root = str(tmp_path / "w")
    ingest_source(Warehouse(root), str(fixtures_dir / SHUTDOWN))
    port = free_port()
    log = tmp_path / "server.log"
    process = start(["./spark-submit.sh", "jobs/sql.py", "--warehouse", root, "--serve", "--port", str(port),
                     "--override", "kraftlake.sql.server.refresh.interval.ms=200"], log, cwd=REPO)
    try:
        url = wait_for_line(log, r"sql: JDBC URL (\S+)", process, 600).group(1)
        assert url == f"jdbc:hive2://127.0.0.1:{port}/"
        assert f"{BEELINE} -u {url}" in log.read_text()  # how to connect, said where it listens

        # every port of the server's processes (Thrift, py4j, the driver's RPC and block manager) is loopback
        processes = [process.pid, *child_pids(process.pid)]
        addresses = listening_addresses(process.pid)
        assert f"127.0.0.1:{port}" in addresses, addresses
        assert sorted(a for a in addresses if not a.startswith("127.0.0.1:")) == []

        for question in QUESTIONS:
            assert beeline(url, question) == spark_rows(spark, root, question)
        before = int(beeline(url, "SELECT count(*) FROM metadata_log")[0][0])

        more = tmp_path / "more.jsonl"
        more.write_text("".join(json.dumps({"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1 + i,
                                            "data": {"BrokerId": 1, "BrokerEpoch": 8, "WantShutDown": False}}) + "\n"
                                for i in range(4)))
        ingest_source(Warehouse(root), str(more))
        # the server registers the table again within its refresh interval: a later query sees the rows
        assert wait_for(lambda: int(beeline(url, "SELECT count(*) FROM metadata_log")[0][0]) == before + 4, 120)

        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(120) == 0
        assert wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in processes), 60), processes
        assert "sql: stopping" in log.read_text()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        stop(process)
