"""The Spark shell around the controller shards: one streaming query from ``metadata_log`` to Delta.

    metadata_log ──readStream──▶ route to shards ──groupBy(shard).applyInPandasWithState(step)──▶
    foreachBatch: brokers, topics, configs, partitions (MERGE), partition_history, rejected (append)

Exactly-once: Spark's checkpoint holds the source offsets and the state store holds each shard's image;
every sink commit carries the Delta application transaction ``(kraftlake-controller-<query id>,
batch id)``, so a micro-batch that Spark re-runs after a crash is skipped by the tables that already
have it and written by those that do not.
"""

from __future__ import annotations

import base64
import json
import operator
import os
import shutil
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Mapping, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlake.codec.events import json_bytes
from kraftlake.controller.anomalies import IMBALANCE
from kraftlake.controller.dispatch import merge_responses
from kraftlake.controller.heartbeats import HEARTBEAT, Heartbeats
from kraftlake.controller.shards import (LEADER_COUNTS, SKIPPED, Answers, Block, Output, ShardState,
                                        leader_imbalance, rows_table, step)
from kraftlake.image.cluster_image import normalize_uuid
from kraftlake.image.partition_changes import Changes
from kraftlake.metadata.collector import collector_paused
from kraftlake.metadata.config import defaults
from kraftlake.metadata.progress import Meter
from kraftlake.metadata.schemas import StructSpec, registry
from kraftlake.metadata.tables import FIXED_COLUMNS, derived_tables, table_arrow_schema, table_keys, tables_of
from kraftlake.report.metrics import PATH as METRICS_PATH, MetricsServer
from kraftlake.spark.errors import spark_error
from kraftlake.spark.queries import (SHUFFLE_PARTITIONS, BackfillGuard, ControllerMetrics, LogProgress, MetadataLogEnd,
                                     delete_dir, group_keys, open_anomalies, parse_state, query_id, spread_keys,
                                     start_sink, supervise)
from kraftlake.spark.quorum_query import quorum_outputs, start_quorum
from kraftlake.spark.routing import HEARTBEAT_FILL, PACKED_SCHEMA, ROUTED_COLUMNS, ipc_stream, packed_batches
from kraftlake.storage import NATIVE, Warehouse
from kraftlake.storage.lease import Lease
from kraftlake.storage.tables import answers_to_arrow, controller_log_schema, controller_log_to_arrow, rows_to_arrow

STATE_TABLES = tables_of("controller", "state")
# controller_log and responses have row formats of their own (records, merged answers); the sink writes them first
APPEND_TABLES = tuple(t for t in tables_of("controller", "append") if t not in ("controller_log", "responses"))
# Rows of these tables (nearly every row the controller writes) leave a shard as one Arrow IPC stream
# per table and micro-batch, in ``rows`` (op ``arrow``); every other row as JSON in ``row`` (ADR 0004).
TYPED_TABLES = ("partition_history", "partitions")
ARROW_OP = "arrow"
OUTPUT_SCHEMA = "table string, op string, offset long, seq int, row string, rows binary"
STATE_SCHEMA = "state binary"
TIMESTAMP_COLUMNS = {"last_timestamp", "timestamp"}


@dataclass(frozen=True)
class ControllerSettings:
    shards: int
    checkpoint: str
    once: bool
    max_records_per_batch: int | None = None
    max_batch_ms: int | None = None  # below the cap, micro-batches sized to take about this long (``storage.pacing``)
    trigger_interval_ms: int = field(default_factory=lambda: int(defaults()["kraftlake.controller.trigger.interval.ms"]))
    kafka_config: Mapping[str, str] = field(default_factory=dict)  # broker.session.timeout.ms, ...
    lease_ttl_ms: int = field(default_factory=lambda: int(defaults()["kraftlake.controller.lease.ttl.ms"]))
    metrics_address: tuple[str, int] | None = None  # where to serve the metrics (host, port; 0: any free port)


def controller_lease(warehouse: Warehouse, settings: ControllerSettings) -> Lease:
    """The warehouse's controller lease (``storage.lease``): one controller per warehouse."""
    return Lease(warehouse.root, "controller", settings.lease_ttl_ms, storage_options=warehouse.storage_options)


def _plan(spec: StructSpec) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """A struct's field names, and the fields that need more than a copy (nested structs, bytes)."""
    plan = _PLANS.get(id(spec))
    if plan is None:
        special = tuple(f for f in spec.fields if f.struct is not None or f.element in ("bytes", "records"))
        plan = _PLANS[id(spec)] = (tuple(f.name for f in spec.fields), special)
    return plan


