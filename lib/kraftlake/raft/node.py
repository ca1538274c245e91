"""The metadata quorum's per-node Raft state machine (KIP-595), sans-IO.

``RaftNode`` is a pure state machine in the style of h11: it never reads a clock, never sleeps and
never touches a socket.  The caller feeds it events with their event time and sends what it returns::

    node = RaftNode(1, voters=[1, 2, 3], config=RaftConfig(cluster_id="c"))
    out = node.tick(now_ms)                 # timers: election timeout, fetch timeout, check quorum
    out = node.handle(message, now_ms)      # a request or a response addressed to this node
    offset = node.append(value, now_ms)     # leader only: append a record in the current epoch
    out = node.resign(now_ms)               # leader only: graceful resignation (EndQuorumEpoch)

A message is ``{"type": <Kafka RPC name>, "source": id, "destination": id, "data": {...}}``.  ``data``
holds the partition-level fields of the ``__cluster_metadata`` partition under Kafka's names
(``CandidateEpoch``, ``CandidateId``, ``LastOffsetEpoch``, ``LastOffset``, ``FetchOffset``,
``LastFetchedEpoch``, ``CurrentLeaderEpoch``, ``DivergingEpoch``, ``HighWatermark`` ...) plus the
request-level ones (``ClusterId``, ``ReplicaId``): there is one partition, so the Topics/Partitions
nesting of the wire format is flattened away.  Error codes are Kafka's (``schemas/error-codes.json``).

The rules follow Kafka's ``raft`` module, class by class (read for the facts, not copied):
``QuorumState`` / ``EpochState`` (the six states and their transitions), ``KafkaRaftClient``
(request validation order, vote granting, election backoff, EndQuorumEpoch successors),
``LeaderState.maybeUpdateHighWatermark`` (majority, epoch start offset, monotonic),
``ReplicatedLog.validateOffsetAndEpoch`` / ``truncateToEndOffset`` (divergence and truncation).
All randomness (election timeout jitter, backoff) comes from a RNG seeded by (config.seed, node id), so
the same inputs always give the same outputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kraftlake.metadata.errors import error_code
from kraftlake.raft.config import RaftConfig
from kraftlake.raft.log import LogEntry, RaftLog

UNATTACHED = "unattached"
VOTED = "voted"
CANDIDATE = "candidate"
LEADER = "leader"
FOLLOWER = "follower"
RESIGNED = "resigned"
# Not a Raft state: a replica that was asked to truncate committed entries stops (Kafka treats it as
# fatal), keeping its log for an operator to look at, until it is restarted.
FAILED = "failed"

NO_LEADER = -1
NO_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID: replica directories (KIP-853) are not modelled
# KafkaRaftClient.RETRY_BACKOFF_BASE_MS: the unit of the election backoffs.
RETRY_BACKOFF_BASE_MS = 100
# LeaderState.OBSERVER_SESSION_TIMEOUT_MS: an observer that has not fetched for this long is forgotten.
OBSERVER_SESSION_TIMEOUT_MS = 300_000

NONE = error_code("NONE")
FENCED_LEADER_EPOCH = error_code("FENCED_LEADER_EPOCH")
UNKNOWN_LEADER_EPOCH = error_code("UNKNOWN_LEADER_EPOCH")
NOT_LEADER_OR_FOLLOWER = error_code("NOT_LEADER_OR_FOLLOWER")
INCONSISTENT_CLUSTER_ID = error_code("INCONSISTENT_CLUSTER_ID")
INVALID_REQUEST = error_code("INVALID_REQUEST")
VOTER_NOT_FOUND = error_code("VOTER_NOT_FOUND")
INVALID_VOTER_KEY = error_code("INVALID_VOTER_KEY")

def message(type_: str, source: int, destination: int, **data: Any) -> dict:
    return {"type": type_, "source": source, "destination": destination, "data": data}


def record(type_: str, data: dict, timestamp: int) -> dict:
    """A log entry's value: a record with every field of its version 0, and its append time (which a
    Kafka batch keeps, and which tells apart two entries of one epoch)."""
    return {"type": type_, "data": data, "timestamp": timestamp}


def voters_record(voters: Iterable[int], timestamp: int) -> dict:
    """A VotersRecord control record (KIP-853's layout; directory ids and endpoints are not modelled)."""
    return record("VotersRecord", {"Version": 0, "Voters": [
        {"VoterId": v, "VoterDirectoryId": NO_DIRECTORY, "Endpoints": [],
         "KRaftVersionFeature": {"MinSupportedVersion": 0, "MaxSupportedVersion": 1}} for v in sorted(voters)]},
        timestamp)


@dataclass
class ReplicaProgress:
    """What the leader knows of a replica (``LeaderState.ReplicaState``)."""

    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    acknowledged: bool = False
    last_fetch_leader_end: int = -1  # the leader's log end offset when this replica last fetched


@dataclass
class RaftNode:
    node_id: int
    voters: tuple[int, ...]
    config: RaftConfig = field(default_factory=RaftConfig)
    log: RaftLog = field(default_factory=RaftLog)
    epoch: int = 0
    voted_for: int | None = None
    leader_id: int = NO_LEADER
    state: str = UNATTACHED
    high_watermark: int = 0
    events: list[dict] = field(default_factory=list)
    # The seed's AlterQuorum: the voter set the leader is moving to, one voter at a time (None: no change).
    target_voters: tuple[int, ...] | None = None
    failed: str | None = None  # why the replica stopped (state FAILED), None while it runs

    def __post_init__(self) -> None:
        self.voters = tuple(sorted(self.voters))
        self.bootstrap_voters = self.voters  # before any VotersRecord (Kafka: controller.quorum.voters)
        self._refresh_voters()
        self._rng = random.Random(f"{self.config.seed}:{self.node_id}")
        self._deadline: int | None = None  # election timeout / fetch timeout / check quorum
        self._backoff_until: int | None = None  # candidate backing off before the next epoch
        self._retries = 0
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._epoch_start_offset = 0
        self._progress: dict[int, ReplicaProgress] = {}
        self._check_quorum_fetchers: set[int] = set()
        self._next_begin_ms = 0
        self._next_fetch_ms: int | None = None
        self._preferred_successors: tuple[int, ...] = ()
        self._started = False
        self._cid = 0  # the last CorrelationId used
        # RequestManager: the request in flight to each node, by CorrelationId; only its answer is handled
        self._inflight: dict[int, int] = {}
        self._incoming_cid: int | None = None
        self._next_append_ms: int | None = None
        self._resign_unacked: set[int] = set()  # ResignedState: voters yet to answer EndQuorumEpoch
        self._next_resign_ms: int | None = None
        # an observer's next fetch goes to a voter other than this one (-1: any voter), to find the leader
        self._fetch_elsewhere: int | None = None

    # ------------------------------------------------------------------ construction / durable state
    @classmethod
    def restore(cls, node_id: int, voters: Iterable[int], config: RaftConfig, log: RaftLog,
                durable: Mapping[str, Any], now_ms: int) -> RaftNode:
        """A node restarting from its ``quorum-state`` (epoch, voted id, leader id) and its log, like
        ``QuorumState.initialize``: a former leader comes back resigned, a voter that voted for itself a
        candidate of the same epoch, one that voted for another voted, a follower following; a log with a
        later epoch than the file overrules it."""
        node = cls(node_id, tuple(voters), config, log, epoch=durable.get("epoch", 0))  # voters: the bootstrap set
        node._started = True
        if log.last_epoch > node.epoch:
            # QuorumState.initialize: a quorum-state older than the log (lost or damaged) is not trusted;
            # the replica starts unattached in the log's last epoch, with no vote and no leader
            node.epoch = log.last_epoch
            node._become_unattached(node.epoch, now_ms)
            return node
        leader = durable.get("leader_id", NO_LEADER)
        voted = durable.get("voted_for")
        node.voted_for = voted  # a vote survives the restart, whatever the state
        if leader == node_id:
            node._become_resigned(now_ms, ())  # its EndQuorumEpoch requests go out at the first poll
            node.leader_id = node_id
        elif leader != NO_LEADER:
            node._become_follower(leader, node.epoch, now_ms)
        elif voted == node_id and node.is_voter:
            # QuorumState.initialize: a voter that voted for itself is a candidate again, same epoch
            node.state, node.leader_id, node._retries = CANDIDATE, NO_LEADER, 1
            node._granted = {node_id}
            node._deadline = now_ms + node._election_timeout()
            node._next_fetch_ms = now_ms  # its vote requests go out at the first poll
        elif voted is not None:
            node.state = VOTED
            node._deadline = now_ms + node._election_timeout()
            node._next_fetch_ms = now_ms  # and it looks for the leader, as any unattached replica
        else:
            node._become_unattached(node.epoch, now_ms)
        return node

    # Private fields that are plain values, saved as they are by ``to_dict``.
    _SCALARS = ("_deadline", "_backoff_until", "_retries", "_epoch_start_offset", "_next_begin_ms", "_next_fetch_ms",
                "_started", "_cid", "_next_append_ms", "_next_resign_ms", "_fetch_elsewhere")

    def to_dict(self) -> dict:
        """The whole node, durable and soft state, as JSON-able values: the streaming job keeps one per
        replica in its state store, so a restarted query goes on exactly where it stopped. ``events``
        are not part of it (the driver drains them)."""
        version, internal, gauss = self._rng.getstate()
        return {
            "node_id": self.node_id, "bootstrap_voters": list(self.bootstrap_voters),
            "log": [[e.epoch, e.value] for e in self.log.entries], "epoch": self.epoch,
            "voted_for": self.voted_for, "leader_id": self.leader_id, "state": self.state,
            "high_watermark": self.high_watermark,
            "target_voters": None if self.target_voters is None else list(self.target_voters),
            "rng": [version, list(internal), gauss],
            "granted": sorted(self._granted), "rejected": sorted(self._rejected),
            "check_quorum_fetchers": sorted(self._check_quorum_fetchers),
            "preferred_successors": list(self._preferred_successors),
            "progress": [[r, p.end_offset, p.last_fetch_ms, p.last_caught_up_ms, p.acknowledged,
                          p.last_fetch_leader_end] for r, p in sorted(self._progress.items())],
            "resign_unacked": sorted(self._resign_unacked), "failed": self.failed,
            "inflight": sorted([d, c] for d, c in self._inflight.items()),
            **{name: getattr(self, name) for name in self._SCALARS},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], config: RaftConfig) -> RaftNode:
        node = cls(d["node_id"], tuple(d["bootstrap_voters"]), config, RaftLog(LogEntry(*e) for e in d["log"]),
                   epoch=d["epoch"], voted_for=d["voted_for"], leader_id=d["leader_id"], state=d["state"],
                   high_watermark=d["high_watermark"],
                   target_voters=None if d["target_voters"] is None else tuple(d["target_voters"]))
        version, internal, gauss = d["rng"]
        node._rng.setstate((version, tuple(internal), gauss))
        node._granted, node._rejected = set(d["granted"]), set(d["rejected"])
        node._check_quorum_fetchers = set(d["check_quorum_fetchers"])
        node._preferred_successors = tuple(d["preferred_successors"])
        node._progress = {row[0]: ReplicaProgress(*row[1:]) for row in d["progress"]}
        node._resign_unacked = set(d.get("resign_unacked", ()))
        node.failed = d.get("failed")
        node._inflight = {dst: cid for dst, cid in d.get("inflight", ())}
        for name in cls._SCALARS:
            setattr(node, name, d.get(name, getattr(node, name)))
        return node

    def durable_state(self) -> dict:
        """What Kafka writes to the ``quorum-state`` file (and the log, separately)."""
        return {"epoch": self.epoch, "voted_for": self.voted_for, "leader_id": self.leader_id}

    # ------------------------------------------------------------------------------------- queries
    @property
    def cluster_id(self) -> str | None:
        """The cluster id this node sends and checks: Kafka's comes from its configuration (meta.properties)."""
        return self.config.cluster_id

    def takes(self, type_: str) -> bool:
        """Whether ``type_`` is a message of this node's protocol."""
        return hasattr(self, "_on_" + type_)

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def next_deadline(self) -> int | None:
        """The earliest event time at which ``tick`` does something: exact, so that a driver can tick a
        node at its deadlines only and get the same run as one that ticks it all the time."""
        if not self._started or self.state == FAILED:
            return None
        s = self.state
        if s == CANDIDATE:
            timers = (self._backoff_until,) if self._backoff_until is not None else (self._deadline, self._next_fetch_ms)
        elif s == FOLLOWER:
            timers = (self._deadline, self._next_fetch_ms)
        elif s == LEADER:
            timers = (self._deadline, self._next_append_ms, self._next_begin_ms if len(self.voters) > 1 else None)
        elif s == RESIGNED:  # a voter stands for election, a removed leader becomes unattached
            timers = (self._deadline, self._next_resign_ms if self._resign_unacked else None)
        else:  # unattached, voted: a voter stands for election; both look for the leader
            timers = (self._deadline if self.is_voter else None,
                      self._next_fetch_ms if self._other_voters() else None)
        times = [t for t in timers if t is not None]
        return min(times) if times else None

    def replica_progress(self, now_ms: int | None = None) -> dict[int, ReplicaProgress]:
        """The leader's view of the replicas; as of ``now_ms``, without the observers it has forgotten."""
        if now_ms is not None:
            self._clear_inactive_observers(now_ms)
        return dict(self._progress)

    def elected_at(self) -> int:
        """When this leader was elected: its LeaderChangeMessage's time (a voter that has not fetched since
        has been behind since then)."""
        return self.log.entries[self._epoch_start_offset].value["timestamp"]

    def hw_known(self) -> bool:
        """A new leader knows no high watermark until an entry of its own epoch is committed
        (``LeaderState.highWatermark`` is empty until then); every other state reports what it has."""
        return self.state != LEADER or self.high_watermark > self._epoch_start_offset

    def _clear_inactive_observers(self, now: int) -> None:
        # LeaderState.clearInactiveObservers: observers silent for OBSERVER_SESSION_TIMEOUT_MS are dropped
        for r in [r for r, p in self._progress.items() if r not in self.voters and r != self.node_id
                  and p.last_fetch_ms >= 0 and now - p.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS]:
            del self._progress[r]

    # ----------------------------------------------------------------------------------- the API
    def tick(self, now_ms: int) -> list[dict]:
        out: list[dict] = []
        if not self._started:
            self._start(now_ms, out)
        if self.state == FAILED:
            return []
        self._poll(now_ms, out)
        return self._finish(out, None)

    def handle(self, msg: Mapping[str, Any], now_ms: int) -> list[dict]:
        """One message addressed to this node. A malformed one (a field missing or of the wrong type)
        is answered INVALID_REQUEST if it is a request and otherwise dropped, with a ``malformed_message``
        event: no message can stop a replica. A response other than the answer to the request in flight to
        its sender is dropped (``_response_expected``). A FAILED replica answers nothing."""
        out: list[dict] = []
        if not self._started:
            self._start(now_ms, out)
        handler = getattr(self, "_on_" + msg["type"], None)
        if handler is None:
            raise ValueError(f"not a quorum RPC: {msg['type']}")
        if self.state == FAILED:
            self.note(now_ms, "dropped_while_failed", message=msg["type"])
            return []
        self._incoming_cid = msg.get("correlation_id")
        if msg["type"].endswith("Request") or self._response_expected(msg["source"]):
            try:
                handler(msg["source"], msg["data"], now_ms, out)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                out = []
                self.note(now_ms, "malformed_message", message=msg["type"], error=repr(exc))
                if msg["type"].endswith("Request"):
                    out.append(self._error_response(msg["type"], msg["source"], INVALID_REQUEST))
        self._poll(now_ms, out)
        return self._finish(out, self._incoming_cid)

    def _start(self, now: int, out: list[dict]) -> None:
        """The first event of a fresh node (not restored): Kafka's node is unattached in its epoch."""
        self._started = True
        self._become_unattached(self.epoch, now)

    def _response_expected(self, source: int) -> bool:
        """``RequestManager.isResponseExpected``: only the answer to the request in flight to ``source``
        is handled; a duplicate, the answer to a request sent again after a timeout, or one sent before
        the last state change (Kafka resets its connections on every transition) is dropped. A response
        without a CorrelationId (a hand-made message) is taken as expected."""
        cid = self._incoming_cid
        if cid is None:
            return True
        if self._inflight.get(source) != cid:
            return False
        del self._inflight[source]
        return True

    def _finish(self, out: list[dict], request_cid: int | None) -> list[dict]:
        """Request headers: a fresh CorrelationId on every request we send (remembered as the one in
        flight to its destination), and the request's on our replies."""
        for m in out:
            if m["type"].endswith("Request"):
                self._cid += 1
                m["correlation_id"] = self._cid
                self._inflight[m["destination"]] = self._cid
            elif request_cid is not None:
                m["correlation_id"] = request_cid
        return out

    def append(self, value: Any, now_ms: int) -> int:
        if self.state != LEADER:
            raise ValueError(f"node {self.node_id} is not the leader ({self.state})")
        offset = self.log.append(self.epoch, value)
        self._refresh_voters()
        self._maybe_update_high_watermark(now_ms)
        return offset

    def _refresh_voters(self) -> None:
        latest = self.log.latest_voters()
        self.voters = latest[0] if latest is not None else self.bootstrap_voters

    def resign(self, now_ms: int) -> list[dict]:
        """Graceful shutdown of the leader: EndQuorumEpoch to the voters, with the preferred successors
        ordered by descending fetch offset (``LeaderState.nonLeaderVotersByDescendingFetchOffset``)."""
        if self.state != LEADER:
            return []
        out: list[dict] = []
        self._become_resigned(now_ms, self._successors(), out)
        return self._finish(out, None)

    def _successors(self) -> tuple[int, ...]:
        def fetched(v: int) -> int:
            p = self._progress.get(v)
            return -1 if p is None or p.end_offset is None else p.end_offset
        return tuple(sorted((v for v in self.voters if v != self.node_id), key=lambda v: (-fetched(v), v)))

    # ---------------------------------------------------------------------------------- timers
    def _election_timeout(self) -> int:
        jitter = self.config.jitter_ms
        return self.config.election_timeout_ms + (self._rng.randrange(jitter) if jitter > 0 else 0)

    def _binary_exponential_backoff(self) -> int:
        # KafkaRaftClient.binaryExponentialElectionBackoffMs
        return min(RETRY_BACKOFF_BASE_MS * self._rng.randrange(2 << min(20, self._retries - 1)),
                   self.config.election_backoff_max_ms)

    def _strict_exponential_backoff(self, position: int, total: int) -> int:
        # KafkaRaftClient.endEpochElectionBackoff / strictExponentialElectionBackoffMs (Kafka 4): the
        # first successor stands at once, the one at position p waits (backoff max >> (n - 1)) << (p - 1),
        # and a voter missing from the list (position n) waits the whole backoff max
        if position == 0:
            return 0
        if position >= total:
            return self.config.election_backoff_max_ms
        base = self.config.election_backoff_max_ms >> (total - 1)
        return min(self.config.election_backoff_max_ms, base << (position - 1))

    def _poll(self, now: int, out: list[dict]) -> None:
        for _ in range(4):  # a transition may arm a timer that is already due (backoff 0)
            before = (self.state, self.epoch, self._backoff_until)
            self._poll_once(now, out)
            if (self.state, self.epoch, self._backoff_until) == before:
                return

    def _poll_once(self, now: int, out: list[dict]) -> None:
        s = self.state
        if s == LEADER:
            if self._deadline is not None and now >= self._deadline:
                # check quorum: no fetch from a majority within the fetch timeout -> zombie leader
                self.note(now, "zombie_leader_detected")
                self._become_resigned(now, (), out)
                return
            if self._next_append_ms is not None and now >= self._next_append_ms:
                self.log.append(self.epoch, record("NoOpRecord", {}, now))
                self._next_append_ms = now + self.config.append_interval_ms
                self._maybe_update_high_watermark(now)
            self._maybe_change_voters(now, out)
            if self.state != LEADER:
                return
            if now >= self._next_begin_ms and len(self.voters) > 1:
                # Kafka 4 (KIP-853): every voter hears BeginQuorumEpoch again each fetch.timeout / 2, so a
                # voter that missed the election (or was added since) finds the leader without a timeout
                for v in self.voters:
                    if v != self.node_id:
                        out.append(message("BeginQuorumEpochRequest", self.node_id, v,
                                           ClusterId=self.cluster_id, VoterId=v, LeaderId=self.node_id,
                                           LeaderEpoch=self.epoch))
                self._next_begin_ms = now + max(1, self.config.fetch_timeout_ms // 2)
        elif s == CANDIDATE:
            if self._backoff_until is not None:
                if now >= self._backoff_until:
                    self._become_candidate(now, out)
            elif self._deadline is not None and now >= self._deadline:
                self._backoff_until = now + self._binary_exponential_backoff()
                self._deadline = self._next_fetch_ms = None
                self.note(now, "election_timeout")
            elif self._next_fetch_ms is not None and now >= self._next_fetch_ms:
                # no answer within the request timeout: ask again (Kafka resends to unrecorded voters)
                self._send_vote_requests(out, [v for v in self.voters if v not in self._granted | self._rejected])
                self._next_fetch_ms = now + self.config.request_timeout_ms
        elif s == FOLLOWER:
            if self._deadline is not None and now >= self._deadline:
                if self.is_voter:
                    self.note(now, "fetch_timeout")
                    self._become_candidate(now, out)
                    return
                # Kafka 4's pollFollowerAsObserver: an observer stays a follower and asks any voter
                self.note(now, "fetch_timeout")
                self._deadline = now + self.config.fetch_timeout_ms
                self._fetch_elsewhere, self._next_fetch_ms = -1, now
            if self._next_fetch_ms is not None and now >= self._next_fetch_ms:
                # maybeSendFetchToBestNode (voters and observers alike): a fetch to the leader left
                # unanswered for the request timeout is forgotten and the next one asks another voter
                if self._inflight.pop(self.leader_id, None) is not None:
                    self._fetch_elsewhere = self.leader_id
                # with no other voter to ask (an observer that knows none, a lone voter), only its leader
                target = self.leader_id if self._fetch_elsewhere is None or not self._other_voters() else \
                    self._any_voter(self._fetch_elsewhere)
                self._fetch_elsewhere = None
                out.append(self._fetch_request(target))
                self._next_fetch_ms = now + self.config.request_timeout_ms
        elif s in (UNATTACHED, VOTED):
            if self.is_voter and self._deadline is not None and now >= self._deadline:
                self._become_candidate(now, out)
            elif self._next_fetch_ms is not None and now >= self._next_fetch_ms and self._other_voters():
                # pollUnattachedCommon (Kafka 4): voters and observers alike look for the leader by fetching
                # from any voter (the bootstrap servers); the error response's CurrentLeader names it
                out.append(self._fetch_request(self._any_voter()))
                self._next_fetch_ms = now + self.config.request_timeout_ms
        elif s == RESIGNED:
            if self._deadline is not None and now >= self._deadline:
                if self.is_voter:
                    self._become_candidate(now, out)
                else:
                    # pollResigned: a leader removed from the voters is unattached in the next epoch, so
                    # that no fetch response names it leader again
                    self._become_unattached(self.epoch + 1, now)
                return
            if self._resign_unacked and self._next_resign_ms is not None and now >= self._next_resign_ms:
                self._send_end_quorum_epoch(sorted(self._resign_unacked), out)
                self._next_resign_ms = now + self.config.request_timeout_ms

    def _fail(self, now: int, reason: str) -> None:
        self.note(now, "replica_failed", reason=reason, high_watermark=self.high_watermark,
                  log_end_offset=self.log.end_offset)
        self._reset()
        self.state, self.failed = FAILED, reason

    def _other_voters(self, avoid: int = -1) -> list[int]:
        return [v for v in self.voters if v not in (self.node_id, avoid)]

    def _any_voter(self, avoid: int = -1) -> int:
        """A voter chosen at random (Kafka: a ready bootstrap server), never this node, other than
        ``avoid`` if possible."""
        choices = self._other_voters(avoid) or self._other_voters()
        return choices[self._rng.randrange(len(choices))]

    def _fetch_request(self, destination: int) -> dict:
        return message("FetchRequest", self.node_id, destination, ClusterId=self.cluster_id,
                       ReplicaId=self.node_id, CurrentLeaderEpoch=self.epoch, FetchOffset=self.log.end_offset,
                       LastFetchedEpoch=self.log.last_epoch)

    # ----------------------------------------------------------------------------- transitions
    def note(self, now: int, kind: str, **detail: Any) -> None:
        """Record something worth telling an operator (``quorum_events``)."""
        self.events.append({"time_ms": now, "node_id": self.node_id, "event": kind, "epoch": self.epoch,
                            "state": self.state, **detail})

    def _reset(self) -> None:
        self._deadline = self._backoff_until = self._next_fetch_ms = None
        self._inflight = {}  # KafkaRaftClient.resetConnections on every transition
        self._granted, self._rejected = set(), set()
        self._progress = {}
        self._check_quorum_fetchers = set()
        self._preferred_successors = ()
        self._next_append_ms = None
        self._resign_unacked, self._next_resign_ms = set(), None
        self._fetch_elsewhere = None

    def _enter(self, state: str, leader: int, epoch: int, now: int) -> None:
        """Unattached or following in ``epoch``: a leader that learns of a later epoch steps down, and a
        later epoch forgets the vote of the old one."""
        if self.state == LEADER and epoch > self.epoch:
            self.note(now, "leader_step_down", new_epoch=epoch)
        self._reset()
        if epoch > self.epoch:
            self.voted_for = None
        self.epoch, self.state, self.leader_id = epoch, state, leader
        self._retries = 0

    def _become_unattached(self, epoch: int, now: int) -> None:
        """Unattached in ``epoch``. An unattached, voted or candidate voter keeps the election timer it
        had running (``QuorumState.transitionToUnattached``): learning of a later epoch without a
        leader does not put off its own candidacy. A sole voter stands at once."""
        running = self._deadline if self.state in (UNATTACHED, VOTED, CANDIDATE) else None
        self._enter(UNATTACHED, NO_LEADER, epoch, now)
        if self.voters == (self.node_id,):
            self._deadline = now
        else:
            self._deadline = running if running is not None else now + self._election_timeout()
        self._next_fetch_ms = now

    def _become_voted(self, candidate: int, now: int) -> None:
        """Unattached with a vote (Kafka 4's ``unattachedAddVotedState``): the election timer starts again
        (the candidate has at least our chance of winning), the search for the leader goes on, and the
        requests in flight stay so (Kafka keeps its connections on this transition)."""
        inflight, next_fetch = self._inflight, self._next_fetch_ms
        self._reset()
        self.state, self.voted_for, self.leader_id = VOTED, candidate, NO_LEADER
        self._deadline = now + self._election_timeout()
        self._inflight, self._next_fetch_ms = inflight, next_fetch if next_fetch is not None else now

    def _become_follower(self, leader: int, epoch: int, now: int) -> None:
        self._enter(FOLLOWER, leader, epoch, now)
        self._deadline = now + self.config.fetch_timeout_ms
        self._next_fetch_ms = now

    def _become_candidate(self, now: int, out: list[dict]) -> None:
        retries = self._retries + 1 if self.state == CANDIDATE else 1
        self._reset()
        self.epoch += 1
        self.state, self.voted_for, self.leader_id, self._retries = CANDIDATE, self.node_id, NO_LEADER, retries
        self._granted = {self.node_id}
        self._deadline = now + self._election_timeout()
        self.note(now, "election_started", retries=retries)
        if len(self._granted) >= self.majority:
            self._become_leader(now, out)
            return
        self._send_vote_requests(out, [v for v in self.voters if v != self.node_id])
        self._next_fetch_ms = now + self.config.request_timeout_ms  # the candidate's resend timer

    def _send_vote_requests(self, out: list[dict], voters: list[int]) -> None:
        for v in voters:
            out.append(message("VoteRequest", self.node_id, v, ClusterId=self.cluster_id, VoterId=v,
                               CandidateEpoch=self.epoch, CandidateId=self.node_id,
                               LastOffsetEpoch=self.log.last_epoch, LastOffset=self.log.end_offset))

    def _become_leader(self, now: int, out: list[dict]) -> None:
        granting = sorted(self._granted)
        self._reset()
        self.state, self.leader_id = LEADER, self.node_id
        self._epoch_start_offset = self.log.end_offset
        self.log.append(self.epoch, record("LeaderChangeMessage", {
            "Version": 0, "LeaderId": self.node_id, "Voters": [{"VoterId": v, "VoterDirectoryId": NO_DIRECTORY}
                                                              for v in self.voters],
            "GrantingVoters": [{"VoterId": v, "VoterDirectoryId": NO_DIRECTORY} for v in granting]}, now))
        self._progress = {v: ReplicaProgress() for v in self.voters}
        self._progress[self.node_id] = ReplicaProgress(self.log.end_offset, now, now, True)
        self._deadline = now + self._check_quorum_timeout() if len(self.voters) > 1 else None
        self._next_begin_ms = now
        if self.config.append_interval_ms:
            self._next_append_ms = now + self.config.append_interval_ms
        self.note(now, "leader_elected", granting_voters=granting, epoch_start_offset=self._epoch_start_offset)
        self._maybe_update_high_watermark(now)

    def _become_resigned(self, now: int, successors: tuple[int, ...], out: list[dict] | None = None) -> None:
        self._reset()
        self.state, self.leader_id = RESIGNED, self.node_id
        self._preferred_successors = successors
        self._deadline = now if self.voters == (self.node_id,) else now + self._election_timeout()
        self.note(now, "leader_resigned", preferred_successors=list(successors))
        # ResignedState.unackedVoters: EndQuorumEpoch goes to every other voter, and again every request
        # timeout to those that have not answered (a restarted leader sends its first ones at once)
        self._resign_unacked = {v for v in self.voters if v != self.node_id}
        self._next_resign_ms = now
        if out is not None:
            self._send_end_quorum_epoch(sorted(self._resign_unacked), out)
            self._next_resign_ms = now + self.config.request_timeout_ms

    def _send_end_quorum_epoch(self, voters: list[int], out: list[dict]) -> None:
        for v in voters:
            out.append(message("EndQuorumEpochRequest", self.node_id, v, ClusterId=self.cluster_id,
                               LeaderId=self.node_id, LeaderEpoch=self.epoch,
                               PreferredSuccessors=list(self._preferred_successors)))

    # ------------------------------------------------------------------------------- validation
    def _valid_cluster_id(self, cluster_id: str | None) -> bool:
        # KafkaRaftClient.hasValidClusterId: a request without one (old clients) is accepted
        return cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id

    def _validate_voter_only(self, remote: int, request_epoch: int) -> int:
        # KafkaRaftClient.validateVoterOnlyRequest
        if request_epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if remote < 0:
            return INVALID_REQUEST
        # Kafka 4 (KIP-853) no longer answers INCONSISTENT_VOTER_SET here: with a dynamic quorum a
        # replica may not know the voter set the sender is right about yet
        return NONE

    def _validate_leader_only(self, request_epoch: int) -> int:
        # KafkaRaftClient.validateLeaderOnlyRequest
        if request_epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if request_epoch > self.epoch:
            return UNKNOWN_LEADER_EPOCH
        if self.state != LEADER:
            return NOT_LEADER_OR_FOLLOWER
        return NONE

    def _maybe_transition(self, leader: int, epoch: int, now: int) -> None:
        """A leader announced for ``epoch`` (``KafkaRaftClient.maybeTransition``)."""
        if epoch > self.epoch or (epoch == self.epoch and self.state in (UNATTACHED, VOTED, CANDIDATE)):
            if leader == self.node_id:
                self._become_unattached(epoch, now)
            else:
                self._become_follower(leader, epoch, now)

    def _handle_common_response(self, leader: int, epoch: int, now: int) -> bool:
        """``maybeHandleCommonResponse``: a response from a higher epoch moves us there; True if handled."""
        if epoch > self.epoch:
            if leader >= 0 and leader != self.node_id:
                self._become_follower(leader, epoch, now)
            else:
                self._become_unattached(epoch, now)
            return True
        if epoch == self.epoch and leader >= 0 and leader != self.node_id and \
                self.state in (UNATTACHED, VOTED, CANDIDATE):
            self._become_follower(leader, epoch, now)
            return True
        return epoch < self.epoch  # stale: ignore

    def _error_response(self, request_type: str, destination: int, error: int) -> dict:
        """The answer to a request this node refuses before reading it, in that response's shape."""
        response = request_type[:-len("Request")] + "Response"
        if response == "FetchResponse":
            return message(response, self.node_id, destination, ErrorCode=error, HighWatermark=-1,
                           DivergingEpoch={"Epoch": -1, "EndOffset": -1}, CurrentLeader=self._leader_fields(),
                           Records=[])
        if response == "AlterQuorumResponse":
            return message(response, self.node_id, destination, ErrorCode=error)
        return message(response, self.node_id, destination, ErrorCode=error, **self._leader_fields())

    def _leader_fields(self) -> dict:
        # quorum.leaderIdOrSentinel(): a resigned leader still names itself for its epoch
        return {"LeaderId": self.leader_id, "LeaderEpoch": self.epoch}

    # -------------------------------------------------------------------------------- Vote
    def _on_VoteRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        def reply(err: int, granted: bool) -> None:
            out.append(message("VoteResponse", self.node_id, src, ErrorCode=err, VoteGranted=granted,
                               **self._leader_fields()))

        if not self._valid_cluster_id(d.get("ClusterId")):
            return reply(INCONSISTENT_CLUSTER_ID, False)
        candidate, epoch = d["CandidateId"], d["CandidateEpoch"]
        last_epoch, last_offset = d["LastOffsetEpoch"], d["LastOffset"]
        if last_offset < 0 or last_epoch < 0 or last_epoch >= epoch:
            return reply(INVALID_REQUEST, False)
        err = self._validate_voter_only(candidate, epoch)
        if err != NONE:
            return reply(err, False)
        if epoch > self.epoch:
            self._become_unattached(epoch, now)
        if not self._meant_for_me(d):
            return reply(INVALID_VOTER_KEY, False)
        up_to_date = (last_epoch, last_offset) >= (self.log.last_epoch, self.log.end_offset)
        if self.state == UNATTACHED:
            granted = up_to_date
        elif self.state == VOTED:
            granted = self.voted_for == candidate or (self.config.unsafe_grant_any_vote and up_to_date)
        else:  # candidate (voted for itself), leader, follower, resigned
            granted = False
        if granted and self.state in (UNATTACHED, VOTED) and self.voted_for != candidate:
            self._become_voted(candidate, now)
        self.note(now, "vote_granted" if granted else "vote_rejected", candidate_id=candidate,
                    log_up_to_date=up_to_date)
        reply(NONE, granted)

    def _on_VoteResponse(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        if self._handle_common_response(d["LeaderId"], d["LeaderEpoch"], now):
            return
        if d["ErrorCode"] != NONE or self.state != CANDIDATE or d["LeaderEpoch"] != self.epoch:
            return
        if src not in self.voters or src == self.node_id or src in self._granted | self._rejected:
            # CandidateState: only other voters' answers count, each once; a voter cannot change its
            # answer (Kafka refuses the change), so a duplicate or a changed answer is ignored
            return
        if self._backoff_until is not None:
            return  # this election was given up on: Kafka 4 is no longer a candidate of it
        if d["VoteGranted"]:
            self._granted.add(src)
            if len(self._granted) >= self.majority:
                self._become_leader(now, out)
        else:
            self._rejected.add(src)
            if self._vote_rejected():
                # the votes still possible cannot make a majority: back off before the next epoch
                self._backoff_until = now + self._binary_exponential_backoff()
                self._deadline = self._next_fetch_ms = None

    def _vote_rejected(self) -> bool:
        """``EpochElection.isVoteRejected``: granted plus not yet answered falls short of a majority."""
        granted = len(self._granted & set(self.voters))
        unrecorded = len(self.voters) - granted - len(self._rejected & set(self.voters))
        return granted + unrecorded < self.majority

    # ---------------------------------------------------------------------- BeginQuorumEpoch
    def _on_BeginQuorumEpochRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        def reply(err: int) -> None:
            out.append(message("BeginQuorumEpochResponse", self.node_id, src, ErrorCode=err,
                               **self._leader_fields()))

        if not self._valid_cluster_id(d.get("ClusterId")):
            return reply(INCONSISTENT_CLUSTER_ID)
        err = self._validate_voter_only(d["LeaderId"], d["LeaderEpoch"])
        if err != NONE:
            return reply(err)
        self._maybe_transition(d["LeaderId"], d["LeaderEpoch"], now)
        reply(NONE if self._meant_for_me(d) else INVALID_VOTER_KEY)

    def _meant_for_me(self, d: Mapping) -> bool:
        # KafkaRaftClient.isValidVoterKey: a request naming another voter (VoterId, KIP-853) is refused
        # with INVALID_VOTER_KEY; one without a VoterId (version 0) is for whoever receives it
        voter = d.get("VoterId")
        return voter is None or voter == self.node_id

    def _on_BeginQuorumEpochResponse(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        if self._handle_common_response(d["LeaderId"], d["LeaderEpoch"], now):
            return
        if d["ErrorCode"] == NONE and self.state == LEADER and d["LeaderEpoch"] == self.epoch \
                and src in self._progress:
            self._progress[src].acknowledged = True

    # ------------------------------------------------------------------------ EndQuorumEpoch
    def _on_EndQuorumEpochRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        def reply(err: int) -> None:
            out.append(message("EndQuorumEpochResponse", self.node_id, src, ErrorCode=err,
                               **self._leader_fields()))

        if not self._valid_cluster_id(d.get("ClusterId")):
            return reply(INCONSISTENT_CLUSTER_ID)
        leader, epoch = d["LeaderId"], d["LeaderEpoch"]
        err = self._validate_voter_only(leader, epoch)
        if err != NONE:
            return reply(err)
        self._maybe_transition(leader, epoch, now)
        if self.state == FOLLOWER and self.leader_id == leader and self.epoch == epoch:
            successors = list(d.get("PreferredSuccessors") or [])
            position = successors.index(self.node_id) if self.node_id in successors else len(successors)
            backoff = self._strict_exponential_backoff(position, len(successors))
            self.note(now, "end_quorum_epoch", leader_id=leader, election_backoff_ms=backoff)
            self._deadline = now + backoff  # overrideFetchTimeout: stand for election sooner
        reply(NONE)

    def _on_EndQuorumEpochResponse(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        if self._handle_common_response(d["LeaderId"], d["LeaderEpoch"], now):
            return
        if d["ErrorCode"] == NONE and self.state == RESIGNED and d["LeaderEpoch"] == self.epoch:
            self._resign_unacked.discard(src)  # ResignedState.acknowledgeResignation

    # ---------------------------------------------------------------------------------- Fetch
    def _on_FetchRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        def reply(err: int, **extra: Any) -> None:
            body = {"ErrorCode": err, "HighWatermark": -1, "DivergingEpoch": {"Epoch": -1, "EndOffset": -1},
                    "CurrentLeader": self._leader_fields(), "Records": []}
            body.update(extra)
            out.append({"type": "FetchResponse", "source": self.node_id, "destination": src, "data": body})

        # KafkaRaftClient.handleFetchRequest's order: cluster id, a malformed request, the leader epoch
        # (tryCompleteFetchRequest), then the offset/epoch against our log (validateOffsetAndEpoch).
        if not self._valid_cluster_id(d.get("ClusterId")):
            return reply(INCONSISTENT_CLUSTER_ID)
        replica, fetch_offset, last_epoch = d["ReplicaId"], d["FetchOffset"], d["LastFetchedEpoch"]
        if fetch_offset < 0 or last_epoch < 0 or last_epoch > d["CurrentLeaderEpoch"] or replica == self.node_id:
            return reply(INVALID_REQUEST)
        err = self._validate_leader_only(d["CurrentLeaderEpoch"])
        if err != NONE:
            return reply(err)
        valid, div_epoch, div_offset = self.log.validate_offset_and_epoch(fetch_offset, last_epoch)
        hw = self.high_watermark if self.hw_known() else -1
        if not valid:
            self.note(now, "fetch_diverging", replica_id=replica, diverging_epoch=div_epoch,
                        diverging_end_offset=div_offset)
            return reply(NONE, HighWatermark=hw, DivergingEpoch={"Epoch": div_epoch, "EndOffset": div_offset})
        if replica >= 0:
            self._note_fetch(replica, now)
            p = self._progress.setdefault(replica, ReplicaProgress())
            # ReplicaState.updateFollowerState: caught up now if it reached our end; caught up as of its
            # previous fetch if it reached the end we had then
            if fetch_offset >= self.log.end_offset:
                p.last_caught_up_ms = max(p.last_caught_up_ms, now)
            elif p.last_fetch_leader_end > 0 and fetch_offset >= p.last_fetch_leader_end:
                p.last_caught_up_ms = max(p.last_caught_up_ms, p.last_fetch_ms)
            p.last_fetch_leader_end = self.log.end_offset
            p.end_offset, p.last_fetch_ms, p.acknowledged = fetch_offset, max(p.last_fetch_ms, now), True
            if replica in self.voters:
                self._maybe_update_high_watermark(now)
        hw = self.high_watermark if self.hw_known() else -1
        end = min(self.log.end_offset, fetch_offset + self.config.fetch_max_records)
        records = [{"Offset": o, "Epoch": self.log.entries[o].epoch, "Value": self.log.entries[o].value}
                   for o in range(fetch_offset, end)]
        reply(NONE, HighWatermark=hw, Records=records)

    def _note_fetch(self, replica: int, now: int) -> None:
        # LeaderState.updateCheckQuorumForFollowingVoter: a majority fetching resets the timer
        if replica not in self.voters or replica == self.node_id:
            return
        self._check_quorum_fetchers.add(replica)
        if len(self._check_quorum_fetchers) + (1 if self.is_voter else 0) >= self.majority:
            self._deadline = now + self._check_quorum_timeout()
            self._check_quorum_fetchers = set()

    def _check_quorum_timeout(self) -> int:
        # LeaderState.checkQuorumTimer: CHECK_QUORUM_TIMEOUT_FACTOR (1.5) x the fetch timeout, so that
        # the followers' fetch timeouts fire before the leader gives up
        return int(self.config.fetch_timeout_ms * self.config.check_quorum_timeout_factor)

    def _on_FetchResponse(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        cur = d["CurrentLeader"]
        handled = self._handle_common_response(cur["LeaderId"], cur["LeaderEpoch"], now)
        if self.state in (UNATTACHED, VOTED):
            if self._next_fetch_ms is not None:
                # still looking for the leader (the answer named none, or is stale): ask again after the
                # backoff (Kafka asks again once the answer is in; the backoff stands in for the round trip)
                self._next_fetch_ms = min(self._next_fetch_ms, now + self.config.retry_backoff_ms)
            return
        if handled or self.state != FOLLOWER:
            return
        if src != self.leader_id:
            # another voter answered the fetch that looked for a newer leader, and named none: back to
            # the leader after the backoff its connection is in (maybeSendFetchToBestNode)
            self._next_fetch_ms = now + self.config.retry_backoff_ms
            return
        if d["ErrorCode"] != NONE:
            # (BROKER_NOT_AVAILABLE, say) the leader's connection backs off, so the next fetch asks another
            # voter at once, for a newer leader (voters and observers alike); with no other voter to ask,
            # the leader again after the backoff
            if self._other_voters(avoid=src):
                self._next_fetch_ms, self._fetch_elsewhere = now, src
            else:
                self._next_fetch_ms = now + self.config.retry_backoff_ms
            return
        self._deadline = now + self.config.fetch_timeout_ms  # resetFetchTimeoutForSuccessfulFetch
        div = d["DivergingEpoch"]
        if div["Epoch"] >= 0:
            before = self.log.end_offset
            if div["EndOffset"] < self.high_watermark:
                # Committed entries are never dropped: Kafka treats this as fatal. The replica stops and
                # keeps its log, for an operator to see (quorum_state says failed) until it is restarted.
                self._fail(now, f"asked by leader {src} of epoch {self.epoch} to truncate to "
                                f"{div['EndOffset']}, below its high watermark {self.high_watermark}")
                return
            truncated = self.log.truncate_to_end_offset(div["Epoch"], div["EndOffset"])
            self._refresh_voters()
            self.note(now, "truncation", from_offset=before, to_offset=truncated,
                        diverging_epoch=div["Epoch"], diverging_end_offset=div["EndOffset"])
            self._next_fetch_ms = now
            return
        records = d["Records"]
        if records and records[0]["Offset"] == self.log.end_offset:
            for r in records:
                self.log.append(r["Epoch"], r["Value"])
            self._refresh_voters()
        hw = d["HighWatermark"]
        if hw >= 0:
            self.high_watermark = max(self.high_watermark, min(hw, self.log.end_offset))
        self._next_fetch_ms = now if records else now + self.config.fetch_interval_ms

    # ----------------------------------------------------------------------------- AlterQuorum
    def _on_AlterQuorumRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        """The seed's AlterQuorum (KIP-595): the leader moves the voter set to ``TargetVoters`` one voter
        at a time; null, or the current voters, cancels a change in progress (the steps taken stay)."""
        def reply(err: int) -> None:
            out.append(message("AlterQuorumResponse", self.node_id, src, ErrorCode=err))

        if self.state != LEADER:
            return reply(NOT_LEADER_OR_FOLLOWER)
        target = d.get("TargetVoters")
        if target is not None and (not isinstance(target, (list, tuple))
                                   or any(type(v) is not int for v in target)):
            return reply(INVALID_REQUEST)
        if target is not None and not target:
            return reply(VOTER_NOT_FOUND)  # no voter left: Kafka refuses to remove the last one
        if target is None or tuple(sorted(target)) == self.voters:
            if self.target_voters is not None:
                self.note(now, "voter_change_cancelled", target_voters=list(self.target_voters),
                            voters=list(self.voters))
            self.target_voters = None
            return reply(NONE)
        if len(set(target)) != len(target) or min(target) < 0:
            return reply(INVALID_REQUEST)
        self.target_voters = tuple(sorted(target))
        self.note(now, "voter_change_started", target_voters=list(self.target_voters), voters=list(self.voters))
        reply(NONE)

    def _voters_entry(self, voters: tuple[int, ...], now: int) -> dict:
        """The control record of a voter change: Kafka's VotersRecord (KIP-853)."""
        return voters_record(voters, now)

    def _voter_change_allowed(self) -> bool:
        """Raft safety: no voter change before an entry of this epoch is committed. Otherwise a leader
        elected by the old voters could commit a change whose majority misses an uncommitted change of
        the previous leader, and two majorities would commit different entries at one offset (the
        single-server change bug; Kafka refuses voter changes until the leader's high watermark is known)."""
        return self.hw_known()

    def _maybe_change_voters(self, now: int, out: list[dict]) -> None:
        """One voter change at a time, each only once the previous one is committed: first add the target
        voters, each once it has caught up to the high watermark, then remove the others (the leader
        last). A leader that committed a voter set without itself resigns."""
        if not self._voter_change_allowed():
            return
        latest = self.log.latest_voters()
        if latest is not None and latest[1] >= self.high_watermark:
            return  # the last change is not committed yet
        if not self.is_voter:
            # removed, and that is committed: it is no leader of the new voter set. Kafka 4
            # (RemoveVoterHandler, LeaderState.requestResign) resigns, telling the voters with
            # EndQuorumEpoch, and is unattached in the next epoch after its election timeout
            self.note(now, "leader_removed_from_voters")
            self._become_resigned(now, self._successors(), out)
            return
        target = self.target_voters
        if target is None:
            return
        if target == self.voters:
            self.target_voters = None
            self.note(now, "voter_change_completed", voters=list(self.voters))
            return
        missing = [v for v in target if v not in self.voters]
        if missing:  # add before removing: the quorum never shrinks below what it had on the way
            ready = [v for v in missing if self._progress.get(v) is not None
                     and (self._progress[v].end_offset or 0) >= self.high_watermark]
            if not ready:
                return  # a new voter must catch up first (it fetches as an observer)
            new, change = tuple(sorted(self.voters + (ready[0],))), {"added": ready[0]}
        else:
            extra = min((v for v in self.voters if v not in target), key=lambda v: (v == self.node_id, v))
            new, change = tuple(v for v in self.voters if v != extra), {"removed": extra}
        offset = self.log.append(self.epoch, self._voters_entry(new, now))
        self._refresh_voters()
        self.note(now, "voters_changed", voters=list(self.voters), offset=offset, **change)
        if len(self.voters) > 1 and self._deadline is None:
            self._deadline = now + self._check_quorum_timeout()
        self._maybe_update_high_watermark(now)

    # --------------------------------------------------------------------------- DescribeQuorum
    def _on_DescribeQuorumRequest(self, src: int, d: Mapping, now: int, out: list[dict]) -> None:
        body: dict[str, Any] = {"ErrorCode": NONE, "LeaderId": self.leader_id, "LeaderEpoch": self.epoch}
        if self.state != LEADER:
            body["ErrorCode"] = NOT_LEADER_OR_FOLLOWER
        else:
            def row(r: int, p: ReplicaProgress) -> dict:
                me = r == self.node_id
                return {"ReplicaId": r, "LogEndOffset": self.log.end_offset if me else
                        (-1 if p.end_offset is None else p.end_offset),
                        "LastFetchTimestamp": now if me else p.last_fetch_ms,
                        "LastCaughtUpTimestamp": now if me else p.last_caught_up_ms}
            self._clear_inactive_observers(now)
            body["HighWatermark"] = self.high_watermark if self.hw_known() else -1
            body["CurrentVoters"] = [row(r, p) for r, p in sorted(self._progress.items()) if r in self.voters]
            body["Observers"] = [row(r, p) for r, p in sorted(self._progress.items()) if r not in self.voters]
        out.append({"type": "DescribeQuorumResponse", "source": self.node_id, "destination": src, "data": body})

    # --------------------------------------------------------------------------- high watermark
    def _maybe_update_high_watermark(self, now: int) -> None:
        """``LeaderState.maybeUpdateHighWatermark``: the end offset that a majority of voters has
        reached, only once it is past the epoch start offset (an entry of this epoch is on a majority),
        and never backwards."""
        self._progress[self.node_id].end_offset = self.log.end_offset
        ends = sorted((self._progress[v].end_offset if v in self._progress and self._progress[v].end_offset
                       is not None else -1 for v in self.voters), reverse=True)
        candidate = ends[len(self.voters) // 2]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate


__all__ = ["CANDIDATE", "FOLLOWER", "LEADER", "RESIGNED", "UNATTACHED", "VOTED", "LogEntry", "RaftConfig",
           "RaftLog", "RaftNode", "message", "record", "voters_record"]
