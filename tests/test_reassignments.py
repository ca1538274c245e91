"""``kraftlake.controller.dispatch.reassignments``: KIP-455 reassignments as Kafka's KRaft controller runs them.

Every expected state is written out by hand from KIP-455 and Kafka's rules
(``PartitionReassignmentReplicas``, ``PartitionReassignmentRevert``, ``PartitionChangeBuilder``), never
computed by the code under test. Every decision is replayed through ``check_kip841`` (no fenced or
shutting-down broker joins an ISR or is elected, the leader stays in the ISR) and the reassignment
invariants below.

A partition's state is written ``(replicas, isr, leader, leader epoch, partition epoch, adding,
removing)``; ``Cluster.topic`` creates partitions at leader epoch 5, partition epoch 10.
"""

from __future__ import annotations

import pytest

from kraftlake.controller import dispatch as controller
from kraftlake.metadata import uuids
from kraftlake.controller.cluster_control import ControllerState
from kraftlake.controller.decisions import Context
from kraftlake.image.cluster_image import PartitionRegistration
from kraftlake.controller.reassignments import alter_partition_reassignments, list_partition_reassignments
from kraftlake.controller.replication import alter_partition, broker_failover

from test_elections import Cluster, changed_fields, check_kip841, topic_id
from test_replication import ctx, decide, error, request


# --- helpers ------------------------------------------------------------------------------------------

def full(p: PartitionRegistration) -> tuple:
    return (list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch,
            list(p.adding_replicas), list(p.removing_replicas))


def check_reassignment(c: Cluster) -> None:
    """What must hold of every partition at every step: adding and removing are disjoint parts of
    the replicas, the ISR is made of replicas, and the leader (if any) is an ISR member."""
    for p in c.image.iter_partitions():
        assert len(set(p.replicas)) == len(p.replicas), p
        assert set(p.adding_replicas) <= set(p.replicas), p
        assert set(p.removing_replicas) <= set(p.replicas), p
        assert not set(p.adding_replicas) & set(p.removing_replicas), p
        assert set(p.isr) <= set(p.replicas), p
        assert p.leader == -1 or p.leader in p.isr, p


def reassign(c: Cluster, plan: dict[str, dict[int, list[int] | None]], context: Context | None = None):
    """AlterPartitionReassignments; ``plan``: topic -> partition -> target (None cancels)."""
    req = request("AlterPartitionReassignmentsRequest", 0, Topics=[
        {"Name": name, "Partitions": [{"PartitionIndex": i, "Replicas": r} for i, r in parts.items()]}
        for name, parts in plan.items()])
    records, resp = decide(c, alter_partition_reassignments, req, context)
    check_reassignment(c)
    return records, resp


def errors(resp: dict) -> dict:
    """(topic, partition) -> error code of an AlterPartitionReassignmentsResponse."""
    assert resp["data"]["ErrorCode"] == 0
    return {(t["Name"], p["PartitionIndex"]): p["ErrorCode"]
            for t in resp["data"]["Responses"] for p in t["Partitions"]}


def isr_update(c: Cluster, isr: list[int], *, version: int = 2, name: str = "t", pid: int = 0):
    """The partition leader's AlterPartition, with the epochs it learnt from the metadata."""
    p = c.partition(name, pid)
    partition = {"PartitionIndex": pid, "LeaderEpoch": p.leader_epoch, "PartitionEpoch": p.partition_epoch}
    if version >= 3:
        partition["NewIsrWithEpochs"] = [{"BrokerId": b, "BrokerEpoch": c.image.brokers[b].epoch} for b in isr]
    else:
        partition["NewIsr"] = isr
    topic = {"TopicId": p.topic_id} if version >= 2 else {"TopicName": name}
    req = request("AlterPartitionRequest", version, BrokerId=p.leader,
                  BrokerEpoch=c.image.brokers[p.leader].epoch, Topics=[{**topic, "Partitions": [partition]}])
    records, resp = decide(c, alter_partition, req)
    check_reassignment(c)
    [t] = resp["data"]["Topics"]
    [answer] = t["Partitions"]
    return records, answer


