"""Building blocks for tests that drive ``RaftNode`` by hand (``tests/test_raft.py`` and the translations
of Kafka's Raft tests in ``tests/kafka/raft``): a node, an elected leader, and Kafka's RPCs as the flat
messages the node takes. Jitter is 0, so timeouts land on exact event times."""

from __future__ import annotations

from typing import Any, Mapping

from kraftlake.raft.config import RaftConfig
from kraftlake.raft.log import LogEntry, RaftLog
from kraftlake.raft.node import CANDIDATE, LEADER, RaftNode, message

CFG = RaftConfig(cluster_id="kraft", election_timeout_ms=1000, election_jitter_max_ms=0,
                 election_backoff_max_ms=1000, fetch_timeout_ms=2000)

NONE, FENCED, UNKNOWN_EPOCH, NOT_LEADER, INVALID, CLUSTER = 0, 74, 75, 6, 42, 104


def log_of(*epochs: int) -> RaftLog:
    return RaftLog(LogEntry(e, f"r{i}") for i, e in enumerate(epochs))


def node(node_id=1, voters=(1, 2, 3), epochs=(), epoch=0, cfg=CFG, now=0) -> RaftNode:
    n = RaftNode(node_id, voters, cfg, log_of(*epochs), epoch=epoch)
    n.tick(now)
    return n


def vote(src, dst, epoch, last_epoch=0, last_offset=0, cluster="kraft"):
    return message("VoteRequest", src, dst, ClusterId=cluster, VoterId=dst, CandidateEpoch=epoch, CandidateId=src,
                   LastOffsetEpoch=last_epoch, LastOffset=last_offset)


def granted(src, dst, epoch, yes=True):
    return message("VoteResponse", src, dst, ErrorCode=0, VoteGranted=yes, LeaderId=-1, LeaderEpoch=epoch)


def fetch(src, dst, epoch, offset, last_epoch, cluster="kraft"):
    return message("FetchRequest", src, dst, ClusterId=cluster, ReplicaId=src, CurrentLeaderEpoch=epoch,
                   FetchOffset=offset, LastFetchedEpoch=last_epoch)


def begin(src, dst, epoch):
    return message("BeginQuorumEpochRequest", src, dst, ClusterId="kraft", VoterId=dst, LeaderId=src,
                   LeaderEpoch=epoch)


def only(out, type_):
    return sent(out, type_)["data"]


def sent(out: list[dict], type_: str) -> dict:
    """The one message of ``type_`` among what a node sent (with its destination and CorrelationId)."""
    found = [m for m in out if m["type"] == type_]
    assert len(found) == 1, out
    return found[0]


def destinations(out: list[dict], type_: str) -> list[int]:
    return sorted(m["destination"] for m in out if m["type"] == type_)


def restored(node_id: int, voters: tuple[int, ...], *, epoch: int, leader: int = -1, voted: int | None = None,
             epochs: tuple[int, ...] = (), cfg: RaftConfig = CFG, now: int = 0) -> RaftNode:
    """A node started from its quorum-state file and log (Kafka: ``withElectedLeader``,
    ``withVotedCandidate``, ``withUnknownLeader`` and ``appendToLog``)."""
    return RaftNode.restore(node_id, voters, cfg, log_of(*epochs),
                            {"epoch": epoch, "leader_id": leader, "voted_for": voted}, now)


def answer(request: Mapping[str, Any], type_: str, **data: Any) -> dict:
    """The answer to a request a node sent, with its CorrelationId: a node handles only the answer to the
    request in flight to that peer (Kafka's ``RequestManager``)."""
    return {**message(type_, request["destination"], request["source"], **data),
            "correlation_id": request["correlation_id"]}


def fetch_answer(request: Mapping[str, Any], *, leader: int, epoch: int, error: int = NONE, hw: int = -1,
                 records: list[dict] | None = None, diverging: tuple[int, int] = (-1, -1)) -> dict:
    return answer(request, "FetchResponse", ErrorCode=error, HighWatermark=hw,
                  DivergingEpoch={"Epoch": diverging[0], "EndOffset": diverging[1]},
                  CurrentLeader={"LeaderId": leader, "LeaderEpoch": epoch}, Records=records or [])


def entries(start: int, epoch: int, *values: Any) -> list[dict]:
    """Records as a FetchResponse carries them, from offset ``start``, all of ``epoch``."""
    return [{"Offset": start + i, "Epoch": epoch, "Value": v} for i, v in enumerate(values)]


def times_out_at(n: RaftNode, at: int, before: str, after: str) -> None:
    """A timer of ``n`` fires at ``at`` and not a moment before: in state ``before`` at ``at - 1``, in
    ``after`` at ``at``."""
    n.tick(at - 1)
    assert n.state == before, (at - 1, n.state)
    n.tick(at)
    assert n.state == after, (at, n.state)


def elected(node_id=1, voters=(1, 2, 3), epochs=(), epoch=0, cfg=CFG) -> RaftNode:
    """Node ``node_id`` times out at 1000 ms (jitter 0), stands in epoch+1 and wins with the next voters' votes."""
    n = node(node_id, voters, epochs, epoch, cfg)
    n.tick(1000)
    assert n.state == CANDIDATE and n.epoch == epoch + 1
    for v in [v for v in voters if v != node_id][: len(voters) // 2]:
        n.handle(granted(v, node_id, epoch + 1), 1000)
    assert n.state == LEADER
    return n
