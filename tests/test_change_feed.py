"""Subscribe instead of poll: Delta's Change Data Feed on the state tables.

The oracle for what a version changed is the table itself: its rows at version v-1 and at v, read by time
travel and compared key by key, which does not go through any change data. delta-rs' MERGE (the upsert of
both queries' sinks) must record exactly those changes; the data source must hand them to Spark, batch and
streaming, each once.
"""

from __future__ import annotations

from pathlib import Path

import json
import shutil
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from kraftlake.cli import alerts as alerts_job

from kraftlake.metadata.tables import (CHANGE_DATA_FEED, FORMAT_PROPERTY, table_arrow_schema, table_keys,
                                       table_properties, table_role, tables_of)
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables, NoChangeData, change_data_from, changes
from kraftlake.storage.tables import rows_to_arrow

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BROKERS = table_arrow_schema("brokers")
KEYS = list(table_keys("brokers"))
KEY_SCHEMA = pa.schema([BROKERS.field(k) for k in KEYS])


def broker(broker_id: int, epoch: int, fenced: bool = False, offset: int = 0) -> dict:
    return {"broker_id": broker_id, "epoch": epoch, "incarnation_id": f"inc-{broker_id}-{epoch}", "fenced": fenced,
            "in_controlled_shutdown": False, "rack": None, "listeners": [f"PLAINTEXT://b{broker_id}:9092"],
            "last_offset": offset, "last_timestamp": 1_763_580_000_000_000 + offset}


def brokers(*rows: dict) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=BROKERS)


def gone(*broker_ids: int) -> pa.Table:
    return pa.Table.from_pylist([{"broker_id": b} for b in broker_ids], schema=KEY_SCHEMA)


# Versions 1..5 of the brokers table, as the controller's sink writes them: inserts only; an update and a
# delete in one MERGE; an update that leaves the row as it was; a delete only; a batch that changed nothing
# but delete a key the table never had (a topic created and deleted within one micro-batch).
WRITES = [
    (brokers(broker(1, 10), broker(2, 20), broker(3, 30)), None),
    (brokers(broker(4, 40)), None),
    (brokers(broker(2, 20, fenced=True, offset=7)), gone(3)),
    (brokers(broker(1, 10)), None),
    (brokers(), gone(4)),
    (brokers(), gone(99)),
]


def write_versions(tables: DeltaRsTables, writes: list, first_txn: int = 0) -> None:
    for i, (rows, deletes) in enumerate(writes):
        tables.upsert("brokers", rows, KEYS, BROKERS, ("test", first_txn + i), deletes)


def diff(tables: DeltaRsTables, version: int) -> list[tuple]:
    """What version ``version`` changed, from the table's rows before and after it: (change type, row)."""
    def rows(v: int) -> dict:
        if v < 0:
            return {}
        table = DeltaTable(tables.path("brokers"), version=v).to_pyarrow_table()
        return {key(r): plain(r) for r in table.to_pylist()}

    before, after = rows(version - 1), rows(version)
    found = []
    for k in sorted(before.keys() | after.keys()):
        if k not in before:
            found.append(("insert", after[k]))
        elif k not in after:
            found.append(("delete", before[k]))
        elif before[k] != after[k]:
            found += [("update_preimage", before[k]), ("update_postimage", after[k])]
    return found


def plain(row: dict) -> dict:
    """The table's columns of a row, its time as microseconds since the epoch: Arrow gives it with UTC as
    its zone, Spark's collect in the local time zone without one, JSON lines as text."""
    when = row["last_timestamp"]
    when = datetime.fromisoformat(when) if isinstance(when, str) else when
    return {**{k: row[k] for k in BROKERS.names}, "last_timestamp": round(when.timestamp() * 1_000_000)}


def key(row: dict) -> tuple:
    return tuple(row[k] for k in KEYS)


ORDER = {"insert": 0, "delete": 0, "update_preimage": 0, "update_postimage": 1}