def listing(c: Cluster, topics: dict[str, list[int]] | None = None, context: Context | None = None) -> dict:
    """ListPartitionReassignments as {(topic, partition): (replicas, adding, removing)}, in answer order."""
    entries = None if topics is None else [{"Name": n, "PartitionIndexes": ps} for n, ps in topics.items()]
    records, resp = decide(c, list_partition_reassignments,
                           request("ListPartitionReassignmentsRequest", 0, Topics=entries), context)
    assert records == [] and resp["data"]["ErrorCode"] == 0
    return {(t["Name"], p["PartitionIndex"]): (p["Replicas"], p["AddingReplicas"], p["RemovingReplicas"])
            for t in resp["data"]["Topics"] for p in t["Partitions"]}


def six_brokers(**broker_states) -> Cluster:
    """Brokers 1-6 (those named ``b<N>=dict(...)`` in a special state), topic t: [1,2,3], leader 1."""
    c = Cluster()
    for b in range(1, 7):
        c.broker(b, **broker_states.get(f"b{b}", {}))
    c.topic("t", [[1, 2, 3]])
    return c


# --- the KIP-455 walk-through: R [1,2,3] -> T [4,5,6] --------------------------------------------------

@pytest.mark.parametrize("version, moved", [(0, "FENCED_LEADER_EPOCH"), (1, "FENCED_LEADER_EPOCH"),
                                            (2, "NEW_LEADER_ELECTED"), (3, "NEW_LEADER_ELECTED")])
def test_walk_through_1_2_3_to_4_5_6(version, moved):
    c = six_brokers()
    assert full(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 5, 10, [], [])
    assert listing(c) == {}

    # Start: replicas = target + the current ones it drops; the ISR and the leader are untouched.
    records, resp = reassign(c, {"t": {0: [4, 5, 6]}})
    assert errors(resp) == {("t", 0): 0}
    [rec] = records
    assert rec["type"] == "PartitionChangeRecord"
    assert {k: v for k, v in changed_fields(rec).items() if k != "Directories"} == {
        "TopicId": topic_id(1), "PartitionId": 0, "Replicas": [4, 5, 6, 1, 2, 3],
        "AddingReplicas": [4, 5, 6], "RemovingReplicas": [1, 2, 3]}
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 5, 11, [4, 5, 6], [1, 2, 3])
    assert listing(c) == {("t", 0): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])}

    # The adding replicas catch up one by one; the reassignment stays pending.
    records, answer = isr_update(c, [1, 2, 3, 4], version=version)
    assert answer["ErrorCode"] == 0 and answer["Isr"] == [1, 2, 3, 4]
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4], 1, 5, 12, [4, 5, 6], [1, 2, 3])
    records, answer = isr_update(c, [1, 2, 3, 4, 5], version=version)
    assert answer["ErrorCode"] == 0
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4, 5], 1, 5, 13, [4, 5, 6], [1, 2, 3])
    assert listing(c) == {("t", 0): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])}

    # The last target replica joins: one change completes it and the removed leader 1 hands over to 4,
    # the first target replica in the ISR. The sender is told it no longer leads.
    records, answer = isr_update(c, [1, 2, 3, 4, 5, 6], version=version)
    assert len(records) == 1 and answer["ErrorCode"] == error(moved)
    assert full(c.partition("t")) == ([4, 5, 6], [4, 5, 6], 4, 6, 14, [], [])
    assert listing(c) == {}


def test_walk_through_keeps_a_leader_that_stays():
    """R [1,2,3] -> T [1,4,5]: leader 1 stays; only the replicas leaving need a new leader epoch."""
    c = six_brokers()
    reassign(c, {"t": {0: [1, 4, 5]}})
    assert full(c.partition("t")) == ([1, 4, 5, 2, 3], [1, 2, 3], 1, 5, 11, [4, 5], [2, 3])
    isr_update(c, [1, 2, 3, 4])
    assert full(c.partition("t")) == ([1, 4, 5, 2, 3], [1, 2, 3, 4], 1, 5, 12, [4, 5], [2, 3])
    records, answer = isr_update(c, [1, 2, 3, 4, 5])
    assert answer["ErrorCode"] == 0 and answer["LeaderId"] == 1 and answer["Isr"] == [1, 4, 5]
    assert answer["LeaderEpoch"] == 6 and answer["PartitionEpoch"] == 13
    assert full(c.partition("t")) == ([1, 4, 5], [1, 4, 5], 1, 6, 13, [], [])


# --- cancellation --------------------------------------------------------------------------------------

