"""Kafka's ``QuorumStateTest`` (raft module) translated to ``RaftNode``: initialization from the
quorum-state file and the transitions between states."""

from __future__ import annotations

from raft_harness import CFG, begin, node, vote

from kraftlake.raft.log import RaftLog
from kraftlake.raft.node import CANDIDATE, FOLLOWER, RESIGNED, UNATTACHED, VOTED, RaftNode


def restored(durable: dict, voters=(1, 2, 3), now: int = 0) -> RaftNode:
    return RaftNode.restore(1, voters, CFG, RaftLog(), durable, now)


def test_initialize_as_unattached():
    """QuorumStateTest.testInitializeAsUnattached"""
    n = restored({"epoch": 5, "leader_id": -1, "voted_for": None})
    assert (n.state, n.epoch, n.voted_for) == (UNATTACHED, 5, None)


def test_initialize_as_follower():
    """QuorumStateTest.testInitializeAsFollower"""
    n = restored({"epoch": 5, "leader_id": 2, "voted_for": None})
    assert (n.state, n.epoch, n.leader_id) == (FOLLOWER, 5, 2)


def test_initialize_as_voted():
    """QuorumStateTest.testInitializeAsVoted (Kafka 4: unattached with a vote)"""
    n = restored({"epoch": 5, "leader_id": -1, "voted_for": 2})
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 5, 2)


def test_initialize_as_resigned_candidate():
    """QuorumStateTest.testInitializeAsResignedCandidate: a vote for itself restarts the candidacy in
    the same epoch."""
    n = restored({"epoch": 5, "leader_id": -1, "voted_for": 1})
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 5, 1)


def test_initialize_as_resigned_leader():
    """QuorumStateTest.testInitializeAsResignedLeader"""
    n = restored({"epoch": 5, "leader_id": 1, "voted_for": 1})
    assert (n.state, n.epoch, n.leader_id) == (RESIGNED, 5, 1)


def test_initialize_as_only_voter():
    """QuorumStateTest.testInitializeAsOnlyVoter: a single voter leads at once."""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    assert (n.state, n.epoch) == ("leader", 1)


def test_unattached_to_unattached_with_higher_epoch_keeps_the_election_timer():
    """QuorumStateTest.testUnattachedToUnattachedWithHigherEpoch: moving to a later epoch without a leader
    keeps the election timer that was running."""
    n = node(epochs=(7,), epoch=7, now=0)  # election timeout at 1000
    n.handle(vote(2, 1, epoch=9, last_epoch=5), 600)  # refused (its log is older), but epoch 9 now
    assert (n.state, n.epoch) == (UNATTACHED, 9) and n.next_deadline() == 1000


def test_voted_to_unattached_with_higher_epoch_keeps_the_election_timer():
    """QuorumStateTest.testVotedToUnattachedWithHigherEpoch (Kafka 4: unattached with a vote)"""
    n = node(epochs=(7,), epoch=7, now=0)
    n.handle(vote(2, 1, epoch=8, last_epoch=7, last_offset=1), 400)
    assert (n.state, n.next_deadline()) == (VOTED, 1000)
    n.handle(vote(3, 1, epoch=9, last_epoch=5), 600)  # refused, but epoch 9
    assert (n.state, n.epoch, n.next_deadline()) == (UNATTACHED, 9, 1000)


def test_follower_to_unattached_with_higher_epoch_starts_a_new_timer():
    """QuorumStateTest.testFollowerToUnattachedWithHigherEpoch: a follower has no election timer to keep."""
    n = node(epochs=(7,), epoch=7, now=0)
    n.handle(begin(2, 1, epoch=8), 400)
    n.handle(vote(3, 1, epoch=9, last_epoch=5), 600)
    assert (n.state, n.epoch, n.next_deadline()) == (UNATTACHED, 9, 1600)