def recorded(rows: list[dict]) -> list[tuple]:
    """Change rows as (change type, the table's row), in ``diff``'s order; an update that changed nothing
    (its pre- and post-image equal: Delta's MERGE records those too) left out."""
    found = [(r["_change_type"], plain(r)) for r in rows]
    pre = {key(r): r for t, r in found if t == "update_preimage"}
    post = {key(r): r for t, r in found if t == "update_postimage"}
    same = {k for k, r in pre.items() if post.get(k) == r}
    kept = [(t, r) for t, r in found if not (t.startswith("update") and key(r) in same)]
    return sorted(kept, key=lambda c: (key(c[1]), ORDER[c[0]]))


@pytest.fixture
def tables(tmp_path: Path) -> DeltaRsTables:
    return DeltaRsTables(str(tmp_path / "warehouse"))


def test_every_state_table_and_only_those_records_its_changes(tables: DeltaRsTables) -> None:
    states = [n for w in ("controller", "quorum") for n in tables_of(w, "state")]
    assert {"brokers", "topics", "partitions", "configs"} <= set(states)
    for name in states + ["partition_history", "metadata_log", "rejected"]:
        tables.create_if_missing(name, table_arrow_schema(name))
        configuration = tables.table(name).metadata().configuration
        assert (configuration.get(CHANGE_DATA_FEED) == "true") == (table_role(name)["role"] == "state"), name
        assert configuration[FORMAT_PROPERTY] == "2"
    assert table_properties("not_declared") == {FORMAT_PROPERTY: "2"}


def test_delta_rs_merges_record_exactly_what_each_version_changed(tables: DeltaRsTables) -> None:
    write_versions(tables, WRITES)
    table = tables.table("brokers")
    assert table.version() == 6  # the creation, then one commit per write
    for version in range(1, 7):
        assert recorded(changes(table, version, version).to_pylist()) == diff(tables, version), version
    every = changes(table, 1, 6)
    assert set(every.column("_commit_version").to_pylist()) == {1, 2, 3, 4, 5}
    # the update that changed nothing is recorded as Delta's own MERGE records it: a pre- and post-image
    same = [r["_change_type"] for r in changes(table, 4, 4).to_pylist()]
    assert same == ["update_preimage", "update_postimage"]
    # updates and deletes of a MERGE are written as change data files (_change_data), inserts are not
    assert any(entry.name.endswith(".parquet") for entry in (Path(tables.path("brokers")) / "_change_data").iterdir())


def test_a_state_table_of_an_earlier_release_records_its_changes_once_prepared(tables: DeltaRsTables) -> None:
    DeltaTable.create(tables.path("brokers"), BROKERS)  # as release c283518 made it: no properties
    write_versions(tables, WRITES[:1])
    with pytest.raises(NoChangeData, match="recorded no change data at version 1"):
        change_data_from(tables.path("brokers"), 1)
    tables.prepare("brokers", BROKERS)
    table = tables.table("brokers")
    assert table.metadata().configuration.get(CHANGE_DATA_FEED) == "true"
    assert FORMAT_PROPERTY not in table.metadata().configuration  # a format-1 table stays format 1
    enabled = table.version()
    write_versions(tables, WRITES[2:3], first_txn=1)
    change_data_from(tables.path("brokers"), enabled)
    assert recorded(changes(tables.table("brokers"), enabled + 1, enabled + 1).to_pylist()) == \
        diff(tables, enabled + 1)
    tables.prepare("brokers", BROKERS)  # nothing left to do: no commit
    assert tables.version("brokers") == enabled + 1


def alerts(capsys: pytest.CaptureFixture, warehouse: Path, *options: str) -> tuple[int, str, str]:
    """The alerts job over ``brokers`` (--once): its exit code, stdout and stderr."""
    code = alerts_job.main(["--warehouse", str(warehouse), "--table", "brokers", "--once", *options])
    out, err = capsys.readouterr()
    return code, out, err


