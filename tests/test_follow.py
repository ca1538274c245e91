"""``ingest --follow``: a live node's ``__cluster_metadata-0`` directory tailed into ``metadata_log``, the
bytes written the way a node writes them (``kraftlake.codec.writer``): batches appended, one written in
two halves, segments rolled, a snapshot taken and old segments deleted, the log truncated and rewritten.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from kraftlake.codec.logdir import decode_buffer
from kraftlake.codec.writer import encode_events
from kraftlake.sim.sample import build_events
from kraftlake.spark import controller_query as streaming
from kraftlake.storage import DeltaRsTables, Warehouse, deltars
from kraftlake.storage.follow import Follower, FollowError, LogRewritten
from kraftlake.storage.tables import rows_to_events
from servers import start, stop, wait_for
from streaming_helpers import REPO_ROOT, assert_same_tables, generate_log, reference_tables, warehouse_tables


def numbered(events: list[dict], epoch: int = 1) -> list[dict]:
    return [{**e, "offset": i, "leader_epoch": e.get("leader_epoch", epoch)} for i, e in enumerate(events)]


class Node:
    """Writes a partition directory as a KRaft node does: appends whole batches, rolls segments."""

    def __init__(self, directory: Path, events: list[dict]) -> None:
        self.directory = directory
        self.events = events
        self.end = 0  # the next offset to write
        self.written: list[tuple[int, int]] = []  # (first offset, count) of each write
        self.segment = self.roll()

    def roll(self) -> Path:
        self.segment = self.directory / f"{self.end:020d}.log"
        self.segment.touch()
        return self.segment

    def batch(self, count: int) -> bytes:
        data = encode_events(self.events[self.end:self.end + count], first_offset=self.end, batch_records=count)
        self.written.append((self.end, count))
        self.end += count
        return data

    def as_read(self) -> list[dict]:
        """What the node wrote so far as a reader of its bytes sees it (every field, Kafka's defaults filled in),
        in the node's record batches, whose records explain each other (``image.causes``): an oracle that
        does not go through the follower."""
        data = b"".join(encode_events(self.events[first:first + count], first_offset=first, batch_records=count)
                        for first, count in self.written)
        return list(decode_buffer(data, "oracle"))

    def append(self, count: int) -> None:
        with self.segment.open("ab") as out:
            out.write(self.batch(count))


def committed(tables: DeltaRsTables) -> list[dict]:
    rows = rows_to_events(tables.read_arrow("metadata_log").sort_by("offset"))
    return [{k: e[k] for k in ("offset", "leader_epoch", "type", "data")} for e in rows]


def written(events: list[dict], end: int) -> list[dict]:
    return [{"offset": e["offset"], "leader_epoch": e["leader_epoch"], "type": e["type"], "data": e["data"]}
            for e in events[:end]]


def assert_log(tables: DeltaRsTables, node: Node) -> None:
    actual = committed(tables)
    assert [e["offset"] for e in actual] == list(range(node.end)), "missing or doubled offsets"
    expected = written(node.events, node.end)
    assert [(e["type"], e["leader_epoch"]) for e in actual] == [(e["type"], e["leader_epoch"]) for e in expected]


def live_directory(tmp_path: Path) -> tuple[Node, DeltaRsTables, Follower]:
    """The sample cluster's records, to be written by a node into an empty directory, and its follower."""
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    tables = DeltaRsTables(str(tmp_path / "w"))
    return Node(directory, numbered(build_events())), tables, Follower(tables, directory)


def test_follower_through_partial_batches_rolls_snapshots_retention_and_restarts(tmp_path: Path) -> None:
    node, tables, follower = live_directory(tmp_path)
    events, directory = node.events, node.directory

    node.append(30)
    assert follower.poll().records == 30
    assert_log(tables, node)

    half = node.batch(10)  # a batch still being written: nothing of it yet, and no rejection
    with node.segment.open("ab") as out:
        out.write(half[:len(half) // 2])
    assert follower.poll().records == 0
    with node.segment.open("ab") as out:
        out.write(half[len(half) // 2:])
    assert follower.poll().records == 10

    first_segment = node.segment
    node.roll()
    node.append(20)
    node.append(5)
    assert follower.poll().records == 25
    # a snapshot at the log's end, and retention deletes the first segment
    snapshot = directory / f"{node.end:020d}-{events[node.end - 1]['leader_epoch']:010d}.checkpoint"
    snapshot.write_bytes(encode_events(events[:5], batch_records=5))
    first_segment.unlink()
    node.append(7)
    assert follower.poll().records == 7

    # a restarted follower resumes after the log's end in metadata_log, re-reading only the last batch
    restarted = Follower(tables, directory)
    assert restarted.poll().records == 0
    node.append(8)
    assert restarted.poll().records == 8
    # a last batch truncated and written again with the same records is the same log
    size = node.segment.stat().st_size
    last = node.batch(6)
    with node.segment.open("ab") as out:
        out.write(last)
    assert restarted.poll().records == 6
    os.truncate(node.segment, size)
    assert restarted.poll().records == 0
    with node.segment.open("ab") as out:
        out.write(last)
    assert restarted.poll().records == 0
    assert_log(tables, node)
    assert not tables.exists("rejected") or tables.read_arrow("rejected").num_rows == 0


def test_a_rewritten_offset_stops_the_follower_naming_it(tmp_path: Path) -> None:
    node, tables, follower = live_directory(tmp_path)
    events, directory = node.events, node.directory
    for count in (20, 5, 5, 5):
        node.append(count)
    assert follower.poll().records == 35
    before = committed(tables)

    # a new leader truncates the two last batches (offsets 25..34) and writes its own records from 25 on
    truncate_at = 25
    cut = len(encode_events(events[:20], batch_records=20)) + len(encode_events(events[20:25], first_offset=20,
                                                                                 batch_records=5))
    os.truncate(node.segment, cut)
    replacement = [{**e, "leader_epoch": e["leader_epoch"] + 1} for e in events[truncate_at:truncate_at + 12]]
    with node.segment.open("ab") as out:
        out.write(encode_events(replacement, first_offset=truncate_at, batch_records=12))

    with pytest.raises(LogRewritten, match=rf"offset {truncate_at} was rewritten") as raised:
        follower.poll()
    assert raised.value.offset == truncate_at
    assert committed(tables) == before, "nothing of the rewrite may be committed"
    # a follower started after the rewrite finds it too (it reads the last committed batch again)
    with pytest.raises(LogRewritten):
        Follower(tables, directory).poll()

    # a follower that fell behind retention cannot go on
    node.end = 200
    node.roll()
    node.append(3)
    for old in directory.glob("00000000000000000000.log"):
        old.unlink()
    with pytest.raises(FollowError, match="deleted .retention."):
        Follower(tables, directory).poll()


def damaged(kind: str, batch: bytes) -> bytes:
    """``batch`` damaged: its body (the header still says where it ends) or its header (no batch here)."""
    if kind == "body":
        return batch[:-1] + bytes([batch[-1] ^ 0xFF])
    return b"\xff" * 12 + batch[12:]


@pytest.mark.parametrize("kind", ["body", "header"])
def test_a_batch_being_written_after_damage_is_taken_once_complete_and_the_damage_rejected_once(
        tmp_path: Path, kind: str) -> None:
    node, tables, follower = live_directory(tmp_path)
    node.append(5)
    bad = damaged(kind, node.batch(3))  # offsets 5..7, lost
    good = node.batch(4)  # offsets 8..11, being written
    with node.segment.open("ab") as out:
        out.write(bad + good[:len(good) // 2])
    first = follower.poll()
    assert first.records == 5
    with node.segment.open("ab") as out:
        out.write(good[len(good) // 2:])
    second = follower.poll()
    assert (second.records, second.first_offset, second.last_offset) == (4, 8, 11)
    assert follower.poll().records == 0 and Follower(tables, node.directory).poll().records == 0
    assert [e["offset"] for e in committed(tables)] == [0, 1, 2, 3, 4, 8, 9, 10, 11]
    rejected = tables.read_arrow("rejected").to_pylist()
    assert first.rejected + second.rejected == len(rejected) == 1
    position = len(encode_events(node.events[:5], batch_records=5))
    assert (rejected[0]["position"], rejected[0]["error"]) == (position, "CORRUPT_MESSAGE")


def unplaced(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Rejections without the file and byte they came from (the oracle read its own copy of the bytes)."""
    return {**tables, "rejected": [{k: v for k, v in r.items() if k not in ("source", "position")}
                                   for r in tables["rejected"]]}


def test_follow_job_and_running_controller_reflect_each_write(spark, tmp_path: Path,  # noqa: ANN001
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The follower job (killed with SIGKILL once and started again) and the controller query, both
    running, while a node writes: after each write the tables match the core's replay of the log so far."""
    log = generate_log(seed=21, size=80)
    events = numbered([{**e} for e in log.events])
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    node = Node(directory, events)
    root = tmp_path / "w"
    command = [sys.executable, "jobs/ingest.py", "--warehouse", str(root), "--follow", str(directory),
               "--override", "kraftlake.ingest.follow.poll.ms=100"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib")}
    follower_log = tmp_path / "follow.log"
    node.append(15)
    follower = start(command, follower_log, env, cwd=REPO_ROOT)
    warehouse = Warehouse(str(root), spark=spark)
    query = None
    try:
        assert wait_for(lambda: warehouse.exists("metadata_log") or follower.poll() is not None, 60), \
            follower_log.read_text()
        query = streaming.start(warehouse, streaming.ControllerSettings(
            shards=2, checkpoint=str(tmp_path / "checkpoint"), once=False, trigger_interval_ms=200))
        lags: dict[str, float] = {}
        steps = [("append", 20), ("partial", 10), ("roll", 15), ("kill", 10), ("append", 10)]
        for step, count in [("append", 0)] + steps:
            if step == "partial":
                data = node.batch(count)
                with node.segment.open("ab") as out:
                    out.write(data[:40])
                    out.flush()
                    time.sleep(0.5)  # a few polls see half a batch
                    out.write(data[40:])
            else:
                if step == "roll":
                    node.roll()
                if step == "kill":
                    os.killpg(follower.pid, signal.SIGKILL)
                    follower.wait(30)
                    follower = start(command, follower_log, env, cwd=REPO_ROOT)
                if count:
                    node.append(count)
            expected = unplaced(reference_tables(node.as_read(), 2))
            written_at = time.monotonic()
            wait_for(lambda: unplaced(warehouse_tables(warehouse)) == expected or follower.poll() is not None
                     or query.exception() is not None, 90, every=0.3)
            assert follower.poll() is None and query.exception() is None, follower_log.read_text()[-3000:]
            assert_same_tables(unplaced(warehouse_tables(warehouse)), expected, f"after {step}, log end {node.end}")
            lags[f"{len(lags)}:{step}"] = round(time.monotonic() - written_at, 1)
        assert [e["offset"] for e in committed(warehouse)] == list(range(node.end))
        ingest_rejections = warehouse.read_arrow("rejected", filter=pc.field("stage") == "ingest")
        assert ingest_rejections.num_rows == 0, "a batch read while being written was rejected"
        with capsys.disabled():
            print(f"\nseconds from a write to the tables showing it: {lags}")
    finally:
        if query is not None:
            query.stop()
        stop(follower)


def test_a_follower_keeps_the_log_few_files_and_the_same_records(tmp_path: Path) -> None:
    """A file a poll: its small files are rewritten into one as they gather (``DeltaRsTables.compact``), and a
    restarted follower still resumes after the log's end and finds the records it compares unchanged."""
    node, tables, _ = live_directory(tmp_path)
    follower = Follower(tables, node.directory, compact_files=3)
    for count in (4, 5, 6, 7):
        node.append(count)
        assert follower.poll().records == count
    files = sorted((r.lo, r.hi) for r in deltars.file_ranges(tables.table("metadata_log"), "offset"))
    assert files == [(0, 14), (15, 21)]
    assert_log(tables, node)
    restarted = Follower(tables, node.directory)
    assert restarted.poll().records == 0
    node.append(3)
    assert restarted.poll().records == 3
    assert_log(tables, node)
