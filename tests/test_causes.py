"""Why things changed (``kraftlake.image.causes`` through the shards' step): broker_history, the causes in
partition_history and the features table, on hand-built logs whose record batches are laid out as Kafka's
controller writes them (pure core, no Spark). Every expected row is written here from the log's records
and Kafka's rules, never taken from the code under test."""

from __future__ import annotations

import random

import pytest

from kraftlake.controller.shards import ShardState, apply_outputs, iter_rows, replay_log, routes, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.metadata import uuids
from kraftlake.storage.ingest import detect_kind, read_source

from controller_harness import FIXTURES, TS, ev, incarnation, log_dir

T1, T2 = (uuids.from_bytes(bytes([n] * 16)) for n in (1, 2))
SEGMENT = "00000000000000000000.log"


class Log:
    """Records in Kafka record batches: a batch's records have consecutive offsets and one position."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.now = TS

    def batch(self, *records: dict) -> list[int]:
        """One batch of ``records``; their offsets."""
        self.now += 10
        position = 1000 + 100 * len(self.events)
        offsets = []
        for record in records:
            offsets.append(len(self.events))
            self.events.append({**record, "offset": len(self.events), "timestamp": self.now, "leader_epoch": 1,
                                "source": SEGMENT, "position": position})
        return offsets

    def each(self, *records: dict) -> list[int]:
        """Each record in a batch of its own."""
        return [self.batch(record)[0] for record in records]


def register(broker: int, epoch: int, inc: int = 1, fenced: bool = True) -> dict:
    return ev("RegisterBrokerRecord", 3, BrokerId=broker, IncarnationId=incarnation(inc), BrokerEpoch=epoch,
              EndPoints=[{"Name": "PLAINTEXT", "Host": f"b{broker}", "Port": 9092, "SecurityProtocol": 0}],
              Features=[], Rack=None, Fenced=fenced, InControlledShutdown=False, LogDirs=[log_dir(broker)])


def change(broker: int, epoch: int, fenced: int = 0, shutdown: int = 0) -> dict:
    return ev("BrokerRegistrationChangeRecord", 1, BrokerId=broker, BrokerEpoch=epoch, Fenced=fenced,
              InControlledShutdown=shutdown)


def topic(topic_id: str, name: str) -> dict:
    return ev("TopicRecord", Name=name, TopicId=topic_id)


def partition(topic_id: str, pid: int, replicas: list[int], leader: int | None = None) -> dict:
    return ev("PartitionRecord", 1, TopicId=topic_id, PartitionId=pid, Replicas=replicas, Isr=replicas,
              Leader=replicas[0] if leader is None else leader)


def moved(topic_id: str, pid: int, leader: int = -2, isr: list[int] | None = None, **fields) -> dict:
    """A PartitionChangeRecord; leader -2 keeps the leader, ``isr`` None keeps the ISR."""
    return ev("PartitionChangeRecord", 0, TopicId=topic_id, PartitionId=pid, Leader=leader, Isr=isr, **fields)


def cluster(log: Log, *brokers: int) -> dict[int, int]:
    """metadata.version 19; brokers registered and unfenced, a batch each (their epoch: their registration's
    offset); then topic T1 with partitions 0-2 on replicas [1, 2, 3] led by 1, 2, 3, and topic T2 with
    partition 0 on [1, 2] led by 1, in one batch."""
    log.batch(ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=19))
    epochs = {}
    for b in brokers:
        [epochs[b]] = log.batch(register(b, epoch=len(log.events)))
    for b in brokers:
        log.batch(change(b, epochs[b], fenced=-1))
    log.batch(topic(T1, "t1"), partition(T1, 0, [1, 2, 3]), partition(T1, 1, [2, 3, 1]), partition(T1, 2, [3, 1, 2]),
              topic(T2, "t2"), partition(T2, 0, [1, 2]))
    return epochs


def tables(events: list[dict], shards: int = 2) -> dict:
    return replay_log(events, shards)[0]


def causes_at(result: dict, *offsets: int) -> list[tuple]:
    """(offset, cause_kind, cause_offset, cause_broker) of the partition_history rows at ``offsets``."""
    rows = [r for r in iter_rows(result["partition_history"]) if r["offset"] in offsets]
    return sorted((r["offset"], r["cause_kind"], r["cause_offset"], r["cause_broker"]) for r in rows)


def broker_rows(result: dict, broker: int) -> list[tuple]:
    """(offset, state, cause, cause_offset, cause_type) of a broker's broker_history rows, in log order."""
    rows = [r for r in iter_rows(result.get("broker_history", [])) if r["broker_id"] == broker]
    return sorted((r["offset"], r["state"], r["cause"], r["cause_offset"], r["cause_type"]) for r in rows)


