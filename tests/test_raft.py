"""Scenario tests of the per-node Raft state machine (KIP-595).

Every expected value here is worked out by hand from KIP-595 and Kafka's raft classes (named at each
test), never computed by the code under test. Jitter is 0 so timeouts land on exact event times.
"""

from __future__ import annotations

import pytest

from kraftlake.raft.node import CANDIDATE, FOLLOWER, LEADER, RESIGNED, UNATTACHED, VOTED, RaftNode, message
from kraftlake.raft.config import RaftConfig

from raft_harness import (CFG, CLUSTER, FENCED, INVALID, NONE, NOT_LEADER, UNKNOWN_EPOCH, begin, elected, fetch,
    granted, log_of, node, only, vote)


# ----------------------------------------------------------------------------------- vote granting
def test_one_vote_per_epoch():
    n = node()
    r = only(n.handle(vote(2, 1, epoch=1), 10), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"]) == (NONE, True, 1)
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 1, 2)
    # a second candidate in the same epoch is refused; the first one asking again is granted again
    assert only(n.handle(vote(3, 1, epoch=1), 20), "VoteResponse")["VoteGranted"] is False
    assert only(n.handle(vote(2, 1, epoch=1), 30), "VoteResponse")["VoteGranted"] is True
    assert n.voted_for == 2
    # a higher epoch is a new election: unattached there, so the vote is free again
    assert only(n.handle(vote(3, 1, epoch=2), 40), "VoteResponse")["VoteGranted"] is True
    assert (n.state, n.epoch, n.voted_for) == (VOTED, 2, 3)


def test_vote_needs_a_log_at_least_as_up_to_date_last_epoch_first():
    n = node(epochs=(1, 1, 2), epoch=2)  # last epoch 2, end offset 3
    # a longer log of an older epoch loses: the last epoch is compared first
    r = only(n.handle(vote(2, 1, epoch=3, last_epoch=1, last_offset=9), 10), "VoteResponse")
    assert r["VoteGranted"] is False
    assert (n.state, n.epoch, n.voted_for) == (UNATTACHED, 3, None)  # but the epoch moved on
    # same last epoch, shorter log: refused
    assert only(n.handle(vote(3, 1, epoch=3, last_epoch=2, last_offset=2), 20), "VoteResponse")["VoteGranted"] is False
    # same last epoch, same end offset: granted
    assert only(n.handle(vote(3, 1, epoch=3, last_epoch=2, last_offset=3), 30), "VoteResponse")["VoteGranted"] is True
    assert n.voted_for == 3


def test_vote_validation_errors():
    n = node(epoch=5)
    r = only(n.handle(vote(2, 1, epoch=4, last_epoch=3, last_offset=0), 10), "VoteResponse")
    assert (r["ErrorCode"], r["VoteGranted"], r["LeaderEpoch"]) == (FENCED, False, 5)
    assert only(n.handle(vote(2, 1, epoch=6, last_epoch=6), 10), "VoteResponse")["ErrorCode"] == INVALID
    assert only(n.handle(vote(2, 1, epoch=6, cluster="other"), 10), "VoteResponse")["ErrorCode"] == CLUSTER
    assert only(n.handle(vote(-1, 1, epoch=6), 10), "VoteResponse")["ErrorCode"] == INVALID
    assert (n.state, n.epoch) == (UNATTACHED, 5)
    # Kafka 4 (KIP-853) answers a candidate it does not know as a voter: its voter set may be newer
    assert only(n.handle(vote(9, 1, epoch=6), 10), "VoteResponse")["ErrorCode"] == NONE


def test_candidate_and_follower_do_not_vote_for_others_in_their_epoch():
    c = node()
    c.tick(1000)
    assert (c.state, c.epoch, c.voted_for) == (CANDIDATE, 1, 1)
    assert only(c.handle(vote(2, 1, epoch=1), 1001), "VoteResponse")["VoteGranted"] is False
    f = node(node_id=2)
    f.handle(begin(1, 2, epoch=1), 5)
    assert (f.state, f.leader_id) == (FOLLOWER, 1)
    r = only(f.handle(vote(3, 2, epoch=1), 6), "VoteResponse")
    assert (r["VoteGranted"], r["LeaderId"], r["LeaderEpoch"]) == (False, 1, 1)


# ----------------------------------------------------------------------------------------- elections
def test_election_timeout_vote_requests_and_begin_quorum_epoch():
    n = node(epochs=(1, 1), epoch=1)
    assert n.tick(999) == [] and n.state == UNATTACHED  # quorum.election.timeout.ms = 1000, no jitter
    out = n.tick(1000)
    assert (n.state, n.epoch) == (CANDIDATE, 2)
    reqs = sorted((m["destination"], m["data"]["CandidateEpoch"], m["data"]["CandidateId"], m["data"]["LastOffsetEpoch"],
                   m["data"]["LastOffset"]) for m in out if m["type"] == "VoteRequest")
    assert reqs == [(2, 2, 1, 1, 2), (3, 2, 1, 1, 2)]
    out = n.handle(granted(3, 1, 2), 1005)
    assert (n.state, n.leader_id) == (LEADER, 1)
    assert sorted(m["destination"] for m in out if m["type"] == "BeginQuorumEpochRequest") == [2, 3]
    # the new leader's first entry is its LeaderChangeMessage, at the old end offset, in its epoch
    assert n.log.end_offset == 3 and n.log.entries[2].epoch == 2
    lc = n.log.entries[2].value
    assert lc["type"] == "LeaderChangeMessage" and lc["data"]["LeaderId"] == 1
    assert [v["VoterId"] for v in lc["data"]["GrantingVoters"]] == [1, 3]
    assert [v["VoterId"] for v in lc["data"]["Voters"]] == [1, 2, 3]


