"""The delta-rs storage layer on real Delta tables, without Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

import kraftlake
from kraftlake.storage import DELTA_RS, Warehouse, native, resolve_engine
from kraftlake.storage import deltars
from kraftlake.storage.deltars import (DeltaRsTables, batch_end, column_max, file_ranges, nth_value_after, read_range,
                                       split_range)

LOG = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("type", pa.string()),
        pa.field("BrokerHeartbeatRequest", pa.struct([("BrokerId", pa.int32()), ("WantShutDown", pa.bool_())])),
    ]
)
KV = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("v", pa.string())])


def log_rows(offsets: list[int]) -> pa.Table:
    return pa.table(
        {
            "offset": offsets,
            "type": ["BrokerHeartbeatRequest"] * len(offsets),
            "BrokerHeartbeatRequest": [{"BrokerId": o % 3, "WantShutDown": False} for o in offsets],
        },
        schema=LOG,
    )


def offsets(tables: DeltaRsTables, name: str) -> list[int]:
    return sorted(tables.read_arrow(name, columns=["offset"]).column("offset").to_pylist())


@pytest.fixture
def tables(tmp_path: Path) -> DeltaRsTables:
    return DeltaRsTables(str(tmp_path / "warehouse"))


def test_append_is_idempotent_per_transaction(tables: DeltaRsTables) -> None:
    assert tables.txn_version("metadata_log", "ingest") is None
    assert tables.append("metadata_log", log_rows([0, 1, 2]), LOG, txn=("ingest", 0))
    assert not tables.append("metadata_log", log_rows([0, 1, 2]), LOG, txn=("ingest", 0))
    assert offsets(tables, "metadata_log") == [0, 1, 2]
    assert tables.append("metadata_log", log_rows([3]), LOG, txn=("ingest", 1))
    assert not tables.append("metadata_log", log_rows([3]), LOG, txn=("ingest", 0))  # older version: done too
    assert tables.append("metadata_log", log_rows([4]), LOG, txn=("other-app", 0))
    assert offsets(tables, "metadata_log") == [0, 1, 2, 3, 4]
    assert tables.txn_version("metadata_log", "ingest") == 1
    assert tables.txn_version("metadata_log", "other-app") == 0


def test_empty_append_still_commits_its_transaction(tables: DeltaRsTables) -> None:
    tables.create_if_missing("metadata_log", LOG)
    assert tables.append("metadata_log", log_rows([]), LOG, txn=("q", 7))
    assert tables.txn_version("metadata_log", "q") == 7
    assert offsets(tables, "metadata_log") == []


def test_append_streams_a_record_batch_reader(tables: DeltaRsTables) -> None:
    pulled: list[int] = []

    def batches():
        for start in range(0, 50, 10):
            pulled.append(start)
            yield log_rows(list(range(start, start + 10))).to_batches()[0]

    reader = pa.RecordBatchReader.from_batches(LOG, batches())
    assert pulled == []  # nothing was read ahead of the writer
    assert tables.append("metadata_log", reader, LOG, txn=("ingest", 0))
    assert pulled == [0, 10, 20, 30, 40]
    assert offsets(tables, "metadata_log") == list(range(50))
    assert tables.version("metadata_log") == 1  # created (version 0), then one commit for all batches
    # A plain iterable of batches, cast to the schema (int32 offsets become the table's int64).
    narrow = pa.record_batch({"offset": pa.array([50], pa.int32()), "type": ["x"], "BrokerHeartbeatRequest": [None]})
    assert tables.append("metadata_log", [narrow], LOG)
    assert offsets(tables, "metadata_log")[-1] == 50


def test_append_merges_a_new_struct_column(tables: DeltaRsTables) -> None:
    tables.append("metadata_log", log_rows([0, 1]), LOG)
    wider = LOG.append(pa.field("FenceBrokerRecord", pa.struct([("Id", pa.int32()), ("Epoch", pa.int64())])))
    rows = pa.table(
        {
            "offset": [2],
            "type": ["FenceBrokerRecord"],
            "BrokerHeartbeatRequest": [None],
            "FenceBrokerRecord": [{"Id": 1, "Epoch": 5}],
        },
        schema=wider,
    )
    assert tables.append("metadata_log", rows, wider, txn=("ingest", 1))
    assert tables.table("metadata_log").schema().to_arrow().names == wider.names
    got = tables.read_arrow("metadata_log").sort_by("offset")
    assert got.column("FenceBrokerRecord").to_pylist() == [None, None, {"Id": 1, "Epoch": 5}]
    assert got.column("BrokerHeartbeatRequest").to_pylist()[0] == {"BrokerId": 0, "WantShutDown": False}


def test_upsert_updates_inserts_deletes_once(tables: DeltaRsTables) -> None:
    def state() -> list[dict]:
        return tables.read_arrow("brokers").sort_by("id").to_pylist()

    first = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=KV)
    assert tables.upsert("brokers", first, ["id"], KV, txn=("ctl", 0))
    batch = pa.table({"id": [2, 4], "v": ["B", "d"]}, schema=KV)
    gone = pa.table({"id": pa.array([1, 9], pa.int32())})  # 9 is absent: deleting it is a no-op
    assert tables.upsert("brokers", batch, ["id"], KV, txn=("ctl", 1), delete_keys=gone)
    expected = [{"id": 2, "v": "B"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    assert state() == expected
    version = tables.version("brokers")
    # The retry of batch 1 (even with different content) changes nothing.
    assert not tables.upsert("brokers", pa.table({"id": [3], "v": ["X"]}, schema=KV), ["id"], KV, ("ctl", 1), gone)
    assert state() == expected and tables.version("brokers") == version
    assert tables.txn_version("brokers", "ctl") == 1
    assert "__kraftlake_delete" not in tables.table("brokers").schema().to_arrow().names
    # Deletes alone, and an empty batch that still records its transaction.
    only_deletes = pa.table({"id": pa.array([3], pa.int32())})
    assert tables.upsert("brokers", KV.empty_table(), ["id"], KV, ("ctl", 2), only_deletes)
    assert tables.upsert("brokers", KV.empty_table(), ["id"], KV, ("ctl", 3))
    assert state() == [{"id": 2, "v": "B"}, {"id": 4, "v": "d"}]
    assert tables.txn_version("brokers", "ctl") == 3


def test_upsert_keeps_unmatched_rows_of_a_non_null_key(tables: DeltaRsTables) -> None:
    """delta-rs#4527: a nullable source key made MERGE reject the target rows it did not match."""
    tables.append("metadata_log", log_rows([1, 2, 3]), LOG)
    assert tables.upsert("metadata_log", log_rows([3]), ["offset"], LOG, delete_keys=pa.table({"offset": [1]}))
    assert offsets(tables, "metadata_log") == [2, 3]


