"""Ingest: Kafka partition directories, segments, snapshots, JSON lines and Avro into ``metadata_log``.

Each source is one Delta commit to ``metadata_log`` and one to ``rejected``, both tagged with a Delta
application transaction named after the source's content, so ingesting the same bytes again adds
nothing, and a crash between the two commits is repaired by simply running the ingest again.
Offsets continue the log: records read from a Kafka log keep their own offsets, hand-written events get
the next ones. A Kafka log's records at offsets ``metadata_log`` already holds are skipped, each counted
under what holds that offset; those at offsets it lacks (older history, a gap) are backfilled, and
replace the rows of a snapshot that stood for them (ADR 0010).

Several ingests may run on one warehouse at once: each plans its offsets on the log's end at one Delta
version and commits on top of exactly that version; if another ingest committed first, it reads the
source again from the new end (``Conflict``). Both succeed, and no offset is given twice.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import os
import shlex
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlake import codec
from kraftlake.codec import events
from kraftlake.codec.bounds import INT64, OFFSET_MAX, Limits, default_limits
from kraftlake.codec.files import NotRegularFile, is_regular, open_regular, read_regular
from kraftlake.codec.logdir import (FROM_SNAPSHOT, FULL_HISTORY, HISTORY, QUORUM_FILES, SEGMENT_NAME, SNAPSHOT_NAME,
                                    DirectoryPlan, skipped_entries, snapshot_end_offset)
from kraftlake.metadata.config import defaults
from kraftlake.metadata.progress import Meter
from kraftlake.metadata.rejections import RAW_LIMIT, Item, Rejection
from kraftlake.metadata.tables import metadata_log_schema, table_arrow_schema
from kraftlake.storage import pieces
from kraftlake.storage.deltars import Conflict
from kraftlake.storage.tables import events_to_arrow, rejections_to_arrow, rows_to_events, widen

KAFKA_KINDS = ("partition-dir", "segment", "snapshot")
INGEST_ATTEMPTS = 20  # plans of one source, each lost to another ingest's commit, before giving up


class Tables(Protocol):
    """What ingest needs of a warehouse (``kraftlake.storage.Warehouse`` provides it)."""

    def append(self, name: str, data: pa.RecordBatchReader | pa.Table, schema: pa.Schema,
               txn: tuple[str, int] | None = None, read_version: int | None = None) -> bool: ...

    def create_if_missing(self, name: str, schema: pa.Schema) -> None: ...

    def txn_version(self, name: str, app_id: str) -> int | None: ...

    def snapshot_max(self, name: str, column: str) -> tuple[int | None, object]: ...

    def scan_at(self, name: str, version: int, columns: list[str], filter: pc.Expression,
                dictionary: Sequence[str] = ()) -> Iterator[pa.RecordBatch]: ...

    def backfill(self, name: str, data: pa.RecordBatchReader, schema: pa.Schema, txn: tuple[str, int],
                 read_version: int, replaced: str | None, note: dict) -> None: ...

    def compact(self, name: str, column: str, files: int) -> bool: ...


class StrictModeError(RuntimeError):
    def __init__(self, rejection: Rejection):
        super().__init__(f"strict mode: {rejection.describe()}")
        self.rejection = rejection


class HistoryConflict(ValueError):
    """A source's snapshot would sit at offsets where ``metadata_log`` holds other rows (ADR 0010)."""


@dataclass
class Span:
    """Records of one kind: how many, and the offsets they lie between."""

    records: int = 0
    first: int | None = None
    last: int | None = None

    def add(self, offset: int) -> None:
        self.records += 1
        self.first = offset if self.first is None else min(self.first, offset)
        self.last = offset if self.last is None else max(self.last, offset)

    def __str__(self) -> str:
        return f"{self.records:,} records at offsets {self.first}..{self.last}"