def test_begin_quorum_epoch_makes_a_follower_that_fetches():
    f = node(node_id=2, epochs=(1, 1, 1), epoch=1)
    out = f.handle(begin(1, 2, epoch=3), 50)
    assert (f.state, f.epoch, f.leader_id) == (FOLLOWER, 3, 1)
    assert only(out, "BeginQuorumEpochResponse")["ErrorCode"] == NONE
    req = only(out, "FetchRequest")
    assert (req["ReplicaId"], req["CurrentLeaderEpoch"], req["FetchOffset"], req["LastFetchedEpoch"],
            req["ClusterId"]) == (2, 3, 3, 1, "kraft")
    # a stale leader announcing an older epoch is fenced
    r = only(f.handle(begin(3, 2, epoch=2), 60), "BeginQuorumEpochResponse")
    assert (r["ErrorCode"], r["LeaderId"], r["LeaderEpoch"]) == (FENCED, 1, 3)


def test_split_vote_then_a_new_epoch_after_backoff():
    cfg = RaftConfig(cluster_id="kraft", election_timeout_ms=1000, election_jitter_max_ms=0,
                     election_backoff_max_ms=0, fetch_timeout_ms=2000)
    voters = (1, 2, 3, 4)  # majority 3
    n1, n2 = (node(i, voters, cfg=cfg) for i in (1, 2))
    n3, n4 = (node(i, voters, cfg=cfg, now=500) for i in (3, 4))  # their election timers run to 1500
    out1, out2 = n1.tick(1000), n2.tick(1000)
    assert n1.state == n2.state == CANDIDATE and n1.epoch == n2.epoch == 1
    to = {(m["source"], m["destination"]): m for m in out1 + out2}
    r31 = n3.handle(to[(1, 3)], 1001)[0]
    r32 = n3.handle(to[(2, 3)], 1001)[0]
    r42 = n4.handle(to[(2, 4)], 1001)[0]
    r41 = n4.handle(to[(1, 4)], 1001)[0]
    r21 = n2.handle(to[(1, 2)], 1001)[0]
    r12 = n1.handle(to[(2, 1)], 1001)[0]
    assert [r["data"]["VoteGranted"] for r in (r31, r32, r42, r41, r21, r12)] == [True, False, True, False, False,
                                                                                   False]
    for r in (r31, r41, r21):
        n1.handle(r, 1002)
    for r in (r32, r42, r12):
        n2.handle(r, 1002)
    # 2 votes of 4 each, and the other two rejected: no majority is possible any more, so each gives
    # up at once (EpochElection.isVoteRejected) and, the backoff max being 0, stands in epoch 2
    assert (n1.state, n1.epoch) == (n2.state, n2.epoch) == (CANDIDATE, 2)


def test_candidate_asks_again_the_voters_that_did_not_answer():
    cfg = RaftConfig(cluster_id="kraft", election_timeout_ms=1000, election_jitter_max_ms=0, request_timeout_ms=300)
    c = node(voters=(1, 2, 3, 4, 5), cfg=cfg)
    c.tick(1000)  # candidate of epoch 1, election timeout at 2000
    c.handle(granted(2, 1, 1), 1010)
    c.handle(granted(3, 1, 1, yes=False), 1020)
    assert c.tick(1299) == []
    out = c.tick(1300)
    assert sorted(m["destination"] for m in out if m["type"] == "VoteRequest") == [4, 5]
    assert all(m["data"]["CandidateEpoch"] == 1 for m in out)


def test_candidate_learns_the_winner_from_a_vote_response():
    c = node()
    c.tick(1000)
    c.handle(message("VoteResponse", 2, 1, ErrorCode=0, VoteGranted=False, LeaderId=3, LeaderEpoch=1), 1001)
    assert (c.state, c.epoch, c.leader_id) == (FOLLOWER, 1, 3)


def test_single_voter_elects_itself_and_commits_alone():
    n = node(voters=(1,))
    n.tick(1000)
    assert (n.state, n.epoch, n.high_watermark) == (LEADER, 1, 1)
    assert n.append("x", 1001) == 1 and n.high_watermark == 2


