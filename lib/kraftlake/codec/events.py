"""Hand-written events (JSON lines, Avro) checked against the same schemas as the binary log.

A hand-written event must be exactly as good as a decoded record before it reaches the metadata log:
known type, a version Kafka defines, only the fields that version has, each of the right Kafka type and
within what Kafka and the warehouse's columns can hold. Missing fields take Kafka's default, as Kafka's
generated message classes do.

These files come from anyone: whatever a line or a record holds (too long, nested too deep, numbers no
column holds, text that is not Unicode), it is a rejection with its line or record number, and the rest
of the file is read.
"""

from __future__ import annotations

import base64
import io
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from kraftlake.codec import compression
from kraftlake.codec.bounds import (INT32, INT64, STRING_MAX_BYTES, TIMESTAMP_MS, Limits, TooLarge, default_limits,
    named_topic_problem, shown)
from kraftlake.codec.files import open_regular
from kraftlake.metadata import uuids
from kraftlake.metadata.rejections import RAW_LIMIT, Item, Rejection
from kraftlake.metadata.schemas import (INT_RANGES, QUORUM_TRAFFIC, FieldSpec, MessageSpec, StructSpec, is_event_type,
    registry)
from kraftlake.metadata.tables import ENVELOPE_COLUMNS, table_avro

EVENT_KEYS = {"type", "version", "timestamp", "data", "offset", "leader_epoch", *ENVELOPE_COLUMNS}
AVRO_MAGIC = b"Obj\x01"
AVRO_SYNC_SIZE = 16
_READ_CHUNK = 1 << 20


class EventError(ValueError):
    def __init__(self, reason: str, error: str = "INVALID_REQUEST", type_: str | None = None,
                 version: int | None = None):
        super().__init__(reason)
        self.error = error
        self.type = type_
        self.version = version


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _in(value: Any, bounds: tuple[int, int]) -> bool:
    return _is_int(value) and bounds[0] <= value <= bounds[1]


def json_bytes(value: Any) -> str:
    """``json.dumps``'s ``default`` for events and rows: bytes as base64 text, the form JSON lines take
    them in (and Spark's ``to_json`` gives them)."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def parse_timestamp(value: Any) -> int:
    """Milliseconds since the epoch, from a number of ms or an ISO-8601 text with a zone, within what
    ``metadata_log``'s timestamp column holds, from the epoch on (``bounds.TIMESTAMP_MS``)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    ms = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise EventError(f"timestamp {shown(value)} is neither milliseconds nor ISO-8601") from exc
        if moment.tzinfo is None:
            raise EventError(f"timestamp {shown(value)} has no time zone (event time must be unambiguous)")
        ms = int(moment.timestamp() * 1000)
    elif not _is_int(value):
        raise EventError(f"timestamp {shown(value)} is neither milliseconds nor ISO-8601")
    if not _in(ms, TIMESTAMP_MS):
        raise EventError(f"timestamp {shown(value)} is outside the milliseconds the log can hold "
                         f"({TIMESTAMP_MS[0]}..{TIMESTAMP_MS[1]}: from the epoch on)")
    return ms


def _check_value(spec: FieldSpec, value: Any, version: int, path: str) -> Any:
    if value is None:
        if version in spec.nullable_versions:
            return None
        raise EventError(f"{path} may not be null in this version")
    if spec.is_array:
        if not isinstance(value, list):
            raise EventError(f"{path} must be an array, got {type(value).__name__}")
        return [_check_element(spec, item, version, f"{path}[{i}]") for i, item in enumerate(value)]
    return _check_element(spec, value, version, path)


