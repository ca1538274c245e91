"""History is never silently lost (ADR 0010): which part of a partition directory ingest reads, what it
says of the rest, backfills of older offsets and gaps, and the controller refusing tables that missed one.

The directories whose segments start later are cut from the real single-broker-snapshot log (a segment
from offset 0 to 7706 and a snapshot at 7209; nearly every batch holds one record), byte for byte.
"""

from __future__ import annotations

import collections
import json
import shutil
import threading
from pathlib import Path

import pytest

from kraftlake import codec
from kraftlake.cli import ingest as ingest_job
from kraftlake.cli import quorum as quorum_job
from kraftlake.codec.logdir import batch_headers
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids
from kraftlake.metadata.tables import derived_tables, table_arrow_schema
from kraftlake.spark.queries import BackfillGuard, source_offset, supervise
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import BACKFILL, DeltaRsTables
from kraftlake.storage.follow import Follower
from kraftlake.storage.ingest import HistoryConflict, ingest_source
from kraftlake.storage.tables import rows_to_arrow, rows_to_events

SNAPSHOT_LOG = "single-broker-snapshot"
SNAPSHOT = "00000000000000007209-0000000001.checkpoint"
SEGMENT = "00000000000000000000.log"
END = 7707  # the log's end offset
HEARTBEAT = {"type": "BrokerHeartbeatRequest", "version": 1, "timestamp": 1763580879457,
             "data": {"BrokerId": 1, "BrokerEpoch": 9, "WantShutDown": False}}


@pytest.fixture
def log_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / SNAPSHOT_LOG / "__cluster_metadata-0"


@pytest.fixture
def oracle(fixtures_dir: Path) -> dict:
    return json.loads((fixtures_dir / SNAPSHOT_LOG / "expected-image.json").read_text())


def cut(log_dir: Path, target: Path, first: int = 0, end: int | None = None, snapshot: bool = False) -> Path:
    """A copy of the log's segment holding offsets first..end-1 (whole batches), named for its first
    offset, with the snapshot beside it if asked: a directory whose older segments Kafka deleted."""
    directory = target / "__cluster_metadata-0"
    directory.mkdir(parents=True)
    data = (log_dir / SEGMENT).read_bytes()
    headers = batch_headers(data)[0]
    start = next(h for h in headers if h.base_offset >= first)
    stop = next((h.position for h in headers if end is not None and h.base_offset >= end), len(data))
    (directory / f"{start.base_offset:020d}.log").write_bytes(data[start.position:stop])
    if snapshot:
        shutil.copy(log_dir / SNAPSHOT, directory / SNAPSHOT)
    return directory


def offsets(tables: DeltaRsTables) -> list[int]:
    return sorted(tables.read_arrow("metadata_log", columns=["offset"]).column("offset").to_pylist())


def sources(tables: DeltaRsTables) -> collections.Counter:
    """Rows by the kind of file they came from: .log (a segment), .checkpoint (a snapshot), .jsonl."""
    column = tables.read_arrow("metadata_log", columns=["source"]).column("source").to_pylist()
    return collections.Counter(Path(s).suffix for s in column)


def type_counts(tables: DeltaRsTables) -> dict[str, int]:
    return dict(collections.Counter(tables.read_arrow("metadata_log", columns=["type"]).column("type").to_pylist()))


def image_of(tables: DeltaRsTables) -> dict:
    """metadata_log replayed in offset order by the pure core, in expected-image.json's terms."""
    image = ClusterImage()
    for event in sorted(rows_to_events(tables.read_arrow("metadata_log")), key=lambda e: e["offset"]):
        assert replay(image, event).rejected is None, event
    return {"brokers": {str(b.id): (b.epoch, b.fenced, b.in_controlled_shutdown) for b in image.brokers.values()},
            "topics": {uuids.to_hex(t.id): t.name for t in image.topics.values()},
            "partitions": sorted((image.topics[p.topic_id].name, p.partition_id, p.leader, list(p.isr), p.leader_epoch,
                                  p.partition_epoch) for p in image.iter_partitions())}


