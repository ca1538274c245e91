"""Replaying ProducerIdsRecord (rules from the controller's ``ProducerIdControlManager.replay``)."""

from __future__ import annotations

from kraftlake.image.cluster_image import ClusterImage, ReplayResult


def replay_producer_ids(image: ClusterImage, event: dict) -> ReplayResult:
    """Producer id blocks only move forward: handing out a block twice would let two producers share ids."""
    next_id = event["data"]["NextProducerId"]
    if next_id <= image.next_producer_id:
        return ReplayResult(
            rejected=f"next producer id {next_id} is not above the current {image.next_producer_id}")
    image.next_producer_id = next_id
    return ReplayResult()
