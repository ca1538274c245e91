"""Kafka's ``QuorumStateTest`` (raft module, Kafka 4.x) translated to ``RaftNode``: initialization from the
quorum-state file and the transitions between states.

Kafka calls ``QuorumState.transitionTo*`` directly and checks what is written to the store; the node has no
transition API, so each case drives the transition with the RPC or timer that causes it in
``KafkaRaftClient`` and reads the store as ``durable_state()``. A transition Kafka refuses with an
exception is, here, an RPC that changes nothing. Prospective states (pre-vote, KIP-996) have no
counterpart: where Kafka 4 goes prospective the node stands as a candidate of the next epoch.
"""

from __future__ import annotations

from raft_harness import (CFG, FENCED, NOT_LEADER, begin, elected, entries, fetch_answer, granted, log_of, node, only,
                          restored, sent, times_out_at, vote)

from kraftlake.raft.node import CANDIDATE, FOLLOWER, LEADER, RESIGNED, UNATTACHED, VOTED, RaftNode, message


def stored(n: RaftNode) -> tuple[int, int | None, int]:
    """What the quorum-state file holds: (epoch, voted id, leader id)."""
    d = n.durable_state()
    return d["epoch"], d["voted_for"], d["leader_id"]


def restart(durable: dict, voters=(1, 2, 3), epochs=(), now: int = 0) -> RaftNode:
    return RaftNode.restore(1, voters, CFG, log_of(*epochs), durable, now)


def candidate(voters=(1, 2), epoch: int = 0) -> RaftNode:
    """Node 1 standing in ``epoch + 1`` at 1000 (its election timeout after starting unattached at 0)."""
    n = restored(1, voters, epoch=epoch)
    n.tick(1000)
    assert (n.state, n.epoch) == (CANDIDATE, epoch + 1)
    return n


# ------------------------------------------------------------------------------------ initialize
def test_initialize_primordial_epoch():
    """QuorumStateTest.testInitializePrimordialEpoch: a sole voter starts unattached in epoch 0 and, at its
    first poll, is the candidate of epoch 1 with its own vote, which elects it."""
    n = RaftNode(1, (1,), CFG)
    assert (n.state, n.epoch) == (UNATTACHED, 0)
    n.tick(0)
    assert (n.state, n.epoch, stored(n)) == (LEADER, 1, (1, 1, 1))


def test_initialize_as_unattached():
    """QuorumStateTest.testInitializeAsUnattached"""
    n = restart({"epoch": 5, "leader_id": -1, "voted_for": None})
    assert (n.state, n.epoch, n.voted_for) == (UNATTACHED, 5, None)


def test_initialize_as_follower():
    """QuorumStateTest.testInitializeAsFollower: following 2 in epoch 5, its fetch timeout from the start."""
    n = restart({"epoch": 5, "leader_id": 2, "voted_for": None})
    assert (n.state, n.epoch, n.leader_id) == (FOLLOWER, 5, 2)
    times_out_at(n, CFG.fetch_timeout_ms, FOLLOWER, CANDIDATE)


def test_initialize_voted_and_leader_are_same():
    """QuorumStateTest.testInitializeVotedAndLeaderAreSame: a vote for the leader of the epoch is kept."""
    n = restart({"epoch": 5, "leader_id": 2, "voted_for": 2})
    assert (n.state, n.leader_id, stored(n)) == (FOLLOWER, 2, (5, 2, 2))


def test_initialize_voted_and_leader_are_different():
    """QuorumStateTest.testInitializeVotedAndLeaderAreDifferent: following 2 after voting for 3 in the
    same epoch; both stay in the file."""
    n = restart({"epoch": 5, "leader_id": 2, "voted_for": 3})
    assert (n.state, n.leader_id, stored(n)) == (FOLLOWER, 2, (5, 3, 2))


def test_initialize_as_voted():
    """QuorumStateTest.testInitializeAsVotedNoLeader (Kafka 4: unattached with a vote)"""
    n = restart({"epoch": 5, "leader_id": -1, "voted_for": 2})
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 5, 2)
    times_out_at(n, CFG.election_timeout_ms, VOTED, CANDIDATE)
    assert n.epoch == 6


def test_initialize_as_resigned_candidate():
    """QuorumStateTest.testInitializeAsResignedCandidate: a vote for itself restarts the candidacy in
    the same epoch, with its own vote granted and the others' unrecorded (asked again)."""
    n = restart({"epoch": 5, "leader_id": -1, "voted_for": 1})
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 5, 1)
    assert sorted(m["destination"] for m in n.tick(0) if m["type"] == "VoteRequest") == [2, 3]


