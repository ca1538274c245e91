"""The metadata image: everything a KRaft controller knows after replaying the metadata log.

Modelled on Kafka's ``MetadataImage`` (``org.apache.kafka.image``) but mutable: the streaming job
replays millions of records into one image per shard, and allocating a new image per record (as
Kafka's ``MetadataDelta.apply`` does per batch) would dominate the cost. Registrations are frozen
instead, so a ``(before, after)`` pair handed out by ``replay`` stays true forever and ``copy()``
only has to copy the containers.

The image is serialised (``to_bytes``) into Spark's state store between micro-batches, so it also
carries the records buffered by an open metadata transaction or a snapshot being loaded.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

from kraftlake.image.partition_store import PartitionMap, PartitionRegistration, PartitionStore
from kraftlake.metadata import uuids

__all__ = ["PartitionRegistration"]  # defined with the columns that hold it, re-exported here

# Kafka's reserved directory ids (``DirectoryId``): MIGRATING marks a replica whose directory was never
# recorded (pre-JBOD metadata), UNASSIGNED a new replica not yet placed in a directory, LOST one whose
# directory went offline unnamed.
DIR_MIGRATING = uuids.from_bytes(bytes(16))
DIR_UNASSIGNED = uuids.from_bytes(bytes(15) + b"\x01")
DIR_LOST = uuids.from_bytes(bytes(15) + b"\x02")

NO_LEADER = -1
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.Leader default: "leader unchanged"

# The first element of every serialised image; bump it when the layout below changes.
_FORMAT = 2
_MAGIC = b"KLI2"  # format 2 and later: the JSON document, then the partition columns


@functools.lru_cache(maxsize=1 << 16)
def normalize_uuid(text: str) -> str:
    """Kafka's base64 form of a Uuid given in either text form.

    Cached because the same few topic and broker ids arrive in almost every record, and keys of the
    image must not depend on which form the input used.
    """
    return uuids.normalize(text)


class Endpoint(NamedTuple):
    name: str
    host: str
    port: int
    security_protocol: int  # -1 for controller endpoints of a VotersRecord, which carry none


class SupportedFeature(NamedTuple):
    name: str
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    id: int
    epoch: int
    incarnation_id: str
    listeners: tuple[Endpoint, ...]  # sorted by listener name
    supported_features: tuple[SupportedFeature, ...]  # sorted by feature name
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool
    directories: tuple[str, ...]  # online log directories, in Kafka's Uuid order


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    id: int
    incarnation_id: str
    zk_migration_ready: bool
    listeners: tuple[Endpoint, ...]
    supported_features: tuple[SupportedFeature, ...]


@dataclass(slots=True)
class TopicImage:
    """A topic and its partitions by id (``ClusterImage.add_topic`` makes them, over the image's columns)."""

    name: str
    id: str
    partitions: PartitionMap


class Acl(NamedTuple):
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class DelegationToken(NamedTuple):
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


class Voter(NamedTuple):
    id: int
    directory_id: str


class VoterRegistration(NamedTuple):
    """A voter as a VotersRecord describes it (KIP-853), with its controller endpoints."""

    id: int
    directory_id: str
    endpoints: tuple[Endpoint, ...]
    kraft_version_min: int
    kraft_version_max: int


@dataclass(frozen=True, slots=True)
class QuorumState:
    """The Raft side of the log, from its control records rather than metadata records."""

    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    voters: tuple[Voter, ...] = ()  # LeaderChangeMessage.Voters
    granting_voters: tuple[Voter, ...] = ()  # LeaderChangeMessage.GrantingVoters
    voter_set: tuple[VoterRegistration, ...] = ()  # VotersRecord (dynamic quorum)
    kraft_version: int = 0  # KRaftVersionRecord; a log without one is kraft.version 0


# ConfigRecord resource types (Kafka's ConfigResource.Type ids).
CONFIG_TOPIC = 2
CONFIG_BROKER = 4  # resource name: a node id, or "" for the cluster-wide default (--entity-default)

# Kafka's codes by name, as its tools print them: ConfigResource.Type (else UNKNOWN), LeaderRecoveryState,
# and the reserved directory ids (else the id itself).
CONFIG_RESOURCE_TYPES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
LEADER_RECOVERY_STATES = {0: "RECOVERED", 1: "RECOVERING"}
DIRECTORY_IDS = {DIR_MIGRATING: "MIGRATING", DIR_UNASSIGNED: "UNASSIGNED", DIR_LOST: "LOST"}

QuotaEntity = tuple[tuple[str, str | None], ...]  # ((entity type, entity name), ...) sorted


@dataclass(slots=True)
class ClusterImage:
    """Kafka's whole ``MetadataImage`` plus the quorum state (Kafka's own ``ClusterImage`` is only
    its brokers and controllers)."""

    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controllers: dict[int, ControllerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicImage] = field(default_factory=dict)  # by topic id
    topic_ids: dict[str, str] = field(default_factory=dict)  # topic name -> id
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)  # finalized levels, incl. metadata.version
    next_producer_id: int = -1
    acls: dict[str, Acl] = field(default_factory=dict)  # by ACL id
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    scram_credentials: dict[tuple[str, int], ScramCredential] = field(default_factory=dict)
    delegation_tokens: dict[str, DelegationToken] = field(default_factory=dict)
    zk_migration_state: int = 0  # ZkMigrationState.NONE
    quorum: QuorumState = field(default_factory=QuorumState)
    # Records held back until an open transaction ends ("transaction") or the snapshot being loaded
    # reaches its footer ("snapshot"); None when nothing is open.
    pending_kind: str | None = None
    pending_events: list[dict] = field(default_factory=list)
    # Where the partitions of ``topics`` live (``TopicImage.partitions`` is a view of it): not part of
    # the image's value, so two images with equal partitions are equal however their rows lie.
    store: PartitionStore = field(default_factory=PartitionStore, compare=False, repr=False)

    def add_topic(self, name: str, topic_id: str) -> TopicImage:
        topic = self.topics[topic_id] = TopicImage(name, topic_id, self.store.new_map(topic_id))
        self.topic_ids[name] = topic_id
        return topic

    def remove_topic(self, topic_id: str) -> TopicImage | None:
        topic = self.topics.pop(topic_id, None)
        if topic is not None:
            del self.topic_ids[topic.name]
            self.store.drop(topic_id)
        return topic

    def partition(self, topic_id: str, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def iter_partitions(self) -> Iterator[PartitionRegistration]:
        for topic in self.topics.values():
            yield from topic.partitions.values()

    def copy(self) -> ClusterImage:
        """An independent image: registrations are immutable, so only containers are copied."""
        store = self.store.copy()
        return ClusterImage(
            brokers=dict(self.brokers),
            controllers=dict(self.controllers),
            topics={tid: TopicImage(t.name, t.id, store.maps[tid]) for tid, t in self.topics.items()},
            topic_ids=dict(self.topic_ids),
            configs={key: dict(values) for key, values in self.configs.items()},
            features=dict(self.features),
            next_producer_id=self.next_producer_id,
            acls=dict(self.acls),
            client_quotas={key: dict(values) for key, values in self.client_quotas.items()},
            scram_credentials=dict(self.scram_credentials),
            delegation_tokens=dict(self.delegation_tokens),
            zk_migration_state=self.zk_migration_state,
            quorum=self.quorum,
            pending_kind=self.pending_kind,
            pending_events=list(self.pending_events),
            store=store,
        )

    def take_metadata_from(self, other: ClusterImage) -> None:
        """Adopt every metadata part of ``other`` (a loaded snapshot), keeping this quorum state.

        The quorum part comes from control records, which take effect as they are read, so a
        snapshot never rolls it back.
        """
        for f in dataclasses.fields(self):
            if f.name != "quorum":
                setattr(self, f.name, getattr(other, f.name))

    def to_bytes(self) -> bytes:
        """zlib-compressed JSON of plain lists, every collection in sorted order, then the partitions'
        columns (``PartitionStore.to_bytes``).

        JSON rather than pickle because pickle's output depends on object identity (its memo), so
        two equal images could serialise differently; sorted order makes equal images give equal
        bytes, which lets the streaming job compare state cheaply.
        """
        topic_ids = sorted(self.topics)
        doc = [
            _FORMAT,
            [_broker_row(b) for _, b in sorted(self.brokers.items())],
            [_controller_row(c) for _, c in sorted(self.controllers.items())],
            [[tid, self.topics[tid].name] for tid in topic_ids],
            [[rtype, rname, sorted(values.items())] for (rtype, rname), values in sorted(self.configs.items())],
            sorted(self.features.items()),
            self.next_producer_id,
            [[acl_id, list(acl)] for acl_id, acl in sorted(self.acls.items())],
            [
                [[list(part) for part in entity], sorted(values.items())]
                for entity, values in sorted(self.client_quotas.items(), key=_quota_sort_key)
            ],
            [
                [name, mechanism, _b64(c.salt), _b64(c.stored_key), _b64(c.server_key), c.iterations]
                for (name, mechanism), c in sorted(self.scram_credentials.items())
            ],
            [[token_id, list(t)] for token_id, t in sorted(self.delegation_tokens.items())],
            self.zk_migration_state,
            _quorum_row(self.quorum),
            self.pending_kind,
            self.pending_events,
        ]
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, default=_encode_bytes)
        head = zlib.compress(text.encode("utf-8"), 1)  # level 6: 20% smaller, 5x slower (ADR 0004)
        return _MAGIC + len(head).to_bytes(4, "big") + head + self.store.to_bytes(topic_ids)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ClusterImage:
        """Format 2, or format 1 (an older release's state: partitions as JSON rows)."""
        if raw[:4] == _MAGIC:
            size = int.from_bytes(raw[4:8], "big")
            doc, columns = zlib.decompress(raw[8:8 + size]), raw[8 + size:]
        else:
            doc, columns = zlib.decompress(raw), None
        doc = json.loads(doc.decode("utf-8"), object_hook=_decode_bytes)
        if doc[0] not in (1, _FORMAT) or (doc[0] == _FORMAT) != (columns is not None):
            raise ValueError(f"unknown image format {doc[0]!r}, this code reads formats 1 and {_FORMAT}")
        (_, brokers, controllers, topics, configs, features, next_producer_id, acls, quotas,
         scram, tokens, zk_state, quorum, pending_kind, pending_events) = doc
        image = cls(
            brokers={row[0]: _broker_from_row(row) for row in brokers},
            controllers={row[0]: _controller_from_row(row) for row in controllers},
            configs={(rtype, rname): dict(values) for rtype, rname, values in configs},
            features=dict(features),
            next_producer_id=next_producer_id,
            acls={acl_id: Acl(*acl) for acl_id, acl in acls},
            client_quotas={
                tuple((etype, ename) for etype, ename in entity): dict(values) for entity, values in quotas
            },
            scram_credentials={
                (name, mech): ScramCredential(_unb64(salt), _unb64(stored), _unb64(server), iterations)
                for name, mech, salt, stored, server, iterations in scram
            },
            delegation_tokens={
                token_id: DelegationToken(owner, requester, tuple(renewers), issued, max_ts, expires)
                for token_id, (owner, requester, renewers, issued, max_ts, expires) in tokens
            },
            zk_migration_state=zk_state,
            quorum=_quorum_from_row(quorum),
            pending_kind=pending_kind,
            pending_events=pending_events,
        )
        if columns is not None:
            image.store = PartitionStore.from_bytes(columns, [topic_id for topic_id, _ in topics])
            for topic_id, name in topics:
                image.topics[topic_id] = TopicImage(name, topic_id, image.store.maps[topic_id])
                image.topic_ids[name] = topic_id
            return image
        for topic_id, name, partitions in topics:
            topic = image.add_topic(name, topic_id)
            for row in partitions:
                topic.partitions[row[0]] = _partition_from_row(topic_id, row)
        return image


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _encode_bytes(value: Any) -> Any:
    """``bytes`` inside buffered events (e.g. a pending UserScramCredentialRecord's salt)."""
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": _b64(bytes(value))}
    raise TypeError(f"cannot serialise {type(value).__name__} in a metadata image")


