"""Partitions under the controller's care (Kafka's ``ReplicationControlManager``): failover of a broker
that is fenced or shutting down, AlterPartition and ElectLeaders.

Every function returns what the controller writes and never touches the image; the caller replays the
records (ADR 0003).
"""

from __future__ import annotations

from kraftlake.decisions import Context
from kraftlake.elections import (
    Election,
    change_partition,
    eligible_replicas,
    metadata_version,
    unclean_election_enabled,
)
from kraftlake.image import ClusterImage


def _topic_election(image: ClusterImage, topic_name: str, ctx: Context) -> Election:
    return Election.UNCLEAN if unclean_election_enabled(image, topic_name, ctx.config) else Election.ONLINE


def broker_failover(image: ClusterImage, broker_id: int, ctx: Context) -> list[dict]:
    """The PartitionChangeRecords that take ``broker_id`` out of every ISR it is in and move its
    leaderships (Kafka's ``generateLeaderAndIsrUpdates`` for a fenced or shutting-down broker).

    The broker is excluded explicitly rather than through the image, because Kafka writes these
    records before the one that fences it. Partitions it is not in the ISR of cannot change: it leads
    none of them. Only this shard's topics are considered (``ctx.owns``).
    """
    mv = metadata_version(image)
    eligible = eligible_replicas(image, excluded=(broker_id,))
    records = []
    for topic in image.topics.values():
        if not ctx.owns(topic.id):
            continue
        election = _topic_election(image, topic.name, ctx)
        for partition in topic.partitions.values():
            if broker_id not in partition.isr:
                continue
            change = change_partition(partition, eligible, isr=[r for r in partition.isr if r != broker_id],
                                      election=election, mv=mv)
            if change is not None:
                records.append(change)
    return records
