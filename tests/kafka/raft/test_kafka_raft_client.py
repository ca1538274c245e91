"""Kafka's ``KafkaRaftClientTest`` (raft module, Kafka 4.x) translated to ``RaftNode``.

Kafka's ``RaftClientTestContext`` starts a client from a quorum-state store (``withElectedLeader``,
``withVotedCandidate``, ``withUnknownLeader``, ``appendToLog``) and polls it; here ``RaftNode.restore``
starts a node from the same durable state and log, and ``tick``/``handle`` are the polls. A response is
delivered with the CorrelationId of the request it answers, as Kafka's ``deliverResponse`` does. Kafka's
cases run with and without KIP-853 RPCs; the node speaks the Kafka 4 (KIP-853) behaviour only, so each case
is run once. Where Kafka 4 becomes prospective (pre-vote, KIP-996), the node stands as a candidate of the
next epoch at once: the docstring says so. The client API around the state machine (appends through the
accumulator, listeners, purgatory, shutdown futures, metrics) has no counterpart; what a case says about
the quorum's state is kept.
"""

from __future__ import annotations

import dataclasses
import random

from raft_harness import (CFG, FENCED, INVALID, NOT_LEADER, UNKNOWN_EPOCH, answer, begin, destinations, elected,
                          entries, fetch, fetch_answer, node, only, restored, sent, times_out_at, vote)

from kraftlake.raft.config import RaftConfig
from kraftlake.raft.node import CANDIDATE, FOLLOWER, LEADER, RESIGNED, UNATTACHED, VOTED, RaftNode, message

BROKER_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR, CLUSTER, INVALID_VOTER_KEY = 8, -1, 104, 125


class MaxRandom(random.Random):
    """Kafka's ``MockableRandom.mockNextInt`` with a large value: every draw is the largest allowed, so an
    election backoff is bounded by ``election.backoff.max.ms``."""

    def randrange(self, start, stop=None, step=1):  # type: ignore[override]
        return (start if stop is None else stop) - 1


def end_epoch(src: int, dst: int, epoch: int, successors: list[int], leader: int | None = None,
              cluster: str | None = "kraft") -> dict:
    return message("EndQuorumEpochRequest", src, dst, ClusterId=cluster, LeaderId=src if leader is None else leader,
                   LeaderEpoch=epoch, PreferredSuccessors=successors)


def describe(n: RaftNode, now: int) -> dict:
    return only(n.handle(message("DescribeQuorumRequest", -1, n.node_id), now), "DescribeQuorumResponse")


def voter_row(d: dict, replica: int) -> tuple[int, int, int]:
    row = next(r for r in d["CurrentVoters"] if r["ReplicaId"] == replica)
    return row["LogEndOffset"], row["LastFetchTimestamp"], row["LastCaughtUpTimestamp"]


def fetch_of(out: list[dict]) -> dict:
    return sent(out, "FetchRequest")


def fetch_fields(request: dict) -> tuple[int, int, int]:
    d = request["data"]
    return d["CurrentLeaderEpoch"], d["FetchOffset"], d["LastFetchedEpoch"]


def fresh(node_id: int, voters: tuple[int, ...], cfg: RaftConfig = CFG) -> RaftNode:
    """A replica that never ran (no quorum-state file), not polled yet."""
    return RaftNode(node_id, voters, cfg)


def discovered(observer: RaftNode, leader: int, epoch: int, now: int = 0) -> dict:
    """Kafka's ``discoverLeaderAsObserver``: the observer's first fetch, to any voter, is answered
    FENCED_LEADER_EPOCH naming the leader; returns the fetch it then sends to the leader."""
    first = fetch_of(observer.tick(now))
    out = observer.handle(fetch_answer(first, leader=leader, epoch=epoch, error=FENCED), now + 1)
    assert (observer.state, observer.leader_id, observer.epoch) == (FOLLOWER, leader, epoch)
    return fetch_of(out)


# --------------------------------------------------------------------------------- initialization
def test_initialize_single_member_quorum():
    """KafkaRaftClientTest.testInitializeSingleMemberQuorum"""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    assert (n.state, n.epoch, n.leader_id, n.log.end_offset) == (LEADER, 1, 1, 1)


def test_initialize_as_leader_from_state_store_single_member_quorum():
    """KafkaRaftClientTest.testInitializeAsLeaderFromStateStoreSingleMemberQuorum: a sole voter that led
    epoch 2 leads again at once, in epoch 3, its LeaderChangeMessage at offset 0."""
    n = restored(1, (1,), epoch=2, leader=1)
    n.tick(0)
    assert (n.state, n.epoch, n.log.end_offset, n.log.last_epoch) == (LEADER, 3, 1, 3)


def test_initialize_as_candidate_from_state_store():
    """KafkaRaftClientTest.testInitializeAsCandidateFromStateStore: the candidate resumes its election
    (vote requests to the others) after the restart."""
    n = restored(1, (1, 2, 3), epoch=2, voted=1)
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 2, 1)
    out = n.tick(0)
    assert destinations(out, "VoteRequest") == [2, 3]
    assert all((m["data"]["CandidateEpoch"], m["data"]["LastOffsetEpoch"], m["data"]["LastOffset"]) == (2, 0, 0)
               for m in out if m["type"] == "VoteRequest")


def test_initialize_as_candidate_and_become_leader_quorum_of_three():
    """KafkaRaftClientTest.testInitializeAsCandidateAndBecomeLeaderQuorumOfThree: one grant of two more
    elects the restarted candidate; its LeaderChangeMessage (offset 0, the election's time) names the
    voters and the two granting ones, and BeginQuorumEpoch goes to both other voters."""
    n = restored(1, (1, 2, 3), epoch=2, voted=1)
    request = [m for m in n.tick(0) if m["type"] == "VoteRequest"][0]
    out = n.handle(answer(request, "VoteResponse", ErrorCode=0, VoteGranted=True, LeaderId=-1, LeaderEpoch=2), 7)
    assert (n.state, n.epoch, n.log.end_offset) == (LEADER, 2, 1)
    change = n.log.entries[0].value
    assert (change["type"], change["timestamp"], change["data"]["LeaderId"]) == ("LeaderChangeMessage", 7, 1)
    assert [v["VoterId"] for v in change["data"]["Voters"]] == [1, 2, 3]
    assert [v["VoterId"] for v in change["data"]["GrantingVoters"]] == sorted([1, request["destination"]])
    assert destinations(out, "BeginQuorumEpochRequest") == [2, 3]


def test_initialize_as_unattached_and_become_leader():
    """KafkaRaftClientTest.testInitializeAsUnattachedAndBecomeLeader: an unattached voter fetches from
    another voter to find a leader (Kafka 4); told there is none it stays unattached; after the election
    timeout it stands (Kafka 4: a pre-vote first) and one grant elects it, its LeaderChangeMessage written
    at the election's time, BeginQuorumEpoch sent to the other voter."""
    n = fresh(1, (1, 2))  # election timeout 1000
    first = fetch_of(n.tick(0))
    assert (first["destination"], fetch_fields(first)) == (2, (0, 0, 0))
    assert (n.state, n.is_voter) == (UNATTACHED, True)
    n.handle(fetch_answer(first, leader=-1, epoch=0, error=NOT_LEADER), 500)
    assert n.state == UNATTACHED
    request = sent(n.tick(1000), "VoteRequest")
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 1, 1)
    assert (request["data"]["CandidateEpoch"], request["data"]["LastOffsetEpoch"], request["data"]["LastOffset"]) == (1, 0, 0)
    out = n.handle(answer(request, "VoteResponse", ErrorCode=0, VoteGranted=True, LeaderId=-1, LeaderEpoch=1), 1000)
    assert (n.state, n.epoch, n.log.end_offset) == (LEADER, 1, 1)
    change = n.log.entries[0].value
    assert (change["type"], change["timestamp"]) == ("LeaderChangeMessage", 1000)
    assert [v["VoterId"] for v in change["data"]["GrantingVoters"]] == [1, 2]
    assert destinations(out, "BeginQuorumEpochRequest") == [2]