# --- partition changes caused by a broker's change in the same batch --------------------------------

def test_a_controlled_shutdown_causes_the_changes_after_it_and_the_fencing_ends_it():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    # handleBrokerInControlledShutdown: the broker's record first, then its partitions
    shutdown, *failover = log.batch(change(1, epochs[1], shutdown=1), moved(T1, 0, leader=2, isr=[2, 3]),
                                    moved(T1, 1, isr=[2, 3]), moved(T1, 2, isr=[3, 2]),
                                    moved(T2, 0, leader=2, isr=[2]))
    [fencing] = log.batch(change(1, epochs[1], fenced=1))
    result = tables(log.events)
    assert causes_at(result, *failover) == [(o, "controlled_shutdown", shutdown, 1) for o in failover]
    assert broker_rows(result, 1)[-2:] == [
        (shutdown, "controlled_shutdown", "shutdown_requested", None, None),
        (fencing, "fenced", "controlled_shutdown_completed", shutdown, "BrokerRegistrationChangeRecord")]


def test_a_fencing_causes_the_changes_before_it_and_says_no_controlled_shutdown_came_first():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    # handleBrokerFenced: the partitions first, then the broker's record
    *failover, fencing = log.batch(moved(T1, 0, isr=[1, 3]), moved(T1, 1, leader=3, isr=[3, 1]),
                                   moved(T1, 2, isr=[3, 1]), moved(T2, 0, isr=[1]), change(2, epochs[2], fenced=1))
    result = tables(log.events)
    assert causes_at(result, *failover) == [(o, "fenced", fencing, 2) for o in failover]
    assert broker_rows(result, 2)[-1] == (fencing, "fenced", "no_controlled_shutdown", None, None)


def test_the_same_changes_in_batches_of_their_own_are_named_by_what_they_changed():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    isr, leader = log.each(moved(T1, 0, isr=[1, 3]), moved(T1, 1, leader=3, isr=[3, 1]))
    log.each(change(2, epochs[2], fenced=1))
    assert causes_at(tables(log.events), isr, leader) == [(isr, "isr_change", None, None),
                                                          (leader, "leader_election", None, None)]


def test_an_unfencing_causes_the_elections_of_leaderless_partitions_after_it():
    log = Log()
    epochs = cluster(log, 1, 2)
    *lost, fencing = log.batch(moved(T2, 0, leader=-1, isr=[1]), change(1, epochs[1], fenced=1))
    log.batch(moved(T2, 0, isr=[2]))  # an ISR change of its own
    unfencing, elected = log.batch(change(1, epochs[1], fenced=-1), moved(T2, 0, leader=2))
    result = tables(log.events)
    assert causes_at(result, *lost, elected) == [(lost[0], "fenced", fencing, 1), (elected, "unfenced", unfencing, 1)]
    # unfenced once its heartbeat reported the offset of its registration (Kafka's rule): that is the cause
    assert broker_rows(result, 1)[-1] == (unfencing, "unfenced", "caught_up", epochs[1], "RegisterBrokerRecord")


