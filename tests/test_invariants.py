"""``kraftlake.controller.invariants`` and ``jobs/check.py``: the real logs break no KIP-841 invariant, and logs broken on
purpose are reported at exactly the broken offsets, with the right kind, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from kraftlake.storage import ingest
from kraftlake.metadata import uuids
from kraftlake.codec import FROM_SNAPSHOT, FULL_HISTORY, HISTORY, read_partition_dir
from kraftlake.codec.events import check_struct
from kraftlake.controller.invariants import (CONTROLLED_SHUTDOWN, FENCED, INELIGIBLE_LEADER_ELECTED,
    INELIGIBLE_REPLICA_ADDED_TO_ISR, LEADER_NOT_IN_ISR, UNFENCED, UNREGISTERED, UNREGISTERED_LEADER_ELECTED,
    UNREGISTERED_REPLICA_ADDED_TO_ISR, InvariantChecker, check_events)
from kraftlake.cli import check as check_job
from kraftlake.cli.check import check_warehouse, warehouse_events
from kraftlake.cli.launcher import UserError, run_job
from kraftlake.metadata.tables import metadata_log_schema
from kraftlake.metadata.schemas import registry
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.tables import controller_log_schema, controller_log_to_arrow, events_to_arrow

REPO = Path(__file__).resolve().parent.parent

SHUTDOWN = "single-broker-shutdown"
TS = 1_763_580_879_457
T1 = uuids.from_bytes(bytes([1] * 16))


def ev(type_: str, version: int = 0, **fields) -> dict:
    """A record with every field of its version, validated like hand-written input."""
    return {"type": type_, "version": version, "data": check_struct(registry()[type_], fields, version, type_)}


def numbered(events: list[dict]) -> list[dict]:
    """Offsets 0.. in list order, one millisecond apart."""
    return [{**e, "offset": i, "leader_epoch": 1, "timestamp": TS + i} for i, e in enumerate(events)]


def found(events: list[dict]) -> list[tuple[int, str, int, str]]:
    return [(v.offset, v.kind, v.broker, v.broker_state) for v in check_events(events)]


def register(broker: int, fenced: bool = False) -> dict:
    return ev("RegisterBrokerRecord", 3, BrokerId=broker, IncarnationId=uuids.from_bytes(bytes([0xA0 + broker] * 16)),
              BrokerEpoch=10 + broker, EndPoints=[{"Name": "PLAINTEXT", "Host": f"b{broker}", "Port": 9092,
                                                   "SecurityProtocol": 0}],
              Features=[], Rack=None, Fenced=fenced, InControlledShutdown=False)


def fence(broker: int) -> dict:
    return ev("BrokerRegistrationChangeRecord", 1, BrokerId=broker, BrokerEpoch=10 + broker, Fenced=1)


def unfence(broker: int) -> dict:
    return ev("BrokerRegistrationChangeRecord", 1, BrokerId=broker, BrokerEpoch=10 + broker, Fenced=-1)


def shut_down(broker: int) -> dict:
    return ev("BrokerRegistrationChangeRecord", 1, BrokerId=broker, BrokerEpoch=10 + broker, InControlledShutdown=1)


def partition(pid: int, replicas: list[int], isr: list[int], leader: int, topic: str = T1) -> dict:
    return ev("PartitionRecord", 0, PartitionId=pid, TopicId=topic, Replicas=replicas, Isr=isr, Leader=leader)


def change(pid: int, topic: str = T1, **fields) -> dict:
    return ev("PartitionChangeRecord", 0, PartitionId=pid, TopicId=topic, **fields)


# Three unfenced brokers; t-0 and t-1 on [1,2,3] led by 1, t-2 on [2] led by 2.
CLUSTER = [register(1), register(2), register(3), ev("TopicRecord", Name="t", TopicId=T1),
           partition(0, [1, 2, 3], [1, 2, 3], 1), partition(1, [1, 2, 3], [1, 2, 3], 1), partition(2, [2], [2], 2)]


# --- the real logs ---

@pytest.mark.parametrize("name,start,events,changes", [
    ("single-broker-shutdown", FROM_SNAPSHOT, 4929, 108),
    ("single-broker-restarts", FROM_SNAPSHOT, 3072, 0),
    ("single-broker-snapshot", FROM_SNAPSHOT, 563, 102),  # from the snapshot at 7209
    ("single-broker-snapshot", HISTORY, 7707, 102),  # the segment holds the whole log
    ("single-broker-snapshot", FULL_HISTORY, 7707, 102),
    # every record of expected-image.json's record_counts; its 52 PartitionRecords + 1,108 changes
    ("three-brokers-restarts", FROM_SNAPSHOT, 12064, 1160),
])
def test_real_logs_break_no_invariant(fixtures_dir, name, start, events, changes):
    checker = InvariantChecker()
    violations = [v for e in read_partition_dir(fixtures_dir / name / "__cluster_metadata-0", start)
                  for v in checker.check(e)]
    assert violations == []
    assert (checker.events_checked, checker.partition_changes, checker.not_applied) == (events, changes, 0)


def shutdown_log(fixtures_dir: Path) -> list[dict]:
    return list(read_partition_dir(fixtures_dir / SHUTDOWN / "__cluster_metadata-0"))


def insert_after(events: list[dict], inserts: dict[int, list[dict]]) -> tuple[list[dict], list[int]]:
    """``inserts[o]`` placed right after the event at offset ``o``, everything renumbered 0..; the new
    offsets of the inserted events, in insertion order."""
    out, marks = [], []
    for event in events:
        out.append(event)
        for extra in inserts.get(event["offset"], []):
            marks.append(len(out))
            out.append({**extra, "leader_epoch": 1, "timestamp": event["timestamp"]})
    return [{**e, "offset": i} for i, e in enumerate(out)], marks


def test_a_broken_real_log_is_reported_at_exactly_the_broken_offsets(fixtures_dir):
    # single-broker-shutdown: broker 1 enters controlled shutdown at 4871, every partition's leader
    # moves to -1 at 4872..4925 (ISR [1] kept, as Kafka does), and broker 1 is fenced at 4926.
    events = shutdown_log(fixtures_dir)
    changes = {e["offset"]: e["data"] for e in events if e["type"] == "PartitionChangeRecord"}
    topic = {o: d["TopicId"] for o, d in changes.items()}
    pid = {o: d["PartitionId"] for o, d in changes.items()}
    broken, offsets = insert_after(events, {
        4870: [change(pid[4872], topic[4872], Isr=[])],  # the leader (1, unfenced) leaves its own ISR
        4873: [change(pid[4873], topic[4873], Leader=1)],  # re-elects the broker in controlled shutdown
        4874: [change(pid[4874], topic[4874], Isr=[]),  # legal: leader -1, empty ISR
               change(pid[4874], topic[4874], Isr=[1])],  # adds the broker in controlled shutdown back
        4926: [change(pid[4925], topic[4925], Leader=1)],  # elects the fenced broker
    })
    assert [v.offset for v in check_events(events)] == []
    assert found(broken) == [
        (offsets[0], LEADER_NOT_IN_ISR, 1, UNFENCED),
        (offsets[1], INELIGIBLE_LEADER_ELECTED, 1, CONTROLLED_SHUTDOWN),
        (offsets[3], INELIGIBLE_REPLICA_ADDED_TO_ISR, 1, CONTROLLED_SHUTDOWN),
        (offsets[4], INELIGIBLE_LEADER_ELECTED, 1, FENCED),
    ]
    v = list(check_events(broken))[3]
    assert (v.topic, v.topic_id, v.partition, v.event_type) == ("__consumer_offsets", topic[4925], pid[4925],
                                                                "PartitionChangeRecord")
    assert (v.leader_before, v.leader_after, v.isr_before, v.isr_after) == (-1, 1, (1,), (1,))
    assert v.timestamp == events[4926]["timestamp"] and v.cause_offset is None


# --- hand-made logs: one broken record each, and the legal moves next to them ---

@pytest.mark.parametrize("tail,expected", [
    # Kafka's failover: fenced 2 leaves t-0's ISR; t-2 (only 2) goes offline with ISR [2] kept.
    ([fence(2), change(0, Isr=[1, 3]), change(2, Leader=-1), change(2, Replicas=[2, 3])], []),
    # A PartitionChangeRecord that elects a fenced broker still in the ISR.
    ([fence(2), change(0, Leader=2)], [(8, INELIGIBLE_LEADER_ELECTED, 2, FENCED)]),
    # The same leader re-elected (a new leader epoch) while it is in controlled shutdown.
    ([shut_down(1), change(0, Leader=1)], [(8, INELIGIBLE_LEADER_ELECTED, 1, CONTROLLED_SHUTDOWN)]),
    # A broker in controlled shutdown added back to an ISR it had left.
    ([change(1, Isr=[1, 2]), shut_down(3), change(1, Isr=[1, 2, 3])],
     [(9, INELIGIBLE_REPLICA_ADDED_TO_ISR, 3, CONTROLLED_SHUTDOWN)]),
    # A leader outside its ISR.
    ([change(1, Isr=[2, 3])], [(7, LEADER_NOT_IN_ISR, 1, UNFENCED)]),
    # Elected and not in the ISR: two invariants, two reports.
    ([change(1, Isr=[1, 2]), fence(3), change(1, Leader=3)],
     [(9, INELIGIBLE_LEADER_ELECTED, 3, FENCED), (9, LEADER_NOT_IN_ISR, 3, FENCED)]),
    # A new partition: its leader is elected and its whole ISR added.
    ([fence(3), partition(3, [3, 1], [3, 1], 3)],
     [(8, INELIGIBLE_LEADER_ELECTED, 3, FENCED), (8, INELIGIBLE_REPLICA_ADDED_TO_ISR, 3, FENCED)]),
    # Unfenced again: eligible again.
    ([fence(2), change(0, Isr=[1, 3]), unfence(2), change(0, Isr=[1, 3, 2], Leader=2)], []),
    # A broker that is not registered at all.
    ([change(0, Isr=[1, 2, 3, 4])], [(7, UNREGISTERED_REPLICA_ADDED_TO_ISR, 4, UNREGISTERED)]),
    ([change(1, Isr=[1, 2]), ev("UnregisterBrokerRecord", BrokerId=3, BrokerEpoch=13), change(1, Replicas=[1, 2]),
      change(1, Replicas=[1, 2, 3], Leader=3, Isr=[3])],
     [(10, UNREGISTERED_LEADER_ELECTED, 3, UNREGISTERED), (10, UNREGISTERED_REPLICA_ADDED_TO_ISR, 3, UNREGISTERED)]),
    # Kafka keeps an unregistered last ISR member; later changes that keep it add nothing.
    ([fence(2), change(2, Leader=-1), ev("UnregisterBrokerRecord", BrokerId=2, BrokerEpoch=12),
      change(2, Replicas=[2, 1])], []),
    # Removing the topic removes its partitions: nothing to check.
    ([fence(1), ev("RemoveTopicRecord", TopicId=T1)], []),
])
def test_hand_made_logs(tail, expected):
    assert found(numbered(CLUSTER + tail)) == expected


def test_a_transaction_is_checked_at_its_end_and_reported_at_the_record_that_broke():
    events = numbered(CLUSTER + [
        ev("BeginTransactionRecord", Name="failover"),
        fence(2),
        change(0, Leader=2),  # 9: 2 is fenced when the transaction takes effect
        ev("LeaderChangeMessage", LeaderId=1, Voters=[]),  # a control record inside does not end it
        change(1, Isr=[1, 2]),
        ev("EndTransactionRecord"),
        # Fenced and unfenced inside one transaction: it ends unfenced, so electing 3 is fine.
        ev("BeginTransactionRecord", Name="churn"), fence(3), unfence(3), change(1, Leader=3, Isr=[1, 2, 3]),
        ev("EndTransactionRecord"),
    ])
    violations = list(check_events(events))
    assert [(v.offset, v.kind, v.broker, v.event_type) for v in violations] == [
        (9, INELIGIBLE_LEADER_ELECTED, 2, "PartitionChangeRecord")]


def test_a_snapshot_is_checked_for_leaders_in_the_isr_only():
    snapshot = [ev("SnapshotHeaderRecord", Version=0, LastContainedLogTimestamp=TS),
                register(1), register(2, fenced=True), ev("TopicRecord", Name="t", TopicId=T1),
                partition(0, [1, 2], [2], -1),  # offline, fenced last ISR member kept: legal
                partition(1, [1, 2], [2], 1),  # 5: leader outside the ISR
                ev("SnapshotFooterRecord", Version=0),
                change(0, Replicas=[2, 1])]  # keeps the fenced member, adds nobody
    assert found(numbered(snapshot)) == [(5, LEADER_NOT_IN_ISR, 1, UNFENCED)]


def test_records_that_do_not_apply_are_counted_not_checked():
    checker = InvariantChecker()
    events = numbered(CLUSTER + [change(7, Leader=2), ev("BrokerHeartbeatRequest", 1, BrokerId=2, BrokerEpoch=12)])
    assert [v for e in events for v in checker.check(e)] == []
    assert (checker.events_checked, checker.partition_changes, checker.requests, checker.not_applied) == (9, 3, 1, 1)


# --- warehouses ---

def write_log(tables: DeltaRsTables, events: list[dict], chunk: int) -> None:
    """Several small commits, so reading in chunks crosses files."""
    for i in range(0, len(events), chunk):
        tables.append("metadata_log", pa.Table.from_batches([events_to_arrow(events[i:i + chunk])]),
                      metadata_log_schema())


def write_controller_log(tables: DeltaRsTables, records: list[dict], causes: list[int]) -> None:
    """The layout with a ``cause_offset`` beside each record's own ``offset``; rows in the order given."""
    table = pa.Table.from_batches([events_to_arrow([{**r, "leader_epoch": 1, "timestamp": TS} for r in records])])
    table = table.append_column("cause_offset", pa.array(causes, pa.int64()))
    tables.append("controller_log", table, table.schema)


