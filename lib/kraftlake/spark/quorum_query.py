"""The quorum query: the metadata quorum's replicas computed from the log's quorum traffic (Spark shell).

A second streaming query beside the controller's, over the same ``metadata_log``: it keeps only the
quorum's traffic (``schemas.QUORUM_TRAFFIC``, addressed by ``destination_id``), groups it by replica
and runs ``quorum.Replica.apply`` per replica in ``applyInPandasWithState``, the replica's whole state
(its ``RaftNode``, log included) in the state store. The sink commits the quorum's ``anomalies`` first
(MERGE, ``write_quorum_anomalies``), then ``quorum_state`` and ``quorum_replicas`` (MERGE),
``quorum_events``, the replicas' answers in ``responses`` and what they cannot read in ``rejected``
(append), each write tagged with the Delta transaction (``kraftlake-quorum-<query id>``, batch id), so a
restart never writes a batch twice. Its checkpoint is the ``quorum`` folder inside the controller's.

Why a query of its own: quorum traffic is keyed by replica, not by topic shard, and it is a few
messages per replica and second; keeping it apart leaves the controller's hot path untouched and only
costs a scan of the columns it needs (the ``type`` column, mostly).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

from kraftlake.metadata.schemas import QUORUM_TRAFFIC
from kraftlake.metadata.tables import metadata_log_schema, table_arrow_schema, table_keys, tables_of
from kraftlake.raft.anomalies import KINDS, QuorumAnomalies
from kraftlake.raft.replica import Replica
from kraftlake.spark.queries import open_anomalies, parse_state, start_sink
from kraftlake.storage import Warehouse
from kraftlake.storage.tables import rows_to_arrow

OUTPUT_SCHEMA = "table string, offset long, seq int, row string"
STATE_SCHEMA = "replica string"
ENVELOPE = ["offset", "timestamp", "type", "version", "source_id", "destination_id", "correlation_id"]
ANOMALIES = "anomalies"  # shared with the controller query, which writes its own kinds: written apart
STATE_TABLES = tuple(n for n in tables_of("quorum", "state") if n != ANOMALIES)
# A quorum is a handful of replicas, a few messages each per second: one task holds them all, and the
# micro-batches (as many as the controller's, mostly without quorum traffic) pay one state store, not one
# per shuffle partition.
STATE_PARTITIONS = 1


def checkpoint_of(controller_checkpoint: str) -> str:
    return controller_checkpoint.rstrip("/") + "/quorum"


def traffic(spark_df: Any) -> Any:
    """The quorum's traffic of a ``metadata_log`` frame, payload as JSON."""
    from pyspark.sql import functions as F

    present = set(spark_df.columns)
    payload_columns = [t for t in sorted(QUORUM_TRAFFIC) if t in present]
    payload = F.coalesce(*[F.to_json(F.col(c)) for c in payload_columns]) if payload_columns \
        else F.lit(None).cast("string")
    return (spark_df.where(F.col("type").isin(*QUORUM_TRAFFIC) & F.col("destination_id").isNotNull())
            .select("offset", F.unix_millis("timestamp").alias("ts"), "type", "version", "source_id",
                    "destination_id", "correlation_id", payload.alias("payload")))


def event_of(row: Mapping) -> dict:
    def optional(name: str) -> int | None:
        value = row[name]
        return None if value is None or value != value else int(value)  # pandas gives NaN for null

    return {"offset": int(row["offset"]), "timestamp": int(row["ts"]), "type": row["type"],
            "version": int(row["version"]), "data": json.loads(row["payload"]) if row["payload"] else {},
            "source_id": optional("source_id"), "destination_id": int(row["destination_id"]),
            "correlation_id": optional("correlation_id")}