def test_initialize_as_follower_empty_log():
    """KafkaRaftClientTest.testInitializeAsFollowerEmptyLog"""
    n = restored(1, (1, 2), epoch=5, leader=2)
    request = fetch_of(n.tick(0))
    assert (request["destination"], fetch_fields(request)) == (2, (5, 0, 0))


def test_initialize_as_follower_non_empty_log():
    """KafkaRaftClientTest.testInitializeAsFollowerNonEmptyLog"""
    n = restored(1, (1, 2), epoch=5, leader=2, epochs=(3,))
    assert fetch_fields(fetch_of(n.tick(0))) == (5, 1, 3)


def test_initialize_observer_no_previous_state():
    """KafkaRaftClientTest.testInitializeObserverNoPreviousState: an observer's first fetch goes to a voter;
    FENCED_LEADER_EPOCH naming the leader makes it follow."""
    n = fresh(1, (2, 3))
    request = fetch_of(n.tick(0))
    assert request["destination"] in (2, 3) and fetch_fields(request) == (0, 0, 0)
    n.handle(fetch_answer(request, leader=2, epoch=5, error=FENCED), 1)
    assert (n.state, n.epoch, n.leader_id) == (FOLLOWER, 5, 2)


# ---------------------------------------------------------------------------- resigning leaders
def test_reject_votes_from_same_epoch_after_resigning_leadership():
    """KafkaRaftClientTest.testRejectVotesFromSameEpochAfterResigningLeadership"""
    n = restored(1, (1, 2), epoch=2, leader=1)
    assert n.state == RESIGNED
    r = only(n.handle(vote(2, 1, epoch=2), 1), "VoteResponse")
    assert (r["VoteGranted"], r["LeaderId"], r["LeaderEpoch"]) == (False, 1, 2)


def test_reject_votes_from_same_epoch_after_resigning_candidacy():
    """KafkaRaftClientTest.testRejectVotesFromSameEpochAfterResigningCandidacy: a voter that voted for
    itself restarts as a candidate of the same epoch, and rejects another candidate of that epoch."""
    n = restored(1, (1, 2), epoch=2, voted=1)
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 2, 1)
    r = only(n.handle(vote(2, 1, epoch=2), 1), "VoteResponse")
    assert (r["VoteGranted"], r["LeaderId"], r["LeaderEpoch"]) == (False, -1, 2)


def test_grant_votes_from_higher_epoch_after_resigning_leadership():
    """KafkaRaftClientTest.testGrantVotesFromHigherEpochAfterResigningLeadership"""
    n = restored(1, (1, 2), epoch=2, leader=1)
    r = only(n.handle(vote(2, 1, epoch=3), 1), "VoteResponse")
    assert (r["VoteGranted"], r["LeaderId"], r["LeaderEpoch"]) == (True, -1, 3)
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 3, 2)


def test_grant_votes_from_higher_epoch_after_resigning_candidacy():
    """KafkaRaftClientTest.testGrantVotesFromHigherEpochAfterResigningCandidacy"""
    n = restored(1, (1, 2), epoch=2, voted=1)
    r = only(n.handle(vote(2, 1, epoch=3), 1), "VoteResponse")
    assert r["VoteGranted"] is True and (n.state, n.epoch, n.voted_for) == (VOTED, 3, 2)


def test_grant_votes_when_shutting_down():
    """KafkaRaftClientTest.testGrantVotesWhenShuttingDown: a leader that resigned (a graceful shutdown)
    still grants its vote to a candidate of the next epoch, to help the next leader in."""
    leader = elected(voters=(1, 2))  # epoch 1, log end 1
    leader.resign(1100)
    r = only(leader.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1200), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (0, True, 2, -1)
    assert (leader.state, leader.epoch, leader.voted_for) == (VOTED, 2, 2)


def test_initialize_as_resigned_and_become_prospective():
    """KafkaRaftClientTest.testInitializeAsResignedAndBecomeProspective: after the election timeout a
    restarted leader stands again (Kafka 4: prospective, a pre-vote; the node: a candidate of epoch 3)."""
    n = restored(1, (1, 2), epoch=2, leader=1)
    assert n.state == RESIGNED
    n.tick(1000)
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 3, 1)


def test_initialize_as_resigned_leader_from_state_store():
    """KafkaRaftClientTest.testInitializeAsResignedLeaderFromStateStore: a restarted leader stays elected
    but resigned, accepts no writes, sends EndQuorumEpoch at its first poll, and stands in the next
    epoch after the election timeout."""
    n = restored(1, (1, 2), epoch=2, leader=1)
    assert (n.state, n.epoch, n.leader_id, n.log.end_offset) == (RESIGNED, 2, 1, 0)
    try:
        n.append("a", 0)
        raise AssertionError("a resigned leader accepted a write")
    except ValueError:
        pass
    request = sent(n.tick(0), "EndQuorumEpochRequest")
    assert request["destination"] == 2
    n.handle(answer(request, "EndQuorumEpochResponse", ErrorCode=0, LeaderId=1, LeaderEpoch=2), 1)
    out = n.tick(1000)
    assert (n.state, n.epoch) == (CANDIDATE, 3) and destinations(out, "VoteRequest") == [2]


def test_append_failed_with_not_leader_exception():
    """KafkaRaftClientTest.testAppendFailedWithNotLeaderException"""
    n = restored(1, (1, 2), epoch=2)
    try:
        n.append("a", 0)
        raise AssertionError("an unattached replica accepted a write")
    except ValueError:
        pass
    assert n.log.end_offset == 0


def test_end_quorum_epoch_retries_while_resigned():
    """KafkaRaftClientTest.testEndQuorumEpochRetriesWhileResigned: election timeout 10 s, request
    timeout 5 s; after one voter answers, only the other is asked again."""
    cfg = RaftConfig(cluster_id="kraft", election_timeout_ms=10_000, election_jitter_max_ms=0,
                     request_timeout_ms=5000, fetch_timeout_ms=20_000)
    n = restored(0, (0, 1, 2), epoch=19, leader=0, cfg=cfg)
    out = n.tick(0)
    assert destinations(out, "EndQuorumEpochRequest") == [1, 2]
    first = [m for m in out if m["destination"] == 1][0]
    assert n.handle(answer(first, "EndQuorumEpochResponse", ErrorCode=0, LeaderId=0, LeaderEpoch=19), 1) == []
    out = n.tick(6000)
    assert destinations(out, "EndQuorumEpochRequest") == [2] and n.state == RESIGNED


def test_handle_begin_quorum_epoch_after_user_initiated_resign():
    """KafkaRaftClientTest.testHandleBeginQuorumEpochAfterUserInitiatedResign"""
    leader = elected()
    leader.resign(1100)
    r = only(leader.handle(begin(2, 1, epoch=2), 1200), "BeginQuorumEpochResponse")
    assert r["ErrorCode"] == 0 and (leader.state, leader.epoch, leader.leader_id) == (FOLLOWER, 2, 2)


def test_cannot_resign_if_not_leader():
    """KafkaRaftClientTest.testCannotResignIfNotLeader: Kafka throws; the node's resign does nothing."""
    n = restored(1, (1, 2), epoch=2, leader=2)
    assert n.resign(10) == [] and (n.state, n.leader_id) == (FOLLOWER, 2)


def test_cannot_resign_if_observer():
    """KafkaRaftClientTest.testCannotResignIfObserver: an observer that found the leader (its fetch to a
    voter answered FENCED_LEADER_EPOCH) cannot resign."""
    obs = fresh(0, (1, 2))
    discovered(obs, 1, 5)
    assert obs.resign(10) == [] and (obs.state, obs.leader_id, obs.epoch) == (FOLLOWER, 1, 5)