def test_initialize_as_resigned_leader():
    """QuorumStateTest.testInitializeAsResignedLeader: resigned in the same epoch, both other voters
    unacknowledged (EndQuorumEpoch goes to both)."""
    n = restart({"epoch": 5, "leader_id": 1, "voted_for": None})
    assert (n.state, n.epoch, n.leader_id) == (RESIGNED, 5, 1)
    assert sorted(m["destination"] for m in n.tick(0) if m["type"] == "EndQuorumEpochRequest") == [2, 3]


def test_initialize_as_only_voter():
    """QuorumStateTest.testInitializeAsOnlyVoter: a single voter leads at once (the client's initialize
    makes it a candidate, whose own vote is a majority)."""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    assert (n.state, n.epoch) == (LEADER, 1)


def test_initialize_with_corrupted_store():
    """QuorumStateTest.testInitializeWithCorruptedStore: without a readable quorum-state the replica starts
    unattached in the epoch of its log's last entry, with no leader."""
    n = RaftNode.restore(1, (1, 2, 3), CFG, log_of(1, 2), {}, 0)
    assert (n.state, n.epoch, n.leader_id, stored(n)) == (UNATTACHED, 2, -1, (2, None, -1))


def test_a_quorum_state_older_than_the_log_is_overruled():
    """QuorumState.initialize: a quorum-state file with an epoch before the log's last one is not trusted
    (its vote and leader are of an older epoch): unattached in the log's epoch."""
    n = restart({"epoch": 1, "leader_id": 2, "voted_for": 2}, epochs=(1, 3))
    assert (n.state, stored(n)) == (UNATTACHED, (3, None, -1))


# ------------------------------------------------------------------------------------- candidate
def test_candidate_to_resigned():
    """QuorumStateTest.testCandidateToResigned: only a leader resigns."""
    n = candidate()
    assert n.resign(1001) == [] and (n.state, n.epoch) == (CANDIDATE, 1)


def test_candidate_to_leader():
    """QuorumStateTest.testCandidateToLeader: the new leader knows no high watermark yet."""
    n = candidate()
    n.handle(granted(2, 1, 1), 1001)
    assert (n.state, n.epoch, n.hw_known()) == (LEADER, 1, False)


def test_candidate_to_leader_without_granted_vote():
    """QuorumStateTest.testCandidateToLeaderWithoutGrantedVote: not without a majority; with the other
    voter's grant, yes."""
    n = candidate()
    n.tick(1500)
    assert n.state == CANDIDATE
    n.handle(granted(2, 1, 1), 1501)
    assert n.state == LEADER


def test_candidate_to_follower_same_epoch():
    """QuorumStateTest.testCandidateToFollowerSameEpoch"""
    n = candidate()
    n.handle(begin(2, 1, epoch=1), 1001)
    assert (n.state, n.epoch, n.leader_id, stored(n)[2]) == (FOLLOWER, 1, 2, 2)


def test_candidate_to_follower_higher_epoch():
    """QuorumStateTest.testCandidateToFollowerHigherEpoch: the vote of the old epoch is gone."""
    n = candidate()
    n.handle(begin(2, 1, epoch=5), 1001)
    assert (n.state, stored(n)) == (FOLLOWER, (5, None, 2))


def test_candidate_to_unattached_higher_epoch():
    """QuorumStateTest.testCandidateToUnattachedHigherEpoch: an answer from epoch 5 without a leader."""
    n = candidate()
    n.handle(message("VoteResponse", 2, 1, ErrorCode=0, VoteGranted=False, LeaderId=-1, LeaderEpoch=5), 1001)
    assert (n.state, stored(n)) == (UNATTACHED, (5, None, -1))


def test_candidate_to_any_state_lower_epoch():
    """QuorumStateTest.testCandidateToAnyStateLowerEpoch: the candidate of epoch 6 refuses epoch 4."""
    n = candidate(epoch=5)
    assert only(n.handle(begin(2, 1, epoch=4), 1001), "BeginQuorumEpochResponse")["ErrorCode"] == FENCED
    assert only(n.handle(vote(2, 1, epoch=4), 1002), "VoteResponse")["ErrorCode"] == FENCED
    assert (n.state, stored(n)) == (CANDIDATE, (6, 1, -1))


