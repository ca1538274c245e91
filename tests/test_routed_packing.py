"""The controller's events across the shuffle, packed (``routing.pack_routed``, ``controller_query.unpacked_frames``),
checked without Spark: per source batch and shard one Arrow IPC stream of that shard's rows, which the
shard turns back into the frames it would have got had every row crossed on its own (one per shard it goes
to), as pyspark turns a group's Arrow rows into pandas, batch by batch.

The batches are written by hand as ``routing.routed`` makes them: column ``shard`` holds a
topic's shard key, or null for an event that goes to every shard."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from pandas.testing import assert_frame_equal

from kraftlake.spark.controller_query import events_of_frames, unpacked_frames
from kraftlake.spark.routing import PACKED_SCHEMA, pack_routed

KEYS = (5, 9, 2)  # group keys as ``queries.spread_keys`` gives them: not 0..n-1
MAX, MIN = 2 ** 63 - 1, -(2 ** 63)
SCHEMA = pa.schema([("shard", pa.int32()), ("offset", pa.int64()), ("leader_epoch", pa.int32()), ("ts", pa.int64()),
                    ("type", pa.string()), ("version", pa.int16()), ("payload", pa.string()), ("source", pa.string()),
                    ("position", pa.int64()), ("c_topic", pa.string()), ("c_partition", pa.int32()),
                    ("c_leader", pa.int32()), ("c_isr", pa.list_(pa.int32())), ("c_recovery", pa.int8()),
                    ("h_broker", pa.int32()), ("h_epoch", pa.int64()), ("h_offset", pa.int64()),
                    ("h_fence", pa.bool_()), ("h_shutdown", pa.bool_()), ("h_dirs", pa.list_(pa.string()))])
FILL = {"h_broker": 0, "h_epoch": 0, "h_offset": 0, "h_fence": False, "h_shutdown": False, "h_dirs": None}
TOPIC = "u6mP1nJ7Qsa-Xa4H2Lw9Yg"


def row(shard: int | None, offset: int, type_: str, payload: str | None = None, source: str | None = "a.jsonl",
        position: int | None = 1, **columns) -> dict:
    return {"shard": shard, "offset": offset, "leader_epoch": 3, "ts": 1_763_580_000_000 + offset % 1000, "type": type_,
            "version": 1, "payload": payload, "source": source, "position": position, "c_topic": None,
            "c_partition": None, "c_leader": None, "c_isr": None, "c_recovery": None, **FILL, **columns}


def heartbeat(offset: int, **fields) -> dict:
    return row(None, offset, "BrokerHeartbeatRequest", **{"h_broker": 1, "h_epoch": 5, "h_offset": offset, **fields})


def change(shard: int, offset: int, isr: list[int] | None = (1, 2)) -> dict:
    return row(shard, offset, "PartitionChangeRecord", c_topic=TOPIC, c_partition=2 ** 31 - 1, c_leader=-1,
               c_isr=None if isr is None else list(isr), c_recovery=0)


# Every kind of row: heartbeats as columns (64-bit extremes, log dirs null, empty and set, no source), a
# heartbeat and other requests as JSON (to every shard), simple PartitionChangeRecords as columns and a
# PartitionRecord as JSON (to their topic's shard).
BATCHES = [
    [heartbeat(100, h_epoch=MAX, h_offset=MIN, h_dirs=["AAAAAAAAAAAAAAAAAAAAAQ", TOPIC]),
     change(9, 101),
     row(None, 102, "AlterPartitionRequest", '{"BrokerId": 1, "BrokerEpoch": 9223372036854775807, "Topics": []}'),
     heartbeat(103, h_fence=True, h_shutdown=True, h_dirs=[], source=None, position=None),
     row(5, 104, "PartitionRecord", '{"TopicId": "%s", "PartitionId": 0, "Replicas": [1]}' % TOPIC, position=MAX),
     row(None, 105, "BrokerHeartbeatRequest", '{"BrokerId": 3, "BrokerEpoch": null, "CurrentMetadataOffset": 1, '
                                              '"WantFence": false, "WantShutDown": false, "OfflineLogDirs": null}'),
     change(9, 106, isr=None), row(None, 107, "UnregisterBrokerRequest", '{"BrokerId": 4}', source=None)],
    [heartbeat(MAX - 1, h_broker=-(2 ** 31), h_epoch=MIN, h_offset=MAX), heartbeat(200, h_epoch=2 ** 53 + 1)],
    [change(9, 300), change(9, 301, isr=[])],  # shards 5 and 2 get nothing from this batch
]


def as_spark_frame(table: pa.Table) -> pd.DataFrame:
    """pandas as pyspark hands a group's Arrow rows to ``applyInPandasWithState`` (its own converter)."""
    conversion = pytest.importorskip("pyspark.sql.conversion")
    return pd.concat(conversion.ArrowBatchTransformer.to_pandas(table, timezone="UTC"), axis=1)


