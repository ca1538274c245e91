"""The broker lifecycle (Kafka's ``ClusterControlManager`` and ``BrokerHeartbeatManager``, KIP-841):
registration, heartbeats, controlled shutdown, session expiry and unregistration.

As everywhere in the controller (ADR 0003), a decision returns records and a response and never touches
the image. What is not metadata lives in ``ControllerState``: as in Kafka, it is the active controller's
soft state, rebuilt from heartbeats, so a controller that takes over a log starts it afresh
(``take_over``). Decisions update it in place, as Kafka's heartbeat manager is updated while a request is
handled.

Broker-level records must come out identical on every controller shard (ADR 0003), so no broker
transition here may depend on partitions a shard does not hold. One of Kafka's does: an unfenced broker
that asks to shut down is fenced at once when it leads no partition, and otherwise enters a persisted
controlled shutdown. Whether it leads anything is a fact of every partition, so it is decided exactly
where the image holds every partition (``Context.whole_image``: one shard, the simulator, the in-process
replay with one shard); a shard of several always takes the controlled shutdown, which ends at the
broker's next heartbeat once the other active brokers have seen its records (ADR 0007 says why no
single pass over independent shards can know more). ``ShouldShutDown`` then needs no merging. For the
same reason only the whole image asks, as Kafka does, whether a broker in controlled shutdown still leads
before letting it go.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

from kraftlake.controller.decisions import Context, Decision, Records, error_code, record, response
from kraftlake.controller.elections import (MV_DIRECTORIES, change_partition, eligible_replicas, elr_enabled,
    elr_policy, metadata_version, supports)
from kraftlake.controller.replication import broker_failover, topic_election
from kraftlake.image import causes
from kraftlake.image.cluster_image import NO_LEADER, BrokerRegistration, ClusterImage, normalize_uuid
from kraftlake.image.features import METADATA_VERSION, finalized_levels
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids
from kraftlake.metadata.config import setting

SESSION_TIMEOUT = "broker.session.timeout.ms"

# metadata.version levels at which the broker records change (Kafka's MetadataVersion):
MV_REGISTRATION_CHANGE = 6  # 3.3-IV2: BrokerRegistrationChangeRecord, not Fence/UnfenceBrokerRecord
MV_CONTROLLED_SHUTDOWN_STATE = 7  # 3.3-IV3: InControlledShutdown persisted; RegisterBrokerRecord v1
MV_ZK_MIGRATION = 8  # 3.4-IV0: RegisterBrokerRecord v2 (IsMigratingZkBroker)
# What Kafka assumes of a broker that does not list a finalized feature: metadata.version 1 (the first
# KRaft level) for metadata.version, level 0 for everything else.
_UNLISTED_METADATA_VERSION = (1, 1)
_UNLISTED_FEATURE = (0, 0)

# BrokerRegistrationChangeRecord values (Kafka's BrokerRegistrationFencingChange / ...InControlledShutdownChange).
_FENCE, _UNFENCE, _ENTER_CONTROLLED_SHUTDOWN = 1, -1, 1


class _Next(enum.Enum):
    """Kafka's ``BrokerControlState``: where a heartbeat takes a broker."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass(slots=True)
class Session:
    """One broker incarnation's soft state (Kafka's ``BrokerHeartbeatState`` plus its tracker entry)."""

    epoch: int
    contact_ms: int | None  # event time of the last heartbeat or takeover; None: never heard from
    registered_offset: int  # offset of the RegisterBrokerRecord the broker must catch up with to be unfenced
    metadata_offset: int = -1  # the broker's last CurrentMetadataOffset
    shutdown_offset: int = -1  # end offset of the batch that started its controlled shutdown, -1 if none


@dataclass
class ControllerState:
    """The controller's soft state: broker sessions by broker id, and when its current term began
    (None until it first takes over a log)."""

    sessions: dict[int, Session] = field(default_factory=dict)
    takeover_ms: int | None = None
    balance_due_ms: int | None = None  # next leader-imbalance check (auto.leader.rebalance.enable)

    def to_dict(self) -> dict:
        """Plain ints in sorted order, so equal states serialise equally in the shard state store."""
        return {"takeover_ms": self.takeover_ms, "balance_due_ms": self.balance_due_ms,
                "sessions": [[broker_id, s.epoch, s.contact_ms, s.registered_offset, s.metadata_offset,
                              s.shutdown_offset] for broker_id, s in sorted(self.sessions.items())]}

    @classmethod
    def from_dict(cls, doc: Mapping) -> ControllerState:
        return cls(sessions={row[0]: Session(*row[1:]) for row in doc["sessions"]},
                   takeover_ms=doc["takeover_ms"], balance_due_ms=doc.get("balance_due_ms"))


