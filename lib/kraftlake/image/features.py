"""Replaying FeatureLevelRecord and ZkMigrationStateRecord, which Kafka keeps together in
``FeaturesImage`` (rules from ``FeaturesDelta`` and the controller's ``FeatureControlManager``), and the
``features`` table's account of who set each level."""

from __future__ import annotations

from kraftlake.image.causes import SNAPSHOT_LOADED
from kraftlake.image.cluster_image import ClusterImage, ReplayResult

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"  # the quorum's own feature, set by KRaftVersionRecord (KIP-853)
# How a level came to be set (features.cause): with the cluster's first records, before any node registered
# (``kafka-storage.sh format`` writes them, Kafka's bootstrap); by loading a snapshot; or afterwards, by an
# UpdateFeatures request (``kafka-features.sh upgrade`` / ``downgrade``).
BOOTSTRAP, UPDATE_FEATURES = "bootstrap", "update_features"
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


def finalized_levels(image: ClusterImage) -> dict[str, int]:
    """Every finalized feature level, kraft.version included (a log without a KRaftVersionRecord is at 0)."""
    return {**image.features, KRAFT_VERSION: image.quorum.kraft_version}


class Settings:
    """The levels one event sets, as ``features`` rows; made before the event applies, from the image as it
    was (the levels before, and whether any node had registered yet)."""

    def __init__(self, image: ClusterImage, snapshot: bool) -> None:
        self.levels: dict[str, int | None] = dict(finalized_levels(image))
        self.how = SNAPSHOT_LOADED if snapshot or image.pending_kind == "snapshot" else (
            BOOTSTRAP if not image.brokers and not image.controllers else UPDATE_FEATURES)

    def rows(self, event: dict, records: list[dict]) -> list[dict]:
        """Rows for the FeatureLevelRecords and KRaftVersionRecords among ``records`` (the event itself, or
        what its transaction or snapshot held), applied by ``event``."""
        rows = []
        for record in records:
            data = record["data"]
            if record["type"] == "FeatureLevelRecord":
                name, level = data["Name"], data["FeatureLevel"]
            elif record["type"] == "KRaftVersionRecord":
                name, level = KRAFT_VERSION, data["KRaftVersion"]
            else:
                continue
            rows.append({"offset": record["offset"], "timestamp": record["timestamp"],
                         "applied_offset": event["offset"], "feature": name, "level": level,
                         "level_before": self.levels.get(name), "record": record["type"], "cause": self.how})
            self.levels[name] = level
        return rows
