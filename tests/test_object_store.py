"""The warehouse on object storage: an S3-speaking server on 127.0.0.1 (moto's, ``tests/s3_server.py``),
reached only through configuration (``kraftlake.storage.*`` in a --conf-file), with the checkpoints on a
filesystem Hadoop reaches without the hadoop-aws jar (``kraftlake.checkpoints``).

No AWS_* variable is set for these tests: Spark's Python workers can only have reached the server
through the options the data source carried to them.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from kraftlake.cli import controller as controller_job
from kraftlake.cli import quickstart
from kraftlake.metadata.tables import metadata_log_schema
from kraftlake.storage import DeltaRsTables, Warehouse
from streaming_helpers import (REPO_ROOT, assert_same_tables, committed_batches, controller_command, controller_env,
                               generate_log, ingest_jsonl, kill_controller_when, logged_events, reference_tables,
                               warehouse_tables, write_jsonl)


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


def test_quickstart_with_the_warehouse_on_s3(s3_server, spark, tmp_path: Path,  # noqa: ANN001
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = f"s3://{s3_server.bucket()}/kraftlake"
    conf = s3_server.conf_file(tmp_path / "s3.properties")
    code = quickstart.main(["--warehouse", root, "--conf-file", str(conf), "--sample-dir", str(tmp_path / "sample"),
                            "--override", f"kraftlake.checkpoints={tmp_path / 'checkpoints'}"])
    assert code == 0
    # the tour's answers on stdout, what it did on the way (the sample, the ingests, what next) on stderr
    out, err = capsys.readouterr()
    assert "Brokers now:" in out and "| broker_id |" in out
    assert "sample cluster written to" in err and "(partition-dir): " in err and "next: " in err
    assert "sample cluster written to" not in out and "(partition-dir): " not in out and "next: " not in out
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
    root = f"s3://{s3_server.bucket()}/w"
    DeltaRsTables(root, s3_server.storage_options()).create_if_missing("metadata_log", metadata_log_schema())
    code = controller_job.main(["--warehouse", root, "--conf-file", str(conf), "--once"])
    assert code == 1
    error = capsys.readouterr().err
    assert "s3a://" in error and "hadoop-aws" in error and "kraftlake.checkpoints" in error


@pytest.mark.slow
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


def test_two_writers_racing_on_s3_never_lose_a_commit(s3_server) -> None:  # noqa: ANN001
    """Each round, two writers commit against the same table version, as two jobs appending at once do:
    when both put the next _delta_log entry, the store lets one win (If-None-Match: *), the other's put
    fails with 412 and delta-rs commits it at the following version. A store or a setting that let the second
    put overwrite the first would lose a commit here every round."""
    import boto3
    from botocore.exceptions import ClientError
    from deltalake import DeltaTable, write_deltalake

    options = s3_server.storage_options()
    bucket = s3_server.bucket()
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name=options["aws_region"],
                          aws_access_key_id=options["aws_access_key_id"],
                          aws_secret_access_key=options["aws_secret_access_key"])
    client.put_object(Bucket=bucket, Key="probe", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed|412"):
        client.put_object(Bucket=bucket, Key="probe", Body=b"2", IfNoneMatch="*")

    schema = pa.schema([("writer", pa.int32()), ("round", pa.int32())])
    tables = DeltaRsTables(f"s3://{bucket}/race", options)
    tables.create_if_missing("race", schema)  # version 0
    rounds, conflicts_before = 8, s3_server.statuses().count(412)
    for round_ in range(rounds):
        snapshots = [DeltaTable(tables.path("race"), storage_options=options) for _ in (1, 2)]  # same version
        errors: list[BaseException] = []

        def commit(writer: int) -> None:
            try:
                write_deltalake(snapshots[writer - 1], pa.table({"writer": [writer], "round": [round_]}, schema=schema),
                                mode="append")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=commit, args=(w,)) for w in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors

    rows = sorted((r["writer"], r["round"]) for r in tables.read_arrow("race").to_pylist())
    assert rows == sorted((w, r) for w in (1, 2) for r in range(rounds)), "a commit was lost or doubled"
    versions = sorted(h["version"] for h in tables.table("race").history())
    assert versions == list(range(2 * rounds + 1)), "one version per commit, none overwritten"
    # a writer that sees the other's commit before its own put moves on without one; most rounds collide
    assert s3_server.statuses().count(412) > conflicts_before, "no put ever collided: the race was not tested"