# ---------------------------------------------------------------------------------- fetch validation
def test_fetch_validation_order():
    leader = elected(epochs=(1, 1), epoch=2)  # leader of epoch 3
    # a wrong cluster id wins over a stale epoch
    r = only(leader.handle(fetch(2, 1, epoch=1, offset=0, last_epoch=0, cluster="other"), 1010), "FetchResponse")
    assert r["ErrorCode"] == CLUSTER
    r = only(leader.handle(fetch(2, 1, epoch=2, offset=0, last_epoch=0), 1010), "FetchResponse")
    assert (r["ErrorCode"], r["CurrentLeader"]) == (FENCED, {"LeaderId": 1, "LeaderEpoch": 3})
    assert only(leader.handle(fetch(2, 1, epoch=4, offset=0, last_epoch=0), 1010), "FetchResponse")["ErrorCode"] \
        == UNKNOWN_EPOCH
    assert only(leader.handle(fetch(2, 1, epoch=3, offset=0, last_epoch=4), 1010), "FetchResponse")["ErrorCode"] \
        == INVALID
    # a malformed fetch is INVALID_REQUEST before its epoch is looked at (handleFetchRequest)
    assert only(leader.handle(fetch(2, 1, epoch=2, offset=0, last_epoch=3), 1010), "FetchResponse")["ErrorCode"] \
        == INVALID
    assert only(leader.handle(fetch(2, 1, epoch=2, offset=-1, last_epoch=0), 1010), "FetchResponse")["ErrorCode"] \
        == INVALID
    f = node(node_id=2)
    f.handle(begin(1, 2, epoch=3), 5)
    assert only(f.handle(fetch(3, 2, epoch=3, offset=0, last_epoch=0), 6), "FetchResponse")["ErrorCode"] == NOT_LEADER


def test_diverging_epoch_cases_of_the_leader_log():
    leader_log = log_of(1, 1, 2, 2, 3)  # epoch 1: [0,2), epoch 2: [2,4), epoch 3: [4,5)
    assert leader_log.validate_offset_and_epoch(0, 0) == (True, 0, 0)
    assert leader_log.validate_offset_and_epoch(3, 2) == (True, 2, 3)
    assert leader_log.validate_offset_and_epoch(6, 1) == (False, 1, 2)  # epoch 1 ended at 2
    assert leader_log.validate_offset_and_epoch(7, 2) == (False, 2, 4)  # epoch 2 ended at 4
    other = log_of(1, 1, 3, 3, 4)  # no epoch 2 here: the largest epoch below it is 1, ending at 2
    assert other.validate_offset_and_epoch(5, 2) == (False, 1, 2)
    follower = log_of(1, 1, 2, 2, 2)
    assert follower.truncate_to_end_offset(1, 2) == 2 and follower.end_offset == 2
    follower = log_of(1, 1, 2, 2, 2, 2, 2)
    assert follower.truncate_to_end_offset(2, 4) == 4 and follower.end_offset == 4
    follower = log_of(1, 2, 2)  # the leader's epoch 3 is unknown here: our epoch <= 3 is 2, ending at 3
    assert follower.truncate_to_end_offset(3, 9) == 3


def test_divergence_and_truncation_round_trip():
    leader = elected(epochs=(1, 1, 2, 2), epoch=2)  # leader of epoch 3; LeaderChangeMessage at offset 4
    f = node(node_id=2, epochs=(1, 1, 1, 1, 1, 1), epoch=2)  # uncommitted epoch-1 entries at 2..5
    out = f.handle(begin(1, 2, epoch=3), 1001)
    req = only(out, "FetchRequest")
    assert (req["FetchOffset"], req["LastFetchedEpoch"]) == (6, 1)
    resp = only(leader.handle([m for m in out if m["type"] == "FetchRequest"][0], 1002), "FetchResponse")
    assert resp["ErrorCode"] == NONE and resp["DivergingEpoch"] == {"Epoch": 1, "EndOffset": 2}
    assert resp["Records"] == []
    out = f.handle({"type": "FetchResponse", "source": 1, "destination": 2, "data": resp}, 1003)
    assert [e.epoch for e in f.log.entries] == [1, 1]
    assert [e["event"] for e in f.events if e["event"] == "truncation"] == ["truncation"]
    req = only(out, "FetchRequest")
    assert (req["FetchOffset"], req["LastFetchedEpoch"]) == (2, 1)
    fetch_msg = [m for m in out if m["type"] == "FetchRequest"][0]
    resp = only(leader.handle(fetch_msg, 1004), "FetchResponse")
    assert resp["DivergingEpoch"]["Epoch"] == -1
    assert [(r["Offset"], r["Epoch"]) for r in resp["Records"]] == [(2, 2), (3, 2), (4, 3)]
    f.handle({"type": "FetchResponse", "source": 1, "destination": 2, "data": resp}, 1005)
    assert [e.epoch for e in f.log.entries] == [1, 1, 2, 2, 3]
    assert f.log.entries == leader.log.entries