def test_controller_records_replay_right_after_their_cause_in_their_own_order(tmp_path):
    tables = DeltaRsTables(str(tmp_path / "w"))
    # 7: broker 2 fenced, 8: unfenced. Controller records caused by 7 see it fenced; after 8 they would not.
    write_log(tables, numbered(CLUSTER + [fence(2), unfence(2), ev("NoOpRecord")]), chunk=2)
    write_controller_log(tables, [
        {**change(1, Isr=[1, 3]), "offset": 1},  # caused by 8: 2 is unfenced again by then, so this is fine
        {**change(0, Isr=[1, 3]), "offset": 1},  # second for cause 7: leaves leader 2 outside the ISR
        {**change(0, Leader=2), "offset": 0},  # first for cause 7: elects the fenced broker (it is in the ISR)
    ], causes=[8, 7, 7])
    assert [(e["offset"], e.get("cause_offset")) for e in warehouse_events(str(tables.root), chunk_rows=1)] == [
        (0, None), (1, None), (2, None), (3, None), (4, None), (5, None), (6, None), (7, None), (0, 7), (1, 7),
        (8, None), (1, 8), (9, None)]
    violations = check_warehouse(str(tables.root))
    assert [(v.offset, v.cause_offset, v.cause_type, v.kind, v.broker, v.broker_state) for v in violations] == [
        (0, 7, "BrokerRegistrationChangeRecord", INELIGIBLE_LEADER_ELECTED, 2, FENCED),
        (1, 7, "BrokerRegistrationChangeRecord", LEADER_NOT_IN_ISR, 2, FENCED),
    ]


