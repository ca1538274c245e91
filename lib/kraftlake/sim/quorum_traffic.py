"""A simulated metadata quorum written into a warehouse, through the same ingest path as real logs.

Two sources per run, in ``<warehouse>/_quorum_sim/seed-<seed>/``:

- ``__cluster_metadata-0/``: the committed metadata log in Kafka's format (LeaderChangeMessage and
  VotersRecord control records, the leaders' NoOpRecords, batches stamped with their leader epoch) and
  the leader's ``quorum-state`` file, ingested first, so that its offsets are the Raft offsets and the
  ``quorum_history`` view shows the simulated epochs;
- ``traffic.jsonl``: everything each replica received, in delivery order (JSON lines events with
  ``destination_id``), which the quorum query replays replica by replica.

Ingest is idempotent per source content, so writing the same seed twice adds nothing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from kraftlake.codec.events import json_bytes
from kraftlake.codec.writer import write_partition_dir
from kraftlake.raft.node import LEADER
from kraftlake.sim.quorum import SimConfig, SimResult, Simulation
from kraftlake.storage.ingest import ingest_source


def committed_events(result: SimResult) -> list[dict]:
    """The committed prefix as ``metadata_log`` events (offsets from 0), from the replica that holds
    the longest one."""
    best = max((r.node for r in result.replicas.values() if r.node is not None),
               key=lambda n: (n.high_watermark, n.state == LEADER))
    return [{"offset": o, "leader_epoch": e.epoch, "timestamp": e.value["timestamp"], "type": e.value["type"],
             "version": 0, "data": e.value["data"]} for o, e in enumerate(best.log.entries[:best.high_watermark])]


def quorum_state_file(result: SimResult) -> dict:
    """Kafka's ``quorum-state`` (QuorumStateData v0 as JSON) of the replica whose log is written."""
    best = max((r.node for r in result.replicas.values() if r.node is not None),
               key=lambda n: (n.high_watermark, n.state == LEADER))
    return {"clusterId": best.cluster_id or "", "leaderId": best.leader_id, "leaderEpoch": best.epoch,
            "votedId": -1 if best.voted_for is None else best.voted_for, "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in best.voters], "data_version": 0}


def write_files(result: SimResult, folder: Path) -> tuple[Path, Path]:
    """The run's two sources, written under ``folder``."""
    log_dir = folder / "__cluster_metadata-0"
    write_partition_dir(log_dir, committed_events(result))
    (log_dir / "quorum-state").write_text(json.dumps(quorum_state_file(result), separators=(",", ":")))
    traffic = folder / "traffic.jsonl"
    with open(traffic, "w") as handle:
        for event in result.traffic:
            line = {k: v for k, v in event.items() if k not in ("offset", "leader_epoch") and v is not None}
            handle.write(json.dumps(line, default=json_bytes, separators=(",", ":")) + "\n")
    return log_dir, traffic


def write_simulation(warehouse: Any, *, seed: int, voters: int = 3, observers: int = 0, duration_ms: int = 20_000,
                     config: SimConfig | None = None, strict: bool = True) -> SimResult:
    """Simulate, check, and ingest the committed log and the traffic into ``warehouse``."""
    base = config or SimConfig()
    cfg = SimConfig(**{**base.__dict__, "voters": voters, "observers": observers, "duration_ms": duration_ms})
    result = Simulation(seed, cfg).run()
    # next to the tables for a local warehouse (kept, like a log an operator ingested); else a temp dir
    root = Path(warehouse.root) if "://" not in warehouse.root else Path(tempfile.mkdtemp(prefix="kraftlake-quorum-"))
    folder = root / "_quorum_sim" / f"seed-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    for source in write_files(result, folder):
        ingest_source(warehouse, str(source), strict=strict)
    return result


__all__ = ["committed_events", "quorum_state_file", "write_files", "write_simulation"]