def take_over(image: ClusterImage, state: ControllerState, now_ms: int) -> None:
    """Begin a controller term over a log that another controller wrote: every unfenced broker's session
    starts now, and nothing else survives, as in Kafka's ``ClusterControlManager.activate``.

    The heartbeats that kept those brokers alive went to the other controller and were never logged;
    judging them by anything older would fence brokers that were never silent. Fenced brokers get no
    session (KAFKA-19130), so a restarted incarnation may register at once. A broker the state has no
    session for (say, registered by records replayed later) gets one the first time a decision here
    looks at it, by the same rule.
    """
    state.takeover_ms = now_ms
    state.sessions = {b.id: _fresh_session(b, now_ms) for b in image.brokers.values() if not b.fenced}
    state.balance_due_ms = None  # the first imbalance check comes one interval into the term


def expire_sessions(image: ClusterImage, state: ControllerState, ctx: Context) -> list[dict] | Records:
    """Fence every unfenced broker not heard from for ``broker.session.timeout.ms`` of event time.

    A session expires once strictly more than the timeout has passed (Kafka's
    ``BrokerHeartbeatTracker.isExpired``). Brokers are fenced one after the other, stalest first (ties
    by id), each failover seeing the fencings before it, as Kafka's ``maybeFenceOneStaleBroker`` does.
    Only broadcast events may call this, or shards would fence at different times (ADR 0003).
    """
    timeout = session_timeout_ms(ctx.config)
    stale = []
    for broker in image.brokers.values():
        if broker.fenced:
            continue
        session = _session(state, broker, ctx.now_ms)
        if session.contact_ms is not None and _expired(session, timeout, ctx.now_ms):
            stale.append((session.contact_ms, broker.id))
    records: list[dict] | Records = []
    current = image
    for n, (_, broker_id) in enumerate(sorted(stale)):
        fencing = _fence(current, current.brokers[broker_id], ctx)
        records = records + fencing  # (not +=, which would make a failover's records dicts: ``Records``)
        state.sessions[broker_id].shutdown_offset = -1
        if n + 1 < len(stale):
            current = _with(current, fencing, ctx)
    return records


def decide_broker_registration(image: ClusterImage, state: ControllerState, request: dict,
                               ctx: Context) -> Decision:
    """``BrokerRegistrationRequest`` (``ClusterControlManager.registerBroker``, Kafka 4).

    A new incarnation gets a new broker epoch, the offset of its RegisterBrokerRecord, and starts fenced
    and out of controlled shutdown. The same incarnation registering again (a retry, or new listeners)
    keeps its epoch, fencing and shutdown state (KAFKA-16952). Another incarnation is refused while the
    registered one has a live session, unless that one is in controlled shutdown (KAFKA-19047).
    """
    data, version = request["data"], request["version"]
    broker_id = data["BrokerId"]

    def refuse(error: str) -> Decision:
        return Decision(response=response("BrokerRegistrationResponse",
                                          {"ErrorCode": error_code(error)}, version))

    if ctx.cluster_id is not None and data["ClusterId"] != ctx.cluster_id:
        return refuse("INCONSISTENT_CLUSTER_ID")
    incarnation = normalize_uuid(data["IncarnationId"])
    existing = image.brokers.get(broker_id)
    same = existing is not None and existing.incarnation_id == incarnation
    if existing is not None and not same and not existing.in_controlled_shutdown:
        # A fenced broker unheard of this term has no session (see take_over); an unfenced one has.
        session = _session(state, existing, ctx.now_ms) if not existing.fenced else (
            _known_session(state, existing))
        if session is not None and not _expired(session, session_timeout_ms(ctx.config), ctx.now_ms):
            return refuse("DUPLICATE_BROKER_REGISTRATION")
    if data["IsMigratingZkBroker"]:
        return refuse("BROKER_ID_NOT_REGISTERED")  # Kafka 4 registers no ZooKeeper brokers
    mv = metadata_version(image)
    if supports(mv, MV_DIRECTORIES) and _invalid_log_dirs(image, broker_id, data["LogDirs"]) is not None:
        return refuse("INVALID_REGISTRATION")
    if _unsupported_feature(image, data["Features"]):
        return refuse("UNSUPPORTED_VERSION")

    epoch = existing.epoch if same else ctx.offset
    rec_version = _registration_record_version(mv)
    features = list(data["Features"])
    if not any(f["Name"] == METADATA_VERSION for f in features):
        low, high = _UNLISTED_METADATA_VERSION
        features.append({"Name": METADATA_VERSION, "MinSupportedVersion": low, "MaxSupportedVersion": high})
    rec = record("RegisterBrokerRecord", {
        "BrokerId": broker_id,
        "IncarnationId": incarnation,
        "BrokerEpoch": epoch,
        "EndPoints": [dict(listener) for listener in data["Listeners"]],
        "Features": features,
        "Rack": data["Rack"],
        "Fenced": existing.fenced if same else True,
        "InControlledShutdown": existing.in_controlled_shutdown if same and rec_version >= 1 else False,
        "LogDirs": list(data["LogDirs"]) if rec_version >= 3 else [],
    }, rec_version)

    # A registration is no heartbeat: a new incarnation has no session until it heartbeats (Kafka's
    # tracker has no contact time for it), so another incarnation may still replace it at once.
    session = _known_session(state, existing) if same else None
    if session is not None:
        session.registered_offset = ctx.offset
    else:
        state.sessions[broker_id] = Session(epoch=epoch, contact_ms=None, registered_offset=ctx.offset)
    shutdown = [] if same else _previous_incarnation_shutdown(image, existing, broker_id, data, ctx)
    return Decision(shutdown + [rec], response("BrokerRegistrationResponse",
                                               {"ErrorCode": 0, "BrokerEpoch": epoch}, version))


