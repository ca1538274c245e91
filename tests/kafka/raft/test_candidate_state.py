"""Kafka's ``CandidateStateTest`` and ``EpochElectionTest`` (raft module) translated to a candidate
``RaftNode``: how votes are counted, and when an election is won or given up."""

from __future__ import annotations

from raft_harness import CFG, granted, node

from kraftlake.raft.config import RaftConfig
from kraftlake.raft.node import CANDIDATE, LEADER, RaftNode


# No election backoff: a candidate that gives up stands again at once, in the next epoch, so giving up
# shows as the epoch moving on.
NO_BACKOFF = RaftConfig(cluster_id="kraft", election_timeout_ms=1000, election_jitter_max_ms=0,
                        election_backoff_max_ms=0, fetch_timeout_ms=2000)


def candidate(voters: tuple[int, ...], cfg: RaftConfig = NO_BACKOFF) -> RaftNode:
    n = node(1, voters, cfg=cfg)
    n.tick(1000)
    assert (n.state, n.epoch) == (CANDIDATE, 1)
    return n


def test_single_node_quorum():
    """CandidateStateTest.testSingleNodeQuorum: the vote for itself is a majority."""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    assert n.state == LEADER


def test_two_node_quorum_vote_rejected():
    """CandidateStateTest.testTwoNodeQuorumVoteRejected: one rejection of two voters loses the election
    at once (EpochElection.isVoteRejected), not at the election timeout."""
    n = candidate((1, 2))
    n.handle(granted(2, 1, 1, yes=False), 1010)
    assert (n.state, n.epoch) == (CANDIDATE, 2)  # gave up at 1010, not at the election timeout (2000)


def test_two_node_quorum_vote_granted():
    """CandidateStateTest.testTwoNodeQuorumVoteGranted"""
    n = candidate((1, 2))
    n.handle(granted(2, 1, 1), 1010)
    assert n.state == LEADER


def test_three_node_quorum_vote_granted():
    """CandidateStateTest.testThreeNodeQuorumVoteGranted: one grant of two more is a majority."""
    n = candidate((1, 2, 3))
    n.handle(granted(2, 1, 1), 1010)
    assert n.state == LEADER


def test_three_node_quorum_vote_rejected():
    """CandidateStateTest.testThreeNodeQuorumVoteRejected: two rejections leave no majority possible."""
    n = candidate((1, 2, 3))
    n.handle(granted(2, 1, 1, yes=False), 1010)
    assert n.epoch == 1  # one rejection of three: the election goes on
    n.handle(granted(3, 1, 1, yes=False), 1020)
    assert (n.state, n.epoch) == (CANDIDATE, 2)


def test_grants_from_non_voters_are_not_counted():
    """CandidateStateTest (recordGrantedVote refuses a non-voter): a grant from 9, not a voter, elects
    nobody."""
    n = candidate((1, 2, 3))
    n.handle(granted(9, 1, 1), 1010)
    assert n.state == CANDIDATE
    n.handle(granted(2, 1, 1), 1020)
    assert n.state == LEADER


def test_a_late_grant_to_an_election_given_up_on_is_ignored():
    """KafkaRaftClient.handleVoteResponse (Kafka 4): once the election timed out the node is no longer a
    candidate of it (Kafka 4 moves on to a new pre-vote); a grant arriving then elects nobody."""
    cfg = RaftConfig(cluster_id="kraft", election_timeout_ms=1000, election_jitter_max_ms=0,
                     election_backoff_max_ms=1000, fetch_timeout_ms=2000, seed=1)  # (seed 1: a 100 ms backoff)
    n = candidate((1, 2, 3), cfg)
    n.tick(2000)  # the election timeout: backing off until 2100
    assert n.next_deadline() == 2100
    n.handle(granted(2, 1, 1), 2001)
    assert n.state == CANDIDATE and n.epoch == 1


def test_cannot_change_vote_granted_to_rejected():
    """CandidateStateTest.testCannotChangeVoteGrantedToRejected: a later rejection from a voter that
    granted does not count against the election (Kafka throws; the node keeps the grant)."""
    n = candidate((1, 2, 3, 4, 5))
    n.handle(granted(2, 1, 1), 1010)
    n.handle(granted(3, 1, 1, yes=False), 1020)
    n.handle(granted(4, 1, 1), 1030)
    assert n.state == LEADER