def test_cancel_half_way_restores_the_original_replicas():
    c = six_brokers()
    reassign(c, {"t": {0: [4, 5, 6]}})
    isr_update(c, [1, 2, 3, 4])
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4], 1, 5, 12, [4, 5, 6], [1, 2, 3])

    records, resp = reassign(c, {"t": {0: None}})
    assert errors(resp) == {("t", 0): 0} and len(records) == 1
    # 4 had caught up but is dropped all the same: a cancellation is not a completion.
    assert full(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 6, 13, [], [])
    assert listing(c) == {}

    records, resp = reassign(c, {"t": {0: None}})
    assert records == [] and errors(resp) == {("t", 0): error("NO_REASSIGNMENT_IN_PROGRESS")}


def test_cancel_before_any_replica_caught_up():
    c = six_brokers()
    reassign(c, {"t": {0: [4, 5, 6]}})
    reassign(c, {"t": {0: None}})
    assert full(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 6, 12, [], [])


def test_cancel_replaces_a_leader_outside_the_original_replicas():
    c = six_brokers()
    reassign(c, {"t": {0: [4, 5, 6]}})
    isr_update(c, [1, 2, 3, 4])
    # Broker 1 is fenced: leadership goes to the first replica in the ISR, the adding replica 4.
    check_kip841(c, broker_failover(c.image, 1, ctx()) + [c.broker_change(1, fenced=True)])
    check_reassignment(c)
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [2, 3, 4], 4, 6, 13, [4, 5, 6], [1, 2, 3])

    records, resp = reassign(c, {"t": {0: None}})
    assert errors(resp) == {("t", 0): 0}
    # Back to [1,2,3]; 4 leaves the ISR and the leadership; 1 is fenced, so 2 leads.
    assert full(c.partition("t")) == ([1, 2, 3], [2, 3], 2, 7, 14, [], [])


def test_cancel_that_needs_an_unclean_election():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[2, 1]], isr=[[2]], leaders=[2], AddingReplicas=[2], RemovingReplicas=[1])
    records, resp = reassign(c, {"t": {0: None}})
    assert records == [] and errors(resp) == {("t", 0): error("INVALID_REPLICA_ASSIGNMENT")}
    assert "unclean leader election" in resp["data"]["Responses"][0]["Partitions"][0]["ErrorMessage"]
    assert full(c.partition("t")) == ([2, 1], [2], 2, 5, 10, [2], [1])

    records, resp = reassign(c, {"t": {0: None}}, ctx(unclean_leader_election_enable="true"))
    assert errors(resp) == {("t", 0): 0}
    assert full(c.partition("t")) == ([1], [1], 1, 6, 11, [], [])


# --- KIP-841: fenced and shutting-down targets ---------------------------------------------------------

@pytest.mark.parametrize("how", ["fenced", "shutdown"])
def test_a_fenced_or_shutting_down_target_keeps_the_reassignment_pending(how):
    c = six_brokers(b6={how: True})
    records, resp = reassign(c, {"t": {0: [4, 5, 6]}})
    assert errors(resp) == {("t", 0): 0}  # a registered broker is a valid target
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 5, 11, [4, 5, 6], [1, 2, 3])
    isr_update(c, [1, 2, 3, 4])
    isr_update(c, [1, 2, 3, 4, 5])

    records, answer = isr_update(c, [1, 2, 3, 4, 5, 6])
    assert records == [] and answer["ErrorCode"] == error("INELIGIBLE_REPLICA")
    records, answer = isr_update(c, [1, 2, 3, 4, 5, 6], version=1)
    assert records == [] and answer["ErrorCode"] == error("OPERATION_NOT_ATTEMPTED")
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4, 5], 1, 5, 13, [4, 5, 6], [1, 2, 3])
    assert listing(c) == {("t", 0): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])}

    # Broker 6 is back: now it may join, and that completes the reassignment.
    if how == "fenced":
        c.set_broker(6, fenced=False)
    else:  # a broker leaves controlled shutdown by registering again, as a new incarnation
        c.broker(6, epoch=101)
    records, answer = isr_update(c, [1, 2, 3, 4, 5, 6], version=3)
    assert answer["ErrorCode"] == error("NEW_LEADER_ELECTED")
    assert full(c.partition("t")) == ([4, 5, 6], [4, 5, 6], 4, 6, 14, [], [])


