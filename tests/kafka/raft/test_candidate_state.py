"""Kafka's ``CandidateStateTest`` and ``EpochElectionTest`` (raft module) translated to a candidate
``RaftNode``: how votes are counted, and when an election is won or given up."""

from __future__ import annotations

from raft_harness import CFG, granted, node, only, vote

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
    """CandidateStateTest.testCannotGrantOrRejectNonVoters: a grant from 9, not a voter, elects nobody
    (Kafka throws; the node ignores it)."""
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


def test_cannot_reject_vote_from_local_id():
    """CandidateStateTest.testCannotRejectVoteFromLocalId: an answer claiming to come from the candidate
    itself is no rejection (Kafka throws; the node ignores it)."""
    n = candidate((1, 2))
    n.handle(granted(1, 1, 1, yes=False), 1010)
    assert (n.state, n.epoch) == (CANDIDATE, 1)  # a counted rejection would have ended the election


def test_cannot_change_vote_rejected_to_granted():
    """CandidateStateTest.testCannotChangeVoteRejectedToGranted: a voter that rejected cannot grant
    afterwards (Kafka throws; the node keeps the rejection)."""
    n = candidate((1, 2, 3, 4, 5))
    n.handle(granted(2, 1, 1, yes=False), 1010)
    n.handle(granted(2, 1, 1), 1020)
    n.handle(granted(3, 1, 1), 1030)
    assert n.state == CANDIDATE  # 1 and 3 granted; 2's grant did not count
    n.handle(granted(4, 1, 1), 1040)
    assert n.state == LEADER


def test_idempotent_grant():
    """CandidateStateTest.testIdempotentGrant / EpochElectionTest.testRecordGrantedVote: a grant counts
    once, however often it arrives; a second voter's grant makes the majority."""
    n = candidate((1, 2, 3, 4, 5))
    n.handle(granted(2, 1, 1), 1010)
    n.handle(granted(2, 1, 1), 1020)
    assert n.state == CANDIDATE
    n.handle(granted(3, 1, 1), 1030)
    assert n.state == LEADER


def test_idempotent_reject():
    """CandidateStateTest.testIdempotentReject / EpochElectionTest.testRecordRejectedVote: a rejection
    counts once; a second voter's rejection loses the election."""
    n = candidate((1, 2, 3))
    n.handle(granted(2, 1, 1, yes=False), 1010)
    n.handle(granted(2, 1, 1, yes=False), 1020)
    assert (n.state, n.epoch) == (CANDIDATE, 1)
    n.handle(granted(3, 1, 1, yes=False), 1030)
    assert (n.state, n.epoch) == (CANDIDATE, 2)


def test_grant_vote():
    """CandidateStateTest.testGrantVote (standard votes): a candidate grants no vote in its epoch, to a
    voter or not, whatever the log."""
    for last_epoch, last_offset in ((0, 5), (0, 0)):
        for other in (0, 2, 3, 4):
            n = candidate((1, 2, 3, 4))
            r = n.handle(vote(other, 1, 1, last_epoch, last_offset), 1010)
            assert only(r, "VoteResponse")["VoteGranted"] is False and (n.state, n.voted_for) == (CANDIDATE, 1)


def test_election_state():
    """CandidateStateTest.testElectionState: the candidate's quorum-state holds its epoch and its vote for
    itself, no leader."""
    n = candidate((1, 2, 3, 4))
    assert n.durable_state() == {"epoch": 1, "voted_for": 1, "leader_id": -1}


def test_state_on_initialization():
    """EpochElectionTest.testStateOnInitialization: a new election is neither won nor lost; every other
    voter is asked."""
    n = node(1, (1, 2, 3), cfg=NO_BACKOFF)
    out = n.tick(1000)
    assert n.state == CANDIDATE and sorted(m["destination"] for m in out if m["type"] == "VoteRequest") == [2, 3]
    n.tick(1500)
    assert (n.state, n.epoch) == (CANDIDATE, 1)