def test_reads_max_and_names(tables: DeltaRsTables) -> None:
    assert tables.names() == [] and tables.max_value("metadata_log", "offset") is None
    for chunk in ([0, 1], [5, 9], [12]):
        tables.append("metadata_log", log_rows(chunk), LOG)
    tables.create_if_missing("responses", KV)
    assert tables.names() == ["metadata_log", "responses"]
    assert tables.exists("responses") and not tables.exists("brokers")
    assert tables.max_value("metadata_log", "offset") == 12
    assert tables.max_value("responses", "id") is None
    got = tables.read_arrow("metadata_log", columns=["offset"], filter=pc.field("offset") > 4)
    assert sorted(got.column("offset").to_pylist()) == [5, 9, 12]
    assert tables.version("metadata_log") == 3  # created, then three appends


BATCHED = pa.schema([pa.field("offset", pa.int64(), nullable=False), pa.field("source", pa.string()),
                     pa.field("position", pa.int64())])


def test_the_end_of_a_record_batch_is_where_its_source_position_changes(tables: DeltaRsTables) -> None:
    """Records of one Kafka batch share source and position; a micro-batch may end only after a batch's last."""
    rows = ([(o, "a.log", 0) for o in range(0, 3)] + [(3, "a.log", 90)] + [(o, "a.log", 170) for o in range(4, 700)]
            + [(700, "b.log", 170), (701, None, None), (702, None, None), (703, "b.log", 0), (704, "b.log", 0)])
    for chunk in (rows[:2], rows[2:500], rows[500:]):  # a batch across files too
        tables.append("metadata_log", pa.Table.from_pylist([dict(zip(BATCHED.names, r)) for r in chunk], BATCHED),
                      BATCHED)
    table = tables.table("metadata_log")
    assert [batch_end(table, "offset", o) for o in (0, 1, 2, 3, 4, 257, 699)] == [2, 2, 2, 3, 699, 699, 699]
    assert [batch_end(table, "offset", o) for o in (700, 701, 702, 703, 704)] == [700, 701, 702, 704, 704]
    assert batch_end(table, "offset", 4, bound=100) == 104  # a batch longer than the bound is cut there