def test_a_stale_diverging_response_does_not_truncate_a_caught_up_follower():
    """The answer to a fetch abandoned after the request timeout is not the one in flight: dropped, even when
    it asks for a truncation the follower has since done and gone past (KafkaRaftClient's RequestManager)."""
    cfg = RaftConfig(cluster_id="kraft", election_timeout_ms=1000, election_jitter_max_ms=0, request_timeout_ms=500)
    leader = elected(epochs=(1, 1), epoch=1, cfg=cfg)  # epoch 2: log epochs [1, 1, 2]
    f = node(node_id=2, epochs=(1, 1, 1, 1), epoch=1, cfg=cfg)
    third = node(node_id=3, epochs=(1, 1), epoch=1, cfg=cfg)
    third.handle(begin(1, 3, epoch=2), 1000)

    def fetch_of(out):
        return [m for m in out if m["type"] == "FetchRequest"][0]

    fetch1 = fetch_of(f.handle(begin(1, 2, epoch=2), 1001))
    fetch2 = fetch_of(f.tick(1501))  # fetch1 timed out (request timeout 500): voter 3 is asked for a leader
    assert (fetch1["destination"], fetch2["destination"]) == (1, 3)
    resp1 = leader.handle(fetch1, 1502)[0]
    assert resp1["data"]["DivergingEpoch"] == {"Epoch": 1, "EndOffset": 2}
    f.handle(third.handle(fetch2, 1502)[0], 1503)  # 3 follows 1 too: back to the leader after the backoff
    fetch3 = fetch_of(f.tick(1503 + cfg.retry_backoff_ms))
    assert (fetch3["destination"], fetch3["data"]["FetchOffset"]) == (1, 4)
    fetch4 = fetch_of(f.handle(leader.handle(fetch3, 1530)[0], 1531))  # diverging: truncated to 2
    fetch5 = fetch_of(f.handle(leader.handle(fetch4, 1532)[0], 1533))  # got offset 2 (epoch 2)
    f.handle(leader.handle(fetch5, 1534)[0], 1535)  # leader and 2 hold offset 2 of epoch 2: hw 3
    assert ([e.epoch for e in f.log.entries], f.high_watermark) == ([1, 1, 2], 3)
    f.handle(resp1, 1536)  # the answer to the abandoned fetch arrives last: ignored
    assert ([e.epoch for e in f.log.entries], f.high_watermark, f.state) == ([1, 1, 2], 3, FOLLOWER)


# ------------------------------------------------------------------------------------ high watermark
def test_high_watermark_needs_an_entry_of_the_leader_epoch_on_a_majority():
    leader = elected(epochs=(1, 1, 1), epoch=1)  # epoch 2, epoch start offset 3, LeaderChange at 3
    assert leader.high_watermark == 0
    # follower 2 has the old epoch's entries 0..2 only: a majority holds offset 3, but all of epoch 1
    r = only(leader.handle(fetch(2, 1, epoch=2, offset=3, last_epoch=1), 1010), "FetchResponse")
    assert leader.high_watermark == 0 and r["HighWatermark"] == -1
    # now follower 2 has the LeaderChangeMessage too: offset 4 is on 2 of 3 voters
    r = only(leader.handle(fetch(2, 1, epoch=2, offset=4, last_epoch=2), 1020), "FetchResponse")
    assert leader.high_watermark == 4 and r["HighWatermark"] == 4
    leader.append("a", 1030)
    leader.append("b", 1030)  # end offset 6
    assert leader.high_watermark == 4  # only the leader has 4 and 5
    leader.handle(fetch(3, 1, epoch=2, offset=6, last_epoch=2), 1040)
    assert leader.high_watermark == 6  # voters at 6, 4, 6
    # a voter's fetch offset going backwards never moves the high watermark back
    leader.handle(fetch(3, 1, epoch=2, offset=5, last_epoch=2), 1050)
    assert leader.high_watermark == 6


def test_high_watermark_is_a_majority_of_voters_not_of_who_fetched():
    leader = elected(voters=(1, 2, 3, 4, 5))  # epoch 1, LeaderChange at offset 0
    leader.append("a", 1001)  # end 2
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1002)
    assert leader.high_watermark == 0  # leader and 2 of 5 voters
    leader.handle(fetch(9, 1, epoch=1, offset=2, last_epoch=1), 1003)  # an observer does not count
    assert leader.high_watermark == 0
    leader.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1004)
    assert leader.high_watermark == 1  # voter ends 2, 2, 1, -, - : the third largest is 1
    leader.handle(fetch(5, 1, epoch=1, offset=2, last_epoch=1), 1005)
    assert leader.high_watermark == 2


def test_follower_takes_the_leader_high_watermark_capped_by_its_log():
    f = node(node_id=2)
    f.handle(begin(1, 2, epoch=1), 10)
    data = {"ErrorCode": 0, "HighWatermark": 5, "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
            "CurrentLeader": {"LeaderId": 1, "LeaderEpoch": 1},
            "Records": [{"Offset": 0, "Epoch": 1, "Value": "lc"}, {"Offset": 1, "Epoch": 1, "Value": "a"}]}
    f.handle({"type": "FetchResponse", "source": 1, "destination": 2, "data": data}, 20)
    assert (f.log.end_offset, f.high_watermark) == (2, 2)
    f.handle({"type": "FetchResponse", "source": 1, "destination": 2, "data": {**data, "HighWatermark": 1,
                                                                                 "Records": []}}, 30)
    assert f.high_watermark == 2  # monotonic


