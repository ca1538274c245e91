"""A voter change right after an election must not lose committed entries (issue 14, point 1).

The constructed case: voters 1-4, observer 5. Leader 1 (epoch 1) adds 5 while cut off with it, so that
change stays uncommitted. Voters 2, 3, 4 elect 2 in epoch 2; 2 at once removes 4, a change whose new
majority ({2, 3} of {1, 2, 3}) shares no node with the majority ({1, 4, 5} of {1, 2, 3, 4, 5}) of 1's
uncommitted change. Then 2 and 3 are cut off and 1, 4, 5 elect 1 again. Unless 2 first commits an entry
of its own epoch (it cannot: 4 never gets its entries), two majorities commit different entries at the
same offsets. ``SafetyChecker`` (the simulator's) sees it, and Kafka's rule prevents it.
"""

from __future__ import annotations

from kraftlake.raft.config import RaftConfig
from kraftlake.raft.node import LEADER, RaftNode
from kraftlake.sim.quorum import SafetyChecker, Violation

ADMIN = -1
NEVER = 10_000_000  # a timeout that does not fire in this run


def config(election_ms: int = NEVER, fetch_ms: int = NEVER) -> RaftConfig:
    return RaftConfig(cluster_id="c", election_timeout_ms=election_ms, election_jitter_max_ms=0,
                      election_backoff_max_ms=100, fetch_timeout_ms=fetch_ms, request_timeout_ms=300,
                      retry_backoff_ms=20)


class Net:
    """Nodes and what reaches whom, decided by the test; messages arrive at once, in order."""

    def __init__(self, nodes: dict[int, RaftNode]) -> None:
        self.nodes, self.now = nodes, 0
        self.queue: list[dict] = []
        self.blocked = lambda m: False
        self.violations: list[Violation] = []
        self.checker = SafetyChecker(self.violations)

    def send(self, msgs: list[dict]) -> None:
        self.queue.extend(m for m in msgs if m["destination"] != ADMIN)

    def run(self, until: int, step: int = 5) -> None:
        while self.now < until:
            self.now += step
            for n in self.nodes.values():
                self.send(n.tick(self.now))
            while self.queue:
                m = self.queue.pop(0)
                if not self.blocked(m):
                    self.send(self.nodes[m["destination"]].handle(m, self.now))
            self.checker.check(self.now, self.nodes, set())

    def admin(self, node_id: int, target: list[int]) -> None:
        self.send(self.nodes[node_id].handle({"type": "AlterQuorumRequest", "source": ADMIN,
                                               "destination": node_id, "data": {"TargetVoters": target}}, self.now))


def play() -> Net:
    voters = (1, 2, 3, 4)
    net = Net({1: RaftNode(1, voters, config(election_ms=100, fetch_ms=2000)),
               2: RaftNode(2, voters, config(fetch_ms=1000)),
               3: RaftNode(3, voters, config()), 4: RaftNode(4, voters, config()),
               5: RaftNode(5, voters, config(election_ms=100, fetch_ms=2000))})  # 5: an observer
    net.run(300)
    assert net.nodes[1].state == LEADER and net.nodes[1].epoch == 1
    net.nodes[1].append("x", net.now)
    net.run(500)
    assert all(n.high_watermark == 2 for n in net.nodes.values())  # "x" committed everywhere

    # 1 and 5 are cut off from 2, 3, 4; 1 adds 5, which only 1 and 5 hold
    side = {1: "a", 5: "a", 2: "b", 3: "b", 4: "b"}
    net.blocked = lambda m: side[m["source"]] != side[m["destination"]]
    net.admin(1, [1, 2, 3, 4, 5])
    net.run(600)
    assert net.nodes[1].voters == (1, 2, 3, 4, 5) and net.nodes[5].voters == (1, 2, 3, 4, 5)

    # 2 times out and wins epoch 2 with 3 and 4; of 2's messages, 4 gets its vote request only
    net.blocked = lambda m: (side[m["source"]] != side[m["destination"]]
                             or (m["source"] == 2 and m["destination"] == 4 and m["type"] != "VoteRequest"))
    elected = net.nodes[2]
    while elected.state != LEADER:
        net.run(net.now + 5)
    assert elected.epoch == 2 and net.now < 2000 and net.nodes[4].log.end_offset == 2
    net.admin(2, [1, 2, 3])  # remove 4 at once
    net.run(net.now + 500)
    elected.append("y", net.now)
    net.run(net.now + 500)

    # 2 and 3 go away; 1, 4, 5 meet
    side = {1: "a", 5: "a", 4: "a", 2: "b", 3: "c"}
    net.blocked = lambda m: side[m["source"]] != side[m["destination"]]
    net.run(net.now + 12_000)
    return net


