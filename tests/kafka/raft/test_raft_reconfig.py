"""Kafka's ``KafkaRaftClientReconfigTest`` (raft module, KIP-853) translated to the seed's AlterQuorum of
``RaftNode`` (one voter added or removed at a time, each once the previous change is committed)."""

from __future__ import annotations

from raft_harness import elected, fetch, only

from kraftlake.raft.node import LEADER, UNATTACHED, message

VOTER_NOT_FOUND, INVALID_REQUEST = 127, 42


def alter(target) -> dict:
    return message("AlterQuorumRequest", -1, 1, TargetVoters=target)


def test_add_voter_invalid_high_watermark():
    """KafkaRaftClientReconfigTest.testAddVoterWithPendingAddVoter / the leader's high watermark check:
    no voter change before the leader has committed an entry of its own epoch."""
    leader = elected()  # LeaderChangeMessage at 0, nothing committed in epoch 1 yet
    leader.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1010)  # 4, caught up to the log end
    assert only(leader.handle(alter([1, 2, 3, 4]), 1020), "AlterQuorumResponse")["ErrorCode"] == 0
    assert leader.voters == (1, 2, 3) and leader.log.end_offset == 1  # accepted, waiting
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1030)  # commits the LeaderChangeMessage
    assert leader.voters == (1, 2, 3, 4)


def test_remove_voter_to_empty_voter_set():
    """KafkaRaftClientReconfigTest.testRemoveLastVoter: no voter left is refused (VOTER_NOT_FOUND)."""
    leader = elected()
    assert only(leader.handle(alter([]), 1010), "AlterQuorumResponse")["ErrorCode"] == VOTER_NOT_FOUND
    assert leader.target_voters is None and leader.state == LEADER


def test_malformed_voter_changes_are_refused():
    """KafkaRaftClient's request validation: a target that is not a list of voter ids is INVALID_REQUEST,
    and never stops the replica."""
    leader = elected()
    for target in ([1, 1, 2], [1, -2], ["a"], 7, [1.5]):
        assert only(leader.handle(alter(target), 1010), "AlterQuorumResponse")["ErrorCode"] == INVALID_REQUEST
    assert leader.state == LEADER and leader.target_voters is None


def test_removed_leader_becomes_unattached_in_the_next_epoch():
    """KafkaRaftClientReconfigTest.testLeaderRemovesItself...: once its removal is committed, the leader
    is no voter and becomes unattached in the next epoch."""
    leader = elected()
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
    leader.handle(alter([2, 3]), 1020)
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1030)
    leader.handle(fetch(3, 1, epoch=1, offset=2, last_epoch=1), 1040)
    assert (leader.state, leader.epoch, leader.is_voter) == (UNATTACHED, 2, False)


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
