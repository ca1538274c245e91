"""jobs/sql.py in-process: several statements per run, files and stdin, the shell's commands, tables
registered once and seen fresh, a table not written yet, Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from kraftlake.cli import sql as sql_job
from kraftlake.cli.sql_session import Session
from kraftlake.cli.sql_shell import Shell
from kraftlake.metadata.config import load_config
from kraftlake.metadata.tables import table_arrow_schema, table_names
from kraftlake.spark.catalog import Catalog, NotInWarehouse
from kraftlake.spark.notebook import attach
from kraftlake.spark.views import VIEWS
from kraftlake.storage import Warehouse
from kraftlake.storage.ingest import ingest_source
from streaming_helpers import wait_for

SHUTDOWN = "single-broker-shutdown/__cluster_metadata-0"
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas" / "tables"


@pytest.fixture(scope="module")
def logged(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A warehouse holding only what ingest writes (metadata_log, rejected, quorum_files): read-only here."""
    root = str(tmp_path_factory.mktemp("sql") / "w")
    ingest_source(Warehouse(root), str(fixtures_dir / SHUTDOWN))
    return root


def record_counts(fixtures_dir: Path) -> dict[str, int]:
    return json.loads((fixtures_dir / "single-broker-shutdown/expected-image.json").read_text())["record_counts"]


def heartbeats(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1763580879457 + i,
                                        "data": {"BrokerId": 1, "BrokerEpoch": 8, "WantShutDown": False}}) + "\n"
                            for i in range(count)))
    return path


def test_one_query_may_hold_several_statements(spark, logged, fixtures_dir, capsys) -> None:
    query = ("SELECT type, count(*) AS n FROM metadata_log GROUP BY type ORDER BY type;\n"
             "SELECT 'a;b' AS `semi;colon`; -- the end; of it\n")
    assert sql_job.main(["--warehouse", logged, "--format", "json", query]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["type"]: r["n"] for r in rows[:-1]} == record_counts(fixtures_dir)
    assert rows[-1] == {"semi;colon": "a;b"}
    assert sql_job.main(["--warehouse", logged, "--format", "table", "SELECT 1 AS one; SELECT 2 AS two"]) == 0
    out = capsys.readouterr().out
    assert "| one |" in out and "| two |" in out and out.count("1 row(s)") == 2


def test_a_file_stops_at_its_first_failing_statement_naming_its_line(spark, logged, tmp_path, capsys) -> None:
    questions = tmp_path / "questions.sql"
    questions.write_text("-- how many records\nSELECT count(*) AS records FROM metadata_log;\n\n"
                         "SELECT leader\n  FORM partitions;\nSELECT 'never run' AS third;\n")
    assert sql_job.main(["--warehouse", logged, "-f", str(questions)]) == 1
    captured = capsys.readouterr()
    assert "| records |" in captured.out and "never run" not in captured.out
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"sql: {questions}:4: [PARSE_SYNTAX_ERROR]")