# ------------------------------------------------------------------------------------- zombie leader
def test_zombie_leader_resigns_after_fetch_timeout_without_a_majority():
    # fetch timeout 2000 x LeaderState.CHECK_QUORUM_TIMEOUT_FACTOR 1.5 = 3000
    leader = elected(voters=(1, 2, 3, 4, 5))  # elected at 1000: check quorum due at 4000
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1400)
    leader.handle(fetch(3, 1, epoch=1, offset=1, last_epoch=1), 1500)  # 3 of 5 with the leader: due at 4500
    leader.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 3000)  # 2 of 5 since: no reset
    leader.tick(4499)
    assert leader.state == LEADER
    leader.tick(4500)
    assert leader.state == RESIGNED and leader.epoch == 1
    assert "zombie_leader_detected" in [e["event"] for e in leader.events]
    # a resigned node starts an election after its election timeout (1000, no jitter)
    leader.tick(5499)
    assert leader.state == RESIGNED
    out = leader.tick(5500)
    assert (leader.state, leader.epoch) == (CANDIDATE, 2)
    assert len([m for m in out if m["type"] == "VoteRequest"]) == 4


def test_leader_with_one_follower_of_three_is_not_a_zombie():
    leader = elected()  # 3 voters: the leader and one follower are a majority
    for t in range(1500, 10000, 1500):
        leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), t)
        leader.tick(t)
    assert leader.state == LEADER
    leader.tick(9000 + 2999)
    assert leader.state == LEADER
    leader.tick(9000 + 3000)
    assert leader.state == RESIGNED


def test_diverging_fetches_do_not_count_for_check_quorum():
    leader = elected(epochs=(1, 1), epoch=1)  # epoch 2, LeaderChange at offset 2
    for t in (2000, 3000, 3999):
        r = only(leader.handle(fetch(2, 1, epoch=2, offset=5, last_epoch=1), t), "FetchResponse")
        assert r["DivergingEpoch"] == {"Epoch": 1, "EndOffset": 2}
    leader.tick(4000)  # due 1000 + 3000: no valid fetch from anyone
    assert leader.state == RESIGNED


def test_zombie_leader_steps_down_when_fenced_by_a_higher_epoch():
    zombie = elected()  # leader of epoch 1, cut off
    assert zombie.tick(1999) == []
    out = zombie.tick(2000)  # keeps announcing itself to every voter each fetch.timeout / 2 (Kafka 4)
    req = [m for m in out if m["type"] == "BeginQuorumEpochRequest" and m["destination"] == 2][0]
    peer = node(node_id=2, epoch=4)
    peer.handle(begin(3, 2, epoch=5), 10)  # 2 follows 3 in epoch 5
    resp = peer.handle(req, 1021)
    assert only(resp, "BeginQuorumEpochResponse")["ErrorCode"] == FENCED
    zombie.handle(resp[0], 1022)
    assert (zombie.state, zombie.epoch, zombie.leader_id) == (FOLLOWER, 5, 3)
    assert "leader_step_down" in [e["event"] for e in zombie.events]
    with __import__("pytest").raises(ValueError):
        zombie.append("late", 1023)


def test_fetch_with_a_higher_epoch_does_not_make_the_leader_step_down():
    leader = elected()
    assert only(leader.handle(fetch(2, 1, epoch=7, offset=0, last_epoch=0), 1001), "FetchResponse")["ErrorCode"] \
        == UNKNOWN_EPOCH
    assert (leader.state, leader.epoch) == (LEADER, 1)
    leader.handle(vote(2, 1, epoch=2, last_epoch=1, last_offset=1), 1002)  # a higher epoch vote does
    assert (leader.state, leader.epoch, leader.voted_for) == (VOTED, 2, 2)


def test_follower_fetch_timeout_starts_an_election():
    f = node(node_id=2)
    f.handle(begin(1, 2, epoch=1), 100)
    f.tick(2099)
    assert f.state == FOLLOWER
    out = f.tick(2100)
    assert (f.state, f.epoch) == (CANDIDATE, 2)
    assert sorted(m["destination"] for m in out if m["type"] == "VoteRequest") == [1, 3]


# ------------------------------------------------------------------------------------ graceful resign
def test_graceful_resign_with_preferred_successors():
    leader = elected()  # epoch 1, LeaderChange at 0
    leader.append("a", 1001)  # end 2
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=2, last_epoch=1), 1003)  # 3 is the most caught up
    out = leader.resign(1010)
    assert leader.state == RESIGNED
    ends = [m for m in out if m["type"] == "EndQuorumEpochRequest"]
    assert sorted(m["destination"] for m in ends) == [2, 3]
    assert all(m["data"]["PreferredSuccessors"] == [3, 2] and m["data"]["LeaderEpoch"] == 1 for m in ends)
    n2, n3 = node(node_id=2), node(node_id=3)
    for n in (n2, n3):
        n.handle(begin(1, n.node_id, epoch=1), 1000)
    # the first successor stands at once, without waiting for its fetch timeout
    out3 = n3.handle([m for m in ends if m["destination"] == 3][0], 1011)
    assert only(out3, "EndQuorumEpochResponse")["ErrorCode"] == NONE
    assert (n3.state, n3.epoch) == (CANDIDATE, 2)
    # the second waits (backoff max 1000 >> (2 - 1)) << (1 - 1) = 500 ms (strictExponentialElectionBackoffMs)
    n2.handle([m for m in ends if m["destination"] == 2][0], 1011)
    assert n2.tick(1510) == [] and n2.state == FOLLOWER
    n2.tick(1511)
    assert (n2.state, n2.epoch) == (CANDIDATE, 2)
    # the resigned leader votes in the next epoch, not in its own
    assert only(leader.handle(vote(3, 1, epoch=1), 1012), "VoteResponse")["ErrorCode"] == NONE
    assert leader.state == RESIGNED
    r = only(leader.handle(vote(3, 1, epoch=2, last_epoch=1, last_offset=2), 1012), "VoteResponse")
    assert r["VoteGranted"] is True and (leader.state, leader.voted_for) == (VOTED, 3)