@dataclass
class SourceSummary:
    """What an ingest of one source did; every record of the source that was not written is counted under
    the reason it was not (ADR 0010)."""

    source: str
    kind: str
    status: str = "ingested"  # ingested | already ingested | failed
    records: int = 0
    by_type: Counter = field(default_factory=Counter)
    first_offset: int | None = None
    last_offset: int | None = None
    bytes: int = 0
    rejected: int = 0
    existing: Span = field(default_factory=Span)  # at offsets metadata_log holds the same record at
    occupied: Span = field(default_factory=Span)  # at offsets metadata_log holds other events at (hand-written)
    backfilled: Span = field(default_factory=Span)  # written below the log's end when the ingest began
    # not taken because a snapshot stands for them: {"snapshot", "where" (source | metadata_log), "records",
    # "first", "last"}
    summarised: list[dict] = field(default_factory=list)
    # the source's snapshot, not loaded because metadata_log holds the log it stands for: {"snapshot", ...}
    unloaded_snapshot: dict | None = None
    replaced: list[dict] = field(default_factory=list)  # snapshots in metadata_log the log's records replaced
    missing: tuple[int, int] | None = None  # offsets of the log the source lacks, with no snapshot for them
    seconds: float = 0.0
    quorum_state: dict | None = None

    @property
    def skipped_existing(self) -> int:
        return self.existing.records

    def as_dict(self) -> dict:
        out = {k: dataclasses.asdict(v) if isinstance(v, Span) else v for k, v in self.__dict__.items()}
        out["by_type"] = dict(sorted(self.by_type.items()))
        return out

    def notes(self, warehouse: str) -> list[str]:
        """The summary's lines beyond the counts by type: where each record not written went, and the
        warnings."""
        lines = []
        if self.existing.records:
            lines.append(f"{self.existing} were already in metadata_log")
        for s in self.summarised:
            where = ", which metadata_log holds (not loaded)" if s["where"] == "metadata_log" else " (not read)"
            lines.append(f"{s['records']:,} records at offsets {s['first']}..{s['last']} are summarised by snapshot "
                         f"{s['snapshot']}{where}")
        if self.unloaded_snapshot is not None:
            u = self.unloaded_snapshot
            lines.append(f"snapshot {u['snapshot']} not loaded ({u['records']:,} records): metadata_log holds the log "
                         f"through offset {u['last']}")
        if self.occupied.records:
            lines.append(f"{self.occupied} not loaded: metadata_log holds other events at those offsets "
                         "(hand-written events take the offsets after the log's end)")
        if self.backfilled.records:
            replacing = "".join(f", replacing the {r['records']:,} rows of snapshot {r['snapshot']}"
                                for r in self.replaced)
            lines.append(f"backfilled {self.backfilled} below the log's end{replacing}")
        return lines + [f"warning: {w}" for w in self.warnings(warehouse)]

    def warnings(self, warehouse: str) -> list[str]:
        """What the operator must know or do after this ingest (also on stderr)."""
        out = []
        if self.missing is not None:
            first, last = self.missing
            out.append(f"{self.source}: the log before offset {last + 1} is missing (offsets {first}..{last} were "
                       "deleted and no snapshot stands for them): the tables know nothing of the cluster before it")
        if self.backfilled.records:
            out.append(f"metadata_log changed below its end: rebuild the controller's tables, if it has run, with "
                       f"jobs/controller.py --warehouse {shlex.quote(warehouse)} --once --reset")
        return out


def detect_kind(path: Path) -> str:
    """What a source is, by name first and by its first bytes when the name says nothing."""
    if path.is_dir():
        return "partition-dir"
    name = path.name.lower()
    if name.endswith(".log"):
        return "segment"
    if SNAPSHOT_NAME.match(path.name) or name.endswith(".checkpoint"):
        return "snapshot"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "json-lines"
    if name.endswith(".avro"):
        return "avro"
    with open_regular(path) as handle:
        head = handle.read(64)
    if head.startswith(b"Obj\x01"):
        return "avro"
    if head.lstrip()[:1] == b"{":
        return "json-lines"
    if len(head) >= 17 and head[16] == 2:
        return "segment"
    return "unknown"


def start_of(full_history: bool, from_snapshot: bool) -> str:
    """The read of a partition directory ``--full-history`` or ``--from-snapshot`` asks for (ADR 0010)."""
    if full_history and from_snapshot:
        raise ValueError("--full-history and --from-snapshot exclude each other")
    return FULL_HISTORY if full_history else FROM_SNAPSHOT if from_snapshot else HISTORY


def fingerprint(path: Path, kind: str, start: str) -> tuple[str, int]:
    """(sha-256 of what will be read, bytes) — the identity that makes re-ingesting a no-op. ``HISTORY``
    has a name of its own in it: a directory that an earlier release ingested from its newest snapshot
    (its ``False``) is read again, and its history backfilled. A directory's regular files only
    (``codec.files``)."""
    how = "history" if kind == "partition-dir" and start == HISTORY else str(start == FULL_HISTORY)
    digest = hashlib.sha256(f"{kind}:{how}".encode())
    files = sorted(p for p in path.iterdir() if is_regular(p)) if path.is_dir() else [path]
    total = 0
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with open_regular(file) as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                total += len(chunk)
    return digest.hexdigest(), total


@dataclass
class _Read:
    """What an ingest reads of a source, decided before it reads it: the items of ``head``, then the
    records of ``segments`` (a Kafka log's, decoded here or in workers: ``pieces``)."""

    head: Iterable[Item]
    files: list[Path]  # the files read, in order (for progress)
    first_offset: int | None = None  # no record of the source lies below it; None: events, offsets given here
    log_start: int | None = None  # where the source's log records (not its snapshot's) begin, when known
    snapshot: list[dict] = field(default_factory=list)  # the events of a snapshot read first
    directory: DirectoryPlan | None = None
    missing: tuple[int, int] | None = None
    segments: list[pieces.Segment] = field(default_factory=list)
    limits: Limits | None = None

    @property
    def items(self) -> Iterator[Item]:
        """Everything read, in this process."""
        return itertools.chain(self.head, *(codec.decode_file(path, min_offset=start, limits=self.limits)
                                            for path, start in self.segments))


def _log_start(path: Path, kind: str) -> int | None:
    """The offset a partition directory's first segment, or a segment, starts at (by its file name)."""
    if kind == "partition-dir":
        segments = codec.list_partition_dir(path)[0]
        name = segments[0].name if segments else ""
    else:
        name = path.name if kind == "segment" else ""
    match = SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