def _decode_bytes(obj: dict) -> Any:
    if len(obj) == 1 and "$bytes" in obj:
        return _unb64(obj["$bytes"])
    return obj


def quota_part_key(part: tuple[str, str | None]) -> tuple[str, bool, str]:
    """Orders (entity type, entity name) pairs; a None name (the default entity) sorts first."""
    etype, ename = part
    return etype, ename is not None, ename or ""


def _quota_sort_key(item: tuple[QuotaEntity, dict]) -> list:
    return [quota_part_key(part) for part in item[0]]


def _endpoints_row(endpoints: tuple[Endpoint, ...]) -> list:
    return [list(e) for e in endpoints]


def _endpoints_from_row(rows: list) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(*e) for e in rows)


def _features_from_row(rows: list) -> tuple[SupportedFeature, ...]:
    return tuple(SupportedFeature(*f) for f in rows)


def _broker_row(b: BrokerRegistration) -> list:
    return [b.id, b.epoch, b.incarnation_id, _endpoints_row(b.listeners),
            [list(f) for f in b.supported_features], b.rack, b.fenced, b.in_controlled_shutdown,
            b.is_migrating_zk_broker, list(b.directories)]


def _broker_from_row(row: list) -> BrokerRegistration:
    bid, epoch, incarnation, listeners, features, rack, fenced, ics, zk, dirs = row
    return BrokerRegistration(bid, epoch, incarnation, _endpoints_from_row(listeners),
                              _features_from_row(features), rack, fenced, ics, zk, tuple(dirs))