def test_relative_and_file_uri_roots_become_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert DeltaRsTables("wh").root == str(tmp_path / "wh")
    assert DeltaRsTables(f"file://{tmp_path}/wh/").path("log") == str(tmp_path / "wh" / "log")


def test_rows_by_offset_open_only_the_files_that_hold_them(tables: DeltaRsTables) -> None:
    """A status line's lookups of one offset must not open every file of a log that gains one a second."""
    chunks = [[0, 1, 2], [5], [6, 9, 10], [11]]
    for chunk in chunks:
        tables.append("metadata_log", log_rows(chunk), LOG)
    rows = tables.read_offsets("metadata_log", 2, 9, ["type"])
    assert rows.column_names == ["type"] and rows.num_rows == 4  # 2, 5, 6, 9
    assert tables.read_offsets("metadata_log", 6, 6).column("offset").to_pylist() == [6]
    assert tables.read_offsets("metadata_log", 3, 4).num_rows == 0
    # the files holding 0..2 and 11 gone from disk: a read that opened them would fail
    table = tables.table("metadata_log")
    for action in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        if action["min.offset"] in (0, 11):
            os.remove(os.path.join(tables.path("metadata_log"), action["path"]))
    assert tables.read_offsets("metadata_log", 5, 10).column("offset").to_pylist() == [5, 6, 9, 10]
    with pytest.raises(OSError):
        tables.read_arrow("metadata_log", filter=pc.field("offset") == 6)


def test_rows_with_a_null_open_only_the_files_that_count_one(tables: DeltaRsTables) -> None:
    schema = pa.schema([pa.field("kind", pa.string()), pa.field("end_offset", pa.int64())])
    for kinds, ends in ((["a", "b"], [1, 2]), (["c"], [None]), (["d", "e"], [3, None]), (["f"], [4])):
        tables.append("anomalies", pa.table({"kind": kinds, "end_offset": ends}, schema=schema), schema)
    assert sorted(tables.read_nulls("anomalies", "end_offset").column("kind").to_pylist()) == ["c", "e"]
    table = tables.table("anomalies")
    for action in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        if action["null_count.end_offset"] == 0:
            os.remove(os.path.join(tables.path("anomalies"), action["path"]))
    assert sorted(tables.read_nulls("anomalies", "end_offset").column("kind").to_pylist()) == ["c", "e"]
    with pytest.raises(OSError):
        tables.read_arrow("anomalies", filter=pc.field("end_offset").is_null())


def test_offset_helpers_with_gaps_many_files_and_compaction(tables: DeltaRsTables) -> None:
    chunks = [[0, 1, 2], [5], [6, 9, 10], [11], [20, 21, 22, 30]]
    for chunk in chunks:
        tables.append("metadata_log", log_rows(chunk), LOG)
    everything = [o for chunk in chunks for o in chunk]

    def check(table: DeltaTable) -> None:
        for after in (-1, 0, 4, 9, 22, 30):
            tail = [o for o in everything if o > after]
            for n in (1, 3, 5, 100):
                assert nth_value_after(table, "offset", after, n) == (tail[n - 1] if len(tail) >= n else None)
        assert column_max(table, "offset") == 30
        assert read_range(table, "offset", 2, 11).column("offset").to_pylist() == [5, 6, 9, 10, 11]
        for target in (1, 4, 1000):
            ranges = split_range(table, "offset", -1, 30, target)
            assert ranges[0][0] == -1 and ranges[-1][1] == 30
            assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))

    table = tables.table("metadata_log")
    check(table)
    # Cuts fall on file boundaries inside the range: here every file is a range of its own.
    assert split_range(table, "offset", 1, 21, 1) == [(1, 2), (2, 5), (5, 10), (10, 11), (11, 21)]
    assert split_range(table, "offset", 1, 21, 4) == [(1, 5), (5, 11), (11, 21)]  # whole files: 3+1, 3+1, rest
    table.optimize.compact()  # one file now: the same answers, and nothing to cut at
    compacted = tables.table("metadata_log")
    assert len(compacted.file_uris()) == 1
    check(compacted)
    assert split_range(compacted, "offset", -1, 30, 1) == [(-1, 30)]