def test_election_timeout_after_user_initiated_resign():
    """KafkaRaftClientTest.testElectionTimeoutAfterUserInitiatedResign: EndQuorumEpoch is not sent
    again once answered, a fetch while resigned is NOT_LEADER_OR_FOLLOWER, and the election timeout
    makes it stand (Kafka 4: prospective; the node: a candidate of the next epoch)."""
    leader = elected(voters=(1, 2))
    request = sent(leader.resign(1100), "EndQuorumEpochRequest")
    leader.handle(answer(request, "EndQuorumEpochResponse", ErrorCode=0, LeaderId=1, LeaderEpoch=1), 1101)
    assert leader.tick(1101 + 20) == []
    r = only(leader.handle(fetch(9, 1, epoch=1, offset=0, last_epoch=0), 1200), "FetchResponse")
    assert (r["ErrorCode"], r["CurrentLeader"]) == (NOT_LEADER, {"LeaderId": 1, "LeaderEpoch": 1})
    leader.tick(1100 + 2000)
    assert (leader.state, leader.epoch, leader.leader_id) == (CANDIDATE, 2, -1)


def test_leader_graceful_shutdown():
    """KafkaRaftClientTest.testLeaderGracefulShutdown: the resigning leader sends EndQuorumEpoch, still
    votes for the next candidate, and follows the leader it elected."""
    leader = elected(voters=(1, 2))
    assert destinations(leader.resign(1100), "EndQuorumEpochRequest") == [2]
    assert only(leader.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1200), "VoteResponse")["VoteGranted"]
    leader.handle(begin(2, 1, epoch=2), 1300)
    assert (leader.state, leader.epoch, leader.leader_id) == (FOLLOWER, 2, 2)


def test_end_quorum_epoch_sent_based_on_fetch_offset():
    """KafkaRaftClientTest.testEndQuorumEpochSentBasedOnFetchOffset: the preferred successors are the
    voters by descending fetch offset, the closest first."""
    leader = elected()  # voters 1, 2, 3; epoch 1; end 1
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1001)  # the lagging follower
    leader.append("foo", 1002)
    leader.append("bar", 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=3, last_epoch=1), 1003)  # the close one
    out = leader.resign(1004)
    assert destinations(out, "EndQuorumEpochRequest") == [2, 3]
    assert all(m["data"]["PreferredSuccessors"] == [3, 2] for m in out)


# --------------------------------------------------------------------------- BeginQuorumEpoch
def test_handle_begin_quorum_request():
    """KafkaRaftClientTest.testHandleBeginQuorumRequest: a voter that voted for 2 follows 2 when it
    announces itself leader of that epoch."""
    n = restored(1, (1, 2), epoch=2, voted=2)
    r = only(n.handle(begin(2, 1, epoch=2), 1), "BeginQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderId"], r["LeaderEpoch"]) == (0, 2, 2)
    assert (n.state, n.leader_id, n.epoch, n.voted_for) == (FOLLOWER, 2, 2, 2)


def test_handle_begin_quorum_response():
    """KafkaRaftClientTest.testHandleBeginQuorumResponse: a restarted (resigned) leader follows the leader
    of the next epoch."""
    n = restored(1, (1, 2), epoch=2, leader=1)
    n.handle(begin(2, 1, epoch=3), 1)
    assert (n.state, n.leader_id, n.epoch) == (FOLLOWER, 2, 3)


def test_begin_quorum_epoch_heartbeat():
    """KafkaRaftClientTest.testBeginQuorumEpochHeartbeat: BeginQuorumEpoch to every voter each
    fetch.timeout / 2 (Kafka 4), nothing in between."""
    leader = elected()  # at 1000, fetch timeout 2000
    assert leader.tick(2000 - 1) == []
    assert destinations(leader.tick(2000), "BeginQuorumEpochRequest") == [2, 3]
    assert leader.tick(2500) == []
    assert destinations(leader.tick(3000), "BeginQuorumEpochRequest") == [2, 3]


def test_fetch_should_be_treated_as_leader_acknowledgement():
    """KafkaRaftClientTest.testFetchShouldBeTreatedAsLeaderAcknowledgement: BeginQuorumEpoch is lost, the
    voter finds the leader by fetching, which counts as its acknowledgement; nothing is sent again when the
    request times out (before the next heartbeat)."""
    cfg = dataclasses.replace(CFG, request_timeout_ms=500)
    leader = elected(voters=(1, 2), cfg=cfg)  # at 1000: BeginQuorumEpoch to 2 went out
    assert leader.replica_progress()[2].acknowledged is False
    assert only(leader.handle(fetch(2, 1, epoch=1, offset=0, last_epoch=0), 1010), "FetchResponse")["ErrorCode"] == 0
    assert leader.replica_progress()[2].acknowledged is True
    assert leader.tick(1000 + 500) == []


def test_invalid_voter_replica_begin_quorum_epoch_request():
    """KafkaRaftClientTest.testInvalidVoterReplicaBeginQuorumEpochRequest (the voter id; directory ids are
    not modelled): BeginQuorumEpoch naming another voter is answered INVALID_VOTER_KEY, after the node
    has learnt the leader from it; one naming this node is answered NONE."""
    n = restored(1, (1, 2, 3), epoch=4)
    wrong = message("BeginQuorumEpochRequest", 3, 1, ClusterId="kraft", VoterId=10, LeaderId=3, LeaderEpoch=5)
    r = only(n.handle(wrong, 1), "BeginQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderEpoch"], r["LeaderId"]) == (INVALID_VOTER_KEY, 5, 3)
    assert (n.state, n.leader_id, n.epoch) == (FOLLOWER, 3, 5)
    assert only(n.handle(begin(3, 1, epoch=5), 2), "BeginQuorumEpochResponse")["ErrorCode"] == 0


def test_begin_quorum_epoch_request_cluster_id_validation():
    """KafkaRaftClientTest.testBeginQuorumEpochRequestClusterIdValidation: a matching or missing cluster id
    is accepted, an empty or other one is INCONSISTENT_CLUSTER_ID."""
    leader = elected(voters=(1, 2), epoch=4)  # epoch 5
    for cluster, error in (("kraft", 0), (None, 0), ("", CLUSTER), ("invalid-uuid", CLUSTER)):
        request = message("BeginQuorumEpochRequest", 1, 1, ClusterId=cluster, VoterId=1, LeaderId=1, LeaderEpoch=5)
        assert only(leader.handle(request, 1010), "BeginQuorumEpochResponse")["ErrorCode"] == error
    assert (leader.state, leader.epoch) == (LEADER, 5)


# ----------------------------------------------------------------------------- EndQuorumEpoch
def test_end_quorum_ignored_as_candidate_if_older_epoch():
    """KafkaRaftClientTest.testEndQuorumIgnoredAsCandidateIfOlderEpoch: EndQuorumEpoch of an older epoch is
    FENCED_LEADER_EPOCH and changes nothing; the candidate stays one until its election timeout, backs off,
    then stands again (Kafka 4: prospective; the node: the next epoch)."""
    cfg = dataclasses.replace(CFG, election_backoff_max_ms=100)
    n = restored(1, (1, 2), epoch=4, cfg=cfg)
    n._rng = MaxRandom()
    n.tick(1000)
    assert (n.state, n.epoch) == (CANDIDATE, 5)
    r = only(n.handle(end_epoch(2, 1, 3, [1]), 1010), "EndQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderEpoch"], r["LeaderId"]) == (FENCED, 5, -1)
    n.tick(2000 - 1)
    assert (n.state, n.epoch) == (CANDIDATE, 5)
    n.tick(2000)  # the election timed out: backing off
    assert (n.state, n.epoch) == (CANDIDATE, 5)
    n.tick(2000 + 100)
    assert (n.state, n.epoch) == (CANDIDATE, 6)