def _previous_incarnation_shutdown(image: ClusterImage, existing: BrokerRegistration | None, broker_id: int,
                                   data: dict, ctx: Context) -> list[dict]:
    """Kafka's ``handleBrokerShutdown`` for the incarnation a new one replaces, written before its
    RegisterBrokerRecord. The shutdown was clean when the broker names the epoch it last had
    (``PreviousBrokerEpoch``, KIP-966): its replicas stay in the ELRs. Otherwise, with ELR on, it
    leaves every ISR and ELR, since its log may have lost what it acknowledged; without ELR it only
    leaves the ISRs, as at a fencing."""
    clean = existing is not None and data["PreviousBrokerEpoch"] == existing.epoch
    if elr_enabled(image) and not clean:
        return broker_failover(image, broker_id, ctx, unclean_shutdown=True)
    return broker_failover(image, broker_id, ctx)


def decide_broker_heartbeat(image: ClusterImage, state: ControllerState, request: dict,
                            ctx: Context) -> Decision:
    """``BrokerHeartbeatRequest``: Kafka's ``BrokerHeartbeatManager.calculateNextBrokerState`` and
    ``ReplicationControlManager.processBrokerHeartbeat``.

    A fenced broker is unfenced once its metadata offset reaches its registration record. ``WantFence``
    fences an unfenced broker; ``WantShutDown`` lets a fenced one shut down at once, and puts an
    unfenced one into a persisted controlled shutdown that moves its leaderships and takes it out of
    every ISR.
    The broker may then shut down (``ShouldShutDown``) once it leads no partition and every active
    broker has caught up with the end of the batch that began its shutdown; it is fenced as it goes.
    Whether it still leads is asked first, as Kafka does; with several shards it cannot be known (see
    above) and is not asked: before 3.3-IV3, where a broker in controlled shutdown may be elected again,
    such a broker is fenced with its leaderships instead of waiting. A heartbeat for an unknown broker
    or another epoch is STALE_BROKER_EPOCH, as in Kafka (``checkBrokerEpoch``).
    """
    data, version = request["data"], request["version"]
    if stale_heartbeat(image, data):
        return Decision(response=response("BrokerHeartbeatResponse",
                                          {"ErrorCode": error_code("STALE_BROKER_EPOCH")}, version))
    broker = image.brokers[data["BrokerId"]]
    session = _session(state, broker, ctx.now_ms)
    offset = data["CurrentMetadataOffset"]
    caught_up = offset >= session.registered_offset

    if broker.fenced:
        current = _Next.FENCED
        if data["WantShutDown"]:
            nxt = _Next.SHUTDOWN_NOW
        elif not data["WantFence"] and caught_up:
            nxt = _Next.UNFENCED
        else:
            nxt = _Next.FENCED
    elif session.shutdown_offset >= 0:
        current = _Next.CONTROLLED_SHUTDOWN
        if ctx.whole_image and _leads_any(image, broker.id):
            nxt = _Next.CONTROLLED_SHUTDOWN  # leaderships to move still (say, elected again before 3.3-IV3)
        elif session.shutdown_offset <= _lowest_active_offset(image, state):
            nxt = _Next.SHUTDOWN_NOW
        else:
            nxt = _Next.CONTROLLED_SHUTDOWN
    else:
        current = _Next.UNFENCED
        if data["WantFence"]:
            nxt = _Next.SHUTDOWN_NOW if data["WantShutDown"] else _Next.FENCED
        elif data["WantShutDown"]:
            nxt = _Next.CONTROLLED_SHUTDOWN if not ctx.whole_image or _leads_any(image, broker.id) else _Next.SHUTDOWN_NOW
        else:
            nxt = _Next.UNFENCED

    records: list[dict] = []
    if nxt is not current:
        if nxt is _Next.UNFENCED:
            records = _unfence(image, broker, ctx)
        elif nxt is _Next.CONTROLLED_SHUTDOWN:
            records = _enter_controlled_shutdown(image, broker, ctx)
        else:
            records = _fence(image, broker, ctx)

    if supports(metadata_version(image), MV_DIRECTORIES):
        records += _directories_offline(image, broker, data["OfflineLogDirs"], ctx)
    fenced = nxt in (_Next.FENCED, _Next.SHUTDOWN_NOW)
    session.contact_ms, session.metadata_offset = ctx.now_ms, offset
    if fenced:
        session.shutdown_offset = -1
    elif nxt is _Next.CONTROLLED_SHUTDOWN and session.shutdown_offset < 0:
        # Kafka's processBatchEndOffset: where the batch carrying this decision ends. Every record written
        # while a request is handled carries the request's offset (controller_log), so it ends there. When
        # the decision wrote nothing Kafka takes the last offset written; no shard of several can tell that
        # no other wrote at this offset, and with one image the shutdown begins only for a broker that
        # leads, so records move its leaderships: the request's offset stands for both.
        session.shutdown_offset = ctx.offset
    return Decision(records, response("BrokerHeartbeatResponse", {
        "ErrorCode": 0, "IsCaughtUp": caught_up, "IsFenced": fenced,
        "ShouldShutDown": nxt is _Next.SHUTDOWN_NOW}, version))