def test_the_streaming_jobs_controller_log_is_ordered_by_shard_then_seq(tmp_path):
    """As the streaming job writes it: ``offset`` is the cause; shard 0 holds the broker records, so its
    records come first."""
    tables = DeltaRsTables(str(tmp_path / "w"))
    write_log(tables, numbered(CLUSTER + [fence(2), ev("BrokerHeartbeatRequest", 1, BrokerId=2, BrokerEpoch=12),
                                          ev("NoOpRecord")]), chunk=4)
    rows = [{**record, "offset": 8, "leader_epoch": 1, "timestamp": TS + 8, "shard": shard, "seq": seq}
            for record, shard, seq in [
                (change(1, Leader=2), 1, 0),  # shard 1: after shard 0's unfence, so eligible
                (unfence(2), 0, 2),
                (change(0, Leader=2), 0, 1),  # shard 0, before its unfence: elects a fenced broker
            ]]
    tables.append("controller_log", controller_log_to_arrow(rows), controller_log_schema())
    violations = check_warehouse(str(tables.root))
    assert [(v.offset, v.partition, v.cause_offset, v.cause_type, v.kind, v.broker_state) for v in violations] == [
        (8, 0, 8, "BrokerHeartbeatRequest", INELIGIBLE_LEADER_ELECTED, FENCED)]


