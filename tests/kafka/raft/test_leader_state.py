"""Kafka's ``LeaderStateTest`` (raft module) translated to a leading ``RaftNode``.

Nine of these cases are Kafka 3.8's and say so: KAFKA-16953 (Kafka 3.9) took the DescribeQuorum answer
out of ``LeaderState`` and removed them (``testLastCaughtUpTime*``, ``testDescribeQuorum*``,
``testObserverStateExpiration``, ``testClearInactiveObserversIgnoresLeader``,
``testNoOpForNegativeRemoteNodeId``); Kafka 4 tests the same answers through the client, in
``KafkaRaftClientTest.testDescribeQuorum*``, which ``test_kafka_raft_client.py`` ports. The rules they
check did not change, so they stay, labelled with the version they come from.

Kafka builds a ``LeaderState`` with an epoch start offset and updates replica states directly; here a
node is elected (its LeaderChangeMessage is the entry at the epoch start offset) and the updates are the
fetches that cause them. ``updateLocalState`` is an append by the leader.
"""

from __future__ import annotations

from raft_harness import CFG, answer, destinations, elected, fetch, only, sent, times_out_at, vote

from kraftlake.raft.log import LogEntry, RaftLog
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
    """LeaderStateTest.testLastCaughtUpTimeVoters (Kafka 3.8; gone since 3.9, KAFKA-16953): caught up at a fetch that reaches the leader's end;
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
    """LeaderStateTest.testLastCaughtUpTimeObserver (Kafka 3.8; gone since 3.9, KAFKA-16953): the same rule for an observer."""
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
    """LeaderStateTest.testDescribeQuorumWithSingleVoter (Kafka 3.8; gone since 3.9, KAFKA-16953): the leader's own row is now; the high watermark
    appears once an entry of the epoch is committed."""
    n = sole_voter()
    d = describe(n, 1500)
    assert (d["LeaderId"], d["LeaderEpoch"], d["Observers"]) == (1, 1, [])
    assert d["CurrentVoters"] == [{"ReplicaId": 1, "LogEndOffset": 1, "LastFetchTimestamp": 1500,
                                   "LastCaughtUpTimestamp": 1500}]
    assert d["HighWatermark"] == 1  # a sole voter commits its LeaderChangeMessage alone


def test_describe_quorum_with_multiple_voters():
    """LeaderStateTest.testDescribeQuorumWithMultipleVoters (Kafka 3.8; gone since 3.9, KAFKA-16953): an active follower's row has its fetch
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
    """LeaderStateTest.testDescribeQuorumWithObservers (Kafka 3.8; gone since 3.9, KAFKA-16953)"""
    leader = sole_voter()
    leader.handle(fetch(10, 1, epoch=1, offset=1, last_epoch=1), 1500)
    d = describe(leader, 2000)
    assert [r["ReplicaId"] for r in d["CurrentVoters"]] == [1]
    assert d["Observers"] == [{"ReplicaId": 10, "LogEndOffset": 1, "LastFetchTimestamp": 1500,
                               "LastCaughtUpTimestamp": 1500}]