def stale_heartbeat(image: ClusterImage, data: dict) -> bool:
    """A heartbeat of an unknown broker or of another incarnation's epoch: refused with STALE_BROKER_EPOCH
    before anything is looked at or changed (a crashed broker's heartbeats go on until it registers again:
    a fifth of a busy cluster's heartbeats at times)."""
    broker = image.brokers.get(data["BrokerId"])
    return broker is None or broker.epoch != data["BrokerEpoch"]


def running_sessions(image: ClusterImage, state: ControllerState) -> dict[int, Session]:
    """The sessions a heartbeat may find steady, by broker id: of an unfenced broker's registered
    incarnation, heard from, not in controlled shutdown. Found once for as long as no broker and no session
    changes (as ``quiet_until``), so that ``steady_heartbeat`` asks one dictionary instead of reading the
    broker and its session for each of the nine in ten requests that are heartbeats, on every shard."""
    running = {}
    for broker in image.brokers.values():
        if broker.fenced:
            continue
        session = _known_session(state, broker)
        if session is not None and session.shutdown_offset < 0 and session.contact_ms is not None:
            running[broker.id] = session
    return running


def steady_heartbeat(image: ClusterImage, running: dict[int, Session], data: dict, now_ms: int) -> bool | None:
    """A heartbeat that keeps an unfenced, running broker as it is (nine in ten of a cluster's requests):
    ``IsCaughtUp`` of its answer, after the session's update; None, with nothing changed, for any other
    heartbeat, which ``decide_broker_heartbeat`` must decide. ``running``: ``running_sessions``, found
    since brokers and sessions last changed.

    It is exactly the case where that decision makes no record and answers without error, unfenced, not
    to shut down, so a caller may skip building the decision, as long as it knows that no session expired
    and no leader-imbalance check is due (``quiet_until``, ``due_leader_balance``). A contact earlier than
    the session's last (event time going back) is left to the full path, so that contacts only grow here
    and the bound of ``quiet_until`` stays true."""
    session = running.get(data["BrokerId"])
    # (a running session's epoch is its broker's)
    if session is None or session.epoch != data["BrokerEpoch"] or data["WantFence"] or data["WantShutDown"] \
            or session.contact_ms > now_ms:
        return None
    offline = data["OfflineLogDirs"]
    if offline and any(d in image.brokers[data["BrokerId"]].directories for d in offline):
        return None
    offset = data["CurrentMetadataOffset"]
    session.contact_ms, session.metadata_offset = now_ms, offset
    return offset >= session.registered_offset


