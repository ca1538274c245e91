"""Kafka's ``LeaderStateTest`` (raft module) translated to a leading ``RaftNode``.

Kafka builds a ``LeaderState`` with an epoch start offset and updates replica states directly; here a
node is elected (its LeaderChangeMessage is the entry at the epoch start offset) and the updates are the
fetches that cause them. ``updateLocalState`` is an append by the leader.
"""

from __future__ import annotations

from raft_harness import CFG, elected, fetch, only

from kraftlake.raft.node import LEADER, OBSERVER_SESSION_TIMEOUT_MS, RESIGNED, RaftNode, message


def describe(leader, now: int) -> dict:
    return only(leader.handle(message("DescribeQuorumRequest", -1, leader.node_id), now), "DescribeQuorumResponse")


def sole_voter() -> RaftNode:
    """A single-voter quorum, started at 1000: it leads epoch 1 at once."""
    n = RaftNode(1, (1,), CFG)
    n.tick(1000)
    assert (n.state, n.epoch) == (LEADER, 1)
    return n


def row(rows: list[dict], replica: int) -> dict:
    return next(r for r in rows if r["ReplicaId"] == replica)


def test_last_caught_up_time_voters():
    """LeaderStateTest.testLastCaughtUpTimeVoters: caught up at a fetch that reaches the leader's end;
    caught up as of the previous fetch when it reaches the end the leader had then."""
    leader = elected()  # at 1000, end 1
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1001)  # caught up at 1001
    for i in range(4):
        leader.append(f"a{i}", 1002)  # end 5
    leader.handle(fetch(2, 1, epoch=1, offset=3, last_epoch=1), 1003)  # behind
    assert row(describe(leader, 1004)["CurrentVoters"], 2)["LastCaughtUpTimestamp"] == 1001
    for i in range(4):
        leader.append(f"b{i}", 1005)  # end 9
    leader.handle(fetch(2, 1, epoch=1, offset=5, last_epoch=1), 1006)  # reaches the end of the fetch at 1003
    assert row(describe(leader, 1007)["CurrentVoters"], 2)["LastCaughtUpTimestamp"] == 1003
    # 3 never caught up
    leader.handle(fetch(3, 1, epoch=1, offset=0, last_epoch=0), 1008)
    leader.append("c", 1009)
    leader.handle(fetch(3, 1, epoch=1, offset=1, last_epoch=1), 1010)
    assert row(describe(leader, 1011)["CurrentVoters"], 3)["LastCaughtUpTimestamp"] == -1


def test_last_caught_up_time_observer():
    """LeaderStateTest.testLastCaughtUpTimeObserver: the same rule for an observer."""
    leader = elected()
    leader.append("a", 1001)  # end 2
    leader.handle(fetch(9, 1, epoch=1, offset=1, last_epoch=1), 1002)  # behind
    assert row(describe(leader, 1003)["Observers"], 9)["LastCaughtUpTimestamp"] == -1
    leader.handle(fetch(9, 1, epoch=1, offset=2, last_epoch=1), 1004)  # caught up
    for i in range(3):
        leader.append(f"b{i}", 1005)  # end 5
    leader.handle(fetch(9, 1, epoch=1, offset=3, last_epoch=1), 1006)  # behind, but not yet past 1004's end
    assert row(describe(leader, 1007)["Observers"], 9)["LastCaughtUpTimestamp"] == 1004
    leader.append("c", 1008)  # end 6
    leader.handle(fetch(9, 1, epoch=1, offset=5, last_epoch=1), 1009)  # reached 1006's end
    assert row(describe(leader, 1010)["Observers"], 9)["LastCaughtUpTimestamp"] == 1006


def test_update_high_watermark_quorum_size_two():
    """LeaderStateTest.testUpdateHighWatermarkQuorumSizeTwo: no high watermark until the other voter has
    an entry of this epoch; then its end."""
    leader = elected(voters=(1, 2), epochs=(0,) * 10)  # epoch start offset 10, LeaderChange at 10
    leader.append("x", 1001)
    leader.append("y", 1001)  # end 13
    leader.handle(fetch(2, 1, epoch=1, offset=10, last_epoch=0), 1002)
    assert describe(leader, 1003)["HighWatermark"] == -1
    leader.handle(fetch(2, 1, epoch=1, offset=11, last_epoch=1), 1004)
    assert leader.high_watermark == 11
    leader.handle(fetch(2, 1, epoch=1, offset=13, last_epoch=1), 1005)
    assert leader.high_watermark == 13


def test_update_high_watermark_quorum_size_three():
    """LeaderStateTest.testUpdateHighWatermarkQuorumSizeThree"""
    leader = elected(epochs=(0,) * 10)  # epoch start 10
    for i in range(4):
        leader.append(i, 1001)  # end 15
    leader.handle(fetch(2, 1, epoch=1, offset=10, last_epoch=0), 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=10, last_epoch=0), 1002)
    assert describe(leader, 1003)["HighWatermark"] == -1
    leader.handle(fetch(3, 1, epoch=1, offset=15, last_epoch=1), 1004)
    assert leader.high_watermark == 15
    for i in range(5):
        leader.append(i, 1005)  # end 20
    assert leader.high_watermark == 15
    leader.handle(fetch(2, 1, epoch=1, offset=20, last_epoch=1), 1006)
    assert leader.high_watermark == 20


