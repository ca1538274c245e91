"""The image as a tree of named nodes, as ``kafka-metadata-shell`` shows Kafka's (its ``MetadataNode``s).

Operators who know Kafka's tool look for the same names, so the tree follows its layout where this
image has the same thing: a topic is a directory holding ``name``, ``id`` and one leaf per partition id;
config resources are ``TYPE:name`` (``TYPE`` alone for a cluster-wide default) with one leaf per key;
features are ``metadataVersion`` and ``finalized_<feature>``. Kafka's shell puts these under
``/image/cluster/brokers``, ``/image/topics/byName`` ...; here they sit at the root (``/brokers``,
``/topics``, ``/features``, ``/configs``), beside ``/topicIds`` (``byId``) and ``/controllers``.

A leaf's text names its fields as Kafka's registration classes print theirs (``leaderEpoch=3``), with
codes by name, so a line reads the same in both tools. A directory is a ``dict`` (name -> node), a leaf
a ``str``: the whole tree of an image with thousands of partitions is built in milliseconds, and a plain
structure is what a shell's ``ls``, ``cat`` and ``find`` walk.
"""

from __future__ import annotations

from typing import Union

from kraftlake.image.cluster_image import (CONFIG_RESOURCE_TYPES, DIRECTORY_IDS, LEADER_RECOVERY_STATES,
                                           BrokerRegistration, ClusterImage, ControllerRegistration, Endpoint,
                                           PartitionRegistration)
from kraftlake.image.features import METADATA_VERSION, finalized_levels

Node = Union[dict[str, "Node"], str]

FINALIZED_PREFIX = "finalized_"
METADATA_VERSION_NODE = "metadataVersion"


def image_tree(image: ClusterImage) -> dict[str, Node]:
    """The root directory of ``image``."""
    topics = {t.name: _topic(t.name, t.id, [t.partitions[p] for p in sorted(t.partitions)])
              for t in sorted(image.topics.values(), key=lambda t: t.name)}
    return {
        "brokers": {str(b): broker_text(image.brokers[b]) for b in sorted(image.brokers)},
        "controllers": {str(c): _controller_text(image.controllers[c]) for c in sorted(image.controllers)},
        "topics": topics,
        "topicIds": {t.id: topics[t.name] for t in sorted(image.topics.values(), key=lambda t: t.id)},
        "features": _features(finalized_levels(image)),
        "configs": {_resource(t, n): {k: v for k, v in sorted(values.items())}
                    for (t, n), values in sorted(image.configs.items())},
    }


def _topic(name: str, topic_id: str, partitions: list[PartitionRegistration]) -> dict[str, Node]:
    return {"name": name, "id": topic_id, **{str(p.partition_id): partition_text(p) for p in partitions}}


def _features(levels: dict[str, int]) -> dict[str, Node]:
    found: dict[str, Node] = {}
    if METADATA_VERSION in levels:
        found[METADATA_VERSION_NODE] = str(levels[METADATA_VERSION])
    found.update({FINALIZED_PREFIX + n: str(v) for n, v in sorted(levels.items()) if n != METADATA_VERSION})
    return found


def _resource(resource_type: int, name: str) -> str:
    """``TYPE:name`` as Kafka's shell names a config resource; ``TYPE`` for the default one (name "")."""
    kind = CONFIG_RESOURCE_TYPES.get(resource_type, f"UNKNOWN({resource_type})")
    return f"{kind}:{name}" if name else kind


def _ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


def _endpoints(endpoints: tuple[Endpoint, ...]) -> str:
    return "[" + ", ".join(f"{e.name}://{e.host}:{e.port}" for e in endpoints) + "]"


def broker_text(b: BrokerRegistration) -> str:
    """A broker's registration in one line, its fields named as Kafka's ``BrokerRegistration`` prints them."""
    features = ", ".join(f"{f.name}: {f.min_version}-{f.max_version}" for f in b.supported_features)
    return (f"BrokerRegistration(id={b.id}, epoch={b.epoch}, incarnationId={b.incarnation_id}, "
            f"listeners={_endpoints(b.listeners)}, supportedFeatures={{{features}}}, "
            f"rack={'null' if b.rack is None else b.rack}, fenced={str(b.fenced).lower()}, "
            f"inControlledShutdown={str(b.in_controlled_shutdown).lower()}, "
            f"isMigratingZkBroker={str(b.is_migrating_zk_broker).lower()}, directories=[{', '.join(b.directories)}])")


def _controller_text(c: ControllerRegistration) -> str:
    return (f"ControllerRegistration(id={c.id}, incarnationId={c.incarnation_id}, "
            f"zkMigrationReady={str(c.zk_migration_ready).lower()}, listeners={_endpoints(c.listeners)})")


def partition_text(p: PartitionRegistration) -> str:
    """A partition's registration in one line, as Kafka's ``PartitionRegistration`` prints it (directories'
    reserved ids by name), then where the log last changed it."""
    directories = ", ".join(DIRECTORY_IDS.get(d, d) for d in p.directories)
    return (f"PartitionRegistration(replicas={_ints(p.replicas)}, directories=[{directories}], isr={_ints(p.isr)}, "
            f"removingReplicas={_ints(p.removing_replicas)}, addingReplicas={_ints(p.adding_replicas)}, "
            f"elr={_ints(p.elr)}, lastKnownElr={_ints(p.last_known_elr)}, leader={p.leader}, "
            f"leaderRecoveryState={LEADER_RECOVERY_STATES.get(p.leader_recovery_state, p.leader_recovery_state)}, "
            f"leaderEpoch={p.leader_epoch}, partitionEpoch={p.partition_epoch}) lastOffset={p.last_offset}")
