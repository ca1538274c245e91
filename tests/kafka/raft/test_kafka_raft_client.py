"""Kafka's ``KafkaRaftClientTest`` (raft module, Kafka 4.x) translated to ``RaftNode``.

Kafka's ``RaftClientTestContext`` starts a client from a quorum-state store (``withElectedLeader``,
``withVotedCandidate``) and polls it; here ``RaftNode.restore`` starts a node from the same durable state
and ``tick``/``handle`` are the polls. Kafka's cases run with and without KIP-853 RPCs; the node speaks
the Kafka 4 (KIP-853) behaviour only, so each case is run once.
"""

from __future__ import annotations

from raft_harness import CFG, begin, elected, fetch, granted, node, only, vote

from kraftlake.raft.config import RaftConfig
from kraftlake.raft.log import RaftLog
from kraftlake.raft.node import CANDIDATE, FOLLOWER, LEADER, RESIGNED, UNATTACHED, VOTED, RaftNode, message

BROKER_NOT_AVAILABLE = 8


def restored(node_id: int, voters: tuple[int, ...], *, epoch: int, leader: int = -1, voted: int | None = None,
             cfg: RaftConfig = CFG, now: int = 0) -> RaftNode:
    """A node started from its quorum-state file (Kafka: ``withElectedLeader`` / ``withVotedCandidate``)."""
    return RaftNode.restore(node_id, voters, cfg, RaftLog(),
                            {"epoch": epoch, "leader_id": leader, "voted_for": voted}, now)


def types(out: list[dict], type_: str) -> list[int]:
    return sorted(m["destination"] for m in out if m["type"] == type_)


def test_initialize_single_member_quorum():
    """KafkaRaftClientTest.testInitializeSingleMemberQuorum"""
    n = RaftNode(1, (1,), CFG)
    n.tick(0)
    assert (n.state, n.epoch, n.leader_id) == (LEADER, 1, 1)


def test_initialize_as_leader_from_state_store_single_member_quorum():
    """KafkaRaftClientTest.testInitializeAsLeaderFromStateStoreSingleMemberQuorum: a sole voter that led
    epoch 2 leads again at once, in epoch 3, its LeaderChangeMessage at offset 0."""
    n = restored(1, (1,), epoch=2, leader=1)
    n.tick(0)
    assert (n.state, n.epoch, n.log.end_offset, n.log.last_epoch) == (LEADER, 3, 1, 3)


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
    assert r["VoteGranted"] is True and (n.state, n.epoch, n.voted_for) == (VOTED, 3, 2)


def test_grant_votes_from_higher_epoch_after_resigning_candidacy():
    """KafkaRaftClientTest.testGrantVotesFromHigherEpochAfterResigningCandidacy"""
    n = restored(1, (1, 2), epoch=2, voted=1)
    r = only(n.handle(vote(2, 1, epoch=3), 1), "VoteResponse")
    assert r["VoteGranted"] is True and (n.state, n.epoch, n.voted_for) == (VOTED, 3, 2)


def test_initialize_as_resigned_and_become_candidate():
    """KafkaRaftClientTest.testInitializeAsResignedAndBecomeCandidate"""
    n = restored(1, (1, 2), epoch=2, leader=1)
    assert n.state == RESIGNED
    n.tick(1000)  # the election timeout (1000 ms, jitter 0)
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
    out = n.tick(0)
    assert types(out, "EndQuorumEpochRequest") == [2]
    n.handle(message("EndQuorumEpochResponse", 2, 1, ErrorCode=0, LeaderId=1, LeaderEpoch=2), 1)
    out = n.tick(1000)
    assert (n.state, n.epoch) == (CANDIDATE, 3) and types(out, "VoteRequest") == [2]


def test_end_quorum_epoch_retries_while_resigned():
    """KafkaRaftClientTest.testEndQuorumEpochRetriesWhileResigned: election timeout 10 s, request
    timeout 5 s; after one voter answers, only the other is asked again."""
    cfg = RaftConfig(cluster_id="kraft", election_timeout_ms=10_000, election_jitter_max_ms=0,
                     request_timeout_ms=5000, fetch_timeout_ms=20_000)
    n = restored(0, (0, 1, 2), epoch=19, leader=0, cfg=cfg)
    out = n.tick(0)
    assert types(out, "EndQuorumEpochRequest") == [1, 2]
    assert n.handle(message("EndQuorumEpochResponse", 1, 0, ErrorCode=0, LeaderId=0, LeaderEpoch=19), 1) == []
    out = n.tick(6000)
    assert types(out, "EndQuorumEpochRequest") == [2] and n.state == RESIGNED


def test_begin_quorum_epoch_heartbeat():
    """KafkaRaftClientTest.testBeginQuorumEpochHeartbeat: BeginQuorumEpoch to every voter each
    fetch.timeout / 2 (Kafka 4), nothing in between."""
    leader = elected()  # at 1000, fetch timeout 2000
    assert leader.tick(2000 - 1) == []
    assert types(leader.tick(2000), "BeginQuorumEpochRequest") == [2, 3]
    assert leader.tick(2500) == []
    assert types(leader.tick(3000), "BeginQuorumEpochRequest") == [2, 3]


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