def _read(path: Path, kind: str, start: str, held_before: bool = False, limits: Limits | None = None) -> _Read:
    """``path`` as the user named it: a link there is followed (their choice), the files inside a directory
    must be regular files (``codec.files``)."""
    path = path.resolve()
    if kind == "partition-dir":
        plan = codec.plan_partition_dir(path, start, held_before)
        snapshot = list(codec.decode_snapshot(plan.snapshot, limits)) if plan.snapshot is not None else []
        events_ = [i for i in snapshot if isinstance(i, dict)]
        return _Read(skipped_entries(path) + snapshot,
                     ([plan.snapshot] if plan.snapshot is not None else []) + list(plan.segments),
                     events_[0]["offset"] if events_ else plan.first_offset, plan.first_offset, events_, plan,
                     plan.missing, [(segment, plan.segment_start) for segment in plan.segments], limits)
    if kind == "segment":
        base = _log_start(path, kind)
        missing = (0, base - 1) if base and not held_before else None
        return _Read([], [path], base or 0, base, missing=missing, segments=[(path, None)], limits=limits)
    if kind == "snapshot":
        items = list(codec.decode_snapshot(path, limits))
        events_ = [i for i in items if isinstance(i, dict)]
        placed = events_ if snapshot_end_offset(path) is not None else []
        return _Read(iter(items), [path], events_[0]["offset"] if events_ else None, snapshot=placed)
    if kind == "json-lines":
        return _Read(events.read_json_lines(path, limits), [])
    if kind == "avro":
        return _Read(events.read_avro(path, limits), [])
    unknown = Rejection(str(path), 0, None, "INVALID_RECORD",
                        "not a Kafka log segment, snapshot, partition directory, JSON lines or Avro file")
    return _Read(iter([unknown]), [])


def read_source(path: Path, kind: str, full_history: bool, from_snapshot: bool = False,
                limits: Limits | None = None) -> Iterator[Item]:
    """A source's records and rejections as an ingest into an empty warehouse reads them."""
    return _read(path, kind, start_of(full_history, from_snapshot), limits=limits).items


class _SourceProgress:
    """Feeds a source's ``Meter``: bytes of a Kafka log read so far (the files before the current one plus
    the batch position in it), records for JSON lines and Avro, whose size says little about the rest."""

    def __init__(self, meter: Meter | None, kind: str, files: list[Path]):
        self.meter = meter
        self.starts: dict[str, int] = {}
        if meter is None or kind not in KAFKA_KINDS:
            return
        total = 0
        for file in files:
            self.starts[file.name] = total
            total += file.stat().st_size
        meter.unit, meter.scale, meter.total = "MB", 1e6, total

    def tick(self, records: int, item: dict) -> None:
        if self.meter is None:
            return
        if not self.starts:
            self.meter.update(records)
            return
        done = self.starts.get(Path(item.get("source") or "").name, 0) + (item.get("position") or 0)
        self.meter.update(done, f"{records:,} records, offset {item['offset']}")

    def finish(self, records: int) -> None:
        if self.meter is not None:
            self.meter.finish(self.meter.total or records, f"{records:,} records")


LOGGED, EVENTS = "log", "events"  # where a metadata_log row came from, when not from a snapshot (its file name)


def _origin(source: str | None) -> str:
    """Where a metadata_log row came from, by its ``source``: a snapshot (the file's name, which says its
    end offset), a log segment, or events (hand-written, simulated)."""
    name = (source or "").rsplit("/", 1)[-1]
    if SNAPSHOT_NAME.match(name):
        return name
    return LOGGED if name.endswith(".log") else EVENTS


def _is_snapshot(origin: str | None) -> bool:
    return origin is not None and origin not in (LOGGED, EVENTS)


@dataclass(frozen=True)
class _Run:
    first: int
    last: int
    origin: str


class _Held:
    """What ``metadata_log`` holds at some offsets, as runs of consecutive offsets of one origin (a real
    log's rows are dense: a few runs stand for millions of rows)."""

    def __init__(self, runs: list[_Run]) -> None:
        self.runs = runs
        self.firsts = [r.first for r in runs]
        self.at = 0  # the run of the last look-up: a source's offsets rise, so the next is there or after it

    def origin(self, offset: int) -> str | None:
        """Where the row at ``offset`` came from; None when there is none."""
        runs, i = self.runs, self.at
        if not (i < len(runs) and runs[i].first <= offset):
            i = max(bisect.bisect_right(self.firsts, offset) - 1, 0)
        while i + 1 < len(runs) and runs[i + 1].first <= offset:
            i += 1
        self.at = i
        return runs[i].origin if runs and runs[i].first <= offset <= runs[i].last else None

    def pieces(self, first: int, last: int) -> list[tuple[int, int, str | None]]:
        """Offsets first..last cut where their origin changes: (from, to, origin or None)."""
        out: list[tuple[int, int, str | None]] = []
        at = first
        for run in self.runs[max(bisect.bisect_right(self.firsts, first) - 1, 0):]:
            if run.first > last or at > last:
                break
            if run.last < at:
                continue
            if run.first > at:
                out.append((at, run.first - 1, None))
            out.append((max(run.first, at), min(run.last, last), run.origin))
            at = run.last + 1
        if at <= last:
            out.append((at, last, None))
        return out

    def snapshots(self) -> dict[str, tuple[int, int]]:
        """The snapshots whose rows are held, by file name: (first, last) offset of their rows."""
        found: dict[str, tuple[int, int]] = {}
        for run in self.runs:
            if _is_snapshot(run.origin):
                lo, hi = found.get(run.origin, (run.first, run.last))
                found[run.origin] = (min(lo, run.first), max(hi, run.last))
        return found

    def holds_log_before(self, offset: int) -> bool:
        """Whether the log just below ``offset`` is here: a segment's record at offset - 1, or the last row of
        a snapshot whose end offset is ``offset``."""
        origin = self.origin(offset - 1)
        return origin == LOGGED or _is_snapshot(origin) and snapshot_end_offset(origin)[0] == offset


