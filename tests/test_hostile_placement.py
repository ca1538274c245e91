"""Inputs that claim a place in the log (issue 28.4): an offset far past the log's end, a file name that puts a
segment or a snapshot there, a timestamp far ahead of the clock or before the epoch. Each attack is first shown
doing its harm where the bound does not apply (the codec or the controller fed directly), then through ingest
and follow, where it lands in ``rejected`` with its location and the log goes on: a real log ingested after
it lands whole at its own offsets, hand-written events continue after it, the follower keeps following."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from kraftlake.cli import ingest as ingest_job
from kraftlake.codec.events import validate_event
from kraftlake.codec.logdir import decode_buffer
from kraftlake.codec.writer import encode_events
from kraftlake.controller.shards import replay_log
from kraftlake.storage import ingest
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.follow import Follower
from kraftlake.storage.tables import rows_to_events
from controller_scenarios import RequestLog

NOOP = {"type": "NoOpRecord", "version": 0, "timestamp": 1_700_000_000_000, "leader_epoch": 3, "data": {}}
SHUTDOWN = "single-broker-shutdown/__cluster_metadata-0"
SHUTDOWN_RECORDS = 4929
GAP = 2**40  # kraftlake.ingest.offset.max.gap's shipped default
DAY_MS = 86_400_000  # kraftlake.ingest.timestamp.after.max.ms's shipped default


def jsonl(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def offsets(tables: DeltaRsTables) -> list[int]:
    return sorted(tables.read_arrow("metadata_log", columns=["offset"]).column("offset").to_pylist())


def rejected(tables: DeltaRsTables) -> list[dict]:
    return sorted(tables.read_arrow("rejected").to_pylist(),
                  key=lambda r: (r["source"], r["position"] or 0, -1 if r["offset"] is None else r["offset"]))


def test_an_offset_far_past_the_log_end_is_rejected_and_a_real_log_then_lands_whole(fixtures_dir, tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    poison = jsonl(tmp_path / "poison.jsonl", [{**NOOP, "offset": 2**63 - 1}, {**NOOP, "offset": 2**62},
                                               {**NOOP, "offset": GAP}])  # the log ends at -1: GAP + 1 past it
    summary = ingest.ingest_source(tables, str(poison))
    assert (summary.records, summary.rejected) == (0, 3)
    rows = rejected(tables)
    assert [(r["position"], r["offset"], r["error"]) for r in rows] == \
        [(1, 2**63 - 1, "INVALID_RECORD"), (2, 2**62, "INVALID_RECORD"), (3, GAP, "INVALID_RECORD")]
    assert "leaves no offset for the log's next event" in rows[0]["reason"]
    assert all("kraftlake.ingest.offset.max.gap (1,099,511,627,776)" in r["reason"] for r in rows[1:])

    real = ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN))
    assert (real.status, real.records, real.backfilled.records) == ("ingested", SHUTDOWN_RECORDS, 0)
    assert real.warnings(str(tmp_path / "w")) == []
    assert offsets(tables) == list(range(SHUTDOWN_RECORDS))
    # hand-written events go on after it: one without an offset, one a gap too far, one just within it
    end = SHUTDOWN_RECORDS
    more = jsonl(tmp_path / "more.jsonl", [NOOP, {**NOOP, "offset": end + GAP + 1}, {**NOOP, "offset": end + GAP}])
    summary = ingest.ingest_source(tables, str(more))
    assert (summary.records, summary.rejected, summary.last_offset) == (2, 1, end + GAP)
    assert offsets(tables)[-2:] == [end, end + GAP]


def segment_dir(root: Path, name: str, first_offset: int) -> Path:
    directory = root / "__cluster_metadata-0"
    directory.mkdir(parents=True)
    (directory / name).write_bytes(encode_events([NOOP] * 3, first_offset=first_offset, batch_records=3))
    return directory


def test_file_names_that_put_a_log_far_past_the_end_are_rejected_record_by_record(fixtures_dir, tmp_path):
    """A segment's base offset and a snapshot's end offset come from their file names, which anyone can
    choose; the batch offsets inside a segment must lie within what Kafka's segment can hold."""
    far = 2**62
    named_far = segment_dir(tmp_path / "a", f"{far:020d}.log", far)
    snapshot_far = segment_dir(tmp_path / "b", f"{far:020d}-{1:010d}.checkpoint", 0)
    outside = segment_dir(tmp_path / "c", f"{0:020d}.log", 2**31)  # 0..2^31-1 is what a segment at 0 holds
    # the codec alone takes the far offsets as the log's: nothing there knows where the log ends
    assert [e["offset"] for e in decode_buffer((named_far / f"{far:020d}.log").read_bytes(), "x.log")] == \
        [far, far + 1, far + 2]
    tables = DeltaRsTables(str(tmp_path / "w"))
    for source, expected in ((named_far, [far, far + 1, far + 2]), (snapshot_far, [far - 3, far - 2, far - 1])):
        summary = ingest.ingest_source(tables, str(source))
        assert (summary.records, summary.rejected, summary.missing) == (0, 3, None)  # no log said to be missing
        rows = [r for r in rejected(tables) if Path(r["source"]).parent == source]
        assert [(r["offset"], r["error"]) for r in rows] == [(o, "INVALID_RECORD") for o in expected]
    summary = ingest.ingest_source(tables, str(outside))
    assert (summary.records, summary.rejected) == (0, 1)
    (row,) = [r for r in rejected(tables) if Path(r["source"]).parent == outside]
    assert (row["position"], row["offset"], row["error"]) == (0, 2**31, "CORRUPT_MESSAGE")
    assert "outside those of a segment starting at 0 (0..2147483647)" in row["reason"]
    assert ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN)).records == SHUTDOWN_RECORDS
    assert offsets(tables) == list(range(SHUTDOWN_RECORDS))


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """``batch`` claiming another baseOffset: the field lies before the CRC's range, so the CRC still holds."""
    return struct.pack(">q", base_offset) + batch[8:]