def test_election_timeout_after_user_initiated_resign():
    """KafkaRaftClientTest.testElectionTimeoutAfterUserInitiatedResign: EndQuorumEpoch is not sent
    again once answered, a fetch while resigned is NOT_LEADER_OR_FOLLOWER, and the election timeout
    makes it a candidate of the next epoch."""
    leader = elected(voters=(1, 2))
    out = leader.resign(1100)
    assert types(out, "EndQuorumEpochRequest") == [2]
    leader.handle(message("EndQuorumEpochResponse", 2, 1, ErrorCode=0, LeaderId=1, LeaderEpoch=1), 1101)
    assert leader.tick(1101 + 20) == []
    r = only(leader.handle(fetch(9, 1, epoch=1, offset=0, last_epoch=0), 1200), "FetchResponse")
    assert (r["ErrorCode"], r["CurrentLeader"]) == (6, {"LeaderId": 1, "LeaderEpoch": 1})
    leader.tick(1100 + 2000)
    assert (leader.state, leader.epoch, leader.leader_id) == (CANDIDATE, 2, -1)


def test_initialize_as_candidate_from_state_store():
    """KafkaRaftClientTest.testInitializeAsCandidateFromStateStore: the candidate resumes its election
    (vote requests to the others) and wins it with one more vote."""
    n = restored(1, (1, 2, 3), epoch=2, voted=1)
    assert (n.state, n.epoch) == (CANDIDATE, 2)
    out = n.tick(0)
    assert types(out, "VoteRequest") == [2, 3] and all(m["data"]["CandidateEpoch"] == 2 for m in out)
    n.handle(granted(2, 1, 2), 1)
    assert (n.state, n.epoch) == (LEADER, 2)


def test_observer_leader_rediscovery_after_broker_not_available_error():
    """KafkaRaftClientTest.testObserverLeaderRediscoveryAfterBrokerNotAvailableError: the observer asks
    the other voter at once, the leader's connection backing off."""
    obs = RaftNode(0, (1, 2), CFG)
    out = obs.tick(0)
    assert only(out, "FetchRequest")["CurrentLeaderEpoch"] == 0
    first = [m for m in out if m["type"] == "FetchRequest"][0]["destination"]
    out = obs.handle({"type": "FetchResponse", "source": first, "destination": 0, "correlation_id": obs._fetch_cid,
                      "data": {"ErrorCode": 74, "HighWatermark": -1, "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
                               "CurrentLeader": {"LeaderId": 1, "LeaderEpoch": 5}, "Records": []}}, 1)
    assert (obs.state, obs.epoch, obs.leader_id) == (FOLLOWER, 5, 1)
    assert types(out, "FetchRequest") == [1]  # discovered: it fetches from the leader
    out = obs.handle({"type": "FetchResponse", "source": 1, "destination": 0, "correlation_id": obs._fetch_cid,
                      "data": {"ErrorCode": BROKER_NOT_AVAILABLE, "HighWatermark": -1,
                               "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
                               "CurrentLeader": {"LeaderId": -1, "LeaderEpoch": 5}, "Records": []}}, 2)
    assert types(out, "FetchRequest") == [2] and obs.state == FOLLOWER


def test_observer_leader_rediscovery_after_request_timeout():
    """KafkaRaftClientTest.testObserverLeaderRediscoveryAfterRequestTimeout: a fetch to the leader left
    unanswered for the request timeout is retried against another voter."""
    obs = RaftNode(0, (1, 2), CFG)
    obs.tick(0)
    out = obs.handle(message("BeginQuorumEpochRequest", 1, 0, ClusterId="kraft", VoterId=0, LeaderId=1,
                             LeaderEpoch=5), 1)
    assert (obs.state, obs.leader_id) == (FOLLOWER, 1) and types(out, "FetchRequest") == [1]
    out = obs.tick(1 + 2000)  # request timeout (the default, 2000 ms)
    assert types(out, "FetchRequest") == [2] and obs.state == FOLLOWER


def test_observer_stays_a_follower_after_the_fetch_timeout():
    """KafkaRaftClient.pollFollowerAsObserver (Kafka 4): after the fetch timeout an observer does not
    become unattached; it goes on following and asks any voter."""
    obs = RaftNode(0, (1, 2), CFG)
    obs.tick(0)
    obs.handle(message("BeginQuorumEpochRequest", 1, 0, ClusterId="kraft", VoterId=0, LeaderId=1, LeaderEpoch=5), 1)
    obs.tick(1)
    out = obs.tick(1 + 2000)
    assert obs.state == FOLLOWER and len(types(out, "FetchRequest")) == 1
    assert not any(e["event"] == "election_started" for e in obs.events)


def test_observer_retries_discovery_after_the_backoff():
    """KafkaRaftClientTest's observer discovery: a voter that knows no leader answers with none; the
    observer asks again after the retry backoff, not the request timeout."""
    obs = RaftNode(0, (1, 2), CFG)
    out = obs.tick(0)
    target = [m for m in out if m["type"] == "FetchRequest"][0]["destination"]
    obs.handle({"type": "FetchResponse", "source": target, "destination": 0, "correlation_id": obs._fetch_cid,
                "data": {"ErrorCode": 6, "HighWatermark": -1, "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
                         "CurrentLeader": {"LeaderId": -1, "LeaderEpoch": 0}, "Records": []}}, 5)
    assert obs.state == UNATTACHED and obs.next_deadline() == 5 + CFG.retry_backoff_ms


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