def _check_element(spec: FieldSpec, value: Any, version: int, path: str) -> Any:
    if spec.struct is not None:
        if not isinstance(value, dict):
            raise EventError(f"{path} must be an object, got {type(value).__name__}")
        return check_struct(spec.struct, value, version, path)
    ktype = spec.element
    if ktype in INT_RANGES:
        low, high = INT_RANGES[ktype]
        if not _in(value, (low, high)):
            raise EventError(f"{path} must be an {ktype} ({low}..{high}), got {shown(value)}")
        return value
    if ktype == "float64":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise EventError(f"{path} must be a number, got {shown(value)}")
        try:
            return float(value)
        except OverflowError:
            raise EventError(f"{path} must be a float64, got {shown(value)}") from None
    if ktype == "bool":
        if not isinstance(value, bool):
            raise EventError(f"{path} must be true or false, got {shown(value)}")
        return value
    if ktype == "string":
        if not isinstance(value, str):
            raise EventError(f"{path} must be a string, got {shown(value)}")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise EventError(f"{path} is not Unicode text (it holds a lone surrogate): {shown(value)}") from None
        if size > STRING_MAX_BYTES:
            raise EventError(f"{path} has {size:,} bytes of UTF-8; a Kafka string holds at most {STRING_MAX_BYTES:,}")
        return value
    if ktype == "uuid":
        if not isinstance(value, str):
            raise EventError(f"{path} must be a Uuid, got {shown(value)}")
        try:
            return uuids.normalize(value)
        except ValueError:
            raise EventError(f"{path} must be a Uuid (Kafka's base64 form or dashed hex), got {shown(value)}") from None
    if ktype in ("bytes", "records"):
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except ValueError as exc:  # binascii.Error, or text that is not ASCII
                raise EventError(f"{path} must be base64 text: {shown(str(exc))}") from exc
        raise EventError(f"{path} must be base64 text, got {shown(value)}")
    raise EventError(f"{path}: unsupported Kafka type {ktype}")


def check_struct(spec: StructSpec, data: dict, version: int, path: str) -> dict:
    """Every field of ``spec`` (Kafka default where absent), each checked; unknown fields refused."""
    present = {f.name for f in spec.fields if version in f.versions}
    unknown = set(data) - present
    if unknown:
        raise EventError(f"{path} has no field {_names(unknown)} in version {version} "
                         f"(fields: {', '.join(sorted(present)) or 'none'})")
    out = {}
    for f in spec.fields:
        if f.name in data:
            out[f.name] = _check_value(f, data[f.name], version, f"{path}.{f.name}")
        else:
            out[f.name] = f.default()
    return out


def _names(keys: set) -> str:
    """Unknown keys as a message lists them: a few, each shortened (they are the input's)."""
    listed = sorted(shown(k) for k in keys)
    return ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")


def validate_event(obj: Any) -> dict:
    """An event dict (ADR 0001) from a hand-written object, or ``EventError`` saying what is wrong."""
    if not isinstance(obj, dict):
        raise EventError(f"an event must be a JSON object, got {type(obj).__name__}")
    extra = set(obj) - EVENT_KEYS
    if extra:
        raise EventError(f"unknown event key(s) {_names(extra)} (allowed: {', '.join(sorted(EVENT_KEYS))})")
    type_ = obj.get("type")
    spec: MessageSpec | None = registry().by_name.get(type_) if isinstance(type_, str) else None
    if spec is None or not is_event_type(spec):
        raise EventError(f"unknown event type {shown(type_)}", "INVALID_RECORD")
    version = obj.get("version", spec.valid_versions.high)
    if not _is_int(version) or version not in spec.valid_versions:
        raise EventError(f"unknown version {shown(version)} of {type_} (known: {spec.valid_versions})",
                         "UNSUPPORTED_VERSION", type_)
    if "timestamp" not in obj:
        raise EventError("an event needs a timestamp (event time drives every timeout)", type_=type_,
                         version=version)
    data = obj.get("data", {})
    if not isinstance(data, dict):
        raise EventError(f"data must be an object, got {type(data).__name__}", type_=type_, version=version)
    try:
        timestamp = parse_timestamp(obj["timestamp"])
        checked = check_struct(spec, data, version, "data")
        offset = obj.get("offset")
        if offset is not None and not _in(offset, (0, INT64[1])):
            raise EventError(f"offset must be an integer in 0..{INT64[1]}, got {shown(offset)}")
        leader_epoch = obj.get("leader_epoch", -1)
        if not _in(leader_epoch, INT32):
            raise EventError(f"leader_epoch must be an int32, got {shown(leader_epoch)}")
        envelope = {name: obj[name] for name in ENVELOPE_COLUMNS if obj.get(name) is not None}
        for name, value in envelope.items():
            if not _in(value, INT32):
                raise EventError(f"{name} must be an int32, got {shown(value)}")
        problem = named_topic_problem(spec.name, checked)
        if problem is not None:
            raise EventError(problem, "INVALID_TOPIC_EXCEPTION")
        if spec.name in QUORUM_TRAFFIC and "destination_id" not in envelope:
            raise EventError(f"{type_} is quorum traffic: it needs the destination_id of the replica that "
                             "handles it")
    except EventError as exc:
        exc.type, exc.version = type_, version
        raise
    return {"offset": offset, "leader_epoch": leader_epoch, "timestamp": timestamp, "type": type_,
            "version": version, "data": checked, **envelope}