def rows_of(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def by_version(rows: list[dict]) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {}
    for r in rows:
        found.setdefault(r["_commit_version"], []).append(r)
    return found


def test_the_change_feed_reaches_spark_once_in_batch_and_stream_across_restarts(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "warehouse"
    warehouse = Warehouse(str(root), engine="delta-rs", spark=spark)
    write_versions(warehouse, WRITES[:3])  # versions 1..3
    batch = by_version([r.asDict(recursive=True) for r in
                        warehouse.read_changes("brokers", stream=False, starting_version=2).collect()])
    assert sorted(batch) == [2, 3]
    assert all(recorded(batch[v]) == diff(warehouse, v) for v in batch)

    # a stream without a starting version: the rows at the version it begins at, as inserts of that version
    code, out, _ = alerts(capsys, root, "--where", "true", "--format", "json")
    first = rows_of(out)
    assert code == 0
    assert sorted((r["_change_type"], r["_commit_version"]) for r in first) == [("insert", 3)] * 3
    now = DeltaTable(warehouse.path("brokers"), version=3).to_pyarrow_table().to_pylist()
    assert sorted(map(plain, first), key=key) == sorted(map(plain, now), key=key)

    write_versions(warehouse, WRITES[3:], first_txn=3)  # versions 4..6
    code, out, _ = alerts(capsys, root, "--where", "true", "--format", "json")
    then = by_version(rows_of(out))
    assert code == 0
    assert sorted(then) == [4, 5]  # once each: nothing of 1..3 again; 6 changed nothing
    assert all(recorded(then[v]) == diff(warehouse, v) for v in then)
    assert alerts(capsys, root, "--where", "true")[:2] == (0, "")  # nothing new: nothing said

    # the recipe: one alert line per change that matters, here each broker fenced, from version 1 on
    code, out, _ = alerts(capsys, root, "--where", "_change_type = 'update_postimage' AND fenced",
                          "--starting-version", "1", "--checkpoint", str(tmp_path / "fenced"))
    assert code == 0
    assert out.splitlines() == [line for line in out.splitlines() if " brokers update_postimage version=3 " in line]
    assert len(out.splitlines()) == 1 and " broker_id=2 epoch=20 " in out and " fenced=true " in out

    # a table created again (controller --reset) is not read on from the old stream's checkpoint
    shutil.rmtree(warehouse.path("brokers"))
    write_versions(warehouse, WRITES[:1], first_txn=100)
    code, out, err = alerts(capsys, root, "--where", "true")
    assert (code, out) == (1, "")
    assert "was created again after this stream began reading it" in err


def episode(kind: str, entity: str, start: int, end: int | None = None, **more: object) -> dict:
    """An anomalies row as the controller's sink writes one (times in ms, as its rows carry them)."""
    return {"kind": kind, "entity": entity, "broker_id": None, "topic": None, "topic_id": None, "partition": None,
            "start_offset": start, "start_time": 1_763_580_000_000 + start, "end_offset": end,
            "end_time": None if end is None else 1_763_580_000_000 + end, "cause": "fenced", "cause_offset": start,
            "cause_type": "FenceBrokerRecord", "detail": f"{kind} of {entity}", **more}


def test_the_alerts_recipe_says_each_new_anomaly_once_and_not_its_end(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "warehouse"
    tables = DeltaRsTables(str(root))
    schema, keys = table_arrow_schema("anomalies"), list(table_keys("anomalies"))
    offline = episode("offline_partition", "orders-3", 7, topic="orders", partition=3)
    tables.upsert("anomalies", rows_to_arrow("anomalies", [offline, episode("broker_flapping", "broker 2", 9,
                                                                              broker_id=2)]),
                  keys, schema, ("sink", 0))

    def said() -> list[str]:  # the job as the docs run it: no --table, no --where
        code = alerts_job.main(["--warehouse", str(root), "--once"])
        out, _ = capsys.readouterr()
        assert code == 0
        return out.splitlines()

    first = said()
    assert sorted(line.split(" kind=")[1].split(" ")[0] for line in first) == ["broker_flapping", "offline_partition"]
    assert all(" anomalies insert " in line for line in first)
    # the offline partition gets its leader back (its episode closed) and a new episode opens: only the new one
    tables.upsert("anomalies", rows_to_arrow("anomalies", [{**offline, "end_offset": 12,
                                                            "end_time": 1_763_580_000_012},
                                                           episode("under_min_isr", "orders-4", 12)]),
                  keys, schema, ("sink", 1))
    then = said()
    assert len(then) == 1 and " kind=under_min_isr entity=orders-4 " in then[0] and " start_offset=12 " in then[0], then
    assert said() == []  # nothing new: nothing said