def test_a_warehouse_without_controller_log_or_without_a_log(tmp_path):
    with pytest.raises(UserError, match="no metadata_log table in .*: ingest a log first"):
        check_warehouse(str(tmp_path / "nothing"))
    tables = DeltaRsTables(str(tmp_path / "w"))
    tables.create_if_missing("metadata_log", metadata_log_schema())
    assert check_warehouse(str(tables.root)) == []


@pytest.fixture(scope="module")
def clean_warehouse(fixtures_dir, tmp_path_factory) -> str:
    tables = DeltaRsTables(str(tmp_path_factory.mktemp("clean") / "w"))
    ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN / "__cluster_metadata-0"), batch_records=1000)
    return str(tables.root)


# Hand-written what-if lines after the real log, where broker 1 ends fenced (offsets 4929..4932).
WHAT_IF = [
    {"type": "PartitionChangeRecord", "version": 1, "timestamp": "2026-01-30T17:24:00Z",
     "data": {"TopicId": "B3_HiNPgSQ6oxG9ZZ6ED5A", "PartitionId": 0, "Leader": 1}},
    {"type": "PartitionChangeRecord", "version": 1, "timestamp": "2026-01-30T17:24:01Z",
     "data": {"TopicId": "_g4of-T3Rq-jr09kDxtjFA", "PartitionId": 0, "Isr": []}},
    {"type": "PartitionChangeRecord", "version": 1, "timestamp": "2026-01-30T17:24:02Z",
     "data": {"TopicId": "_g4of-T3Rq-jr09kDxtjFA", "PartitionId": 0, "Isr": [1]}},
    {"type": "PartitionChangeRecord", "version": 1, "timestamp": "2026-01-30T17:24:03Z",
     "data": {"TopicId": "gSnfpEbtQfSDpxM2lhEn9A", "PartitionId": 7, "Leader": 2, "Replicas": [1, 2], "Isr": [1]}},
]
WHAT_IF_FOUND = [(4929, INELIGIBLE_LEADER_ELECTED, 1, FENCED), (4931, INELIGIBLE_REPLICA_ADDED_TO_ISR, 1, FENCED),
                 (4932, UNREGISTERED_LEADER_ELECTED, 2, UNREGISTERED), (4932, LEADER_NOT_IN_ISR, 2, UNREGISTERED)]


