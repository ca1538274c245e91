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

from kraftlake.codec import batches
from kraftlake.codec.batches import BadRecord, BatchError, RecordBatch
from kraftlake.codec.messages import MessageError, Reader, decode_message
from kraftlake.metadata.rejections import RAW_LIMIT, Item, Rejection
from kraftlake.metadata.schemas import UnknownVersionError, registry

SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
METADATA_FRAME_VERSION = 1  # MetadataRecordSerde's frame version


class CorruptLogError(ValueError):
    def __init__(self, rejection: Rejection):
        super().__init__(rejection.describe())
        self.rejection = rejection


def _damage(source: str, buf: bytes | memoryview, start: int, end: int, reason: str,
            offset: int | None = None, error: str = "CORRUPT_MESSAGE") -> Rejection:
    return Rejection(source, start, offset, error, reason, bytes(buf[start:min(end, start + RAW_LIMIT)]),
                     end - start)


def _batch_at(buf: bytes | memoryview, pos: int) -> RecordBatch | None:
    """The intact batch starting at ``pos``, if there is one (used to resynchronise after damage)."""
    if pos + batches.HEADER_SIZE > len(buf) or buf[pos + 16] != 2:
        return None
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    if length < batches.HEADER_SIZE - batches.LOG_OVERHEAD or pos + batches.LOG_OVERHEAD + length > len(buf):
        return None
    try:
        return batches.parse_batch(buf, pos)
    except BatchError:
        return None


def _next_intact_batch(buf: bytes | memoryview, start: int) -> RecordBatch | None:
    pos = start
    data = buf if isinstance(buf, (bytes, mmap.mmap)) else bytes(buf)
    while True:
        magic_at = data.find(b"\x02", pos + 16)
        if magic_at < 0:
            return None
        found = _batch_at(buf, magic_at - 16)
        if found is not None:
            return found
        pos = magic_at - 16 + 1


def _raw_batches(buf: bytes | memoryview, source: str, start: int = 0) -> Iterator[RecordBatch | Rejection]:
    """Batches in file order from byte ``start``; damaged stretches become rejections and scanning resumes
    after them."""
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
        plausible = magic == 2 and batches.HEADER_SIZE - batches.LOG_OVERHEAD <= length <= batches.MAX_BATCH_SIZE
        if plausible and end <= size:
            try:
                batch = batches.parse_batch(buf, pos)
            except BatchError as exc:
                after = _batch_at(buf, end) if end < size else None
                if after is not None or end == size:
                    # the length held: the damage is inside this batch only
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
        resync = _next_intact_batch(buf, pos + 1)
        stop = resync.position if resync is not None else size
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


def batch_headers(buf: bytes | memoryview, start: int = 0,
                  limit: int | None = None) -> tuple[list[BatchHeader], str]:
    """The headers of the whole batches from byte ``start``, and why the walk stopped there: ``end`` (the
    buffer ends on a batch boundary), ``partial`` (a batch is still being written: its header or its
    bytes are not all there yet) or ``damage`` (no plausible batch header: corruption).

    Cheap (61 bytes per batch), so a tail of a live segment can find its place without decoding. At most
    ``limit`` headers (the walk then stops with ``end``)."""
    headers, pos, size = [], start, len(buf)
    while pos < size and (limit is None or len(headers) < limit):
        if size - pos < batches.HEADER_SIZE:
            return headers, "partial"
        base_offset, length, epoch, magic, crc = struct.unpack_from(">qiibI", buf, pos)
        _attributes, last_delta = struct.unpack_from(">hi", buf, pos + batches.CRC_START)
        if magic != 2 or not batches.HEADER_SIZE - batches.LOG_OVERHEAD <= length <= batches.MAX_BATCH_SIZE:
            return headers, "damage"
        end = pos + batches.LOG_OVERHEAD + length
        if end > size:
            return headers, "partial"
        headers.append(BatchHeader(pos, end - pos, base_offset, base_offset + last_delta, epoch, crc))
        pos = end
    return headers, "end"