# ---------------------------------------------------------------------------------------- leader
def test_leader_to_resigned():
    """QuorumStateTest.testLeaderToResigned: a sole voter has no one to tell (no EndQuorumEpoch)."""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    out = n.resign(10)
    assert (n.state, stored(n), out) == (RESIGNED, (1, 1, 1), [])


def test_leader_to_follower_same_epoch():
    """QuorumStateTest.testLeaderToFollowerSameEpoch: another leader of its own epoch does not make the
    leader follow (Kafka throws; the node answers and stays leader)."""
    leader = elected(voters=(1, 2))
    leader.handle(begin(2, 1, epoch=1), 1001)
    assert (leader.state, leader.leader_id) == (LEADER, 1)


def test_leader_to_follower_higher_epoch():
    """QuorumStateTest.testLeaderToFollowerHigherEpoch"""
    leader = elected(voters=(1, 2))
    leader.handle(begin(2, 1, epoch=5), 1001)
    assert (leader.state, stored(leader)) == (FOLLOWER, (5, None, 2))


def test_leader_to_unattached_higher_epoch():
    """QuorumStateTest.testLeaderToUnattachedHigherEpoch: a candidate of epoch 5 whose log is behind."""
    leader = elected(voters=(1, 2))
    leader.handle(vote(2, 1, epoch=5), 1001)
    assert (leader.state, stored(leader)) == (UNATTACHED, (5, None, -1))


def test_leader_to_any_state_lower_epoch():
    """QuorumStateTest.testLeaderToAnyStateLowerEpoch"""
    leader = elected(voters=(1, 2), epoch=5)  # epoch 6
    assert only(leader.handle(begin(2, 1, epoch=4), 1001), "BeginQuorumEpochResponse")["ErrorCode"] == FENCED
    assert only(leader.handle(vote(2, 1, epoch=4), 1002), "VoteResponse")["ErrorCode"] == FENCED
    assert (leader.state, stored(leader)) == (LEADER, (6, 1, 1))


def test_cannot_follow_self():
    """QuorumStateTest.testCannotFollowSelf: a BeginQuorumEpoch naming this node leader does not make it
    follow itself."""
    n = node(1, (1, 2))
    n.handle(message("BeginQuorumEpochRequest", 2, 1, ClusterId="kraft", VoterId=1, LeaderId=1, LeaderEpoch=0), 10)
    assert n.state == UNATTACHED and n.leader_id == -1


# ------------------------------------------------------------------------------------ unattached
def test_unattached_to_unattached_voted_same_epoch():
    """QuorumStateTest.testUnattachedToUnattachedVotedSameEpoch: the vote is written and the election
    timeout starts again."""
    n = restored(1, (1, 2), epoch=5)
    n.handle(vote(2, 1, epoch=5), 300)
    assert (n.state, stored(n)) == (VOTED, (5, 2, -1))
    times_out_at(n, 300 + CFG.election_timeout_ms, VOTED, CANDIDATE)


def test_unattached_to_unattached_with_higher_epoch_keeps_the_election_timer():
    """QuorumStateTest.testUnattachedToUnattached: moving to a later epoch without a leader keeps the
    election timer that was running."""
    n = node(epochs=(7,), epoch=7, now=0)  # election timeout at 1000
    n.handle(vote(2, 1, epoch=9, last_epoch=5), 600)  # refused (its log is older), but epoch 9 now
    assert (n.state, n.epoch) == (UNATTACHED, 9)
    times_out_at(n, 1000, UNATTACHED, CANDIDATE)
    assert n.epoch == 10


def test_unattached_to_follower_same_epoch():
    """QuorumStateTest.testUnattachedToFollowerSameEpoch"""
    n = restored(1, (1, 2), epoch=5)
    n.handle(begin(2, 1, epoch=5), 100)
    assert (n.state, stored(n)) == (FOLLOWER, (5, None, 2))
    n.tick(100 + CFG.fetch_timeout_ms - 1)
    assert n.state == FOLLOWER


def test_unattached_to_follower_higher_epoch():
    """QuorumStateTest.testUnattachedToFollowerHigherEpoch"""
    n = restored(1, (1, 2), epoch=5)
    n.handle(begin(2, 1, epoch=8), 100)
    assert (n.state, stored(n)) == (FOLLOWER, (8, None, 2))


