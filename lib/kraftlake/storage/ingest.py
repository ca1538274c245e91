"""Ingest: Kafka partition directories, segments, snapshots, JSON lines and Avro into ``metadata_log``.

Each source is one Delta commit to ``metadata_log`` and one to ``rejected``, both tagged with a Delta
application transaction named after the source's content, so ingesting the same bytes again adds
nothing, and a crash between the two commits is repaired by simply running the ingest again.
Offsets continue the log: records read from a Kafka log keep their own offsets (those at or below the
log's end are already there and are skipped), hand-written events get the next ones.

Several ingests may run on one warehouse at once: each plans its offsets on the log's end at one Delta
version and commits on top of exactly that version; if another ingest committed first, it reads the
source again from the new end (``Conflict``). Both succeed, and no offset is given twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

import pyarrow as pa

from kraftlake import codec
from kraftlake.codec import events
from kraftlake.codec.logdir import SNAPSHOT_NAME
from kraftlake.metadata.config import defaults
from kraftlake.metadata.progress import Meter
from kraftlake.metadata.rejections import RAW_LIMIT, Item, Rejection
from kraftlake.metadata.tables import metadata_log_schema, table_arrow_schema
from kraftlake.storage.deltars import Conflict
from kraftlake.storage.tables import events_to_arrow, rejections_to_arrow

KAFKA_KINDS = ("partition-dir", "segment", "snapshot")
INGEST_ATTEMPTS = 20  # plans of one source, each lost to another ingest's commit, before giving up


class Tables(Protocol):
    """What ingest needs of a warehouse (``kraftlake.storage.Warehouse`` provides it)."""

    def append(self, name: str, data: pa.RecordBatchReader | pa.Table, schema: pa.Schema,
               txn: tuple[str, int] | None = None, read_version: int | None = None) -> bool: ...

    def create_if_missing(self, name: str, schema: pa.Schema) -> None: ...

    def txn_version(self, name: str, app_id: str) -> int | None: ...

    def snapshot_max(self, name: str, column: str) -> tuple[int | None, object]: ...


class StrictModeError(RuntimeError):
    def __init__(self, rejection: Rejection):
        super().__init__(f"strict mode: {rejection.describe()}")
        self.rejection = rejection


@dataclass
class SourceSummary:
    source: str
    kind: str
    status: str = "ingested"  # ingested | already ingested | failed
    records: int = 0
    by_type: Counter = field(default_factory=Counter)
    first_offset: int | None = None
    last_offset: int | None = None
    bytes: int = 0
    rejected: int = 0
    skipped_existing: int = 0  # Kafka records at or below the log end when the ingest began
    seconds: float = 0.0
    quorum_state: dict | None = None

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["by_type"] = dict(sorted(self.by_type.items()))
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
    with open(path, "rb") as handle:
        head = handle.read(64)
    if head.startswith(b"Obj\x01"):
        return "avro"
    if head.lstrip()[:1] == b"{":
        return "json-lines"
    if len(head) >= 17 and head[16] == 2:
        return "segment"
    return "unknown"


def fingerprint(path: Path, kind: str, full_history: bool) -> tuple[str, int]:
    """(sha-256 of what will be read, bytes) — the identity that makes re-ingesting a no-op."""
    digest = hashlib.sha256(f"{kind}:{full_history}".encode())
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    total = 0
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                total += len(chunk)
    return digest.hexdigest(), total


def read_source(path: Path, kind: str, full_history: bool) -> Iterator[Item]:
    if kind == "partition-dir":
        return codec.decode_partition_dir(path, full_history)
    if kind == "segment":
        return codec.decode_file(path)
    if kind == "snapshot":
        return codec.decode_snapshot(path)
    if kind == "json-lines":
        return events.read_json_lines(path)
    if kind == "avro":
        return events.read_avro(path)
    return iter([Rejection(str(path), 0, None, "INVALID_RECORD",
                           "not a Kafka log segment, snapshot, partition directory, JSON lines or Avro file")])


class _SourceProgress:
    """Feeds a source's ``Meter``: bytes of a Kafka log read so far (the files before the current one plus
    the batch position in it), records for JSON lines and Avro, whose size says little about the rest."""

    def __init__(self, meter: Meter | None, path: Path, kind: str, full_history: bool):
        self.meter = meter
        self.starts: dict[str, int] = {}
        if meter is None or kind not in KAFKA_KINDS:
            return
        files = [path] if kind != "partition-dir" else _partition_dir_files(path, full_history)
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


def _partition_dir_files(path: Path, full_history: bool) -> list[Path]:
    """The files a partition directory's ingest reads: every segment, and the newest snapshot first."""
    segments, snapshots = codec.list_partition_dir(path)
    return ([] if full_history or not snapshots else [Path(snapshots[-1])]) + [Path(s) for s in segments]


class _Sequencer:
    """Gives events their offsets and sorts out rejections, in one pass over a source's items."""

    def __init__(self, summary: SourceSummary, next_offset: int, strict: bool):
        self.summary = summary
        self.next_offset = next_offset
        self.strict = strict
        self.rejections: list[Rejection] = []
        self.from_kafka_log = summary.kind in KAFKA_KINDS
        self.failure: Exception | None = None

    def reject(self, rejection: Rejection) -> None:
        if self.strict:
            raise StrictModeError(rejection)
        self.rejections.append(rejection)
        self.summary.rejected += 1

    def events(self, items: Iterable[Item], progress: _SourceProgress) -> Iterator[dict]:
        summary = self.summary
        for item in items:
            if isinstance(item, Rejection):
                self.reject(item)
                continue
            offset = item["offset"]
            if offset is None:
                item["offset"] = offset = self.next_offset
            elif offset < self.next_offset:
                if self.from_kafka_log:
                    summary.skipped_existing += 1
                else:
                    self.reject(Rejection(item.get("source", summary.source), item.get("position"), offset,
                                          "INVALID_RECORD",
                                          f"offset {offset} is below the log end offset {self.next_offset}",
                                          type=item["type"], version=item["version"], unit="line"))
                continue
            self.next_offset = offset + 1
            summary.records += 1
            summary.by_type[item["type"]] += 1
            if summary.first_offset is None:
                summary.first_offset = offset
            summary.last_offset = offset
            progress.tick(summary.records, item)
            yield item

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