def _checked_batches(buf: bytes | memoryview, source: str, first_offset: int | None = None,
                     start: int = 0) -> Iterator[RecordBatch | Rejection]:
    """Batches whose offsets and epochs continue the log.

    baseOffset and partitionLeaderEpoch are outside the CRC, so a flipped bit there passes the CRC. A
    batch that goes backwards is rejected; one that jumps ahead while the next batch continues from where
    this one should have started has a corrupted header and is rejected too (one batch of look-ahead).
    ``first_offset`` (a segment's base offset, from its file name) lets the first batch be checked too.
    """
    last_offset: int | None = None if first_offset is None else first_offset - 1
    last_epoch: int | None = None
    pending: RecordBatch | None = None

    def verdict(batch: RecordBatch, nxt: RecordBatch | None) -> Rejection | None:
        expected = None if last_offset is None else last_offset + 1
        raw_end = batch.position + batch.size
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

    for item in _raw_batches(buf, source, start):
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
    if record.value is None:
        raise MessageError("metadata record without a value")
    reader = Reader(record.value)
    frame = reader.uvarint()
    if frame != METADATA_FRAME_VERSION:
        raise MessageError(f"unsupported metadata record frame version {frame}")
    api_key = reader.uvarint()
    version = reader.uvarint()
    spec = schemas.metadata_by_api_key.get(api_key)
    if spec is None:
        raise LookupError(f"unknown metadata record api key {api_key}")
    return spec.name, version, decode_message(spec, version, memoryview(record.value)[reader.pos:])


def decode_buffer(buf: bytes | memoryview, source: str, first_offset: int | None = None,
                  start: int = 0) -> Iterator[Item]:
    """Events and rejections of a buffer holding record batches (a segment or a snapshot), from byte
    ``start`` (a batch boundary; ``first_offset`` is then that batch's base offset)."""
    for item in _checked_batches(buf, source, first_offset, start):
        if isinstance(item, Rejection):
            yield item
            continue
        batch = item
        for record in batches.records(batch):
            if isinstance(record, BadRecord):
                yield Rejection(source, batch.position, None, "CORRUPT_MESSAGE",
                                f"record at byte {record.position} of the batch's records: {record.reason}",
                                record.raw[:RAW_LIMIT], len(record.raw))
                break
            try:
                type_, version, data = _decode_value(batch, record)
            except UnknownVersionError as exc:
                yield _record_rejection(source, batch, record, "UNSUPPORTED_VERSION", str(exc))
                continue
            except LookupError as exc:
                yield _record_rejection(source, batch, record, "INVALID_RECORD", str(exc))
                continue
            except (MessageError, struct.error) as exc:
                yield _record_rejection(source, batch, record, "INVALID_RECORD", f"fields do not parse: {exc}")
                continue
            yield {"offset": record.offset, "leader_epoch": batch.leader_epoch, "timestamp": record.timestamp,
                   "type": type_, "version": version, "data": data, "source": source,
                   "position": batch.position}


def _record_rejection(source: str, batch: RecordBatch, record: batches.Record, error: str,
                      reason: str) -> Rejection:
    raw = record.value or b""
    return Rejection(source, batch.position, record.offset, error, reason, raw[:RAW_LIMIT], len(raw))