def log_ranges(tables: DeltaRsTables) -> list[tuple[int, int, int]]:
    """(first offset, last offset, rows) of each active file of metadata_log, in offset order."""
    return sorted((r.lo, r.hi, r.num_records) for r in file_ranges(tables.table("metadata_log"), "offset"))


def test_compaction_rewrites_the_oldest_small_files_into_one_with_the_same_rows(tables: DeltaRsTables) -> None:
    """A continuous ingest commits a small file a second, and every load of the table reads each file's statistics."""
    for i in range(12):
        tables.append("metadata_log", log_rows([3 * i, 3 * i + 1, 3 * i + 2]), LOG, txn=("ingest", i))
    before = tables.table("metadata_log")
    assert not tables.compact("metadata_log", "offset", files=13)  # fewer small files than that: nothing committed
    assert tables.version("metadata_log") == before.version()
    assert tables.compact("metadata_log", "offset", files=5)
    assert tables.version("metadata_log") == before.version() + 1
    assert log_ranges(tables) == [(0, 14, 15)] + [(3 * i, 3 * i + 2, 3) for i in range(5, 12)]
    rows = tables.read_arrow("metadata_log").sort_by("offset")
    assert rows.to_pylist() == log_rows(list(range(36))).to_pylist()
    after = tables.table("metadata_log")
    assert after.schema().to_json() == before.schema().to_json()  # a streaming source refuses a changed schema
    assert after.metadata().configuration == before.metadata().configuration
    assert after.transaction_version("ingest") == 11  # ingest's record of what it committed is kept
    assert tables.read_offsets("metadata_log", 13, 16).column("offset").to_pylist() == [13, 14, 15, 16]
    # the version before still reads its own files: a reader that loaded it is not disturbed
    assert DeltaTable(tables.path("metadata_log"), version=before.version()).to_pyarrow_table().num_rows == 36


def test_compaction_keeps_large_files_and_never_spans_one(tables: DeltaRsTables,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deltars, "ROW_GROUP_ROWS", 10)  # a file of 10 rows or more is not small
    chunks = [[0, 1], [2, 3], [4], list(range(5, 15)), [15], [16, 17], [18], [19], [20, 21], [22]]
    for chunk in chunks:
        tables.append("metadata_log", log_rows(chunk), LOG)
    assert tables.compact("metadata_log", "offset", files=5)  # the three before the large file are too few
    assert log_ranges(tables) == [(0, 1, 2), (2, 3, 2), (4, 4, 1), (5, 14, 10), (15, 21, 7), (22, 22, 1)]
    assert not tables.compact("metadata_log", "offset", files=4)  # no four small files follow each other now
    assert offsets(tables, "metadata_log") == list(range(23))


def test_compaction_planned_on_a_version_another_writer_passed_commits_nothing(tables: DeltaRsTables) -> None:
    class Raced(DeltaRsTables):
        raced = False

        def table(self, name: str) -> DeltaTable:
            loaded = super().table(name)
            if not self.raced:
                self.raced = True
                DeltaRsTables(self.root).append(name, log_rows([100]), LOG)
            return loaded

    for i in range(4):
        tables.append("metadata_log", log_rows([i]), LOG)
    raced = Raced(tables.root)
    assert not raced.compact("metadata_log", "offset", files=4)
    assert log_ranges(tables) == [(0, 0, 1), (1, 1, 1), (2, 2, 1), (3, 3, 1), (100, 100, 1)]
    assert tables.compact("metadata_log", "offset", files=4)  # the next call does it
    assert log_ranges(tables) == [(0, 3, 4), (100, 100, 1)]


