"""Ingest into the Delta metadata log: real logs, hand-written events, bad input, idempotence, the jobs."""

from __future__ import annotations

import collections
import json
import shutil
import struct
from pathlib import Path

import fastavro
import pyarrow.compute as pc
import pytest

from kraftlake.codec import events as events_mod
from kraftlake.codec.writer import write_partition_dir
from kraftlake.storage import ingest
from kraftlake.storage import deltars
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.tables import rows_to_events

REPO = Path(__file__).resolve().parent.parent
from kraftlake.cli import dump as dump_job
from kraftlake.cli import ingest as ingest_job
from kraftlake.cli import sql as sql_job
from kraftlake.cli.launcher import USAGE, run_job

SHUTDOWN = "single-broker-shutdown/__cluster_metadata-0"
RESTARTS = "single-broker-restarts/__cluster_metadata-0"


def counts(tables: DeltaRsTables) -> dict[str, int]:
    column = tables.read_arrow("metadata_log", columns=["type"]).column("type").to_pylist()
    return dict(collections.Counter(column))


def log_rows(tables: DeltaRsTables) -> int:
    return tables.read_arrow("metadata_log", columns=["offset"]).num_rows


def copy_log(fixtures_dir: Path, name: str, target: Path) -> Path:
    directory = target / "__cluster_metadata-0"
    shutil.copytree(fixtures_dir / name, directory)
    directory.chmod(0o755)
    for file in directory.iterdir():
        file.chmod(0o644)
    return directory


def batch_layout(buf: bytes) -> list[tuple[int, int, int, int]]:
    out, pos = [], 0
    while pos + 61 <= len(buf):
        base, length = struct.unpack_from(">qi", buf, pos)
        out.append((pos, 12 + length, base, struct.unpack_from(">i", buf, pos + 57)[0]))
        pos += 12 + length
    return out


@pytest.mark.parametrize("name,full_history", [("single-broker-shutdown", False),
                                               ("single-broker-restarts", False),
                                               ("single-broker-snapshot", True),
                                               ("three-brokers-restarts", False)])
def test_real_logs_land_with_the_oracles_record_counts(fixtures_dir, tmp_path, name, full_history):
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(fixtures_dir / name / "__cluster_metadata-0"),
                                   full_history=full_history, batch_records=1000)
    expected = json.loads((fixtures_dir / name / "expected-image.json").read_text())["record_counts"]
    assert counts(tables) == expected
    assert dict(summary.by_type) == expected and summary.rejected == 0
    offsets = tables.read_arrow("metadata_log", columns=["offset"]).column("offset").to_pylist()
    assert sorted(offsets) == list(range(len(offsets)))  # a real metadata log has no gaps
    assert tables.read_arrow("rejected").num_rows == 0