class MappedFile:
    """A read-only view of a file; empty files cannot be mmapped, hence the special case."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "rb")
        size = os.fstat(self.file.fileno()).st_size
        self.buf: bytes | mmap.mmap = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self.file.close()


def decode_file(path: str | os.PathLike, min_offset: int | None = None) -> Iterator[Item]:
    """A segment (``.log``) or a snapshot (``.checkpoint``), from its first byte.

    ``min_offset`` skips records below it (a segment's records already covered by a snapshot).
    """
    path = Path(path)
    segment = SEGMENT_NAME.match(path.name)
    # a segment starts at the offset in its name; a snapshot's batches count from 0
    first_offset = int(segment.group(1)) if segment else 0 if snapshot_end_offset(path) else None
    mapped = MappedFile(path)
    try:
        for item in decode_buffer(mapped.buf, str(path), first_offset):
            if min_offset is not None and isinstance(item, dict) and item["offset"] < min_offset:
                continue
            yield item
    finally:
        mapped.close()


def snapshot_end_offset(path: str | os.PathLike) -> tuple[int, int] | None:
    """(endOffset, epoch) from a snapshot file name, or None when it is not one."""
    match = SNAPSHOT_NAME.match(Path(path).name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def decode_snapshot(path: str | os.PathLike) -> Iterator[Item]:
    """A snapshot's records, placed just before its end offset.

    Records in a snapshot file carry offsets counted from 0 inside the file; the log gives them no
    offset of their own. They stand for the state at ``endOffset - 1``, so they get the offsets just
    below ``endOffset``, in file order, which keeps the log's offsets unique and increasing.
    """
    named = snapshot_end_offset(path)
    items = list(decode_file(path))
    events = [i for i in items if isinstance(i, dict)]
    if named is not None:
        end_offset = named[0]
        first = end_offset - len(events)
        if first < 0:
            raise ValueError(f"{path}: {len(events)} records do not fit below end offset {end_offset}")
        for index, event in enumerate(events):
            event["offset"] = first + index
    return iter(items)


def list_partition_dir(path: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """(segments, snapshots) of a partition directory, each in offset order."""
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a partition directory")
    segments = sorted((p for p in root.iterdir() if SEGMENT_NAME.match(p.name)), key=lambda p: p.name)
    snapshots = sorted((p for p in root.iterdir() if SNAPSHOT_NAME.match(p.name)), key=lambda p: p.name)
    return segments, snapshots


def decode_partition_dir(path: str | os.PathLike, full_history: bool = False) -> Iterator[Item]:
    """The newest snapshot, then every segment's records after it, in offset order.

    With ``full_history`` the snapshots are ignored and every segment is read from its first record:
    the whole history, when the segments still reach back to offset 0.
    """
    segments, snapshots = list_partition_dir(path)
    if not segments and not snapshots:
        inner = Path(path) / "__cluster_metadata-0"
        hint = f"; the metadata log's partition directory is {inner}" if inner.is_dir() else ""
        raise FileNotFoundError(f"{path}: no log segments (*.log) or snapshots (*.checkpoint){hint}")
    start = None
    if snapshots and not full_history:
        newest = snapshots[-1]
        start = snapshot_end_offset(newest)[0]
        yield from decode_snapshot(newest)
    for segment in segments:
        yield from decode_file(segment, min_offset=start)


def read_partition_dir(path: str | os.PathLike, full_history: bool = False) -> Iterator[dict]:
    """Events only, for callers that must not go on past damage (tests, strict tools)."""
    for item in decode_partition_dir(path, full_history):
        if isinstance(item, Rejection):
            raise CorruptLogError(item)
        yield item


def read_leader_epoch_checkpoint(path: str | os.PathLike) -> list[tuple[int, int]]:
    """Kafka's ``leader-epoch-checkpoint`` (LeaderEpochCheckpointFile): a version line (0), a count line,
    then one "epoch start-offset" line per epoch; ValueError naming the line when it is not that."""
    lines = Path(path).read_text().splitlines()
    if len(lines) < 2 or lines[0].strip() != "0" or not lines[1].strip().isdigit():
        raise ValueError(f"{path}: line 1-2: not a leader-epoch-checkpoint (version 0, then a count)")
    count = int(lines[1])
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"{path}: line {number}: expected 'epoch start-offset', got {line!r}")
        entries.append((int(parts[0]), int(parts[1])))
    if len(entries) != count:
        raise ValueError(f"{path}: line 2 announces {count} epochs, the file has {len(entries)}")
    return entries


def read_meta_properties(path: str | os.PathLike) -> dict[str, str]:
    """Kafka's ``meta.properties`` at the root of a log directory (``MetaProperties``): ``key=value`` lines,
    ``#`` comments; the cluster's id is there (``cluster.id``), never in the metadata log."""
    values = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: line {number}: expected key=value, got {line!r}")
        values[key.strip()] = value.strip()
    if "cluster.id" not in values:
        raise ValueError(f"{path}: no cluster.id")
    return values


def read_quorum_state(path: str | os.PathLike) -> dict:
    """Kafka's ``quorum-state`` file: QuorumStateData as JSON plus its ``data_version``."""
    text = Path(path).read_text()
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: quorum-state is not JSON: {exc}") from exc
    if not isinstance(state, dict) or "leaderEpoch" not in state:
        raise ValueError(f"{path}: not a quorum-state file (no leaderEpoch)")
    return state
