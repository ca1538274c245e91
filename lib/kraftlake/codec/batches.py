"""Kafka record batches (magic v2): framing, CRC-32C, compression, and the records inside.

A log segment or snapshot is a sequence of batches. Corruption is confined to the smallest part that
cannot be trusted: a batch whose CRC fails is rejected whole (none of its bytes can be trusted), a record
that does not parse is rejected alone, and after damage the scanner looks for the next intact batch so
that the valid data after it is kept.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from typing import Iterator

import cramjam
import crc32c

from kraftlake.codec import compression
from kraftlake.codec.bounds import Limits, TooLarge, default_limits
from kraftlake.codec.messages import (NOT_READ, MessageError, Reader, Refused, long_uvarint, write_uvarint,
                                      write_varint)
from kraftlake.metadata.rejections import RAW_LIMIT

# baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
# attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, producerId int64,
# producerEpoch int16, baseSequence int32, recordCount int32
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
CRC_AT = 17  # where the header holds the CRC-32C
CRC_START = 21  # the CRC covers attributes .. end of batch

COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_IDS = {name: cid for cid, name in COMPRESSION.items()}
TRANSACTIONAL = 0x10
CONTROL = 0x20


class BatchError(ValueError):
    """A batch that cannot be trusted; ``error`` is Kafka's error name for it."""

    def __init__(self, message: str, error: str = "CORRUPT_MESSAGE"):
        super().__init__(message)
        self.error = error


@dataclass
class RecordBatch:
    position: int  # byte position of the batch in its file
    size: int  # bytes, header included
    base_offset: int
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int
    payload: bytes  # the records section, decompressed

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def compression(self) -> str:
        return COMPRESSION.get(self.attributes & 0x07, "unknown")


@dataclass
class BadRecord:
    """A record whose framing does not parse: the rest of its batch cannot be located either."""

    position: int  # inside the (decompressed) records section
    raw: bytes  # its first RAW_LIMIT bytes
    raw_length: int  # from the record to the end of the records section
    reason: str


@dataclass
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    position: int  # byte position of the record inside the (decompressed) records section


_DECOMPRESS = {1: lambda data, limit: compression.inflate(data, compression.GZIP_WBITS, limit),
               2: compression.snappy, 3: compression.lz4_frame, 4: compression.zstd}


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """The records section of a batch compressed with ``codec``, refused past ``limit`` bytes (a few bytes
    of a crafted batch would otherwise decompress to gigabytes)."""
    if codec == 0:
        return data
    if codec not in _DECOMPRESS:
        raise BatchError(f"unknown compression codec id {codec}", "UNSUPPORTED_COMPRESSION_TYPE")
    try:
        return _DECOMPRESS[codec](data, limit)
    except TooLarge as exc:
        raise BatchError(f"{COMPRESSION[codec]} payload {exc}", exc.error) from exc
    except compression.ERRORS as exc:
        raise BatchError(f"{COMPRESSION[codec]} payload does not decompress: {exc}") from exc


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        block = bytes(cramjam.snappy.compress_raw(data))
        return compression.XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec id {codec}")


def parse_batch(buf: bytes | memoryview, pos: int, limits: Limits | None = None,
                crc: int | None = None) -> RecordBatch:
    """Parse and verify the batch at ``pos``; the caller knows ``buf`` holds all of it. A compressed
    records section may decompress to ``limits.decompressed(recordCount)`` bytes at most. ``crc``: the
    CRC-32C of its bytes from the attributes on, when the caller computed it already."""
    (base_offset, batch_length, leader_epoch, magic, stored_crc, attributes, last_offset_delta,
     base_timestamp, max_timestamp, producer_id, _producer_epoch, _base_sequence,
     record_count) = HEADER.unpack_from(buf, pos)
    end = pos + LOG_OVERHEAD + batch_length
    if magic != 2:
        raise BatchError(f"record batch magic {magic} is not supported (only v2)", "UNSUPPORTED_VERSION")
    actual = crc32c.crc32c(memoryview(buf)[pos + CRC_START:end]) if crc is None else crc
    if actual != stored_crc:
        raise BatchError(f"CRC-32C mismatch: batch says {stored_crc:#010x}, bytes give {actual:#010x}")
    body = bytes(buf[pos + HEADER_SIZE:end])
    payload = decompress(attributes & 0x07, body, (limits or default_limits()).decompressed(record_count))
    return RecordBatch(pos, end - pos, base_offset, leader_epoch, attributes, last_offset_delta,
                       base_timestamp, max_timestamp, producer_id, record_count, payload)