def test_the_same_source_twice_adds_nothing(fixtures_dir, tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    first = ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    version = tables.version("metadata_log")
    second = ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    assert first.records == 4929 and second.status == "already ingested"
    assert tables.version("metadata_log") == version and log_rows(tables) == 4929


def test_a_grown_segment_adds_only_its_new_records(fixtures_dir, tmp_path):
    directory = copy_log(fixtures_dir, RESTARTS, tmp_path)
    segment = directory / "00000000000000000000.log"
    full = segment.read_bytes()
    cut = batch_layout(full)[2000][0]
    segment.write_bytes(full[:cut])
    tables = DeltaRsTables(str(tmp_path / "w"))
    early = ingest.ingest_source(tables, str(directory))
    segment.write_bytes(full)
    later = ingest.ingest_source(tables, str(directory))
    assert early.records + later.records == 3072
    assert later.skipped_existing == early.records and later.first_offset == early.last_offset + 1
    assert counts(tables) == json.loads((fixtures_dir / "single-broker-restarts/expected-image.json")
                                        .read_text())["record_counts"]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


HEARTBEAT = {"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1763580879457,
             "data": {"BrokerId": 1, "BrokerEpoch": 8, "WantShutDown": True}}


def test_hand_written_events_continue_the_log_and_are_validated(fixtures_dir, tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    requests = write_jsonl(tmp_path / "what-if.jsonl", [
        HEARTBEAT,
        {"type": "BrokerHeartbeatRequest", "version": 7, "timestamp": 1},
        {"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1, "data": {"BrokerId": "one"}},
        "{not json",
        {"type": "NoSuchRequest", "timestamp": 1},
        {**HEARTBEAT, "timestamp": "2025-11-19T19:34:40.457Z", "offset": 10},
        {**HEARTBEAT, "timestamp": "2025-11-19T19:34:41Z"},
    ])
    summary = ingest.ingest_source(tables, str(requests))
    assert (summary.records, summary.rejected) == (2, 5)
    new = tables.read_arrow("metadata_log", filter=pc.field("offset") >= 4929)
    events = sorted(rows_to_events(new), key=lambda e: e["offset"])
    assert [e["offset"] for e in events] == [4929, 4930]
    assert events[0]["data"] == {"BrokerId": 1, "BrokerEpoch": 8, "CurrentMetadataOffset": 0, "WantFence": False,
                                 "WantShutDown": True, "OfflineLogDirs": []}
    assert events[1]["timestamp"] == 1763580881000 and events[0]["source"] == str(requests)
    rejected = tables.read_arrow("rejected").to_pylist()
    by_line = {r["position"]: r for r in rejected}
    assert sorted(by_line) == [2, 3, 4, 5, 6]
    assert by_line[2]["error"] == "UNSUPPORTED_VERSION" and "version 7" in by_line[2]["reason"]
    assert "data.BrokerId must be an int32" in by_line[3]["reason"]
    assert "not JSON" in by_line[4]["reason"] and by_line[4]["raw"] == b"{not json"
    assert "unknown event type 'NoSuchRequest'" in by_line[5]["reason"]
    assert by_line[6]["offset"] == 10 and "below the log end offset 4930" in by_line[6]["reason"]
    assert ingest.ingest_source(tables, str(requests)).status == "already ingested"


def test_avro_events_go_through_the_same_validation(tmp_path):
    schema = fastavro.parse_schema(events_mod.avro_event_schema())
    good = events_mod.validate_event(HEARTBEAT)
    bad = {**good, "version": 0, "data": {**good["data"], "OfflineLogDirs": ["AAAAAAAAAAAAAAAAAAAAAQ"]}}
    path = tmp_path / "events.avro"
    with open(path, "wb") as handle:
        fastavro.writer(handle, schema, [
            {"type": e["type"], "version": e["version"], "timestamp": e["timestamp"], "offset": None,
             "data": ("kafka.request.BrokerHeartbeatRequest", e["data"])} for e in (good, bad)])
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(path))
    assert (summary.kind, summary.records, summary.rejected) == ("avro", 1, 1)
    (event,) = rows_to_events(tables.read_arrow("metadata_log"))
    assert event["data"] == good["data"] and event["offset"] == 0
    (rejected,) = tables.read_arrow("rejected").to_pylist()
    assert rejected["position"] == 1 and "OfflineLogDirs is set but does not exist in version 0" in rejected["reason"]


def test_damaged_log_keeps_the_valid_records_and_reports_the_rest(fixtures_dir, tmp_path):
    directory = copy_log(fixtures_dir, SHUTDOWN, tmp_path)
    segment = directory / "00000000000000000000.log"
    buf = bytearray(segment.read_bytes())
    pos, size, base, count = batch_layout(bytes(buf))[100]
    buf[pos + size - 2] ^= 0x01
    segment.write_bytes(bytes(buf) + b"\xde\xad" * 50)
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(directory))
    assert summary.records == 4929 - count and summary.rejected == 2
    rejected = sorted(tables.read_arrow("rejected").to_pylist(), key=lambda r: r["position"])
    assert [(r["source"], r["position"], r["offset"], r["error"]) for r in rejected] == [
        (str(segment), pos, base, "CORRUPT_MESSAGE"), (str(segment), len(buf), None, "CORRUPT_MESSAGE")]
    assert rejected[1]["raw"] == b"\xde\xad" * 50
    offsets = set(tables.read_arrow("metadata_log", columns=["offset"]).column("offset").to_pylist())
    assert offsets == set(range(4929)) - set(range(base, base + count))


def test_a_file_that_is_not_a_log_is_rejected_whole(tmp_path):
    path = tmp_path / "README.txt"
    path.write_text("nothing to see here\n")
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(path))
    assert (summary.kind, summary.records, summary.rejected) == ("unknown", 0, 1)
    (row,) = tables.read_arrow("rejected").to_pylist()
    assert row["source"] == str(path) and "not a Kafka log segment" in row["reason"]