def test_restart_of_a_leader_comes_back_resigned():
    leader = elected()
    again = RaftNode.restore(1, (1, 2, 3), CFG, leader.log, leader.durable_state(), 5000)
    assert (again.state, again.epoch) == (RESIGNED, 1)
    assert again.tick(6000) and (again.state, again.epoch) == (CANDIDATE, 2)


def test_restart_keeps_the_vote_of_the_epoch():
    n = node()
    n.handle(vote(2, 1, epoch=3), 10)
    again = RaftNode.restore(1, (1, 2, 3), CFG, n.log, n.durable_state(), 20)
    assert (again.state, again.epoch, again.voted_for) == (VOTED, 3, 2)
    assert only(again.handle(vote(3, 1, epoch=3), 30), "VoteResponse")["VoteGranted"] is False


# ------------------------------------------------------------------------------------------ simulator
def _sim_config(voters: int, broken: bool = False, observers: int = 0, alter_every_ms: int = 0):
    import dataclasses

    from kraftlake.sim.quorum import SimConfig
    base = SimConfig(voters=voters, observers=observers, duration_ms=10_000, alter_every_ms=alter_every_ms)
    return dataclasses.replace(base, raft=dataclasses.replace(base.raft, unsafe_grant_any_vote=broken))


@pytest.mark.slow
def test_simulated_quorums_keep_raft_safety_over_hundreds_of_seeds():
    from collections import Counter

    from kraftlake.sim.quorum import simulate
    seen: Counter = Counter()
    for voters, observers, seeds in ((3, 1, range(200)), (5, 0, range(200, 300))):
        cfg = _sim_config(voters, observers=observers, alter_every_ms=3000)
        for seed in seeds:
            r = simulate(seed, cfg)
            assert r.ok, (seed, r.violations[:3])
            seen.update(e["event"] for e in r.events)
            seen["committed"] += r.committed > 0
    # the runs did go through the hard cases, not only a quiet leader
    assert seen["committed"] == 300
    assert seen["truncation"] > 0 and seen["zombie_leader_detected"] > 0 and seen["leader_step_down"] > 0
    assert seen["end_quorum_epoch"] > 0
    assert seen["leader_elected"] > 300  # more than one election per run on average
    assert seen["voters_changed"] > 0 and seen["voter_change_cancelled"] > 0 and seen["leader_removed_from_voters"] > 0


def test_simulation_is_deterministic_per_seed():
    from kraftlake.sim.quorum import simulate
    a, b = simulate(7, _sim_config(3)), simulate(7, _sim_config(3))
    assert (a.leaders, a.committed, a.messages, a.events) == (b.leaders, b.committed, b.messages, b.events)


def test_checker_catches_two_votes_per_epoch():
    from kraftlake.sim.quorum import simulate
    caught = [r for r in (simulate(seed, _sim_config(3, broken=True)) for seed in range(40)) if not r.ok]
    assert caught
    assert "election_safety" in {v.rule for r in caught for v in r.violations}


# ---------------------------------------------------------------------------- observers, DescribeQuorum
def test_observer_finds_the_leader_through_any_voter_and_never_stands():
    obs = RaftNode(9, (1, 2, 3), CFG)  # 9 is an observer
    out = obs.tick(0)
    req = only(out, "FetchRequest")
    assert req["ReplicaId"] == 9 and req["CurrentLeaderEpoch"] == 0
    f = node(node_id=2)
    f.handle(begin(1, 2, epoch=4), 10)  # voter 2 follows 1 in epoch 4
    asked = {**[m for m in out if m["type"] == "FetchRequest"][0], "destination": 2}
    resp = f.handle(asked, 11)
    r = only(resp, "FetchResponse")
    assert (r["ErrorCode"], r["CurrentLeader"]) == (FENCED, {"LeaderId": 1, "LeaderEpoch": 4})
    out = obs.handle(resp[0], 12)
    assert (obs.state, obs.epoch, obs.leader_id) == (FOLLOWER, 4, 1)
    assert only(out, "FetchRequest")["CurrentLeaderEpoch"] == 4
    # Kafka 4: without a fetch answered for the fetch timeout an observer stays a follower and asks any
    # voter for the leader; it never stands for election
    out = obs.tick(12 + 2000)
    assert (obs.state, obs.epoch, obs.leader_id) == (FOLLOWER, 4, 1)
    assert only(out, "FetchRequest")["CurrentLeaderEpoch"] == 4
    obs.tick(100_000)
    assert obs.state == FOLLOWER and not any(e["event"] == "election_started" for e in obs.events)