_PLANS: dict[int, tuple[tuple[str, ...], tuple[Any, ...]]] = {}


def _with_nulls(spec: StructSpec, data: dict) -> dict:
    """The payload as replay expects it: every field present (Spark's JSON omits a nested struct's
    absent fields) and bytes as bytes (Spark's JSON carries them as base64)."""
    names, special = _plan(spec)
    if not special and len(data) == len(names):
        return data  # to_json(ignoreNullFields=false) wrote every field of the type's struct column
    out = {name: data.get(name) for name in names}
    for f in special:
        value = out[f.name]
        if value is not None:
            if f.struct is not None:
                value = [_with_nulls(f.struct, v) for v in value] if f.is_array else _with_nulls(f.struct, value)
            else:
                value = [base64.b64decode(v) for v in value] if f.is_array else base64.b64decode(value)
            out[f.name] = value
    return out


def _event(offset: Any, leader_epoch: Any, ts: Any, type_: str, version: Any, payload: str | None,
           source: Any, position: Any) -> dict:
    data = json.loads(payload) if payload else {}
    return {"offset": int(offset), "leader_epoch": int(leader_epoch), "timestamp": int(ts), "type": type_,
            "version": int(version), "data": _with_nulls(registry()[type_], data),
            "source": source if isinstance(source, str) else None,
            "position": None if position is None or position != position else int(position)}  # NaN: null


def events_of_frames(frames: Iterator[Any]) -> tuple[list[dict], Changes | None, Heartbeats | None]:
    """The events of a shard's routed pandas frames, column by column (no per-row Series or dict), and
    the simple PartitionChangeRecords and the heartbeats that crossed as columns among them, as ``Changes``
    and ``Heartbeats``."""
    events: list[dict] = []
    parts: list[Changes] = []
    beats: list[Heartbeats] = []
    for frame in frames:
        columns = frame["payload"].isna()
        simple = columns & (frame["type"] == "PartitionChangeRecord")
        if simple.any():
            parts.append(_changes(frame[simple]))
        heartbeats = columns & (frame["type"] == HEARTBEAT)
        if heartbeats.any():
            beats.append(_heartbeats(frame[heartbeats]))
        if columns.any():
            frame = frame[~(simple | heartbeats)]
        events.extend(_event(*values) for values in zip(*(frame[c].tolist() for c in ROUTED_COLUMNS)))
    return events, (Changes.concat(parts) if parts else None), (Heartbeats.concat(beats) if beats else None)


def _sources(frame: Any) -> tuple[list, list]:
    """The frame's ``source`` and ``position`` columns as the events hold them (NaN: null)."""
    return ([s if isinstance(s, str) else None for s in frame["source"].tolist()],
            [None if p is None or p != p else int(p) for p in frame["position"].tolist()])


def _heartbeats(frame: Any) -> Heartbeats:
    """Heartbeats that crossed as ``routing.HEARTBEAT_COLUMNS``, as columns (``Heartbeats.event``: the events ``_event``
    makes of their JSON)."""
    sources, positions = _sources(frame)
    return Heartbeats.of_columns(*(frame[c].to_numpy() for c in ("offset", "ts", "leader_epoch", "version")),
                                 sources, positions, *(frame[c].to_numpy() for c in HEARTBEAT_FILL),
                                 [None if v is None else v.tolist() for v in frame["h_dirs"].tolist()])


def _changes(frame: Any) -> Changes:
    def ints(column: str, dtype: Any = np.int32) -> Any:
        return frame[column].to_numpy().astype(dtype)

    sources, positions = _sources(frame)
    return Changes(ints("offset", np.int64), ints("ts", np.int64), ints("leader_epoch"), ints("version"),
                   sources, positions,
                   [normalize_uuid(t) for t in frame["c_topic"].tolist()], ints("c_partition"), ints("c_leader"),
                   [None if v is None else tuple(v.tolist()) for v in frame["c_isr"].tolist()], ints("c_recovery"))


def unpacked_frames(frames: Iterable[Any]) -> Iterator[Any]:
    """A shard's rows (``routing.routed``) from the packed frames Spark hands the shard (``routing.pack_routed``): a
    pandas frame per stream, made as pyspark makes one of each Arrow batch of a group's rows (an int column
    with nulls as floats, lists as numpy arrays), one at a time, so that no more is held at once than
    before. The streams go in the order of their first offsets; Spark's shuffle keeps no order, and ``step``
    orders the events anyway."""
    blobs = sorted(((first, rows) for frame in frames for first, rows in zip(frame["first"].tolist(),
                                                                               frame["rows"].tolist())),
                   key=operator.itemgetter(0))
    for _, rows in blobs:
        yield pa.ipc.open_stream(rows).read_all().to_pandas()