def test_completion_skips_a_target_leader_that_is_shutting_down():
    c = Cluster()
    c.brokers(1, 2, 3, 4, 5, 6)
    # A partition whose reassignment is one ISR addition from completion; 4 is in the ISR.
    c.topic("t", [[4, 5, 6, 1, 2, 3]], isr=[[1, 2, 3, 4, 5]], leaders=[1],
            AddingReplicas=[4, 5, 6], RemovingReplicas=[1, 2, 3])
    # 4 asks for a controlled shutdown; Kafka first takes it out of every ISR.
    c.set_broker(4, shutdown=True)
    check_kip841(c, broker_failover(c.image, 4, ctx()))
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 5], 1, 5, 11, [4, 5, 6], [1, 2, 3])
    records, answer = isr_update(c, [1, 2, 3, 5, 6])
    assert answer["ErrorCode"] == 0  # 4 is missing: still pending
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 5, 6], 1, 5, 12, [4, 5, 6], [1, 2, 3])
    records, answer = isr_update(c, [1, 2, 3, 5, 6, 4])
    assert records == [] and answer["ErrorCode"] == error("INELIGIBLE_REPLICA")


# --- altering a reassignment in flight -----------------------------------------------------------------

def test_a_reassignment_altered_in_flight():
    c = six_brokers()
    c.broker(7)
    reassign(c, {"t": {0: [4, 5, 6]}})
    isr_update(c, [1, 2, 3, 4])
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3, 4], 1, 5, 12, [4, 5, 6], [1, 2, 3])

    # T' = [4,5,7] is measured against the replicas as they stand, [4,5,6,1,2,3]: 7 is added,
    # 6 (never caught up) joins the removing replicas, 5 stays in the replicas still to catch up.
    records, resp = reassign(c, {"t": {0: [4, 5, 7]}})
    assert errors(resp) == {("t", 0): 0}
    assert full(c.partition("t")) == ([4, 5, 7, 1, 2, 3, 6], [1, 2, 3, 4], 1, 5, 13, [7], [1, 2, 3, 6])
    assert listing(c) == {("t", 0): ([4, 5, 7, 1, 2, 3, 6], [7], [1, 2, 3, 6])}

    records, answer = isr_update(c, [1, 2, 3, 4, 7])
    assert answer["ErrorCode"] == 0  # 5, a target replica, is not in the ISR yet
    assert full(c.partition("t")) == ([4, 5, 7, 1, 2, 3, 6], [1, 2, 3, 4, 7], 1, 5, 14, [7], [1, 2, 3, 6])
    records, answer = isr_update(c, [1, 2, 3, 4, 7, 5])
    assert answer["ErrorCode"] == error("NEW_LEADER_ELECTED")
    assert full(c.partition("t")) == ([4, 5, 7], [4, 7, 5], 4, 6, 15, [], [])


def test_cancel_after_an_in_flight_alteration_keeps_replicas_of_the_first_one():
    """KRaft keeps no record of the pre-reassignment replicas: after T' the original set is the
    replicas minus the adding ones, which still holds 6 from the first target (KIP-455 accepts a
    replication factor above the configured one after a cancellation)."""
    c = six_brokers()
    c.broker(7)
    reassign(c, {"t": {0: [4, 5, 6]}})
    reassign(c, {"t": {0: [4, 5, 7]}})
    assert full(c.partition("t")) == ([4, 5, 7, 1, 2, 3, 6], [1, 2, 3], 1, 5, 12, [7], [1, 2, 3, 6])
    reassign(c, {"t": {0: None}})
    assert full(c.partition("t")) == ([4, 5, 1, 2, 3, 6], [1, 2, 3], 1, 6, 13, [], [])


# --- starts that complete at once, and no-ops ----------------------------------------------------------

def test_reordering_the_replicas_completes_at_once():
    c = six_brokers()
    records, resp = reassign(c, {"t": {0: [3, 1, 2]}})
    assert len(records) == 1
    # Same replica set: no epoch bump, leader 1 keeps leading (not a preferred election).
    assert full(c.partition("t")) == ([3, 1, 2], [1, 2, 3], 1, 5, 11, [], [])


def test_shrinking_the_replication_factor_completes_at_once():
    c = six_brokers()
    reassign(c, {"t": {0: [2, 3]}})
    assert full(c.partition("t")) == ([2, 3], [2, 3], 2, 6, 11, [], [])


def test_growing_the_replication_factor():
    c = six_brokers()
    reassign(c, {"t": {0: [1, 2, 3, 4]}})
    assert full(c.partition("t")) == ([1, 2, 3, 4], [1, 2, 3], 1, 5, 11, [4], [])
    isr_update(c, [1, 2, 3, 4])
    assert full(c.partition("t")) == ([1, 2, 3, 4], [1, 2, 3, 4], 1, 5, 12, [], [])