def oracle_image(oracle: dict) -> dict:
    brokers = oracle["brokers"].items()
    return {"brokers": {k: (b["epoch"], b["fenced"], b["in_controlled_shutdown"]) for k, b in brokers},
            "topics": oracle["topics"],
            "partitions": sorted((p["topic"], p["partition"], p["leader"], p["isr"], p["leader_epoch"],
                                  p["partition_epoch"]) for p in oracle["partitions"])}


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# --- which part of a directory is read -------------------------------------------------------------

def test_the_plan_reads_the_whole_log_or_the_snapshot_that_bridges_to_the_segments(tmp_path: Path) -> None:
    whole, later = tmp_path / "whole", tmp_path / "later"
    for directory, first in [(whole, 0), (later, 5000)]:
        directory.mkdir()
        (directory / f"{first:020d}.log").touch()
        for end in (4000, 7209, 7500):
            (directory / f"{end:020d}-0000000001.checkpoint").touch()
    plan = codec.plan_partition_dir(whole, codec.HISTORY)
    assert (plan.snapshot, plan.summarised, plan.missing) == (None, None, None)
    plan = codec.plan_partition_dir(later, codec.HISTORY)  # 4000 ends before the segments: no bridge
    assert (plan.snapshot.name, plan.segment_start, plan.summarised, plan.missing) == \
        ("00000000000000007209-0000000001.checkpoint", 7209, (5000, 7208), None)
    plan = codec.plan_partition_dir(later, codec.FROM_SNAPSHOT)
    assert (plan.snapshot.name, plan.summarised) == ("00000000000000007500-0000000001.checkpoint", (5000, 7499))
    plan = codec.plan_partition_dir(later, codec.FULL_HISTORY)
    assert (plan.snapshot, plan.missing) == (None, (0, 4999))
    assert codec.plan_partition_dir(later, codec.HISTORY, held_before=True).snapshot is None
    for name in ("00000000000000007209-0000000001.checkpoint", "00000000000000007500-0000000001.checkpoint"):
        (later / name).unlink()
    assert codec.plan_partition_dir(later, codec.HISTORY).missing == (0, 4999)


