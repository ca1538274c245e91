"""Reading a ``__cluster_metadata`` partition: segments, snapshots, and the directory as a whole.

Everything yields a stream of events (ADR 0001) and ``Rejection`` s in file order; nothing is dropped
without a rejection saying where it was (file, byte position, offset) and why.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kraftlake.codec import batches, resync
from kraftlake.codec.batches import BadRecord, BatchError, RecordBatch
from kraftlake.codec.bounds import (INT32, INT64, SEGMENT_OFFSET_SPAN, TIMESTAMP_MS, Limits, default_limits,
                                    named_topic_problem, shown)
from kraftlake.codec.files import kind, open_regular, read_regular
from kraftlake.codec.messages import MessageError, Reader, decode_message
from kraftlake.metadata.rejections import RAW_LIMIT, Item, Rejection
from kraftlake.metadata.schemas import UnknownVersionError, registry

SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
QUORUM_FILES = ("quorum-state", "leader-epoch-checkpoint")
METADATA_FRAME_VERSION = 1  # MetadataRecordSerde's frame version


class CorruptLogError(ValueError):
    def __init__(self, rejection: Rejection):
        super().__init__(rejection.describe())
        self.rejection = rejection


def _damage(source: str, buf: bytes | memoryview, start: int, end: int, reason: str,
            offset: int | None = None, error: str = "CORRUPT_MESSAGE") -> Rejection:
    return Rejection(source, start, offset, error, reason, bytes(buf[start:min(end, start + RAW_LIMIT)]),
                     end - start)


def _raw_batches(buf: bytes | memoryview, source: str, start: int, limits: Limits) -> Iterator[RecordBatch | Rejection]:
    """Batches in file order from byte ``start``; damaged stretches become rejections and scanning resumes
    after them (``resync``: in time linear in the buffer's size, whatever it holds)."""
    with resync.Scanner(buf, limits) as scanner:
        pos = start
        size = len(buf)
        while pos < size:
            if size - pos < batches.HEADER_SIZE:
                offset = struct.unpack_from(">q", buf, pos)[0] if size - pos >= 8 else None
                yield _damage(source, buf, pos, size,
                              f"truncated: {size - pos} bytes at the end, too few for a batch header "
                              "(normal for the active segment of a running node)", offset)
                return
            base_offset, length = struct.unpack_from(">qi", buf, pos)
            magic = buf[pos + 16]
            end = pos + batches.LOG_OVERHEAD + length
            plausible = magic == 2 and batches.HEADER_SIZE - batches.LOG_OVERHEAD <= length <= limits.batch_bytes
            if plausible and end <= size:
                crc = scanner.crc(pos + batches.CRC_START, end)
                try:
                    batch = batches.parse_batch(buf, pos, limits, crc)
                except BatchError as exc:
                    if crc == struct.unpack_from(">I", buf, pos + batches.CRC_AT)[0] or end == size \
                            or scanner.intact(end):  # the length held: the damage is inside this batch only
                        yield _damage(source, buf, pos, end, str(exc), base_offset, exc.error)
                        pos = end
                        continue
                    reason = str(exc)
                else:
                    yield batch
                    pos = end
                    continue
            elif plausible:
                reason = (f"truncated batch: its header says {batches.LOG_OVERHEAD + length} bytes, "
                          f"the file has {size - pos} left (normal for the active segment of a running node)")
            else:
                reason = f"no record batch here (magic byte {magic}, batch length {length})"
            found = scanner.next_intact(pos + 1)
            stop = size if found is None else found
            yield _damage(source, buf, pos, stop, reason, base_offset if plausible else None)
            pos = stop


@dataclass(frozen=True)
class BatchHeader:
    """Where a whole batch is and what it holds, from its header alone (nothing decoded or verified)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int


def batch_headers(buf: bytes | memoryview, start: int = 0, limit: int | None = None,
                  limits: Limits | None = None) -> tuple[list[BatchHeader], str]:
    """The headers of the whole batches from byte ``start``, and why the walk stopped there: ``end`` (the
    buffer ends on a batch boundary), ``partial`` (a batch is still being written: its header or its
    bytes are not all there yet) or ``damage`` (no plausible batch header: corruption).

    Cheap (61 bytes per batch), so a tail of a live segment can find its place without decoding. At most
    ``limit`` headers (the walk then stops with ``end``)."""
    headers, pos, size = [], start, len(buf)
    max_bytes = (limits or default_limits()).batch_bytes
    while pos < size and (limit is None or len(headers) < limit):
        if size - pos < batches.HEADER_SIZE:
            return headers, "partial"
        base_offset, length, epoch, magic, crc = struct.unpack_from(">qiibI", buf, pos)
        _attributes, last_delta = struct.unpack_from(">hi", buf, pos + batches.CRC_START)
        if magic != 2 or not batches.HEADER_SIZE - batches.LOG_OVERHEAD <= length <= max_bytes:
            return headers, "damage"
        end = pos + batches.LOG_OVERHEAD + length
        if end > size:
            return headers, "partial"
        headers.append(BatchHeader(pos, end - pos, base_offset, base_offset + last_delta, epoch, crc))
        pos = end
    return headers, "end"


def intact_end(buf: bytes | memoryview, start: int, limits: Limits | None = None) -> int:
    """Where the last intact batch (header plausible, CRC right) at or after byte ``start`` ends; ``start``
    when there is none. In a segment still being written, what follows it may be a batch whose bytes are
    not all there yet, after damage too: a reader of it that decodes past this point rejects that batch
    as truncated and loses it once it is complete (Kafka's own recovery truncates such a tail)."""
    end = start
    with resync.Scanner(buf, limits or default_limits()) as scanner:
        while (found := scanner.next_intact(end)) is not None:
            end = found + batches.LOG_OVERHEAD + struct.unpack_from(">i", buf, found + 8)[0]
    return end


def _checked_batches(buf: bytes | memoryview, source: str, first_offset: int | None, start: int,
                     limits: Limits, segment_base: int | None) -> Iterator[RecordBatch | Rejection]:
    """Batches whose offsets and epochs continue the log.

    baseOffset and partitionLeaderEpoch are outside the CRC, so a flipped bit there passes the CRC. A
    batch that goes backwards is rejected; one that jumps ahead while the next batch continues from where
    this one should have started has a corrupted header and is rejected too (one batch of look-ahead).
    ``first_offset`` (the first batch's base offset: a segment's, from its file name) lets the first batch
    be checked too. A segment's batches lie within ``segment_base`` + 0..2^31-1: Kafka keeps a segment's
    offsets as 4-byte deltas from its base offset (its index entries), so a batch beyond cannot be its.
    """
    last_offset: int | None = None if first_offset is None else first_offset - 1
    last_epoch: int | None = None
    pending: RecordBatch | None = None

    def verdict(batch: RecordBatch, nxt: RecordBatch | None) -> Rejection | None:
        expected = None if last_offset is None else last_offset + 1
        raw_end = batch.position + batch.size
        last = batch.base_offset + batch.last_offset_delta
        if segment_base is not None and not segment_base <= batch.base_offset <= last \
                <= segment_base + SEGMENT_OFFSET_SPAN:
            return _damage(source, buf, batch.position, raw_end,
                           f"offsets {batch.base_offset}..{last} lie outside those of a segment starting at "
                           f"{segment_base} ({segment_base}..{segment_base + SEGMENT_OFFSET_SPAN})", batch.base_offset)
        if expected is not None and batch.base_offset < expected:
            return _damage(source, buf, batch.position, raw_end,
                           f"baseOffset {batch.base_offset} goes backwards (the log is at {expected})",
                           batch.base_offset)
        if expected is not None and batch.base_offset != expected and nxt is not None \
                and nxt.base_offset == expected + batch.last_offset_delta + 1:
            return _damage(source, buf, batch.position, raw_end,
                           f"baseOffset {batch.base_offset} does not continue the log at {expected}, "
                           "and the next batch continues from there: the header is corrupt", batch.base_offset)
        if last_epoch is not None and batch.leader_epoch < last_epoch:
            return _damage(source, buf, batch.position, raw_end,
                           f"partitionLeaderEpoch {batch.leader_epoch} goes backwards (log at {last_epoch})",
                           batch.base_offset)
        if last_epoch is not None and nxt is not None and nxt.leader_epoch < batch.leader_epoch \
                and nxt.leader_epoch >= last_epoch:
            return _damage(source, buf, batch.position, raw_end,
                           f"partitionLeaderEpoch {batch.leader_epoch} is not followed by the next batch "
                           f"({nxt.leader_epoch}): the header is corrupt", batch.base_offset)
        return None

    def settle(batch: RecordBatch, nxt: RecordBatch | None) -> Item:
        nonlocal last_offset, last_epoch
        rejection = verdict(batch, nxt)
        if rejection is not None:
            return rejection
        last_offset = batch.base_offset + batch.last_offset_delta
        last_epoch = batch.leader_epoch
        return batch

    for item in _raw_batches(buf, source, start, limits):
        if isinstance(item, Rejection):
            if pending is not None:
                yield settle(pending, None)
                pending = None
            yield item
            continue
        if pending is not None:
            yield settle(pending, item)
        pending = item
    if pending is not None:
        yield settle(pending, None)


def _decode_value(batch: RecordBatch, record: batches.Record) -> tuple[str, int, dict]:
    """(type, version, data) of one record; raises ``MessageError``/``UnknownVersionError``."""
    schemas = registry()
    if batch.is_control:
        if record.key is None or len(record.key) < 4:
            raise MessageError("control record without a 4-byte key")
        _key_version, control_type = struct.unpack_from(">hh", record.key)
        spec = schemas.control_by_type.get(control_type)
        if spec is None:
            raise LookupError(f"unknown control record type {control_type}")
        value = record.value or b""
        # Control records store their own version in a leading Version field.
        version = struct.unpack_from(">h", value)[0] if len(value) >= 2 else 0
        if version not in spec.valid_versions:
            version = 0
        return spec.name, version, decode_message(spec, version, value)
    value = record.value
    if value is None:
        raise MessageError("metadata record without a value")
    if len(value) > 2 and value[0] == METADATA_FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
        api_key, version, start = value[1], value[2], 3  # the frame's three varints, one byte each as a rule
    else:
        reader = Reader(value)
        frame = reader.uvarint()
        if frame != METADATA_FRAME_VERSION:
            raise MessageError(f"unsupported metadata record frame version {frame}")
        api_key, version, start = reader.uvarint(), reader.uvarint(), reader.pos
    spec = schemas.metadata_by_api_key.get(api_key)
    if spec is None:
        raise LookupError(f"unknown metadata record api key {api_key}")
    # positions in a message's errors count from its own first byte
    return spec.name, version, decode_message(spec, version, value[start:])


def decode_buffer(buf: bytes | memoryview, source: str, first_offset: int | None = None,
                  start: int = 0, limits: Limits | None = None, segment_base: int | None = None) -> Iterator[Item]:
    """Events and rejections of a buffer holding record batches (a segment or a snapshot), from byte
    ``start`` (a batch boundary; ``first_offset`` is then that batch's base offset); ``segment_base``: the
    base offset of the segment the buffer is (its file name)."""
    for item in _checked_batches(buf, source, first_offset, start, limits or default_limits(), segment_base):
        if isinstance(item, Rejection):
            yield item
        else:
            yield from batch_items(item, source)


def batch_items(batch: RecordBatch, source: str) -> Iterator[Item]:
    """The events and rejections of one batch the log's order accepted: what it holds depends on its own
    bytes only, so batches can be decoded apart (``storage.pieces``: in other processes) once a single pass
    over the file has checked their order."""
    previous = batch.base_offset - 1
    for record in batches.records(batch):
        if isinstance(record, BadRecord):
            yield Rejection(source, batch.position, None, "CORRUPT_MESSAGE",
                            f"record at byte {record.position} of the batch's records: {record.reason}",
                            record.raw, record.raw_length)
            break
        misplaced = _misplaced(batch, record, previous)
        if misplaced is not None:
            yield _record_rejection(source, batch, record, "CORRUPT_MESSAGE", misplaced)
            continue
        previous = record.offset
        try:
            type_, version, data = _decode_value(batch, record)
        except UnknownVersionError as exc:
            yield _record_rejection(source, batch, record, "UNSUPPORTED_VERSION", str(exc))
            continue
        except LookupError as exc:
            yield _record_rejection(source, batch, record, "INVALID_RECORD", str(exc))
            continue
        except (ValueError, struct.error) as exc:  # MessageError among them
            yield _record_rejection(source, batch, record, "INVALID_RECORD", f"fields do not parse: {exc}")
            continue
        problem = named_topic_problem(type_, data)
        if problem is not None:
            yield _record_rejection(source, batch, record, "INVALID_TOPIC_EXCEPTION", problem)
            continue
        yield {"offset": record.offset, "leader_epoch": batch.leader_epoch, "timestamp": record.timestamp,
               "type": type_, "version": version, "data": data, "source": source,
               "position": batch.position}


def _misplaced(batch: RecordBatch, record: batches.Record, previous: int) -> str | None:
    """Why ``record``'s offset or timestamp (a base plus a delta, each from the batch) cannot be where it
    says, if it cannot: only a damaged or crafted batch gives one. A batch's records have increasing
    offsets up to its lastOffsetDelta (a later batch would hold the same offsets otherwise), each one that
    ``metadata_log`` can store."""
    if not previous < record.offset <= batch.base_offset + batch.last_offset_delta:
        return (f"offset {record.offset} does not follow the batch's previous record ({previous}) within its "
                f"lastOffsetDelta ({batch.last_offset_delta})")
    if not 0 <= record.offset <= INT64[1]:
        return f"offset {record.offset} is outside Kafka's offsets (0..{INT64[1]})"
    if not TIMESTAMP_MS[0] <= record.timestamp <= TIMESTAMP_MS[1]:
        return (f"timestamp {record.timestamp} is outside the milliseconds the log can hold ({TIMESTAMP_MS[0]}.."
                f"{TIMESTAMP_MS[1]}: from the epoch on)")
    return None


def _record_rejection(source: str, batch: RecordBatch, record: batches.Record, error: str,
                      reason: str) -> Rejection:
    raw = record.value or b""
    offset = record.offset if 0 <= record.offset <= INT64[1] else None
    return Rejection(source, batch.position, offset, error, reason, raw[:RAW_LIMIT], len(raw))


class MappedFile:
    """A read-only view of a regular file (``files.open_regular``); empty files cannot be mmapped, hence
    the special case."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open_regular(path)
        size = os.fstat(self.file.fileno()).st_size
        self.buf: bytes | mmap.mmap = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self.file.close()


def decode_file(path: str | os.PathLike, min_offset: int | None = None,
                limits: Limits | None = None) -> Iterator[Item]:
    """A segment (``.log``) or a snapshot (``.checkpoint``), from its first byte.

    ``min_offset`` skips records below it (a segment's records already covered by a snapshot).
    """
    for item in file_batches(path, limits):
        if isinstance(item, Rejection):
            yield item
            continue
        for event in batch_items(item, str(path)):
            if min_offset is not None and isinstance(event, dict) and event["offset"] < min_offset:
                continue
            yield event


def file_batches(path: str | os.PathLike, limits: Limits | None = None) -> Iterator[RecordBatch | Rejection]:
    """The batches of a segment or a snapshot that its order accepts (verified, checked against the ones
    before and after), and rejections of the rest, in file order: ``decode_file`` before the records."""
    path = Path(path)
    segment = SEGMENT_NAME.match(path.name)
    base = int(segment.group(1)) if segment else None
    # a segment starts at the offset in its name; a snapshot's batches count from 0
    first_offset = base if segment else 0 if snapshot_end_offset(path) else None
    mapped = MappedFile(path)
    try:
        yield from _checked_batches(mapped.buf, str(path), first_offset, 0, limits or default_limits(), base)
    finally:
        mapped.close()


def snapshot_end_offset(path: str | os.PathLike) -> tuple[int, int] | None:
    """(endOffset, epoch) from a snapshot file name, or None when it is not one."""
    match = SNAPSHOT_NAME.match(Path(path).name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def decode_snapshot(path: str | os.PathLike, limits: Limits | None = None) -> Iterator[Item]:
    """A snapshot's records, placed just before its end offset.

    Records in a snapshot file carry offsets counted from 0 inside the file; the log gives them no
    offset of their own. They stand for the state at ``endOffset - 1``, so they get the offsets just
    below ``endOffset``, in file order: "the image at offset X" keeps its meaning, and a read of the
    snapshot and then the segment records from ``endOffset`` keeps the offsets unique and increasing.
    Those offsets are also the segment records' the snapshot summarises: a warehouse holds one or the
    other at an offset, never both (``storage.ingest``, ADR 0010).
    """
    named = snapshot_end_offset(path)
    items = list(decode_file(path, limits=limits))
    events = [i for i in items if isinstance(i, dict)]
    if named is not None:
        end_offset = named[0]
        first = end_offset - len(events)
        if first < 0:
            raise ValueError(f"{path}: {len(events)} records do not fit below end offset {end_offset}")
        for index, event in enumerate(events):
            event["offset"] = first + index
    return iter(items)


def _named_like_the_log(root: Path) -> list[os.DirEntry]:
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a partition directory")
    with os.scandir(root) as entries:
        return [e for e in entries if SEGMENT_NAME.match(e.name) or SNAPSHOT_NAME.match(e.name)]


def list_partition_dir(path: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """(segments, snapshots) of a partition directory, each in offset order: the regular files named so
    (``skipped_entries`` reports the others)."""
    regular = [Path(e.path) for e in _named_like_the_log(Path(path)) if e.is_file(follow_symlinks=False)]
    segments = sorted((p for p in regular if SEGMENT_NAME.match(p.name)), key=lambda p: p.name)
    snapshots = sorted((p for p in regular if SNAPSHOT_NAME.match(p.name)), key=lambda p: p.name)
    return segments, snapshots


def skipped_entries(path: str | os.PathLike) -> list[Rejection]:
    """A rejection for each entry named like a segment or a snapshot that is not a regular file (a link,
    a FIFO, a directory...): not read, see ``files``."""
    return [Rejection(e.path, None, None, "KAFKA_STORAGE_ERROR",
                      f"{kind(e.stat(follow_symlinks=False).st_mode)} named like a log file: not read (a log "
                      "directory's files are regular files)")
            for e in sorted(_named_like_the_log(Path(path)), key=lambda e: e.name) if not e.is_file(follow_symlinks=False)]


# Where a read of a partition directory starts (ingest's default, --from-snapshot, --full-history; ADR 0010).
HISTORY = "history"  # the whole log when the segments hold it, else the snapshot that bridges to them
FROM_SNAPSHOT = "from-snapshot"  # Kafka's loader: the newest snapshot, then the records after it
FULL_HISTORY = "full-history"  # every segment from its first record, snapshots ignored
STARTS = (HISTORY, FROM_SNAPSHOT, FULL_HISTORY)


@dataclass(frozen=True)
class DirectoryPlan:
    """What a read of a partition directory takes (at most one snapshot, then the segment records from
    ``segment_start``) and what of the log it leaves out, so that a reader can say so."""

    snapshot: Path | None
    segments: tuple[Path, ...]
    log_start: int | None  # the first segment's base offset; None without segments
    segment_start: int | None  # segment records below it are not read (the snapshot stands for them)
    held_before: bool = False  # the reader holds the log below ``log_start`` already

    @property
    def first_offset(self) -> int | None:
        """The lowest offset a read of this plan can yield a segment record at (a snapshot's records lie
        below its end offset: see ``decode_snapshot``)."""
        return self.segment_start if self.segment_start is not None else self.log_start

    @property
    def summarised(self) -> tuple[int, int] | None:
        """(first, last) offsets of the segment records not read because the snapshot stands for them."""
        if self.snapshot is None or self.log_start is None:
            return None
        end = snapshot_end_offset(self.snapshot)[0]
        return (self.log_start, end - 1) if end > self.log_start else None

    @property
    def missing(self) -> tuple[int, int] | None:
        """(first, last) offsets of the log that are neither read nor summarised by the snapshot read:
        deleted from the directory (Kafka's retention) with no snapshot to stand for them."""
        if self.held_before or self.log_start is None or \
                self.segment_start is not None and self.segment_start > self.log_start:
            return None
        covered = snapshot_end_offset(self.snapshot)[0] if self.snapshot is not None else 0
        return (covered, self.log_start - 1) if self.log_start > covered else None


def plan_partition_dir(path: str | os.PathLike, start: str = FROM_SNAPSHOT,
                       held_before: bool = False) -> DirectoryPlan:
    """Which snapshot and segment records a read of the directory takes (``start``: one of ``STARTS``).

    ``held_before``: the reader already holds the log up to the first segment's base offset, so its
    segments continue what it has and no snapshot is needed to reach them (Kafka's loader, too, reads
    a snapshot only when it is behind the log's start). Otherwise ``HISTORY`` reads every segment when
    they start at offset 0, else the snapshot that bridges the gap: the one with the smallest end offset
    at or above the first segment's base offset (the most of the log left as records), then the records
    from its end offset. ``FROM_SNAPSHOT`` takes the newest snapshot instead; ``FULL_HISTORY`` none.
    """
    if start not in STARTS:
        raise ValueError(f"unknown start {start!r}; expected one of {', '.join(STARTS)}")
    segments, snapshots = list_partition_dir(path)
    if not segments and not snapshots:
        inner = Path(path) / "__cluster_metadata-0"
        hint = f"; the metadata log's partition directory is {inner}" if inner.is_dir() else ""
        raise FileNotFoundError(f"{path}: no log segments (*.log) or snapshots (*.checkpoint){hint}")
    log_start = int(SEGMENT_NAME.match(segments[0].name).group(1)) if segments else None
    snapshot = None
    if start == FROM_SNAPSHOT and snapshots and not held_before:
        snapshot = snapshots[-1]
    elif start == HISTORY and snapshots and not held_before:
        if log_start is None:
            snapshot = snapshots[-1]
        elif log_start > 0:
            snapshot = next((s for s in snapshots if snapshot_end_offset(s)[0] >= log_start), None)
    if snapshot is None:
        return DirectoryPlan(None, tuple(segments), log_start, None, held_before)
    end = snapshot_end_offset(snapshot)[0]
    # a segment whose successor starts at or below the snapshot's end holds no record the read takes
    kept = [s for s, after in zip(segments, segments[1:] + [None])
            if after is None or int(SEGMENT_NAME.match(after.name).group(1)) > end]
    return DirectoryPlan(snapshot, tuple(kept), log_start, end)


def decode_plan(plan: DirectoryPlan, limits: Limits | None = None) -> Iterator[Item]:
    """The plan's snapshot records (placed just below its end offset), then its segments' records."""
    if plan.snapshot is not None:
        yield from decode_snapshot(plan.snapshot, limits)
    for segment in plan.segments:
        yield from decode_file(segment, min_offset=plan.segment_start, limits=limits)


def decode_partition_dir(path: str | os.PathLike, start: str = FROM_SNAPSHOT,
                         limits: Limits | None = None) -> Iterator[Item]:
    """A partition directory's records in offset order; by default as Kafka's loader reads it (the newest
    snapshot, then the records after it), ``start`` says otherwise (``plan_partition_dir``). Entries named
    like log files that are not regular files come first, as rejections (``skipped_entries``)."""
    yield from skipped_entries(path)
    yield from decode_plan(plan_partition_dir(path, start), limits)


def read_partition_dir(path: str | os.PathLike, start: str = FROM_SNAPSHOT) -> Iterator[dict]:
    """Events only, for callers that must not go on past damage (tests, strict tools)."""
    for item in decode_partition_dir(path, start):
        if isinstance(item, Rejection):
            raise CorruptLogError(item)
        yield item


def read_leader_epoch_checkpoint(path: str | os.PathLike, content: bytes | None = None) -> list[tuple[int, int]]:
    """Kafka's ``leader-epoch-checkpoint`` (LeaderEpochCheckpointFile): a version line (0), a count line,
    then one "epoch start-offset" line per epoch; ValueError naming the line when it is not that.
    ``content``: the file's bytes, when the caller read them already."""
    lines = _text(path, content).splitlines()
    if len(lines) < 2 or lines[0].strip() != "0" or not lines[1].strip().isdigit():
        raise ValueError(f"{path}: line 1-2: not a leader-epoch-checkpoint (version 0, then a count)")
    count = int(lines[1])
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"{path}: line {number}: expected 'epoch start-offset', got {shown(line)}")
        epoch, start = int(parts[0]), int(parts[1])
        if not (INT32[0] <= epoch <= INT32[1] and INT64[0] <= start <= INT64[1]):
            raise ValueError(f"{path}: line {number}: epoch {shown(epoch)} is no int32 or offset {shown(start)} no int64")
        entries.append((epoch, start))
    if len(entries) != count:
        raise ValueError(f"{path}: line 2 announces {count} epochs, the file has {len(entries)}")
    return entries


def read_meta_properties(path: str | os.PathLike, content: bytes | None = None) -> dict[str, str]:
    """Kafka's ``meta.properties`` at the root of a log directory (``MetaProperties``): ``key=value`` lines,
    ``#`` comments; the cluster's id is there (``cluster.id``), never in the metadata log. ``content``: the
    file's bytes, when the caller read them already."""
    values = {}
    for number, line in enumerate(_text(path, content).splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: line {number}: expected key=value, got {shown(line)}")
        values[key.strip()] = value.strip()
    if "cluster.id" not in values:
        raise ValueError(f"{path}: no cluster.id")
    return values


def read_quorum_state(path: str | os.PathLike, content: bytes | None = None) -> dict:
    """Kafka's ``quorum-state`` file: QuorumStateData as JSON plus its ``data_version``. ``content``: the
    file's bytes, when the caller read them already."""
    text = _text(path, content)
    try:
        state = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: quorum-state is not JSON: {type(exc).__name__}: {shown(str(exc))}") from exc
    if not isinstance(state, dict) or "leaderEpoch" not in state:
        raise ValueError(f"{path}: not a quorum-state file (no leaderEpoch)")
    voters = state.get("currentVoters")
    ids = [state.get(k, -1) for k in ("leaderEpoch", "leaderId", "votedId")]
    if voters is not None:
        ids += [v.get("voterId") if isinstance(v, dict) else None for v in (voters if isinstance(voters, list) else [0])]
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not INT32[0] <= value <= INT32[1]:
            raise ValueError(f"{path}: quorum-state holds {shown(value)} where an int32 epoch or replica id goes")
    return state


def _text(path: str | os.PathLike, content: bytes | None) -> str:
    raw = read_regular(path) if content is None else content
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from exc