@pytest.fixture(scope="module")
def broken_warehouse(fixtures_dir, tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("broken")
    tables = DeltaRsTables(str(directory / "w"))
    ingest.ingest_source(tables, str(fixtures_dir / SHUTDOWN / "__cluster_metadata-0"))
    lines = directory / "what-if.jsonl"
    lines.write_text("".join(json.dumps(line) + "\n" for line in WHAT_IF))
    ingest.ingest_source(tables, str(lines))
    return str(tables.root)


def test_a_real_log_in_a_warehouse_reads_back_in_order_and_breaks_nothing(fixtures_dir, clean_warehouse):
    decoded = [(e["offset"], e["type"], e["data"]) for e in shutdown_log(fixtures_dir)]
    assert [(e["offset"], e["type"], e["data"]) for e in warehouse_events(clean_warehouse, chunk_rows=1000)] \
        == decoded
    assert check_warehouse(clean_warehouse) == []


def test_the_job_on_a_clean_warehouse(clean_warehouse, capsys):
    assert check_job.main(["--warehouse", clean_warehouse]) == 0
    assert capsys.readouterr().out == "4,929 events checked (108 partition changes), 0 violations\n"


def test_the_job_table_output_and_exit_code(broken_warehouse, capsys):
    assert check_job.main(["--warehouse", broken_warehouse]) == 1
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    assert header == list(check_job.COLUMNS)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[3:-2]]
    assert [(int(r[0]), r[4], int(r[5]), r[6]) for r in rows] == WHAT_IF_FOUND
    assert rows[0] == ["4929", "2026-01-30 17:24:00.000", "TestTopicPatient", "0", INELIGIBLE_LEADER_ELECTED, "1",
                       FENCED, "PartitionChangeRecord", "-1 -> 1", "[1] -> [1]", ""]
    assert rows[1][8:10] == ["-1 -> -1", "[] -> [1]"]
    assert lines[-1] == "4,933 events checked (112 partition changes), 4 violations"


def test_the_job_json_output(broken_warehouse, capsys):
    assert check_job.main(["--warehouse", broken_warehouse, "--format", "json"]) == 1
    out = capsys.readouterr()
    objects = [json.loads(line) for line in out.out.splitlines()]
    assert [(o["offset"], o["kind"], o["broker"], o["broker_state"]) for o in objects] == WHAT_IF_FOUND
    assert objects[2] == {
        "offset": 4932, "timestamp": 1769793843000, "topic": "__consumer_offsets", "topic_id": "gSnfpEbtQfSDpxM2lhEn9A",
        "partition": 7, "kind": UNREGISTERED_LEADER_ELECTED, "broker": 2, "broker_state": UNREGISTERED,
        "event_type": "PartitionChangeRecord", "leader_before": -1, "leader_after": 2, "isr_before": [1],
        "isr_after": [1], "cause_offset": None, "cause_type": None}
    assert out.err == "4,933 events checked (112 partition changes), 4 violations\n"


def test_the_job_without_a_log(tmp_path, capsys):
    assert run_job("check", check_job.main, ["--warehouse", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err == f"check: no metadata_log table in {tmp_path / 'empty'}: ingest a log first " \
                                      "(jobs/ingest.py)\n"