def shard_function(shards: int, kafka_config: Mapping[str, str], keys: list[int] | None = None):
    """The function ``applyInPandasWithState`` runs per shard and micro-batch (pickled to executors);
    ``keys`` are the shards' group keys (``routing.packed_batches``)."""
    config = dict(kafka_config)
    shard_of = {k: s for s, k in enumerate(range(shards) if keys is None else keys)}

    def run(key: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        shard = shard_of[int(key[0])]
        with collector_paused(age=False):
            current = _load_state(shard, state.get[0] if state.exists else None)
            events, changes, heartbeats = events_of_frames(unpacked_frames(frames))
            outputs = step(shard, shards, current, events, config, changes=changes, heartbeats=heartbeats)
            _save_state(shard, current, state)
            frame = outputs_frame(outputs)
        yield frame

    return run


# The state store holds every shard's state as ``_STATE_MAGIC + token + ShardState.to_bytes()``, a new
# random token per write. Each Python worker keeps the objects of the states it wrote last, by shard
# and token: when the store hands back the bytes with the same token, they are exactly that object's
# serialisation, so it is reused instead of parsed (ADR 0004). Any other bytes (a restart, a batch
# re-run from an older version, a shard last run by another worker) miss and are parsed. An entry is
# taken out while its step runs, so a step that fails half-way leaves nothing behind.
_STATE_MAGIC = b"KLS1"  # not a valid start of the older layout (a last offset of 5.4e18)
_STATE_CACHE: dict[int, tuple[bytes, ShardState]] = {}  # only module-level functions may touch it:
# ``run`` is pickled by value, with a copy of the globals it names


def _save_state(shard: int, current: ShardState, state: Any) -> None:
    token = os.urandom(16)
    state.update((_STATE_MAGIC + token + current.to_bytes(),))
    _STATE_CACHE[shard] = (token, current)


def _load_state(shard: int, raw: bytes | None) -> ShardState:
    cached = _STATE_CACHE.pop(shard, None)
    if raw is not None and raw[:4] == _STATE_MAGIC:
        if cached is not None and cached[0] == raw[4:20]:
            return cached[1]
        raw = raw[20:]
    return parse_state(f"controller shard {shard}'s state", lambda: ShardState.from_bytes(raw))


def outputs_frame(outputs: list[Output | Block | Answers]) -> Any:
    """A shard's outputs as one pandas frame of ``OUTPUT_SCHEMA``: the rows of each of ``TYPED_TABLES`` as
    one Arrow IPC stream (one frame row), and so its answers (``answers_to_arrow``) and its controller_log
    rows; every other row (and the deletes' keys) as JSON.

    Those rows thus cross to the driver without pandas or Spark touching them value by value (pyspark
    converts array columns of a pandas frame element by element), and without a JSON round trip each."""
    import pandas as pd

    groups: dict[str, list[Output]] = {name: [] for name in TYPED_TABLES}
    blocks: dict[str, list[pa.Table]] = {name: [] for name in TYPED_TABLES}
    answers: list[dict] = []
    answered: list[pa.Table] = []  # shard 0's answers to heartbeats decided on the columns
    logged: list[dict] = []
    other: list[Output] = []
    for o in outputs:
        if isinstance(o, Answers):
            answered.append(o.arrow())
        elif isinstance(o, Block):
            blocks[o.table].append(o.rows)
        elif o.op == "response":
            answers.append(o.row)
        elif o.table == "controller_log":
            logged.append(o.row)
        else:
            (groups[o.table] if o.op != "delete" and o.table in groups else other).append(o)
    frame: dict[str, list] = {"table": [], "op": [], "offset": [], "seq": [], "row": [], "rows": []}
    for o in other:
        for column, value in zip(frame.values(), (o.table, o.op, o.offset, o.seq,
                                                   json.dumps(o.row, default=json_bytes), None)):
            column.append(value)
    typed = {name: blocks[name] + ([typed_table(name, groups[name])] if groups[name] else []) for name in TYPED_TABLES}
    typed["responses"] = answered + ([answers_to_arrow(answers)] if answers else [])
    typed["controller_log"] = [controller_log_to_arrow(logged)] if logged else []
    for name, parts in typed.items():
        if parts:
            values = (name, ARROW_OP, -1, 0, None, ipc_stream(pa.concat_tables(parts)))
            for column, value in zip(frame.values(), values):
                column.append(value)
    return pd.DataFrame({**frame, "offset": pd.Series(frame["offset"], dtype="int64"),
                         "seq": pd.Series(frame["seq"], dtype="int32")})


def typed_table(name: str, outputs: list[Output]) -> pa.Table:
    """Outputs of one table as Arrow, in ``rows_table``'s layout (one op per call: the outputs' first)."""
    schema = table_arrow_schema(name)
    rows = [o.row for o in outputs]
    transposed = zip(*map(operator.itemgetter(*schema.names), rows))
    table = rows_table(name, "", [o.offset for o in outputs], [o.seq for o in outputs],
                       dict(zip(schema.names, transposed)))
    return table.set_column(0, "op", pa.array([o.op for o in outputs], pa.string()))


def _arrow_rows(name: str, rows: list[dict]) -> pa.Table:
    if name == "rejected":  # raw bytes crossed the JSON hop as base64
        rows = [{**r, "raw": base64.b64decode(r["raw"])} if r.get("raw") is not None else r for r in rows]
    return rows_to_arrow(name, rows)


@dataclass
class BatchOutputs:
    """A micro-batch's outputs as the sink gets them, as Arrow tables in no particular order: the rows of
    ``TYPED_TABLES`` (``typed_table``'s layout), controller_log's (its table's) and the shards' answers
    (``answers_schema``); every other row as an ``Output``."""

    typed: dict[str, pa.Table]
    other: list[Output]


def _outputs_of(batch: pa.Table) -> BatchOutputs:
    is_arrow = pc.equal(batch.column("op"), ARROW_OP)
    parts: dict[str, list[pa.Table]] = {}
    streams = batch.filter(is_arrow)
    # each stream read from its Arrow buffer, not from a bytes copy of it (at 10^6 partitions the first
    # micro-batch's streams are hundreds of MB, and the driver's memory peaks in its sink)
    for name, rows in zip(streams.column("table").to_pylist(), streams.column("rows")):
        parts.setdefault(name, []).append(pa.ipc.open_stream(rows.as_buffer()).read_all())
    del streams
    rest = batch.filter(pc.invert(is_arrow)).select(["table", "op", "offset", "seq", "row"]).to_pylist()
    return BatchOutputs({name: pa.concat_tables(tables) for name, tables in parts.items()},
                        [Output(r["table"], r["op"], r["offset"], r["seq"], json.loads(r["row"])) for r in rest])


def _typed_rows(typed: dict[str, pa.Table], name: str) -> tuple[pa.Table, pa.Table] | None:
    """The typed rows of table ``name``, taken out of ``typed``, in (offset, seq) order: their ``op``,
    ``offset`` and ``seq``, and the rows in the table's schema."""
    part = typed.pop(name, None)  # (the sorted copy replaces it: the sink holds one of them at a time)
    if part is None or part.num_rows == 0:
        return None
    part = part.sort_by([("offset", "ascending"), ("seq", "ascending")])
    schema = table_arrow_schema(name)
    rows = pa.Table.from_arrays([part.column(f"_{f.name}") for f in schema], schema=schema)
    return part.select(["op", "offset", "seq"]), rows


def _as_outputs(name: str, typed_rows: tuple[pa.Table, pa.Table]) -> list[Output]:
    """Typed rows back into ``Output``s, rows as the shards made them (timestamps in ms)."""
    meta, rows = typed_rows
    for column in TIMESTAMP_COLUMNS & set(rows.column_names):
        index = rows.schema.get_field_index(column)
        rows = rows.set_column(index, column, pc.divide(rows.column(column).cast(pa.int64()), 1000))
    return [Output(name, m["op"], m["offset"], m["seq"], r) for m, r in zip(meta.to_pylist(), rows.to_pylist())]


def merged_answers(answers: pa.Table) -> pa.Table:
    """``responses`` rows from the shards' answers (``answers_schema``), one per request in offset order: an
    answer of one shard as it came, the answers of several merged as ``shards.merged_responses`` merges
    them (a shard alone answers most requests, shard 0 every steady heartbeat).

    Several shards' answers to one request that are the same JSON text are that text (a response merged
    with itself is itself); the others are parsed once per distinct text (the shards that do not own a
    request's partitions give the same answer to many requests) and merged in shard order."""
    answers = answers.sort_by([("offset", "ascending"), ("shard", "ascending")])
    offsets = answers.column("offset").to_numpy()
    first = np.ones(len(offsets), bool)
    first[1:] = offsets[1:] != offsets[:-1]
    rows = answers.filter(first).drop_columns(["shard"])
    if first.all():
        return rows
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(offsets))
    shared = np.flatnonzero(ends - starts > 1)
    counts = (ends - starts)[shared]
    texts = answers.column("data").filter(pa.array(np.isin(np.cumsum(first) - 1, shared))).to_pylist()
    parsed: dict[str, Any] = {}

    def data(text: str) -> Any:
        value = parsed.get(text)
        if value is None:
            value = parsed[text] = json.loads(text)
        return value

    mask = np.zeros(rows.num_rows, bool)
    merged = []
    start = 0
    for place, count in zip(shared.tolist(), counts.tolist()):
        parts = texts[start:start + count]
        start += count
        if parts.count(parts[0]) < count:
            mask[place] = True
            merged.append(json.dumps(merge_responses([data(t) for t in parts]), default=json_bytes))
    index = rows.schema.get_field_index("data")
    column = pc.replace_with_mask(rows.column("data"), pa.array(mask), pa.array(merged, pa.string()))
    return rows.set_column(index, rows.schema.field(index), column)