def test_unattached_to_any_state_lower_epoch():
    """QuorumStateTest.testUnattachedToAnyStateLowerEpoch"""
    n = restored(1, (1, 2), epoch=5)
    assert only(n.handle(vote(2, 1, epoch=4), 1), "VoteResponse")["ErrorCode"] == FENCED
    assert only(n.handle(begin(2, 1, epoch=4), 2), "BeginQuorumEpochResponse")["ErrorCode"] == FENCED
    assert (n.state, stored(n)) == (UNATTACHED, (5, None, -1))


def test_unattached_voted_to_unattached_voted():
    """QuorumStateTest.testUnattachedVotedToUnattachedVoted: one vote per epoch."""
    n = restored(1, (1, 2, 3), epoch=8, voted=2)
    assert only(n.handle(vote(3, 1, epoch=8), 1), "VoteResponse")["VoteGranted"] is False
    assert (n.state, stored(n)) == (VOTED, (8, 2, -1))


def test_unattached_voted_to_follower_same_epoch():
    """QuorumStateTest.testUnattachedVotedToFollowerSameEpoch: the vote stays in the file."""
    n = restored(1, (1, 2, 3), epoch=5, voted=2)
    n.handle(begin(3, 1, epoch=5), 1)
    assert (n.state, stored(n)) == (FOLLOWER, (5, 2, 3))


def test_unattached_voted_to_follower_higher_epoch():
    """QuorumStateTest.testUnattachedVotedToFollowerHigherEpoch"""
    n = restored(1, (1, 2, 3), epoch=5, voted=2)
    n.handle(begin(3, 1, epoch=8), 1)
    assert (n.state, stored(n)) == (FOLLOWER, (8, None, 3))


def test_voted_to_unattached_with_higher_epoch_keeps_the_election_timer():
    """QuorumStateTest.testUnattachedVotedToUnattachedHigherEpoch: a later epoch without a leader keeps
    the election timer the vote started."""
    n = node(epochs=(7,), epoch=7, now=0)
    n.handle(vote(2, 1, epoch=8, last_epoch=7, last_offset=1), 400)  # voted: the timer ends at 1400
    assert n.state == VOTED
    n.handle(vote(3, 1, epoch=9, last_epoch=5), 600)  # refused, but epoch 9
    assert (n.state, n.epoch) == (UNATTACHED, 9)
    times_out_at(n, 1400, UNATTACHED, CANDIDATE)
    assert n.epoch == 10


def test_unattached_voted_to_any_state_lower_epoch():
    """QuorumStateTest.testUnattachedVotedToAnyStateLowerEpoch"""
    n = restored(1, (1, 2), epoch=5, voted=2)
    assert only(n.handle(vote(2, 1, epoch=4), 1), "VoteResponse")["ErrorCode"] == FENCED
    assert only(n.handle(begin(2, 1, epoch=4), 2), "BeginQuorumEpochResponse")["ErrorCode"] == FENCED
    assert (n.state, stored(n)) == (VOTED, (5, 2, -1))


def test_can_become_follower_of_non_voter():
    """QuorumStateTest.testCanBecomeFollowerOfNonVoter (KIP-853): a vote for 2, no voter, then following
    it in that epoch, the vote kept."""
    n = restored(1, (1, 3), epoch=4)
    assert only(n.handle(vote(2, 1, epoch=4), 1), "VoteResponse")["VoteGranted"] is True
    n.handle(begin(2, 1, epoch=4), 2)
    assert (n.state, n.leader_id, stored(n)) == (FOLLOWER, 2, (4, 2, 2))


# -------------------------------------------------------------------------------------- follower
def test_follower_to_follower_same_epoch():
    """QuorumStateTest.testFollowerToFollowerSameEpoch: another leader of the same epoch is refused (Kafka
    throws; the node keeps its leader)."""
    n = restored(1, (1, 2, 3), epoch=8, leader=2)
    n.handle(begin(3, 1, epoch=8), 1)
    assert (n.state, stored(n)) == (FOLLOWER, (8, None, 2))


def test_follower_to_follower_higher_epoch():
    """QuorumStateTest.testFollowerToFollowerHigherEpoch"""
    n = restored(1, (1, 2, 3), epoch=8, leader=2)
    n.handle(begin(3, 1, epoch=9), 1)
    assert (n.state, stored(n)) == (FOLLOWER, (9, None, 3))


