"""The controller's events routed to its shards and packed for the shuffle, in Arrow, in Python.

A micro-batch's first stage used to be Spark SQL over the source's rows (the payload as JSON, the shard
by a topic's hash) and then ``mapInArrow`` to pack them: the JVM took every row of the wide log in, ran
the projection and wrote the rows out to Arrow again, 5.9 s of JVM CPU per 10^6 records at the
headline, more than the shards' steps. Here the same columns are made from the Arrow batches the
source reads, and the JVM only sees the packed rows (a few per batch): the delta-rs source calls
``packed_batches`` in its read tasks (``datasource``'s ``transform``), and the native engine's stream
goes through ``mapInArrow`` of the same function.

What crosses: per source batch and shard, that shard's rows as one Arrow IPC stream (``PACKED_SCHEMA``;
``first``: its lowest offset). A row has the envelope (``offset``, ``leader_epoch``, ``ts`` in ms,
``type``, ``version``, ``source``, ``position``) and either its payload as JSON (``payload``, as Spark's
``to_json`` with null fields wrote it), or, for a simple PartitionChangeRecord (``is_simple``) the
``CHANGE_COLUMNS`` and for a heartbeat with every scalar set the ``HEARTBEAT_COLUMNS``, with no JSON.
A topic's record goes to its shard (crc32 of its id, as Spark's ``crc32``/``pmod``), anything else
to every shard; NoOpRecords and the quorum's traffic to none.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlake.codec.events import json_bytes
from kraftlake.controller.heartbeats import HEARTBEAT
from kraftlake.controller.shards import SKIPPED, TOPIC_SCOPED
from kraftlake.image.partition_changes import SIMPLE_RECOVERY_STATES, UNSET_FIELDS
from kraftlake.metadata.tables import FIXED_COLUMNS

PAYLOAD = "payload"  # the source's folded JSON of the rarer types (``storage.PAYLOAD``), and the routed column
PACKED_SCHEMA = "shard int not null, first long not null, rows binary not null"
ROUTED_COLUMNS = ("offset", "leader_epoch", "ts", "type", "version", "payload", "source", "position")
# A simple PartitionChangeRecord (``partition_changes.is_simple``) crosses the shuffle as these columns and
# no JSON payload, and reaches the shard step as ``Changes`` columns: no JSON, no dict per record.
CHANGE_COLUMNS = {"c_topic": "TopicId", "c_partition": "PartitionId", "c_leader": "Leader", "c_isr": "Isr",
                  "c_recovery": "LeaderRecoveryState"}
# A BrokerHeartbeatRequest (nine requests in ten, each sent to every shard) crosses as these columns and no
# JSON payload when its scalar fields are set; on other rows they hold a filler (``HEARTBEAT_FILL``), so that
# pandas keeps the 64-bit ints exact instead of making floats of a column with nulls.
HEARTBEAT_COLUMNS = {"h_broker": "BrokerId", "h_epoch": "BrokerEpoch", "h_offset": "CurrentMetadataOffset",
                     "h_fence": "WantFence", "h_shutdown": "WantShutDown", "h_dirs": "OfflineLogDirs"}
HEARTBEAT_FILL = {"h_broker": 0, "h_epoch": 0, "h_offset": 0, "h_fence": False, "h_shutdown": False}
CHANGE = "PartitionChangeRecord"


def _field(rows: pa.Table, column: str, name: str) -> pa.ChunkedArray:
    return pc.struct_field(rows.column(column), name)


def _where(mask: pa.ChunkedArray, values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    """``values`` on the rows of ``mask``, null elsewhere (Spark's ``when`` without ``otherwise``)."""
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def _is(rows: pa.Table, kind: str) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(rows.column("type"), kind), False)


def _simple_changes(rows: pa.Table) -> pa.ChunkedArray:
    """Rows that are simple PartitionChangeRecords (``partition_changes.is_simple``)."""
    if CHANGE not in rows.column_names:
        return pa.chunked_array([pa.repeat(False, rows.num_rows)])
    mask = _is(rows, CHANGE)
    for name in UNSET_FIELDS:
        mask = pc.and_(mask, pc.is_null(_field(rows, CHANGE, name)))
    directories = _field(rows, CHANGE, "Directories")
    none = pc.equal(pc.fill_null(pc.list_value_length(directories), 0), 0)
    mask = pc.and_(mask, pc.or_(pc.is_null(directories), none))
    recovery = _field(rows, CHANGE, "LeaderRecoveryState")
    return pc.and_(mask, pc.fill_null(pc.is_in(recovery, pa.array(SIMPLE_RECOVERY_STATES, recovery.type)), False))


def _plain_heartbeats(rows: pa.Table) -> pa.ChunkedArray:
    """Heartbeats whose every scalar field is set (the rest cross as JSON, and the step refuses them)."""
    if HEARTBEAT not in rows.column_names:
        return pa.chunked_array([pa.repeat(False, rows.num_rows)])
    mask = _is(rows, HEARTBEAT)
    for name in HEARTBEAT_FILL:
        mask = pc.and_(mask, pc.is_valid(_field(rows, HEARTBEAT, HEARTBEAT_COLUMNS[name])))
    return mask


def _payloads(rows: pa.Table, columns: Sequence[str], skip: np.ndarray) -> pa.Array:
    """Each row's payload as JSON: of the one struct column it has (every field, nulls too, bytes as base64,
    as Spark's ``to_json`` with ``ignoreNullFields`` false), else the source's folded ``payload``; null for
    the rows of ``skip`` (which cross as columns) and rows with none."""
    texts: list[str | None] = [None] * rows.num_rows
    for name in columns:
        column = rows.column(name)
        if column.null_count == len(column):
            continue
        present = np.flatnonzero(pc.is_valid(column).to_numpy(zero_copy_only=False) & ~skip)
        present = [i for i in present.tolist() if texts[i] is None]  # the first column a row has wins
        if present:
            for i, value in zip(present, column.take(present).to_pylist()):
                texts[i] = json.dumps(value, separators=(",", ":"), default=json_bytes)
    if PAYLOAD in rows.column_names:
        folded = rows.column(PAYLOAD).to_pylist()
        texts = [t if t is not None or s else f for t, f, s in zip(texts, folded, skip.tolist())]
    return pa.array(texts, pa.string())