def write_outputs(warehouse: Warehouse, outputs: BatchOutputs, txn: tuple[str, int],
                  config: Mapping[str, str] | None = None) -> dict[str, int]:
    """Commit one micro-batch's rows: MERGE for state tables (last op per key wins), append for logs; the
    leader imbalance judged over the shards' counts first (``shards.leader_imbalance``, ``config``'s
    ``leader.imbalance.per.broker.percentage``).

    Typed rows go to Delta as the Arrow columns they arrived in; only when a table also has rows of
    the other kind (deletes, or a key written twice) do they take the row-by-row path below."""
    typed, rest = outputs.typed, outputs.other
    counts = [o for o in rest if o.table == LEADER_COUNTS]
    if counts:
        rest = [o for o in rest if o.table != LEADER_COUNTS]
        rest += leader_imbalance(counts, open_anomalies(warehouse, (IMBALANCE,)), config or {})
    # keys never span shards (a topic lives on one shard, brokers and configs come from shard 0 only),
    # so (offset, seq) orders every key's rows
    ordered = sorted(rest, key=lambda o: (o.offset, o.seq))
    written = {}
    generated = typed.get("controller_log")
    if generated is not None and generated.num_rows:
        warehouse.append("controller_log", generated, controller_log_schema(), txn)
        written["controller_log"] = generated.num_rows
    answers = typed.get("responses")
    if answers is not None and answers.num_rows:
        rows = merged_answers(answers)
        warehouse.append("responses", rows, table_arrow_schema("responses"), txn)
        written["responses"] = rows.num_rows
    for name in APPEND_TABLES:
        mine = [o for o in ordered if o.table == name]
        fast = _typed_rows(typed, name)
        if fast is not None and not mine:
            warehouse.append(name, fast[1], table_arrow_schema(name), txn)
            written[name] = fast[1].num_rows
            continue
        if fast is not None:
            mine = sorted(mine + _as_outputs(name, fast), key=lambda o: (o.offset, o.seq))
        rows = [o.row for o in mine]
        if rows:
            warehouse.append(name, _arrow_rows(name, rows), table_arrow_schema(name), txn)
            written[name] = len(rows)
    for name in STATE_TABLES:
        keys = list(table_keys(name))
        schema = table_arrow_schema(name)
        mine = [o for o in ordered if o.table == name]
        fast = _typed_rows(typed, name)
        if fast is not None and not mine and fast[1].group_by(keys).aggregate([]).num_rows == fast[1].num_rows:
            warehouse.upsert(name, fast[1], keys, schema, txn)  # upserts only, one per key
            written[name] = fast[1].num_rows
            continue
        if fast is not None:
            mine = sorted(mine + _as_outputs(name, fast), key=lambda o: (o.offset, o.seq))
        final: dict[tuple, Output] = {}
        for o in mine:
            final[tuple(o.row[k] for k in keys)] = o
        if not final:
            continue
        upserts = [o.row for o in final.values() if o.op == "upsert"]
        deletes = [o.row for o in final.values() if o.op == "delete"]
        delete_keys = pa.Table.from_pylist(deletes, schema=pa.schema([schema.field(k) for k in keys])) \
            if deletes else None
        warehouse.upsert(name, _arrow_rows(name, upserts), keys, schema, txn, delete_keys)
        written[name] = len(final)
    return written