def _held(tables: Tables, version: int, lo: int, hi: int) -> _Held:
    """What version ``version`` of ``metadata_log`` holds at offsets lo..hi (its offsets and sources only,
    batch by batch)."""
    runs: list[_Run] = []
    for batch in tables.scan_at("metadata_log", version, ["offset", "source"],
                                (pc.field("offset") >= lo) & (pc.field("offset") <= hi), dictionary=["source"]):
        if not batch.num_rows:
            continue
        sources = batch.column("source")  # dictionary-encoded: a few distinct files, whatever the rows
        origins = [_origin(s) for s in sources.dictionary.to_pylist()] + [EVENTS]
        offsets = batch.column("offset").to_numpy(zero_copy_only=False)
        codes = pc.fill_null(sources.indices, len(origins) - 1).to_numpy(zero_copy_only=False)
        steps = np.diff(offsets)
        if (steps < 0).any():  # the log is written in offset order, so this is rare
            order = np.argsort(offsets, kind="stable")
            offsets, codes = offsets[order], codes[order]
            steps = np.diff(offsets)
        cuts = np.flatnonzero((steps != 1) | (codes[1:] != codes[:-1])) + 1
        starts, ends = np.concatenate([[0], cuts]), np.concatenate([cuts - 1, [len(offsets) - 1]])
        runs += [_Run(int(offsets[a]), int(offsets[b]), origins[codes[a]]) for a, b in zip(starts, ends)]
    runs.sort(key=lambda r: r.first)
    merged: list[_Run] = []
    for run in runs:
        if merged and merged[-1].origin == run.origin and merged[-1].last + 1 == run.first:
            merged[-1] = _Run(merged[-1].first, run.last, run.origin)
        else:
            merged.append(run)
    return _Held(merged)


class _Replan(Exception):
    """What reading the source showed the plan got wrong: plan again keeping the snapshots in ``keep``
    (the source cannot replace them whole), committing as a backfill or not as ``backfills`` says."""

    def __init__(self, keep: frozenset[str] = frozenset(), backfills: bool | None = None):
        super().__init__(f"plan again: keep {sorted(keep)}, backfills {backfills}")
        self.keep = keep
        self.backfills = backfills


LOAD, HELD, NOT_NEEDED = "load", "held", "not needed"  # what becomes of a source's snapshot