def quiet_until(image: ClusterImage, state: ControllerState, timeout_ms: int) -> int | None:
    """The latest event time up to which ``expire_sessions`` changes nothing (no session expires, none is
    started), for as long as no broker changes and sessions only get later contacts; None if it would
    start a session at any time."""
    deadline = (1 << 63) - 1
    for broker in image.brokers.values():
        if broker.fenced:
            continue
        session = _known_session(state, broker)
        if session is None:
            return None
        if session.contact_ms is not None and session.contact_ms + timeout_ms < deadline:
            deadline = session.contact_ms + timeout_ms
    return deadline


def decide_unregister_broker(image: ClusterImage, state: ControllerState, request: dict,
                             ctx: Context) -> Decision:
    """``UnregisterBrokerRequest`` (``ReplicationControlManager.unregisterBroker``): the broker's
    partitions fail over first, then its registration goes."""
    data, version = request["data"], request["version"]
    broker = image.brokers.get(data["BrokerId"])
    if broker is None:
        return Decision(response=response("UnregisterBrokerResponse", {
            "ErrorCode": error_code("BROKER_ID_NOT_REGISTERED"),
            "ErrorMessage": f"Broker ID {data['BrokerId']} is not currently registered"}, version))
    records = broker_failover(image, broker.id, ctx, also_elr=True)
    records.append(record("UnregisterBrokerRecord", {"BrokerId": broker.id, "BrokerEpoch": broker.epoch}))
    state.sessions.pop(broker.id, None)
    return Decision(records, response("UnregisterBrokerResponse", {"ErrorCode": 0}, version))


def due_leader_balance(state: ControllerState, config: Mapping[str, str], now_ms: int) -> bool:
    """Whether a leader-imbalance check is due at ``now_ms`` (event time); schedules the next one.

    Kafka checks every ``leader.imbalance.check.interval.seconds`` while ``auto.leader.rebalance.enable``
    is true, the first check one interval after the controller took over.
    """
    if state.balance_due_ms is not None and now_ms < state.balance_due_ms:
        return False  # not due, whatever the configs say: tested first, as this runs before every request
    if setting(config, "auto.leader.rebalance.enable").strip().lower() != "true":
        return False
    interval = int(setting(config, "leader.imbalance.check.interval.seconds")) * 1000
    if state.balance_due_ms is None:
        state.balance_due_ms = (state.takeover_ms if state.takeover_ms is not None else now_ms) + interval
    if now_ms < state.balance_due_ms:
        return False
    state.balance_due_ms = now_ms + interval
    return True


def decided_cause(state: str, logged: str, request: dict, before_decision: bool) -> str:
    """Why a decision of this controller took a broker to ``state``, where it knows more than the log's
    rule (``logged``): a fencing before the request's own decision is a session that expired by its time
    (``expire_sessions``); one by a heartbeat that ends no controlled shutdown is what the broker asked for."""
    if state != causes.FENCED or logged == causes.CONTROLLED_SHUTDOWN_COMPLETED:
        return logged
    if before_decision:
        return causes.SESSION_EXPIRED
    if request["type"] == "BrokerHeartbeatRequest":
        return causes.SHUTDOWN_REQUESTED if request["data"]["WantShutDown"] else causes.FENCE_REQUESTED
    return logged


def shutting_down(image: ClusterImage, state: ControllerState) -> frozenset[int]:
    """Brokers in a controlled shutdown this controller began (its heartbeat soft state), not those
    the log alone says are shutting down: after a failover Kafka's heartbeat manager starts empty."""
    return frozenset(broker.id for broker in image.brokers.values()
                     if (session := _known_session(state, broker)) is not None and session.shutdown_offset >= 0)


def session_timeout_ms(config: Mapping[str, str]) -> int:
    return int(setting(config, SESSION_TIMEOUT))


