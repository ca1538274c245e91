"""Replaying broker and controller registration records.

Rules from Kafka's ``BrokerRegistration`` (``fromRecord``, ``cloneWith``), the enums
``BrokerRegistrationFencingChange`` and ``BrokerRegistrationInControlledShutdownChange``,
``ClusterDelta.replay`` and the controller's ``ClusterControlManager.replay``, which is the stricter
of the two: it also refuses an UnregisterBrokerRecord whose epoch is not the registered one.
"""

from __future__ import annotations

import dataclasses

from kraftlake.image.cluster_image import (BrokerRegistration, ClusterImage, ControllerRegistration, Endpoint,
    ReplayResult, SupportedFeature, normalize_uuid)
from kraftlake.metadata.uuids import to_bytes

# BrokerRegistrationChangeRecord.Fenced: 1 fence, 0 no change, -1 unfence.
_FENCING_CHANGE = {1: True, 0: None, -1: False}
# BrokerRegistrationChangeRecord.InControlledShutdown: 1 enter, 0 no change. There is no "leave":
# a broker leaves controlled shutdown only by registering a new incarnation.
_CONTROLLED_SHUTDOWN_CHANGE = {1: True, 0: None}


def _endpoints(rows: list[dict]) -> tuple[Endpoint, ...]:
    return tuple(sorted(Endpoint(e["Name"], e["Host"], e["Port"], e["SecurityProtocol"]) for e in rows))


def _features(rows: list[dict]) -> tuple[SupportedFeature, ...]:
    return tuple(sorted(
        SupportedFeature(f["Name"], f["MinSupportedVersion"], f["MaxSupportedVersion"]) for f in rows))


def _uuid_order(text: str) -> tuple[int, int]:
    """Kafka's ``Uuid.compareTo``: the two halves as signed longs."""
    raw = to_bytes(text)
    return int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)


def _log_dirs(values: list[str] | None) -> tuple[str, ...]:
    # BrokerRegistration keeps its directories sorted, so equal sets compare equal.
    return tuple(sorted((normalize_uuid(v) for v in values or ()), key=_uuid_order))


def replay_register_broker(image: ClusterImage, event: dict) -> ReplayResult:
    """A registration replaces the broker's previous one whole, whatever its epoch or incarnation."""
    data = event["data"]
    after = BrokerRegistration(
        id=data["BrokerId"],
        epoch=data["BrokerEpoch"],
        incarnation_id=normalize_uuid(data["IncarnationId"]),
        listeners=_endpoints(data["EndPoints"]),
        supported_features=_features(data["Features"]),
        rack=data["Rack"],
        fenced=data["Fenced"],
        in_controlled_shutdown=data["InControlledShutdown"],
        is_migrating_zk_broker=data["IsMigratingZkBroker"],
        directories=_log_dirs(data["LogDirs"]),
    )
    before = image.brokers.get(after.id)
    image.brokers[after.id] = after
    return ReplayResult(broker_changes=[(before, after)])


def _registered(image: ClusterImage, broker_id: int, epoch: int, action: str) -> BrokerRegistration | str:
    broker = image.brokers.get(broker_id)
    if broker is None:
        return f"cannot {action} broker {broker_id}: it is not registered"
    if broker.epoch != epoch:
        return f"cannot {action} broker {broker_id}: epoch {epoch} is not its registered epoch {broker.epoch}"
    return broker


def replay_unregister_broker(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    before = _registered(image, data["BrokerId"], data["BrokerEpoch"], "unregister")
    if isinstance(before, str):
        return ReplayResult(rejected=before)
    del image.brokers[before.id]
    return ReplayResult(broker_changes=[(before, None)])


def _change(image: ClusterImage, broker_id: int, epoch: int, action: str, fenced: bool | None,
            in_controlled_shutdown: bool | None, directories: tuple[str, ...] | None) -> ReplayResult:
    """Kafka's ``cloneWith``: None keeps a field; a change to identical values changes nothing."""
    before = _registered(image, broker_id, epoch, action)
    if isinstance(before, str):
        return ReplayResult(rejected=before)
    after = dataclasses.replace(
        before,
        fenced=before.fenced if fenced is None else fenced,
        in_controlled_shutdown=(
            before.in_controlled_shutdown if in_controlled_shutdown is None else in_controlled_shutdown),
        directories=before.directories if directories is None else directories,
    )
    if after == before:
        return ReplayResult()
    image.brokers[broker_id] = after
    return ReplayResult(broker_changes=[(before, after)])


def replay_fence_broker(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    return _change(image, data["Id"], data["Epoch"], "fence", True, None, None)


def replay_unfence_broker(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    return _change(image, data["Id"], data["Epoch"], "unfence", False, None, None)


def replay_registration_change(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    fenced, shutdown = data["Fenced"], data["InControlledShutdown"]
    if fenced not in _FENCING_CHANGE:
        return ReplayResult(rejected=f"unknown Fenced value {fenced}")
    if shutdown not in _CONTROLLED_SHUTDOWN_CHANGE:
        return ReplayResult(rejected=f"unknown InControlledShutdown value {shutdown}")
    # An empty LogDirs (every version before 2, and v2 without directory changes) leaves them as they are.
    directories = _log_dirs(data["LogDirs"]) or None
    return _change(image, data["BrokerId"], data["BrokerEpoch"], "change", _FENCING_CHANGE[fenced],
                   _CONTROLLED_SHUTDOWN_CHANGE[shutdown], directories)


def replay_register_controller(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    controller = ControllerRegistration(
        id=data["ControllerId"],
        incarnation_id=normalize_uuid(data["IncarnationId"]),
        zk_migration_ready=data["ZkMigrationReady"],
        listeners=_endpoints(data["EndPoints"]),
        supported_features=_features(data["Features"]),
    )
    image.controllers[controller.id] = controller
    return ReplayResult()