def test_several_decisions_in_one_batch_each_take_their_own_changes():
    """As three-brokers-restarts' batch at offset 8109: broker 2's fencing (its failover first), then broker
    1's controlled shutdown (its record first), in one batch."""
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    offsets = log.batch(moved(T1, 1, leader=3, isr=[3, 1]), moved(T2, 0, isr=[1]), change(2, epochs[2], fenced=1),
                        change(1, epochs[1], shutdown=1), moved(T1, 0, leader=3, isr=[3]), moved(T1, 2, isr=[3]),
                        moved(T2, 0, leader=-1))
    fence, shutdown = offsets[2], offsets[3]
    result = tables(log.events)
    assert causes_at(result, *offsets) == [
        (offsets[0], "fenced", fence, 2), (offsets[1], "fenced", fence, 2),
        (offsets[4], "controlled_shutdown", shutdown, 1), (offsets[5], "controlled_shutdown", shutdown, 1),
        (offsets[6], "controlled_shutdown", shutdown, 1)]


def test_a_fencing_that_only_bumps_the_leader_epoch_of_its_last_isr_member_is_still_its():
    """three-brokers-restarts offset 6228: the leader is gone already, the ISR keeps its last member; Kafka's
    failover still writes a record (a new leader epoch) before the fencing."""
    log = Log()
    epochs = cluster(log, 1, 2)
    log.batch(change(1, epochs[1], shutdown=1), moved(T2, 0, leader=2, isr=[2]))
    log.batch(change(2, epochs[2], shutdown=1), moved(T2, 0, leader=-1))
    bump, fencing = log.batch(moved(T2, 0, leader=-1), change(2, epochs[2], fenced=1))
    assert causes_at(tables(log.events), bump) == [(bump, "fenced", fencing, 2)]


def test_a_broker_record_that_does_not_concern_a_partition_explains_none_of_its_changes():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    reassigned, fencing = log.batch(moved(T2, 0, Replicas=[1, 3], AddingReplicas=[3]), change(3, epochs[3], fenced=1))
    assert causes_at(tables(log.events), reassigned) == [(reassigned, "reassignment", None, None)]
    assert fencing > reassigned


def test_a_new_incarnation_unregistration_and_log_dir_failure_cause_the_changes_before_them():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    # KIP-966: the previous incarnation's partitions leave it before the new RegisterBrokerRecord
    left, registration = log.batch(moved(T1, 1, leader=3, isr=[3, 1]), register(2, epoch=len(log.events) + 1, inc=2))
    gone, unregistration = log.batch(moved(T1, 2, leader=1, isr=[1]),
                                     ev("UnregisterBrokerRecord", BrokerId=3, BrokerEpoch=epochs[3]))
    offline, dirs = log.batch(moved(T1, 0, leader=-1, isr=[1]), ev(
        "BrokerRegistrationChangeRecord", 2, BrokerId=1, BrokerEpoch=epochs[1], LogDirs=[log_dir(9)]))
    result = tables(log.events)
    assert causes_at(result, left, gone, offline) == [(left, "registered", registration, 2),
                                                      (gone, "unregistered", unregistration, 3),
                                                      (offline, "log_dirs_offline", dirs, 1)]
    assert broker_rows(result, 2)[-1] == (registration, "registered", "new_incarnation", None, None)
    assert broker_rows(result, 3)[-1] == (unregistration, "unregistered", "unregistration_request", None, None)


# --- partitions made, removed and changed without a broker -------------------------------------------

def test_partitions_of_a_topic_created_in_their_batch_name_its_topic_record():
    log = Log()
    cluster(log, 1, 2)
    made, first, second = log.batch(topic(uuids.from_bytes(bytes([7] * 16)), "t7"),
                                    partition(uuids.from_bytes(bytes([7] * 16)), 0, [1, 2]),
                                    partition(uuids.from_bytes(bytes([7] * 16)), 1, [2, 1]))
    [added] = log.batch(partition(T2, 1, [2, 1]))  # CreatePartitions writes PartitionRecords alone
    [removed] = log.batch(ev("RemoveTopicRecord", TopicId=T1))
    result = tables(log.events)
    assert causes_at(result, first, second, added) == [(first, "topic_created", made, None),
                                                      (second, "topic_created", made, None),
                                                      (added, "partitions_created", None, None)]
    assert {r["cause_kind"] for r in iter_rows(result["partition_history"]) if r["offset"] == removed} == {
        "topic_deleted"}