def reset(warehouse: Warehouse, checkpoint: str) -> None:
    """Forget the checkpoint, the replay's rejections and every derived table, so the next run replays
    the log from the start. The tables go last: while one is left, ``check_start`` refuses to start, so
    a reset that dies half-way is simply run again."""
    delete_dir(checkpoint, warehouse.storage_options)
    if warehouse.exists("rejected"):  # shared with ingest, whose rejections are input and stay
        warehouse.table("rejected").delete("stage = 'replay'")
    for name in derived_tables():
        delete_dir(warehouse.path(name), warehouse.storage_options)


def check_start(warehouse: Warehouse, checkpoint: str) -> None:
    """Derived tables without a checkpoint would be replayed into twice: refuse with the remedy. Tables
    that were only created (a run killed before Spark wrote its checkpoint) hold nothing to replay into
    twice, and do not count."""
    if query_id(checkpoint, warehouse.storage_options) is None:
        leftovers = [name for name in derived_tables() if warehouse.exists(name)
                     and (warehouse.version(name) > 0 or warehouse.read_arrow(name, columns=[]).num_rows)]
        if leftovers:
            raise RuntimeError(
                f"the checkpoint {checkpoint} is missing but {', '.join(leftovers)} exist: they were built by "
                "an earlier run. Run with --reset to rebuild them from the metadata log.")
    if not warehouse.exists("metadata_log"):
        raise RuntimeError(f"no metadata_log in {warehouse.root}: ingest a log first (jobs/ingest.py)")


