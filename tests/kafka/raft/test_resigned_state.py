"""Kafka's ``ResignedStateTest`` (raft module, Kafka 4.x) translated to a resigned ``RaftNode``.

Kafka builds a ``ResignedState`` (node 0, epoch 5, election timeout 5 s) and asks it; here node 0 restarts
from a quorum-state naming itself leader of epoch 5 (Kafka's ``withElectedLeader``): a leader always
restarts resigned. ``unackedVoters`` is what the EndQuorumEpoch requests it sends, and sends again, show.
Pre-vote (``canGrantPreVote``) and endpoints have no counterpart.
"""

from __future__ import annotations

import dataclasses

from raft_harness import CFG, answer, destinations, only, restored, times_out_at, vote

from kraftlake.raft.node import CANDIDATE, RESIGNED, RaftNode, message

ELECTION_TIMEOUT = 5000
CFG5 = dataclasses.replace(CFG, election_timeout_ms=ELECTION_TIMEOUT, request_timeout_ms=1000, fetch_timeout_ms=10_000)
EPOCH = 5


def resigned(voters: tuple[int, ...]) -> RaftNode:
    n = restored(0, voters, epoch=EPOCH, leader=0, epochs=(2, 2), cfg=CFG5)
    assert (n.state, n.leader_id, n.epoch) == (RESIGNED, 0, EPOCH)
    return n


def ended(request: dict) -> dict:
    return answer(request, "EndQuorumEpochResponse", ErrorCode=0, LeaderId=0, LeaderEpoch=EPOCH)


def test_resigned_state():
    """ResignedStateTest.testResignedState: the election state names this node leader of epoch 5; the one
    other voter is unacknowledged until it answers EndQuorumEpoch, then never asked again; the election
    timeout (5 s) expires at 5 s, not before."""
    n = resigned((0, 1))
    assert n.durable_state() == {"epoch": EPOCH, "voted_for": None, "leader_id": 0}
    out = n.tick(0)
    assert destinations(out, "EndQuorumEpochRequest") == [1]
    n.handle(ended([m for m in out if m["type"] == "EndQuorumEpochRequest"][0]), 10)
    assert n.tick(ELECTION_TIMEOUT // 2) == [] and n.state == RESIGNED
    times_out_at(n, ELECTION_TIMEOUT, RESIGNED, CANDIDATE)
    assert n.epoch == EPOCH + 1


def test_unacknowledged_voters_are_asked_again():
    """ResignedStateTest.testResignedState (``unackedVoters``): a voter that has not answered is sent
    EndQuorumEpoch again each request timeout; one that answered is not."""
    n = resigned((0, 1, 2))
    out = n.tick(0)
    assert destinations(out, "EndQuorumEpochRequest") == [1, 2]
    n.handle(ended([m for m in out if m["destination"] == 1][0]), 10)
    assert destinations(n.tick(1000), "EndQuorumEpochRequest") == [2]
    assert destinations(n.tick(2000), "EndQuorumEpochRequest") == [2]


def test_grant_vote():
    """ResignedStateTest.testGrantVote (standard votes): a resigned leader grants no vote in its epoch,
    whatever the candidate's log."""
    for last_epoch, last_offset in ((4, 9), (1, 0)):
        for candidate in (1, 2, 3):
            n = resigned((0, 1, 2, 3))
            r = only(n.handle(vote(candidate, 0, EPOCH, last_epoch, last_offset), 10), "VoteResponse")
            assert (r["ErrorCode"], r["VoteGranted"], r["LeaderId"]) == (0, False, 0)
            assert (n.state, n.voted_for) == (RESIGNED, None)


def test_negative_scenario_acknowledge_resignation():
    """ResignedStateTest.testNegativeScenarioAcknowledgeResignation: an acknowledgement from 10, no voter,
    is refused (Kafka throws; the node ignores it and stops nothing): every voter is still asked again."""
    n = resigned((0, 1, 2, 3, 4, 5))
    out = n.tick(0)
    assert destinations(out, "EndQuorumEpochRequest") == [1, 2, 3, 4, 5]
    assert n.handle(message("EndQuorumEpochResponse", 10, 0, ErrorCode=0, LeaderId=0, LeaderEpoch=EPOCH), 10) == []
    assert n.state == RESIGNED
    assert destinations(n.tick(1000), "EndQuorumEpochRequest") == [1, 2, 3, 4, 5]