def _event_error(exc: Exception) -> EventError:
    """Any failure to read one event as the rejection says it: ours as they are, the rest by their kind."""
    if isinstance(exc, EventError):
        return exc
    if isinstance(exc, RecursionError):
        return EventError("nested deeper than any event can be", "INVALID_REQUEST")
    return EventError(f"cannot be read: {_why(exc)}", "INVALID_REQUEST")


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {shown(str(exc))}"


def _rejection(source: str, position: int, raw: bytes, exc: EventError, offset: Any = None,
               unit: str = "line", raw_length: int | None = None) -> Rejection:
    return Rejection(source, position, offset if _in(offset, INT64) else None, exc.error, str(exc),
                     raw[:RAW_LIMIT], len(raw) if raw_length is None else raw_length, exc.type, exc.version, unit)


def _lines(handle: BinaryIO, limit: int) -> Iterator[tuple[bytes, int]]:
    """(line, its length) for each line, without its newline; a line longer than ``limit`` bytes is given
    as its first ``limit`` bytes, the rest read past without being kept."""
    while raw := handle.readline(limit + 1):
        length, last = len(raw), raw
        while length > limit and not last.endswith(b"\n") and (last := handle.readline(_READ_CHUNK)):
            length += len(last)
        yield raw[:limit].rstrip(b"\r\n"), length - last.endswith(b"\n")


def read_json_lines(path: str | Path, limits: Limits | None = None) -> Iterator[Item]:
    """Events of a JSON lines file; ``position`` is the 1-based line number. Blank lines are skipped; a
    line longer than ``limits.event_bytes`` is rejected unread."""
    limits = limits or default_limits()
    source = str(path)
    with open_regular(path) as handle:
        for number, (line, length) in enumerate(_lines(handle, limits.event_bytes), start=1):
            if length > limits.event_bytes:
                yield _rejection(source, number, line, EventError(
                    f"line of {length:,} bytes, longer than kraftlake.decode.event.max.bytes ({limits.event_bytes:,})",
                    "MESSAGE_TOO_LARGE"), raw_length=length)
                continue
            if not line.strip():
                continue
            yield _json_event(source, number, line)