def controller_input(warehouse: Warehouse, shards: int, keys: list[int]) -> dict[str, Any]:
    """The columns and types of ``metadata_log`` the controller reads: its records and requests, not the
    NoOpRecords and quorum traffic it skips (a third of a typical log, and most of the table's columns),
    which the source then never hands to Spark. On the delta-rs engine the payloads of the many rarer types
    come folded into one JSON string column (``json_payload``), the hot ones (``STRUCT_PAYLOADS``) keep their
    struct columns, and the source's read tasks route and pack the rows themselves (``routing``)."""
    present = [f.name for f in warehouse.table("metadata_log").schema().to_arrow()]
    payloads = [c for c in present if c not in FIXED_COLUMNS and c not in SKIPPED]
    # every type, those without fields (EndTransactionRecord, ...) too: they have no column
    types = sorted(t for t in registry().by_name if t not in SKIPPED)
    fixed = [c for c in ROUTED_FIXED if c in present]
    if warehouse.engine == NATIVE:
        return {"columns": fixed + payloads, "types": types}
    # a micro-batch's first stage (the source, routing, packing) in a task per core: one of 200,000 requests
    # in one task held a core alone for a third of the micro-batch
    return {"columns": fixed + [c for c in payloads if c in STRUCT_PAYLOADS], "types": types,
            "json_payload": [c for c in payloads if c not in STRUCT_PAYLOADS],
            "min_partitions": warehouse.spark.sparkContext.defaultParallelism,
            "transform": (f"{packed_batches.__module__}:{packed_batches.__name__}",
                          {"shards": shards, "keys": list(keys)}, PACKED_SCHEMA)}


STRUCT_PAYLOADS = ("PartitionChangeRecord", "PartitionRecord", HEARTBEAT)
ROUTED_FIXED = ("offset", "leader_epoch", "timestamp", "type", "version", "source", "position")