def test_stdin_statements_run_in_one_session(spark, logged, fixtures_dir, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("CREATE OR REPLACE TEMPORARY VIEW kinds AS\n"
                                                 "  SELECT DISTINCT type FROM metadata_log;\n"
                                                 "SELECT count(*) AS kinds FROM kinds;\n"
                                                 "SELECT * FROM kinds_typo;\nSELECT 1;\n"))
    assert sql_job.main(["--warehouse", logged, "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f'{{"kinds": {len(record_counts(fixtures_dir))}}}']
    assert captured.err.strip().splitlines() == [
        f"sql: stdin:4: no table or view `kinds_typo` in {logged} (its tables: metadata_log, quorum_files, "
        "rejected; its views: describe, reassignments, open_anomalies, quorum_history, brokers_decoded, "
        "configs_decoded, partitions_decoded, partition_history_decoded, cluster)"]


def test_a_table_the_controller_has_not_written_names_the_job_that_writes_it(spark, logged, capsys) -> None:
    assert sql_job.main(["--warehouse", logged, "SELECT * FROM describe"]) == 1
    assert capsys.readouterr().err == (
        f"sql: `describe` is not in {logged} yet: it reads `partitions`, which jobs/controller.py writes; "
        f"run ./spark-submit.sh jobs/controller.py --warehouse {logged} --once first\n")
    assert sql_job.main(["--warehouse", logged, "SELECT broker_id FROM BROKERS WHERE fenced"]) == 1
    assert capsys.readouterr().err == (
        f"sql: `brokers` is not in {logged} yet: jobs/controller.py writes it; "
        f"run ./spark-submit.sh jobs/controller.py --warehouse {logged} --once first\n")


def write_partition(warehouse: Warehouse, topic: str, leader: int) -> None:
    schema = table_arrow_schema("partitions")
    row = {"topic": topic, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "partition": 0, "replicas": [1, 2], "isr": [leader],
           "leader": leader, "leader_epoch": 1, "partition_epoch": 1, "adding_replicas": [], "removing_replicas": [],
           "leader_recovery_state": 0, "elr": [], "last_known_elr": [], "directories": [], "last_offset": 7,
           "last_timestamp": 0}
    warehouse.append("partitions", pa.Table.from_pylist([row], schema), schema)


def test_tables_are_registered_once_when_first_named_and_seen_fresh(spark, fixtures_dir, tmp_path) -> None:
    warehouse = Warehouse(str(tmp_path / "w"), spark=spark)
    ingest_source(warehouse, str(fixtures_dir / SHUTDOWN))
    reads: list[str] = []
    read_df = warehouse.read_df
    warehouse.read_df = lambda name: reads.append(name) or read_df(name)  # type: ignore[method-assign]
    catalog = Catalog(warehouse)
    count = "SELECT count(*) FROM metadata_log"
    records = sum(record_counts(fixtures_dir).values())
    assert catalog.sql(count).collect()[0][0] == records
    assert catalog.sql(count).collect()[0][0] == records
    assert reads == ["metadata_log"]  # registered once, and only what the statement named

    ingest_source(warehouse, str(heartbeats(tmp_path / "more.jsonl", 3)))
    assert catalog.sql(count).collect()[0][0] == records + 3  # a commit after registration is seen
    assert catalog.sql("SELECT sum(records) FROM quorum_history").collect()[0][0] == records  # epoch -1: not Raft's
    assert reads == ["metadata_log", "metadata_log"]

    with pytest.raises(NotInWarehouse) as missing:
        catalog.sql("SELECT * FROM describe")
    assert (missing.value.name, missing.value.table, missing.value.writers) == ("describe", "partitions", ("controller",))
    write_partition(warehouse, "orders", 1)
    assert [tuple(r) for r in catalog.sql("SELECT topic, leader FROM describe").collect()] == [("orders", 1)]
    write_partition(warehouse, "payments", 2)
    assert catalog.sql("SELECT count(*) FROM describe").collect()[0][0] == 2  # a view reads its tables fresh too

    # controller --reset deletes the table; the next run creates it again, here up to the same version
    shutil.rmtree(warehouse.path("partitions"))
    with pytest.raises(NotInWarehouse):
        catalog.sql("SELECT * FROM partitions")
    write_partition(warehouse, "orders", 3)
    write_partition(warehouse, "payments", 4)
    assert sorted(tuple(r) for r in catalog.sql("SELECT topic, leader FROM describe").collect()) == [
        ("orders", 3), ("payments", 4)]

    # SHOW TABLES lists them all, named or not (the session may hold other temporary views of its own)
    listed = {r.tableName for r in catalog.sql("SHOW TABLES").collect()} & {*table_names(), *(v.name for v in VIEWS)}
    assert listed == {"metadata_log", "rejected", "quorum_files", "partitions", "describe", "quorum_history",
                      "partitions_decoded"}


def test_a_notebook_attaches_the_warehouse_and_its_own_spark_sql_sees_new_commits(spark, fixtures_dir,
                                                                                  tmp_path) -> None:
    root = str(tmp_path / "w")
    ingest_source(Warehouse(root), str(fixtures_dir / SHUTDOWN))
    records = sum(record_counts(fixtures_dir).values())
    catalog = attach(root, spark, refresh_every_s=0.2)
    try:
        count = "SELECT count(*) FROM metadata_log"
        assert spark.sql(count).collect()[0][0] == records  # the session's own spark.sql, no catalog in between
        assert spark.sql("SELECT count(*) FROM quorum_history").collect()[0][0] > 0
        ingest_source(Warehouse(root), str(heartbeats(tmp_path / "more.jsonl", 2)))
        assert wait_for(lambda: spark.sql(count).collect()[0][0] == records + 2, 60)
    finally:
        catalog.close()


def test_the_shell_answers_statements_over_lines_and_its_commands(spark, logged, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(
        "SELECT 1 AS a,\n  'x;y' AS b\n  ;\n\\tables\n\\d metadata_log\n\\d brokers\nSELEC 2;\n"
        "\\format json\nSELECT 3 AS c;\n\\q\nSELECT 'after quit';\n"))
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    catalog = Catalog(Warehouse(logged, spark=spark))
    session = Session(catalog, "text", 100, timing=False)
    shell = Shell(session, load_config(overrides=["kraftlake.sql.history.file="]))
    assert shell.run() == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    assert "| a | b   |" in out and "| 1 | x;y |" in out
    # \tables: every table with the first sentence of its schema's doc, and the views with theirs
    listed = {row[0]: row for row in table_rows(out) if len(row) == 3 and row[1] in ("table", "view")}
    for schema in SCHEMAS.glob("*.avsc"):
        declared = json.loads(schema.read_text())
        if "kraftlake" in declared:
            first = declared["doc"].split(". ")[0].rstrip(".") + "."
            present = schema.stem in ("metadata_log", "rejected", "quorum_files")
            assert listed[schema.stem][1:] == ("table", first if present else f"(not in the warehouse yet) {first}")
    assert listed["describe"][2] == ("(not in the warehouse yet: needs partitions) One line per partition, topics "
                                     "by name, in the spirit of kafka-topics.sh --describe.")
    assert listed["quorum_history"][1:] == ("view", "The metadata quorum's epochs (KIP-595): leader, voters, "
                                                    "records, duration.")
    assert "| offset " in out and "| bigint " in out and "Kafka offset for records read from a log" in out, err
    assert f"sql: `brokers` is not in {logged} yet: jobs/controller.py writes it" in err
    assert "sql: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'" in err  # and the shell went on
    assert '{"c": 3}' in out and "after quit" not in out


def table_rows(printed: str) -> list[tuple[str, ...]]:
    """The rows of the text tables in ``printed``, a row's wrapped lines (``:`` borders) joined again."""
    rows: list[list[str]] = []
    spans: list[tuple[int, int]] = []
    for line in printed.splitlines():
        if line.startswith("+"):
            cuts = [i for i, c in enumerate(line) if c == "+"]
            spans = list(zip(cuts, cuts[1:]))
        elif line[:1] in ("|", ":") and spans:
            cells = [line[a + 1:b].strip() for a, b in spans]
            if line[0] == "|":
                rows.append(cells)
            else:
                rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells)]
    return [tuple(row) for row in rows]


def test_ctrl_c_cancels_the_running_statement_and_the_session_goes_on(spark, logged, monkeypatch, capsys) -> None:
    # Only the statement runner's job group cancel may stop the job: not pyspark's own SIGINT handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    tracker = spark.sparkContext.statusTracker()
    session = Session(Catalog(Warehouse(logged, spark=spark)), "text", 10, timing=False)
    cancelled: list[int] = []

    def interrupt_once_running() -> None:
        deadline = time.monotonic() + 120
        while not tracker.getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.05)
        cancelled.extend(tracker.getActiveJobsIds())
        os.kill(os.getpid(), signal.SIGINT)

    try:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            session.run("SELECT sum(id % 7) FROM range(10000000000000)")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert cancelled

    def ended(job: int) -> str | None:  # Spark's listener bus says so a moment after the job's thread returned
        info = tracker.getJobInfo(job)
        return None if info is None or info.status == "RUNNING" else info.status

    assert wait_for(lambda: all(ended(job) for job in cancelled), 60)
    assert {ended(job) for job in cancelled} == {"FAILED"}  # cancelled: a sum over 10^13 rows never succeeded
    assert session.run("SELECT 'still here' AS s")
    assert "still here" in capsys.readouterr().out