@pytest.mark.parametrize("fields, kind", [
    ({"Replicas": [1, 2, 3], "AddingReplicas": [3]}, "reassignment"),
    ({"Leader": 2}, "leader_election"),
    ({"Isr": [1]}, "isr_change"),
    ({"LeaderRecoveryState": 1}, "isr_change"),
    ({"Directories": [log_dir(1), log_dir(9)]}, "directory_assignment"),
])
def test_a_change_no_event_explains_is_named_by_what_it_changed(fields: dict, kind: str):
    log = Log()
    cluster(log, 1, 2, 3)
    [offset] = log.batch(ev("PartitionChangeRecord", 1, TopicId=T2, PartitionId=0, **{"Leader": -2, **fields}))
    assert causes_at(tables(log.events), offset) == [(offset, kind, None, None)]


# --- broker states --------------------------------------------------------------------------------------

def test_registrations_say_whether_the_incarnation_is_new():
    log = Log()
    first, again, other = log.each(register(1, 0), register(1, 1), register(1, 2, inc=2))
    unfencing, = log.each(change(1, 2, fenced=-1))
    assert broker_rows(tables(log.events), 1) == [
        (first, "registered", "registration", None, None),
        (again, "registered", "same_incarnation", None, None),
        (other, "registered", "new_incarnation", None, None),
        (unfencing, "unfenced", "caught_up", other, "RegisterBrokerRecord")]


def test_fence_and_unfence_records_of_old_metadata_versions_are_states_too():
    log = Log()
    [registration] = log.each(register(1, 0))
    unfencing, fencing = log.each(ev("UnfenceBrokerRecord", Id=1, Epoch=0), ev("FenceBrokerRecord", Id=1, Epoch=0))
    assert broker_rows(tables(log.events), 1)[1:] == [
        (unfencing, "unfenced", "caught_up", registration, "RegisterBrokerRecord"),
        (fencing, "fenced", "no_controlled_shutdown", None, None)]


def test_a_snapshot_loads_states_that_are_no_events():
    log = Log()
    header, *_, footer = log.batch(ev("SnapshotHeaderRecord", Version=0, LastContainedLogTimestamp=TS),
                                   register(1, 5, fenced=False), topic(T2, "t2"), partition(T2, 0, [1]),
                                   ev("SnapshotFooterRecord", Version=0))
    [fencing] = log.batch(change(1, 5, fenced=1))
    result = tables(log.events)
    assert broker_rows(result, 1) == [(footer, "registered", "snapshot_loaded", None, None),
                                      (footer, "unfenced", "snapshot_loaded", None, None),
                                      (fencing, "fenced", "no_controlled_shutdown", None, None)]
    assert [(r["cause"], r["cause_kind"]) for r in iter_rows(result["partition_history"])] == [
        ("SnapshotFooterRecord", "snapshot_loaded")]
    assert header == 0


def test_only_shard_0_writes_broker_history_and_any_shard_count_gives_the_same_rows():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    log.batch(change(1, epochs[1], shutdown=1), moved(T1, 0, leader=2, isr=[2, 3]), moved(T2, 0, leader=2, isr=[2]))
    log.batch(change(1, epochs[1], fenced=1))
    one = tables(log.events, 1)
    assert len(one["broker_history"]) == 3 * 2 + 2  # each broker registered and unfenced; 1 shut down, fenced
    for shards in (2, 3, 5):
        other = tables(log.events, shards)
        for name in ("broker_history", "partition_history", "features"):
            assert sorted(map(repr, iter_rows(other[name]))) == sorted(map(repr, iter_rows(one[name]))), (name, shards)
    assert len(one["features"]) == 1


# --- transactions and micro-batches ---------------------------------------------------------------------

def test_a_transaction_is_one_batch_whatever_batches_carried_it():
    """KIP-868: a large CreateTopics is a metadata transaction spanning several record batches."""
    log = Log()
    cluster(log, 1, 2)
    t3 = uuids.from_bytes(bytes([3] * 16))
    log.batch(ev("BeginTransactionRecord", Name="CreateTopics"), topic(t3, "t3"))
    first, second = log.batch(partition(t3, 0, [1, 2]), partition(t3, 1, [2, 1]))
    log.batch(ev("EndTransactionRecord"))
    made = first - 1
    assert causes_at(tables(log.events), first, second) == [(first, "topic_created", made, None),
                                                           (second, "topic_created", made, None)]