def test_end_quorum_ignored_as_leader_if_older_epoch():
    """KafkaRaftClientTest.testEndQuorumIgnoredAsLeaderIfOlderEpoch"""
    leader = elected(epoch=6)  # epoch 7 at 1000
    r = only(leader.handle(end_epoch(2, 1, 5, [1, 3]), 1010), "EndQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderEpoch"], r["LeaderId"]) == (FENCED, 7, 1)
    leader.tick(1000 + CFG.fetch_timeout_ms - 1)
    assert (leader.state, leader.epoch) == (LEADER, 7)


def test_end_quorum_starts_new_election_immediately_if_follower_unattached():
    """KafkaRaftClientTest.testEndQuorumStartsNewElectionImmediatelyIfFollowerUnattached: an unattached
    voter first among the preferred successors stands at once (Kafka 4: prospective)."""
    n = restored(1, (1, 2, 3), epoch=2)
    out = n.handle(end_epoch(2, 1, 2, [1, 3]), 10)
    r = only(out, "EndQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderEpoch"], r["LeaderId"]) == (0, 2, 2)
    assert (n.state, n.epoch) == (CANDIDATE, 3) and destinations(out, "VoteRequest") == [2, 3]


def test_handle_end_quorum_request():
    """KafkaRaftClientTest.testHandleEndQuorumRequest: the follower that is the first preferred successor
    stands at once (Kafka 4: prospective, still naming the old leader)."""
    n = restored(1, (1, 2), epoch=2, leader=2)
    r = only(n.handle(end_epoch(2, 1, 2, [1]), 10), "EndQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderEpoch"], r["LeaderId"]) == (0, 2, 2)
    assert (n.state, n.epoch) == (CANDIDATE, 3)


def test_handle_end_quorum_request_with_lower_priority_to_become_leader():
    """KafkaRaftClientTest.testHandleEndQuorumRequestWithLowerPriorityToBecomeLeader: second of two
    successors, the follower waits (election.backoff.max >> 1) << 0 = 500 ms, fetching meanwhile, then
    stands."""
    n = restored(1, (1, 2, 3), epoch=2, leader=2)
    out = n.handle(end_epoch(2, 1, 2, [3, 1]), 0)
    assert fetch_fields(fetch_of(out)) == (2, 0, 0) and n.state == FOLLOWER
    n.tick(499)
    assert n.state == FOLLOWER
    out = n.tick(500)
    assert (n.state, n.epoch) == (CANDIDATE, 3) and destinations(out, "VoteRequest") == [2, 3]


def test_a_voter_missing_from_the_successors_waits_the_longest():
    """KafkaRaftClient.endEpochElectionBackoff (Kafka 4): a voter not among the preferred successors is at
    position n of n and waits the whole election.backoff.max (Kafka 3.x stood at once)."""
    n = restored(1, (1, 2, 3, 4), epoch=2, leader=2)
    n.handle(end_epoch(2, 1, 2, [3, 4]), 0)
    times_out_at(n, CFG.election_backoff_max_ms, FOLLOWER, CANDIDATE)


def test_end_quorum_epoch_request_cluster_id_validation():
    """KafkaRaftClientTest.testEndQuorumEpochRequestClusterIdValidation"""
    leader = elected(voters=(1, 2), epoch=4)
    for cluster, error in (("kraft", 0), (None, 0), ("", CLUSTER), ("invalid-uuid", CLUSTER)):
        r = only(leader.handle(end_epoch(1, 1, 5, [2], cluster=cluster), 1010), "EndQuorumEpochResponse")
        assert r["ErrorCode"] == error
    assert leader.state == LEADER


# -------------------------------------------------------------------------------------- Vote
def test_vote_request_timeout():
    """KafkaRaftClientTest.testVoteRequestTimeout: an unanswered vote request is sent again after the
    request timeout; the late answer to the first one is ignored, the answer to the second elects."""
    cfg = dataclasses.replace(CFG, election_timeout_ms=10_000, request_timeout_ms=5000, fetch_timeout_ms=20_000)
    n = node(1, (1, 2), cfg=cfg)
    first = sent(n.tick(10_000), "VoteRequest")
    assert (n.state, n.epoch) == (CANDIDATE, 1)
    retry = sent(n.tick(15_000), "VoteRequest")
    assert retry["correlation_id"] != first["correlation_id"]
    n.handle(answer(first, "VoteResponse", ErrorCode=0, VoteGranted=True, LeaderId=-1, LeaderEpoch=1), 15_001)
    assert (n.state, n.voted_for) == (CANDIDATE, 1)
    n.handle(answer(retry, "VoteResponse", ErrorCode=0, VoteGranted=True, LeaderId=-1, LeaderEpoch=1), 15_002)
    assert (n.state, n.epoch) == (LEADER, 1)


def test_handle_valid_vote_request_as_follower():
    """KafkaRaftClientTest.testHandleValidVoteRequestAsFollower"""
    n = restored(1, (1, 2), epoch=2)
    r = only(n.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (0, True, 2, -1)
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 2, 2)