def _targets(rows: pa.Table, shards: int, keys: Sequence[int]) -> pa.Array:
    """Each row's shard key: a topic's record goes to ``keys[crc32(topic id) mod shards]``; null (every
    shard) for anything else, and for a topic's record without a topic id."""
    scoped = [t for t in TOPIC_SCOPED if t in rows.column_names]
    if not scoped:
        return pa.nulls(rows.num_rows, pa.int32())
    topic = pc.coalesce(*[_field(rows, t, TOPIC_SCOPED[t]) for t in scoped]).combine_chunks()
    mine = pc.fill_null(pc.is_in(rows.column("type"), pa.array(list(TOPIC_SCOPED))), False).to_numpy(
        zero_copy_only=False) & topic.is_valid().to_numpy(zero_copy_only=False)
    encoded = topic.dictionary_encode()  # a topic's id hashed once, not once a record
    hashed = np.array([zlib.crc32(t.encode("utf-8")) % shards for t in encoded.dictionary.to_pylist()], np.int64)
    table = np.asarray(keys, np.int32)
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    key = table[hashed[indices]] if len(hashed) else np.zeros(rows.num_rows, np.int32)
    return pa.array(key, pa.int32(), mask=~mine)


def routed(rows: pa.Table, shards: int, keys: Sequence[int]) -> pa.Table:
    """The source's rows (the log's envelope and payload columns, as Spark types them) as the shards take
    them, with column ``shard``: see the module's docstring."""
    rows = rows.filter(pc.invert(pc.fill_null(pc.is_in(rows.column("type"), pa.array(sorted(SKIPPED))), True)))
    simple, plain = _simple_changes(rows), _plain_heartbeats(rows)
    as_columns = pc.or_(simple, plain).to_numpy(zero_copy_only=False)
    structs = [f.name for f in rows.schema if f.name not in FIXED_COLUMNS and pa.types.is_struct(f.type)]
    structs.sort(key=lambda c: c not in TOPIC_SCOPED)  # (the order Spark's coalesce had)
    micros = rows.column("timestamp").cast(pa.timestamp("us", "UTC")).cast(pa.int64())
    columns = {"shard": _targets(rows, shards, keys), "offset": rows.column("offset"),
               "leader_epoch": rows.column("leader_epoch"),
               "ts": pc.floor(pc.divide(pc.cast(micros, pa.float64()), 1000.0)).cast(pa.int64())
               if micros.null_count else pa.array(micros.to_numpy() // 1000, pa.int64()),
               "type": rows.column("type"), "version": rows.column("version"),
               "payload": _payloads(rows, structs, as_columns),
               "source": rows.column("source"), "position": rows.column("position")}
    for name, field in CHANGE_COLUMNS.items():
        columns[name] = _where(simple, _field(rows, CHANGE, field)) if CHANGE in rows.column_names \
            else pa.nulls(rows.num_rows)
    for name, field in HEARTBEAT_COLUMNS.items():
        if HEARTBEAT not in rows.column_names:
            columns[name] = pa.repeat(HEARTBEAT_FILL[name], rows.num_rows) if name in HEARTBEAT_FILL \
                else pa.nulls(rows.num_rows)
            continue
        value = _where(plain, _field(rows, HEARTBEAT, field))
        columns[name] = pc.fill_null(value, pa.scalar(HEARTBEAT_FILL[name], value.type)) \
            if name in HEARTBEAT_FILL else value
    return pa.table(columns)


def ipc_stream(table: pa.Table | pa.RecordBatch) -> bytes:
    """``table`` as one Arrow IPC stream (lz4-compressed where pyarrow has it)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="lz4" if pa.Codec.is_available("lz4") else None)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write(table)
    return sink.getvalue().to_pybytes()


def pack_routed(batches: Iterable[pa.RecordBatch | pa.Table], keys: Sequence[int]) -> Iterator[pa.RecordBatch]:
    """Routed batches (``routed``) as ``PACKED_SCHEMA`` rows: one per batch and shard that has rows in it.
    Rows going to every shard are written once per shard; a batch of only such rows is written once."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        target = batch.column("shard")
        rows = batch.drop_columns(["shard"])
        if target.null_count == batch.num_rows:
            blob = ipc_stream(rows)
            parts = [(key, rows, blob) for key in keys]
        else:
            everyone = pc.is_null(target)
            parts = []
            for key in keys:
                mine = rows.filter(pc.or_(everyone, pc.fill_null(pc.equal(target, key), False)))
                if mine.num_rows:
                    parts.append((key, mine, ipc_stream(mine)))
        yield pa.RecordBatch.from_arrays(
            [pa.array([key for key, _, _ in parts], pa.int32()),
             pa.array([pc.min(part.column("offset")).as_py() for _, part, _ in parts], pa.int64()),
             pa.array([blob for _, _, blob in parts], pa.binary())], names=["shard", "first", "rows"])


def packed_batches(batches: Iterable[pa.RecordBatch | pa.Table], shards: int, keys: Sequence[int]
                   ) -> Iterator[pa.RecordBatch]:
    """The source's batches routed (``routed``) and packed (``pack_routed``): what the shards' stage reads."""
    return pack_routed((routed(pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b, shards, keys)
                        for b in batches), keys)