def _in_micro_batches(events: list[dict], cuts: list[int], shards: int) -> dict:
    """Steps over the events cut before each index of ``cuts``, each shard's state through its bytes in between,
    as the streaming job runs them."""
    raw = [ShardState(ClusterImage()).to_bytes() for _ in range(shards)]
    result: dict = {}
    bounds = [0, *cuts, len(events)]
    for lo, hi in zip(bounds, bounds[1:]):
        outputs = []
        for shard in range(shards):
            state = ShardState.from_bytes(raw[shard])
            outputs.extend(step(shard, shards, state, [e for e in events[lo:hi] if shard in routes(e, shards)]))
            raw[shard] = state.to_bytes()
        apply_outputs(result, outputs)
    return result


def test_micro_batches_cut_between_record_batches_change_no_cause():
    log = Log()
    epochs = cluster(log, 1, 2, 3)
    shutdown, *_ = log.batch(change(1, epochs[1], shutdown=1), moved(T1, 0, leader=2, isr=[2, 3]),
                             moved(T1, 1, isr=[2, 3]), moved(T1, 2, isr=[3, 2]), moved(T2, 0, leader=2, isr=[2]))
    log.batch(moved(T1, 1, leader=3, isr=[3]), moved(T1, 2, isr=[3]), moved(T2, 0, leader=-1),
              change(2, epochs[2], fenced=1))
    log.batch(change(1, epochs[1], fenced=1))
    whole = tables(log.events, 2)
    starts = [i for i, e in enumerate(log.events) if i and e["position"] != log.events[i - 1]["position"]]
    rng = random.Random(7)
    for _ in range(10):
        cuts = sorted(rng.sample(starts, rng.randint(1, len(starts))))
        batched = _in_micro_batches(log.events, cuts, 2)
        for name in ("broker_history", "partition_history"):
            assert sorted(map(repr, iter_rows(batched[name]))) == sorted(map(repr, iter_rows(whole[name]))), cuts
    # the fencing in the last micro-batch still names where its controlled shutdown began, micro-batches before
    assert broker_rows(_in_micro_batches(log.events, [len(log.events) - 1], 2), 1)[-1][2:4] == (
        "controlled_shutdown_completed", shutdown)


# --- features --------------------------------------------------------------------------------------------

def features(result: dict) -> list[tuple]:
    return sorted((r["offset"], r["applied_offset"], r["feature"], r["level"], r["level_before"], r["record"],
                   r["cause"]) for r in iter_rows(result.get("features", [])))


def test_feature_levels_are_bootstrap_before_any_registration_then_updates():
    log = Log()
    begin, mv, end = log.batch(ev("BeginTransactionRecord", Name="Bootstrap records"),
                               ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=19),
                               ev("EndTransactionRecord"))
    [kraft] = log.batch(ev("KRaftVersionRecord", Version=0, KRaftVersion=1))
    log.batch(register(1, 4))
    upgrade, elr = log.each(ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=25),
                            ev("FeatureLevelRecord", Name="eligible.leader.replicas.version", FeatureLevel=1))
    assert features(tables(log.events)) == [
        (mv, end, "metadata.version", 19, None, "FeatureLevelRecord", "bootstrap"),
        (kraft, kraft, "kraft.version", 1, 0, "KRaftVersionRecord", "bootstrap"),
        (upgrade, upgrade, "metadata.version", 25, 19, "FeatureLevelRecord", "update_features"),
        (elr, elr, "eligible.leader.replicas.version", 1, None, "FeatureLevelRecord", "update_features")]
    assert begin == 0


