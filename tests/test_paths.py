"""Warehouses and sources at paths a URI would percent-encode: a space, braces. delta-rs names a table by a
``file:`` URI (``x%20y/%7Bw%7D``); a path taken from it without decoding names a folder that does not exist."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pyarrow as pa

from kraftlake.cli import controller as controller_job
from kraftlake.cli import ingest as ingest_job
from kraftlake.cli import sql as sql_job
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.ingest import SourceSummary

SHUTDOWN = "single-broker-shutdown"
SCHEMA = pa.schema([("offset", pa.int64()), ("name", pa.string())])


def test_tables_under_a_space_and_braces_read_back_by_path_and_by_file_uri(tmp_path: Path) -> None:
    root = tmp_path / "x y" / "{w}"
    tables = DeltaRsTables(str(root))
    tables.create_if_missing("t", SCHEMA)
    tables.append("t", pa.table({"offset": [3, 7], "name": ["a", "b"]}, SCHEMA), SCHEMA)
    assert tables.read_arrow("t").column("offset").to_pylist() == [3, 7]
    assert tables.max_value("t", "offset") == 7
    by_uri = DeltaRsTables(f"file://{tmp_path}/x%20y/%7Bw%7D")
    assert by_uri.root == str(root)
    assert by_uri.read_arrow("t", columns=["name"]).column("name").to_pylist() == ["a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["x y"]  # nothing written under an encoded name


def test_ingest_controller_and_sql_on_a_warehouse_and_a_log_with_a_space_and_braces(spark, fixtures_dir, tmp_path,
                                                                                    capsys) -> None:
    source = tmp_path / "log {copy} 1" / "__cluster_metadata-0"
    shutil.copytree(fixtures_dir / SHUTDOWN / "__cluster_metadata-0", source)
    warehouse = str(tmp_path / "x y" / "{w}")
    assert ingest_job.main(["--warehouse", warehouse, str(source)]) == 0
    assert controller_job.main(["--warehouse", warehouse, "--once"]) == 0
    capsys.readouterr()
    query = "SELECT (SELECT count(*) FROM metadata_log) AS records, (SELECT count(*) FROM partitions) AS partitions"
    assert sql_job.main(["--warehouse", warehouse, "--format", "json", query]) == 0
    expected = json.loads((fixtures_dir / SHUTDOWN / "expected-image.json").read_text())
    assert json.loads(capsys.readouterr().out) == {"records": sum(expected["record_counts"].values()),
                                                   "partitions": len(expected["partitions"])}
    assert not [p for p in tmp_path.rglob("*") if "%" in p.name]


def test_a_command_a_warning_prints_takes_such_a_path_as_one_argument() -> None:
    summary = SourceSummary("log.jsonl", "json-lines")
    summary.backfilled.add(3)
    (warning,) = summary.warnings("/tmp/x y/{w}")
    assert shlex.split(warning[warning.index("jobs/controller.py"):]) == \
        ["jobs/controller.py", "--warehouse", "/tmp/x y/{w}", "--once", "--reset"]
