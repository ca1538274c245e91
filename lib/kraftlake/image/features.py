"""Replaying FeatureLevelRecord and ZkMigrationStateRecord, which Kafka keeps together in
``FeaturesImage`` (rules from ``FeaturesDelta`` and the controller's ``FeatureControlManager``)."""

from __future__ import annotations

from kraftlake.image.cluster_image import ClusterImage, ReplayResult

METADATA_VERSION = "metadata.version"
_ZK_MIGRATION_STATES = (0, 1, 2, 3)  # NONE, MIGRATION, PRE_MIGRATION, POST_MIGRATION


def replay_feature_level(image: ClusterImage, event: dict) -> ReplayResult:
    """Level 0 removes a feature, except metadata.version, which a cluster always has."""
    data = event["data"]
    name, level = data["Name"], data["FeatureLevel"]
    if level == 0 and name != METADATA_VERSION:
        image.features.pop(name, None)
    else:
        image.features[name] = level
    return ReplayResult()


def replay_zk_migration_state(image: ClusterImage, event: dict) -> ReplayResult:
    state = event["data"]["ZkMigrationState"]
    if state not in _ZK_MIGRATION_STATES:
        return ReplayResult(rejected=f"unknown ZkMigrationState {state}")
    image.zk_migration_state = state
    return ReplayResult()