def replica_function(properties: Mapping[str, str]):
    """What ``applyInPandasWithState`` runs per replica and micro-batch (pickled to executors)."""
    properties = dict(properties)

    def run(key: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        replica_id = int(key[0])
        replica = parse_state(f"quorum replica {replica_id}'s state", lambda: Replica.from_json(
            state.get[0] if state.exists else None, replica_id, properties))
        events = sorted((event_of(r) for frame in frames for r in frame.to_dict("records")),
                        key=lambda e: e["offset"])
        rows: list[tuple[str, int, dict]] = []
        for event in events:
            rows += [(table, event["offset"], row) for table, row in replica.apply(event, properties)[0]]
        rows += [(table, replica.last_offset, row) for table, row in replica.state_rows()]
        state.update((replica.to_json(),))
        yield pd.DataFrame({
            "table": [r[0] for r in rows],
            "offset": pd.Series([r[1] for r in rows], dtype="int64"),
            "seq": pd.Series(range(len(rows)), dtype="int32"),
            "row": [json.dumps(r[2], separators=(",", ":")) for r in rows]})

    return run


def write_quorum_outputs(warehouse: Warehouse, rows: list[tuple[str, int, int, dict]], txn: tuple[str, int]
                         ) -> dict[str, int]:
    """Commit one micro-batch: the quorum's anomalies first (they resume from ``quorum_state`` as the last
    batch left it), then MERGE the state tables (one row per key and batch: a replica's last), append
    events and answers."""
    ordered = sorted(rows, key=lambda r: (r[1], r[2]))
    written = {}
    events = [r[3] for r in ordered if r[0] == "quorum_events"]
    if events:
        written[ANOMALIES] = write_quorum_anomalies(warehouse, events, txn)
    for name in tables_of("quorum", "append"):
        found = [r[3] for r in ordered if r[0] == name]
        if found:
            warehouse.append(name, rows_to_arrow(name, found), table_arrow_schema(name), txn)
            written[name] = len(found)
    for name in STATE_TABLES:
        final = {tuple(r[3][k] for k in table_keys(name)): r[3] for r in ordered if r[0] == name}
        if final:
            warehouse.upsert(name, rows_to_arrow(name, list(final.values())), list(table_keys(name)),
                             table_arrow_schema(name), txn)
            written[name] = len(final)
    return written


def write_quorum_anomalies(warehouse: Warehouse, events: list[dict], txn: tuple[str, int]) -> int:
    """The episodes a micro-batch's ``quorum_events`` (in offset order) open and close, MERGEd into
    ``anomalies``; how many rows. Its rules resume from the tables: this commit comes before the batch's
    ``quorum_state``, so when it is not there yet (``txn``), ``quorum_state`` still holds the previous
    batch's end (who leads) and the open quorum rows of ``anomalies`` the episodes it left open. A batch
    whose commit is there is done. The controller query MERGEs its own kinds into the same table at the
    same time: the keys never meet (``DeltaRsTables.upsert`` redoes a MERGE that lost the race)."""
    committed = warehouse.txn_version(ANOMALIES, txn[0])
    if committed is not None and committed >= txn[1]:
        return 0
    state = warehouse.read_arrow("quorum_state", columns=["replica_id", "state"]).to_pylist() \
        if warehouse.exists("quorum_state") else []
    rules = QuorumAnomalies.resume(state, open_anomalies(warehouse, KINDS))
    final = {tuple(row[k] for k in table_keys(ANOMALIES)): row for row in rules.rows(events)}
    warehouse.upsert(ANOMALIES, rows_to_arrow(ANOMALIES, list(final.values())), list(table_keys(ANOMALIES)),
                     table_arrow_schema(ANOMALIES), txn)  # none found: the batch's commit all the same
    return len(final)


def quorum_outputs(warehouse: Warehouse, properties: Mapping[str, str], max_records_per_batch: int | None,
                   max_batch_ms: int | None) -> Any:
    """The quorum query's streaming frame, before a sink: built without writing anything (a standby builds one
    before it holds the lease, ``controller_query.warm_up``)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    present = {f.name for f in metadata_log_schema()}
    columns = ENVELOPE + sorted(t for t in QUORUM_TRAFFIC if t in present)
    source = warehouse.read_stream("metadata_log", max_records_per_batch=max_records_per_batch, columns=columns,
                                   types=sorted(QUORUM_TRAFFIC), skip_empty=True, max_batch_ms=max_batch_ms)
    return (traffic(source).groupBy("destination_id")
            .applyInPandasWithState(replica_function(properties), OUTPUT_SCHEMA, STATE_SCHEMA, "append",
                                    GroupStateTimeout.NoTimeout))


def start_quorum(warehouse: Warehouse, checkpoint: str, once: bool, properties: Mapping[str, str],
                 max_records_per_batch: int | None, trigger_interval_ms: int, max_batch_ms: int | None) -> Any:
    """Start the quorum query (checkpoint: the controller's); returns the ``StreamingQuery``."""
    for name in tables_of("quorum"):
        warehouse.prepare(name, table_arrow_schema(name))
    outputs = quorum_outputs(warehouse, properties, max_records_per_batch, max_batch_ms)

    def write(batch_df: Any, txn: tuple[str, int]) -> None:
        rows = [(r["table"], r["offset"], r["seq"], json.loads(r["row"])) for r in batch_df.toArrow().to_pylist()]
        write_quorum_outputs(warehouse, rows, txn)

    return start_sink(outputs, "quorum", checkpoint_of(checkpoint), once, trigger_interval_ms, write,
                      warehouse.storage_options, state_partitions=STATE_PARTITIONS)


__all__ = ["checkpoint_of", "quorum_outputs", "start_quorum", "traffic", "write_quorum_anomalies", "write_quorum_outputs"]