def test_rows_of_a_few_types_skip_the_row_groups_that_cannot_hold_them(tables: DeltaRsTables) -> None:
    def rows(offsets: list[int], type_: str) -> pa.Table:
        return log_rows(offsets).set_column(1, "type", pa.array([type_] * len(offsets)))

    tables.append("metadata_log", rows([0, 1, 2], "NoOpRecord"), LOG)
    tables.append("metadata_log", rows([3, 4], "VoteRequest"), LOG)
    tables.append("metadata_log", rows([5, 6, 7], "PartitionChangeRecord"), LOG)
    mixed = pa.concat_tables([rows([8], "FetchRequest"), rows([9], "PartitionChangeRecord")])
    tables.append("metadata_log", mixed, LOG)  # stats FetchRequest..PartitionChangeRecord: may hold a Fetch
    table = tables.table("metadata_log")
    quorum = ("type", ["FetchRequest", "VoteRequest"])
    assert read_range(table, "offset", -1, 9, ["offset", "type"], quorum).column("offset").to_pylist() == [3, 4, 8]
    assert read_range(table, "offset", 4, 7, only=quorum).num_rows == 0
    assert read_range(table, "offset", -1, 9, ["offset"], ("type", ["NoOpRecord"])).column("offset").to_pylist() \
        == [0, 1, 2]


def test_delta_rs_tables_do_not_import_spark() -> None:
    probe = "import sys, kraftlake.storage.deltars, kraftlake.storage; print('pyspark' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(Path(kraftlake.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "False"


def test_engine_selection_without_a_session(tmp_path: Path) -> None:
    assert Warehouse(str(tmp_path)).engine == DELTA_RS
    assert Warehouse(str(tmp_path), engine="delta-rs").engine == DELTA_RS
    with pytest.raises(native.ConnectorMissing, match="SparkSession"):
        Warehouse(str(tmp_path), engine="native")
    with pytest.raises(ValueError, match="unknown storage engine"):
        resolve_engine("parquet", None)
    with pytest.raises(ValueError, match="spark=session"):
        Warehouse(str(tmp_path)).read_df("metadata_log")


def fake_session(extensions: str, loadable: bool) -> SimpleNamespace:
    def for_name(name: str, initialize: bool, loader: object) -> object:
        if not loadable:
            raise RuntimeError(f"java.lang.ClassNotFoundException: {name}")
        return object()

    lang = SimpleNamespace(
        Class=SimpleNamespace(forName=for_name),
        Thread=SimpleNamespace(currentThread=lambda: SimpleNamespace(getContextClassLoader=lambda: None)),
    )
    return SimpleNamespace(
        conf=SimpleNamespace(get=lambda key, default=None: extensions if key == "spark.sql.extensions" else default),
        _jvm=SimpleNamespace(java=SimpleNamespace(lang=lang)),
    )


@pytest.mark.parametrize(
    ("extensions", "loadable", "expected"),
    [
        ("", False, "delta-rs"),
        (native.EXTENSION, False, "delta-rs"),  # configured, but the jars are not on the classpath
        ("", True, "delta-rs"),  # jars without the extension cannot MERGE or take txn ids
        (f"com.example.Other, {native.EXTENSION}", True, "native"),
    ],
)
def test_auto_engine_follows_the_connector(extensions: str, loadable: bool, expected: str) -> None:
    assert resolve_engine("auto", fake_session(extensions, loadable)) == expected


def test_forcing_native_without_the_connector_says_how_to_add_it() -> None:
    with pytest.raises(native.ConnectorMissing) as error:
        resolve_engine("native", fake_session(native.EXTENSION, loadable=False))
    message = str(error.value)
    assert "--packages io.delta:delta-spark_2.13:4.4.1" in message and "--jars" in message
    assert resolve_engine("native", fake_session(native.EXTENSION, loadable=True)) == "native"
