"""The metadata quorum's replicas, driven by their traffic in the log (KIP-595), and the rows they give.

Quorum traffic is a stream of events addressed to replicas (``destination_id``): Kafka's RPCs
(``VoteRequest``, ``FetchResponse``, ...) under their own schemas, and the replicas' lifecycle
(``ReplicaStartup``, ``ReplicaShutdown``). Each replica is a ``raft.RaftNode``; this module turns
Kafka's nested messages into the node's flat ones and back, and runs one replica over its events:

- before an event at time t, the node's timers that are due by t fire at their own deadlines
  (``advance``): a node that is only woken by its inputs behaves exactly as one ticked all the time,
  so a replay of recorded traffic reproduces the recording replica by replica, whatever the
  micro-batches;
- what the node answers to a request is a ``responses`` row; what it sends on its own (vote requests,
  fetches) is already in the traffic if it was delivered, and is not repeated;
- its state, the leader's view of every replica, and what happened (elections, step-downs, zombie
  leaders, truncations, voter changes) are ``quorum_state``, ``quorum_replicas`` and ``quorum_events``.

The streaming job (``quorum_stream``) runs ``Replica.apply`` per replica inside
``applyInPandasWithState``; ``replay_quorum`` runs the same in-process and is its reference.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kraftlake.codec.bounds import Limits
from kraftlake.codec.events import json_bytes
from kraftlake.codec.logdir import decode_buffer
from kraftlake.codec.writer import encode_events
from kraftlake.metadata.config import setting
from kraftlake.metadata.errors import error_code, error_name
from kraftlake.metadata.schemas import QUORUM_TRAFFIC, registry
from kraftlake.metadata.tables import table_keys
from kraftlake.raft.anomalies import LAG_TIME_MAX_MS, VOTER_LAG_ENDED, VOTER_LAGGING, QuorumAnomalies
from kraftlake.raft.config import RaftConfig, parse_voters
from kraftlake.raft.draft import node_class
from kraftlake.raft.log import RaftLog
from kraftlake.raft.node import LEADER, NO_LEADER, RaftNode, record

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's Uuid.METADATA_TOPIC_ID (0, 1)
INCONSISTENT_CLUSTER_ID = error_code("INCONSISTENT_CLUSTER_ID")
# The versions the simulator writes (the ones whose fields the node uses; Fetch as KRaft sends it).
VERSIONS = {"VoteRequest": 0, "VoteResponse": 0, "BeginQuorumEpochRequest": 0, "BeginQuorumEpochResponse": 0,
            "EndQuorumEpochRequest": 0, "EndQuorumEpochResponse": 0, "FetchRequest": 13, "FetchResponse": 13,
            "DescribeQuorumRequest": 1, "DescribeQuorumResponse": 1, "AlterQuorumRequest": 0,
            "AlterQuorumResponse": 0, "DiscoverBrokersRequest": 0, "DiscoverBrokersResponse": 0,
            "FetchQuorumRecordsRequest": 0, "FetchQuorumRecordsResponse": 0}
# Timers fired at their own deadlines while catching up with one event (about 2 days of an idle observer's
# fetches); past that, a replica resumes as a process paused that long does (``advance``).
MAX_TICKS = 100_000


# ------------------------------------------------------------------------- Kafka <-> node messages
def _partition(data: Mapping, topics: str = "Topics", partitions: str = "Partitions") -> Mapping:
    for topic in data.get(topics) or ():
        for p in topic.get(partitions) or ():
            return p
    raise ValueError(f"no partition of {METADATA_TOPIC} in the message")


def _topics(partition: dict, version_has_id: bool = False) -> list[dict]:
    topic = {"TopicId": METADATA_TOPIC_ID} if version_has_id else {"TopicName": METADATA_TOPIC}
    return [{**topic, "Partitions": [partition]}]


def _records_bytes(records: list[dict], now: int) -> bytes | None:
    if not records:
        return None
    events = [{"offset": r["Offset"], "leader_epoch": r["Epoch"], "timestamp": r["Value"].get("timestamp", now),
               "type": r["Value"]["type"], "version": 0,
               "data": {**registry()[r["Value"]["type"]].defaults(), **r["Value"]["data"]}} for r in records]
    return encode_events(events, first_offset=records[0]["Offset"], batch_records=len(events))


def _records_of(raw: bytes | str | None, limits: Limits | None) -> list[dict]:
    if not raw:
        return []
    if isinstance(raw, str):  # JSON carries bytes as base64 (Spark's to_json, JSON lines)
        raw = base64.b64decode(raw)
    out = []
    for item in decode_buffer(raw, "FetchResponse.Records", limits=limits):
        if not isinstance(item, dict):
            raise ValueError(f"damaged records in a FetchResponse: {item.reason}")
        out.append({"Offset": item["offset"], "Epoch": item["leader_epoch"],
                    "Value": record(item["type"], item["data"], item["timestamp"])})
    return out


def to_node_message(event: Mapping, limits: Limits | None = None) -> dict:
    """A quorum RPC event (Kafka's nested schema) as the flat message ``RaftNode.handle`` takes; the
    batches a FetchResponse carries are decoded within ``limits`` (they came from the event's writer)."""
    t, d = event["type"], event["data"]
    flat: dict[str, Any]
    if t == "FetchRequest":
        p = _partition(d)
        replica = d["ReplicaId"] if event.get("version", 13) <= 14 else d["ReplicaState"]["ReplicaId"]
        flat = {"ClusterId": d.get("ClusterId"), "ReplicaId": replica, "CurrentLeaderEpoch": p["CurrentLeaderEpoch"],
                "FetchOffset": p["FetchOffset"], "LastFetchedEpoch": p["LastFetchedEpoch"]}
    elif t == "FetchResponse":
        p = _partition(d, "Responses")
        err = d.get("ErrorCode") or p["ErrorCode"]
        flat = {"ErrorCode": err, "HighWatermark": p["HighWatermark"], "DivergingEpoch": dict(p["DivergingEpoch"]),
                "CurrentLeader": dict(p["CurrentLeader"]), "Records": _records_of(p.get("Records"), limits)}
    elif t == "AlterQuorumRequest":
        target = d.get("TargetVoters")
        flat = {"TargetVoters": None if target is None else [v["VoterId"] for v in target]}
    elif t == "DescribeQuorumRequest":
        flat = {}
    elif t in ("DiscoverBrokersRequest", "FetchQuorumRecordsRequest", "FetchQuorumRecordsResponse",
               "DiscoverBrokersResponse"):
        flat = _draft_to_node(t, d, limits)
    elif t.endswith("Response"):  # Vote, BeginQuorumEpoch, EndQuorumEpoch
        p = dict(_partition(d))
        top = d.get("ErrorCode", 0)
        flat = {k: v for k, v in p.items() if k not in ("PartitionIndex",)}
        flat["ErrorCode"] = top or p.get("ErrorCode", 0)
        flat.setdefault("LeaderId", NO_LEADER)
        flat.setdefault("LeaderEpoch", -1)
    else:  # Vote, BeginQuorumEpoch, EndQuorumEpoch requests
        p = _partition(d)
        flat = {k: v for k, v in p.items() if k not in ("PartitionIndex", "CandidateDirectoryId", "VoterDirectoryId")}
        flat["ClusterId"] = d.get("ClusterId")
        if t == "EndQuorumEpochRequest" and "PreferredCandidates" in p and not p.get("PreferredSuccessors"):
            flat["PreferredSuccessors"] = [c["CandidateId"] for c in p["PreferredCandidates"]]
            flat.pop("PreferredCandidates", None)
    out = {"type": t, "source": event.get("source_id"), "destination": event["destination_id"], "data": flat}
    if event.get("correlation_id") is not None:
        out["correlation_id"] = event["correlation_id"]
    return out


def to_kafka(msg: Mapping, now: int) -> tuple[str, int, dict]:
    """A node's flat message as Kafka's message: (type, version, data in the schema's nesting)."""
    t, d = msg["type"], dict(msg["data"])
    version = VERSIONS[t]
    if t == "FetchRequest":
        data = {"ClusterId": d["ClusterId"], "ReplicaId": d["ReplicaId"], "MaxWaitMs": 500, "MinBytes": 0,
                "Topics": _topics({"Partition": 0, "CurrentLeaderEpoch": d["CurrentLeaderEpoch"],
                                   "FetchOffset": d["FetchOffset"], "LastFetchedEpoch": d["LastFetchedEpoch"]}, True)}
    elif t == "FetchResponse":
        err = d["ErrorCode"]
        top = err if err == INCONSISTENT_CLUSTER_ID else 0
        data = {"ErrorCode": top, "Responses": [{"TopicId": METADATA_TOPIC_ID, "Partitions": [{
            "PartitionIndex": 0, "ErrorCode": 0 if top else err, "HighWatermark": d["HighWatermark"],
            "DivergingEpoch": d["DivergingEpoch"], "CurrentLeader": d["CurrentLeader"],
            "Records": _records_bytes(d["Records"], now)}]}]}
    elif t in ("DiscoverBrokersRequest", "FetchQuorumRecordsRequest", "FetchQuorumRecordsResponse",
               "DiscoverBrokersResponse"):
        data = _draft_to_kafka(t, d, now)
    elif t == "AlterQuorumRequest":
        target = d.get("TargetVoters")
        data = {"TargetVoters": None if target is None else [{"VoterId": v} for v in target]}
    elif t == "AlterQuorumResponse":
        data = {"ErrorCode": d["ErrorCode"]}
    elif t == "DescribeQuorumRequest":
        data = {"Topics": _topics({"PartitionIndex": 0})}
    elif t == "DescribeQuorumResponse":
        err = d.pop("ErrorCode")
        data = {"ErrorCode": 0, "Topics": _topics({"PartitionIndex": 0, "ErrorCode": err, **d})}
    elif t.endswith("Response"):
        err = d.pop("ErrorCode")
        top = err if err == INCONSISTENT_CLUSTER_ID else 0
        data = {"ErrorCode": top, "Topics": _topics({"PartitionIndex": 0, "ErrorCode": 0 if top else err, **d})}
    else:
        cluster = d.pop("ClusterId", None)
        d.pop("VoterId", None)  # a v1 field; v0 is written
        data = {"ClusterId": cluster, "Topics": _topics({"PartitionIndex": 0, **d})}
    return t, version, data


def _draft_to_node(t: str, d: Mapping, limits: Limits | None) -> dict:
    """The KIP-595 draft's messages (flat on the wire, one partition) in the node's names."""
    if t == "FetchQuorumRecordsRequest":
        return {"ClusterId": d.get("ClusterId"), "ReplicaId": d["ReplicaId"], "CurrentLeaderEpoch": d["LeaderEpoch"],
                "FetchOffset": d["FetchOffset"], "LastFetchedEpoch": d["LastFetchedEpoch"]}
    if t == "FetchQuorumRecordsResponse":
        return {"ErrorCode": d["ErrorCode"], "HighWatermark": d["HighWatermark"],
                "DivergingEpoch": {"Epoch": d["NextFetchOffsetEpoch"], "EndOffset": d["NextFetchOffset"]},
                "CurrentLeader": {"LeaderId": d["LeaderId"], "LeaderEpoch": d["LeaderEpoch"]},
                "Records": _records_of(d.get("Records"), limits)}
    if t == "DiscoverBrokersResponse":
        return {**d, "Voters": [v["VoterId"] for v in d["Voters"]], "Brokers": [dict(b) for b in d["Brokers"]]}
    return dict(d)


def _draft_to_kafka(t: str, d: Mapping, now: int) -> dict:
    if t == "FetchQuorumRecordsRequest":
        return {"ClusterId": d["ClusterId"], "ReplicaId": d["ReplicaId"], "LeaderEpoch": d["CurrentLeaderEpoch"],
                "FetchOffset": d["FetchOffset"], "LastFetchedEpoch": d["LastFetchedEpoch"]}
    if t == "FetchQuorumRecordsResponse":
        return {"ErrorCode": d["ErrorCode"], "LeaderId": d["CurrentLeader"]["LeaderId"],
                "LeaderEpoch": d["CurrentLeader"]["LeaderEpoch"], "HighWatermark": d["HighWatermark"],
                "NextFetchOffsetEpoch": d["DivergingEpoch"]["Epoch"], "NextFetchOffset": d["DivergingEpoch"]["EndOffset"],
                "Records": _records_bytes(d["Records"], now)}
    if t == "DiscoverBrokersResponse":
        return {**d, "Voters": [{"VoterId": v} for v in d["Voters"]]}
    return dict(d)


def traffic_event(msg: Mapping, now: int) -> dict:
    """A message delivered at ``now`` as a ``metadata_log`` event (JSON lines shape, no offset)."""
    t, version, data = to_kafka(msg, now)
    event = {"type": t, "version": version, "timestamp": now, "data": data, "source_id": msg["source"],
             "destination_id": msg["destination"]}
    if msg.get("correlation_id") is not None:
        event["correlation_id"] = msg["correlation_id"]
    return event


# ---------------------------------------------------------------------------------------- replicas
def advance(node: RaftNode, now: int) -> list[dict]:
    """Fire the node's timers that are due by ``now``, each at its own deadline, in order.

    A gap in event time longer than ``MAX_TICKS`` firings (a replica silent for days, or an event
    stamped decades off) is not stepped through: the rest of the overdue timers fire once, at ``now``, as
    in a Kafka process that was paused for the gap, and a ``timers_skipped`` event says so. A timer
    that does not move when it fires is a bug, and raised."""
    out: list[dict] = []
    same = 0  # firings in a row at one deadline (a transition may arm a timer due at once: a few are fine)
    for _ in range(MAX_TICKS):
        deadline = node.next_deadline()
        if deadline is None or deadline > now:
            return out
        out += node.tick(deadline)
        same = same + 1 if node.next_deadline() == deadline else 0
        if same > 100:
            raise RuntimeError(f"replica {node.node_id}: a timer does not move past {deadline}")
    node.note(now, "timers_skipped", since=node.next_deadline(), timers=MAX_TICKS)
    return out + node.tick(now)


def raft_config(properties: Mapping[str, str], startup: Mapping | None) -> RaftConfig:
    """The node's config: the job's ``controller.quorum.*`` properties, overridden by the ones its
    ReplicaStartup names (the configuration it really ran with)."""
    if not startup:
        return RaftConfig.from_properties(properties)
    props = {**properties, **{c["Name"]: c["Value"] for c in startup.get("Configs") or ()}}
    overrides: dict[str, Any] = {"seed": startup.get("JitterSeed", 0)}
    if startup.get("ClusterId") is not None:
        overrides["cluster_id"] = startup["ClusterId"]
    return RaftConfig.from_properties(props, **overrides)


@dataclass
class Replica:
    """One quorum replica between events: its node (None until it first starts), whether it is down,
    what it needs to restart (its config and voters), the last event it handled, and its view of the
    replicas as of its last event as leader (``quorum_replicas`` keeps the last term's view of every
    replica that led, so the tables do not depend on where a micro-batch happened to end).

    ``lagging``: while it leads, the voters it sees lagging (``quorum_lag``), each with where its episode
    began: [offset, time, lag time then, epoch, threshold], so that the event that ends it can say so."""

    replica_id: int
    node: RaftNode | None = None
    down: bool = False
    startup: dict | None = None
    last_offset: int = -1
    last_time: int | None = None
    view: list[dict] = field(default_factory=list)
    lagging: dict[int, list[int]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"replica_id": self.replica_id, "node": None if self.node is None else self.node.to_dict(),
                           "down": self.down, "startup": self.startup, "last_offset": self.last_offset,
                           "last_time": self.last_time, "view": self.view,
                           "lagging": sorted([v, *since] for v, since in self.lagging.items())},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None, replica_id: int, properties: Mapping[str, str]) -> Replica:
        if not text:
            return cls(replica_id)
        d = json.loads(text)
        r = cls(d["replica_id"], None, d["down"], d["startup"], d["last_offset"], d["last_time"], d["view"],
                {v: since for v, *since in d.get("lagging", ())})  # a state written before quorum_lag: none
        if d["node"] is not None:
            config = raft_config(properties, r.startup)
            r.node = node_class(config).from_dict(d["node"], config)
        return r

    # ------------------------------------------------------------------------------------ events
    def next_deadline(self) -> int | None:
        return None if self.node is None or self.down else self.node.next_deadline()

    def advance(self, now: int) -> list[dict]:
        """Fire the timers due by ``now``; the messages they send (a simulator delivers them)."""
        return [] if self.node is None or self.down else advance(self.node, now)

    def apply(self, event: Mapping, properties: Mapping[str, str]) -> tuple[list[tuple[str, dict]], list[dict]]:
        """Handle one event addressed to this replica: (table, row) pairs for what it produced, and the
        messages it sent (which a replay of recorded traffic has no use for: they are in the log)."""
        now = event["timestamp"]
        if self.last_time is not None and now < self.last_time:
            now = self.last_time  # a replica's clock never goes back: a late event is handled now
        rows: list[tuple[str, dict]] = []
        t = event["type"]
        node = self.node
        sent = self.advance(now)
        if t == "ReplicaStartup":
            sent += self._start(event, now, properties)
        elif t == "ReplicaShutdown":
            if node is not None and not self.down:
                if event["data"].get("Graceful") and node.state == LEADER:
                    sent += node.resign(now)
                node.note(now, "replica_shutdown", graceful=bool(event["data"].get("Graceful")))
                self.down = True
        elif self.down:
            rows.append(("quorum_events", self._event_row(event, now, {
                "node_id": self.replica_id, "event": "dropped_while_down", "epoch": node.epoch if node else -1,
                "state": "down", "message": t})))
        else:
            if node is None:
                sent += self._start(None, now, properties)
                node = self.node
            assert node is not None
            message = None
            if not node.takes(t):  # the other protocol's message (ADR 0012): nothing changes
                rows.append(("rejected", self._rejected_row(event, "UNSUPPORTED_VERSION", (
                    f"replica {self.replica_id} runs the {node.config.protocol} quorum protocol, which has no {t}"))))
            else:
                try:
                    message = to_node_message(event, Limits.from_settings(properties))
                except (ValueError, KeyError, TypeError) as exc:  # malformed: reported, nothing else changes
                    rows.append(("rejected", self._rejected_row(
                        event, "INVALID_REQUEST" if t.endswith("Request") else "CORRUPT_MESSAGE",
                        f"replica {self.replica_id} cannot read this {t}: {exc!r}")))
            replies = [] if message is None else node.handle(message, now)
            sent += replies
            if t.endswith("Request"):
                answer = next((m for m in replies if m["type"] == t.replace("Request", "Response")), None)
                if answer is not None:
                    rows.append(("responses", self._response_row(event, answer, now)))
        self.last_offset, self.last_time = event["offset"], now
        leading = self.node is not None and self.node.state == LEADER and not self.down
        if leading:
            self.view = self._leader_view()
        if self.node is not None:
            self._judge_lag(leading, int(setting(properties, LAG_TIME_MAX_MS)))
            rows += [("quorum_events", self._event_row(event, e["time_ms"], e)) for e in self.node.events]
            self.node.events.clear()
        return rows, sent

    def _judge_lag(self, leading: bool, threshold_ms: int) -> None:
        """Note the voters that have just been behind for over ``threshold_ms`` in this leader's view, and
        those that no longer are (caught up, no longer a voter, or this replica no longer leads). A voter
        that has not caught up since the election is behind since the election (Kafka's view has no time
        for it: -1)."""
        node, now = self.node, self.last_time
        assert node is not None and now is not None
        behind: dict[int, int] = {}
        if leading:
            elected = node.elected_at()
            for row in self.view:
                if row["status"] == "Follower":
                    caught_up = row["last_caught_up_timestamp"]
                    lag = now - (elected if caught_up is None else caught_up)
                    if lag > threshold_ms:
                        behind[row["replica_id"]] = lag
        for voter in sorted(behind.keys() - self.lagging.keys()):
            node.note(now, VOTER_LAGGING, voter_id=voter, lag_time_ms=behind[voter], threshold_ms=threshold_ms)
            self.lagging[voter] = [self.last_offset, now, behind[voter], node.epoch, threshold_ms]
        for voter in sorted(self.lagging.keys() - behind.keys()):
            offset, time, lag, epoch, threshold = self.lagging.pop(voter)
            reason = "not_leading" if not leading else "not_a_voter" if voter not in node.voters else "caught_up"
            node.note(now, VOTER_LAG_ENDED, voter_id=voter, reason=reason, since_offset=offset, since_time=time,
                      since_lag_time_ms=lag, since_epoch=epoch, threshold_ms=threshold)

    def _start(self, event: Mapping | None, now: int, properties: Mapping[str, str]) -> list[dict]:
        startup = dict(event["data"]) if event is not None else self.startup
        config = raft_config(properties, startup)
        voters = tuple(startup["Voters"]) if startup else parse_voters(properties.get("controller.quorum.voters"))
        sent: list[dict] = []
        if self.node is None:
            self.node = node_class(config)(self.replica_id, voters, config)
            sent = self.node.tick(now)
        else:  # a restart: the quorum-state file and the log survive, nothing else does
            self.node = node_class(config).restore(self.replica_id, voters, config, RaftLog(self.node.log.entries),
                                                   self.node.durable_state(), now)
        self.node.note(now, "replica_started", voters=list(self.node.voters))
        self.startup, self.down = startup, False
        return sent

    # -------------------------------------------------------------------------------------- rows
    def _rejected_row(self, event: Mapping, error: str, reason: str) -> dict:
        return {"stage": "replay", "source": event.get("source"), "position": event.get("position"),
                "offset": event["offset"], "type": event["type"], "version": event.get("version"), "error": error,
                "reason": reason, "raw": None, "raw_length": None}

    def _event_row(self, event: Mapping, time_ms: int, e: Mapping) -> dict:
        detail = {k: v for k, v in e.items() if k not in ("time_ms", "node_id", "event", "epoch", "state")}
        return {"offset": event["offset"], "timestamp": time_ms, "replica_id": self.replica_id,
                "event": e["event"], "epoch": e["epoch"], "state": e["state"],
                "detail": json.dumps(detail, sort_keys=True, separators=(",", ":")) if detail else None}

    def _response_row(self, event: Mapping, answer: Mapping, now: int) -> dict:
        t, version, data = to_kafka(answer, now)
        err = answer["data"].get("ErrorCode")
        return {"offset": event["offset"], "timestamp": now, "request_type": event["type"],
                "request_version": event.get("version", 0), "type": t, "version": version, "error_code": err,
                "error_name": error_name(err), "error_message": None,
                "data": json.dumps(data, default=json_bytes)}  # bytes: FetchResponse's Records

    def state_rows(self) -> list[tuple[str, dict]]:
        """This replica's ``quorum_state`` row and, while it leads (or led), its view of every replica."""
        node = self.node
        if node is None:
            return []
        now = self.last_time
        rows: list[tuple[str, dict]] = [("quorum_state", {
            "replica_id": self.replica_id, "state": "down" if self.down else node.state,
            "leader_id": node.leader_id, "leader_epoch": node.epoch,
            "voted_id": -1 if node.voted_for is None else node.voted_for,
            "high_watermark": node.high_watermark if node.hw_known() else -1, "log_end_offset": node.log.end_offset,
            "last_fetched_epoch": node.log.last_epoch, "current_voters": list(node.voters),
            "target_voters": None if node.target_voters is None else list(node.target_voters),
            "cluster_id": node.cluster_id, "offset": self.last_offset, "timestamp": now})]
        return rows + [("quorum_replicas", row) for row in self.view]

    def _leader_view(self) -> list[dict]:
        node = self.node
        assert node is not None and self.last_time is not None
        now = self.last_time
        progress = node.replica_progress(now)
        end = node.log.end_offset
        target = node.target_voters
        rows = []
        for r in sorted(set(progress) | set(node.voters)):
            p = progress.get(r)
            me = r == self.replica_id
            log_end = end if me else (-1 if p is None or p.end_offset is None else p.end_offset)
            caught_up = now if me else (-1 if p is None else p.last_caught_up_ms)
            rows.append({
                "leader_id": self.replica_id, "leader_epoch": node.epoch, "replica_id": r,
                "status": "Leader" if me else "Follower" if r in node.voters else "Observer",
                "log_end_offset": log_end, "lag": end - log_end if log_end >= 0 else None,
                "last_fetch_timestamp": now if me else (None if p is None or p.last_fetch_ms < 0 else p.last_fetch_ms),
                "last_caught_up_timestamp": None if caught_up < 0 else caught_up,
                "lag_time_ms": None if caught_up < 0 else now - caught_up,
                "reassignment": None if target is None else
                "Adding" if r in target and r not in node.voters else
                "Removing" if r not in target and r in node.voters else None,
                "offset": self.last_offset, "timestamp": now})
        return rows


def is_quorum_event(event: Mapping) -> bool:
    return event["type"] in QUORUM_TRAFFIC


def replay_quorum(events: Iterable[Mapping], properties: Mapping[str, str] | None = None
                  ) -> tuple[dict[str, Any], dict[int, Replica]]:
    """The quorum tables from a log, in-process: ``quorum_state``, ``quorum_replicas`` and the quorum's
    ``anomalies`` as {key: row}, ``quorum_events`` and ``responses`` as lists in offset order. The
    reference the streaming job is tested against."""
    properties = properties or {}
    replicas: dict[int, Replica] = {}
    appended: dict[str, list[dict]] = {"quorum_events": [], "responses": [], "rejected": []}
    for event in events:
        if not is_quorum_event(event) or event.get("destination_id") is None:
            continue
        rid = event["destination_id"]
        replica = replicas.setdefault(rid, Replica(rid))
        for table, row in replica.apply(event, properties)[0]:
            appended[table].append(row)
    tables: dict[str, Any] = {"quorum_state": {}, "quorum_replicas": {}, **appended,
                              "anomalies": {tuple(r[k] for k in table_keys("anomalies")): r
                                            for r in QuorumAnomalies().rows(appended["quorum_events"])}}
    for replica in replicas.values():
        for table, row in replica.state_rows():
            tables[table][tuple(row[k] for k in table_keys(table))] = row
    return tables, replicas

__all__ = ["METADATA_TOPIC_ID", "Replica", "advance", "is_quorum_event",
           "parse_voters", "raft_config", "replay_quorum", "to_kafka", "to_node_message", "traffic_event"]
