"""Hand-written events (JSON lines, Avro) checked against the same schemas as the binary log.

A hand-written event must be exactly as good as a decoded record before it reaches the metadata log:
known type, a version Kafka defines, only the fields that version has, each of the right Kafka type.
Missing fields take Kafka's default, as Kafka's generated message classes do.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from kraftlake.metadata import uuids
from kraftlake.metadata.rejections import RAW_LIMIT, Item, Rejection
from kraftlake.metadata.schemas import (INT_RANGES, QUORUM_TRAFFIC, FieldSpec, MessageSpec, StructSpec, is_event_type,
    registry)
from kraftlake.metadata.tables import table_avro
from kraftlake.metadata.tables import ENVELOPE_COLUMNS


EVENT_KEYS = {"type", "version", "timestamp", "data", "offset", "leader_epoch", *ENVELOPE_COLUMNS}


class EventError(ValueError):
    def __init__(self, reason: str, error: str = "INVALID_REQUEST", type_: str | None = None,
                 version: int | None = None):
        super().__init__(reason)
        self.error = error
        self.type = type_
        self.version = version


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def json_bytes(value: Any) -> str:
    """``json.dumps``'s ``default`` for events and rows: bytes as base64 text, the form JSON lines take
    them in (and Spark's ``to_json`` gives them)."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def parse_timestamp(value: Any) -> int:
    """Milliseconds since the epoch, from a number of ms or an ISO-8601 text with a zone."""
    if _is_int(value):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise EventError(f"timestamp {value!r} is neither milliseconds nor ISO-8601") from exc
        if moment.tzinfo is None:
            raise EventError(f"timestamp {value!r} has no time zone (event time must be unambiguous)")
        return int(moment.timestamp() * 1000)
    raise EventError(f"timestamp {value!r} is neither milliseconds nor ISO-8601")


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
        if not _is_int(value) or not low <= value <= high:
            raise EventError(f"{path} must be an {ktype} ({low}..{high}), got {value!r}")
        return value
    if ktype == "float64":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise EventError(f"{path} must be a number, got {value!r}")
        return float(value)
    if ktype == "bool":
        if not isinstance(value, bool):
            raise EventError(f"{path} must be true or false, got {value!r}")
        return value
    if ktype == "string":
        if not isinstance(value, str):
            raise EventError(f"{path} must be a string, got {value!r}")
        return value
    if ktype == "uuid":
        try:
            return uuids.normalize(value)
        except ValueError as exc:
            raise EventError(f"{path}: {exc}") from exc
    if ktype in ("bytes", "records"):
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except binascii.Error as exc:
                raise EventError(f"{path} must be base64 text: {exc}") from exc
        raise EventError(f"{path} must be base64 text, got {value!r}")
    raise EventError(f"{path}: unsupported Kafka type {ktype}")


def check_struct(spec: StructSpec, data: dict, version: int, path: str) -> dict:
    """Every field of ``spec`` (Kafka default where absent), each checked; unknown fields refused."""
    present = {f.name for f in spec.fields if version in f.versions}
    unknown = sorted(set(data) - present)
    if unknown:
        raise EventError(f"{path} has no field {', '.join(unknown)} in version {version} "
                         f"(fields: {', '.join(sorted(present)) or 'none'})")
    out = {}
    for f in spec.fields:
        if f.name in data:
            out[f.name] = _check_value(f, data[f.name], version, f"{path}.{f.name}")
        else:
            out[f.name] = f.default()
    return out


def validate_event(obj: Any) -> dict:
    """An event dict (ADR 0001) from a hand-written object, or ``EventError`` saying what is wrong."""
    if not isinstance(obj, dict):
        raise EventError(f"an event must be a JSON object, got {type(obj).__name__}")
    extra = sorted(set(obj) - EVENT_KEYS)
    if extra:
        raise EventError(f"unknown event key(s) {', '.join(extra)} (allowed: {', '.join(sorted(EVENT_KEYS))})")
    type_ = obj.get("type")
    spec: MessageSpec | None = registry().by_name.get(type_) if isinstance(type_, str) else None
    if spec is None or not is_event_type(spec):
        raise EventError(f"unknown event type {type_!r}", "INVALID_RECORD")
    version = obj.get("version", spec.valid_versions.high)
    if not _is_int(version) or version not in spec.valid_versions:
        raise EventError(f"unknown version {version!r} of {type_} (known: {spec.valid_versions})",
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
        if offset is not None and (not _is_int(offset) or offset < 0):
            raise EventError(f"offset must be a non-negative integer, got {offset!r}")
        leader_epoch = obj.get("leader_epoch", -1)
        if not _is_int(leader_epoch):
            raise EventError(f"leader_epoch must be an integer, got {leader_epoch!r}")
        envelope = {name: obj[name] for name in ENVELOPE_COLUMNS if obj.get(name) is not None}
        for name, value in envelope.items():
            if not _is_int(value) or not INT_RANGES["int32"][0] <= value <= INT_RANGES["int32"][1]:
                raise EventError(f"{name} must be an int32, got {value!r}")
        if spec.name in QUORUM_TRAFFIC and "destination_id" not in envelope:
            raise EventError(f"{type_} is quorum traffic: it needs the destination_id of the replica that "
                             "handles it")
    except EventError as exc:
        exc.type, exc.version = type_, version
        raise
    return {"offset": offset, "leader_epoch": leader_epoch, "timestamp": timestamp, "type": type_,
            "version": version, "data": checked, **envelope}


def _rejection(source: str, position: int, raw: bytes, exc: EventError, offset: Any = None,
               unit: str = "line") -> Rejection:
    return Rejection(source, position, offset if _is_int(offset) else None, exc.error, str(exc),
                     raw[:RAW_LIMIT], len(raw), exc.type, exc.version, unit)


def read_json_lines(path: str | Path) -> Iterator[Item]:
    """Events of a JSON lines file; ``position`` is the 1-based line number. Blank lines are skipped."""
    source = str(path)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                yield _rejection(source, number, raw.rstrip(b"\n"), EventError(f"line is not JSON: {exc}"))
                continue
            try:
                event = validate_event(obj)
            except EventError as exc:
                yield _rejection(source, number, raw.rstrip(b"\n"), exc,
                                 obj.get("offset") if isinstance(obj, dict) else None)
                continue
            event["source"], event["position"] = source, number
            yield event


def avro_event_schema() -> dict:
    """The Avro container schema of hand-written events: ``data`` is a union of every event type."""
    base = table_avro("event")
    types = [m.avro for m in registry().event_types()]
    fields = [f for f in base["fields"] if f["name"] != "data"] + [{"name": "data", "type": types}]
    return {**base, "fields": fields}


def _from_avro(value: Any) -> Any:
    """fastavro's values in the JSON shapes the validator takes (bytes stay bytes)."""
    if isinstance(value, dict):
        return {k: _from_avro(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_avro(v) for v in value]
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return value


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


def read_avro(path: str | Path) -> Iterator[Item]:
    """Events of an Avro container file written with ``avro_event_schema()``; position = record index."""
    import fastavro  # only needed for Avro input

    source = str(path)
    with open(path, "rb") as handle:
        try:
            reader = fastavro.reader(handle)
        except (ValueError, EOFError) as exc:
            yield Rejection(source, 0, None, "INVALID_RECORD", f"not an Avro container file: {exc}",
                            unit="record")
            return
        index = 0
        while True:
            try:
                record = next(reader)
            except StopIteration:
                return
            except (ValueError, EOFError, OSError) as exc:  # a damaged block ends what can be read
                yield Rejection(source, index, None, "CORRUPT_MESSAGE", f"Avro block does not decode: {exc}",
                                unit="record")
                return
            obj = {k: v for k, v in _from_avro(record).items() if v is not None or k != "offset"}
            try:
                spec = registry().by_name.get(obj.get("type"))
                if spec is not None and isinstance(obj.get("data"), dict) and _is_int(obj.get("version")):
                    obj["data"] = _drop_absent(spec, obj["data"], obj["version"], "data")
                event = validate_event(obj)
            except EventError as exc:
                yield _rejection(source, index, json.dumps(obj, default=str).encode(), exc, obj.get("offset"),
                                 "record")
            else:
                event["source"], event["position"] = source, index
                yield event
            index += 1
