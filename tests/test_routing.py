"""The controller's events routed and packed in the source's read tasks (``spark.routing``, the source's
``transform``), checked without Spark: a real ``metadata_log`` (delta-rs) of every record and request type,
read by the stream reader as the controller's query configures it, unpacked by each shard as the shard
function does, gives each shard exactly the events the pure core routes to it (``shards.routes``), as
ingest wrote them, simple PartitionChangeRecords as ``Changes`` columns."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from kraftlake.controller.shards import SKIPPED, TOPIC_SCOPED, routes
from kraftlake.image.partition_changes import Changes, is_simple
from kraftlake.metadata.tables import ENVELOPE_COLUMNS, metadata_log_schema
from kraftlake.sim.workload import generate
from kraftlake.spark.controller_query import ROUTED_FIXED, STRUCT_PAYLOADS, events_of_frames, unpacked_frames
from kraftlake.spark.routing import PACKED_SCHEMA, packed_batches
from kraftlake.storage import datasource
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.tables import events_to_arrow, rows_to_events
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType
from test_request_fast_path import hard_log

KEYS = [7, 3, 11]  # group keys as ``queries.spread_keys`` gives them: not 0..n-1
# PACKED_SCHEMA as a StructType (its DDL would need a session)
PACKED = StructType([StructField("shard", IntegerType(), False), StructField("first", LongType(), False),
                     StructField("rows", BinaryType(), False)])


def _odd_ones(offset: int, timestamp: int, topic: str) -> list[dict]:
    """Rows the generators never write: PartitionChangeRecords just outside ``is_simple`` (replicas set, a
    recovery state of 2, a null one) and just inside (empty directories), heartbeats with a null field or
    offline directories, a PartitionRecord without a topic id, a NoOpRecord."""
    base = {"TopicId": topic, "PartitionId": 1, "Isr": [1, 2], "Leader": 1, "Replicas": None, "RemovingReplicas": None,
            "AddingReplicas": None, "LeaderRecoveryState": 0, "Directories": None, "EligibleLeaderReplicas": None,
            "LastKnownElr": None}
    beat = {"BrokerId": 1, "BrokerEpoch": 5, "CurrentMetadataOffset": 3, "WantFence": False, "WantShutDown": False,
            "OfflineLogDirs": []}
    payloads = [("PartitionChangeRecord", {**base, "Replicas": [1, 2, 3]}),
                ("PartitionChangeRecord", {**base, "LeaderRecoveryState": 2}),
                ("PartitionChangeRecord", {**base, "LeaderRecoveryState": None}),
                ("PartitionChangeRecord", {**base, "Directories": []}),
                ("BrokerHeartbeatRequest", {**beat, "BrokerEpoch": None}),
                ("BrokerHeartbeatRequest", {**beat, "OfflineLogDirs": ["AAAAAAAAAAAAAAAAAAAAAQ"]}),
                ("BrokerHeartbeatRequest", {**beat, "BrokerEpoch": 2 ** 63 - 1, "CurrentMetadataOffset": -(2 ** 63)}),
                ("PartitionRecord", {"TopicId": None, "PartitionId": 0, "Replicas": [1]}),
                ("NoOpRecord", {})]
    return [{"offset": offset + i, "leader_epoch": 2, "timestamp": timestamp + i, "type": kind, "version": 1
             if kind == "BrokerHeartbeatRequest" else 0, "data": data, "source": None if i % 2 else "s",
             "position": None if i % 2 else i} for i, (kind, data) in enumerate(payloads)]


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[DeltaRsTables, list[dict]]:
    """A warehouse whose ``metadata_log`` holds a generated cluster's records, a simulated cluster's requests
    of every type and the odd rows, in files of 700 rows; and its rows as ingest hands them on."""
    records = list(generate(1_500, brokers=4, topics=5, partitions_per_topic=6, seed=4))
    requests = hard_log(2)
    events = records + [{**e, "offset": records[-1]["offset"] + 1 + i} for i, e in enumerate(requests)]
    last = events[-1]
    events += _odd_ones(last["offset"] + 1, last["timestamp"], records[-1]["data"].get("TopicId") or "x")
    tables = DeltaRsTables(str(tmp_path_factory.mktemp("routing") / "w"))
    schema = metadata_log_schema()
    for first in range(0, len(events), 700):
        batch = pa.Table.from_batches([events_to_arrow(events[first:first + 700], schema)])
        tables.append("metadata_log", batch, schema)
    return tables, sorted(rows_to_events(tables.read_arrow("metadata_log")), key=lambda e: e["offset"])


def _reader(tables: DeltaRsTables, shards: int) -> datasource._StreamReader:
    """The stream reader as ``controller_query.controller_input`` configures it on delta-rs."""
    present = metadata_log_schema().names
    payloads = [c for c in present if c not in ROUTED_FIXED and c not in SKIPPED and c not in ENVELOPE_COLUMNS]
    options = {"typeIn": ",".join(sorted(t for t in set(present) | {"EndTransactionRecord"} if t not in SKIPPED)),
               "jsonPayload": ",".join(c for c in payloads if c not in STRUCT_PAYLOADS),
               datasource.TRANSFORM: f"{packed_batches.__module__}:{packed_batches.__name__}",
               datasource.TRANSFORM_ARGS: f'{{"shards": {shards}, "keys": {KEYS[:shards]}}}',
               datasource.TRANSFORM_INPUT: ",".join(list(ROUTED_FIXED) + [c for c in payloads if c in STRUCT_PAYLOADS]),
               "maxRecordsPerBatch": "1000"}
    return datasource._StreamReader(tables.path("metadata_log"), PACKED, options)


def _native_batches(tables: DeltaRsTables, shards: int, lo: int, hi: int) -> list[pa.RecordBatch]:
    """The native engine's way: Delta's own source gives every payload as its struct column, Spark types them,
    ``mapInArrow`` hands them to ``packed_batches`` in batches of its own size."""
    table = tables.read_arrow("metadata_log")
    names = [n for n in table.column_names if n not in ENVELOPE_COLUMNS and n not in SKIPPED]
    full = datasource.spark_schema(tables.table("metadata_log"))
    offsets = table.column("offset").to_pylist()
    rows = table.take([i for i, o in enumerate(offsets) if lo < o <= hi]).sort_by("offset")
    typed = datasource._to_spark_batches(rows.to_batches(max_chunksize=333), StructType([full[n] for n in names]))
    return list(packed_batches(typed, shards, KEYS[:shards]))


def _shards_got(tables: DeltaRsTables, shards: int, cuts: list[int], engine: str
                ) -> dict[int, tuple[list[dict], list[Changes]]]:
    """What each shard unpacks, micro-batch by micro-batch (offset ranges between ``cuts``), all tasks of one."""
    reader = _reader(tables, shards)
    got: dict[int, tuple[list[dict], list[Changes]]] = {k: ([], []) for k in KEYS[:shards]}
    for lo, hi in zip(cuts, cuts[1:]):
        packed = [b for part in reader.partitions({"offset": lo}, {"offset": hi}) for b in reader.read(part)] \
            if engine == "delta-rs" else _native_batches(tables, shards, lo, hi)
        rows = pa.Table.from_batches(packed).to_pylist() if packed else []
        for key in KEYS[:shards]:
            mine = [r for r in rows if r["shard"] == key]
            frames = [pd.DataFrame({"first": [r["first"]], "rows": [r["rows"]]}) for r in reversed(mine)]
            events, changes, heartbeats = events_of_frames(unpacked_frames(frames))
            got[key][0].extend(events)
            if heartbeats is not None:  # the plain ones, as columns: compared as the events they stand for
                got[key][0].extend(heartbeats.events())
            if changes is not None:
                got[key][1].append(changes)
    return got


def _routes(event: dict, shards: int) -> range | tuple[int, ...]:
    """``shards.routes``, and a topic's record without a topic id (which no shard owns) to every shard."""
    key = TOPIC_SCOPED.get(event["type"])
    return range(shards) if key is not None and event["data"].get(key) is None else routes(event, shards)