def read_quorum_files(path: Path) -> tuple[list[dict], list[Rejection]]:
    """The partition directory's ``quorum-state`` and ``leader-epoch-checkpoint``, and its log directory's
    ``meta.properties`` (where Kafka keeps the cluster id), when present, as ``quorum_files`` rows; a file
    that is not what its name says is a rejection (the log still goes in)."""
    rows, rejections = [], []
    for file in (path / "quorum-state", path / "leader-epoch-checkpoint", path.parent / "meta.properties"):
        name = file.name
        if not file.is_file():
            continue
        content = file.read_bytes()
        row = {"file": str(file), "kind": name, "leader_id": None, "leader_epoch": None, "voted_id": None,
               "current_voters": None, "epochs": None, "content": content.decode("utf-8", "replace")}
        try:
            if name == "quorum-state":
                state = codec.read_quorum_state(file)
                voters = state.get("currentVoters")
                row.update(leader_id=state.get("leaderId"), leader_epoch=state.get("leaderEpoch"),
                           voted_id=state.get("votedId"),
                           current_voters=None if voters is None else [v["voterId"] for v in voters])
            elif name == "leader-epoch-checkpoint":
                row["epochs"] = [{"epoch": e, "start_offset": o} for e, o in codec.read_leader_epoch_checkpoint(file)]
            else:
                codec.read_meta_properties(file)
        except (ValueError, KeyError, TypeError) as exc:
            rejections.append(Rejection(str(file), None, None, "CORRUPT_MESSAGE", f"{name}: {exc}",
                                        content[:RAW_LIMIT], len(content), unit="line"))
            continue
        rows.append(row)
    return rows, rejections


def ingest_source(tables: Tables, source: str, *, strict: bool = False, full_history: bool = False,
                  batch_records: int | None = None, meter: Meter | None = None) -> SourceSummary:
    """Ingest one source; ``batch_records`` events per Delta commit (``kraftlake.ingest.batch.records``);
    progress goes to ``meter`` (its unit and total are set here, from the source)."""
    batch_records = batch_records or int(defaults()["kraftlake.ingest.batch.records"])
    path = Path(source).resolve()
    started = time.monotonic()
    if not path.exists():
        raise FileNotFoundError(f"{source}: no such file or directory")
    kind = detect_kind(path)
    summary = SourceSummary(str(path), kind)
    digest, summary.bytes = fingerprint(path, kind, full_history)
    txn = (f"kraftlake-ingest-{digest}", 1)
    quorum_files, quorum_rejections = read_quorum_files(path) if kind == "partition-dir" else ([], [])
    summary.quorum_state = next((json.loads(f["content"]) for f in quorum_files if f["kind"] == "quorum-state"), None)
    if strict and quorum_rejections:
        raise StrictModeError(quorum_rejections[0])
    schema = metadata_log_schema()
    tables.create_if_missing("metadata_log", schema)
    for _ in range(INGEST_ATTEMPTS):
        log_done = tables.txn_version("metadata_log", txn[0]) is not None
        if log_done and tables.txn_version("rejected", txn[0]) is not None:
            summary.status = "already ingested"
            return summary
        version, log_end = tables.snapshot_max("metadata_log", "offset")
        summary = SourceSummary(str(path), kind, bytes=summary.bytes, quorum_state=summary.quorum_state)
        sequencer = _Sequencer(summary, 0 if log_end is None else int(log_end) + 1, strict)
        progress = _SourceProgress(meter, path, kind, full_history)
        batches = (events_to_arrow(chunk, schema) for chunk in
                   _chunks(sequencer.events(read_source(path, kind, full_history), progress), batch_records))
        if log_done:  # the log commit is there (a run that died before the rejections', or a concurrent
            for _ in batches:  # ingest of the same bytes): only the rejections may still be owed
                pass
            summary.records, summary.first_offset, summary.last_offset = 0, None, None
            summary.by_type.clear()
            break
        try:
            tables.append("metadata_log", pa.RecordBatchReader.from_batches(schema, sequencer.kept(batches)), schema,
                          txn, version)
            break
        except Conflict:
            continue  # another ingest committed first: plan again on the new log end
        except Exception:
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
    progress.finish(summary.records)
    summary.seconds = time.monotonic() - started
    return summary


def ingest(tables: Tables, sources: Iterable[str], *, strict: bool = False, full_history: bool = False,
           batch_records: int | None = None, meter: Callable[[str], Meter] | None = None,
           on_source: Callable[[SourceSummary], None] | None = None) -> list[SourceSummary]:
    """Ingest each source in the order given (offsets continue across them); ``meter(label)`` makes each
    source's progress meter."""
    summaries = []
    for source in sources:
        summary = ingest_source(tables, os.fspath(source), strict=strict, full_history=full_history,
                                batch_records=batch_records, meter=None if meter is None else meter(os.fspath(source)))
        summaries.append(summary)
        if on_source is not None:
            on_source(summary)
    return summaries
