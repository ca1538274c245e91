"""A deterministic, seeded simulation of a KRaft metadata quorum (KIP-595) in event time.

N voters (and M observers) run ``kraftlake.raft.RaftNode`` over a network that loses, delays, duplicates and reorders
messages, is partitioned and healed, and whose nodes crash and restart from their durable state (the
``quorum-state`` file and the log).  After every step the checker asserts Raft's safety properties:

- election safety: at most one leader per epoch;
- log matching: two logs with an entry of the same epoch at the same offset agree on everything up to it;
- leader completeness: every leader's log holds every committed entry;
- committed entries are never lost: each node's log below its high watermark is the committed prefix;
- the high watermark of a node (per incarnation) never goes backwards.

The same seed always gives the same run: one ``random.Random(seed)`` drives the network and the faults,
and every node's jitter comes from its own RNG seeded by (seed, node id).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from dataclasses import dataclass, field

from kraftlake.raft import LEADER, LogEntry, RaftConfig, RaftLog, RaftNode


@dataclass(frozen=True)
class SimConfig:
    voters: int = 3
    observers: int = 0
    duration_ms: int = 20_000
    step_ms: int = 10
    loss: float = 0.05
    duplicate: float = 0.02
    min_delay_ms: int = 1
    max_delay_ms: int = 30
    partition_every_ms: int = 4_000  # mean time between partitions
    partition_ms: int = 3_000  # mean length of one
    crash_every_ms: int = 6_000  # mean time between crashes
    down_ms: int = 2_000  # mean downtime
    append_every_ms: int = 50
    resign_every_ms: int = 8_000  # mean time between graceful resignations of a leader (EndQuorumEpoch)
    log_check_every_ms: int = 100  # log matching is checked every this often (it is quadratic)
    raft: RaftConfig = field(default_factory=lambda: RaftConfig(cluster_id="sim", election_timeout_ms=500,
                                                                election_backoff_max_ms=500, fetch_timeout_ms=1000,
                                                                request_timeout_ms=300))


@dataclass
class Violation:
    time_ms: int
    rule: str
    detail: str


@dataclass
class SimResult:
    seed: int
    violations: list[Violation]
    leaders: dict[int, int]  # epoch -> leader
    committed: int  # length of the committed prefix at the end
    messages: int
    events: list[dict]

    @property
    def ok(self) -> bool:
        return not self.violations


class Simulation:
    def __init__(self, seed: int, config: SimConfig = SimConfig()) -> None:
        self.seed, self.cfg = seed, config
        self.rng = random.Random(seed)
        self.voter_ids = tuple(range(1, config.voters + 1))
        self.ids = tuple(range(1, config.voters + config.observers + 1))
        self.raft_cfg = dataclasses.replace(config.raft, seed=seed)
        self.nodes: dict[int, RaftNode] = {i: RaftNode(i, self.voter_ids, self.raft_cfg) for i in self.ids}
        self.down: dict[int, int] = {}  # node -> restart time
        self.saved: dict[int, tuple[dict, list[LogEntry]]] = {}
        self.group: dict[int, int] = {i: 0 for i in self.ids}
        self.heal_at: int | None = None
        self.queue: list[tuple[int, int, dict]] = []
        self.seq = 0
        self.violations: list[Violation] = []
        self.leaders: dict[int, int] = {}
        self.committed: list[LogEntry] = []
        self.commit_epoch: list[int] = []  # the epoch in which each committed offset was first seen committed
        self.hw_seen: dict[int, int] = {}
        self.appended = 0
        self.messages = 0
        self.events: list[dict] = []
        self.seen_events: dict[int, int] = {}
        self.checked: dict[int, tuple] = {}  # node -> what its log and hw were when last checked

    # ----------------------------------------------------------------------------------- network
    def _send(self, msgs: list[dict], now: int) -> None:
        for m in msgs:
            self.messages += 1
            if self.rng.random() < self.cfg.loss:
                continue
            copies = 2 if self.rng.random() < self.cfg.duplicate else 1
            for _ in range(copies):
                self.seq += 1
                at = now + self.rng.randint(self.cfg.min_delay_ms, self.cfg.max_delay_ms)
                heapq.heappush(self.queue, (at, self.seq, m))

    def _reachable(self, a: int, b: int) -> bool:
        return a not in self.down and b not in self.down and self.group[a] == self.group[b]

    def _faults(self, now: int) -> None:
        step = self.cfg.step_ms
        if self.heal_at is not None and now >= self.heal_at:
            self.group = {i: 0 for i in self.ids}
            self.heal_at = None
        elif self.heal_at is None and self.rng.random() < step / self.cfg.partition_every_ms:
            self.group = {i: self.rng.randrange(2) for i in self.ids}
            self.heal_at = now + self.rng.randint(1, 2 * self.cfg.partition_ms)
        for i, back in list(self.down.items()):
            if now >= back:
                durable, entries = self.saved.pop(i)
                del self.down[i]
                self.nodes[i] = RaftNode.restore(i, self.voter_ids, self.raft_cfg, RaftLog(entries), durable, now)
                self.hw_seen[i] = self.nodes[i].high_watermark
                self.seen_events[i] = 0
                self.checked.pop(i, None)
        if not self.down and self.rng.random() < step / self.cfg.crash_every_ms:
            i = self.rng.choice(self.ids)
            n = self.nodes[i]
            self.events.extend(n.events)
            self.saved[i] = (n.durable_state(), list(n.log.entries))  # fsynced: quorum-state and log
            self.down[i] = now + self.rng.randint(1, 2 * self.cfg.down_ms)

    # -------------------------------------------------------------------------------------- run
    def run(self) -> SimResult:
        now = 0
        next_append = self.cfg.append_every_ms
        while now <= self.cfg.duration_ms:
            self._faults(now)
            while self.queue and self.queue[0][0] <= now:
                _, _, m = heapq.heappop(self.queue)
                if self._reachable(m["source"], m["destination"]):
                    self._send(self.nodes[m["destination"]].handle(m, now), now)
            for i in self.ids:
                if i not in self.down:
                    self._send(self.nodes[i].tick(now), now)
                    if self.nodes[i].state == LEADER and \
                            self.rng.random() < self.cfg.step_ms / self.cfg.resign_every_ms:
                        self._send(self.nodes[i].resign(now), now)
            if now >= next_append:
                next_append = now + self.cfg.append_every_ms
                for i in self.ids:
                    n = self.nodes[i]
                    if i not in self.down and n.state == LEADER:
                        self.appended += 1
                        n.append(f"{i}:{n.epoch}:{self.appended}", now)
            self._check(now)
            now += self.cfg.step_ms
        for n in self.nodes.values():
            self.events.extend(n.events)
        return SimResult(self.seed, self.violations, dict(self.leaders), len(self.committed), self.messages,
                         self.events)

    # ---------------------------------------------------------------------------------- checker
    def _violate(self, now: int, rule: str, detail: str) -> None:
        self.violations.append(Violation(now, rule, detail))

    def _check(self, now: int) -> None:
        live = {i: n for i, n in self.nodes.items() if i not in self.down}
        for i, n in live.items():
            new = n.events[self.seen_events.get(i, 0):]
            self.seen_events[i] = len(n.events)
            for e in new:
                if e["event"] == "leader_elected":
                    other = self.leaders.setdefault(e["epoch"], i)
                    if other != i:
                        self._violate(now, "election_safety", f"epoch {e['epoch']}: leaders {other} and {i}")
        # committed prefix: grows from any node's high watermark, which must agree with it
        for i, n in live.items():
            hw = n.high_watermark
            if hw < self.hw_seen.get(i, 0):
                self._violate(now, "high_watermark_monotonic", f"node {i}: {self.hw_seen[i]} -> {hw}")
            self.hw_seen[i] = hw
            entries = n.log.entries
            sig = (hw, len(entries), entries[-1] if entries else None, len(self.committed))
            if self.checked.get(i) == sig:
                continue
            self.checked[i] = sig
            if len(entries) < hw:
                self._violate(now, "committed_lost", f"node {i}: log end {len(entries)} below its hw {hw}")
                continue
            k = min(hw, len(self.committed))
            if entries[:k] != self.committed[:k]:
                self._violate(now, "committed_lost", f"node {i}: committed entries below {k} differ")
            elif hw > len(self.committed):
                self.commit_epoch.extend([n.epoch] * (hw - len(self.committed)))
                self.committed = list(entries[:hw])
        # leader completeness: a leader of epoch E holds every entry committed in an epoch before E
        for i, n in live.items():
            if n.state == LEADER:
                log = n.log.entries
                if log[:len(self.committed)] == self.committed:
                    continue
                for o, (entry, epoch) in enumerate(zip(self.committed, self.commit_epoch)):
                    if epoch < n.epoch and (o >= len(log) or log[o] != entry):
                        self._violate(now, "leader_completeness",
                                      f"leader {i} of epoch {n.epoch} misses offset {o}, committed in epoch {epoch}")
                        break
        if now % self.cfg.log_check_every_ms:
            return
        logs = [(i, n.log.entries) for i, n in live.items()] + \
               [(i, saved[1]) for i, saved in self.saved.items()]
        for x in range(len(logs)):
            for y in range(x + 1, len(logs)):
                (i, a), (j, b) = logs[x], logs[y]
                for k in range(min(len(a), len(b)) - 1, -1, -1):
                    if a[k].epoch == b[k].epoch:
                        if a[:k + 1] != b[:k + 1]:
                            self._violate(now, "log_matching", f"nodes {i} and {j} agree on the epoch at {k} "
                                                               f"but not on the log before it")
                        break


def simulate(seed: int, config: SimConfig = SimConfig()) -> SimResult:
    return Simulation(seed, config).run()


__all__ = ["SimConfig", "SimResult", "Simulation", "Violation", "simulate"]