def _json_event(source: str, number: int, line: bytes) -> Item:
    """One line as an event, or the rejection saying why it is not one (whatever went wrong)."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _rejection(source, number, line, EventError(f"line is not JSON: {exc}"))
    except Exception as exc:  # noqa: BLE001 - RecursionError, a number past Python's digit limit, ...
        return _rejection(source, number, line, _event_error(exc))
    try:
        event = validate_event(obj)
    except Exception as exc:  # noqa: BLE001 - whatever a line holds, it is rejected alone
        return _rejection(source, number, line, _event_error(exc), obj.get("offset") if isinstance(obj, dict) else None)
    event["source"], event["position"] = source, number
    return event


def avro_event_schema() -> dict:
    """The Avro container schema of hand-written events: ``data`` is a union of every event type."""
    base = table_avro("event")
    types = [m.avro for m in registry().event_types()]
    fields = [f for f in base["fields"] if f["name"] != "data"] + [{"name": "data", "type": types}]
    return {**base, "fields": fields}


def _drop_absent(spec: StructSpec, data: dict, version: int, path: str) -> dict:
    """Avro records carry every field of every version; drop those this version lacks, if unset."""
    out = {}
    for f in spec.fields:
        if f.name not in data:
            continue
        value = data[f.name]
        if version not in f.versions:
            if value is not None and value != f.default():
                raise EventError(f"{path}.{f.name} is set but does not exist in version {version}")
            continue
        if f.struct is not None and isinstance(value, dict):
            value = _drop_absent(f.struct, value, version, f"{path}.{f.name}")
        elif f.struct is not None and isinstance(value, list):
            value = [_drop_absent(f.struct, v, version, f"{path}.{f.name}[{i}]") if isinstance(v, dict) else v
                     for i, v in enumerate(value)]
        out[f.name] = value
    return out


def _raw_timestamps(schema: Any) -> Any:
    """The writer's schema with its timestamp-millis read as the long milliseconds they are: fastavro would
    make them datetimes, which stop at year 9999 where the column does not, and fail inside the reader."""
    if isinstance(schema, dict):
        return {k: _raw_timestamps(v) for k, v in schema.items() if (k, v) != ("logicalType", "timestamp-millis")}
    if isinstance(schema, list):
        return [_raw_timestamps(v) for v in schema]
    return schema


def _avro_long(handle: BinaryIO) -> int:
    """An Avro long (zig-zag varint); EOFError at the end of the file."""
    result = shift = 0
    while shift < 70:
        byte = handle.read(1)
        if not byte:
            raise EOFError("the file ends inside a number")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7
    raise ValueError("a number longer than 10 bytes")


def _avro_bytes(handle: BinaryIO, what: str) -> bytes:
    size = _avro_long(handle)
    data = handle.read(size) if size >= 0 else b""
    if size < 0 or len(data) != size:
        raise EOFError(f"{what} of {size} bytes runs past the end of the file")
    return data


def _avro_header(handle: BinaryIO) -> tuple[Any, str, bytes]:
    """(the writer's schema, parsed; the codec; the sync marker) of an Avro container file."""
    import fastavro  # only needed for Avro input

    if handle.read(len(AVRO_MAGIC)) != AVRO_MAGIC:
        raise ValueError("it does not start with Avro's magic bytes")
    meta: dict[str, bytes] = {}
    while count := _avro_long(handle):
        if count < 0:  # a block of the map that states its size too
            _avro_long(handle)
        for _ in range(abs(count)):
            key = _avro_bytes(handle, "a metadata key").decode("utf-8", "replace")
            meta[key] = _avro_bytes(handle, "a metadata value")
    sync = handle.read(AVRO_SYNC_SIZE)
    if len(sync) != AVRO_SYNC_SIZE:
        raise EOFError("the file ends inside its header")
    schema = fastavro.parse_schema(_raw_timestamps(json.loads(meta["avro.schema"])))
    return schema, meta.get("avro.codec", b"null").decode("utf-8", "replace"), sync


# Avro's codecs, each within its limit; the lz4 some writers add is no codec of Avro's specification
_AVRO_CODECS = {
    "null": lambda data, limit: data,
    "deflate": lambda data, limit: compression.inflate(data, compression.RAW_DEFLATE_WBITS, limit),
    "snappy": lambda data, limit: compression.snappy_raw(data[:-4], limit),  # then the data's CRC-32
    "bzip2": compression.bunzip2,
    "xz": compression.unxz,
    "zstandard": compression.zstd,
}


def read_avro(path: str | Path, limits: Limits | None = None) -> Iterator[Item]:
    """Events of an Avro container file written with ``avro_event_schema()``; position = record index.

    Blocks are read here, not by fastavro, so that each is decompressed within its limit (a block of a
    few kilobytes can stand for gigabytes): a block over it, or that does not decompress, is rejected
    and the next one read. A record that does not decode takes the rest of its block with it (its end,
    hence the next record's start, is unknown); damage to a block's framing ends the file."""
    import fastavro  # only needed for Avro input

    limits = limits or default_limits()
    source = str(path)
    with open_regular(path) as handle:
        try:
            schema, codec, sync = _avro_header(handle)
        except Exception as exc:  # noqa: BLE001 - whatever the header holds, it is a rejection
            yield Rejection(source, 0, None, "INVALID_RECORD", f"not an Avro container file: {_why(exc)}",
                            unit="record")
            return
        if codec not in _AVRO_CODECS:
            yield Rejection(source, 0, None, "UNSUPPORTED_COMPRESSION_TYPE", f"Avro codec {shown(codec)} is not "
                            f"read (Avro's are {', '.join(_AVRO_CODECS)})", unit="record")
            return
        index = 0
        while True:
            block_at = handle.tell()
            try:
                count = _avro_long(handle)
            except EOFError:
                return
            try:
                raw = _avro_bytes(handle, "the block")
                if handle.read(AVRO_SYNC_SIZE) != sync:
                    raise ValueError("the block does not end with the file's sync marker")
                if not 0 <= count <= limits.batch_bytes:
                    raise ValueError(f"the block says it holds {count} records")
            except (ValueError, EOFError) as exc:  # the blocks after it cannot be found
                yield Rejection(source, index, None, "CORRUPT_MESSAGE", f"Avro block at byte {block_at} does not "
                                f"decode: {exc}", unit="record")
                return
            try:
                block = _AVRO_CODECS[codec](raw, limits.avro_block(count))
            except TooLarge as exc:
                yield Rejection(source, index, None, exc.error, f"Avro block at byte {block_at} ({count} records, "
                                f"{codec}) {exc}", raw[:RAW_LIMIT], len(raw), unit="record")
                index += count
                continue
            except compression.ERRORS as exc:
                yield Rejection(source, index, None, "CORRUPT_MESSAGE", f"Avro block at byte {block_at} ({codec}) "
                                f"does not decompress: {exc}", raw[:RAW_LIMIT], len(raw), unit="record")
                index += count
                continue
            reader = io.BytesIO(block)
            for number in range(count):
                try:
                    record = fastavro.schemaless_reader(reader, schema)
                except Exception as exc:  # noqa: BLE001 - the writer's schema and bytes are the input's
                    yield Rejection(source, index, None, "CORRUPT_MESSAGE", f"record {number} of the Avro block at "
                                    f"byte {block_at} does not decode ({_why(exc)}); the block's "
                                    f"{count - number - 1} records after it cannot be found", unit="record")
                    index += count - number
                    break
                yield _avro_event(source, index, record)
                index += 1


def _avro_event(source: str, index: int, record: Any) -> Item:
    """One decoded Avro record as an event, or the rejection saying why it is not one (whatever went wrong)."""
    try:
        if not isinstance(record, dict):
            raise EventError(f"an event must be an Avro record, got {type(record).__name__}")
        obj = {k: v for k, v in record.items() if v is not None or k != "offset"}
        spec = registry().by_name.get(obj.get("type"))
        if spec is not None and isinstance(obj.get("data"), dict) and _is_int(obj.get("version")):
            obj["data"] = _drop_absent(spec, obj["data"], obj["version"], "data")
        event = validate_event(obj)
    except Exception as exc:  # noqa: BLE001 - any failure of one record rejects that record alone
        offset = record.get("offset") if isinstance(record, dict) else None
        return _rejection(source, index, _avro_raw(record), _event_error(exc), offset, "record")
    event["source"], event["position"] = source, index
    return event


def _avro_raw(record: Any) -> bytes:
    """A rejected record as JSON, for the ``raw`` column (empty when even that fails: it is only shown)."""
    try:
        return json.dumps(record, default=str).encode()
    except (ValueError, TypeError, RecursionError):
        return b""