def test_handle_vote_request_as_follower_with_elected_leader():
    """KafkaRaftClientTest.testHandleVoteRequestAsFollowerWithElectedLeader"""
    n = restored(1, (1, 2, 3), epoch=2, leader=3)
    r = only(n.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderId"]) == (0, False, 3)
    assert (n.state, n.leader_id) == (FOLLOWER, 3)


def test_handle_vote_request_as_follower_with_voted_candidate():
    """KafkaRaftClientTest.testHandleVoteRequestAsFollowerWithVotedCandidate"""
    n = restored(1, (1, 2, 3), epoch=2, voted=3)
    r = only(n.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderId"]) == (0, False, -1)
    assert (n.state, n.voted_for) == (VOTED, 3)


def test_handle_invalid_vote_request_with_older_epoch():
    """KafkaRaftClientTest.testHandleInvalidVoteRequestWithOlderEpoch"""
    n = restored(1, (1, 2), epoch=2)
    r = only(n.handle(vote(2, 1, epoch=1, last_epoch=0, last_offset=1), 1), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (FENCED, False, 2, -1)
    assert (n.state, n.epoch, n.voted_for) == (UNATTACHED, 2, None)


def test_handle_vote_request_as_observer():
    """KafkaRaftClientTest.testHandleVoteRequestAsObserver: Kafka 4 lets an observer vote."""
    n = restored(1, (2, 3), epoch=2)
    r = only(n.handle(vote(2, 1, epoch=3, last_epoch=2, last_offset=1), 1), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"]) == (0, True)
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 3, 2)


def test_leader_ignore_vote_request_on_same_epoch():
    """KafkaRaftClientTest.testLeaderIgnoreVoteRequestOnSameEpoch"""
    leader = elected(voters=(1, 2), epoch=2)  # epoch 3
    r = only(leader.handle(vote(2, 1, epoch=3, last_epoch=2, last_offset=1), 1010), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (0, False, 3, 1)
    assert (leader.state, leader.epoch) == (LEADER, 3)


def test_candidate_ignore_vote_request_on_same_epoch():
    """KafkaRaftClientTest.testCandidateIgnoreVoteRequestOnSameEpoch"""
    n = restored(1, (1, 2), epoch=2, voted=1)
    n.tick(0)
    r = only(n.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderId"]) == (0, False, -1)
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 2, 1)


def test_retry_election():
    """KafkaRaftClientTest.testRetryElection: rejected by the other of two voters the candidate keeps its
    own vote and backs off (bounded by election.backoff.max), then stands again (Kafka 4: prospective; the
    node: the next epoch)."""
    cfg = dataclasses.replace(CFG, election_backoff_max_ms=100)
    n = node(1, (1, 2), cfg=cfg)
    n._rng = MaxRandom()
    request = sent(n.tick(1000), "VoteRequest")
    n.handle(answer(request, "VoteResponse", ErrorCode=0, VoteGranted=False, LeaderId=-1, LeaderEpoch=1), 1000)
    assert (n.state, n.epoch, n.voted_for) == (CANDIDATE, 1, 1)
    n.tick(1000 + 100 - 1)
    assert (n.state, n.epoch) == (CANDIDATE, 1)
    out = n.tick(1000 + 100)
    assert (n.state, n.epoch) == (CANDIDATE, 2) and destinations(out, "VoteRequest") == [2]


def test_vote_request_cluster_id_validation():
    """KafkaRaftClientTest.testVoteRequestClusterIdValidation"""
    leader = elected(voters=(1, 2))
    for cluster, error in (("kraft", 0), (None, 0), ("", CLUSTER), ("invalid-uuid", CLUSTER)):
        r = only(leader.handle(vote(2, 1, epoch=1, cluster=cluster), 1010), "VoteResponse")
        assert (r["ErrorCode"], r["VoteGranted"]) == (error, False)
    assert leader.state == LEADER


def test_invalid_voter_replica_vote_request():
    """KafkaRaftClientTest.testInvalidVoterReplicaVoteRequest (the voter id; directory ids are not
    modelled): a vote request naming another voter is refused with INVALID_VOTER_KEY, once the node has
    moved to the candidate's epoch."""
    leader = elected(voters=(1, 2))  # epoch 1
    request = message("VoteRequest", 2, 1, ClusterId="kraft", VoterId=10, CandidateEpoch=2, CandidateId=2,
                      LastOffsetEpoch=1, LastOffset=100)
    r = only(leader.handle(request, 1010), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (INVALID_VOTER_KEY, False, 2, -1)
    assert (leader.state, leader.epoch, leader.voted_for) == (UNATTACHED, 2, None)


def test_leader_accept_vote_from_observer():
    """KafkaRaftClientTest.testLeaderAcceptVoteFromObserver"""
    leader = elected(voters=(1, 2), epoch=4)  # epoch 5
    r = only(leader.handle(vote(3, 1, epoch=4), 1010), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (FENCED, False, 5, 1)
    r = only(leader.handle(vote(3, 1, epoch=5), 1011), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderId"]) == (0, False, 1)


def test_invalid_vote_request():
    """KafkaRaftClientTest.testInvalidVoteRequest: a negative last offset or epoch, or a last epoch not
    before the candidate's epoch, is INVALID_REQUEST and moves nothing."""
    n = restored(1, (1, 2), epoch=5, leader=2)
    for last_epoch, last_offset in ((0, -5), (-1, 0), (6, 0)):
        r = only(n.handle(vote(2, 1, epoch=6, last_epoch=last_epoch, last_offset=last_offset), 1), "VoteResponse")
        assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"], r["LeaderId"]) == (INVALID, False, 5, 2)
        assert (n.state, n.epoch, n.leader_id) == (FOLLOWER, 5, 2)


def test_vote_response_ignored_after_becoming_follower():
    """KafkaRaftClientTest.testVoteResponseIgnoredAfterBecomingFollower (without its pre-vote): while the
    vote requests are in flight, 3 announces itself leader of that epoch; the grants that come back then
    change nothing."""
    n = restored(1, (1, 2, 3), epoch=5)
    out = n.tick(1000)
    requests = [m for m in out if m["type"] == "VoteRequest"]
    assert (n.state, n.epoch, len(requests)) == (CANDIDATE, 6, 2)
    n.handle(begin(3, 1, epoch=6), 1001)
    assert (n.state, n.leader_id) == (FOLLOWER, 3)
    for request, leader in zip(requests, (-1, 3)):
        n.handle(answer(request, "VoteResponse", ErrorCode=0, VoteGranted=True, LeaderId=leader, LeaderEpoch=6), 1002)
    assert (n.state, n.epoch, n.leader_id) == (FOLLOWER, 6, 3)


# -------------------------------------------------------------------------------- Fetch (leader)
def test_invalid_fetch_request():
    """KafkaRaftClientTest.testInvalidFetchRequest (MaxWaitMs is not modelled): a negative fetch offset or
    last fetched epoch, or a last fetched epoch after the leader epoch, is INVALID_REQUEST; a later leader
    epoch is UNKNOWN_LEADER_EPOCH."""
    leader = elected(voters=(1, 2), epoch=4)  # epoch 5
    for epoch, offset, last_epoch, error in ((5, -5, 0, INVALID), (5, 0, -1, INVALID), (5, 0, 6, INVALID),
                                             (6, 0, 0, UNKNOWN_EPOCH)):
        r = only(leader.handle(fetch(2, 1, epoch, offset, last_epoch), 1010), "FetchResponse")
        assert (r["ErrorCode"], r["CurrentLeader"]) == (error, {"LeaderId": 1, "LeaderEpoch": 5})
    assert leader.state == LEADER


def test_fetch_request_cluster_id_validation():
    """KafkaRaftClientTest.testFetchRequestClusterIdValidation"""
    leader = elected(voters=(1, 2), epoch=4)
    for cluster, error in (("kraft", INVALID), (None, INVALID), ("", CLUSTER), ("invalid-uuid", CLUSTER)):
        assert only(leader.handle(fetch(2, 1, 5, -5, 0, cluster=cluster), 1010), "FetchResponse")["ErrorCode"] == error


def test_leader_immediately_sends_diverging_epoch():
    """KafkaRaftClientTest.testLeaderImmediatelySendsDivergingEpoch: log epochs 1,1,1,3,3,3,5,5,5; a fetch
    at offset 6 of epoch 2 diverges: epoch 1 ends at 3."""
    leader = elected(voters=(1, 2), epochs=(1, 1, 1, 3, 3, 3, 5, 5, 5), epoch=5)  # epoch 6
    r = only(leader.handle(fetch(2, 1, epoch=6, offset=6, last_epoch=2), 1010), "FetchResponse")
    assert (r["ErrorCode"], r["CurrentLeader"]) == (0, {"LeaderId": 1, "LeaderEpoch": 6})
    assert r["DivergingEpoch"] == {"Epoch": 1, "EndOffset": 3}


def test_listener_commit_callback_after_leader_write():
    """KafkaRaftClientTest.testListenerCommitCallbackAfterLeaderWrite (the high watermark; listeners are
    not modelled): unknown until the follower fetches past the epoch start, then the follower's offset."""
    leader = elected(voters=(1, 2), epoch=4)  # epoch 5, LeaderChangeMessage at 0
    assert not leader.hw_known()
    leader.handle(fetch(2, 1, epoch=5, offset=1, last_epoch=5), 1010)
    assert (leader.hw_known(), leader.high_watermark) == (True, 1)
    for value in ("a", "b", "c"):
        leader.append(value, 1020)
    leader.handle(fetch(2, 1, epoch=5, offset=1, last_epoch=5), 1030)
    assert leader.high_watermark == 1
    leader.handle(fetch(2, 1, epoch=5, offset=4, last_epoch=5), 1040)
    assert leader.high_watermark == 4


def test_handle_leader_change_fires_after_listener_reaches_epoch_start_offset_on_empty_log():
    """KafkaRaftClientTest.testHandleLeaderChangeFiresAfterListenerReachesEpochStartOffsetOnEmptyLog (the
    high watermark): a fetch at offset 0 does not expose it, one at the epoch start's end does."""
    leader = elected(voters=(1, 2))
    leader.handle(fetch(2, 1, epoch=1, offset=0, last_epoch=0), 1010)
    assert describe(leader, 1011)["HighWatermark"] == -1
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1020)
    assert describe(leader, 1021)["HighWatermark"] == 1


def test_handle_leader_change_fires_after_listener_reaches_epoch_start_offset():
    """KafkaRaftClientTest.testHandleLeaderChangeFiresAfterListenerReachesEpochStartOffset (the high
    watermark): nine entries before the epoch, the LeaderChangeMessage at 9; a follower at offset 3 leaves
    it unknown, one at 10 commits everything."""
    leader = elected(voters=(1, 2), epochs=(1, 1, 1, 1, 1, 1, 2, 2, 2), epoch=4)  # epoch 5
    assert leader.log.end_offset == 10
    leader.handle(fetch(2, 1, epoch=5, offset=3, last_epoch=1), 1010)
    assert not leader.hw_known()
    leader.handle(fetch(2, 1, epoch=5, offset=10, last_epoch=5), 1020)
    assert (leader.hw_known(), leader.high_watermark) == (True, 10)


def test_handle_commit_callback_fires_in_voted_state():
    """KafkaRaftClientTest.testHandleCommitCallbackFiresInVotedState (the high watermark): a leader that
    votes for the next candidate keeps the high watermark it had."""
    leader = elected(voters=(1, 2), epochs=(2, 2, 2, 4, 4, 4, 4, 4, 4), epoch=6)  # epoch 7
    leader.handle(fetch(2, 1, epoch=7, offset=10, last_epoch=7), 1010)
    assert leader.high_watermark == 10
    assert only(leader.handle(vote(2, 1, epoch=8, last_epoch=7, last_offset=10), 1020), "VoteResponse")["VoteGranted"]
    assert (leader.state, leader.epoch, leader.voted_for, leader.high_watermark, leader.hw_known()) == (VOTED, 8, 2, 10, True)


def test_handle_commit_callback_fires_in_candidate_state():
    """KafkaRaftClientTest.testHandleCommitCallbackFiresInCandidateState (the high watermark): kept when
    the leader becomes unattached (the candidate's log is behind) and then a candidate itself."""
    leader = elected(voters=(1, 2), epochs=(2, 2, 2, 4, 4, 4, 4, 4, 4), epoch=6)
    leader.handle(fetch(2, 1, epoch=7, offset=10, last_epoch=7), 1010)
    r = only(leader.handle(vote(2, 1, epoch=8, last_epoch=7, last_offset=9), 1020), "VoteResponse")
    assert r["VoteGranted"] is False and (leader.state, leader.epoch, leader.high_watermark) == (UNATTACHED, 8, 10)
    leader.tick(1020 + 1000)
    assert (leader.state, leader.epoch, leader.high_watermark) == (CANDIDATE, 9, 10)


def test_leader_append_single_member_quorum():
    """KafkaRaftClientTest.testLeaderAppendSingleMemberQuorum: a sole voter commits its LeaderChangeMessage
    at once, then its appends; a replica fetching from 0 gets the LeaderChangeMessage (the election's time,
    voter 1 granting) and the three records of epoch 1."""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    assert (n.state, n.high_watermark) == (LEADER, 1)
    for value in ("a", "b", "c"):
        n.append(value, 10)
    assert n.high_watermark == 4
    r = only(n.handle(fetch(2, 1, epoch=1, offset=0, last_epoch=0), 20), "FetchResponse")
    change = r["Records"][0]["Value"]
    assert (change["type"], change["timestamp"], change["data"]["GrantingVoters"]) == (
        "LeaderChangeMessage", 0, [{"VoterId": 1, "VoterDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA"}])
    assert [(x["Offset"], x["Epoch"], x["Value"]) for x in r["Records"][1:]] == [(1, 1, "a"), (2, 1, "b"), (3, 1, "c")]


def test_leader_should_resign_leadership_if_not_get_fetch_request_from_majority_voters():
    """KafkaRaftClientTest.testLeaderShouldResignLeadershipIfNotGetFetchRequestFromMajorityVoters: check
    quorum (1.5 x fetch timeout = 3000) is reset by a voter's fetch, not an observer's."""
    leader = elected()  # at 1000
    leader.tick(2500)
    leader.handle(fetch(2, 1, epoch=1, offset=0, last_epoch=0), 2500)
    leader.tick(4000)
    leader.handle(fetch(3, 1, epoch=1, offset=0, last_epoch=0), 4000)
    leader.tick(5500)
    assert leader.state == LEADER
    leader.handle(fetch(9, 1, epoch=1, offset=0, last_epoch=0), 5500)  # an observer
    leader.tick(7000)
    assert (leader.state, leader.epoch) == (RESIGNED, 1)


def test_leader_should_not_resign_leadership_if_only_one_voters():
    """KafkaRaftClientTest.testLeaderShouldNotResignLeadershipIfOnlyOneVoters"""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    n.tick(100_000)
    assert n.state == LEADER


# ----------------------------------------------------------------------------------- DescribeQuorum
def test_describe_quorum_non_leader():
    """KafkaRaftClientTest.testDescribeQuorumNonLeader"""
    n = restored(1, (1, 2, 3), epoch=2)
    assert describe(n, 1)["ErrorCode"] == NOT_LEADER


def test_describe_quorum_with_only_static_voters():
    """KafkaRaftClientTest.testDescribeQuorumWithOnlyStaticVoters: a new leader's high watermark is
    unknown (-1); its own row is now, the other voter's -1 throughout."""
    leader = elected(voters=(1, 2))
    d = describe(leader, 1005)
    assert (d["HighWatermark"], d["Observers"]) == (-1, [])
    assert voter_row(d, 1) == (1, 1005, 1005) and voter_row(d, 2) == (-1, -1, -1)


def test_describe_quorum_with_followers():
    """KafkaRaftClientTest.testDescribeQuorumWithFollowers: rows and high watermark as followers fetch,
    and NOT_LEADER_OR_FOLLOWER once the leader lost the quorum (check quorum)."""
    leader = elected()  # at 1000, end 1
    d = describe(leader, 1000)
    assert d["HighWatermark"] == -1 and [voter_row(d, r) for r in (1, 2, 3)] == [(1, 1000, 1000), (-1, -1, -1), (-1, -1, -1)]
    assert only(leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1100), "FetchResponse")["HighWatermark"] == 1
    leader.append("foo", 1100)
    leader.append("bar", 1100)
    d = describe(leader, 1200)
    assert d["HighWatermark"] == 1 and [voter_row(d, r) for r in (1, 2)] == [(3, 1200, 1200), (1, 1100, 1100)]
    assert only(leader.handle(fetch(3, 1, epoch=1, offset=3, last_epoch=1), 1300), "FetchResponse")["HighWatermark"] == 3
    d = describe(leader, 1400)
    assert d["HighWatermark"] == 3 and voter_row(d, 3) == (3, 1300, 1300) and voter_row(d, 2) == (1, 1100, 1100)
    leader.tick(1300 + 3000)  # check quorum: no majority fetched for 1.5 x the fetch timeout
    assert describe(leader, 1300 + 3000)["ErrorCode"] == NOT_LEADER


def test_describe_quorum_with_observer():
    """KafkaRaftClientTest.testDescribeQuorumWithObserver: an observer's row (caught up only once it
    reaches the leader's end), dropped after 300 s without a fetch; a replica id of -1 leaves no row."""
    leader = elected(voters=(1, 2))
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1100)  # high watermark 1
    assert only(leader.handle(fetch(3, 1, epoch=1, offset=0, last_epoch=0), 1200), "FetchResponse")["HighWatermark"] == 1
    d = describe(leader, 1300)
    assert d["HighWatermark"] == 1 and voter_row(d, 1) == (1, 1300, 1300) and voter_row(d, 2) == (1, 1100, 1100)
    assert d["Observers"] == [{"ReplicaId": 3, "LogEndOffset": 0, "LastFetchTimestamp": 1200, "LastCaughtUpTimestamp": -1}]
    leader.handle(fetch(3, 1, epoch=1, offset=1, last_epoch=1), 1400)
    assert describe(leader, 1500)["Observers"] == [
        {"ReplicaId": 3, "LogEndOffset": 1, "LastFetchTimestamp": 1400, "LastCaughtUpTimestamp": 1400}]
    leader.append("foo", 1600)
    leader.append("bar", 1600)
    d = describe(leader, 1600)
    assert voter_row(d, 1) == (3, 1600, 1600) and d["Observers"][0]["LastCaughtUpTimestamp"] == 1400
    now = 1600
    while now < 1400 + 300_000:  # the follower keeps the leader alive; the observer is silent
        leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), now)
        last_follower_fetch = now
        now += 3000 - 1
        leader.tick(now)
    d = describe(leader, now)
    assert leader.state == LEADER and d["Observers"] == [] and voter_row(d, 2) == (1, last_follower_fetch, 1100)
    leader.handle(fetch(-1, 1, epoch=1, offset=0, last_epoch=0), now)
    assert describe(leader, now)["Observers"] == []


def test_describe_quorum_non_monotonic_follower_fetch():
    """KafkaRaftClientTest.testDescribeQuorumNonMonotonicFollowerFetch: a follower that lost its disk
    fetches from an earlier offset; its row goes back, the high watermark and its caught-up time do not.
    (Kafka reports the start of the batch holding that offset; the node has no batches.)"""
    leader = elected(voters=(1, 2))
    leader.append("foo", 1100)
    leader.append("bar", 1100)
    leader.handle(fetch(2, 1, epoch=1, offset=3, last_epoch=1), 1100)
    assert voter_row(describe(leader, 1200), 2) == (3, 1100, 1100) and leader.high_watermark == 3
    assert only(leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1300), "FetchResponse")["HighWatermark"] == 3
    assert voter_row(describe(leader, 1400), 2) == (2, 1300, 1100) and leader.high_watermark == 3


# -------------------------------------------------------------------------------- Fetch (follower)
def test_follower_replication():
    """KafkaRaftClientTest.testFollowerReplication"""
    n = restored(1, (1, 2), epoch=5, leader=2)
    request = fetch_of(n.tick(0))
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b")), 1)
    assert (n.log.end_offset, n.log.last_epoch) == (2, 3)


def test_observer_replication():
    """KafkaRaftClientTest.testObserverReplication"""
    n = restored(1, (2,), epoch=5, leader=2)
    request = fetch_of(n.tick(0))
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b")), 1)
    assert (n.state, n.log.end_offset) == (FOLLOWER, 2)


def test_empty_record_set_in_fetch_response():
    """KafkaRaftClientTest.testEmptyRecordSetInFetchResponse: an empty answer sets the high watermark; new
    records do not move it past what the leader says; the next empty answer moves it."""
    n = restored(1, (1, 2), epoch=5, leader=2)
    n.handle(fetch_answer(fetch_of(n.tick(0)), leader=2, epoch=5, hw=0), 1)
    assert (n.log.end_offset, n.high_watermark) == (0, 0)
    request = fetch_of(n.tick(100))
    assert fetch_fields(request) == (5, 0, 0)
    out = n.handle(fetch_answer(request, leader=2, epoch=5, hw=0, records=entries(0, 5, "a", "b")), 101)
    assert (n.log.end_offset, n.high_watermark) == (2, 0)
    request = fetch_of(out)  # records came: the next fetch goes out at once
    assert fetch_fields(request) == (5, 2, 5)
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=2), 201)
    assert (n.log.end_offset, n.high_watermark) == (2, 2)


