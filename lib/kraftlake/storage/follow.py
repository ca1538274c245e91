"""Follow a live node's ``__cluster_metadata-0`` directory: append its new records to ``metadata_log`` as
batches land, like a consumer tailing the partition.

Where it is: the log's end in ``metadata_log`` (its highest offset) is the only position kept, so a
restarted follower resumes exactly after the last record it committed and adds nothing twice. In memory
it also keeps where it reads (segment, byte position) and the headers of the batches it consumed there,
so a poll reads only the bytes appended since the last one.

What a live directory does, and what the follower does about it:

- a batch still being written (its bytes not all there yet) is left for the next poll, never rejected;
  after damage too: the active segment's bytes after its last intact batch wait until an intact batch
  follows them or the segment rolls, and only then is what is not a batch rejected (a torn batch looks
  like damage running to the file's end; Kafka's own recovery truncates such a tail). Damage is reported
  once, also by a follower started again that reads the same bytes;
- an entry named like a segment or a snapshot that is not a regular file (a link, a FIFO) is never read,
  and reported once (``codec.files``);
- the active segment rolls (a new ``<base offset>.log``): the follower moves on once it has read the old
  one to its end; an old segment is deleted (retention), or a new snapshot appears: nothing to do, the
  follower is past them (a follower that falls behind retention stops: the records it missed are gone);
- the log is truncated and rewritten (after a leader change, uncommitted records are replaced): a batch
  it consumed is no longer what it was, or the file is shorter than where it read. It then reads again
  from the last batch that is still intact and compares every record at an offset it already committed
  with ``metadata_log``; one that differs stops it with ``LogRewritten``, naming the offset, before
  anything of the rewrite is committed. Records the same as before are taken as they are.

The first poll of an empty warehouse starts where ``ingest`` starts the directory: at offset 0 when its
segments hold the whole log, else at the snapshot that bridges to them. Records of a snapshot are never
compared: they stand for a state, not for the log's records at those offsets.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import pyarrow as pa
import pyarrow.compute as pc

from kraftlake.codec.bounds import Limits, default_limits
from kraftlake.codec.logdir import (HISTORY, SEGMENT_NAME, BatchHeader, MappedFile, batch_headers, decode_buffer,
                                    decode_snapshot, intact_end, list_partition_dir, plan_partition_dir,
                                    skipped_entries, snapshot_end_offset)
from kraftlake.metadata.config import defaults
from kraftlake.metadata.rejections import Rejection
from kraftlake.metadata.tables import metadata_log_schema, table_arrow_schema
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.ingest import StrictModeError, refusal, unit
from kraftlake.storage.tables import events_to_arrow, rejections_to_arrow, rows_to_events

# the batch headers remembered per segment, to find how deep a rewrite goes (KRaft truncates only the
# uncommitted tail, a few batches)
MEMO_BATCHES = 4096
_COMPARED = ("leader_epoch", "timestamp", "type", "version", "data")


class FollowError(RuntimeError):
    """The follower cannot go on without losing or inventing records."""


class LogRewritten(FollowError):
    """An offset already in ``metadata_log`` now holds another record in the node's log."""

    def __init__(self, offset: int, source: str, now: dict, before: dict):
        super().__init__(
            f"offset {offset} was rewritten in {source}: it now holds {now['type']} (leader epoch "
            f"{now['leader_epoch']}), but metadata_log has {before['type']} (leader epoch {before['leader_epoch']}) "
            f"from an earlier read. The node truncated its log after a leader change and wrote other records "
            f"there; metadata_log and the tables built from it hold records the cluster discarded from offset "
            f"{offset} on. Nothing of the rewrite was committed. Recovery: docs/jobs/ingest.md#follow-mode")
        self.offset = offset


@dataclass
class PollResult:
    records: int = 0
    rejected: int = 0
    first_offset: int | None = None
    last_offset: int | None = None


@dataclass
class _Cursor:
    segment: Path
    base: int  # the segment's base offset
    position: int  # the next byte to read
    consumed: deque = field(default_factory=lambda: deque(maxlen=MEMO_BATCHES))  # BatchHeaders read here


def _header_at(mapped: MappedFile, position: int, limits: Limits) -> BatchHeader | None:
    headers, _ = batch_headers(mapped.buf, position, limit=1, limits=limits)
    return headers[0] if headers else None