class _Merge:
    """Where a Kafka log's records go when ``metadata_log`` holds some of their offsets (ADR 0010).

    A record at an offset held by a segment's record is there already; at one held by other events, it
    cannot go; at a free offset it is backfilled. The rows of a snapshot in ``metadata_log`` are replaced
    by the log's own records when the source holds all of them and the whole log before them (from offset
    0, from its own snapshot, or from what ``metadata_log`` holds); otherwise the records at its offsets
    stay summarised by it. The source's snapshot is loaded where nothing is, skipped where it is already
    or where ``metadata_log`` holds the log through its end, and refused where it would cover other rows.
    """

    def __init__(self, summary: SourceSummary, held: _Held, end: int, read: _Read, held_before: bool,
                 keep: frozenset[str], verify: bool) -> None:
        self.summary, self.held, self.end, self.verify = summary, held, end, verify
        self.first_offset = read.first_offset
        self.snapshot_source = read.snapshot[0]["source"] if read.snapshot else None
        self.snapshot = self._place(read.snapshot)
        start = read.log_start
        whole = start is not None and (start == 0 or held_before or bool(read.snapshot))
        self.replacing = {name: span for name, span in held.snapshots().items()
                          if whole and span[0] >= start and name not in keep}
        self.records_start = start if start is not None else read.first_offset
        self.chain = start  # the log is whole from the source's start up to here; None once it is not
        self.written: Counter = Counter()
        self.summarised: dict[str, Span] = {}
        self.unloaded = Span()

    def _place(self, snapshot: list[dict]) -> str | None:
        if not snapshot:
            return None
        name, first, last = Path(snapshot[0]["source"]).name, snapshot[0]["offset"], snapshot[-1]["offset"]
        if first > self.end:
            return LOAD
        pieces = self.held.pieces(first, last)
        if all(origin == name for *_, origin in pieces):
            return HELD
        if self.held.holds_log_before(last + 1):
            return NOT_NEEDED
        if all(origin is None for *_, origin in pieces):
            return LOAD
        taken = [p for p in pieces if p[2] is not None]
        raise HistoryConflict(
            f"{self.summary.source}: its snapshot {name} goes at offsets {first}..{last} (its {len(snapshot):,} "
            f"records sit just below its end offset), where metadata_log holds other rows (offsets "
            f"{taken[0][0]}..{taken[-1][1]}) but not the log at offset {last}: the records between the end of "
            "metadata_log and this directory's first segment are gone from it. Ingest it with --full-history "
            "(its segment records only, the history before them missing) or into a warehouse of its own; nothing "
            "of it was committed")

    def backfills(self) -> bool:
        """Whether the commit will write below the log's end, as far as can be told before reading."""
        if self.replacing or self.snapshot == LOAD and self.first_offset <= self.end:
            return True
        return self.records_start <= self.end and \
            any(origin is None for *_, origin in self.held.pieces(self.records_start, self.end))

    def replaced_rows(self) -> str | None:
        """The predicate of the rows the commit deletes and writes: the snapshots replaced, and every offset
        nothing holds from the source's first (which every row written matches); None: it deletes none."""
        if not self.replacing:
            return None
        ranges = [(a, b) for a, b, origin in self.held.pieces(self.first_offset, self.end)
                  if origin is None or origin in self.replacing]
        merged: list[tuple[int, int]] = []
        for a, b in ranges:
            if merged and merged[-1][1] + 1 == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        return " OR ".join([f"(`offset` >= {a} AND `offset` <= {b})" for a, b in merged] + [f"`offset` > {self.end}"])

    def take(self, item: dict) -> bool:
        """Whether ``item`` (at or below the log's end) is written; if not, it is counted where it belongs."""
        offset = item["offset"]
        if self.snapshot_source is not None and item["source"] == self.snapshot_source:
            if self.snapshot == LOAD:
                return True
            (self.summary.existing if self.snapshot == HELD else self.unloaded).add(offset)
            return False
        origin = self.held.origin(offset)
        self._follow(offset, origin)
        if origin is None:
            return True
        if origin == LOGGED:
            self.summary.existing.add(offset)
            return False
        if origin == EVENTS:
            self.summary.occupied.add(offset)
            return False
        if origin in self.replacing:
            if self.verify and offset == self.replacing[origin][0] and self.chain is None:
                raise _Replan(keep=frozenset({origin}))
            self.written[origin] += 1
            return True
        self.summarised.setdefault(origin, Span()).add(offset)
        return False

    def _follow(self, offset: int, origin: str | None) -> None:
        """Whether the log is still whole from the source's start: every offset before this record holds
        a record of the source or of a segment in ``metadata_log``."""
        if self.chain is None or not self.replacing or offset < self.chain:
            return
        gap = self.held.pieces(self.chain, offset - 1) if offset > self.chain else []
        whole = origin != EVENTS and all(o == LOGGED for *_, o in gap)
        self.chain = offset + 1 if whole else None

    def finish(self, backfilled: bool, planned: bool) -> None:
        """After the last record: check the plan (``_Replan`` if it was wrong), then say what became of the
        snapshots."""
        short = frozenset(name for name, (first, last) in self.replacing.items()
                          if self.written[name] != last - first + 1)
        if self.verify and short:
            raise _Replan(keep=short)
        if self.verify and backfilled != planned:
            raise _Replan(backfills=backfilled)
        self.summary.replaced = [{"snapshot": name, "first": first, "last": last, "records": last - first + 1}
                                 for name, (first, last) in sorted(self.replacing.items())]
        self.summary.summarised += [{"snapshot": name, "where": "metadata_log", "records": span.records,
                                     "first": span.first, "last": span.last}
                                    for name, span in sorted(self.summarised.items())]
        if self.unloaded.records:
            self.summary.unloaded_snapshot = {"snapshot": Path(self.snapshot_source).name,
                                              **dataclasses.asdict(self.unloaded)}


def unit(kind: str) -> str:
    """What a rejection's position counts in a source of ``kind``."""
    return "byte" if kind in KAFKA_KINDS else "record" if kind == "avro" else "line"


def refusal(item: dict, error: str, reason: str, unit_: str) -> Rejection:
    """The rejection of an event read whole that may not go where it says in the log."""
    offset = item["offset"]
    return Rejection(item["source"], item.get("position"), offset if offset is not None and offset <= INT64[1]
                     else None, error, reason, type=item["type"], version=item["version"], unit=unit_)