def test_feature_levels_a_snapshot_holds_are_loaded():
    log = Log()
    [old] = log.batch(ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=14))
    _, kraft, mv, footer = log.batch(ev("SnapshotHeaderRecord", Version=0, LastContainedLogTimestamp=TS),
                                     ev("KRaftVersionRecord", Version=0, KRaftVersion=1),
                                     ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=27),
                                     ev("SnapshotFooterRecord", Version=0))
    assert features(tables(log.events)) == [
        (old, old, "metadata.version", 14, None, "FeatureLevelRecord", "bootstrap"),
        (kraft, kraft, "kraft.version", 1, 0, "KRaftVersionRecord", "snapshot_loaded"),
        (mv, footer, "metadata.version", 27, 14, "FeatureLevelRecord", "snapshot_loaded")]


# --- real logs: what their records say, read with jobs/dump.py ------------------------------------------

def fixture_tables(name: str) -> dict:
    path = FIXTURES / name / "__cluster_metadata-0"
    return tables([e for e in read_source(path, detect_kind(path), True) if isinstance(e, dict)], 3)


def test_single_broker_shutdown_says_when_and_why_broker_1_was_fenced():
    """Broker 1 registers at 6 and again, same incarnation, at 8; is unfenced at 9; asks to shut down at 4871,
    in one batch with the 54 PartitionChangeRecords that take its leaderships (4872-4925); is fenced at 4926."""
    result = fixture_tables("single-broker-shutdown")
    assert broker_rows(result, 1) == [
        (6, "registered", "registration", None, None),
        (8, "registered", "same_incarnation", None, None),
        (9, "unfenced", "caught_up", 8, "RegisterBrokerRecord"),
        (4871, "controlled_shutdown", "shutdown_requested", None, None),
        (4926, "fenced", "controlled_shutdown_completed", 4871, "BrokerRegistrationChangeRecord")]
    lost = [r for r in iter_rows(result["partition_history"]) if r["leader_before"] == 1 and r["leader"] == -1]
    assert len(lost) == 54
    assert {(r["cause_kind"], r["cause_offset"], r["cause_broker"]) for r in lost} == {("controlled_shutdown", 4871, 1)}
    assert sorted(r["offset"] for r in lost) == list(range(4872, 4926))


def test_three_brokers_restarts_registrations_fencings_and_their_partitions():
    result = fixture_tables("three-brokers-restarts")
    history = list(iter_rows(result["broker_history"]))
    assert sum(r["state"] == "registered" for r in history) == 21
    fenced = {r["offset"]: (r["broker_id"], r["cause"], r["cause_offset"]) for r in history if r["state"] == "fenced"}
    assert fenced == {
        470: (2, "no_controlled_shutdown", None), 471: (3, "no_controlled_shutdown", None),
        472: (1, "no_controlled_shutdown", None), 5427: (1, "no_controlled_shutdown", None),
        5428: (2, "no_controlled_shutdown", None), 5429: (3, "no_controlled_shutdown", None),
        6227: (2, "no_controlled_shutdown", None), 6229: (3, "controlled_shutdown_completed", 6225),
        6231: (1, "controlled_shutdown_completed", 6223), 6522: (2, "controlled_shutdown_completed", 6420),
        6524: (1, "controlled_shutdown_completed", 6316), 6526: (3, "controlled_shutdown_completed", 6368),
        7090: (2, "controlled_shutdown_completed", 6935), 7092: (3, "controlled_shutdown_completed", 6986),
        7144: (1, "controlled_shutdown_completed", 7038), 8159: (2, "no_controlled_shutdown", None),
        8265: (1, "controlled_shutdown_completed", 8160), 8317: (3, "controlled_shutdown_completed", 8212)}
    changes = {r["offset"]: (r["cause_kind"], r["cause_offset"], r["cause_broker"])
               for r in iter_rows(result["partition_history"])}
    # one batch (8109-8211): broker 2's 50 ISR shrinks, its fencing at 8159, broker 1's controlled shutdown at
    # 8160 and the 51 changes that move its leaderships
    assert {changes[o] for o in range(8109, 8159)} == {("fenced", 8159, 2)}
    assert {changes[o] for o in range(8161, 8212)} == {("controlled_shutdown", 8160, 1)}
    # broker 2 unfenced at 6556, and in its batch the 50 partitions that had no leader elect it
    assert {changes[o] for o in range(6557, 6607)} == {("unfenced", 6556, 2)}