def test_strict_mode_commits_nothing_of_the_bad_source(fixtures_dir, tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    requests = write_jsonl(tmp_path / "r.jsonl", [HEARTBEAT, {"type": "Nope", "timestamp": 1}, HEARTBEAT])
    log_version, rejected_version = tables.version("metadata_log"), tables.version("rejected")
    with pytest.raises(ingest.StrictModeError) as info:
        ingest.ingest_source(tables, str(requests), strict=True)
    assert f"{requests} at line 2" in str(info.value)
    assert (tables.version("metadata_log"), tables.version("rejected")) == (log_version, rejected_version)
    assert log_rows(tables) == 4929


def test_a_crash_between_the_two_commits_is_repaired_by_running_again(fixtures_dir, tmp_path):
    damaged = write_jsonl(tmp_path / "r.jsonl", [HEARTBEAT, "{oops"])

    class CrashingOnRejected(DeltaRsTables):
        crashed = False

        def append(self, name, data, schema, txn=None, read_version=None):
            if name == "rejected" and not self.crashed:
                self.crashed = True
                raise OSError("disk full")
            return super().append(name, data, schema, txn, read_version)

    tables = CrashingOnRejected(str(tmp_path / "w"))
    with pytest.raises(OSError):
        ingest.ingest_source(tables, str(damaged))
    assert log_rows(tables) == 1 and not tables.exists("rejected")
    again = ingest.ingest_source(tables, str(damaged))
    assert again.status == "ingested" and log_rows(tables) == 1
    assert tables.read_arrow("rejected").num_rows == 1
    assert ingest.ingest_source(tables, str(damaged)).status == "already ingested"


# ---- the jobs ----

def test_dump_prints_one_json_object_per_record(fixtures_dir, capsys):
    assert dump_job.main([str(fixtures_dir / SHUTDOWN / "00000000000000000000.log")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4929
    records = [json.loads(line) for line in lines]
    assert all(set(r) == {"offset", "leader_epoch", "timestamp", "type", "version", "data"} for r in records)
    topics = {r["data"]["Name"]: r["data"]["TopicId"] for r in records if r["type"] == "TopicRecord"}
    # the oracle's fe0e287f-e4f7-46af-a3af-4f640f1b6314, as Kafka prints it (URL-safe base64)
    assert topics["Retry.TestTopicPatient"] == "_g4of-T3Rq-jr09kDxtjFA"


def test_dump_prints_only_the_fields_of_each_records_version(fixtures_dir, tmp_path, capsys):
    """Kafka's JSON converter writes the fields a version has: a LeaderChangeMessage v0 voter is
    ``{"VoterId": n}``, v1 adds its directory; RegisterBrokerRecord v1 has neither LogDirs (v3) nor IsMigratingZkBroker (v2)."""
    assert dump_job.main([str(fixtures_dir / SHUTDOWN / "00000000000000000000.log")]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    leader_change = next(r for r in records if r["type"] == "LeaderChangeMessage")
    assert leader_change["version"] == 0
    assert leader_change["data"] == {"Version": 0, "LeaderId": 1, "Voters": [{"VoterId": 1}],
                                     "GrantingVoters": [{"VoterId": 1}]}
    directory = "XHhkr4tkSsD900pOQ8pPfg"
    write_partition_dir(tmp_path / "__cluster_metadata-0", [
        {"type": "LeaderChangeMessage", "version": 1, "offset": 0, "leader_epoch": 1, "timestamp": 1,
         "data": {"Version": 1, "LeaderId": 1, "Voters": [{"VoterId": 1, "VoterDirectoryId": directory}],
                  "GrantingVoters": []}},
        {"type": "RegisterBrokerRecord", "version": 1, "offset": 1, "leader_epoch": 1, "timestamp": 1,
         "data": {"BrokerId": 2, "IncarnationId": directory, "BrokerEpoch": 1, "EndPoints": [], "Features": [],
                  "Rack": None, "Fenced": True}}])
    assert dump_job.main([str(tmp_path / "__cluster_metadata-0")]) == 0
    v1, register = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert v1["data"]["Voters"] == [{"VoterId": 1, "VoterDirectoryId": directory}]
    assert "LogDirs" not in register["data"] and "IsMigratingZkBroker" not in register["data"]
    assert register["data"]["Fenced"] is True


def test_dump_reports_damage_with_its_location_and_strict_fails(fixtures_dir, tmp_path, capsys):
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes((fixtures_dir / RESTARTS / "00000000000000000000.log").read_bytes() + b"\x00" * 20)
    assert dump_job.main([str(segment)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3072
    assert f"{segment} at byte 221482" in captured.err and "truncated" in captured.err
    assert dump_job.main(["--strict", str(segment)]) == 1


def test_ingest_job_summary_and_strict_exit_code(fixtures_dir, tmp_path, capsys):
    warehouse = str(tmp_path / "w")
    bad = write_jsonl(tmp_path / "bad.jsonl", ["[1, 2]"])
    assert ingest_job.main(["--warehouse", warehouse, "--engine", "delta-rs", str(fixtures_dir / RESTARTS)]) == 0
    out = capsys.readouterr().out
    assert "3,072 records, offsets 0..3071" in out and "NoOpRecord" in out
    assert ingest_job.main(["--warehouse", warehouse, "--engine", "delta-rs", "--strict", str(bad)]) == 1
    assert "an event must be a JSON object" in capsys.readouterr().err
    # A source failing under the Delta writer is said in its own words, not as the writer's error.
    cluster_dir = (fixtures_dir / RESTARTS).parent
    assert run_job("ingest", ingest_job.main, ["--warehouse", warehouse, str(cluster_dir)]) == USAGE
    err = capsys.readouterr().err
    assert err.startswith("ingest: ") and "DeltaError" not in err
    assert f"partition directory is {cluster_dir / '__cluster_metadata-0'}" in err


def test_sql_job_queries_the_log_and_rejected(spark, fixtures_dir, tmp_path, capsys):
    warehouse = str(tmp_path / "w")
    tables = DeltaRsTables(warehouse)
    ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    ingest.ingest_source(tables, str(write_jsonl(tmp_path / "r.jsonl", [HEARTBEAT, "{oops"])))
    query = "SELECT type, count(*) AS n FROM metadata_log GROUP BY type ORDER BY type"
    assert sql_job.main(["--warehouse", warehouse, "--format", "json", query]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = json.loads((fixtures_dir / "single-broker-shutdown/expected-image.json").read_text())["record_counts"]
    assert {r["type"]: r["n"] for r in rows} == {**expected, "BrokerHeartbeatRequest": 1}
    assert sql_job.main(["--warehouse", warehouse, "SELECT position, error, reason FROM rejected"]) == 0
    out = capsys.readouterr().out
    assert "| position | error" in out and "line is not JSON" in out and "1 row(s)" in out
    assert sql_job.main(["--warehouse", warehouse, "SELECT * FROM no_such_table"]) == 1
    assert f"no table or view `no_such_table` in {warehouse} (its tables: metadata_log" in capsys.readouterr().err


def test_a_continuous_ingest_keeps_the_log_few_files(tmp_path):
    """Each ingest commits a file; every load of metadata_log reads each file's statistics, so its small files are
    rewritten into one as they gather (``DeltaRsTables.compact``), the rows unchanged; with
    ``kraftlake.ingest.compact.files`` 0 (a Delta stream of the log that cannot skip change commits) never."""
    sources = [write_jsonl(tmp_path / f"r{i}.jsonl", [{**HEARTBEAT, "timestamp": 1000 * i + j} for j in range(2)])
               for i in range(6)]
    kept = DeltaRsTables(str(tmp_path / "kept"))
    for source in sources:
        assert ingest.ingest_source(kept, str(source), compact_files=0).records == 2
    files = sorted((r.lo, r.hi) for r in deltars.file_ranges(kept.table("metadata_log"), "offset"))
    assert files == [(2 * i, 2 * i + 1) for i in range(6)]
    tables = DeltaRsTables(str(tmp_path / "w"))
    for source in sources:
        assert ingest.ingest_source(tables, str(source), compact_files=4).records == 2
    files = sorted((r.lo, r.hi) for r in deltars.file_ranges(tables.table("metadata_log"), "offset"))
    assert files == [(0, 7), (8, 9), (10, 11)]
    rows = tables.read_arrow("metadata_log", columns=["offset", "timestamp", "source"]).sort_by("offset").to_pylist()
    assert [(r["offset"], r["source"]) for r in rows] == [(2 * i + j, str(s)) for i, s in enumerate(sources)
                                                           for j in range(2)]
    assert ingest.ingest_source(tables, str(sources[0])).status == "already ingested"
