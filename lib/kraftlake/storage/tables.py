"""Rows of the warehouse tables as Arrow, built from core objects (events, rejections).

Arrow is the hand-off format between the pure core and both Delta engines; the schemas come from
``schemas/`` through ``kraftlake.metadata.schemas``, never retyped here.
"""

from __future__ import annotations

import json
import operator
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from kraftlake.codec.events import json_bytes
from kraftlake.metadata.rejections import Rejection
from kraftlake.metadata.tables import (ENVELOPE_COLUMNS, answers_schema, metadata_log_schema, schema_arrays,
                                       table_arrow_schema)


def events_to_arrow(events: Sequence[dict], schema: pa.Schema | None = None) -> pa.RecordBatch:
    """A ``metadata_log`` batch: fixed columns, then each type's payload in its own struct column."""
    schema = schema or metadata_log_schema()
    return widen(compact_events(events, schema), schema)


def compact_events(events: Sequence[dict], schema: pa.Schema) -> pa.RecordBatch:
    """``events`` as ``schema``'s fixed columns and the payload columns of the types among them only: a
    few columns where the whole schema has one per message type (cheap to send to another process;
    ``widen`` gives the rest).

    Payload columns are built per type from just that type's rows and spread out with ``take``, so the
    cost follows the number of events, not events x types.
    """
    n = len(events)
    columns: dict[str, pa.Array] = {
        "offset": pa.array([e["offset"] for e in events], pa.int64()),
        "leader_epoch": pa.array([e["leader_epoch"] for e in events], pa.int32()),
        "timestamp": pa.array([e["timestamp"] * 1000 for e in events], pa.timestamp("us", tz="UTC")),
        "type": pa.array([e["type"] for e in events], pa.string()),
        "version": pa.array([e["version"] for e in events], pa.int16()),
        "source": pa.array([e.get("source") for e in events], pa.string()),
        "position": pa.array([e.get("position") for e in events], pa.int64()),
        **{name: pa.array([e.get(name) for e in events], pa.int32()) for name in ENVELOPE_COLUMNS},
    }
    rows_by_type: dict[str, list[int]] = {}
    for index, event in enumerate(events):
        rows_by_type.setdefault(event["type"], []).append(index)
    for type_, rows in rows_by_type.items():
        if type_ not in schema.names or type_ in columns:
            continue
        values = pa.array([events[i]["data"] for i in rows] + [None], schema.field(type_).type)
        where = np.full(n, len(rows), np.int32)  # the trailing null
        where[rows] = np.arange(len(rows), dtype=np.int32)
        columns[type_] = values.take(pa.array(where))
    names = [f.name for f in schema if f.name in columns]
    return pa.RecordBatch.from_arrays([columns[name] for name in names],
                                      schema=pa.schema([schema.field(name) for name in names]))


def widen(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (``schema``'s columns, some left out) in the whole ``schema``: the others all null."""
    present = set(batch.schema.names)
    return pa.RecordBatch.from_arrays(
        [batch.column(f.name) if f.name in present else pa.nulls(batch.num_rows, f.type) for f in schema],
        schema=schema)


def controller_log_schema() -> pa.Schema:
    """``controller_log``: ``metadata_log``'s columns (``offset`` = the request that caused the record),
    plus the shard that wrote it and its place among that request's records."""
    return table_arrow_schema("controller_log")


def controller_log_to_arrow(rows: Sequence[dict]) -> pa.Table:
    schema = controller_log_schema()
    batch = events_to_arrow(rows)
    columns = batch.columns + [pa.array([r["shard"] for r in rows], pa.int32()),
                               pa.array([r["seq"] for r in rows], pa.int32())]
    return pa.Table.from_arrays(columns, schema=schema)


def rows_to_events(table: pa.Table) -> list[dict]:
    """The inverse of ``events_to_arrow``: ``metadata_log`` rows back into event dicts."""
    index = table.schema.get_field_index("timestamp")
    micros = table.column(index).cast(pa.int64())
    table = table.set_column(index, "timestamp", pa.compute.divide(micros, 1000))
    out = []
    for row in table.to_pylist():
        type_ = row["type"]
        out.append({"offset": row["offset"], "leader_epoch": row["leader_epoch"],
                    "timestamp": row["timestamp"], "type": type_,
                    "version": row["version"], "data": row.get(type_) or {}, "source": row["source"],
                    "position": row["position"],
                    **{name: row.get(name) for name in ENVELOPE_COLUMNS if row.get(name) is not None}})
    return out


def rows_to_arrow(name: str, rows: list[dict]) -> pa.Table:
    """Rows of a warehouse table as the core makes them (event times in ms) as Arrow in the table's
    schema: its timestamp columns, found in the schema, become Delta's µs."""
    schema = table_arrow_schema(name)
    times = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    return pa.Table.from_pylist([{**r, **{c: r[c] * 1000 for c in times if r.get(c) is not None}} for r in rows],
                                schema=schema)


def answers_to_arrow(rows: Sequence[dict]) -> pa.Table:
    """Answers as the shards make them (``responses`` rows with event times in ms, ``data`` a dict, and
    ``shard``) in ``answers_schema``, ``data`` as the JSON the table stores: column by column, since a
    shard answers nearly every request it sees."""
    schema = answers_schema()
    names = schema.names
    columns = dict(zip(names, zip(*map(operator.itemgetter(*names), rows)))) if rows else dict.fromkeys(names, ())
    columns["data"] = json_texts(columns["data"])
    return pa.Table.from_arrays(schema_arrays(schema, columns), schema=schema)


_SCALARS = frozenset((str, int, bool, type(None)))


def json_texts(values: Sequence[dict]) -> list[str]:
    """Each dict as ``json.dumps`` writes it; a dict of scalar keys and values only once per distinct
    sequence of (key, value) and their types, since nine answers in ten are a steady heartbeat's, the same
    few fields and values. Types are part of the key (``True == 1``, yet one is written ``true``); floats
    never share a text (``-0.0 == 0.0``). Before any of that, one dict object met again is its text again:
    a step answers its steady heartbeats with one shared dict (200,000 answers, ~5,000 objects), and
    ``values`` keeps each object alive, so no id is reused within the call."""
    texts: dict[tuple, str] = {}
    seen: dict[int, str] = {}
    out = []
    for value in values:
        text = seen.get(id(value))
        if text is None:
            types = tuple(map(type, value)) + tuple(map(type, value.values()))
            if _SCALARS.issuperset(types):
                key = (tuple(value.items()), types)
                text = texts.get(key)
                if text is None:
                    text = texts[key] = json.dumps(value, default=json_bytes)
            else:
                text = json.dumps(value, default=json_bytes)
            seen[id(value)] = text
        out.append(text)
    return out


def rejections_to_arrow(rejections: Sequence[Rejection], stage: str = "ingest") -> pa.Table:
    schema = table_arrow_schema("rejected")
    rows = [{"stage": stage, "source": r.source, "position": r.position, "offset": r.offset, "type": r.type,
             "version": r.version, "error": r.error, "reason": r.reason, "raw": r.raw,
             "raw_length": r.raw_length} for r in rejections]
    return pa.Table.from_pylist(rows, schema=schema)
