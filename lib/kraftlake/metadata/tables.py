"""The warehouse tables as declared in ``schemas/tables/*.avsc``: columns, keys and roles.

Each table's ``.avsc`` carries, beside its columns, a ``kraftlake`` attribute saying which query writes
it (``ingest``, ``controller``, ``quorum``), how (``state``: MERGE on ``keys``, one row per key;
``append``: every row kept) so that the sinks, ``--reset`` and the tests read one declaration instead
of keeping their own lists.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from kraftlake.metadata.schemas import ARROW_PRIMITIVES, registry, schema_dir

# The warehouse format: every table a release creates carries the Delta table property FORMAT_PROPERTY
# with the format it writes; jobs refuse a warehouse holding a format they cannot read, with what to do.
# A release that changes what a table holds (columns, their meaning, the state the checkpoint keeps)
# bumps FORMAT_VERSION, says here what changed, and either reads the older format or names the migration.
FORMAT_PROPERTY = "kraftlake.format.version"
FORMAT_VERSION = 2
FORMATS = {
    1: "tables without a format property, as release c283518 and earlier wrote them",
    2: "the tables of format 1, stamped with kraftlake.format.version; the controller's lease in _leases/",
}
UNMARKED_FORMAT = 1  # a table without the property
READABLE_FORMATS = (1, 2)

# Delta's Change Data Feed: each commit of a table with this property also records the rows it changed
# (insert, update_preimage, update_postimage, delete), so a downstream stream subscribes to what changed
# instead of diffing the table. Every state table has it (``table_properties``): their rows change in
# place, which a stream of the table cannot show. An append table is its own change feed.
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"

# The envelope of the quorum's traffic (KIP-595 messages between replicas); null on every other event.
ENVELOPE_COLUMNS = ("source_id", "destination_id", "correlation_id")
FIXED_COLUMNS = ("offset", "leader_epoch", "timestamp", "type", "version", "source", "position", *ENVELOPE_COLUMNS)


@lru_cache(maxsize=None)
def table_avro(name: str) -> dict:
    """The Avro schema of a warehouse table (``schemas/tables/<name>.avsc``)."""
    return json.loads((schema_dir() / "tables" / f"{name}.avsc").read_text())


_AVRO_TO_ARROW: dict[str, pa.DataType] = {
    "int": pa.int32(), "long": pa.int64(), "string": pa.string(), "boolean": pa.bool_(),
    "bytes": pa.binary(), "double": pa.float64(), "float": pa.float32(),
}


def arrow_from_avro(avro_type: Any) -> pa.DataType:
    """Arrow type of a plain Avro type (used for the table schemas, which have no Kafka facts)."""
    if isinstance(avro_type, list):
        return arrow_from_avro([t for t in avro_type if t != "null"][0])
    if isinstance(avro_type, str):
        return _AVRO_TO_ARROW[avro_type]
    if avro_type.get("logicalType") == "timestamp-millis":
        return pa.timestamp("us", tz="UTC")  # Delta timestamps are microseconds, UTC
    kind = avro_type["type"]
    if kind == "array":
        return pa.list_(arrow_from_avro(avro_type["items"]))
    if kind == "map":
        return pa.map_(pa.string(), arrow_from_avro(avro_type["values"]))
    if kind == "record":
        return pa.struct([pa.field(f["name"], arrow_from_avro(f["type"])) for f in avro_type["fields"]])
    return arrow_from_avro(kind)


def table_arrow_schema(name: str) -> pa.Schema:
    """A table's Arrow schema; one that ``extends`` another (controller_log: metadata_log) starts with its columns."""
    avro = table_avro(name)
    base = avro.get("kraftlake", {}).get("extends")
    own = pa.schema([pa.field(f["name"], _table_field_type(f),
                               nullable=isinstance(f["type"], list) and "null" in f["type"])
                     for f in avro["fields"]])
    return pa.schema(list(metadata_log_schema()) + list(own)) if base == "metadata_log" else own


