"""The metadata quorum as the KIP-595 *draft* describes it (ADR 0012), sans-IO like ``RaftNode``.

Kafka shipped static voters and a cluster id from ``kafka-storage.sh format``; the draft had a node find
the quorum by gossip and the first leader make up the cluster id. ``DraftNode`` is Kafka's Raft node
(elections, replication, the high watermark, one voter change at a time) with what the draft adds, each
rule under the draft's section:

- *DiscoverBrokers* (FindQuorum in earlier revisions): a node gives its own connection information in the
  request and learns the leader, epoch, voters, cluster id and everyone's connection information from the
  answer; its cache only moves forward (a higher leader epoch; for a node's connection, a later boot
  timestamp).
- *Bootstrapping*: a node restarted from ``quorum-state`` and its log goes on from them; a fresh one asks
  ``bootstrap.servers``; with no answer (or none configured) it falls back to ``quorum.voters``: listed
  there, it promotes itself to voter, and it stands for election only once it knows a majority of the
  voters it expects.
- *Cluster Bootstrapping*: the first leader writes a ``VoterAssignmentMessage`` with the voters and a
  ClusterId it generates; until a node knows a committed one it checks no cluster id, from then on it
  refuses Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchQuorumRecords and DiscoverBrokers requests of another
  cluster (``INCONSISTENT_CLUSTER_ID``).
- *FetchQuorumRecords*: the draft's name of the replication fetch (the node's Fetch logic, renamed on
  the wire).
- *Leader Progress Timeout*: a leader not fetched from by a majority for ``quorum.fetch.timeout.ms`` asks
  random nodes with DiscoverBrokers, and steps down once it hears of a newer epoch (it does not resign
  on its own, as Kafka's does).
- *Quorum Reassignment*: AlterQuorum's voter changes are VoterAssignmentMessages.

Connection information is modelled, not used to connect: a node reaches another by id, and the cache
decides what it knows (which expected voters count towards the majority it waits for, whom it asks).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from kraftlake.metadata.uuids import from_bytes
from kraftlake.raft.config import DRAFT, RaftConfig, parse_voters
from kraftlake.raft.log import RaftLog
from kraftlake.raft.node import (FAILED, INCONSISTENT_CLUSTER_ID, LEADER, NO_LEADER, NONE, UNATTACHED, VOTED,
                                 RaftNode, message, record)

VOTER_ASSIGNMENT = "VoterAssignmentMessage"
PORT = 9093  # every simulated node listens on it, at host "node-<id>"
# Rounds of DiscoverBrokers to bootstrap.servers without an answer before falling back to quorum.voters.
BOOTSTRAP_ROUNDS = 3
# The wire names of the draft's fetch, and the node's names of the same messages.
WIRE = {"FetchRequest": "FetchQuorumRecordsRequest", "FetchResponse": "FetchQuorumRecordsResponse"}
NODE = {v: k for k, v in WIRE.items()}


def voter_assignment(cluster_id: str, voters: Iterable[int], timestamp: int) -> dict:
    """The draft's VoterAssignmentMessage: the voters in effect from its offset, and the cluster's id."""
    return record(VOTER_ASSIGNMENT, {"ClusterId": cluster_id, "Voters": [{"VoterId": v} for v in sorted(voters)],
                                     "TargetVoters": None}, timestamp)


def node_class(config: RaftConfig) -> type[RaftNode]:
    """The node of the configured protocol."""
    return DraftNode if config.protocol == DRAFT else RaftNode


class DraftNode(RaftNode):
    """A quorum node under the KIP-595 draft: Kafka's node, plus discovery, bootstrap and the cluster id."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.expected_voters = self.bootstrap_voters  # quorum.voters: read for bootstrapping only
        # a node restarted (with a log or an epoch) that quorum.voters lists is a voter of them again
        self.promoted = self.node_id in self.expected_voters and (self.log.end_offset > 0 or self.epoch > 0)
        self.known_cluster_id: str | None = None  # committed (in its log, or told by a node that has it)
        self.brokers: dict[int, list] = {}  # gossip cache: id -> [host, port, boot timestamp]
        self.gossip: list = [-1, NO_LEADER, []]  # the newest quorum heard of: epoch, leader, voters
        self._bootstrap_rounds = -1  # DiscoverBrokers rounds to bootstrap.servers unanswered; -1: not asking
        self._next_discover_ms: int | None = None
        self._zombie = False
        self._discover_inflight: dict[int, int] = {}  # DiscoverBrokers in flight: destination -> CorrelationId
        self._refresh_voters()

    # ------------------------------------------------------------------------------- state
    _DRAFT_FIELDS = ("expected_voters", "promoted", "known_cluster_id", "brokers", "gossip", "_bootstrap_rounds",
                     "_next_discover_ms", "_zombie")

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["draft"] = {name: getattr(self, name) for name in self._DRAFT_FIELDS}
        d["draft"]["brokers"] = sorted([r, *info] for r, info in self.brokers.items())
        d["draft"]["discover_inflight"] = sorted([r, c] for r, c in self._discover_inflight.items())
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], config: RaftConfig) -> RaftNode:
        node = super().from_dict(d, config)
        for name in cls._DRAFT_FIELDS:
            setattr(node, name, d["draft"][name])
        node.expected_voters = tuple(node.expected_voters)
        node.brokers = {row[0]: list(row[1:]) for row in d["draft"]["brokers"]}
        node._discover_inflight = {r: c for r, c in d["draft"]["discover_inflight"]}
        node._refresh_voters()
        return node

    def durable_state(self) -> dict:
        """The draft's quorum-state keeps the cluster id beside the epoch and vote."""
        return {**super().durable_state(), "cluster_id": self.known_cluster_id}

    @classmethod
    def restore(cls, node_id: int, voters: Iterable[int], config: RaftConfig, log: RaftLog,
                durable: Mapping[str, Any], now_ms: int) -> RaftNode:
        """Bootstrapping, first case: quorum-state (with the cluster id) and the log are there; its
        connection information has a new boot timestamp."""
        node = super().restore(node_id, voters, config, log, durable, now_ms)
        assert isinstance(node, DraftNode)
        node.known_cluster_id = durable.get("cluster_id")
        node._boot(now_ms)
        return node

    # ------------------------------------------------------------------------------ queries
    @property
    def cluster_id(self) -> str | None:
        return self.known_cluster_id

    def _log_cluster_id(self, committed: bool = True) -> str | None:
        """The ClusterId of the first VoterAssignmentMessage in the log (below the high watermark if
        ``committed``)."""
        end = self.high_watermark if committed else self.log.end_offset
        for entry in self.log.entries[:end]:
            if isinstance(entry.value, dict) and entry.value.get("type") == VOTER_ASSIGNMENT:
                return entry.value["data"]["ClusterId"]
        return None

    def _refresh_voters(self) -> None:
        """The voters of the last VoterAssignmentMessage in the log; before one, quorum.voters for a node
        promoted from them, else the voters gossip told (never itself: a node becomes a voter by the log).
        (``RaftNode.__post_init__`` calls it before this class's fields exist: hence the getattr.)"""
        latest = self.log.latest_voters()
        if latest is not None:
            self.voters = latest[0]
        elif getattr(self, "promoted", False):
            self.voters = self.expected_voters
        else:
            gossip = getattr(self, "gossip", None)
            self.voters = tuple(sorted(v for v in (gossip[2] if gossip else ()) if v != self.node_id))

    def _majority_known(self) -> bool:
        return len([v for v in self.voters if v in self.brokers]) >= self.majority

    def _needs_discovery(self) -> bool:
        if not self._started or self.state == FAILED:
            return False
        if self.state == LEADER:
            return self._zombie
        if self._bootstrap_rounds >= 0 or not self.voters:
            return True
        return self.is_voter and self.state in (UNATTACHED, VOTED) and not self._majority_known()

    def next_deadline(self) -> int | None:
        base = super().next_deadline()
        if self._needs_discovery() and self._next_discover_ms is not None:
            return self._next_discover_ms if base is None else min(base, self._next_discover_ms)
        return base

    def takes(self, type_: str) -> bool:
        return super().takes(NODE.get(type_, type_))

    # ------------------------------------------------------------------------------ bootstrap
    def _boot(self, now: int) -> None:
        self.brokers[self.node_id] = [f"node-{self.node_id}", PORT, now]
        self._next_discover_ms = now

    def _start(self, now: int, out: list[dict]) -> None:
        """Bootstrapping of a fresh node: ask bootstrap.servers, or fall back to quorum.voters at once."""
        super()._start(now, out)
        self._boot(now)
        servers = [s for s in parse_voters(self.config.bootstrap_servers) if s != self.node_id]
        if servers:
            self._bootstrap_rounds = 0
        else:
            self._fall_back(now)
        self._poll(now, out)

    def _fall_back(self, now: int) -> None:
        """No bootstrap server answered: quorum.voters decides. A node listed there is a voter of them."""
        self._bootstrap_rounds = -1
        if self.node_id in self.expected_voters and self.log.latest_voters() is None:
            self.promoted = True
            self._refresh_voters()
            self.note(now, "promoted_to_voter", expected_voters=list(self.expected_voters))
            if self.voters == (self.node_id,) and self.state == UNATTACHED:
                self._deadline = now  # a sole voter stands at once

    def _poll_once(self, now: int, out: list[dict]) -> None:
        if self._needs_discovery() and self._next_discover_ms is not None and now >= self._next_discover_ms:
            self._discover(now, out)
        if self.state == LEADER and self._deadline is not None and now >= self._deadline:
            # Leader Progress Timeout: not fetched from by a majority for the fetch timeout. The draft's
            # leader does not resign: it asks around, and steps down when it hears of a newer epoch.
            if not self._zombie:
                self._zombie = True
                self.note(now, "zombie_leader_detected")
                self._next_discover_ms = now
                self._discover(now, out)
            self._deadline = now + self.config.fetch_timeout_ms
        if self.state in (UNATTACHED, VOTED) and self.is_voter and self._deadline is not None \
                and now >= self._deadline and not self._majority_known():
            # no election before a majority of the expected voters is known: wait another timeout
            self._deadline = now + self._election_timeout()
        super()._poll_once(now, out)

    def _discover(self, now: int, out: list[dict]) -> None:
        """One round of DiscoverBrokers: to bootstrap.servers while bootstrapping, to the expected voters
        not known yet, or (a zombie, or an observer that knows no quorum) to a random known node."""
        if self._bootstrap_rounds >= 0:
            if self._bootstrap_rounds >= BOOTSTRAP_ROUNDS:
                self._fall_back(now)
                if not self._needs_discovery():
                    return
            else:
                self._bootstrap_rounds += 1
        servers = [s for s in parse_voters(self.config.bootstrap_servers) if s != self.node_id]
        if self._bootstrap_rounds >= 0:
            targets = servers
        elif self.state != LEADER and self.voters and self.is_voter:
            targets = [v for v in self.voters if v not in self.brokers]
        else:
            known = sorted(set(self.brokers) | set(servers) | set(self.voters) | set(self.expected_voters))
            others = [b for b in known if b != self.node_id]
            targets = [others[self._rng.randrange(len(others))]] if others else []
        host, port, boot = self.brokers[self.node_id]
        for t in targets:
            out.append(message("DiscoverBrokersRequest", self.node_id, t, ClusterId=self.cluster_id,
                               ReplicaId=self.node_id, Host=host, Port=port, BootTimestamp=boot))
        self._next_discover_ms = now + self.config.request_timeout_ms

    def _learn_broker(self, broker: int, host: str, port: int, boot: int) -> None:
        """The gossip cache's rule for connections: only a later boot timestamp replaces one."""
        known = self.brokers.get(broker)
        if known is None or boot > known[2]:
            self.brokers[broker] = [host, port, boot]

    # ------------------------------------------------------------------------------ DiscoverBrokers
    def _on_DiscoverBrokersRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        if not self._valid_cluster_id(d.get("ClusterId")):
            out.append(self._discover_response(src, INCONSISTENT_CLUSTER_ID))
            return
        self._learn_broker(d["ReplicaId"], d["Host"], d["Port"], d["BootTimestamp"])
        out.append(self._discover_response(src, NONE))

    def _discover_response(self, destination: int, error: int) -> dict:
        known = self._quorum_view() if error == NONE else {"LeaderId": NO_LEADER, "LeaderEpoch": -1, "Voters": []}
        brokers = [] if error != NONE else [
            {"BrokerId": b, "Host": h, "Port": p, "BootTimestamp": t} for b, (h, p, t) in sorted(self.brokers.items())]
        return message("DiscoverBrokersResponse", self.node_id, destination, ErrorCode=error,
                       ClusterId=self.cluster_id if error == NONE else None, Brokers=brokers, **known)

    def _quorum_view(self) -> dict:
        """What this node answers of the quorum: its own leader and epoch, or the newer ones gossip told."""
        if self.gossip[0] > self.epoch:
            return {"LeaderId": self.gossip[1], "LeaderEpoch": self.gossip[0], "Voters": list(self.gossip[2])}
        return {"LeaderId": self.leader_id, "LeaderEpoch": self.epoch, "Voters": list(self.voters)}

    def _on_DiscoverBrokersResponse(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        if d["ErrorCode"] != NONE:
            return
        first = self._bootstrap_rounds >= 0
        self._bootstrap_rounds = -1
        for b in d["Brokers"]:
            self._learn_broker(b["BrokerId"], b["Host"], b["Port"], b["BootTimestamp"])
        if d.get("ClusterId") is not None and self.known_cluster_id is None:
            self.known_cluster_id = d["ClusterId"]
            self.note(now, "cluster_id_learned", cluster_id=d["ClusterId"], from_replica=src)
        epoch, leader, voters = d["LeaderEpoch"], d["LeaderId"], [int(v) for v in d["Voters"]]
        if epoch > self.gossip[0] or (epoch == self.gossip[0] and self.gossip[1] == NO_LEADER and leader >= 0):
            self.gossip = [epoch, leader, voters]  # monotonic: only a newer epoch (or its leader) replaces it
            self._refresh_voters()
        if first:
            self.note(now, "quorum_discovered", leader_id=leader, leader_epoch=epoch, voters=voters, from_replica=src)
        if epoch >= 0 and (leader >= 0 or epoch > self.epoch):
            self._handle_common_response(leader, epoch, now)  # a zombie steps down here

    # ------------------------------------------------------------------------------ the cluster id
    def _become_leader(self, now: int, out: list[dict]) -> None:
        """Cluster Bootstrapping: the first leader (no VoterAssignmentMessage in its log) generates the
        ClusterId and writes it with the voters."""
        super()._become_leader(now, out)
        self._zombie = False
        if self.state == LEADER and self._log_cluster_id(committed=False) is None:
            cluster_id = from_bytes(bytes(self._rng.randrange(256) for _ in range(16)))
            offset = self.log.append(self.epoch, voter_assignment(cluster_id, self.voters, now))
            self.note(now, "cluster_id_generated", cluster_id=cluster_id, voters=list(self.voters), offset=offset)
            self._maybe_update_high_watermark(now)
        self._learn_committed_cluster_id(now)

    def _learn_committed_cluster_id(self, now: int) -> None:
        if self.known_cluster_id is None:
            committed = self._log_cluster_id()
            if committed is not None:
                self.known_cluster_id = committed
                self.note(now, "cluster_id_committed", cluster_id=committed)

    def _maybe_update_high_watermark(self, now: int) -> None:
        super()._maybe_update_high_watermark(now)
        self._learn_committed_cluster_id(now)

    def _voters_entry(self, voters: tuple[int, ...], now: int) -> dict:
        return voter_assignment(self._log_cluster_id(committed=False) or "", voters, now)

    def _check_quorum_timeout(self) -> int:
        return self.config.fetch_timeout_ms  # the draft's leader progress timeout: the fetch timeout itself

    def _note_fetch(self, replica: int, now: int) -> None:
        before = self._deadline
        super()._note_fetch(replica, now)
        if self._deadline != before:
            self._zombie = False  # a majority fetches again

    # ------------------------------------------------------------------------------ the wire
    def handle(self, msg: Mapping[str, Any], now_ms: int) -> list[dict]:
        """FetchQuorumRecords is the node's Fetch under the draft's name; the rest is Kafka's node, but for
        the answers to DiscoverBrokers, expected by their own CorrelationIds (``_finish``)."""
        if msg["type"] in NODE:
            msg = {**msg, "type": NODE[msg["type"]]}
        elif msg["type"] == "DiscoverBrokersResponse" and msg.get("correlation_id") is not None:
            if self._discover_inflight.get(msg["source"]) != msg["correlation_id"]:
                return []  # a duplicate, or the answer to a request asked again since
            del self._discover_inflight[msg["source"]]
            msg = {k: v for k, v in msg.items() if k != "correlation_id"}
        return super().handle(msg, now_ms)

    def _finish(self, out: list[dict], request_cid: int | None) -> list[dict]:
        """Kafka's headers, and the draft's wire names. DiscoverBrokers is kept out of the Raft requests in
        flight: asking a voter around must not make its answer to a BeginQuorumEpoch or a fetch unexpected."""
        inflight = dict(self._inflight)
        out = super()._finish(out, request_cid)
        for m in out:
            if m["type"] == "DiscoverBrokersRequest":
                self._discover_inflight[m["destination"]] = m["correlation_id"]
            elif m["type"].endswith("Request"):
                inflight[m["destination"]] = m["correlation_id"]
            m["type"] = WIRE.get(m["type"], m["type"])
        self._inflight = inflight
        return out

    def _on_FetchResponse(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        super()._on_FetchResponse(src, d, now, out)
        self._learn_committed_cluster_id(now)


__all__ = ["DraftNode", "VOTER_ASSIGNMENT", "node_class", "voter_assignment"]