def test_observer_state_expiration():
    """LeaderStateTest.testObserverStateExpiration (Kafka 3.8; gone since 3.9, KAFKA-16953): observer expiration (``OBSERVER_SESSION_TIMEOUT_MS``, 300 s): an observer that
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


def alter(target) -> dict:
    return message("AlterQuorumRequest", -1, 1, TargetVoters=target)


def keep_alive(leader: RaftNode, start: int, until: int, follower: int = 2, offset: int = 1) -> int:
    """``follower`` fetches every check-quorum period minus one from ``start`` to ``until``, so that the
    leader keeps its quorum; the time of the last fetch."""
    now = start
    while True:
        leader.handle(fetch(follower, 1, epoch=leader.epoch, offset=offset, last_epoch=leader.epoch), now)
        if now + 2999 > until:
            return now
        now += 2999
        leader.tick(now)


def test_follower_acknowledgement():
    """LeaderStateTest.testFollowerAcknowledgement: each voter is unacknowledged until it answers
    BeginQuorumEpoch."""
    leader = elected()
    out = leader.tick(2000)  # the BeginQuorumEpoch heartbeat
    assert [v for v, p in leader.replica_progress().items() if v != 1 and not p.acknowledged] == [2, 3]
    for request in (m for m in out if m["type"] == "BeginQuorumEpochRequest"):
        leader.handle(answer(request, "BeginQuorumEpochResponse", ErrorCode=0, LeaderId=1, LeaderEpoch=1), 2001)
        if request["destination"] == 2:
            assert [v for v, p in leader.replica_progress().items() if v != 1 and not p.acknowledged] == [3]
    assert all(p.acknowledged for p in leader.replica_progress().values())


def test_non_follower_acknowledgement():
    """LeaderStateTest.testNonFollowerAcknowledgement: an acknowledgement from a replica that is no voter
    is refused (Kafka throws; the node records nothing)."""
    leader = sole_voter()
    leader.handle(message("BeginQuorumEpochResponse", 9, 1, ErrorCode=0, LeaderId=1, LeaderEpoch=1), 1001)
    assert 9 not in leader.replica_progress() and leader.state == LEADER


def test_update_high_watermark_quorum_size_one():
    """LeaderStateTest.testUpdateHighWatermarkQuorumSizeOne: epoch start offset 15; a sole voter commits
    its LeaderChangeMessage (16) and then each append (20)."""
    n = RaftNode(1, (1,), CFG, RaftLog(LogEntry(0, i) for i in range(15)))
    n.tick(1000)
    assert (n.state, n.log.end_offset, n.high_watermark) == (LEADER, 16, 16)
    for i in range(4):
        n.append(i, 1001)
    assert n.high_watermark == 20


def test_idempotent_end_offset_update():
    """LeaderStateTest.testIdempotentEndOffsetUpdate: nothing appended, nothing moves."""
    n = sole_voter()
    n.tick(2000)
    assert (n.log.end_offset, n.high_watermark) == (1, 1)


def test_high_watermark_does_increase_from_new_voter():
    """LeaderStateTest.testHighWatermarkDoesIncreaseFromNewVoter: 3's progress does not count while it is
    an observer; added as a voter, it moves the high watermark to 15; 16 needs a majority again."""
    leader = elected(voters=(1, 2), epochs=(0,) * 5)  # epoch start 5, LeaderChangeMessage at 5
    for i in range(9):
        leader.append(i, 1001)  # end 15
    leader.handle(fetch(2, 1, epoch=1, offset=10, last_epoch=1), 1002)
    assert leader.high_watermark == 10
    leader.handle(fetch(3, 1, epoch=1, offset=15, last_epoch=1), 1003)
    assert leader.high_watermark == 10
    leader.handle(alter([1, 2, 3]), 1004)  # 3 is caught up: a VotersRecord at 15 adds it
    assert (leader.voters, leader.log.end_offset, leader.high_watermark) == ((1, 2, 3), 16, 15)
    leader.handle(fetch(3, 1, epoch=1, offset=16, last_epoch=1), 1005)
    assert leader.high_watermark == 16


def test_high_watermark_does_not_decrease_from_new_voter():
    """LeaderStateTest.testHighWatermarkDoesNotDecreaseFromNewVoter: voters with 15 committed; a new voter
    whose log falls back to 13 (it lost its disk) makes the majority's offset 13, the high watermark stays
    15 and moves to 16 only when a majority of the four has 16."""
    leader = elected(epochs=(0,) * 5)  # voters 1, 2, 3; epoch start 5
    for i in range(9):
        leader.append(i, 1001)  # end 15
    leader.handle(fetch(2, 1, epoch=1, offset=15, last_epoch=1), 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=10, last_epoch=1), 1003)
    assert leader.high_watermark == 15
    leader.handle(fetch(4, 1, epoch=1, offset=15, last_epoch=1), 1004)
    leader.handle(alter([1, 2, 3, 4]), 1005)
    assert (leader.voters, leader.log.end_offset) == ((1, 2, 3, 4), 16)
    for replica, offset in ((4, 13), (2, 13), (3, 13)):
        leader.handle(fetch(replica, 1, epoch=1, offset=offset, last_epoch=1), 1006)
        assert leader.high_watermark == 15
    leader.handle(fetch(2, 1, epoch=1, offset=16, last_epoch=1), 1007)
    assert leader.high_watermark == 15
    leader.handle(fetch(3, 1, epoch=1, offset=16, last_epoch=1), 1008)
    assert leader.high_watermark == 16


def test_update_high_watermark_removing_follower_from_voter_states():
    """LeaderStateTest.testUpdateHighWatermarkRemovingFollowerFromVoterStates: removing 2, which held the
    majority's offset, does not take the high watermark back; it moves when 3 passes it."""
    leader = elected(epochs=(0,) * 10)  # epoch start 10
    for i in range(4):
        leader.append(i, 1001)  # end 15
    leader.handle(fetch(2, 1, epoch=1, offset=15, last_epoch=1), 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=10, last_epoch=1), 1003)
    assert leader.high_watermark == 15
    leader.handle(alter([1, 3]), 1004)  # a VotersRecord at 15 removes 2
    assert (leader.voters, leader.high_watermark) == ((1, 3), 15)
    for offset in (14, 15):
        leader.handle(fetch(3, 1, epoch=1, offset=offset, last_epoch=1), 1005)
        assert leader.high_watermark == 15
    leader.handle(fetch(2, 1, epoch=1, offset=16, last_epoch=1), 1006)  # no voter now
    assert leader.high_watermark == 15
    leader.handle(fetch(3, 1, epoch=1, offset=16, last_epoch=1), 1007)
    assert leader.high_watermark == 16