def _fresh_session(broker: BrokerRegistration, now_ms: int) -> Session:
    # Without the log position of its RegisterBrokerRecord, its epoch is the best lower bound: a new
    # incarnation's epoch is that very offset.
    return Session(epoch=broker.epoch, contact_ms=now_ms, registered_offset=broker.epoch)


def _known_session(state: ControllerState, broker: BrokerRegistration) -> Session | None:
    """The session of the broker's registered incarnation, if this term has one."""
    session = state.sessions.get(broker.id)
    return session if session is not None and session.epoch == broker.epoch else None


def _session(state: ControllerState, broker: BrokerRegistration, now_ms: int) -> Session:
    """The session of the broker's registered incarnation, started now if this term has none."""
    session = _known_session(state, broker)
    if session is None:
        session = state.sessions[broker.id] = _fresh_session(broker, now_ms)
    return session


def _expired(session: Session, timeout_ms: int, now_ms: int) -> bool:
    """Whether the session is no longer valid; one that never began (no contact) is not valid."""
    return session.contact_ms is None or session.contact_ms + timeout_ms < now_ms


def _leads_any(image: ClusterImage, broker_id: int) -> bool:
    """Asked at every heartbeat of a broker in controlled shutdown, so on the columns, not partition by
    partition (Kafka keeps an index of leaderships for it, ``BrokersToIsrs``)."""
    return len(image.store.rows_led_by(broker_id)) > 0


def _lowest_active_offset(image: ClusterImage, state: ControllerState) -> int:
    """The lowest metadata offset any active broker (unfenced, not shutting down) has reported; a
    broker not heard from this term counts as -1 (Kafka's ``lowestActiveOffset``)."""
    lowest = None
    for broker in image.brokers.values():
        if broker.fenced:
            continue
        session = _known_session(state, broker)
        if session is None:
            reported = -1
        elif session.shutdown_offset >= 0:
            continue
        else:
            reported = session.metadata_offset
        lowest = reported if lowest is None else min(lowest, reported)
    return (1 << 63) - 1 if lowest is None else lowest


def _unsupported_feature(image: ClusterImage, listed: list[dict]) -> bool:
    """Whether the broker cannot run at some finalized feature level, kraft.version included."""
    ranges = {f["Name"]: (f["MinSupportedVersion"], f["MaxSupportedVersion"]) for f in listed}
    for name, level in finalized_levels(image).items():
        default = _UNLISTED_METADATA_VERSION if name == METADATA_VERSION else _UNLISTED_FEATURE
        low, high = ranges.get(name, default)
        if not low <= level <= high:
            return True
    return False


def _invalid_log_dirs(image: ClusterImage, broker_id: int, log_dirs: list[str]) -> str | None:
    """Why Kafka refuses a registration's directories (INVALID_REGISTRATION), or None. The reason is
    Kafka's message; BrokerRegistrationResponse has no field to carry it."""
    if not log_dirs:
        return "No directories specified in request"
    if any(_reserved_directory(d) for d in log_dirs):
        return "Reserved directory ID in request"
    if len(set(log_dirs)) != len(log_dirs):
        return "Duplicate directory ID in request"
    for other in image.brokers.values():
        if other.id != broker_id:
            for directory in log_dirs:
                if directory in other.directories:
                    return f"Broker {other.id} is already registered with directory {directory}"
    return None


def _reserved_directory(directory: str) -> bool:
    """``DirectoryId.reserved``: the first hundred ids (UNASSIGNED, LOST, MIGRATING among them)."""
    raw = uuids.to_bytes(directory)
    return raw[:8] == bytes(8) and int.from_bytes(raw[8:], "big") < 100


def _directories_offline(image: ClusterImage, broker: BrokerRegistration, offline: list[str],
                         ctx: Context) -> list[dict]:
    """Kafka's ``handleDirectoriesOffline`` (JBOD, KIP-858): for the directories the heartbeat newly
    reports offline, the broker leaves the ISR of, and stops leading, every partition whose replica
    lives there; then its registration keeps only the directories still online
    (BrokerRegistrationChangeRecord v2). Computed on the image as the heartbeat found it, as Kafka
    does. A directory reported again, or one the broker never had, changes nothing."""
    failed = frozenset(d for d in broker.directories if d in offline)
    if not failed:
        return []
    online = [d for d in broker.directories if d not in failed]
    return broker_failover(image, broker.id, ctx, failed) + [_change(broker, 2, LogDirs=online)]