def _controller_row(c: ControllerRegistration) -> list:
    return [c.id, c.incarnation_id, c.zk_migration_ready, _endpoints_row(c.listeners),
            [list(f) for f in c.supported_features]]


def _controller_from_row(row: list) -> ControllerRegistration:
    cid, incarnation, zk_ready, listeners, features = row
    return ControllerRegistration(cid, incarnation, zk_ready, _endpoints_from_row(listeners),
                                  _features_from_row(features))


def _partition_from_row(topic_id: str, row: list) -> PartitionRegistration:
    """A partition of a format-1 image."""
    (pid, replicas, isr, removing, adding, leader, lrs, leader_epoch, partition_epoch, elr,
     last_known_elr, directories, last_offset, last_timestamp) = row
    return PartitionRegistration(
        topic_id, pid, tuple(replicas), tuple(isr), tuple(removing), tuple(adding), leader, lrs,
        leader_epoch, partition_epoch, tuple(elr), tuple(last_known_elr), tuple(directories),
        last_offset, last_timestamp,
    )


def _quorum_row(q: QuorumState) -> list:
    return [q.leader_id, q.leader_epoch, [list(v) for v in q.voters], [list(v) for v in q.granting_voters],
            [[v.id, v.directory_id, _endpoints_row(v.endpoints), v.kraft_version_min, v.kraft_version_max]
             for v in q.voter_set],
            q.kraft_version]


def _quorum_from_row(row: list) -> QuorumState:
    leader_id, leader_epoch, voters, granting, voter_set, kraft_version = row
    return QuorumState(
        leader_id, leader_epoch, tuple(Voter(*v) for v in voters), tuple(Voter(*v) for v in granting),
        tuple(VoterRegistration(vid, vdir, _endpoints_from_row(eps), vmin, vmax)
              for vid, vdir, eps, vmin, vmax in voter_set),
        kraft_version,
    )


@dataclass(slots=True)
class ReplayResult:
    """What one event did to the image; the streaming job turns it into table rows."""

    rejected: str | None = None  # why the event did not apply; the image is then unchanged
    partition_changes: list[tuple[PartitionRegistration | None, PartitionRegistration | None]] = field(
        default_factory=list)
    broker_changes: list[tuple[BrokerRegistration | None, BrokerRegistration | None]] = field(
        default_factory=list)
    deferred: bool = False  # held in an open transaction or snapshot; takes effect at its end
    # Records held back that did not apply when their transaction or snapshot completed:
    # (offset, type, reason). Kafka's loader reports these to its fault handler and goes on.
    deferred_rejections: list[tuple[int, str, str]] = field(default_factory=list)