def test_the_follower_keeps_going_past_a_far_offset_and_a_far_timestamp(tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest.ingest_source(tables, str(jsonl(tmp_path / "poison.jsonl", [{**NOOP, "offset": 2**63 - 1}])))
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    segment = directory / f"{0:020d}.log"
    follower = Follower(tables, directory)
    future = {**NOOP, "timestamp": 10**15}

    def write(events: list[dict], first_offset: int, base_offset: int | None = None) -> None:
        batch = encode_events(events, first_offset=first_offset, batch_records=len(events))
        with segment.open("ab") as out:
            out.write(batch if base_offset is None else with_base_offset(batch, base_offset))

    write([NOOP] * 10, 0)
    assert follower.poll().records == 10
    write([NOOP] * 3, 10, base_offset=2**62)  # a flipped bit: the last batch of the active segment, nothing after it
    assert (follower.poll().records, follower.next_offset) == (0, 10)
    write([NOOP] * 3, 13)
    write([future] * 3, 16)
    write([NOOP] * 3, 19)
    polled = follower.poll()
    assert (polled.records, polled.rejected) == (6, 3)
    assert offsets(tables) == [*range(10), 13, 14, 15, 19, 20, 21]
    rows = [r for r in rejected(tables) if r["source"] == str(segment)]
    assert [(r["offset"], r["error"]) for r in rows] == \
        [(2**62, "CORRUPT_MESSAGE"), (16, "INVALID_TIMESTAMP"), (17, "INVALID_TIMESTAMP"), (18, "INVALID_TIMESTAMP")]


def test_a_follower_on_a_directory_whose_snapshot_is_named_far_past_offset_0_still_starts_at_0(tmp_path):
    far = 2**62
    directory = segment_dir(tmp_path, f"{far:020d}-{1:010d}.checkpoint", 0)
    tables = DeltaRsTables(str(tmp_path / "w"))
    follower = Follower(tables, directory)
    polled = follower.poll()
    assert (polled.records, polled.rejected) == (0, 3)
    assert [r["offset"] for r in rejected(tables)] == [far - 3, far - 2, far - 1]
    (directory / f"{0:020d}.log").write_bytes(encode_events([NOOP] * 4, batch_records=4))
    assert follower.poll().records == 4
    assert offsets(tables) == [0, 1, 2, 3]


START_MS = 1_763_580_000_000


def heartbeats_with_one_far_ahead() -> RequestLog:
    """Three brokers registered and heartbeating, then broker 1's heartbeat stamped 10^15 ms (year 33658),
    then each broker's next heartbeat, a second later in event time."""
    log = RequestLog(first_offset=0, start_ms=START_MS)
    log.add("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 19})
    epochs = {b: log.register(b) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        log.heartbeat(b, epochs[b])
    log.heartbeat(1, epochs[1], at=10**15)
    for b in (1, 2, 3):
        log.heartbeat(b, epochs[b], at=START_MS + 1000 + b)
    return log


def fenced_at(events: list[dict]) -> dict[int, list[int]]:
    """The brokers the controller fenced, by the offset of the request it decided then."""
    out: dict[int, list[int]] = {}
    for row in replay_log(events, 2)[0]["controller_log"]:
        if row["type"] == "BrokerRegistrationChangeRecord" and row["data"]["Fenced"] == 1:
            out.setdefault(row["offset"], []).append(row["data"]["BrokerId"])
    return out


def test_a_timestamp_far_ahead_is_rejected_before_it_fences_every_broker(tmp_path):
    log = heartbeats_with_one_far_ahead()
    poison = 7  # the offset of the heartbeat stamped 10^15
    assert log.lines[poison]["timestamp"] == 10**15
    # fed to the controller directly, it is the moment every broker's session (9 s) expires
    direct = [{**validate_event(line), "offset": i, "source": None, "position": None}
              for i, line in enumerate(log.lines)]
    assert fenced_at(direct) == {poison: [1, 2, 3]}
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(log.write(tmp_path / "heartbeats.jsonl")))
    assert (summary.records, summary.rejected) == (len(log.lines) - 1, 1)
    (row,) = rejected(tables)
    assert (row["position"], row["error"], row["type"]) == (poison + 1, "INVALID_TIMESTAMP", "BrokerHeartbeatRequest")
    assert "more than kraftlake.ingest.timestamp.after.max.ms (86,400,000)" in row["reason"]
    assert fenced_at(rows_to_events(tables.read_arrow("metadata_log").sort_by("offset"))) == {}


def test_event_time_from_the_epoch_to_a_day_ahead_of_the_clock_is_taken(tmp_path):
    now = int(time.time() * 1000)
    events = [{**NOOP, "timestamp": 0}, {**NOOP, "timestamp": now + 3_600_000},  # Kafka's own bound: an hour
              {**NOOP, "timestamp": -1}, {**NOOP, "timestamp": "1969-12-31T23:59:59Z"},
              {**NOOP, "timestamp": now + 2 * DAY_MS}]
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest.ingest_source(tables, str(jsonl(tmp_path / "times.jsonl", events)))
    assert (summary.records, summary.rejected) == (2, 3)
    assert [(r["position"], r["error"]) for r in rejected(tables)] == \
        [(3, "INVALID_REQUEST"), (4, "INVALID_REQUEST"), (5, "INVALID_TIMESTAMP")]
    assert all("from the epoch on" in r["reason"] for r in rejected(tables)[:2])


def test_the_bounds_are_settings(tmp_path):
    two_minutes_ahead = int(time.time() * 1000) + 120_000
    source = jsonl(tmp_path / "e.jsonl", [{**NOOP, "offset": 20}, {**NOOP, "timestamp": two_minutes_ahead}])
    for setting, value, rejected_line, words in (("kraftlake.ingest.offset.max.gap", "10", 1, "(10)"),
                                                 ("kraftlake.ingest.timestamp.after.max.ms", "60000", 2, "(60,000)")):
        warehouse = str(tmp_path / setting)
        assert ingest_job.main(["--warehouse", warehouse, "--override", f"{setting}={value}", str(source)]) == 0
        (row,) = rejected(DeltaRsTables(warehouse))
        assert row["position"] == rejected_line and f"more than {setting} {words}" in row["reason"]