class Follower:
    """Tails ``directory`` into ``tables``; ``poll()`` once, or ``run()`` until told to stop."""

    def __init__(self, tables: DeltaRsTables, directory: str | os.PathLike, *, strict: bool = False,
                 limits: Limits | None = None, compact_files: int | None = None) -> None:
        self.tables = tables
        self.compact_files = int(defaults()["kraftlake.ingest.compact.files"]) if compact_files is None else compact_files
        self.directory = Path(directory).resolve()
        self.strict = strict
        self.limits = limits or default_limits()
        self.skipped: set[str] = set()  # entries named like log files that are not regular files, reported once
        self.next_offset: int | None = None
        self.cursor: _Cursor | None = None

    # --- where to read ---------------------------------------------------------------------------

    def _log_end(self) -> int | None:
        end = self.tables.max_value("metadata_log", "offset")
        return None if end is None else int(end)

    def _start(self, snapshots: list[Path]) -> PollResult | None:
        """On the first poll: resume after the log's end, or start an empty log as ingest reads the
        directory (from offset 0 when the segments hold it, else from the snapshot that bridges to them)."""
        end = self._log_end()
        if end is not None:
            self.next_offset = end + 1
            return None
        self.next_offset = 0
        snapshot = plan_partition_dir(self.directory, HISTORY).snapshot if snapshots else None
        if snapshot is None:
            return None
        items = list(decode_snapshot(snapshot, self.limits))
        placed, refused = self._placed([i for i in items if isinstance(i, dict)])
        result = self._commit(placed, refused + [i for i in items if isinstance(i, Rejection)])
        if placed:  # a snapshot named far past where the log can go on is no start
            self.next_offset = snapshot_end_offset(snapshot)[0]
        return result

    def _anchor(self, segments: list[Path]) -> _Cursor | None:
        """Where to read when nothing in memory says so (a start, a rewrite, a deleted segment): the
        segment holding the last committed offset, at the last batch at or below it (read again, and
        compared), or the segment that starts right after it."""
        last = self.next_offset - 1
        bases = [(int(SEGMENT_NAME.match(s.name).group(1)), s) for s in segments]
        below = [(b, s) for b, s in bases if b <= last]
        if not below:
            after = [(b, s) for b, s in bases if b == self.next_offset]
            if after:
                return _Cursor(after[0][1], after[0][0], 0)
            if bases and bases[0][0] > self.next_offset:
                raise FollowError(
                    f"{self.directory}: the log now starts at offset {bases[0][0]}, but metadata_log ends at "
                    f"{last}: records {self.next_offset}..{bases[0][0] - 1} were deleted (retention) before the "
                    "follower read them. Follow into a new warehouse (it starts from a snapshot), or keep "
                    "the follower running and metadata.log retention long enough for its pauses.")
            return None
        base, segment = below[-1]
        mapped = MappedFile(segment)
        try:
            headers, _ = batch_headers(mapped.buf, limits=self.limits)
        finally:
            mapped.close()
        position = 0
        for header in headers:
            if header.base_offset > last:
                break
            position = header.position
        return _Cursor(segment, base, position)

    def _intact(self, cursor: _Cursor, mapped: MappedFile) -> bool:
        if len(mapped.buf) < cursor.position:
            return False
        if not cursor.consumed:
            return True
        return _header_at(mapped, cursor.consumed[-1].position, self.limits) == cursor.consumed[-1]

    def _rewind(self, cursor: _Cursor, mapped: MappedFile) -> None:
        """After a rewrite: back to just after the last consumed batch that is still there as it was."""
        while cursor.consumed and _header_at(mapped, cursor.consumed[-1].position, self.limits) != cursor.consumed[-1]:
            cursor.consumed.pop()
        if cursor.consumed:
            cursor.position = cursor.consumed[-1].position + cursor.consumed[-1].size
        else:
            cursor.position = 0  # deeper than the memo: compare from the segment's start

    # --- one poll ----------------------------------------------------------------------------------

    def poll(self) -> PollResult:
        """Read what landed since the last poll and commit it (one commit); returns what was added."""
        segments, snapshots = list_partition_dir(self.directory)
        total = PollResult()
        skipped = [r for r in skipped_entries(self.directory) if r.source not in self.skipped]
        if skipped:
            _merge(total, self._commit([], skipped))
            self.skipped.update(r.source for r in skipped)
        if self.next_offset is None:
            _merge(total, self._start(snapshots))
        while True:
            if self.cursor is None or not self.cursor.segment.exists():
                self.cursor = self._anchor(segments)
                if self.cursor is None:
                    return total
            cursor = self.cursor
            mapped = MappedFile(cursor.segment)
            try:
                if not self._intact(cursor, mapped):
                    self._rewind(cursor, mapped)
                newer = [s for s in segments if int(SEGMENT_NAME.match(s.name).group(1)) > cursor.base]
                _merge(total, self._read(cursor, mapped, rolled=bool(newer)))
            finally:
                mapped.close()
            if not newer or cursor.position < os.path.getsize(cursor.segment):
                return total
            self.cursor = _Cursor(newer[0], int(SEGMENT_NAME.match(newer[0].name).group(1)), 0)

    def _read(self, cursor: _Cursor, mapped: MappedFile, rolled: bool) -> PollResult:
        """The whole batches after ``cursor.position``, and any damage between them, up to the last intact
        batch: what follows it may be a batch still being written (all the bytes once the segment has
        rolled: a partial batch there will never be completed and is damage)."""
        headers, stop = batch_headers(mapped.buf, cursor.position, limits=self.limits)
        whole = headers[-1].position + headers[-1].size if headers else cursor.position
        end = len(mapped.buf) if rolled else intact_end(mapped.buf, whole, self.limits) if stop == "damage" else whole
        if end <= cursor.position:
            return PollResult()
        first = headers[0].base_offset if headers and headers[0].position == cursor.position else None
        items = list(decode_buffer(memoryview(mapped.buf)[:end], str(cursor.segment), first, cursor.position,
                                   self.limits, cursor.base))
        seen = [i for i in items if isinstance(i, dict) and i["offset"] < self.next_offset]
        new, refused = self._placed([i for i in items if isinstance(i, dict) and i["offset"] >= self.next_offset])
        rejections = self._unreported(cursor.segment, refused + [
            i for i in items if isinstance(i, Rejection) and (i.offset is None or i.offset >= self.next_offset)])
        self._compare(seen)
        result = self._commit(new, rejections)
        cursor.consumed.extend(h for h in headers if h.position + h.size <= end)
        cursor.position = end
        return result

    def _placed(self, events: list[dict]) -> tuple[list[dict], list[Rejection]]:
        """Of ``events`` (past the log's end, in offset order), those that may enter the log as of now, and
        the rejections of the others (``Limits.placement_problem``: as ingest places a source's)."""
        now_ms, end = int(time.time() * 1000), self.next_offset - 1
        placed, refused = [], []
        for event in events:
            problem = self.limits.placement_problem(event["offset"], event["timestamp"], end, now_ms)
            if problem is not None:
                refused.append(refusal(event, *problem, unit("segment")))
                continue
            placed.append(event)
            end = event["offset"]
        return placed, refused

    def _unreported(self, segment: Path, rejections: list[Rejection]) -> list[Rejection]:
        """``rejections`` less those ``rejected`` holds already: a follower started again reads the last
        batches it had read once more, and the damage among them was reported the first time."""
        if not rejections or not self.tables.exists("rejected"):
            return rejections
        columns = ["position", "offset", "error"]
        rows = self.tables.read_arrow("rejected", columns=columns, filter=pc.field("source") == str(segment))
        reported = set(zip(*(rows.column(c).to_pylist() for c in columns)))
        return [r for r in rejections if (r.position, r.offset, r.error) not in reported]

    def _compare(self, events: list[dict]) -> None:
        """Records at offsets already committed must be the ones committed (see the module's doc)."""
        if not events:
            return
        lo, hi = events[0]["offset"], events[-1]["offset"]
        rows = self.tables.read_offsets("metadata_log", lo, hi)
        before = {e["offset"]: e for e in rows_to_events(rows)}
        now = rows_to_events(pa.Table.from_batches([events_to_arrow(events, rows.schema)]))
        for event in now:
            old = before.get(event["offset"])
            if old is None or not (old["source"] or "").endswith(".log"):
                continue  # never ingested from a segment (a snapshot's record, or rejected then)
            if any(old[k] != event[k] for k in _COMPARED):
                raise LogRewritten(event["offset"], event["source"], event, old)

    def _commit(self, events: list[dict], rejections: list[Rejection]) -> PollResult:
        if rejections and self.strict:
            raise StrictModeError(rejections[0])
        # rejections first: a crash between the two commits may report a bad part twice, never lose it
        if rejections:
            self.tables.append("rejected", rejections_to_arrow(rejections), table_arrow_schema("rejected"))
        if events:
            schema = metadata_log_schema()
            self.tables.append("metadata_log", pa.Table.from_batches([events_to_arrow(events, schema)]), schema)
            self.tables.compact("metadata_log", "offset", self.compact_files)  # a file a poll, kept few
            self.next_offset = events[-1]["offset"] + 1
        return PollResult(len(events), len(rejections), events[0]["offset"] if events else None,
                          events[-1]["offset"] if events else None)

    def run(self, poll_ms: int, stop: Callable[[], bool], on_poll: Callable[[PollResult], None] | None = None) -> None:
        """Poll every ``poll_ms`` until ``stop()``; raises ``FollowError`` when it cannot go on."""
        while not stop():
            started = time.monotonic()
            result = self.poll()
            if on_poll is not None and (result.records or result.rejected):
                on_poll(result)
            remaining = poll_ms / 1000 - (time.monotonic() - started)
            deadline = time.monotonic() + max(0.0, remaining)
            while not stop() and time.monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def _merge(total: PollResult, part: PollResult | None) -> None:
    if part is None:
        return
    total.records += part.records
    total.rejected += part.rejected
    if part.first_offset is not None:
        total.first_offset = part.first_offset if total.first_offset is None else total.first_offset
        total.last_offset = part.last_offset


def print_poll(result: PollResult, out: TextIO) -> None:
    span = "" if result.first_offset is None else f", offsets {result.first_offset}..{result.last_offset}"
    print(f"[follow] {result.records:,} records{span}, {result.rejected} rejected", file=out, flush=True)