def test_update_high_watermark_quorum_removing_leader_from_voter_states():
    """LeaderStateTest.testUpdateHighWatermarkQuorumRemovingLeaderFromVoterStates: once the leader has
    removed itself, only 2 and 3 count: 16 needs both of them (and committing the removal makes it resign)."""
    leader = elected(epochs=(0,) * 10)
    for i in range(4):
        leader.append(i, 1001)
    leader.handle(fetch(2, 1, epoch=1, offset=15, last_epoch=1), 1002)
    leader.handle(fetch(3, 1, epoch=1, offset=10, last_epoch=1), 1003)
    assert leader.high_watermark == 15
    leader.handle(alter([2, 3]), 1004)  # a VotersRecord at 15 removes the leader
    assert (leader.voters, leader.high_watermark, leader.state) == ((2, 3), 15, LEADER)
    leader.handle(fetch(2, 1, epoch=1, offset=16, last_epoch=1), 1005)
    assert leader.high_watermark == 15
    for offset in (14, 15):
        leader.handle(fetch(3, 1, epoch=1, offset=offset, last_epoch=1), 1006)
        assert leader.high_watermark == 15
    leader.handle(fetch(3, 1, epoch=1, offset=16, last_epoch=1), 1007)
    assert (leader.high_watermark, leader.state) == (16, RESIGNED)


def test_check_quorum():
    """LeaderStateTest.testCheckQuorum: five voters; fetches from two others reset the check-quorum timer
    (3 s), from one voter and an observer they do not, and it expires."""
    leader = elected(voters=(1, 2, 3, 4, 5))  # at 1000
    leader.tick(1000 + 1500)
    assert leader.state == LEADER
    leader.handle(fetch(2, 1, epoch=1, offset=0, last_epoch=0), 2500)
    leader.handle(fetch(3, 1, epoch=1, offset=0, last_epoch=0), 2500)  # reset: expires at 5500
    leader.tick(2500 + 1500)
    assert leader.state == LEADER
    leader.handle(fetch(4, 1, epoch=1, offset=0, last_epoch=0), 4000)
    leader.handle(fetch(6, 1, epoch=1, offset=0, last_epoch=0), 4000)  # an observer
    times_out_at(leader, 5500, LEADER, RESIGNED)


def test_check_quorum_after_voter_set_changes():
    """LeaderStateTest.testCheckQuorumAfterVoterSetChanges: with a fourth voter one fetch no longer resets
    the timer, two do; once the leader is out of the voter set it does not count itself, so one fetch of
    2, 3, 4 is not a majority."""
    leader = elected()  # voters 1, 2, 3 at 1000
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1010)  # commits; resets: expires at 4010
    leader.handle(fetch(4, 1, epoch=1, offset=1, last_epoch=1), 1020)
    leader.handle(alter([1, 2, 3, 4]), 1030)
    assert leader.voters == (1, 2, 3, 4)
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 2500)  # one of three others: no reset
    leader.tick(4010 - 1)
    assert leader.state == LEADER
    leader.handle(fetch(4, 1, epoch=1, offset=2, last_epoch=1), 4000)  # two: reset, expires at 7000
    leader.tick(4010)
    assert leader.state == LEADER
    leader.handle(alter([2, 3, 4]), 4100)
    leader.tick(4101)
    assert leader.voters == (2, 3, 4) and leader.state == LEADER  # the leader is out, not committed yet
    leader.handle(fetch(2, 1, epoch=1, offset=2, last_epoch=1), 5000)  # one of three: no reset
    times_out_at(leader, 7000, LEADER, RESIGNED)


def test_check_quorum_with_one_voter():
    """LeaderStateTest.testCheckQuorumWithOneVoter: a sole voter has no check-quorum timer; an observer's
    fetch changes nothing."""
    n = sole_voter()
    n.handle(fetch(9, 1, epoch=1, offset=1, last_epoch=1), 1100)
    n.tick(1000 + 10 * 3000)
    assert n.state == LEADER


