"""What crosses between the controller's Spark stages without JSON, checked without Spark: heartbeats
into a shard as columns (``controller_query.HEARTBEAT_COLUMNS``), and the shards' answers out of it as
Arrow (``storage.tables.answers_to_arrow``) merged by the driver (``controller_query.merged_answers``).

The frames are built the way pyspark hands a group's rows to ``applyInPandasWithState``: an Arrow table
turned into pandas (list columns as numpy arrays, an int column with nulls as floats)."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

from kraftlake.codec.events import json_bytes
from kraftlake.controller.dispatch import BROKER_REQUESTS, PARTITION_REQUESTS, TOPIC_REQUESTS
from kraftlake.controller.shards import Output, ShardState, expand, merged_responses, routed, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.metadata.tables import table_arrow_schema
from kraftlake.spark.controller_query import events_of_frames, merged_answers
from kraftlake.spark.routing import CHANGE_COLUMNS, HEARTBEAT_COLUMNS, HEARTBEAT_FILL
from kraftlake.storage.tables import answers_schema, answers_to_arrow, json_texts
from test_request_fast_path import CONFIG, hard_log

DIRS = ["u6mP1nJ7Qsa-Xa4H2Lw9Yg", "AAAAAAAAAAAAAAAAAAAAAQ"]
# Every field of a heartbeat at both versions, nulls and the extremes of the 64-bit fields included: the
# events as ingest hands them to the controller, and as the shard must get them back.
HEARTBEATS = [
    {"offset": 7, "leader_epoch": 3, "timestamp": 1_763_580_000_000, "type": "BrokerHeartbeatRequest", "version": 0,
     "data": {"BrokerId": 1, "BrokerEpoch": 5, "CurrentMetadataOffset": 6, "WantFence": False, "WantShutDown": False,
              "OfflineLogDirs": None}, "source": "a.jsonl", "position": 8},
    {"offset": 9, "leader_epoch": 3, "timestamp": 1_763_580_000_001, "type": "BrokerHeartbeatRequest", "version": 1,
     "data": {"BrokerId": 2 ** 31 - 1, "BrokerEpoch": 2 ** 63 - 1, "CurrentMetadataOffset": -(2 ** 63),
              "WantFence": True, "WantShutDown": True, "OfflineLogDirs": DIRS}, "source": None, "position": None},
    {"offset": 10, "leader_epoch": 4, "timestamp": 1_763_580_000_002, "type": "BrokerHeartbeatRequest", "version": 1,
     "data": {"BrokerId": -1, "BrokerEpoch": 2 ** 53 + 1, "CurrentMetadataOffset": 0, "WantFence": False,
              "WantShutDown": True, "OfflineLogDirs": []}, "source": "b.jsonl", "position": 2},
]
# Events whose payload crosses as JSON: another type, and a heartbeat with a null field (not one of the
# columns' rows: its columns hold the fillers).
JSON_EVENTS = [
    {"offset": 8, "leader_epoch": 3, "timestamp": 1_763_580_000_000, "type": "UnregisterBrokerRequest", "version": 0,
     "data": {"BrokerId": 4}, "source": "a.jsonl", "position": 9},
    {"offset": 11, "leader_epoch": 4, "timestamp": 1_763_580_000_003, "type": "BrokerHeartbeatRequest", "version": 0,
     "data": {"BrokerId": 3, "BrokerEpoch": None, "CurrentMetadataOffset": 1, "WantFence": False,
              "WantShutDown": False, "OfflineLogDirs": None}, "source": None, "position": None},
]


def routed_frame(columns: list[dict], payloads: list[dict]) -> pd.DataFrame:
    """Rows as ``routing.routed`` makes them: ``columns``' heartbeats in ``HEARTBEAT_COLUMNS`` without a payload,
    ``payloads``' events as JSON with the heartbeat columns filled, through Arrow into pandas as pyspark does."""
    types = {"h_broker": pa.int32(), "h_epoch": pa.int64(), "h_offset": pa.int64(), "h_fence": pa.bool_(),
             "h_shutdown": pa.bool_(), "h_dirs": pa.list_(pa.string())}
    rows = []
    for event, crosses in [(e, True) for e in columns] + [(e, False) for e in payloads]:
        row = {"offset": event["offset"], "leader_epoch": event["leader_epoch"], "ts": event["timestamp"],
               "type": event["type"], "version": event["version"], "source": event["source"],
               "position": event["position"], **dict.fromkeys(CHANGE_COLUMNS),
               "payload": None if crosses else json.dumps(event["data"])}
        for name, field in HEARTBEAT_COLUMNS.items():
            row[name] = event["data"][field] if crosses else HEARTBEAT_FILL.get(name)
        rows.append(row)
    schema = pa.schema([("offset", pa.int64()), ("leader_epoch", pa.int32()), ("ts", pa.int64()), ("type", pa.string()),
                        ("version", pa.int16()), ("source", pa.string()), ("position", pa.int64()),
                        ("c_topic", pa.string()), ("c_partition", pa.int32()), ("c_leader", pa.int32()),
                        ("c_isr", pa.list_(pa.int32())), ("c_recovery", pa.int8()), ("payload", pa.string()),
                        *types.items()])
    return pa.Table.from_pylist(rows, schema=schema).to_pandas()


