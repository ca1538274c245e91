"""``replay(image, event)``: one metadata log event into the image, for every Kafka 4.x record type.

Dispatch is by Kafka's type name. Two kinds of records do not apply one by one, as in Kafka's
``MetadataLoader``/``MetadataBatchLoader``:

- a metadata transaction (KIP-866: BeginTransactionRecord ... EndTransactionRecord) takes effect at
  its end, all at once, and an AbortTransactionRecord drops it;
- a snapshot (SnapshotHeaderRecord ... SnapshotFooterRecord) replaces the metadata image whole at its
  footer: what the snapshot does not mention no longer exists (``MetadataDelta.finishSnapshot``).
  Like Kafka's loader, starting a snapshot discards a transaction left open before it.

Held-back records live in the image itself, so a transaction may span micro-batches of the streaming
job. Control records (LeaderChangeMessage, VotersRecord, KRaftVersionRecord, the KIP-595 draft's
VoterAssignmentMessage) describe the Raft quorum, not the metadata, and apply as they are read, even
inside a transaction or snapshot.
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

from kraftlake.image import brokers, control_records, dynamic_configs, features, partitions, producer_ids, security
from kraftlake.image.cluster_image import ClusterImage, ReplayResult

Handler = Callable[[ClusterImage, dict], ReplayResult]
T = TypeVar("T")


def _no_op(image: ClusterImage, event: dict) -> ReplayResult:
    return ReplayResult()


# Metadata records: held back while a transaction or snapshot is open.
_RECORDS: dict[str, Handler] = {
    "RegisterBrokerRecord": brokers.replay_register_broker,
    "UnregisterBrokerRecord": brokers.replay_unregister_broker,
    "FenceBrokerRecord": brokers.replay_fence_broker,
    "UnfenceBrokerRecord": brokers.replay_unfence_broker,
    "BrokerRegistrationChangeRecord": brokers.replay_registration_change,
    "RegisterControllerRecord": brokers.replay_register_controller,
    "TopicRecord": partitions.replay_topic,
    "PartitionRecord": partitions.replay_partition,
    "PartitionChangeRecord": partitions.replay_partition_change,
    "RemoveTopicRecord": partitions.replay_remove_topic,
    "ConfigRecord": dynamic_configs.replay_config,
    "ClientQuotaRecord": dynamic_configs.replay_client_quota,
    "FeatureLevelRecord": features.replay_feature_level,
    "ZkMigrationStateRecord": features.replay_zk_migration_state,
    "ProducerIdsRecord": producer_ids.replay_producer_ids,
    "AccessControlEntryRecord": security.replay_acl,
    "RemoveAccessControlEntryRecord": security.replay_remove_acl,
    "UserScramCredentialRecord": security.replay_scram_credential,
    "RemoveUserScramCredentialRecord": security.replay_remove_scram_credential,
    "DelegationTokenRecord": security.replay_delegation_token,
    "RemoveDelegationTokenRecord": security.replay_remove_delegation_token,
    "NoOpRecord": _no_op,  # the leader's heartbeat in the log: it only advances the offset
}

# Control records: apply immediately, never held back.
_CONTROL: dict[str, Handler] = {
    "LeaderChangeMessage": control_records.replay_leader_change,
    "VotersRecord": control_records.replay_voters,
    "VoterAssignmentMessage": control_records.replay_voter_assignment,
    "KRaftVersionRecord": control_records.replay_kraft_version,
}

_TRANSACTION = "transaction"
_SNAPSHOT = "snapshot"

# Malformed data (a missing field, a wrong type, a bad Uuid) surfaces as one of these; handlers
# compute everything before they mutate, so the image is untouched when one is raised.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def replay(image: ClusterImage, event: dict) -> ReplayResult:
    """Mutates ``image`` (see ``kraftlake.image.cluster_image`` for why) and reports what changed, so that callers
    write partition and broker history without ever diffing images."""
    try:
        event_type = event["type"]
    except (KeyError, TypeError):
        return ReplayResult(rejected="not an event: it has no type")
    control = _CONTROL.get(event_type)
    if control is not None:
        return _guarded(control, image, event)
    marker = _MARKERS.get(event_type)
    if marker is not None:
        return marker(image, event)
    if event_type not in _RECORDS:
        return ReplayResult(rejected=f"unknown record type {event_type!r}")
    if image.pending_kind is not None:
        image.pending_events.append(event)
        return ReplayResult(deferred=True)
    return _guarded(_RECORDS[event_type], image, event)


def _guarded(handler: Handler, image: ClusterImage, event: dict) -> ReplayResult:
    try:
        return handler(image, event)
    except _MALFORMED as exc:
        return ReplayResult(rejected=f"malformed {event.get('type')}: {type(exc).__name__}: {exc}")


def _begin_transaction(image: ClusterImage, event: dict) -> ReplayResult:
    if image.pending_kind is not None:
        return ReplayResult(rejected=f"BeginTransactionRecord inside an open {image.pending_kind}")
    image.pending_kind, image.pending_events = _TRANSACTION, []
    return ReplayResult()


def _end_transaction(image: ClusterImage, event: dict) -> ReplayResult:
    if image.pending_kind != _TRANSACTION:
        return ReplayResult(rejected="EndTransactionRecord without an open transaction")
    held = _take_pending(image)
    result = _apply_all(image, held)
    result.partition_changes = _collapse(result.partition_changes, lambda p: (p.topic_id, p.partition_id))
    result.broker_changes = _collapse(result.broker_changes, lambda b: b.id)
    return result


def _abort_transaction(image: ClusterImage, event: dict) -> ReplayResult:
    if image.pending_kind != _TRANSACTION:
        return ReplayResult(rejected="AbortTransactionRecord without an open transaction")
    _take_pending(image)
    return ReplayResult()


def _snapshot_header(image: ClusterImage, event: dict) -> ReplayResult:
    if image.pending_kind == _SNAPSHOT:
        return ReplayResult(rejected="SnapshotHeaderRecord inside a snapshot")
    image.pending_kind, image.pending_events = _SNAPSHOT, []
    return ReplayResult()


def _snapshot_footer(image: ClusterImage, event: dict) -> ReplayResult:
    if image.pending_kind != _SNAPSHOT:
        return ReplayResult(rejected="SnapshotFooterRecord without a SnapshotHeaderRecord")
    loaded = ClusterImage(quorum=image.quorum)
    result = _apply_all(loaded, _take_pending(image))
    result.partition_changes = _diff(
        {(p.topic_id, p.partition_id): p for p in image.iter_partitions()},
        {(p.topic_id, p.partition_id): p for p in loaded.iter_partitions()},
    )
    result.broker_changes = _diff(image.brokers, loaded.brokers)
    image.take_metadata_from(loaded)
    return result


_MARKERS: dict[str, Handler] = {
    "BeginTransactionRecord": _begin_transaction,
    "EndTransactionRecord": _end_transaction,
    "AbortTransactionRecord": _abort_transaction,
    "SnapshotHeaderRecord": _snapshot_header,
    "SnapshotFooterRecord": _snapshot_footer,
}


def _take_pending(image: ClusterImage) -> list[dict]:
    held = image.pending_events
    image.pending_kind, image.pending_events = None, []
    return held


def _apply_all(image: ClusterImage, events: list[dict]) -> ReplayResult:
    total = ReplayResult()
    for event in events:
        result = _guarded(_RECORDS[event["type"]], image, event)
        if result.rejected is not None:
            total.deferred_rejections.append((event.get("offset"), event["type"], result.rejected))
        total.partition_changes.extend(result.partition_changes)
        total.broker_changes.extend(result.broker_changes)
    return total


def _collapse(changes: Iterable[tuple[T | None, T | None]],
              key: Callable[[T], Hashable]) -> list[tuple[T | None, T | None]]:
    """One (first before, last after) pair per key, as a single delta would show them; pairs that
    end where they started (e.g. created and removed in one transaction) vanish."""
    merged: dict[Hashable, list] = {}
    for before, after in changes:
        k = key(before if before is not None else after)
        if k in merged:
            merged[k][1] = after
        else:
            merged[k] = [before, after]
    return [(before, after) for before, after in merged.values() if before != after]


def _diff(old: dict, new: dict) -> list[tuple]:
    return [(old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]