def _table_field_type(avro_field: dict) -> pa.DataType:
    """A ``kafka.type`` on a table column narrows Avro's int, e.g. to int16 for Kafka versions."""
    kafka_type = avro_field.get("kafka", {}).get("type")
    return ARROW_PRIMITIVES[kafka_type] if kafka_type else arrow_from_avro(avro_field["type"])


@lru_cache(maxsize=1)
def answers_schema() -> pa.Schema:
    """``responses``' columns, then the shard that answered: the layout of answers before the shards'
    answers to one request are merged into its row (made by the shards, merged by the sink)."""
    return table_arrow_schema("responses").append(pa.field("shard", pa.int32()))


def schema_arrays(schema: pa.Schema, columns: Mapping[str, Any]) -> list[pa.Array]:
    """``schema``'s columns, in its order and types, from ``columns`` (lists, numpy or Arrow arrays): event
    times come in ms, as the core keeps them, and become Delta's µs. Every column-wise row to the sink
    (state and history rows, answers) takes this one layout."""
    arrays = []
    for f in schema:
        values = columns[f.name]
        if pa.types.is_timestamp(f.type):
            arrays.append(pa.array(np.asarray(values, np.int64) * 1000, pa.int64()).cast(f.type))
        elif isinstance(values, pa.Array):
            arrays.append(values.cast(f.type))
        else:
            arrays.append(pa.array(values, f.type))
    return arrays


@lru_cache(maxsize=1)
def metadata_log_schema() -> pa.Schema:
    """``metadata_log``: the fixed columns, then one struct column per event type, named after it.

    Types without fields (NoOpRecord, EndTransactionRecord, ...) get no column: Parquet cannot store an
    empty struct, and ``type`` already says everything about them.
    """
    base = table_arrow_schema("metadata_log")
    payload = [pa.field(m.name, m.arrow_type) for m in registry().event_types() if m.fields]
    return pa.schema(list(base) + payload)


def table_role(name: str) -> dict:
    """The table's ``kraftlake`` attribute: ``writers``, ``role`` and, for state tables, ``keys``."""
    return table_avro(name).get("kraftlake", {})


def table_properties(name: str) -> dict[str, str]:
    """The Delta table properties a table is created with: the warehouse format, and for a declared state
    table the change data feed (so a state table added later has it too)."""
    properties = {FORMAT_PROPERTY: str(FORMAT_VERSION)}
    if name in table_names() and table_role(name)["role"] == "state":
        properties[CHANGE_DATA_FEED] = "true"
    return properties


def table_keys(name: str) -> tuple[str, ...]:
    """The columns a state table is merged on (one row per key)."""
    return tuple(table_role(name)["keys"])


@lru_cache(maxsize=1)
def table_names() -> tuple[str, ...]:
    """Every warehouse table ``schemas/tables/`` declares (those with a ``kraftlake`` attribute), by name."""
    return tuple(sorted(entry.name[: -len(".avsc")] for entry in (schema_dir() / "tables").iterdir()
                        if entry.name.endswith(".avsc") and "kraftlake" in json.loads(entry.read_text())))


@lru_cache(maxsize=None)
def tables_of(writer: str, role: str | None = None) -> tuple[str, ...]:
    """The tables ``writer`` (ingest, controller, quorum) commits, only those of ``role`` if given, in
    their declared ``order``."""
    found = [(table_role(n)["order"], n) for n in table_names()
             if writer in table_role(n)["writers"] and role in (None, table_role(n)["role"])]
    return tuple(n for _, n in sorted(found))


def change_feed_tables() -> tuple[str, ...]:
    """The tables that record their changes (``CHANGE_DATA_FEED``): the state tables."""
    return tuple(n for n in table_names() if CHANGE_DATA_FEED in table_properties(n))


def derived_tables() -> tuple[str, ...]:
    """The tables the queries rebuild from ``metadata_log`` (``--reset`` deletes them): those ingest never writes."""
    return tuple(n for n in table_names() if "ingest" not in table_role(n)["writers"])