def test_describe_quorum_on_the_leader():
    leader = elected()  # epoch 1 at 1000, LeaderChange at offset 0
    leader.append("a", 1001)  # end 2
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1100)
    leader.handle(fetch(9, 1, epoch=1, offset=1, last_epoch=1), 1200)  # observer 9
    r = only(leader.handle(message("DescribeQuorumRequest", 99, 1), 1300), "DescribeQuorumResponse")
    assert (r["ErrorCode"], r["LeaderId"], r["LeaderEpoch"], r["HighWatermark"]) == (NONE, 1, 1, 2)
    assert r["CurrentVoters"] == [
        {"ReplicaId": 1, "LogEndOffset": 2, "LastFetchTimestamp": 1300, "LastCaughtUpTimestamp": 1300},
        {"ReplicaId": 2, "LogEndOffset": 2, "LastFetchTimestamp": 1100, "LastCaughtUpTimestamp": 1100},
        {"ReplicaId": 3, "LogEndOffset": -1, "LastFetchTimestamp": -1, "LastCaughtUpTimestamp": -1}]
    assert r["Observers"] == [
        {"ReplicaId": 9, "LogEndOffset": 1, "LastFetchTimestamp": 1200, "LastCaughtUpTimestamp": -1}]
    f = node(node_id=2)
    assert only(f.handle(message("DescribeQuorumRequest", 99, 2), 5), "DescribeQuorumResponse")["ErrorCode"] \
        == NOT_LEADER


def test_quorum_state_says_a_new_leaders_high_watermark_is_unknown_as_describe_quorum_does():
    """Issue 14 (point 7): ``quorum_state`` reports -1 for a leader that has not committed an entry of its
    epoch, as DescribeQuorum does, then the committed offset."""
    from kraftlake.raft.replica import Replica
    leader = elected(epochs=(1, 1), epoch=1)  # epoch 2, LeaderChangeMessage at 2; a high watermark of 0 before
    replica = Replica(1, node=leader, last_offset=7, last_time=1000)
    state = dict(replica.state_rows())["quorum_state"]
    describe = only(leader.handle(message("DescribeQuorumRequest", 99, 1), 1000), "DescribeQuorumResponse")
    assert state["high_watermark"] == describe["HighWatermark"] == -1
    leader.handle(fetch(2, 1, epoch=2, offset=3, last_epoch=2), 1010)
    state = dict(replica.state_rows())["quorum_state"]
    describe = only(leader.handle(message("DescribeQuorumRequest", 99, 1), 1011), "DescribeQuorumResponse")
    assert state["high_watermark"] == describe["HighWatermark"] == 3


def test_quorum_replicas_forget_an_observer_silent_for_300_s():
    """Issue 14 (point 6): the leader's view in ``quorum_replicas`` drops an observer that has not fetched
    for 300 s (LeaderState.OBSERVER_SESSION_TIMEOUT_MS), as DescribeQuorum does."""
    from kraftlake.raft.node import OBSERVER_SESSION_TIMEOUT_MS
    from kraftlake.raft.replica import Replica, traffic_event
    n = RaftNode(1, (1,), CFG)
    n.tick(1000)
    replica = Replica(1, node=n, last_offset=0, last_time=1000)

    def deliver(msg, now, offset):
        replica.apply({**traffic_event(msg, now), "offset": offset}, {})
        return {row["replica_id"] for row in replica.view}

    assert deliver(fetch(9, 1, epoch=1, offset=1, last_epoch=1), 1500, 1) == {1, 9}
    describe = message("DescribeQuorumRequest", -1, 1)
    assert deliver(describe, 1500 + OBSERVER_SESSION_TIMEOUT_MS - 1, 2) == {1, 9}
    assert deliver(describe, 1500 + OBSERVER_SESSION_TIMEOUT_MS, 3) == {1}


# ------------------------------------------------------------------ voter changes (the seed's AlterQuorum)
def alter(dst, target):
    return message("AlterQuorumRequest", -1, dst, TargetVoters=target)


def voter_events(n):
    return [(e["event"], e.get("added"), e.get("removed")) for e in n.events
            if e["event"].startswith("voter") or e["event"] == "leader_removed_from_voters"]


def test_alter_quorum_adds_a_caught_up_voter_then_removes_one_each_after_the_last_commits():
    n = elected()  # voters 1,2,3; LeaderChange at offset 0; end 1
    n.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)  # hw 1
    n.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1020)  # observer 4, caught up
    assert only(n.handle(alter(1, [1, 2, 4]), 1030), "AlterQuorumResponse")["ErrorCode"] == NONE
    # first step at once: add 4 (VotersRecord at offset 1), in effect as soon as it is appended
    assert n.voters == (1, 2, 3, 4) and n.log.end_offset == 2 and n.target_voters == (1, 2, 4)
    assert n.log.entries[1].value["type"] == "VotersRecord"
    # four voters: the majority is 3, so 1 and 2 at offset 2 are not enough
    n.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1040)
    assert n.high_watermark == 1 and n.voters == (1, 2, 3, 4)
    n.handle(fetch(4, 1, epoch=1, offset=2, last_epoch=1), 1050)  # 1, 2, 4 at 2: committed
    # second step: remove 3 (VotersRecord at offset 2); three voters again, majority 2
    assert n.high_watermark == 2 and n.voters == (1, 2, 4) and n.log.end_offset == 3
    n.handle(fetch(2, 1, epoch=1, offset=3, last_epoch=1), 1060)
    assert n.high_watermark == 3 and n.target_voters is None
    assert voter_events(n) == [("voter_change_started", None, None), ("voters_changed", 4, None),
                               ("voters_changed", None, 3), ("voter_change_completed", None, None)]


