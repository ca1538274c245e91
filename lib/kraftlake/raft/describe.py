"""What ``kafka-metadata-quorum.sh describe`` prints, from the warehouse's quorum tables (pure).

Two sources, the better one first:

- the quorum traffic's tables (``quorum_state``, ``quorum_replicas``): the leader of the highest epoch
  and its view of every replica, as DescribeQuorum answers;
- the metadata log alone (a real cluster's log has no quorum traffic): its last LeaderChangeMessage or
  VotersRecord and its end offset. Everything in a log someone copied off a controller was written, so
  its end stands for the high watermark; the other replicas' progress is not in a log, and is shown as
  unknown rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class LogView:
    """The quorum as the metadata log shows it (``None`` fields: not in the log)."""

    leader_id: int | None
    leader_epoch: int | None
    end_offset: int | None
    voters: list[int] | None


def current_leader(states: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``quorum_state`` row of the replica leading the highest epoch."""
    leaders = [s for s in states if s["state"] == "leader"]
    return max(leaders, key=lambda s: (s["leader_epoch"], s["offset"])) if leaders else None


def status(states: Sequence[Mapping[str, Any]], replicas: Sequence[Mapping[str, Any]], log: LogView,
           cluster_id: str | None = None) -> list[tuple[str, Any]]:
    """``describe --status``: (field, value) in the tool's order."""
    leader = current_leader(states)
    if leader is None and states:  # traffic, but an election is under way: no leader to ask
        latest = max(states, key=lambda s: (s["leader_epoch"], s["offset"]))
        voters = list(latest["current_voters"])
        fields = [("LeaderId", -1), ("LeaderEpoch", latest["leader_epoch"]),
                  ("HighWatermark", max(s["high_watermark"] for s in states)),
                  ("MaxFollowerLag", "unknown (no leader)"), ("MaxFollowerLagTimeMs", "unknown (no leader)"),
                  ("CurrentVoters", voters),
                  ("CurrentObservers", sorted(s["replica_id"] for s in states if s["replica_id"] not in voters)),
                  ("Candidates", sorted(s["replica_id"] for s in states if s["state"] == "candidate"))]
    elif leader is not None:
        view = [r for r in replicas if r["leader_id"] == leader["replica_id"]
                and r["leader_epoch"] == leader["leader_epoch"]]
        followers = [r for r in view if r["status"] == "Follower"]
        observers = sorted(r["replica_id"] for r in view if r["status"] == "Observer")
        lags = [r["lag"] for r in followers if r["lag"] is not None]
        lag_times = [r["lag_time_ms"] for r in followers if r["lag_time_ms"] is not None]
        fields: list[tuple[str, Any]] = [
            ("LeaderId", leader["replica_id"]), ("LeaderEpoch", leader["leader_epoch"]),
            ("HighWatermark", leader["high_watermark"]), ("MaxFollowerLag", max(lags, default=0)),
            ("MaxFollowerLagTimeMs", max(lag_times, default=0) if followers else 0),
            ("CurrentVoters", list(leader["current_voters"])), ("CurrentObservers", observers)]
        if leader.get("target_voters") is not None:
            fields.append(("TargetVoters", list(leader["target_voters"])))
    else:
        single = log.voters is not None and len(log.voters) == 1
        fields = [("LeaderId", _known(log.leader_id)), ("LeaderEpoch", _known(log.leader_epoch)),
                  ("HighWatermark", _known(log.end_offset)),
                  ("MaxFollowerLag", 0 if single else "unknown (not in the log)"),
                  ("MaxFollowerLagTimeMs", 0 if single else "unknown (not in the log)"),
                  ("CurrentVoters", log.voters if log.voters is not None else "unknown"),
                  ("CurrentObservers", "unknown (not in the log)")]
    return ([("ClusterId", cluster_id)] if cluster_id else []) + fields


def replication(states: Sequence[Mapping[str, Any]], replicas: Sequence[Mapping[str, Any]], log: LogView
                ) -> list[dict[str, Any]]:
    """``describe --replication``: one row per replica, the leader first, then voters, then observers.
    With no leader now (an election under way), the view of the last leader, as it last saw it."""
    leader = current_leader(states)
    if leader is None and replicas:
        last = max(replicas, key=lambda r: (r["leader_epoch"], r["offset"]))
        leader = {"replica_id": last["leader_id"], "leader_epoch": last["leader_epoch"]}
    if leader is None:
        if log.leader_id is None:
            return []
        return [{"ReplicaId": log.leader_id, "LogEndOffset": _known(log.end_offset), "Lag": 0, "LagTimeMs": 0,
                 "Status": "Leader"}] + [
            {"ReplicaId": v, "LogEndOffset": "unknown", "Lag": "unknown", "LagTimeMs": "unknown",
             "Status": "Follower"} for v in (log.voters or []) if v != log.leader_id]
    view = [r for r in replicas if r["leader_id"] == leader["replica_id"] and r["leader_epoch"] == leader["leader_epoch"]]
    order = {"Leader": 0, "Follower": 1, "Observer": 2}
    rows = []
    for r in sorted(view, key=lambda r: (order[r["status"]], r["replica_id"])):
        row = {"ReplicaId": r["replica_id"], "LogEndOffset": r["log_end_offset"],
               "Lag": "unknown" if r["lag"] is None else r["lag"],
               "LagTimeMs": "unknown" if r["lag_time_ms"] is None else r["lag_time_ms"], "Status": r["status"]}
        if r.get("reassignment"):
            row["Status"] += f" ({r['reassignment']})"
        rows.append(row)
    return rows


def _known(value: Any) -> Any:
    return "unknown" if value is None else value


def format_status(fields: list[tuple[str, Any]]) -> str:
    return "\n".join(f"{name + ':':<24}{_text(value)}" for name, value in fields)


def format_replication(rows: list[dict[str, Any]]) -> str:
    columns = ["ReplicaId", "LogEndOffset", "Lag", "LagTimeMs", "Status"]
    cells = [columns] + [[_text(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


__all__ = ["LogView", "current_leader", "format_replication", "format_status", "replication", "status"]
