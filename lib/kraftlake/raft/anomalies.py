"""The quorum's anomaly episodes (``quorum_leaderless``, ``quorum_lag``), from its ``quorum_events`` rows.

Each replica runs on its own (``Replica.apply``, one group of the quorum query per replica), so a rule that
needs every replica at once cannot live there: whether the quorum still has a leader is only known across
replicas. This module reads the replicas' events instead, in offset order, with a little state carried
from one micro-batch to the next (the replicas leading, the leaderless episode still open), which the quorum
query's sink reads back from its own tables (``resume``): the same episodes in one micro-batch or in
thousands.

A voter's lag is the leader's own judgement (``Replica`` notes ``voter_lagging`` and ``voter_lag_ended``,
each naming where its episode began), so its rows need no state here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from kraftlake.metadata.progress import spoken_duration
from kraftlake.metadata.tables import table_arrow_schema
from kraftlake.raft.node import LEADER

LEADERLESS, LAG = "quorum_leaderless", "quorum_lag"
KINDS = (LEADERLESS, LAG)
LEADERLESS_ENTITY = "quorum"
LAG_TIME_MAX_MS = "kraftlake.anomaly.quorum.lag.time.max.ms"
VOTER_LAGGING, VOTER_LAG_ENDED = "voter_lagging", "voter_lag_ended"
ELECTED = "leader_elected"
# The events after which a replica that led no longer does (its state is no longer leader, or it is down):
# a resignation (graceful shutdown, zombie, removed from the voters), a later epoch learned, a crash, a
# failure; and a restart, noted in the state it restarted in (a sole voter leads again at once: after its
# leader_elected).
STARTED = "replica_started"
LEADERSHIP_ENDS = ("leader_resigned", "leader_step_down", "replica_shutdown", "replica_failed", STARTED)
# What a replica noted just before it resigned, at the same event, that says why
RESIGN_REASONS = ("zombie_leader_detected", "leader_removed_from_voters")
_SAID = {"leader_resigned": "resigned", "leader_step_down": "stepped down", "replica_shutdown": "shut down",
         "replica_failed": "failed", "replica_started": "restarted",
         "zombie_leader_detected": "resigned as a zombie (no fetch from a majority)",
         "leader_removed_from_voters": "resigned, removed from the voters"}


def voter_entity(voter: int) -> str:
    return f"quorum voter {voter}"


def _row(kind: str, entity: str, offset: int, timestamp: int, cause: str, detail: str, broker: int | None = None
         ) -> dict:
    """An open episode's anomalies row (times in ms, as the core makes rows); the columns the quorum's kinds
    do not use (a partition's) are null."""
    row: dict = dict.fromkeys(table_arrow_schema("anomalies").names)
    row.update(kind=kind, entity=entity, broker_id=broker, start_offset=offset, start_time=timestamp, cause=cause,
               cause_offset=offset, detail=detail)
    return row


def _ended(row: dict, offset: int, timestamp: int, why: str) -> dict:
    length = spoken_duration(timestamp - row["start_time"])
    return {**row, "end_offset": offset, "end_time": timestamp, "detail": f"{row['detail']}; for {length}, until {why}"}


def _lag_opened(leader: int, voter: int, epoch: int, offset: int, timestamp: int, lag_ms: int, threshold_ms: int
                ) -> dict:
    return _row(LAG, voter_entity(voter), offset, timestamp, VOTER_LAGGING,
                f"voter {voter} not caught up with leader {leader} (epoch {epoch}) for {spoken_duration(lag_ms)}, "
                f"over kraftlake.anomaly.quorum.lag.time.max.ms={threshold_ms}", broker=voter)


@dataclass
class QuorumAnomalies:
    """What carries over between micro-batches: the replicas leading after the last event judged, and the
    leaderless episode still open (its row). No leader and nothing open: no replica has led yet, and the
    quorum's first election is its startup, not an anomaly."""

    leaders: set[int] = field(default_factory=set)
    open: dict | None = None

    @classmethod
    def resume(cls, quorum_state: Iterable[Mapping], open_rows: Iterable[Mapping]) -> QuorumAnomalies:
        """From the tables as the last micro-batch left them: ``quorum_state`` (each replica as of its last
        event: ``down`` or its Raft state) and the open ``anomalies`` rows (times in ms)."""
        leaders = {r["replica_id"] for r in quorum_state if r["state"] == LEADER}
        open_row = next((dict(r) for r in open_rows if r["kind"] == LEADERLESS and r["end_offset"] is None), None)
        return cls(leaders, open_row)

    def rows(self, events: Iterable[Mapping]) -> list[dict]:
        """The anomalies rows (upserts, in order) that ``events``, ``quorum_events`` rows in offset order,
        open and close."""
        out: list[dict] = []
        why: dict[int, tuple[int, str]] = {}  # replica -> (offset, a reason it noted for resigning)
        for e in events:
            event, replica, offset, timestamp = e["event"], e["replica_id"], e["offset"], e["timestamp"]
            if event == ELECTED:
                self.leaders.add(replica)
                if self.open is not None:
                    out.append(_ended(self.open, offset, timestamp,
                                      f"replica {replica} was elected leader of epoch {e['epoch']}"))
                    self.open = None
            elif event in RESIGN_REASONS:
                why[replica] = (offset, event)
            elif event in LEADERSHIP_ENDS and replica in self.leaders and (event != STARTED or e["state"] != LEADER):
                self.leaders.discard(replica)
                noted = why.get(replica)
                cause = noted[1] if noted is not None and noted[0] == offset and event == "leader_resigned" else event
                if not self.leaders:
                    self.open = _row(LEADERLESS, LEADERLESS_ENTITY, offset, timestamp, cause,
                                     f"no leader: replica {replica}, leader of epoch {e['epoch']}, {_SAID[cause]}")
                    out.append(self.open)
            elif event in (VOTER_LAGGING, VOTER_LAG_ENDED):
                out.append(_lag_row(e))
        return out


def _lag_row(e: Mapping) -> dict:
    """A ``voter_lagging`` event's open row, or the closed row of the episode a ``voter_lag_ended`` names."""
    d = json.loads(e["detail"])
    if e["event"] == VOTER_LAGGING:
        return _lag_opened(e["replica_id"], d["voter_id"], e["epoch"], e["offset"], e["timestamp"],
                           d["lag_time_ms"], d["threshold_ms"])
    start = _lag_opened(e["replica_id"], d["voter_id"], d["since_epoch"], d["since_offset"], d["since_time"],
                        d["since_lag_time_ms"], d["threshold_ms"])
    return _ended(start, e["offset"], e["timestamp"], {
        "caught_up": f"it caught up with leader {e['replica_id']}",
        "not_leading": f"replica {e['replica_id']} stopped leading",
        "not_a_voter": "it was no longer a voter"}[d["reason"]])


__all__ = ["KINDS", "LAG", "LAG_TIME_MAX_MS", "LEADERLESS", "LEADERSHIP_ENDS", "QuorumAnomalies", "VOTER_LAGGING",
           "VOTER_LAG_ENDED", "voter_entity"]