def by_offset(events: list[dict]) -> list[dict]:
    return sorted(events, key=lambda e: e["offset"])


def test_heartbeats_as_columns_reach_the_shard_as_the_events_they_were() -> None:
    events, changes, beats = events_of_frames(iter([routed_frame(HEARTBEATS, JSON_EVENTS)]))
    assert changes is None
    assert by_offset(events) == by_offset(JSON_EVENTS)  # (a heartbeat with a null field among them)
    assert beats.offsets.tolist() == [e["offset"] for e in HEARTBEATS]
    events = events + beats.events()
    assert by_offset(events) == by_offset(HEARTBEATS + JSON_EVENTS)
    # exact types: a 64-bit value near 2^63 through a float would compare equal to a neighbour
    for event in events:
        assert all(type(v) is type(w) for v, w in zip(event["data"].values(),
                                                      next(e for e in HEARTBEATS + JSON_EVENTS
                                                           if e["offset"] == event["offset"])["data"].values()))


def test_heartbeats_as_columns_and_as_json_are_the_same_events() -> None:
    _, _, as_columns = events_of_frames(iter([routed_frame(HEARTBEATS, [])]))
    as_json, _, none = events_of_frames(iter([routed_frame([], HEARTBEATS)]))
    assert none is None
    assert as_columns.events() == as_json == HEARTBEATS


@pytest.fixture(scope="module")
def answers() -> list[list[dict]]:
    """Every shard's answers to a log holding every request type the controller decides (3 shards)."""
    shards = 3
    states = [ShardState(ClusterImage()) for _ in range(shards)]
    per_shard = routed(hard_log(5), shards)
    return [[o.row for o in expand(step(shard, shards, states[shard], per_shard[shard], CONFIG)) if o.op == "response"]
            for shard in range(shards)]


def test_answers_as_arrow_keep_every_field(answers: list[list[dict]]) -> None:
    rows = [r for shard in answers for r in shard]
    table = answers_to_arrow(rows)
    assert table.schema == answers_schema()
    back = table.to_pylist()
    assert len(back) == len(rows)
    for row, got in zip(rows, back):
        assert round(got["timestamp"].timestamp() * 1000) == row["timestamp"]
        assert json.loads(got["data"]) == json.loads(json.dumps(row["data"], default=json_bytes))
        assert {k: v for k, v in got.items() if k not in ("timestamp", "data")} == \
            {k: v for k, v in row.items() if k not in ("timestamp", "data")}
    # the log made answers of every request type, with and without an error code or an error message
    assert set(BROKER_REQUESTS) | set(TOPIC_REQUESTS) | set(PARTITION_REQUESTS) <= {r["request_type"] for r in back}
    assert {None, 0} < {r["error_code"] for r in back}
    assert {None, ""} <= {r["error_message"] for r in back}
    assert answers_to_arrow([]).num_rows == 0