def records(batch: RecordBatch) -> Iterator[Record | BadRecord]:
    """The records of a verified batch. A record that does not frame is yielded as an error; framing
    errors cannot be skipped past (record lengths chain), so the rest of the batch goes with it."""
    payload = batch.payload if isinstance(batch.payload, bytes) else bytes(batch.payload)
    pos, end = 0, len(payload)
    for index in range(batch.record_count):
        try:
            framed = _frame(payload, pos, end)
        except NOT_READ:
            try:
                framed = _frame_by_reader(payload, pos, index)  # its error says what is wrong
            except MessageError as exc:
                yield _bad_record(batch, pos, str(exc))
                return
        record_end, timestamp_delta, offset_delta, key, value = framed
        yield Record(batch.base_offset + offset_delta, batch.base_timestamp + timestamp_delta, key, value, pos)
        pos = record_end
    if pos < end:
        yield _bad_record(batch, pos, f"{end - pos} bytes after the batch's {batch.record_count} records")


# A record's framing: (where it ends, timestamp delta, offset delta, key, value)
Framed = tuple[int, int, int, bytes | None, bytes | None]


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of a zig-zag varint, refused where ``Reader.varint`` fails."""
    if pos < end and buf[pos] < 0x80:
        raw, pos = buf[pos], pos + 1
    elif pos + 1 < end and buf[pos + 1] < 0x80:  # two bytes: most records' length, offset deltas from 64
        raw, pos = buf[pos] & 0x7F | buf[pos + 1] << 7, pos + 2
    else:
        raw, pos = long_uvarint(buf, pos, end)
    return (raw >> 1) ^ -(raw & 1), pos


def _frame(payload: bytes, pos: int, end: int) -> Framed:
    """The framing of the record at ``pos``, read straight through (the framing of every record of a log
    passes here: ``_frame_by_reader``'s Reader costs twice as many calls); refused (``NOT_READ``) exactly
    where that one raises."""
    length, pos = _varint(payload, pos, end)
    if length < 0 or length > end - pos:
        raise Refused
    end = pos + length
    pos += 1  # attributes: unused in v2
    timestamp_delta, pos = _varint(payload, pos, end)
    offset_delta, pos = _varint(payload, pos, end)
    parts = []
    for _ in range(2):  # key, value
        size, pos = _varint(payload, pos, end)
        if size < 0:
            parts.append(None)
            continue
        if pos + size > end:
            raise Refused
        parts.append(payload[pos:pos + size])
        pos += size
    headers, pos = _varint(payload, pos, end)
    for _ in range(headers * 2):  # not used by the metadata log: a key and a value each
        size, pos = _varint(payload, pos, end)
        pos += max(size, 0)
        if pos > end:
            raise Refused
    return end, timestamp_delta, offset_delta, parts[0], parts[1]


def _frame_by_reader(payload: bytes, start: int, index: int) -> Framed:
    """``_frame`` on a ``Reader``: the one that says in its error what is wrong (``MessageError``)."""
    reader = Reader(payload, start)
    length = reader.varint()
    if length < 0 or length > reader.remaining():
        raise MessageError(f"record {index} of the batch has invalid length {length}")
    record_end = reader.pos + length
    sub = Reader(payload, reader.pos, record_end)
    sub.take(1)  # attributes: unused in v2
    timestamp_delta = sub.varint()
    offset_delta = sub.varint()
    key_length = sub.varint()
    key = sub.take(key_length) if key_length >= 0 else None
    value_length = sub.varint()
    value = sub.take(value_length) if value_length >= 0 else None
    for _ in range(sub.varint()):  # headers: not used by the metadata log
        sub.take(max(sub.varint(), 0))
        header_value_length = sub.varint()
        sub.take(max(header_value_length, 0))
    return record_end, timestamp_delta, offset_delta, key, value


def _bad_record(batch: RecordBatch, start: int, reason: str) -> BadRecord:
    return BadRecord(start, batch.payload[start:start + RAW_LIMIT], len(batch.payload) - start, reason)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray([0])
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for part in (key, value):
        if part is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(part))
            body += part
    write_uvarint(body, 0)  # no headers
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def encode_batch(base_offset: int, leader_epoch: int, base_timestamp: int,
                 records_: list[tuple[int, int, bytes | None, bytes | None]], *,
                 codec: str = "none", control: bool = False, transactional: bool = False,
                 producer_id: int = -1) -> bytes:
    """A v2 batch of ``(offset_delta, timestamp_delta, key, value)`` records, as Kafka writes it."""
    payload = b"".join(encode_record(od, td, k, v) for od, td, k, v in records_)
    body = compress(CODEC_IDS[codec], payload)
    attributes = CODEC_IDS[codec] | (CONTROL if control else 0) | (TRANSACTIONAL if transactional else 0)
    last_delta = max((r[0] for r in records_), default=0)
    max_ts = base_timestamp + max((r[1] for r in records_), default=0)
    after_crc = struct.pack(">hiqqqhii", attributes, last_delta, base_timestamp, max_ts,
                            producer_id, -1, -1, len(records_)) + body
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + after_crc
