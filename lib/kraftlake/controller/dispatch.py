"""Which decision answers which request, and in what scope a shard decides it (ADR 0003).

Three kinds of requests, by what they touch:
- broker requests change broker records only (and the failover of the shard's own partitions): every
  shard decides them identically from the broker registry it shares with the others;
- topic requests (CreateTopics, DeleteTopics) are decided by every shard over every topic, so that each
  shard knows every topic name; only the owner keeps the partition records;
- partition requests are decided by each shard for the topics it owns; the shards' answers are merged.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from kraftlake.controller import cluster_control, reassignments, replication, topics
from kraftlake.controller.cluster_control import ControllerState
from kraftlake.controller.decisions import Context, Decision
from kraftlake.image.cluster_image import ClusterImage

BROKER_REQUESTS: dict[str, Callable[[ClusterImage, ControllerState, dict, Context], Decision]] = {
    "BrokerRegistrationRequest": cluster_control.decide_broker_registration,
    "BrokerHeartbeatRequest": cluster_control.decide_broker_heartbeat,
    "UnregisterBrokerRequest": cluster_control.decide_unregister_broker,
}
TOPIC_REQUESTS: dict[str, Callable[[ClusterImage, dict, Context], Decision]] = {
    "CreateTopicsRequest": topics.create_topics,
    "DeleteTopicsRequest": topics.delete_topics,
}
# The decisions that read ``Context.shutting_down``: replica placement skips the brokers shutting down
PLACES_REPLICAS = frozenset({"CreateTopicsRequest", "CreatePartitionsRequest"})
PARTITION_REQUESTS: dict[str, Callable[[ClusterImage, dict, Context], Decision]] = {
    "AlterPartitionRequest": replication.alter_partition,
    "ElectLeadersRequest": replication.elect_leaders,
    "CreatePartitionsRequest": topics.create_partitions,
    "AlterPartitionReassignmentsRequest": reassignments.alter_partition_reassignments,
    "ListPartitionReassignmentsRequest": reassignments.list_partition_reassignments,
}


def decide(image: ClusterImage, state: ControllerState, request: dict, ctx: Context,
           shutting_down: Callable[[], frozenset[int]] | None = None) -> Decision | None:
    """The decision for ``request`` as this shard sees it; None for a request no manager handles yet.
    ``shutting_down``: gives ``cluster_control.shutting_down`` of this image and state, if the caller
    keeps it. Only the decisions that place replicas read it (``PLACES_REPLICAS``), so the others do
    not pay for a walk over every broker."""
    type_ = request["type"]
    if type_ in BROKER_REQUESTS:
        return BROKER_REQUESTS[type_](image, state, request, ctx)
    if type_ in PLACES_REPLICAS:
        leaving = cluster_control.shutting_down(image, state) if shutting_down is None else shutting_down()
        if leaving != ctx.shutting_down:  # usually both empty: no copy, which costs as much as a small decision
            ctx = dataclasses.replace(ctx, shutting_down=leaving)
    if type_ in TOPIC_REQUESTS:
        return TOPIC_REQUESTS[type_](image, request, dataclasses.replace(ctx, owns=lambda topic_id: True))
    if type_ in PARTITION_REQUESTS:
        return PARTITION_REQUESTS[type_](image, request, ctx)
    return None


def handle_request(image: ClusterImage, state: ControllerState, request: dict, ctx: Context,
                   apply: Callable[[list[dict]], None], starts_term: bool, expire: bool = True,
                   shutting_down: Callable[[], frozenset[int]] | None = None) -> Decision | None:
    """One request the way Kafka's controller meets it: take over the log if this request starts a term,
    fence the brokers whose sessions expired by its event time, move leaders back to their preferred
    replicas if a leader-imbalance check is due, then decide it.

    Each step's records go through ``apply`` (replayed into ``image``) before the next step looks at the
    image, as in Kafka, where they are appended in that order. The decision's own records are the
    caller's to apply. ``expire=False`` lets a caller that knows no session can have expired yet skip
    the scan, and ``shutting_down`` give what ``cluster_control.shutting_down`` would find after the
    steps before the decision. The shards and the cluster simulator both run requests through here, so
    they cannot disagree on the order.
    """
    if starts_term:
        cluster_control.take_over(image, state, ctx.now_ms)
    if expire:
        apply(cluster_control.expire_sessions(image, state, ctx))
    if cluster_control.due_leader_balance(state, ctx.config, ctx.now_ms):
        apply(replication.balance_partition_leaders(image, ctx))
    return decide(image, state, request, ctx, shutting_down)


def merge_responses(parts: list[dict]) -> dict:
    """One response from the shards' answers to a broadcast request, in shard order.

    Each topic or partition is answered by its owner, and an entry about an unknown topic by every
    shard alike, so lists are united without repeats and scalars are the first shard's.
    """
    def merge(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: merge(a[k], b[k]) if k in b else a[k] for k in a}
        if isinstance(a, list) and isinstance(b, list):
            return a + [item for item in b if item not in a]
        return a

    merged = parts[0]
    for part in parts[1:]:
        merged = merge(merged, part)
    return merged