def exploded(rows: list[dict], key: int) -> pd.DataFrame:
    """The rows one shard got when each crossed the shuffle on its own, in pandas as pyspark makes it."""
    mine = [{k: v for k, v in r.items() if k != "shard"} for r in rows if r["shard"] in (None, key)]
    return as_spark_frame(pa.Table.from_pylist(mine, schema=SCHEMA.remove(0)))


def packed(batches: list[list[dict]]) -> list[dict]:
    out = pack_routed((pa.RecordBatch.from_pylist(b, schema=SCHEMA) for b in batches), KEYS)
    return [r for batch in out for r in batch.to_pylist()]


def test_packed_rows_have_the_packed_schema() -> None:
    names = [part.split()[0] for part in PACKED_SCHEMA.split(",")]
    assert names == list(pa.Table.from_pylist(packed(BATCHES)).column_names)


def test_each_shard_unpacks_the_rows_it_would_have_got_one_by_one() -> None:
    rows = packed(BATCHES)
    # batch 0 to every shard, batch 1 (heartbeats only) to every shard, batch 2 to shard 9 only
    assert [(r["shard"], r["first"]) for r in rows] == \
        [(5, 100), (9, 100), (2, 100), (5, 200), (9, 200), (2, 200), (9, 300)]
    for key in KEYS:
        frames = [as_spark_frame(pa.Table.from_pylist([r], schema=_packed_arrow_schema()))
                  for r in reversed(rows) if r["shard"] == key]  # the shuffle keeps no order
        got = list(unpacked_frames(frames))
        # a frame per source batch with rows for the shard, in the order of their first offsets
        expected = [exploded(batch, key) for batch in BATCHES if any(r["shard"] in (None, key) for r in batch)]
        assert len(got) == len(expected) == (3 if key == 9 else 2)
        for frame, want in zip(got, expected):
            assert_frame_equal(frame, want)
        events, changes, beats = events_of_frames(iter(got))
        want_events, want_changes, want_beats = events_of_frames(iter(expected))
        events += beats.events() if beats is not None else []
        want_events += want_beats.events() if want_beats is not None else []
        assert sorted(events, key=lambda e: e["offset"]) == sorted(want_events, key=lambda e: e["offset"])
        assert (changes is None) == (want_changes is None) == (key != 9)
        if changes is not None:
            assert changes.offsets.tolist() == want_changes.offsets.tolist() == [101, 106, 300, 301]
            assert changes.isrs == want_changes.isrs == [(1, 2), None, (1, 2), ()]
    heartbeats = sorted((e for e in events if e["type"] == "BrokerHeartbeatRequest"), key=lambda e: e["offset"])
    assert [(e["data"]["BrokerEpoch"], e["data"]["CurrentMetadataOffset"]) for e in heartbeats] == \
        [(MAX, MIN), (5, 103), (None, 1), (2 ** 53 + 1, 200), (MIN, MAX)]
    assert all(type(e["data"]["BrokerEpoch"]) is int for e in heartbeats if e["offset"] != 105)


def test_a_shard_without_rows_gets_no_packed_row() -> None:
    assert packed([BATCHES[2], []]) == [
        {"shard": 9, "first": 300, "rows": packed([BATCHES[2]])[0]["rows"]}]
    assert packed([[row(2, 5, "PartitionRecord", "{}")]])[0]["shard"] == 2
    assert packed([]) == []


def _packed_arrow_schema() -> pa.Schema:
    return pa.schema([("shard", pa.int32(), False), ("first", pa.int64(), False), ("rows", pa.binary(), False)])