def test_handle_commit_callback_fires_after_follower_high_watermark_advances():
    """KafkaRaftClientTest.testHandleCommitCallbackFiresAfterFollowerHighWatermarkAdvances (the high
    watermark): 0 with the first batch, 3 with the next answer."""
    n = restored(1, (1, 2), epoch=5, leader=2)
    out = n.handle(fetch_answer(fetch_of(n.tick(0)), leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b", "c")), 1)
    assert n.high_watermark == 0
    request = fetch_of(out)
    assert fetch_fields(request) == (5, 3, 3)
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=3, records=entries(3, 3, "d", "e", "f")), 101)
    assert (n.log.end_offset, n.high_watermark) == (6, 3)


def test_follower_log_reconciliation():
    """KafkaRaftClientTest.testFollowerLogReconciliation: told that epoch 3 ends at 2, the follower
    truncates its three entries of epoch 3 to two and fetches from there."""
    n = restored(1, (1, 2), epoch=5, leader=2, epochs=(3, 3, 3))
    request = fetch_of(n.tick(0))
    assert fetch_fields(request) == (5, 3, 3)
    out = n.handle(fetch_answer(request, leader=2, epoch=5, hw=1, diverging=(3, 2)), 1)
    assert n.log.end_offset == 2 and fetch_fields(fetch_of(out)) == (5, 2, 3)


