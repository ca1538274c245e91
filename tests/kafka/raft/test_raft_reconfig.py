"""Kafka's ``KafkaRaftClientReconfigTest`` (raft module, KIP-853) translated to the seed's AlterQuorum of
``RaftNode``.

Kafka adds or removes one voter per AddRaftVoter / RemoveRaftVoter RPC and answers it once the new
VotersRecord is committed (or REQUEST_TIMED_OUT); the node takes a target voter set and moves to it one
voter at a time, each step a VotersRecord that takes effect when appended, the next one only after the
previous one is committed. So a request Kafka refuses for now (no entry of the leader's epoch committed
yet, a new voter still lagging, a change pending) is, here, a target the leader waits to act on. Directory
ids, endpoints, ApiVersions and kraft.version checks, UpdateRaftVoter and bootstrap snapshots are not
modelled.
"""

from __future__ import annotations

from raft_harness import CFG, NOT_LEADER, destinations, elected, entries, fetch, fetch_answer, only, restored, sent

from kraftlake.raft.node import FOLLOWER, LEADER, RESIGNED, UNATTACHED, message, record, voters_record

VOTER_NOT_FOUND, INVALID_REQUEST = 127, 42


def alter(target) -> dict:
    return message("AlterQuorumRequest", -1, 1, TargetVoters=target)


def describe(leader, now: int) -> dict:
    return only(leader.handle(message("DescribeQuorumRequest", -1, 1), now), "DescribeQuorumResponse")


def test_follower_reads_kraft_bootstrap_records():
    """KafkaRaftClientReconfigTest.testFollowerReadsKRaftBootstrapRecords: a VotersRecord fetched from the
    leader makes 3 a voter as soon as it is in the follower's log."""
    n = restored(1, (1, 2), epoch=5, leader=2)
    request = sent(n.tick(0), "FetchRequest")
    assert 3 not in n.voters
    change = record("LeaderChangeMessage", {"LeaderId": 2}, 0)
    records = entries(0, 5, change, voters_record((1, 2, 3), 0))
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=0, records=records), 1)
    assert n.voters == (1, 2, 3)


def test_add_voter():
    """KafkaRaftClientReconfigTest.testAddVoter: once the leader has committed in its epoch and the new
    voter (an observer) has caught up, a VotersRecord adds it; it is a voter from the append, and the
    change completes when that record is committed."""
    leader = elected(voters=(1, 2))  # epoch 1, LeaderChangeMessage at 0
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)  # commits the epoch's first entry
    leader.handle(fetch(3, 1, epoch=1, offset=1, last_epoch=1), 1020)  # 3 caught up, still an observer
    assert [r["ReplicaId"] for r in describe(leader, 1021)["Observers"]] == [3]
    assert only(leader.handle(alter([1, 2, 3]), 1030), "AlterQuorumResponse")["ErrorCode"] == 0
    assert leader.voters == (1, 2, 3) and leader.log.entries[-1].value["type"] == "VotersRecord"
    assert leader.target_voters == (1, 2, 3)  # not committed yet
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1040)
    leader.tick(1041)
    assert (leader.high_watermark, leader.target_voters, describe(leader, 1042)["Observers"]) == (2, None, [])


def test_add_voter_to_not_leader():
    """KafkaRaftClientReconfigTest.testAddVoterToNotLeader"""
    n = restored(1, (1, 2), epoch=3)
    assert only(n.handle(alter([1, 2, 3]), 1), "AlterQuorumResponse")["ErrorCode"] == NOT_LEADER


def test_add_voter_without_fenced_previous_leaders():
    """KafkaRaftClientReconfigTest.testAddVoterWithoutFencedPreviousLeaders: no voter change before the
    leader has committed an entry of its own epoch (Kafka answers REQUEST_TIMED_OUT; the node keeps the
    target and acts once that entry is committed)."""
    leader = elected()  # LeaderChangeMessage at 0, nothing committed in epoch 1 yet
    leader.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1010)  # 4, caught up to the log end
    assert only(leader.handle(alter([1, 2, 3, 4]), 1020), "AlterQuorumResponse")["ErrorCode"] == 0
    assert leader.voters == (1, 2, 3) and leader.log.end_offset == 1  # accepted, waiting
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1030)  # commits the LeaderChangeMessage
    assert leader.voters == (1, 2, 3, 4)


def test_add_voter_with_lagging_new_voter():
    """KafkaRaftClientReconfigTest.testAddVoterWithLaggingNewVoter: a new voter is added only once it has
    caught up to the high watermark (Kafka: REQUEST_TIMED_OUT meanwhile)."""
    leader = elected(voters=(1, 2))
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
    for i in range(3):
        leader.append(i, 1011)
    leader.handle(fetch(2, 1, epoch=1, offset=4, last_epoch=1), 1012)  # high watermark 4
    leader.handle(fetch(3, 1, epoch=1, offset=1, last_epoch=1), 1013)  # 3 lags
    leader.handle(alter([1, 2, 3]), 1020)
    leader.tick(1030)
    assert leader.voters == (1, 2)
    leader.handle(fetch(3, 1, epoch=1, offset=4, last_epoch=1), 1040)
    assert leader.voters == (1, 2, 3)