class _Sequencer:
    """Gives events their offsets and sorts out rejections, in one pass over a source's items; a Kafka
    log's records at offsets up to the log's end go where ``merge`` says. Every event is placed within
    ``limits`` (``Limits.placement_problem``) as of ``now_ms``."""

    def __init__(self, summary: SourceSummary, next_offset: int, strict: bool, merge: _Merge | None,
                 limits: Limits, now_ms: int):
        self.summary = summary
        self.next_offset = next_offset
        self.strict = strict
        self.merge = merge
        self.limits, self.now_ms = limits, now_ms
        self.latest = now_ms + limits.ahead_ms  # an event later than this may be misplaced (``placement_problem``)
        self.rejections: list[Rejection] = []
        self.failure: Exception | None = None

    def reject(self, rejection: Rejection) -> None:
        if self.strict:
            raise StrictModeError(rejection)
        self.rejections.append(rejection)
        self.summary.rejected += 1

    def place(self, item: Item) -> dict | None:
        """The event ``item`` is written as (at its offset), or None: rejected, or not written (``merge``)."""
        if isinstance(item, Rejection):
            self.reject(item)
            return None
        summary, merge, unit_ = self.summary, self.merge, unit(self.summary.kind)
        offset = item["offset"]
        held = offset is not None and merge is not None and offset <= merge.end
        if offset is not None and not held and offset < self.next_offset:
            self.reject(refusal(item, "INVALID_RECORD", f"offset {offset} is below the log end offset "
                                f"{self.next_offset}", unit_))
            return None
        at = self.next_offset if offset is None else offset
        if item["timestamp"] > self.latest or at > OFFSET_MAX or at - self.next_offset >= self.limits.offset_gap:
            refused = self.limits.placement_problem(at, item["timestamp"], self.next_offset - 1, self.now_ms)
            if refused is not None:
                self.reject(refusal(item, *refused, unit_))
                return None
        if held:
            if not merge.take(item):
                return None
            summary.backfilled.add(offset)
        item["offset"] = offset = at
        if offset >= self.next_offset:
            self.next_offset = offset + 1
        summary.records += 1
        summary.by_type[item["type"]] += 1
        if summary.first_offset is None:
            summary.first_offset = offset
        summary.last_offset = offset
        return item

    def events(self, items: Iterable[Item], progress: _SourceProgress, backfills: bool = False) -> Iterator[dict]:
        """The events to write; ``backfills``: what the commit was planned as (checked at the end)."""
        for item in items:
            event = self.place(item)
            if event is not None:
                progress.tick(self.summary.records, event)
                yield event
        if self.merge is not None:
            self.merge.finish(self.summary.backfilled.records > 0, backfills)

    def batches(self, parts: Iterable[pieces.Part], progress: _SourceProgress, schema: pa.Schema,
                batch_records: int) -> Iterator[pa.RecordBatch]:
        """The batches to write from a source read in pieces (``pieces.parts``; never with ``merge``): a
        piece whose every event goes where it says is taken whole, as ``place`` would take each of its
        events; any other is placed event by event."""
        for part in parts:
            if isinstance(part, list):
                yield from (events_to_arrow(chunk, schema) for chunk in
                            _chunks(self.events(part, progress), batch_records))
                continue
            batch, rejections = widen(part[0], schema), part[1]
            if self._in_place(batch):
                for _, rejection in rejections:
                    self.reject(rejection)
                self._take_whole(batch, progress)
                yield batch
            else:
                yield self._placed_rows(batch, rejections, progress)

    def _in_place(self, batch: pa.RecordBatch) -> bool:
        """Whether ``place`` would take every event of ``batch`` without a question: offsets rising from the
        log's end, within ``offset_gap`` of each other, timestamps within the clock's bound."""
        if not batch.num_rows:
            return True
        offsets = batch.column("offset").to_numpy()
        steps = np.diff(offsets)
        latest_us = pc.max(batch.column("timestamp").cast(pa.int64())).as_py()
        return bool(offsets[0] >= self.next_offset and offsets[0] - self.next_offset < self.limits.offset_gap
                    and (steps > 0).all() and (steps <= self.limits.offset_gap).all()
                    and offsets[-1] <= OFFSET_MAX and latest_us <= self.latest * 1000)

    def _take_whole(self, batch: pa.RecordBatch, progress: _SourceProgress) -> None:
        if not batch.num_rows:
            return
        summary = self.summary
        first, last = batch.column("offset")[0].as_py(), batch.column("offset")[-1].as_py()
        summary.records += batch.num_rows
        for entry in pc.value_counts(batch.column("type")).to_pylist():
            summary.by_type[entry["values"]] += entry["counts"]
        if summary.first_offset is None:
            summary.first_offset = first
        summary.last_offset = last
        self.next_offset = last + 1
        progress.tick(summary.records, {"source": batch.column("source")[-1].as_py(),
                                        "position": batch.column("position")[-1].as_py(), "offset": last})

    def _placed_rows(self, batch: pa.RecordBatch, rejections: list[tuple[int, Rejection]],
                     progress: _SourceProgress) -> pa.RecordBatch:
        """``batch``'s rows that ``place`` takes, each rejection placed before the event it preceded."""
        kept = []
        waiting = iter(rejections)
        rejection = next(waiting, None)
        for index, event in enumerate(rows_to_events(pa.Table.from_batches([batch]))):
            while rejection is not None and rejection[0] <= index:
                self.reject(rejection[1])
                rejection = next(waiting, None)
            if self.place(event) is not None:
                progress.tick(self.summary.records, event)
                kept.append(index)
        for _, later in ([rejection] if rejection is not None else []) + list(waiting):
            self.reject(later)
        return batch.take(pa.array(kept, pa.int64()))

    def kept(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, keeping what they raise: the Delta writer pulling them wraps it in an error of its
        own (the source's message buried in a traceback), so the caller raises this one instead."""
        try:
            yield from batches
        except Exception as exc:
            self.failure = exc
            raise


def _chunks(events_: Iterator[dict], size: int) -> Iterator[list[dict]]:
    chunk: list[dict] = []
    for event in events_:
        chunk.append(event)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def read_quorum_files(path: Path, limits: Limits | None = None) -> tuple[list[dict], list[Rejection]]:
    """The partition directory's ``quorum-state`` and ``leader-epoch-checkpoint``, and its log directory's
    ``meta.properties`` (where Kafka keeps the cluster id), when present, as ``quorum_files`` rows; a file
    that is not what its name says, or longer than an event may be, is a rejection (the log still goes in)."""
    rows, rejections = [], []
    limit = (limits or default_limits()).event_bytes
    for file in [path / name for name in QUORUM_FILES] + [path.parent / "meta.properties"]:
        name = file.name
        try:
            content = read_regular(file, limit)
        except FileNotFoundError:
            continue
        except NotRegularFile as exc:
            rejections.append(Rejection(str(file), None, None, "KAFKA_STORAGE_ERROR", f"{name}: {exc.strerror}: "
                                        "not read (a log directory's files are regular files)"))
            continue
        if len(content) > limit:
            rejections.append(Rejection(str(file), None, None, "MESSAGE_TOO_LARGE", f"{name}: longer than "
                                        f"kraftlake.decode.event.max.bytes ({limit:,})", content[:RAW_LIMIT]))
            continue
        row = {"file": str(file), "kind": name, "leader_id": None, "leader_epoch": None, "voted_id": None,
               "current_voters": None, "epochs": None, "content": content.decode("utf-8", "replace")}
        try:
            if name == "quorum-state":
                state = codec.read_quorum_state(file, content)
                voters = state.get("currentVoters")
                row.update(leader_id=state.get("leaderId"), leader_epoch=state.get("leaderEpoch"),
                           voted_id=state.get("votedId"),
                           current_voters=None if voters is None else [v["voterId"] for v in voters])
            elif name == "leader-epoch-checkpoint":
                row["epochs"] = [{"epoch": e, "start_offset": o} for e, o in codec.read_leader_epoch_checkpoint(file, content)]
            else:
                codec.read_meta_properties(file, content)
        except (ValueError, KeyError, TypeError) as exc:
            rejections.append(Rejection(str(file), None, None, "CORRUPT_MESSAGE", f"{name}: {exc}",
                                        content[:RAW_LIMIT], len(content), unit="line"))
            continue
        rows.append(row)
    return rows, rejections


def ingest_source(tables: Tables, source: str, *, strict: bool = False, full_history: bool = False,
                  from_snapshot: bool = False, batch_records: int | None = None,
                  meter: Meter | None = None, limits: Limits | None = None, workers: int | None = None,
                  workers_min_bytes: int | None = None, compact_files: int | None = None,
                  decoders: pieces.Decoders | None = None) -> SourceSummary:
    """Ingest one source; ``batch_records`` events per Arrow batch (``kraftlake.ingest.batch.records``);
    a Kafka log of at least ``workers_min_bytes`` is decoded by ``workers`` processes
    (``kraftlake.ingest.workers``, 0: one per core; ``pieces``), or by ``decoders`` when given (Spark's
    tasks: ``kraftlake.ingest.decoders``; the caller owns them);
    progress goes to ``meter`` (its unit and total are set here, from the source); the source is read
    within ``limits`` (``kraftlake.decode.*``), and its events placed within them (at most
    ``kraftlake.ingest.offset.max.gap`` past the log's end, ``kraftlake.ingest.timestamp.after.max.ms`` past
    the clock); ``metadata_log``'s small files are compacted ``compact_files`` at a time
    (``kraftlake.ingest.compact.files``, 0: never). A directory is read from its start (``full_history``,
    ``from_snapshot``: ``start_of``); raises ``HistoryConflict`` when its snapshot cannot be placed in this
    warehouse."""
    settings = defaults()
    batch_records = batch_records or int(settings["kraftlake.ingest.batch.records"])
    count = pieces.worker_count(int(settings["kraftlake.ingest.workers"]) if workers is None else workers)
    min_bytes = int(settings["kraftlake.ingest.workers.min.bytes"]) if workers_min_bytes is None else workers_min_bytes
    compact = int(settings["kraftlake.ingest.compact.files"]) if compact_files is None else compact_files
    with nullcontext(decoders) if decoders is not None else pieces.Workers(count, min_bytes) as pool:
        return _ingest_source(tables, source, strict, full_history, from_snapshot, batch_records, meter,
                              limits or default_limits(), pool, compact)


def _ingest_source(tables: Tables, source: str, strict: bool, full_history: bool, from_snapshot: bool,
                   batch_records: int, meter: Meter | None, limits: Limits, pool: pieces.Decoders,
                   compact_files: int) -> SourceSummary:
    start = start_of(full_history, from_snapshot)
    path = Path(source).resolve()
    started = time.monotonic()
    now_ms = int(time.time() * 1000)  # one instant for the whole source: its events are placed as of it
    sources_exist([source])
    if not path.is_dir() and not path.is_file():
        raise NotRegularFile(f"{source}: not a regular file or a directory (reading a FIFO or a device waits "
                             "for a writer)")
    kind = detect_kind(path)
    summary = SourceSummary(str(path), kind)
    digest, summary.bytes = fingerprint(path, kind, start)
    txn = (f"kraftlake-ingest-{digest}", 1)
    quorum_files, quorum_rejections = read_quorum_files(path, limits) if kind == "partition-dir" else ([], [])
    summary.quorum_state = next((json.loads(f["content"]) for f in quorum_files if f["kind"] == "quorum-state"), None)
    if strict and quorum_rejections:
        raise StrictModeError(quorum_rejections[0])
    schema = metadata_log_schema()
    tables.create_if_missing("metadata_log", schema)
    keep: frozenset[str] = frozenset()  # snapshots in metadata_log a read showed this source cannot replace
    backfills: bool | None = None  # what a read showed the commit is, when the plan guessed wrong
    for _ in range(INGEST_ATTEMPTS):
        log_done = tables.txn_version("metadata_log", txn[0]) is not None
        if log_done and tables.txn_version("rejected", txn[0]) is not None:
            summary.status = "already ingested"
            return summary
        version, log_end = tables.snapshot_max("metadata_log", "offset")
        end = None if log_end is None else int(log_end)
        summary = SourceSummary(str(path), kind, bytes=summary.bytes, quorum_state=summary.quorum_state)
        held_before = False
        base = _log_start(path, kind) if kind in KAFKA_KINDS else None
        if base and end is not None and end >= base - 1:
            held_before = _held(tables, version, base - 1, base - 1).holds_log_before(base)
        read = _read(path, kind, start, held_before, limits)
        # a log said (by its file names) to start where this log cannot go on is no log of it: its records
        # are rejected, each saying why, and nothing of it is missing
        claimed = read.log_start is not None and \
            limits.offset_problem(read.log_start, -1 if end is None else end) is not None
        summary.missing = None if claimed else read.missing
        if read.directory is not None and read.directory.summarised is not None:
            first, last = read.directory.summarised
            summary.summarised.append({"snapshot": read.directory.snapshot.name, "where": "source",
                                       "records": last - first + 1, "first": first, "last": last})
        merge = None
        if kind in KAFKA_KINDS and read.first_offset is not None and end is not None and read.first_offset <= end:
            merge = _Merge(summary, _held(tables, version, read.first_offset - 1, end), end, read, held_before,
                           keep, verify=not log_done)
        planned = merge is not None and (merge.backfills() if backfills is None else backfills)
        sequencer = _Sequencer(summary, 0 if end is None else end + 1, strict, merge, limits, now_ms)
        progress = _SourceProgress(meter, kind, read.files)
        if merge is None and read.segments and pool.wanted(summary.bytes):
            batches = sequencer.batches(pool.parts(read.head, read.segments, limits, batch_records), progress,
                                        schema, batch_records)
        else:
            batches = (events_to_arrow(chunk, schema) for chunk in
                       _chunks(sequencer.events(read.items, progress, planned), batch_records))
        if log_done:  # the log commit is there (a run that died before the rejections', or a concurrent
            for _ in batches:  # ingest of the same bytes): only the rejections may still be owed
                pass
            summary.records, summary.first_offset, summary.last_offset = 0, None, None
            summary.by_type.clear()
            summary.backfilled, summary.replaced = Span(), []
            break
        reader = pa.RecordBatchReader.from_batches(schema, sequencer.kept(batches))
        try:
            if planned:
                tables.backfill("metadata_log", reader, schema, txn, version, merge.replaced_rows(),
                                {"below": end + 1, "source": str(path)})
            else:
                tables.append("metadata_log", reader, schema, txn, version)
            break
        except Conflict:
            continue  # another ingest committed first: plan again on the new log end
        except Exception:
            if isinstance(sequencer.failure, _Replan):
                keep |= sequencer.failure.keep
                backfills = sequencer.failure.backfills
                continue
            if sequencer.failure is not None:
                raise sequencer.failure from None
            raise
    else:
        raise Conflict(f"{path}: other writers committed to metadata_log during each of {INGEST_ATTEMPTS} attempts "
                       "to ingest this source; nothing of it was committed, run the ingest again")
    if quorum_files:
        tables.append("quorum_files", pa.Table.from_pylist(quorum_files, table_arrow_schema("quorum_files")),
                      table_arrow_schema("quorum_files"), txn)
    # Committed even when empty: the transaction id is what marks the source as fully ingested.
    tables.append("rejected", rejections_to_arrow(sequencer.rejections + quorum_rejections),
                  table_arrow_schema("rejected"), txn)
    tables.compact("metadata_log", "offset", compact_files)  # a continuous ingest's commits, a small file each, kept few
    progress.finish(summary.records)
    summary.seconds = time.monotonic() - started
    return summary


def sources_exist(sources: Iterable[str]) -> None:
    """FileNotFoundError for the first source that does not exist: asked of every source before any is read,
    so that a mistyped path is said before the sources given before it are committed."""
    for source in sources:
        if not Path(source).exists():
            raise FileNotFoundError(f"{source}: no such file or directory")


def ingest(tables: Tables, sources: Iterable[str], *, strict: bool = False, full_history: bool = False,
           from_snapshot: bool = False, batch_records: int | None = None,
           meter: Callable[[str], Meter] | None = None,
           on_source: Callable[[SourceSummary], None] | None = None,
           limits: Limits | None = None, workers: int | None = None,
           workers_min_bytes: int | None = None, compact_files: int | None = None,
           decoders: pieces.Decoders | None = None) -> list[SourceSummary]:
    """Ingest each source in the order given (offsets continue across them); ``meter(label)`` makes each
    source's progress meter; the rest as ``ingest_source``."""
    sources = [os.fspath(source) for source in sources]
    sources_exist(sources)
    summaries = []
    for source in sources:
        summary = ingest_source(tables, source, strict=strict, full_history=full_history,
                                from_snapshot=from_snapshot, batch_records=batch_records,
                                meter=None if meter is None else meter(source), limits=limits,
                                workers=workers, workers_min_bytes=workers_min_bytes, compact_files=compact_files,
                                decoders=decoders)
        summaries.append(summary)
        if on_source is not None:
            on_source(summary)
    return summaries