def test_a_new_voter_is_added_only_once_caught_up_and_nothing_is_removed_before():
    n = elected()
    n.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)  # hw 1
    n.handle(alter(1, [1, 2, 4]), 1020)  # 4 never fetched
    assert n.voters == (1, 2, 3) and n.log.end_offset == 1  # no VotersRecord, 3 not removed either
    n.handle(fetch(4, 1, epoch=1, offset=0, last_epoch=0), 1030)  # behind the hw: still waiting
    assert n.voters == (1, 2, 3)
    n.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1040)
    assert n.voters == (1, 2, 3, 4)


def test_alter_quorum_cancelled_by_null_or_by_the_current_voters_keeps_the_steps_taken():
    for cancel in (None, [1, 2, 3, 4]):
        n = elected()
        n.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
        n.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1020)
        n.handle(alter(1, [1, 2, 4]), 1030)
        assert n.voters == (1, 2, 3, 4)
        assert only(n.handle(alter(1, cancel), 1035), "AlterQuorumResponse")["ErrorCode"] == NONE
        assert n.target_voters is None
        for r in (2, 4):
            n.handle(fetch(r, 1, epoch=1, offset=2, last_epoch=1), 1040)
        assert n.high_watermark == 2 and n.voters == (1, 2, 3, 4) and n.log.end_offset == 2  # no more steps
        assert voter_events(n)[-1] == ("voter_change_cancelled", None, None)


def test_alter_quorum_errors():
    f = node(node_id=2)
    assert only(f.handle(alter(2, [1, 2]), 5), "AlterQuorumResponse")["ErrorCode"] == NOT_LEADER
    n = elected()
    assert only(n.handle(alter(1, [1, 1, 2]), 1001), "AlterQuorumResponse")["ErrorCode"] == INVALID
    assert n.target_voters is None


def test_a_leader_removed_from_the_voters_steps_aside_once_that_is_committed():
    """Kafka 4 (RemoveVoterHandler, pollResigned): a leader whose removal is committed resigns, telling the
    new voters with EndQuorumEpoch, and after its election timeout is unattached in the next epoch, an
    observer of the new voter set, looking for its leader."""
    n = elected()  # leader 1 of 1,2,3
    n.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
    n.handle(alter(1, [2, 3]), 1020)
    assert n.voters == (2, 3) and n.state == LEADER  # leads a quorum it is not part of
    n.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1030)
    assert n.high_watermark == 1 and n.state == LEADER  # {2, 3} needs both
    out = n.handle(fetch(3, 1, epoch=1, offset=2, last_epoch=1), 1040)
    assert n.high_watermark == 2 and (n.state, n.epoch, n.leader_id) == (RESIGNED, 1, 1)
    assert sorted(m["destination"] for m in out if m["type"] == "EndQuorumEpochRequest") == [2, 3]
    assert ("leader_removed_from_voters", None, None) in voter_events(n)
    out = n.tick(1040 + 1000)
    assert (n.state, n.epoch, n.leader_id, n.is_voter) == (UNATTACHED, 2, -1, False)
    assert [m["type"] for m in out] == ["FetchRequest"]  # looks for the leader


def test_a_follower_uses_the_voters_of_its_log_and_reverts_them_when_truncated():
    from kraftlake.raft.node import record, voters_record
    f = node(node_id=2)
    f.handle(begin(1, 2, epoch=1), 10)
    f.handle(message("FetchResponse", 1, 2, ErrorCode=0, HighWatermark=1, DivergingEpoch={"Epoch": -1, "EndOffset": -1},
                     CurrentLeader={"LeaderId": 1, "LeaderEpoch": 1},
                     Records=[{"Offset": 0, "Epoch": 1, "Value": record("LeaderChangeMessage", {}, 5)},
                              {"Offset": 1, "Epoch": 1, "Value": voters_record([1, 2, 3, 4], 6)}]), 20)
    assert f.voters == (1, 2, 3, 4) and f.high_watermark == 1  # uncommitted, but in effect
    f.handle(begin(3, 2, epoch=2), 30)  # a new leader whose log has epoch 1 only up to offset 1
    f.handle(message("FetchResponse", 3, 2, ErrorCode=0, HighWatermark=1, DivergingEpoch={"Epoch": 1, "EndOffset": 1},
                     CurrentLeader={"LeaderId": 3, "LeaderEpoch": 2}, Records=[]), 40)
    assert f.log.end_offset == 1 and f.voters == (1, 2, 3)
