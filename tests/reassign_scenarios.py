"""Request lines for the reassignment tests through the streaming job (see ``controller_scenarios``).

Everything here writes requests as a person would, with Kafka's field names; nothing reads the
code under test to decide what to expect.
"""

from __future__ import annotations

from controller_scenarios import RequestLog


def reassign(log: RequestLog, plan: dict[str, dict[int, list[int] | None]], at: int | None = None) -> int:
    """AlterPartitionReassignmentsRequest v0; ``plan``: topic -> partition -> target (None cancels)."""
    return log.add("AlterPartitionReassignmentsRequest", 0, {"TimeoutMs": 60000, "Topics": [
        {"Name": name, "Partitions": [{"PartitionIndex": i, "Replicas": r} for i, r in parts.items()]}
        for name, parts in plan.items()]}, at)


def list_reassignments(log: RequestLog, topics: dict[str, list[int]] | None = None) -> int:
    """ListPartitionReassignmentsRequest v0: every one (None) or the named partitions."""
    entries = None if topics is None else [{"Name": n, "PartitionIndexes": ps} for n, ps in topics.items()]
    return log.add("ListPartitionReassignmentsRequest", 0, {"TimeoutMs": 60000, "Topics": entries})


def cluster(log: RequestLog, brokers: range, fenced: tuple[int, ...] = ()) -> dict[int, int]:
    """metadata.version 19, brokers registered (epoch = the registration's offset) and, except the
    ``fenced`` ones, unfenced by a caught-up heartbeat. Returns the broker epochs."""
    log.add("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 19})
    epoch = {b: log.register(b) for b in brokers}
    for b in brokers:
        if b not in fenced:
            log.heartbeat(b, epoch[b])
    return epoch