def test_the_current_assignment_or_the_same_target_again_changes_nothing():
    c = six_brokers()
    records, resp = reassign(c, {"t": {0: [1, 2, 3]}})
    assert records == [] and errors(resp) == {("t", 0): 0}
    reassign(c, {"t": {0: [4, 5, 6]}})
    records, resp = reassign(c, {"t": {0: [4, 5, 6]}})
    assert records == [] and errors(resp) == {("t", 0): 0}
    assert full(c.partition("t")) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 5, 11, [4, 5, 6], [1, 2, 3])


# --- validation and incremental requests ---------------------------------------------------------------

@pytest.mark.parametrize("target, expected, message", [
    ([], "INVALID_REPLICA_ASSIGNMENT", "empty replica list"),
    ([4, -1, 5], "INVALID_REPLICA_ASSIGNMENT", "broker -1"),
    ([4, 5, 4], "INVALID_REPLICA_ASSIGNMENT", "more than once"),
    ([4, 5, 9], "INVALID_REPLICA_ASSIGNMENT", "broker 9, but no such broker"),
])
def test_invalid_targets(target, expected, message):
    c = six_brokers()
    records, resp = reassign(c, {"t": {0: target}})
    assert records == [] and errors(resp) == {("t", 0): error(expected)}
    assert message in resp["data"]["Responses"][0]["Partitions"][0]["ErrorMessage"]
    assert full(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 5, 10, [], [])


def test_unknown_topics_and_partitions_and_nothing_to_cancel():
    c = six_brokers()
    records, resp = reassign(c, {"t": {7: [4, 5, 6], 0: None}, "nope": {0: [1, 2, 3], 1: None}})
    assert records == []
    assert errors(resp) == {("t", 7): error("UNKNOWN_TOPIC_OR_PARTITION"),
                            ("t", 0): error("NO_REASSIGNMENT_IN_PROGRESS"),
                            ("nope", 0): error("UNKNOWN_TOPIC_OR_PARTITION"),
                            ("nope", 1): error("UNKNOWN_TOPIC_OR_PARTITION")}
    # Unknown topics come before the target is looked at, as in Kafka.
    records, resp = reassign(c, {"nope": {0: []}})
    assert errors(resp) == {("nope", 0): error("UNKNOWN_TOPIC_OR_PARTITION")}


def test_errors_are_per_partition_and_requests_are_incremental():
    c = Cluster()
    c.brokers(1, 2, 3, 4, 5, 6)
    c.topic("t", [[1, 2, 3], [1, 2, 3], [1, 2, 3]])
    reassign(c, {"t": {0: [4, 5, 6], 1: [4, 5, 6]}})
    # A later request about partitions 1 and 2 (one invalid) leaves partition 0's reassignment running.
    records, resp = reassign(c, {"t": {1: None, 2: [1, 2, 9]}})
    assert len(records) == 1
    assert errors(resp) == {("t", 1): 0, ("t", 2): error("INVALID_REPLICA_ASSIGNMENT")}
    assert full(c.partition("t", 0)) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], 1, 5, 11, [4, 5, 6], [1, 2, 3])
    assert full(c.partition("t", 1)) == ([1, 2, 3], [1, 2, 3], 1, 6, 12, [], [])
    assert full(c.partition("t", 2)) == ([1, 2, 3], [1, 2, 3], 1, 5, 10, [], [])
    assert listing(c) == {("t", 0): ([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])}


def test_owned_topics_only_and_unknown_topics_on_every_shard():
    c = Cluster()
    c.brokers(1, 2, 3, 4)
    c.topic("mine", [[1, 2]], n=1)
    c.topic("theirs", [[1, 2]], n=2)
    shard = Context(now_ms=0, offset=1, owns=lambda tid: tid == topic_id(1))
    records, resp = reassign(c, {"mine": {0: [3, 4]}, "theirs": {0: [3, 4]}, "nope": {0: [3, 4]}}, shard)
    assert [r["data"]["TopicId"] for r in records] == [topic_id(1)]
    assert errors(resp) == {("mine", 0): 0, ("nope", 0): error("UNKNOWN_TOPIC_OR_PARTITION")}
    reassign(c, {"theirs": {0: [3, 4]}})
    assert listing(c, context=shard) == {("mine", 0): ([3, 4, 1, 2], [3, 4], [1, 2])}
    assert set(listing(c)) == {("mine", 0), ("theirs", 0)}


