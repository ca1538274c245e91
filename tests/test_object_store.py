"""The warehouse on object storage: an S3-speaking server on 127.0.0.1 (moto's, ``tests/s3_server.py``),
reached only through configuration (``kraftlake.storage.*`` in a --conf-file), with the checkpoints on a
filesystem Hadoop reaches without the hadoop-aws jar (``kraftlake.checkpoints``).

No AWS_* variable is set for these tests: Spark's Python workers can only have reached the server
through the options the data source carried to them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from kraftlake.cli import controller as controller_job
from kraftlake.cli import quickstart
from kraftlake.storage import DeltaRsTables, Warehouse
from servers import wait_for
from streaming_helpers import (REPO_ROOT, assert_same_tables, committed_batches, controller_command, controller_env,
                               generate_log, ingest_jsonl, kill_controller_when, logged_events, reference_tables,
                               warehouse_tables, write_jsonl)


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


def test_quickstart_with_the_warehouse_on_s3(s3_server, spark, tmp_path: Path) -> None:  # noqa: ANN001
    root = f"s3://{s3_server.bucket()}/kraftlake"
    conf = s3_server.conf_file(tmp_path / "s3.properties")
    code = quickstart.main(["--warehouse", root, "--conf-file", str(conf), "--sample-dir", str(tmp_path / "sample"),
                            "--override", f"kraftlake.checkpoints={tmp_path / 'checkpoints'}"])
    assert code == 0
    warehouse = Warehouse(root, spark=spark, storage_options=s3_server.storage_options())
    assert {"metadata_log", "brokers", "partitions", "responses"} <= set(warehouse.names())
    assert not (tmp_path / "kraftlake").exists()  # nothing went to a local folder named like the prefix
    expected = reference_tables(logged_events(warehouse), 4)
    assert_same_tables(warehouse_tables(warehouse), expected, "quickstart on S3")
    # read back through Spark: the data source's tasks open the tables on S3 themselves
    assert warehouse.read_df("partitions").count() == len(expected["partitions"]) > 0


def test_s3a_checkpoints_without_hadoop_aws_are_refused_with_the_remedy(s3_server, spark, tmp_path: Path,  # noqa: ANN001
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    conf = s3_server.conf_file(tmp_path / "s3.properties")
    code = controller_job.main(["--warehouse", f"s3://{s3_server.bucket()}/w", "--conf-file", str(conf), "--once"])
    assert code == 1
    error = capsys.readouterr().err
    assert "s3a://" in error and "hadoop-aws" in error and "kraftlake.checkpoints" in error


def test_controller_killed_and_restarted_with_the_warehouse_on_s3(s3_server, tmp_path: Path) -> None:  # noqa: ANN001
    log = generate_log(seed=8, size=40)
    root = f"s3://{s3_server.bucket()}/killed"
    tables = DeltaRsTables(root, s3_server.storage_options())
    ingest_jsonl(tables, write_jsonl(log.events, tmp_path / "log.jsonl"))
    checkpoints = tmp_path / "checkpoints"
    command = controller_command(root, 12) + ["--conf-file", str(s3_server.conf_file(tmp_path / "s3.properties")),
                                              "--override", f"kraftlake.checkpoints={checkpoints}"]
    checkpoint = checkpoints / "controller"
    kill_controller_when(command, lambda: len(committed_batches(checkpoint)) >= 2, tmp_path / "killed.log")
    done_at_kill = committed_batches(checkpoint)
    restarted = subprocess.run(command, cwd=REPO_ROOT, env=controller_env(), capture_output=True, text=True,
                               timeout=300)
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    assert len(committed_batches(checkpoint)) > len(done_at_kill)
    warehouse = Warehouse(root, storage_options=s3_server.storage_options())
    assert_same_tables(warehouse_tables(warehouse), reference_tables(logged_events(warehouse), 2),
                       f"killed after batch {done_at_kill[-1]}, restarted, on S3")


WRITER = textwrap.dedent("""
    import sys, time, pathlib
    import pyarrow as pa
    from kraftlake.storage import DeltaRsTables
    root, writer, commits, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), pathlib.Path(sys.argv[4])
    options = dict(arg.split("=", 1) for arg in sys.argv[5:])
    tables = DeltaRsTables(root, options)
    schema = pa.schema([("writer", pa.int32()), ("n", pa.int32())])
    tables.exists("race")  # connected and imported: ready
    pathlib.Path(f"{go}.{writer}").touch()
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    for n in range(commits):
        tables.append("race", pa.table({"writer": [writer], "n": [n]}, schema=schema), schema)
""")


def test_two_writers_racing_on_s3_never_lose_a_commit(s3_server, tmp_path: Path) -> None:  # noqa: ANN001
    import boto3
    from botocore.exceptions import ClientError

    options = s3_server.storage_options()
    bucket = s3_server.bucket()
    # what delta-rs relies on: a put with If-None-Match: * fails once the key exists
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name=options["aws_region"],
                          aws_access_key_id=options["aws_access_key_id"],
                          aws_secret_access_key=options["aws_secret_access_key"])
    client.put_object(Bucket=bucket, Key="probe", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed|412"):
        client.put_object(Bucket=bucket, Key="probe", Body=b"2", IfNoneMatch="*")

    root, commits, go = f"s3://{bucket}/race", 15, tmp_path / "go"
    table = DeltaRsTables(root, options)
    table.create_if_missing("race", pa.schema([("writer", pa.int32()), ("n", pa.int32())]))  # version 0
    conflicts_before = s3_server.statuses().count(412)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib")}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, root, str(w), str(commits), str(go),
                                 *(f"{k}={v}" for k, v in options.items())], env=env, stderr=subprocess.PIPE, text=True)
               for w in (1, 2)]
    # both start committing at once, so their commits interleave
    assert wait_for(lambda: all(Path(f"{go}.{w}").exists() or p.poll() is not None for w, p in zip((1, 2), writers)),
                    60)
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err[-3000:]

    rows = sorted((r["writer"], r["n"]) for r in table.read_arrow("race").to_pylist())
    assert rows == sorted((w, n) for w in (1, 2) for n in range(commits)), "a commit was lost or doubled"
    history = table.table("race").history()
    assert sorted(h["version"] for h in history) == list(range(2 * commits + 1))  # one per commit, no gap
    assert s3_server.statuses().count(412) > conflicts_before, \
        "the writers never collided, so this run did not test the race"