def _without_envelope(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in ENVELOPE_COLUMNS}


@pytest.mark.parametrize("engine", ["delta-rs", "native"])
@pytest.mark.parametrize("shards,cuts", [(1, [-1, 10 ** 9]), (3, [-1, 400, 401, 2_000, 3_333, 10 ** 9])])
def test_each_shard_gets_the_events_the_core_routes_to_it(log, shards: int, cuts: list[int], engine: str) -> None:
    tables, events = log
    got = _shards_got(tables, shards, cuts, engine)
    kinds = {e["type"] for e in events}
    assert {"PartitionRecord", "PartitionChangeRecord", "BrokerHeartbeatRequest", "AlterPartitionRequest",
            "CreateTopicsRequest", "NoOpRecord", "TopicRecord"} <= kinds
    for shard, key in enumerate(KEYS[:shards]):
        wanted = [_without_envelope(e) for e in events if shard in _routes(e, shards)]
        simple = [e for e in wanted if e["type"] == "PartitionChangeRecord" and is_simple(e["data"])]
        others = [e for e in wanted if not (e["type"] == "PartitionChangeRecord" and is_simple(e["data"]))]
        dicts, changes = got[key]
        assert sorted(dicts, key=lambda e: e["offset"]) == others
        columns = Changes.concat(changes) if changes else Changes.of_events([])
        assert columns.offsets.tolist() == [e["offset"] for e in simple]
        assert [columns.event(i) for i in range(len(columns))] == \
            [{**e, "data": {**e["data"], "Directories": None}} for e in simple]  # [] and null: the same change
    assert any(got[key][1] for key in KEYS[:shards])  # simple PartitionChangeRecords crossed as columns
    # every event reached some shard once, NoOpRecords none
    reached = sorted(e["offset"] for key in KEYS[:shards] for e in got[key][0]
                     if shards == 1 or e["type"] in ("PartitionRecord", "PartitionChangeRecord")
                     and e["data"]["TopicId"] is not None)
    assert len(reached) == len(set(reached))
    assert all(e["type"] != "NoOpRecord" for key in KEYS[:shards] for e in got[key][0])


def test_a_transform_must_be_kraftlake_s_own(log) -> None:
    tables, _ = log
    with pytest.raises(ValueError, match="transform must name a function of kraftlake"):
        datasource._StreamReader(tables.path("metadata_log"), None, {datasource.TRANSFORM: "os:system",
                                                                    datasource.TRANSFORM_INPUT: "offset"})


def test_the_packed_struct_is_packed_schema() -> None:
    ddl = [part.strip().split() for part in PACKED_SCHEMA.split(",")]
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in PACKED] == \
        [(name, {"long": "bigint"}.get(kind, kind), False) for name, kind, *_ in ddl]