def _registration_record_version(mv: int | None) -> int:
    """``MetadataVersion.registerBrokerRecordVersion``: each step adds the field its level brought."""
    if mv is None or mv >= MV_DIRECTORIES:
        return 3
    if mv >= MV_ZK_MIGRATION:
        return 2
    return 1 if mv >= MV_CONTROLLED_SHUTDOWN_STATE else 0


def _change(broker: BrokerRegistration, version: int, **fields: int) -> dict:
    return record("BrokerRegistrationChangeRecord",
                  {"BrokerId": broker.id, "BrokerEpoch": broker.epoch, **fields}, version)


def _fencing(image: ClusterImage, broker: BrokerRegistration, fenced: bool) -> dict:
    """The record that fences or unfences ``broker``: a BrokerRegistrationChangeRecord v0 from
    metadata.version 3.3-IV2, the older Fence/UnfenceBrokerRecord before it."""
    mv = metadata_version(image)
    if mv is not None and mv < MV_REGISTRATION_CHANGE:
        return record("FenceBrokerRecord" if fenced else "UnfenceBrokerRecord",
                      {"Id": broker.id, "Epoch": broker.epoch}, 0)
    return _change(broker, 0, Fenced=_FENCE if fenced else _UNFENCE)


def _fence(image: ClusterImage, broker: BrokerRegistration, ctx: Context) -> list[dict]:
    """Kafka's ``handleBrokerFenced``: the partitions fail over, then the fencing (even for a broker
    already fenced)."""
    return broker_failover(image, broker.id, ctx) + [_fencing(image, broker, True)]


def _enter_controlled_shutdown(image: ClusterImage, broker: BrokerRegistration, ctx: Context) -> list[dict]:
    """Kafka's ``handleBrokerInControlledShutdown``: the persisted state first (v1, the version that has
    the field; nothing before metadata.version 3.3-IV3, where only the heartbeat manager knows), then
    the failover."""
    persisted = broker.in_controlled_shutdown or not supports(metadata_version(image), MV_CONTROLLED_SHUTDOWN_STATE)
    records = [] if persisted else [_change(broker, 1, InControlledShutdown=_ENTER_CONTROLLED_SHUTDOWN)]
    return records + broker_failover(image, broker.id, ctx)


def _unfence(image: ClusterImage, broker: BrokerRegistration, ctx: Context) -> list[dict]:
    """Kafka's ``handleBrokerUnfenced``: the unfencing, then a leader for every leaderless partition of
    this shard, the returning broker included among the candidates (the image still shows it fenced).

    Unlike Kafka, a broker still marked in controlled shutdown (fenced at the end of one and then
    unfenced by the same incarnation) is no candidate: KIP-841 never elects a shutting-down broker.
    """
    mv = metadata_version(image)
    active = eligible_replicas(image)
    returning = broker.id if not broker.in_controlled_shutdown else None

    def eligible(replica: int) -> bool:
        return replica == returning or active(replica)

    records = [_fencing(image, broker, False)]
    leaderless = _leaderless(image)
    for topic in image.topics.values():
        partition_ids = leaderless.get(topic.id)
        if partition_ids is None or not ctx.owns(topic.id):
            continue
        election = topic_election(image, topic.name, ctx)
        policy = elr_policy(image, topic, ctx.config)
        for partition_id in sorted(partition_ids):
            change = change_partition(topic.partitions[partition_id], eligible, election=election, mv=mv, **policy)
            if change is not None:
                records.append(change)
    return records


def _leaderless(image: ClusterImage) -> dict[str, list[int]]:
    """The partitions without a leader, by topic id, found on the columns: an unfencing looks for them in
    every topic, and most topics have none."""
    store = image.store
    rows = store.rows_led_by(NO_LEADER)
    cols = store.cols
    found: dict[str, list[int]] = {}
    topic_ids = store.topics.values
    for ordinal, partition_id in zip(cols["topic"][rows].tolist(), cols["partition_id"][rows].tolist()):
        found.setdefault(topic_ids[ordinal], []).append(partition_id)
    return found


def _with(image: ClusterImage, records: list[dict], ctx: Context) -> ClusterImage:
    """A copy of ``image`` with ``records`` applied, for a decision that builds on its own records."""
    result = image.copy()
    for rec in records:
        replay(result, {**rec, "offset": ctx.offset, "leader_epoch": -1, "timestamp": ctx.now_ms})
    return result