def test_merged_answers_are_the_rows_merged_responses_makes(answers: list[list[dict]]) -> None:
    """One row per request, as the core's replay merges its shards' answers; blocks in any shard order."""
    expected = [{**r, "data": json.dumps(r["data"], default=json_bytes)}
                for r in merged_responses(o for shard in answers for o in _outputs(shard))]
    merged = merged_answers(pa.concat_tables([answers_to_arrow(rows) for rows in reversed(answers)]))
    assert merged.schema == table_arrow_schema("responses")
    got = [{**r, "timestamp": round(r["timestamp"].timestamp() * 1000)} for r in merged.to_pylist()]
    assert got == expected
    offsets = [r["offset"] for shard in answers for r in shard]
    assert len(offsets) > len(set(offsets)), "no request was answered by several shards: nothing was merged"


def _outputs(rows: list[dict]) -> list[Output]:
    return [Output("responses", "response", r["offset"], 0, r) for r in rows]


def test_json_texts_are_json_dumps_for_repeated_and_lookalike_values() -> None:
    """Texts shared between equal dicts only: ``True == 1`` and ``-0.0 == 0.0`` in Python, not in JSON."""
    values = [{"ErrorCode": 0, "IsFenced": False}, {"ErrorCode": 0, "IsFenced": 0}, {"ErrorCode": False, "IsFenced": False},
              {"ErrorCode": 0, "IsFenced": False}, {1: "a"}, {True: "a"}, {"x": 0.0}, {"x": -0.0}, {"x": 0},
              {"BrokerEpoch": 2 ** 63 - 1}, {"BrokerEpoch": -(2 ** 63)}, {"BrokerEpoch": 2 ** 63 - 1},
              {"Topics": []}, {"Topics": [{"Name": "a"}]}, {"Topics": []}, {"Raw": b"\x00\xff"}, {"Raw": None},
              {}, {}, {"ErrorMessage": "a"}, {"ErrorMessage": None}]
    assert json_texts(values) == [json.dumps(v, default=json_bytes) for v in values]
    assert json_texts([]) == []
    # one object several times (a step's shared answer), beside equal and lookalike others
    shared, nested = {"ErrorCode": 0, "IsFenced": False}, {"Topics": [{"Name": "a"}]}
    again = [shared, {"ErrorCode": 0, "IsFenced": 0}, shared, nested, {"Topics": []}, nested, shared]
    assert json_texts(again) == [json.dumps(v, default=json_bytes) for v in again]


def test_merged_answers_of_same_and_different_texts_are_merged_responses_rows() -> None:
    """Several shards answering one request alike (their text kept) or not (parsed and merged), beside
    requests one shard answered; shards in any order."""
    base = {"timestamp": 1_763_580_000_000, "request_type": "AlterPartitionRequest", "version": 2,
            "error_code": 0, "error_message": None}
    neutral = {"ThrottleTimeMs": 0, "ErrorCode": 0, "Topics": []}
    owned = {"ThrottleTimeMs": 0, "ErrorCode": 0, "Topics": [{"TopicId": "t", "Partitions": [{"PartitionIndex": 1}]}]}
    unknown = {"ThrottleTimeMs": 0, "ErrorCode": 0, "Topics": [{"TopicId": "u", "ErrorCode": 100}]}
    answers = [(5, 0, neutral), (5, 1, owned), (5, 2, neutral),  # one owner among neutral answers
               (6, 2, unknown), (6, 0, unknown), (6, 1, unknown),  # every shard alike
               (7, 0, {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": True}),  # one shard alone
               (8, 1, owned), (8, 0, {**neutral, "ErrorCode": 41}), (8, 2, unknown),  # the first shard's scalars
               (9, 0, neutral), (9, 1, neutral)]
    schema = table_arrow_schema("responses")
    rows = [{**{f.name: None for f in schema}, **base, "offset": offset, "shard": shard, "data": data}
            for offset, shard, data in answers]
    expected = [{**r, "data": json.dumps(r["data"], default=json_bytes)}
                for r in merged_responses(_outputs([{**r, "data": json.loads(json.dumps(r["data"]))} for r in rows]))]
    merged = merged_answers(answers_to_arrow(rows))
    got = [{**r, "timestamp": round(r["timestamp"].timestamp() * 1000)} for r in merged.to_pylist()]
    assert got == expected
    assert [json.loads(r["data"]) for r in got] == [
        owned, unknown, {"ThrottleTimeMs": 0, "ErrorCode": 0, "IsCaughtUp": True},
        {"ThrottleTimeMs": 0, "ErrorCode": 41, "Topics": [owned["Topics"][0], unknown["Topics"][0]]}, neutral]
