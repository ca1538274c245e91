"""Kafka's ``FollowerStateTest`` and ``FollowerStateWithVoteTest`` (raft module, Kafka 4.x) translated to a
``RaftNode`` that follows a leader.

Kafka builds a ``FollowerState`` (epoch 5, leader 3, fetch timeout 15 s) and asks it directly; here node 1
restarts from a quorum-state naming leader 3 in epoch 5 (Kafka's ``withElectedLeader``) and the questions
are the RPCs that reach it. ``canGrantVote(..., isPreVote=true)`` has no counterpart (no pre-vote, KIP-996).
"""

from __future__ import annotations

import dataclasses

from raft_harness import CFG, destinations, entries, fetch_answer, only, restored, sent, times_out_at, vote

from kraftlake.raft.node import CANDIDATE, FOLLOWER, RaftNode

FETCH_TIMEOUT = 15_000
CFG15 = dataclasses.replace(CFG, fetch_timeout_ms=FETCH_TIMEOUT)
LEADER, EPOCH = 3, 5


def follower(voted: int | None = None, epochs: tuple[int, ...] = (2, 2)) -> RaftNode:
    """Node 1 of voters 1, 2, 3, following 3 in epoch 5 since time 0, its log two entries of epoch 2."""
    n = restored(1, (1, 2, 3), epoch=EPOCH, leader=LEADER, voted=voted, epochs=epochs, cfg=CFG15)
    assert (n.state, n.leader_id, n.epoch) == (FOLLOWER, LEADER, EPOCH)
    return n


def fetched(n: RaftNode, now: int, **answer) -> list[dict]:
    """The node's next fetch (due by ``now``), answered by the leader."""
    request = sent(n.tick(now), "FetchRequest")
    assert request["destination"] == LEADER
    return n.handle(fetch_answer(request, leader=LEADER, epoch=EPOCH, **answer), now)


def test_fetch_timeout_expiration():
    """FollowerStateTest.testFetchTimeoutExpiration: nothing fetched for the fetch timeout (15 s) ends the
    following, not a moment before (the node stands as a candidate; Kafka 4 becomes prospective)."""
    n = follower()
    n.tick(5000)
    assert n.state == FOLLOWER
    times_out_at(n, FETCH_TIMEOUT, FOLLOWER, CANDIDATE)
    assert n.epoch == EPOCH + 1


def test_fetch_timeout_restarts_with_each_successful_fetch():
    """FollowerStateTest.testFetchTimeoutExpiration, with ``resetFetchTimeoutForSuccessfulFetch``: an
    answered fetch at 5 s moves the end of the fetch timeout to 20 s."""
    n = follower()
    fetched(n, 5000, hw=0)
    n.tick(FETCH_TIMEOUT)
    assert n.state == FOLLOWER
    times_out_at(n, 5000 + FETCH_TIMEOUT, FOLLOWER, CANDIDATE)


def test_monotonic_high_watermark():
    """FollowerStateTest.testMonotonicHighWatermark: the high watermark never goes back. Kafka throws on an
    empty or lower one; the node keeps its own (no message may stop a replica)."""
    n = follower(epochs=(2,) * 20)
    fetched(n, 100, hw=15)
    assert n.high_watermark == 15
    fetched(n, 200, hw=-1)  # unknown (Kafka: OptionalLong.empty())
    assert n.high_watermark == 15
    fetched(n, 300, hw=14)
    assert n.high_watermark == 15
    fetched(n, 400, hw=15)
    assert n.high_watermark == 15


def test_high_watermark_capped_by_the_log_end():
    """FollowerStateTest.testMonotonicHighWatermark, as ``KafkaRaftClient.updateFollowerHighWatermark``
    feeds it: the leader's high watermark, at most this log's end."""
    n = follower()  # two entries
    fetched(n, 100, hw=5)
    assert n.high_watermark == 2
    fetched(n, 200, hw=5, records=entries(2, 4, "a", "b", "c"))
    assert n.high_watermark == 5


def test_grant_standard_vote():
    """FollowerStateTest.testGrantStandardVote: a follower grants no vote in its epoch, to a voter, the
    leader or a non-voter, whether or not the candidate's log is up to date."""
    for last_epoch, last_offset in ((4, 9), (1, 0)):  # up to date with (2, 2), or not
        for candidate in (2, 3, 10):
            n = follower()
            r = only(n.handle(vote(candidate, 1, EPOCH, last_epoch, last_offset), 10), "VoteResponse")
            assert (r["ErrorCode"], r["VoteGranted"], r["LeaderId"], r["LeaderEpoch"]) == (0, False, LEADER, EPOCH)
            assert (n.state, n.leader_id, n.voted_for) == (FOLLOWER, LEADER, None)


def test_grant_vote_after_successful_fetch_from_leader():
    """FollowerStateTest.testPreVoteAfterSuccessfulFetchFromLeader (its standard-vote half; later versions
    call it testGrantVoteAfterSuccessfulFetchFromLeader): after a fetch from the leader, still no vote in
    this epoch."""
    n = follower()
    fetched(n, 100, hw=0)
    for candidate in (2, 3, 10):
        assert only(n.handle(vote(candidate, 1, EPOCH, 4, 9), 110), "VoteResponse")["VoteGranted"] is False
    assert n.state == FOLLOWER


def test_leader_id_and_endpoint():
    """FollowerStateTest.testLeaderIdAndEndpoint (the leader id; endpoints are not modelled): the follower
    names leader 3 in its answers and fetches from it."""
    n = follower()
    assert destinations(n.tick(0), "FetchRequest") == [LEADER]
    r = only(n.handle(vote(2, 1, EPOCH, 4, 9), 1), "VoteResponse")
    assert (r["LeaderId"], n.durable_state()) == (LEADER, {"epoch": EPOCH, "voted_for": None, "leader_id": LEADER})


def test_follower_with_vote_grants_no_vote_after_successful_fetch_from_leader():
    """FollowerStateWithVoteTest.testGrantVoteAfterSuccessfulFetchFromLeader (standard votes): a follower
    that had voted for 2 in this epoch keeps that vote, and grants none, not even to 2."""
    n = follower(voted=2)
    assert n.durable_state() == {"epoch": EPOCH, "voted_for": 2, "leader_id": LEADER}
    fetched(n, 100, hw=0)
    for candidate in (2, 3, 10):
        assert only(n.handle(vote(candidate, 1, EPOCH, 4, 9), 110), "VoteResponse")["VoteGranted"] is False
    assert (n.state, n.voted_for) == (FOLLOWER, 2)