def test_remove_voter():
    """KafkaRaftClientReconfigTest.testRemoveVoter: 3 is no voter from the VotersRecord's append; once it
    is committed the change is complete and 3 is an observer."""
    leader = elected()
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
    leader.handle(alter([1, 2]), 1020)
    assert leader.voters == (1, 2) and leader.target_voters == (1, 2)
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1030)
    leader.tick(1031)
    d = describe(leader, 1032)
    assert (leader.target_voters, [r["ReplicaId"] for r in d["CurrentVoters"]], [r["ReplicaId"] for r in d["Observers"]]) \
        == (None, [1, 2], [3])


def test_remove_voter_is_leader():
    """KafkaRaftClientReconfigTest.testRemoveVoterIsLeader: the leader removes itself; once that is
    committed (by 2 and 3, the new majority) it resigns, telling 2 and 3 with EndQuorumEpoch, and after its
    election timeout it is an unattached observer in the next epoch."""
    leader = elected()
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
    leader.handle(alter([2, 3]), 1020)
    assert leader.voters == (2, 3) and leader.state == LEADER and not leader.is_voter
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1030)
    assert leader.state == LEADER  # {2, 3} needs both
    out = leader.handle(fetch(3, 1, epoch=1, offset=2, last_epoch=1), 1040)
    assert (leader.state, leader.epoch) == (RESIGNED, 1)
    assert destinations(out, "EndQuorumEpochRequest") == [2, 3]
    assert leader.resign(1050) == []  # resigning again is allowed and does nothing
    leader.tick(1040 + CFG.election_timeout_ms)
    assert (leader.state, leader.epoch, leader.is_voter) == (UNATTACHED, 2, False)


def test_remove_voter_to_not_leader():
    """KafkaRaftClientReconfigTest.testRemoveVoterToNotLeader"""
    n = restored(1, (1, 2, 3), epoch=3, leader=2)
    assert only(n.handle(alter([1, 2]), 1), "AlterQuorumResponse")["ErrorCode"] == NOT_LEADER
    assert n.state == FOLLOWER


def test_remove_voter_without_fenced_previous_leaders():
    """KafkaRaftClientReconfigTest.testRemoveVoterWithoutFencedPreviousLeaders: no removal before the
    leader commits in its epoch (Kafka: REQUEST_TIMED_OUT; the node waits)."""
    leader = elected()
    leader.handle(alter([1, 2]), 1010)
    leader.tick(1020)
    assert leader.voters == (1, 2, 3) and leader.log.end_offset == 1
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1030)
    assert leader.voters == (1, 2)


def test_remove_voter_to_empty_voter_set():
    """KafkaRaftClientReconfigTest.testRemoveVoterToEmptyVoterSet: no voter left is refused
    (VOTER_NOT_FOUND)."""
    leader = elected()
    assert only(leader.handle(alter([]), 1010), "AlterQuorumResponse")["ErrorCode"] == VOTER_NOT_FOUND
    assert leader.target_voters is None and leader.state == LEADER


def test_malformed_voter_changes_are_refused():
    """KafkaRaftClient's request validation (an AlterQuorum the node cannot read): a target that is not a
    list of voter ids is INVALID_REQUEST, and never stops the replica."""
    leader = elected()
    for target in ([1, 1, 2], [1, -2], ["a"], 7, [1.5]):
        assert only(leader.handle(alter(target), 1010), "AlterQuorumResponse")["ErrorCode"] == INVALID_REQUEST
    assert leader.state == LEADER and leader.target_voters is None


def test_malformed_messages_never_stop_a_replica():
    """KafkaRaftClient's handling of requests it cannot read: answered INVALID_REQUEST (a response dropped),
    the node unchanged."""
    leader = elected()
    r = leader.handle(message("VoteRequest", 2, 1, ClusterId="kraft"), 1010)  # no CandidateEpoch etc.
    assert [m["type"] for m in r] == ["VoteResponse"] and r[0]["data"]["ErrorCode"] == INVALID_REQUEST
    r = leader.handle(message("FetchRequest", 2, 1, ClusterId="kraft", ReplicaId="two"), 1011)
    assert [m["type"] for m in r] == ["FetchResponse"] and r[0]["data"]["ErrorCode"] == INVALID_REQUEST
    assert leader.handle(message("VoteResponse", 2, 1), 1012) == []
    assert leader.state == LEADER and any(e["event"] == "malformed_message" for e in leader.events)