def test_follower_to_unattached_with_higher_epoch_starts_a_new_timer():
    """QuorumStateTest.testFollowerToUnattachedHigherEpoch: a follower has no election timer to keep; the
    new one runs from the transition."""
    n = node(epochs=(7,), epoch=7, now=0)
    n.handle(begin(2, 1, epoch=8), 400)
    n.handle(vote(3, 1, epoch=9, last_epoch=5), 600)
    assert (n.state, n.epoch) == (UNATTACHED, 9)
    n.tick(1599)
    assert n.state == UNATTACHED
    n.tick(1600)
    assert n.state == CANDIDATE


def test_follower_to_any_state_lower_epoch():
    """QuorumStateTest.testFollowerToAnyStateLowerEpoch"""
    n = restored(1, (1, 2), epoch=5, leader=2)
    assert only(n.handle(begin(2, 1, epoch=4), 1), "BeginQuorumEpochResponse")["ErrorCode"] == FENCED
    assert only(n.handle(vote(2, 1, epoch=4), 2), "VoteResponse")["ErrorCode"] == FENCED
    assert (n.state, stored(n)) == (FOLLOWER, (5, None, 2))


# ------------------------------------------------------------------------------------- observers
def test_observer_cannot_become_prospective_or_candidate_or_leader():
    """QuorumStateTest.testObserverCannotBecomeProspectiveOrCandidateOrLeader"""
    obs = RaftNode(1, (2,), CFG)
    obs.tick(0)
    obs.tick(100_000)
    assert obs.state == UNATTACHED and obs.epoch == 0
    assert not any(e["event"] == "election_started" for e in obs.events)


def test_observer_with_id_can_vote():
    """QuorumStateTest.testObserverWithIdCanVote"""
    obs = restored(1, (2,), epoch=5)
    assert only(obs.handle(vote(2, 1, epoch=5), 1), "VoteResponse")["VoteGranted"] is True
    assert (obs.state, stored(obs)) == (VOTED, (5, 2, -1))


def test_observer_follower_to_unattached():
    """QuorumStateTest.testObserverFollowerToUnattached: unattached in epoch 3, and it stays so however
    long: an observer has no election timeout."""
    obs = restored(1, (2, 3), epoch=2, leader=2)
    request = sent(obs.tick(0), "FetchRequest")
    obs.handle(fetch_answer(request, leader=-1, epoch=3, error=NOT_LEADER), 1)  # epoch 3, no leader yet
    assert (obs.state, obs.epoch) == (UNATTACHED, 3)
    obs.tick(1_000_000)
    assert (obs.state, obs.epoch) == (UNATTACHED, 3)


def test_observer_unattached_to_follower():
    """QuorumStateTest.testObserverUnattachedToFollower: an unattached observer follows the leader its
    fetch discovers, with the fetch timeout running."""
    obs = restored(1, (2, 3), epoch=2)
    request = sent(obs.tick(0), "FetchRequest")
    obs.handle(fetch_answer(request, leader=2, epoch=3, error=FENCED), 1)
    assert (obs.state, obs.epoch, obs.leader_id) == (FOLLOWER, 3, 2)


def test_high_watermark_retained():
    """QuorumStateTest.testHighWatermarkRetained: the high watermark survives becoming unattached, voting
    and standing; a new leader knows none until it commits."""
    n = restored(1, (1, 2), epoch=5, leader=2)
    request = sent(n.tick(0), "FetchRequest")
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=10, records=entries(0, 5, *range(10))), 1)
    assert n.high_watermark == 10
    n.handle(vote(2, 1, epoch=6, last_epoch=5, last_offset=3), 2)  # behind: refused, but epoch 6
    assert (n.state, n.high_watermark) == (UNATTACHED, 10)
    n.handle(vote(2, 1, epoch=6, last_epoch=5, last_offset=10), 3)
    assert (n.state, n.high_watermark) == (VOTED, 10)
    n.tick(3 + CFG.election_timeout_ms)
    assert (n.state, n.high_watermark) == (CANDIDATE, 10)
    n.handle(granted(2, 1, 7), 2000)
    assert (n.state, n.hw_known()) == (LEADER, False)


def test_an_observer_that_voted_keeps_looking_for_the_leader():
    """QuorumStateTest.testObserverWithIdCanVote, as ``pollUnattached`` drives it: having voted, an
    observer still fetches from the voters to find the leader."""
    obs = restored(1, (2, 3), epoch=5, voted=2, epochs=(4,))
    assert obs.state == VOTED
    assert sent(obs.tick(0), "FetchRequest")["data"]["CurrentLeaderEpoch"] == 5