def test_non_monotonic_high_watermark_update():
    """LeaderStateTest.testNonMonotonicHighWatermarkUpdate: a follower that lost its disk fetches from
    an earlier offset; the leader reports it, but the high watermark does not go back."""
    leader = elected(voters=(1, 2))
    for i in range(9):
        leader.append(i, 1001)  # end 10
    leader.handle(fetch(2, 1, epoch=1, offset=10, last_epoch=1), 1002)
    assert leader.high_watermark == 10
    leader.handle(fetch(2, 1, epoch=1, offset=5, last_epoch=1), 1003)
    assert leader.high_watermark == 10 and row(describe(leader, 1004)["CurrentVoters"], 2)["LogEndOffset"] == 5


def test_describe_quorum_with_single_voter():
    """LeaderStateTest.testDescribeQuorumWithSingleVoter: the leader's own row is now; the high watermark
    appears once an entry of the epoch is committed."""
    n = sole_voter()
    d = describe(n, 1500)
    assert (d["LeaderId"], d["LeaderEpoch"], d["Observers"]) == (1, 1, [])
    assert d["CurrentVoters"] == [{"ReplicaId": 1, "LogEndOffset": 1, "LastFetchTimestamp": 1500,
                                   "LastCaughtUpTimestamp": 1500}]
    assert d["HighWatermark"] == 1  # a sole voter commits its LeaderChangeMessage alone


def test_describe_quorum_with_multiple_voters():
    """LeaderStateTest.testDescribeQuorumWithMultipleVoters: an active follower's row has its fetch
    time; an inactive one -1 everywhere."""
    leader = elected()
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1001)
    d = describe(leader, 1500)
    assert d["HighWatermark"] == 1 and d["Observers"] == []
    assert row(d["CurrentVoters"], 1) == {"ReplicaId": 1, "LogEndOffset": 1, "LastFetchTimestamp": 1500,
                                           "LastCaughtUpTimestamp": 1500}
    assert row(d["CurrentVoters"], 2) == {"ReplicaId": 2, "LogEndOffset": 1, "LastFetchTimestamp": 1001,
                                           "LastCaughtUpTimestamp": 1001}
    assert row(d["CurrentVoters"], 3) == {"ReplicaId": 3, "LogEndOffset": -1, "LastFetchTimestamp": -1,
                                           "LastCaughtUpTimestamp": -1}


def test_describe_quorum_with_observers():
    """LeaderStateTest.testDescribeQuorumWithObservers"""
    leader = sole_voter()
    leader.handle(fetch(10, 1, epoch=1, offset=1, last_epoch=1), 1500)
    d = describe(leader, 2000)
    assert [r["ReplicaId"] for r in d["CurrentVoters"]] == [1]
    assert d["Observers"] == [{"ReplicaId": 10, "LogEndOffset": 1, "LastFetchTimestamp": 1500,
                               "LastCaughtUpTimestamp": 1500}]


def test_observer_state_expiration():
    """LeaderStateTest's observer expiration (``OBSERVER_SESSION_TIMEOUT_MS``, 300 s): an observer that
    has not fetched for that long is dropped from DescribeQuorum; a voter never is."""
    leader = sole_voter()
    leader.handle(fetch(10, 1, epoch=1, offset=1, last_epoch=1), 1500)
    assert [r["ReplicaId"] for r in describe(leader, 1500 + OBSERVER_SESSION_TIMEOUT_MS - 1)["Observers"]] == [10]
    assert describe(leader, 1500 + OBSERVER_SESSION_TIMEOUT_MS)["Observers"] == []


def test_get_non_leader_followers_by_fetch_offset_descending():
    """LeaderStateTest.testGetNonLeaderFollowersByFetchOffsetDescending: the preferred successors of a
    resignation, by fetch offset, the leader left out."""
    leader = elected(epochs=(0,) * 10)
    for i in range(4):
        leader.append(i, 1001)  # end 15
    leader.handle(fetch(2, 1, epoch=1, offset=10, last_epoch=0), 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=15, last_epoch=1), 1002)
    out = leader.resign(1003)
    assert all(m["data"]["PreferredSuccessors"] == [3, 2] for m in out)


def test_check_quorum_without_the_leader_in_the_voter_set():
    """LeaderState.updateCheckQuorumForFollowingVoter: a leader outside the voter set (being removed)
    does not count itself; it needs a majority of the voters to fetch."""
    leader = elected()
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)
    leader.handle(message("AlterQuorumRequest", -1, 1, TargetVoters=[2, 3, 4]), 1020)  # 4 must catch up first
    leader.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1030)
    assert leader.voters == (1, 2, 3, 4)
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1040)
    leader.handle(fetch(4, 1, epoch=1, offset=2, last_epoch=1), 1040)  # the addition commits
    leader.tick(1050)
    assert leader.voters == (2, 3, 4) and leader.state == LEADER  # removing itself, not committed yet
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 1060)  # one of three voters: not a majority
    leader.tick(1040 + 3000 - 1)  # check quorum: 1.5 x the fetch timeout after the last majority (1040)
    assert leader.state == LEADER
    leader.tick(1040 + 3000)
    assert leader.state == RESIGNED
