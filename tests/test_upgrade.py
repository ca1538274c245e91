"""Upgrades: a warehouse written by the previous release (c283518, before tables carried a format
version; ``tests/data/README.md`` says how the sample was made) is read by this one, and its controller
goes on from its checkpoint exactly; a table in a format this release cannot read is refused before
anything starts, with the migration to make."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from deltalake import DeltaTable

from streaming_helpers import (assert_same_tables, logged_events, reference_tables, run_controller, sorted_rows,
                               warehouse_tables)
from kraftlake.cli import controller as controller_job
from kraftlake.cli import sql as sql_job
from kraftlake.cli.launcher import USAGE, run_job
from kraftlake.metadata.tables import FORMAT_PROPERTY, FORMAT_VERSION
from kraftlake.storage import DeltaRsTables, Warehouse
from kraftlake.storage.deltars import FormatError
from kraftlake.storage.ingest import ingest_source

SAMPLE = Path(__file__).parent / "data" / "warehouse-c283518.tar.gz"
SHARDS = 4  # as the sample's controller ran


def unpack(target: Path) -> Path:
    with tarfile.open(SAMPLE) as archive:
        archive.extractall(target, filter="data")
    return target / "warehouse"


def test_the_previous_releases_warehouse_is_read_and_its_controller_goes_on_exactly(spark, tmp_path: Path) -> None:
    root = unpack(tmp_path)
    tables = DeltaRsTables(str(root))
    versions = tables.check_format()
    assert set(versions.values()) == {"1"} and "metadata_log" in versions and "partitions" in versions
    checkpoint = root / "_checkpoints" / "controller"
    before = len(list((checkpoint / "commits").iterdir()))

    # this release appends what-if requests to the old log and creates what the old one did not have
    requests = tmp_path / "what-if.jsonl"
    last = tables.max_value("metadata_log", "offset")
    end_ms = max(e["timestamp"] for e in logged_events(Warehouse(str(root), spark=spark)))
    requests.write_text("".join(json.dumps(line) + "\n" for line in [
        {"type": "CreateTopicsRequest", "version": 7, "timestamp": end_ms + 10, "data": {
            "Topics": [{"Name": "after-upgrade", "NumPartitions": 3, "ReplicationFactor": 2, "Assignments": [],
                        "Configs": []}], "timeoutMs": 1000, "validateOnly": False}},
        {"type": "ElectLeadersRequest", "version": 2, "timestamp": end_ms + 20, "data": {
            "ElectionType": 0, "TopicPartitions": None, "TimeoutMs": 1000}}]))
    summary = ingest_source(tables, str(requests))
    assert (summary.first_offset, summary.rejected) == (last + 1, 0)

    warehouse = Warehouse(str(root), spark=spark)
    run_controller(warehouse, checkpoint, SHARDS, None)
    assert len(list((checkpoint / "commits").iterdir())) > before, "the old checkpoint was not continued"
    events = logged_events(warehouse)
    reference, actual = reference_tables(events, SHARDS), warehouse_tables(warehouse)
    # an episode under way when this release took over opens again where this release first sees it (a
    # partition's at its next change, a leader imbalance at the first judgement), if it still holds then
    under_way = {(r["kind"], r["entity"]) for r in reference["anomalies"]
                 if r["start_offset"] <= last and (r["end_offset"] is None or r["end_offset"] > last)}
    again = [r for r in actual["anomalies"] if (r["kind"], r["entity"]) in under_way]
    assert ("leader_imbalance", "broker 1") in under_way and all(r["start_offset"] > last for r in again)
    actual["anomalies"] = [r for r in actual["anomalies"] if r not in again]
    expected = written_since(reference, last)
    expected["anomalies"] = [r for r in expected["anomalies"] if (r["kind"], r["entity"]) not in under_way]
    assert_same_tables(actual, expected, "c283518's warehouse continued by this release vs one replay of its whole log")
    assert any(r["name"] == "after-upgrade" for r in warehouse.read_arrow("topics").to_pylist())
    assert DeltaRsTables(str(root)).format_versions()["metadata_log"] == "1"  # read and written as it is


def written_since(tables: dict[str, list[dict]], last: int) -> dict[str, list[dict]]:
    """A whole replay's tables as a warehouse continued after offset ``last`` holds them: the causes of
    partition changes and the tables this release added (broker_history, features, anomalies) only from there
    on."""
    causes = ("cause_kind", "cause_offset", "cause_broker")
    history = [r if r["applied_offset"] > last else {**r, **dict.fromkeys(causes)} for r in tables["partition_history"]]
    added = {name: [r for r in tables[name] if r["offset"] > last] for name in ("broker_history", "features")}
    return {**tables, "partition_history": sorted_rows(history), **added,
            "anomalies": [r for r in tables["anomalies"] if r["start_offset"] > last]}


@pytest.mark.parametrize("version,says", [
    (str(FORMAT_VERSION + 1), "written by a newer kraftlake: run that release (or a later one)"),
    ("0", "no release reads it as it is: ingest the original logs and events into a new warehouse"),
])
def test_a_format_this_release_cannot_read_is_refused_with_the_migration(tmp_path: Path, capsys, version: str,
                                                                      says: str) -> None:
    root = unpack(tmp_path)
    DeltaTable(str(root / "partitions")).alter.set_table_properties({FORMAT_PROPERTY: version},
                                                                     raise_if_not_exists=False)
    with pytest.raises(FormatError) as refused:
        DeltaRsTables(str(root)).check_format()
    message = str(refused.value)
    assert f"{root}/partitions has warehouse format {version!r} ({FORMAT_PROPERTY})" in message
    assert says in message and "this release reads formats 1: " in message
    capsys.readouterr()
    for name, job in (("controller", controller_job), ("sql", sql_job)):  # refused before Spark starts or writes
        args = ["--warehouse", str(root), *(["--once"] if job is controller_job else ["SELECT 1"])]
        assert run_job(name, job.main, args) == USAGE
        assert capsys.readouterr().err == f"{name}: {message}\n"
    assert not (root / "_leases").exists()


def test_tables_this_release_creates_carry_its_format(tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path))
    requests = tmp_path / "r.jsonl"
    requests.write_text('{"type": "UnregisterBrokerRequest", "version": 0, "timestamp": 1, "data": {"BrokerId": 1}}\n')
    ingest_source(tables, str(requests))
    assert tables.format_versions() == {"metadata_log": str(FORMAT_VERSION), "rejected": str(FORMAT_VERSION)}
