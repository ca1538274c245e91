"""Kafka's ``UnattachedStateTest`` and ``UnattachedStateWithVoteTest`` (raft module, Kafka 4.x, where
``VotedState`` became an ``UnattachedState`` with a voted key) translated to an unattached ``RaftNode``.

Kafka builds the state (epoch 5, election timeout 10 s) and asks it; here node 0 of voters 0-3 restarts
from a quorum-state with no leader (Kafka's ``withUnknownLeader``) or with a vote (``withVotedCandidate``),
and the questions are Vote requests. The node's VOTED state is Kafka 4's unattached state with a voted key.
Pre-vote (``isPreVote=true``), directory ids and endpoints have no counterpart.
"""

from __future__ import annotations

import dataclasses

from raft_harness import CFG, only, restored, times_out_at, vote

from kraftlake.raft.node import CANDIDATE, UNATTACHED, VOTED, RaftNode

ELECTION_TIMEOUT = 10_000
CFG10 = dataclasses.replace(CFG, election_timeout_ms=ELECTION_TIMEOUT, fetch_timeout_ms=20_000)
EPOCH = 5
UP_TO_DATE, BEHIND = (4, 9), (1, 0)  # (LastOffsetEpoch, LastOffset) against the log's (2, 2)


def unattached(voted: int | None = None) -> RaftNode:
    """Node 0 of voters 0, 1, 2, 3 in epoch 5 at time 0, no leader known, its log two entries of epoch 2."""
    return restored(0, (0, 1, 2, 3), epoch=EPOCH, voted=voted, epochs=(2, 2), cfg=CFG10)


def test_election_timeout():
    """UnattachedStateTest.testElectionTimeout: the election state is (epoch 5, no leader, no vote); the
    election timeout (10 s) expires at 10 s, not before (then the node stands: Kafka 4 goes prospective)."""
    n = unattached()
    assert (n.state, n.durable_state()) == (UNATTACHED, {"epoch": EPOCH, "voted_for": None, "leader_id": -1})
    n.tick(ELECTION_TIMEOUT // 2)
    assert n.state == UNATTACHED
    times_out_at(n, ELECTION_TIMEOUT, UNATTACHED, CANDIDATE)
    assert n.epoch == EPOCH + 1


def test_grant_vote():
    """UnattachedStateTest.testGrantVote: an unattached replica grants its vote to any candidate, voter or
    not (KIP-853), whose log is at least as up to date as its own, and to no other."""
    for (last_epoch, last_offset), expected in ((UP_TO_DATE, True), (BEHIND, False)):
        for candidate in (1, 2, 3, 10):
            n = unattached()
            r = only(n.handle(vote(candidate, 0, EPOCH, last_epoch, last_offset), 10), "VoteResponse")
            assert (r["ErrorCode"], r["VoteGranted"]) == (0, expected), candidate
            assert (n.state, n.voted_for) == ((VOTED, candidate) if expected else (UNATTACHED, None))


def test_voted_election_timeout():
    """UnattachedStateWithVoteTest.testElectionTimeout: the election state holds the vote (epoch 5, voted
    for 1), and the election timeout expires at 10 s."""
    n = unattached(voted=1)
    assert (n.state, n.durable_state()) == (VOTED, {"epoch": EPOCH, "voted_for": 1, "leader_id": -1})
    n.tick(5000)
    assert n.state == VOTED
    n.tick(ELECTION_TIMEOUT - 1)
    assert n.state == VOTED
    n.tick(ELECTION_TIMEOUT)
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, EPOCH + 1, 0)


def test_can_grant_vote_without_directory_id():
    """UnattachedStateWithVoteTest.testCanGrantVoteWithoutDirectoryId (standard votes): the vote is given
    again to the candidate it went to, even with a log behind ours; another candidate gets none."""
    for last_epoch, last_offset in (UP_TO_DATE, BEHIND):
        n = unattached(voted=1)
        assert only(n.handle(vote(1, 0, EPOCH, last_epoch, last_offset), 10), "VoteResponse")["VoteGranted"] is True
        assert only(n.handle(vote(2, 0, EPOCH, last_epoch, last_offset), 20), "VoteResponse")["VoteGranted"] is False
        assert (n.state, n.voted_for) == (VOTED, 1)


def test_vote_restarts_the_election_timer():
    """QuorumState.unattachedAddVotedState (UnattachedStateTest's voted key): voting starts the election
    timeout again, the candidate having at least our chance of winning."""
    n = unattached()
    n.handle(vote(1, 0, EPOCH, *UP_TO_DATE), 4000)
    assert n.state == VOTED
    n.tick(ELECTION_TIMEOUT)
    assert n.state == VOTED
    n.tick(4000 + ELECTION_TIMEOUT)
    assert n.state == CANDIDATE


def test_an_unattached_voter_looks_for_the_leader():
    """UnattachedStateTest, as ``KafkaRaftClient.pollUnattached`` drives it (Kafka 4): unattached, with a
    vote or without, a voter fetches from another voter to learn of an elected leader."""
    for voted in (None, 1):
        n = unattached(voted)
        fetches = [m for m in n.tick(0) if m["type"] == "FetchRequest"]
        assert len(fetches) == 1 and fetches[0]["destination"] in (1, 2, 3)
        assert (fetches[0]["data"]["CurrentLeaderEpoch"], fetches[0]["data"]["FetchOffset"]) == (EPOCH, 2)