# --- ListPartitionReassignments ------------------------------------------------------------------------

def test_list_all_by_topic_and_by_partition():
    c = Cluster()
    c.brokers(1, 2, 3, 4)
    c.topic("b", [[1, 2], [1, 2], [1, 2]], n=1)
    c.topic("a", [[1, 2]], n=2)
    reassign(c, {"b": {2: [3, 4], 0: [1, 3]}, "a": {0: [2, 4]}})
    assert list(listing(c)) == [("a", 0), ("b", 0), ("b", 2)]  # by name, then partition
    assert listing(c) == {("a", 0): ([2, 4, 1], [4], [1]),
                          ("b", 0): ([1, 3, 2], [3], [2]),
                          ("b", 2): ([3, 4, 1, 2], [3, 4], [1, 2])}
    # Named partitions only; idle, unknown partitions and unknown topics are left out.
    assert listing(c, {"b": [2, 1, 9], "nope": [0]}) == {("b", 2): ([3, 4, 1, 2], [3, 4], [1, 2])}
    assert listing(c, {"b": [1]}) == {}
    assert listing(c, {}) == {}


# --- through the controller ----------------------------------------------------------------------------

def test_the_controller_dispatches_both_requests():
    c = six_brokers()
    req = request("AlterPartitionReassignmentsRequest", 0, Topics=[
        {"Name": "t", "Partitions": [{"PartitionIndex": 0, "Replicas": [4, 5, 6]}]}])
    decision = controller.decide(c.image, ControllerState(), req, ctx())
    assert decision.response["type"] == "AlterPartitionReassignmentsResponse" and len(decision.records) == 1
    c.apply(decision.records)
    decision = controller.decide(c.image, ControllerState(),
                                 request("ListPartitionReassignmentsRequest", 0, Topics=None), ctx())
    assert decision.response["data"]["Topics"] == [{"Name": "t", "Partitions": [{
        "PartitionIndex": 0, "Replicas": [4, 5, 6, 1, 2, 3], "AddingReplicas": [4, 5, 6],
        "RemovingReplicas": [1, 2, 3]}]}]


def test_a_target_back_to_the_original_replicas_in_flight_completes_at_once():
    """T' = R while R -> T runs: nothing is left to add once R is in the ISR, so Kafka's
    completion check finishes it in the same change."""
    c = six_brokers()
    reassign(c, {"t": {0: [4, 5, 6]}})
    records, resp = reassign(c, {"t": {0: [1, 2, 3]}})
    assert errors(resp) == {("t", 0): 0} and len(records) == 1
    assert full(c.partition("t")) == ([1, 2, 3], [1, 2, 3], 1, 6, 12, [], [])


def test_the_response_in_full():
    c = six_brokers()
    records, resp = reassign(c, {"t": {0: [4, 5, 6], 1: [4, 5, 6]}})
    assert resp == {"type": "AlterPartitionReassignmentsResponse", "version": 0, "data": {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Responses": [{"Name": "t", "Partitions": [
            {"PartitionIndex": 0, "ErrorCode": 0, "ErrorMessage": None},
            {"PartitionIndex": 1, "ErrorCode": error("UNKNOWN_TOPIC_OR_PARTITION"),
             "ErrorMessage": "Unable to find partition t:1."}]}]}}


DIR = {b: uuids.from_bytes(bytes([0xD0 + b] * 16)) for b in range(1, 5)}


@pytest.mark.parametrize("mv, version", [(11, 0), (17, 1), (23, 2)])
def test_records_follow_the_metadata_version_and_place_new_replicas(mv, version):
    c = Cluster(metadata_version=mv)
    for b in range(1, 5):
        c.broker(b, log_dirs=(DIR[b],))
    c.topic("t", [[1, 2]])
    before = list(c.partition("t").directories)
    [rec], resp = reassign(c, {"t": {0: [3, 4]}})
    assert rec["version"] == version
    if mv >= 17:
        # A new replica goes to its broker's only directory; the others stay where they are.
        assert rec["data"]["Directories"] == [DIR[3], DIR[4]] + before
    else:
        assert "Directories" not in changed_fields(rec)
    assert full(c.partition("t")) == ([3, 4, 1, 2], [1, 2], 1, 5, 11, [3, 4], [1, 2])