def controller_outputs(warehouse: Warehouse, settings: ControllerSettings, keys: list[int]) -> Any:
    """The controller query's streaming frame, before a sink (``keys``: the shards' group keys), built without
    writing anything: a standby builds one before it holds the lease (``warm_up``)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    source = warehouse.read_stream("metadata_log", max_records_per_batch=settings.max_records_per_batch,
                                   max_batch_ms=settings.max_batch_ms,
                                   **controller_input(warehouse, settings.shards, keys))
    if warehouse.engine == NATIVE:  # Delta's own source: its rows routed and packed in Python all the same
        source = source.mapInArrow(partial(packed_batches, shards=settings.shards, keys=keys), PACKED_SCHEMA)
    return (source
            .groupBy("shard")
            .applyInPandasWithState(shard_function(settings.shards, settings.kafka_config, keys), OUTPUT_SCHEMA,
                                    STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout))


def start(warehouse: Warehouse, settings: ControllerSettings):
    """Start the controller query; returns the ``StreamingQuery``."""
    check_start(warehouse, settings.checkpoint)
    for name in tables_of("controller"):
        warehouse.prepare(name, table_arrow_schema(name))
    keys = group_keys(settings.checkpoint, settings.shards, int(warehouse.spark.conf.get(SHUFFLE_PARTITIONS)),
                      warehouse.storage_options)
    outputs = controller_outputs(warehouse, settings, keys)
    return start_sink(outputs, "controller", settings.checkpoint, settings.once, settings.trigger_interval_ms,
                      lambda batch_df, txn: write_outputs(warehouse, _outputs_of(batch_df.toArrow()), txn,
                                                          settings.kafka_config),
                      warehouse.storage_options)


def _same_rows(rows: Any) -> Any:
    return rows


def warm_up(warehouse: Warehouse, settings: ControllerSettings) -> None:
    """What a standby does while it waits for the lease, writing nothing, so that its takeover finds it done.

    One tiny grouped pandas job touching no table: the Python worker daemon started, the shuffle's, Arrow's
    and the Python runner's classes loaded and compiled, and two Python workers (the shards' two shuffle
    partitions) that imported this module, as the shards' function needs (``_same_rows`` is pickled by
    reference). Then both queries' frames built and dropped (when there is a ``metadata_log``): the data
    source registered, its planner's Python worker up, the analysis of both plans loaded; those measured
    2.1 s and 1.3 s the first time in a session, 0.1 s and 0.6 s the next. The frames themselves are built
    again after the takeover: the log's columns or the checkpoint's keys may change meanwhile."""
    spark = warehouse.spark
    spark.range(0, 2, numPartitions=2).groupBy("id").applyInPandas(_same_rows, "id long").toArrow()
    if warehouse.exists("metadata_log"):
        controller_outputs(warehouse, settings, spread_keys(settings.shards, int(spark.conf.get(SHUFFLE_PARTITIONS))))
        quorum_outputs(warehouse, settings.kafka_config, settings.max_records_per_batch, settings.max_batch_ms)


# the log's first rows a standby's warm-up query replays (``warm_up_query``): its registrations, features and
# first topics, enough for every stage of a micro-batch to run
WARM_UP_ROWS = 200


def warm_up_query(warehouse: Warehouse, settings: ControllerSettings) -> None:
    """A standby's first warm-up, after ``warm_up``: the controller query itself, run once (``--once``) over
    a copy of the log's first ``WARM_UP_ROWS`` rows in a scratch warehouse with its own checkpoint, outside
    the warehouse (deleted after). The takeover's first micro-batch then finds the streaming engine's code
    paths loaded and compiled: the micro-batch's planning, the stateful operator and its state store, the
    ``foreachBatch`` sink and the Delta writes, which cost the takeover ~3 s before its sink's first job.
    The source's Python runner is not kept: Spark starts one per query. Run once per standby, not every
    ``WARM_UP_EVERY_S``: the JVM keeps what it loaded and compiled."""
    if not warehouse.exists("metadata_log"):
        return
    head = warehouse.read_offsets("metadata_log", 0, WARM_UP_ROWS - 1)
    scratch = tempfile.mkdtemp(prefix="kraftlake-warm-up-")
    try:
        copy = Warehouse(scratch, engine=warehouse.engine, spark=warehouse.spark)
        copy.append("metadata_log", head, head.schema)
        once = replace(settings, checkpoint=os.path.join(scratch, "_checkpoints", "controller"), once=True)
        start(copy, once).awaitTermination()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# Spark stops a Python worker that has been idle for a minute (its PythonWorkerFactory): a standby waiting for
# hours warms up again more often than that, so that its workers are still there when it takes over.
WARM_UP_EVERY_S = 30.0


@contextmanager
def keep_warm(warehouse: Warehouse, settings: ControllerSettings, every_s: float = WARM_UP_EVERY_S,
              out: TextIO | None = None) -> Iterator[Callable[[], None]]:
    """``warm_up`` and ``warm_up_query`` now, then ``warm_up`` every ``every_s`` in a thread until the function
    given is called or the block ends (either waits for a warm-up under way, so that the takeover's first
    micro-batch has the machine to itself). A warm-up that fails stops the warming, said in one line: a
    takeover works without it, slower."""
    stop = threading.Event()

    def again() -> None:
        while not stop.wait(every_s):
            try:
                warm_up(warehouse, settings)
            except Exception as exc:  # py4j's and Spark's errors alike: nothing is written, nothing to undo
                print(f"[controller] standby: warming up failed, no longer tried: {spark_error(str(exc))[:300]}",
                      file=out or sys.stderr, flush=True)
                return

    def stopped() -> None:
        stop.set()
        thread.join()

    warm_up(warehouse, settings)
    try:
        warm_up_query(warehouse, settings)
    except Exception as exc:  # as below: the takeover works without it, slower
        print(f"[controller] standby: the warm-up query failed: {spark_error(str(exc))[:300]}",
              file=out or sys.stderr, flush=True)
    thread = threading.Thread(target=again, name="kraftlake-warm-up", daemon=True)
    thread.start()
    try:
        yield stopped
    finally:
        stopped()


@contextmanager
def serving(address: tuple[str, int] | None, out: TextIO | None = None) -> Iterator[MetricsServer | None]:
    """The metrics server at ``address`` while the block runs (None: no server), said on stderr."""
    if address is None:
        yield None
        return
    try:
        server = MetricsServer(*address)
    except OSError as exc:
        raise RuntimeError(f"cannot serve the metrics on {address[0]}:{address[1]}: {exc.strerror or exc} "
                           "(kraftlake.controller.metrics.port / --metrics-port)") from None
    host, port = server.address
    print(f"[controller] metrics at http://{host}:{port}{METRICS_PATH}", file=out or sys.stderr, flush=True)
    try:
        yield server
    finally:
        server.close()


def run(warehouse: Warehouse, settings: ControllerSettings, meter: Meter | None = None,
        status_every: float | None = None, out: TextIO | None = None, lease: Lease | None = None,
        started: float | None = None) -> bool:
    """Run the controller query and the quorum query (``quorum_query``) until they end (``--once``) or
    forever; False if stopped by a signal (see ``queries.supervise``). Progress in log offsets goes to
    ``meter``; when running continuously, a status line every ``status_every`` seconds says how far behind
    the log's end the controller is.

    Holds the warehouse's controller lease throughout (``lease``, if the caller took it already; else it
    is taken here, and ``LeaseHeld`` raised if another controller holds it). Losing it stops the queries; so
    does a backfill of ``metadata_log`` below what they read (``RuntimeError`` saying to rebuild with --reset).

    ``started``: when the job started (``time.monotonic()``); running continuously with status lines, a line
    then says how long starting the queries took, since a restart's downtime is what an operator weighs."""
    holding = nullcontext(lease) if lease is not None else controller_lease(warehouse, settings).held()
    with holding as held:
        guard = BackfillGuard(warehouse, settings.checkpoint)  # refuses tables that missed a backfill
        guard.check()
        guard.save()  # before the queries write: a checkpoint always says which version its tables started from
        meter = meter or Meter("controller", "offsets", enabled=False, out=out)
        timed = started is not None and not settings.once and status_every is not None

        def start_quorum_query() -> Any:
            quorum = start_quorum(warehouse, settings.checkpoint, settings.once, settings.kafka_config,
                                  settings.max_records_per_batch, settings.trigger_interval_ms, settings.max_batch_ms)
            if timed:
                meter.emit(f"[{meter.label}] quorum query started {time.monotonic() - started:.1f} s after the "
                           "job's start")
            return quorum

        queries = {"controller": start(warehouse, settings)}
        # running continuously, the quorum query waits for the controller's first micro-batch (``supervise``):
        # the two first micro-batches, each the slowest of its query, no longer share two cores, and a restart's
        # downtime is the controller's. A replay (--once) runs both at once, as its end is what counts.
        if settings.once:
            queries["quorum"] = start_quorum_query()
        if timed:
            meter.emit(f"[{meter.label}] controller query started {time.monotonic() - started:.1f} s after the job's "
                       "start; the quorum query starts after its first micro-batch")
        progress = LogProgress(MetadataLogEnd(warehouse), meter, settings.once, status_every)
        with serving(settings.metrics_address, out) as server:
            watch = progress if server is None else ControllerMetrics(progress, warehouse, settings.kafka_config,
                                                                      server)
            finished = supervise(queries, settings.once, settings.checkpoint, watch, out, held, guard.check,
                                 {} if settings.once else {"quorum": start_quorum_query})
        try:
            guard.save()
        except OSError:
            pass  # only a shortcut: the next start then reads the commits since the version saved at this start
        return finished