def test_by_default_a_directory_is_the_whole_log_when_its_segments_hold_it(log_dir: Path, oracle: dict,
                                                                           tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest_source(tables, str(log_dir))
    assert (summary.records, summary.summarised, summary.missing) == (END, [], None)
    assert offsets(tables) == list(range(END)) and set(sources(tables)) == {".log"}
    assert type_counts(tables) == oracle["record_counts"]


def test_segments_that_start_later_take_the_snapshot_that_bridges_to_them(log_dir: Path, oracle: dict,
                                                                          tmp_path: Path) -> None:
    later = cut(log_dir, tmp_path / "later", first=5000, snapshot=True)
    tables = DeltaRsTables(str(tmp_path / "w"))
    summary = ingest_source(tables, str(later))
    assert summary.summarised == [{"snapshot": SNAPSHOT, "where": "source", "records": 2209, "first": 5000,
                                   "last": 7208}]
    assert "2,209 records at offsets 5000..7208 are summarised by snapshot " + SNAPSHOT + " (not read)" in \
        summary.notes(tables.root)
    held = sources(tables)
    assert held[".log"] == END - 7209 and offsets(tables) == list(range(7209 - held[".checkpoint"], END))
    assert image_of(tables) == oracle_image(oracle)  # the snapshot stands for what it summarises


def test_from_snapshot_reads_as_kafkas_loader_does(log_dir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "w"
    assert ingest_job.main(["--warehouse", str(root), "--engine", "delta-rs", "--from-snapshot", str(log_dir)]) == 0
    out = capsys.readouterr().out
    assert "7,209 records at offsets 0..7208 are summarised by snapshot " + SNAPSHOT + " (not read)" in out
    tables = DeltaRsTables(str(root))
    held = sources(tables)
    assert held[".log"] == END - 7209 and offsets(tables)[0] == 7209 - held[".checkpoint"]
    with pytest.raises(SystemExit) as exited:
        ingest_job.main(["--warehouse", str(root), "--from-snapshot", "--full-history", str(log_dir)])
    assert exited.value.code == 2


def test_without_a_bridging_snapshot_the_missing_history_is_said(log_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    later = cut(log_dir, tmp_path / "later", first=7300)
    root = tmp_path / "w"
    assert ingest_job.main(["--warehouse", str(root), "--engine", "delta-rs", str(later)]) == 0
    captured = capsys.readouterr()
    warning = "the log before offset 7300 is missing (offsets 0..7299 were deleted and no snapshot stands for them)"
    assert warning in captured.err and warning in captured.out  # on stderr, and in the summary
    assert offsets(DeltaRsTables(str(root))) == list(range(7300, END))


# --- backfills ------------------------------------------------------------------------------------

def test_older_offsets_are_backfilled_in_one_commit_replacing_the_snapshot(log_dir: Path, oracle: dict,
                                                                           tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest_source(tables, str(log_dir), from_snapshot=True)
    snapshot_rows = sources(tables)[".checkpoint"]
    version = tables.version("metadata_log")
    summary = ingest_source(tables, str(log_dir))
    assert tables.version("metadata_log") == version + 1  # one commit
    assert (summary.backfilled.records, summary.backfilled.first, summary.backfilled.last) == (7209, 0, 7208)
    assert summary.replaced == [{"snapshot": SNAPSHOT, "first": 7209 - snapshot_rows, "last": 7208,
                                 "records": snapshot_rows}]
    assert (summary.existing.records, summary.existing.first, summary.existing.last) == (END - 7209, 7209, END - 1)
    assert offsets(tables) == list(range(END)) and set(sources(tables)) == {".log"}
    assert type_counts(tables) == oracle["record_counts"]
    note = json.loads(tables.table("metadata_log").history(1)[0][BACKFILL])
    assert note == {"below": END, "source": str(log_dir)}
    assert any("--once --reset" in w for w in summary.warnings(tables.root))
    # idempotent: the same bytes again add nothing; another read of them finds every record there
    assert ingest_source(tables, str(log_dir)).status == "already ingested"
    assert tables.version("metadata_log") == version + 1
    again = ingest_source(tables, str(log_dir), full_history=True)
    assert (again.records, again.existing.records, again.backfilled.records) == (0, END, 0)
    assert offsets(tables) == list(range(END))


def test_later_copies_of_a_directory_backfill_to_the_whole_log(log_dir: Path, oracle: dict, tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest_source(tables, str(cut(log_dir, tmp_path / "a", first=7300)))
    summary = ingest_source(tables, str(cut(log_dir, tmp_path / "b", first=5000, snapshot=True)))
    snapshot_rows = sources(tables)[".checkpoint"]
    assert (summary.backfilled.first, summary.backfilled.last, summary.existing.records) == \
        (7209 - snapshot_rows, 7299, END - 7300)
    summary = ingest_source(tables, str(log_dir))
    assert (summary.backfilled.records, summary.existing.records) == (7209, END - 7209)
    assert offsets(tables) == list(range(END)) and set(sources(tables)) == {".log"}
    assert type_counts(tables) == oracle["record_counts"] and image_of(tables) == oracle_image(oracle)


def test_a_gap_left_by_a_rejected_batch_is_backfilled(log_dir: Path, tmp_path: Path) -> None:
    damaged = cut(log_dir, tmp_path / "damaged")
    segment = damaged / SEGMENT
    data = bytearray(segment.read_bytes())
    batch = next(h for h in batch_headers(bytes(data))[0] if h.base_offset == 3000)
    data[batch.position + batch.size - 1] ^= 0xFF  # its CRC no longer matches
    segment.write_bytes(bytes(data))
    tables = DeltaRsTables(str(tmp_path / "w"))
    first = ingest_source(tables, str(damaged))
    assert first.rejected == 1 and 3000 not in offsets(tables)
    summary = ingest_source(tables, str(log_dir))
    assert (summary.records, summary.backfilled.first, summary.backfilled.last) == (1, 3000, 3000)
    assert summary.existing.records == END - 1 and offsets(tables) == list(range(END))


def test_records_at_offsets_of_other_events_are_counted_as_such(log_dir: Path, tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    early = ingest_source(tables, str(cut(log_dir, tmp_path / "early", end=100))).records  # whole batches: 135
    assert ingest_source(tables, str(write_jsonl(tmp_path / "what-if.jsonl", [HEARTBEAT, HEARTBEAT]))).records == 2
    summary = ingest_source(tables, str(log_dir))
    assert (summary.existing.records, summary.existing.last) == (early, early - 1)
    assert (summary.occupied.records, summary.occupied.first, summary.occupied.last) == (2, early, early + 1)
    assert summary.records == END - early - 2 and summary.first_offset == early + 2
    assert f"2 records at offsets {early}..{early + 1} not loaded: metadata_log holds other events at those " \
           "offsets (hand-written events take the offsets after the log's end)" in summary.notes(tables.root)


def test_a_backfill_planned_on_a_version_another_ingest_passed_is_planned_again(log_dir: Path,
                                                                                tmp_path: Path) -> None:
    class Racing(DeltaRsTables):
        """Another ingest commits hand-written events while this backfill is being planned."""

        raced = False

        def backfill(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            if not self.raced:
                self.raced = True
                ingest_source(DeltaRsTables(self.root), str(write_jsonl(tmp_path / "race.jsonl", [HEARTBEAT])))
            super().backfill(*args, **kwargs)

    tables = Racing(str(tmp_path / "w"))
    ingest_source(tables, str(log_dir), from_snapshot=True)
    summary = ingest_source(tables, str(log_dir))
    assert tables.raced and summary.backfilled.records == 7209
    assert offsets(tables) == list(range(END + 1))  # the events took the log's end; no offset twice
    assert sources(tables)[".jsonl"] == 1


def test_a_snapshot_that_would_cover_held_rows_is_refused(log_dir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "w"
    tables = DeltaRsTables(str(root))
    ingest_source(tables, str(cut(log_dir, tmp_path / "early", end=7150)))
    later = cut(log_dir, tmp_path / "later", first=7200, snapshot=True)  # its snapshot's rows start at 7144
    version = tables.version("metadata_log")
    with pytest.raises(HistoryConflict):
        ingest_source(tables, str(later))
    assert ingest_job.main(["--warehouse", str(root), "--engine", "delta-rs", str(later)]) == 1
    assert "Ingest it with --full-history" in capsys.readouterr().err
    assert tables.version("metadata_log") == version


def test_the_follower_starts_an_empty_warehouse_as_ingest_does(log_dir: Path, tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    Follower(tables, log_dir).poll()
    assert offsets(tables) == list(range(END)) and set(sources(tables)) == {".log"}


# --- the controller's guard -----------------------------------------------------------------------

def test_the_guard_sees_backfills_after_the_version_its_checkpoint_recorded(log_dir: Path, tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    ingest_source(tables, str(log_dir), from_snapshot=True)
    checkpoint = str(tmp_path / "checkpoint")
    guard = BackfillGuard(tables, checkpoint)
    assert guard.stale() is None  # a new checkpoint: its tables are computed from here
    guard.save()
    ingest_source(tables, str(write_jsonl(tmp_path / "more.jsonl", [HEARTBEAT])))  # appended: nothing to say
    assert BackfillGuard(tables, checkpoint).stale() is None
    ingest_source(tables, str(log_dir))
    reason = BackfillGuard(tables, checkpoint).stale()
    assert reason.startswith(f"metadata_log was backfilled below offset {END + 1} ")  # the event took {END}
    assert f"jobs/controller.py --warehouse {tables.root} --once --reset" in reason
    # a checkpoint of an earlier release (a query id, no record of a version) is checked from the start
    old = tmp_path / "old-checkpoint"
    old.mkdir()
    (old / "metadata").write_text('{"id":"5b2b4c8e-0000-0000-0000-000000000000"}\n')
    assert BackfillGuard(tables, str(old)).stale() is not None


class Query:
    """What ``supervise`` uses of a ``StreamingQuery``."""

    isActive, lastProgress, stopped = True, None, False

    def awaitTermination(self, timeout: float) -> None:  # noqa: N802 (pyspark's name)
        pass

    def stop(self) -> None:
        self.stopped = True
        self.isActive = False

    def exception(self) -> None:
        return None


def test_a_guard_that_fails_stops_every_query() -> None:
    def guard() -> None:
        raise RuntimeError("metadata_log was backfilled")

    queries = {"controller": Query(), "quorum": Query()}
    with pytest.raises(RuntimeError, match="backfilled"):
        supervise(queries, False, "unused", guard=guard)
    assert all(q.stopped for q in queries.values())


def test_a_deferred_query_starts_after_the_first_querys_first_trigger_and_stops_with_it() -> None:
    main, started, seen = Query(), [], []

    def start_quorum() -> Query:
        started.append(Query())
        return started[-1]

    def on_progress(progress: dict | None) -> None:
        seen.append(len(started))
        if len(seen) == 2:
            main.lastProgress = {"batchId": 0}  # its first trigger done
        if len(seen) == 4:
            main.stop()  # by whoever started it: the other query does not run on alone

    assert supervise({"controller": main}, False, "unused", on_progress, deferred={"quorum": start_quorum})
    assert seen == [0, 0, 1, 1]
    assert started[0].stopped


def test_quorum_describe_refuses_tables_computed_before_a_backfill(log_dir: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "w"
    tables = DeltaRsTables(str(root))
    ingest_source(tables, str(log_dir), from_snapshot=True)
    row = {"replica_id": 1, "state": "leader", "leader_id": 1, "leader_epoch": 1, "voted_id": -1,
           "high_watermark": END, "log_end_offset": END, "last_fetched_epoch": 1, "current_voters": [1],
           "target_voters": None, "offset": END - 1, "timestamp": 1763580879457}
    tables.append("quorum_state", rows_to_arrow("quorum_state", [row]), table_arrow_schema("quorum_state"))
    guard = BackfillGuard(tables, str(root / "_checkpoints" / "controller"))
    guard.stale()
    guard.save()  # what the quorum query's checkpoint records when it computes the table
    command = ["--warehouse", str(root), "describe", "--status"]
    assert quorum_job.main(command) == 0
    ingest_source(tables, str(log_dir))
    capsys.readouterr()
    assert quorum_job.main(command) == 1
    assert "metadata_log was backfilled below offset" in capsys.readouterr().err


def derived(warehouse: Warehouse) -> dict[str, list[dict]]:
    out = {}
    for name in derived_tables():
        if warehouse.exists(name):
            rows = warehouse.read_arrow(name).to_pylist()
            out[name] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return out


def test_a_running_controller_stops_at_a_backfill_and_reset_rebuilds_what_a_fresh_warehouse_has(
        spark, log_dir: Path, tmp_path: Path) -> None:  # noqa: ANN001
    from kraftlake.spark import controller_query as streaming

    warehouse = Warehouse(str(tmp_path / "w"), spark=spark)
    ingest_source(warehouse, str(cut(log_dir, tmp_path / "later", first=5000, snapshot=True)))
    settings = streaming.ControllerSettings(shards=2, checkpoint=str(tmp_path / "checkpoint"), once=False,
                                            trigger_interval_ms=200)
    failure: list[BaseException] = []

    def running() -> None:
        try:
            streaming.run(warehouse, settings)
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            failure.append(exc)

    controller = threading.Thread(target=running, daemon=True)
    controller.start()
    try:
        def reached_end() -> bool:
            progress = [q.lastProgress for q in spark.streams.active if q.name == "kraftlake_controller"]
            return bool(progress) and progress[0] is not None and source_offset(progress[0]) == END - 1

        waited = threading.Event()
        while controller.is_alive() and not reached_end() and not waited.wait(0.5):
            pass
        assert controller.is_alive(), failure
        ingest_source(warehouse, str(log_dir))  # backfills 0..7208
        controller.join(180)
        assert not controller.is_alive(), "the running controller did not stop at the backfill"
    finally:
        for query in spark.streams.active:
            query.stop()
    assert isinstance(failure[0], RuntimeError) and "backfilled below offset 7707" in str(failure[0])
    once = streaming.ControllerSettings(shards=2, checkpoint=settings.checkpoint, once=True)
    with pytest.raises(RuntimeError, match="backfilled below offset 7707"):
        streaming.run(warehouse, once)  # started again on the same checkpoint: refused before it starts
    streaming.reset(warehouse, settings.checkpoint)
    assert streaming.run(warehouse, once)
    fresh = Warehouse(str(tmp_path / "fresh"), spark=spark)
    ingest_source(fresh, str(log_dir))
    assert streaming.run(fresh, streaming.ControllerSettings(shards=2, checkpoint=str(tmp_path / "fresh-cp"),
                                                             once=True))
    assert derived(warehouse) == derived(fresh)