def test_a_new_leader_changes_the_voters_only_after_committing_in_its_epoch():
    net = play()
    assert net.violations == []
    two = net.nodes[2]
    assert two.voters == (1, 2, 3, 4) and two.target_voters == (1, 2, 3)  # the removal waited
    leader = next(n for n in net.nodes.values() if n.state == LEADER)
    assert leader.node_id == 1 and leader.epoch >= 3  # 1, 4 and 5 went on, losing nothing committed


def test_without_the_rule_two_majorities_commit_different_entries(monkeypatch):
    """The same run with the rule switched off: the checker reports the committed entries lost."""
    monkeypatch.setattr(RaftNode, "_voter_change_allowed", lambda self: True)
    net = play()
    assert "committed_lost" in {v.rule for v in net.violations}, net.violations[:3]


# --------------------------------------------------------------------- the simulator's voter-change mix
def test_the_voter_change_mix_keeps_raft_safety_over_many_seeds():
    from collections import Counter

    from kraftlake.sim.quorum import VOTER_CHANGE_MIX, simulate
    seen: Counter = Counter()
    for seed in range(120):
        r = simulate(seed, VOTER_CHANGE_MIX)
        assert r.ok, (seed, r.violations[:3])
        seen.update(e["event"] for e in r.events)
    # the hard cases happened: voters changed, also right after elections, under partitions
    assert seen["voters_changed"] > 50 and seen["leader_elected"] > 240 and seen["truncation"] > 0
    assert seen["replica_failed"] == 0  # no leader ever asked a replica to drop committed entries


def test_without_the_rule_the_mix_loses_committed_entries(monkeypatch):
    """Seed 798 of the mix, with a leader allowed to change the voters before it commits in its epoch:
    the checker reports committed entries lost, and followers asked to truncate them refuse and fail
    (point 2 of the issue) instead of dropping them."""
    from kraftlake.sim.quorum import VOTER_CHANGE_MIX, simulate
    monkeypatch.setattr(RaftNode, "_voter_change_allowed", lambda self: True)
    r = simulate(798, VOTER_CHANGE_MIX)
    assert {"leader_completeness", "committed_lost"} & {v.rule for v in r.violations}
    failed = [e for e in r.events if e["event"] == "replica_failed"]
    assert failed and all("below its high watermark" in e["detail"] for e in failed)


# ------------------------------------------------------------ point 2: never truncate committed entries
def test_a_follower_asked_to_truncate_committed_entries_fails_and_keeps_its_log():
    from kraftlake.raft.log import LogEntry, RaftLog
    from kraftlake.raft.node import FAILED, message
    from kraftlake.raft.replica import Replica
    f = RaftNode(2, (1, 2, 3), config(), RaftLog([LogEntry(1, "a"), LogEntry(1, "b"), LogEntry(1, "c")]))
    f.tick(0)
    f.handle(message("BeginQuorumEpochRequest", 1, 2, ClusterId="c", VoterId=2, LeaderId=1, LeaderEpoch=2), 10)
    f.high_watermark = 3  # it had seen all three committed
    before = list(f.log.entries)
    out = f.handle(message("FetchResponse", 1, 2, ErrorCode=0, HighWatermark=3, Records=[],
                           DivergingEpoch={"Epoch": 1, "EndOffset": 1},
                           CurrentLeader={"LeaderId": 1, "LeaderEpoch": 2}), 20)
    assert out == [] and f.state == FAILED and f.log.entries == before and f.high_watermark == 3
    assert "below its high watermark 3" in f.failed
    assert f.tick(100_000) == [] and f.next_deadline() is None  # it stays stopped, answering nothing
    replica = Replica(2, node=f, last_offset=7, last_time=20)
    [(table, row)] = replica.state_rows()
    assert (table, row["state"], row["log_end_offset"]) == ("quorum_state", "failed", 3)


def test_the_checker_reports_a_log_truncated_below_its_high_watermark():
    """What the project did before: truncate anyway, leaving the high watermark above the log end. The
    simulator's checker calls that a lost committed entry."""
    from kraftlake.raft.log import LogEntry, RaftLog
    violations: list[Violation] = []
    checker = SafetyChecker(violations)
    n = RaftNode(2, (1, 2, 3), config(), RaftLog([LogEntry(1, "a"), LogEntry(1, "b"), LogEntry(1, "c")]))
    n.high_watermark = 3
    checker.check(0, {2: n}, set())
    assert violations == []
    n.log.truncate_to(1)
    checker.check(1, {2: n}, set())
    assert [v.rule for v in violations] == ["committed_lost"]