def test_voter_become_prospective_after_fetch_timeout():
    """KafkaRaftClientTest.testVoterBecomeProspectiveAfterFetchTimeout (Kafka 4: prospective; the node: a
    candidate of the next epoch)."""
    n = restored(1, (1, 2), epoch=5, leader=2, epochs=(3,))
    assert fetch_fields(fetch_of(n.tick(0))) == (5, 1, 3)
    n.tick(CFG.fetch_timeout_ms)
    assert (n.state, n.epoch) == (CANDIDATE, 6)


def test_fetch_response_ignored_after_becoming_prospective():
    """KafkaRaftClientTest.testFetchResponseIgnoredAfterBecomingProspective: the old leader's answer to a
    fetch sent before the fetch timeout is dropped (Kafka resets its connections on the transition)."""
    n = restored(1, (1, 2), epoch=5, leader=2)
    request = fetch_of(n.tick(0))
    n.tick(CFG.fetch_timeout_ms)
    assert n.state == CANDIDATE
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b")), CFG.fetch_timeout_ms + 1)
    assert (n.log.end_offset, n.state) == (0, CANDIDATE)


def test_fetch_response_ignored_after_becoming_follower_of_different_leader():
    """KafkaRaftClientTest.testFetchResponseIgnoredAfterBecomingFollowerOfDifferentLeader"""
    n = restored(1, (1, 2, 3), epoch=5, leader=2)
    request = fetch_of(n.tick(0))
    n.handle(begin(3, 1, epoch=6), 1)
    n.handle(fetch_answer(request, leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b")), 2)
    assert (n.log.end_offset, n.state, n.epoch, n.leader_id) == (0, FOLLOWER, 6, 3)


def test_follower_leader_rediscovery_after_broker_not_available_error():
    """KafkaRaftClientTest.testFollowerLeaderRediscoveryAfterBrokerNotAvailableError: a voter whose leader
    answers BROKER_NOT_AVAILABLE asks another voter at once (Kafka 4: the leader's connection backs off)."""
    n = restored(1, (1, 2, 3), epoch=5, leader=2)
    first = fetch_of(n.tick(0))
    assert (first["destination"], fetch_fields(first)) == (2, (5, 0, 0))
    out = n.handle(fetch_answer(first, leader=-1, epoch=5, error=BROKER_NOT_AVAILABLE), 1)
    second = fetch_of(out)
    assert (second["destination"], fetch_fields(second)) == (3, (5, 0, 0)) and n.state == FOLLOWER


def test_follower_leader_rediscovery_after_request_timeout():
    """KafkaRaftClientTest.testFollowerLeaderRediscoveryAfterRequestTimeout: a voter's fetch left
    unanswered for the request timeout is sent to another voter."""
    cfg = dataclasses.replace(CFG, fetch_timeout_ms=10_000)
    n = restored(1, (1, 2, 3), epoch=5, leader=2, cfg=cfg)
    assert fetch_of(n.tick(0))["destination"] == 2
    second = fetch_of(n.tick(cfg.request_timeout_ms))
    assert (second["destination"], fetch_fields(second)) == (3, (5, 0, 0)) and n.state == FOLLOWER


# -------------------------------------------------------------------------------------- observers
def test_follower_as_observer_does_not_become_prospective_after_fetch_timeout():
    """KafkaRaftClientTest.testFollowerAsObserverDoesNotBecomeProspectiveAfterFetchTimeout: an observer
    stays a follower after the fetch timeout (Kafka 4's pollFollowerAsObserver) and still votes."""
    n = restored(1, (2,), epoch=5, leader=2, epochs=(3,))
    assert fetch_fields(fetch_of(n.tick(0))) == (5, 1, 3)
    out = n.tick(CFG.fetch_timeout_ms)
    assert n.state == FOLLOWER and fetch_fields(fetch_of(out)) == (5, 1, 3)
    assert not any(e["event"] == "election_started" for e in n.events)
    r = only(n.handle(vote(2, 1, epoch=6, last_epoch=5, last_offset=1), CFG.fetch_timeout_ms + 1), "VoteResponse")
    assert r["VoteGranted"] is True and (n.state, n.epoch) == (VOTED, 6)


def test_unattached_as_observer_does_not_become_prospective_after_election_timeout():
    """KafkaRaftClientTest.testUnattachedAsObserverDoesNotBecomeProspectiveAfterElectionTimeout: an
    unattached observer keeps fetching, never asks for votes, and may vote."""
    n = restored(1, (2,), epoch=5)
    assert fetch_fields(fetch_of(n.tick(0))) == (5, 0, 0)
    out = n.tick(2 * CFG.election_timeout_ms)
    assert n.state == UNATTACHED and fetch_fields(fetch_of(out)) == (5, 0, 0)
    assert destinations(out, "VoteRequest") == []
    out = n.handle(vote(2, 1, epoch=6, last_epoch=5, last_offset=0), 2001)
    assert only(out, "VoteResponse")["VoteGranted"] and fetch_fields(fetch_of(out)) == (6, 0, 0)
    out = n.tick(2001 + CFG.request_timeout_ms)
    assert n.state == VOTED and fetch_fields(fetch_of(out)) == (6, 0, 0) and destinations(out, "VoteRequest") == []


def test_unattached_as_voter_can_become_follower_after_finding_leader():
    """KafkaRaftClientTest.testUnattachedAsVoterCanBecomeFollowerAfterFindingLeader (Kafka 4): an
    unattached voter fetches from another voter; an answer naming the leader makes it follow."""
    n = restored(1, (1, 2, 3), epoch=5)
    request = fetch_of(n.tick(0))
    assert fetch_fields(request) == (5, 0, 0) and (n.state, n.is_voter) == (UNATTACHED, True)
    error = NOT_LEADER if request["destination"] == 2 else 0
    n.handle(fetch_answer(request, leader=3, epoch=5, error=error, hw=0), 1)
    assert (n.state, n.leader_id) == (FOLLOWER, 3)


def test_observer_quorum_discovery_failure():
    """KafkaRaftClientTest.testObserverQuorumDiscoveryFailure: an error that names no leader is followed by
    another discovery fetch after the retry backoff; FENCED_LEADER_EPOCH naming the leader ends it."""
    n = restored(1, (2,), epoch=0)
    first = fetch_of(n.tick(0))
    n.handle(fetch_answer(first, leader=-1, epoch=-1, error=UNKNOWN_SERVER_ERROR), 5)
    assert n.state == UNATTACHED and n.next_deadline() == 5 + CFG.retry_backoff_ms
    second = fetch_of(n.tick(5 + CFG.retry_backoff_ms))
    assert (second["destination"], fetch_fields(second)) == (2, (0, 0, 0))
    n.handle(fetch_answer(second, leader=2, epoch=5, error=FENCED), 30)
    assert (n.state, n.epoch, n.leader_id) == (FOLLOWER, 5, 2)


def test_observer_send_discovery_fetch_after_fetch_timeout():
    """KafkaRaftClientTest.testObserverSendDiscoveryFetchAfterFetchTimeout: without an answer for the fetch
    timeout, an observer following 2 asks another voter, in its epoch."""
    n = fresh(1, (2, 3))
    discovered(n, 2, 5)
    request = fetch_of(n.tick(1 + CFG.fetch_timeout_ms))
    assert (request["destination"], fetch_fields(request)) == (3, (5, 0, 0)) and n.state == FOLLOWER


def test_observer_handle_retry_fetch_to_bootstrap_server():
    """KafkaRaftClientTest.testObserverHandleRetryFetchToBootstrapServer: the leader's late answer to the
    fetch that timed out is dropped, and nothing fails when the other voter answers too. (Kafka's bootstrap
    server is an address that answered as the leader and its records are taken; the node's bootstrap
    servers are the voters, and only the leader's records are taken.)"""
    n = fresh(1, (2, 3))
    to_leader = discovered(n, 2, 5)
    assert to_leader["destination"] == 2
    retry = fetch_of(n.tick(1 + CFG.request_timeout_ms))
    assert (retry["destination"], fetch_fields(retry)) == (3, (5, 0, 0))
    n.handle(fetch_answer(to_leader, leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b")), 2002)
    assert n.log.end_offset == 0
    n.handle(fetch_answer(retry, leader=2, epoch=5, hw=0, records=entries(0, 3, "a", "b")), 2003)
    assert (n.state, n.leader_id, n.log.end_offset) == (FOLLOWER, 2, 0)


def test_observer_handle_retry_fetch_to_leader():
    """KafkaRaftClientTest.testObserverHandleRetryFetchToLeader: while the retry to another voter awaits
    its answer, no other fetch is sent."""
    n = fresh(1, (2, 3))
    discovered(n, 2, 5)
    assert fetch_of(n.tick(1 + CFG.request_timeout_ms))["destination"] == 3
    assert n.tick(1 + CFG.request_timeout_ms) == []


def test_observer_leader_rediscovery_after_broker_not_available_error():
    """KafkaRaftClientTest.testObserverLeaderRediscoveryAfterBrokerNotAvailableError: the observer asks
    the other voter at once; its NOT_LEADER_OR_FOLLOWER answer naming the same leader keeps it following."""
    obs = fresh(0, (1, 2))
    to_leader = discovered(obs, 1, 5)
    other = fetch_of(obs.handle(fetch_answer(to_leader, leader=-1, epoch=5, error=BROKER_NOT_AVAILABLE), 2))
    assert (other["destination"], fetch_fields(other)) == (2, (5, 0, 0))
    obs.handle(fetch_answer(other, leader=1, epoch=5, error=NOT_LEADER), 3)
    assert (obs.state, obs.leader_id, obs.epoch) == (FOLLOWER, 1, 5)


def test_observer_leader_rediscovery_after_request_timeout():
    """KafkaRaftClientTest.testObserverLeaderRediscoveryAfterRequestTimeout: a fetch to the leader left
    unanswered for the request timeout is retried against another voter, whose answer names the leader."""
    obs = fresh(0, (1, 2))
    discovered(obs, 1, 5)
    other = fetch_of(obs.tick(1 + CFG.request_timeout_ms))
    assert (other["destination"], fetch_fields(other)) == (2, (5, 0, 0))
    obs.handle(fetch_answer(other, leader=1, epoch=5, error=FENCED), 2002)
    assert (obs.state, obs.leader_id, obs.epoch) == (FOLLOWER, 1, 5)


# ----------------------------------------------------------------------------- Kafka 4 vs 3.7 (KIP-853)
def test_vote_request_from_a_candidate_not_in_our_voter_set():
    """KafkaRaftClient.validateVoterOnlyRequest (Kafka 4, KIP-853): no INCONSISTENT_VOTER_SET; the vote is
    decided on the log as for any candidate."""
    n = node()
    r = only(n.handle(vote(9, 1, epoch=1), 10), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"]) == (0, True)


def test_begin_quorum_epoch_from_a_leader_not_in_our_voter_set():
    """KafkaRaftClient.handleBeginQuorumEpochRequest (Kafka 4): accepted, it follows the new leader."""
    n = node()
    r = only(n.handle(begin(9, 1, epoch=3), 10), "BeginQuorumEpochResponse")
    assert r["ErrorCode"] == 0 and (n.state, n.leader_id, n.epoch) == (FOLLOWER, 9, 3)