def test_clear_inactive_observers_ignores_leader():
    """LeaderStateTest.testClearInactiveObserversIgnoresLeader (Kafka 3.8; gone since 3.9, KAFKA-16953): an observer is dropped 300 s after its last
    fetch; a leader that removed itself is shown among the observers, as of now, and never dropped."""
    leader = elected(voters=(1, 2))
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1100)  # high watermark 1
    leader.handle(fetch(10, 1, epoch=1, offset=1, last_epoch=1), 1500)
    assert [r["ReplicaId"] for r in describe(leader, 2000)["Observers"]] == [10]
    now = keep_alive(leader, 2000, 1500 + OBSERVER_SESSION_TIMEOUT_MS)
    assert describe(leader, 1500 + OBSERVER_SESSION_TIMEOUT_MS)["Observers"] == []
    leader.handle(alter([2]), now)  # the leader removes itself: a VotersRecord at 1
    assert leader.voters == (2,) and leader.state == LEADER
    end = keep_alive(leader, now + 1, now + OBSERVER_SESSION_TIMEOUT_MS + 10)  # 2 stays at 1: not committed
    d = describe(leader, end)
    assert leader.state == LEADER and [r["ReplicaId"] for r in d["CurrentVoters"]] == [2]
    assert d["Observers"] == [{"ReplicaId": 1, "LogEndOffset": 2, "LastFetchTimestamp": end, "LastCaughtUpTimestamp": end}]


def test_describe_quorum_with_voters_and_observers():
    """LeaderStateTest.testDescribeQuorumWithVotersAndObservers (Kafka 3.8; gone since 3.9, KAFKA-16953): 2, removed, is an observer whose progress
    does not move the high watermark; added again, it is a voter whose progress does."""
    leader = elected()  # voters 1, 2, 3
    leader.handle(fetch(3, 1, epoch=1, offset=1, last_epoch=1), 1100)  # high watermark 1
    leader.handle(fetch(2, 1, epoch=1, offset=1, last_epoch=1), 1150)
    leader.handle(alter([1, 3]), 1200)  # a VotersRecord at 1 removes 2
    for i in range(3):
        leader.append(i, 1201)  # end 5
    d = describe(leader, 1300)
    assert d["HighWatermark"] == 1 and [r["ReplicaId"] for r in d["CurrentVoters"]] == [1, 3]
    assert [(r["ReplicaId"], r["LogEndOffset"]) for r in d["Observers"]] == [(2, 1)]
    leader.handle(fetch(2, 1, epoch=1, offset=5, last_epoch=1), 1400)
    assert leader.high_watermark == 1  # an observer's progress does not count
    leader.handle(fetch(3, 1, epoch=1, offset=2, last_epoch=1), 1500)  # commits the removal
    leader.handle(alter([1, 2, 3]), 1600)  # 2 is caught up: a VotersRecord at 5 adds it back
    assert leader.voters == (1, 2, 3) and leader.high_watermark == 5
    d = describe(leader, 1700)
    assert d["Observers"] == [] and voter_row(d, 2) == (5, 1400)


def test_no_op_for_negative_remote_node_id():
    """LeaderStateTest.testNoOpForNegativeRemoteNodeId (Kafka 3.8; gone since 3.9, KAFKA-16953): a fetch from replica -1 leaves no observer row."""
    leader = sole_voter()
    leader.handle(fetch(-1, 1, epoch=1, offset=0, last_epoch=0), 1100)
    assert describe(leader, 1200)["Observers"] == []


def test_grant_vote():
    """LeaderStateTest.testGrantVote: a leader grants no vote in its epoch."""
    leader = elected(voters=(1, 2, 3, 4))
    for candidate in (2, 3, 4):
        for last_offset in (0, 9):
            assert only(leader.handle(vote(candidate, 1, 1, 0, last_offset), 1010), "VoteResponse")["VoteGranted"] is False
    assert leader.state == LEADER


def test_begin_quorum_epoch_timer():
    """LeaderStateTest.testBeginQuorumEpochTimer: BeginQuorumEpoch at once when elected, then each
    fetch.timeout / 2 (1 s)."""
    n = RaftNode(1, (1, 2), CFG)
    n.tick(0)
    request = sent(n.tick(1000), "VoteRequest")
    out = n.handle(answer(request, "VoteResponse", ErrorCode=0, VoteGranted=True, LeaderId=-1, LeaderEpoch=1), 1005)
    assert n.state == LEADER and destinations(out, "BeginQuorumEpochRequest") == [2]
    assert n.tick(1005 + 1000 - 1) == []
    assert destinations(n.tick(1005 + 1000), "BeginQuorumEpochRequest") == [2]


def voter_row(d: dict, replica: int) -> tuple[int, int]:
    row = next(r for r in d["CurrentVoters"] if r["ReplicaId"] == replica)
    return row["LogEndOffset"], row["LastFetchTimestamp"]
