"""``replication.broker_failover`` decides each shape of partition once (``PartitionStore.shapes``): held
equal, record for record and in order, to ``change_partition`` asked partition by partition, on random
images (every field of a partition drawn, ELR on and off, metadata versions, topic policies, shards),
after creating, changing and deleting topics, and after the image went through its bytes."""

from __future__ import annotations

import random
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlake.controller.decisions import Context, record
from kraftlake.controller.elections import change_partition, eligible_replicas, elr_policy, metadata_version
from kraftlake.controller import replication
from kraftlake.controller.replication import broker_failover, topic_election
from kraftlake.image.cluster_image import DIR_LOST, DIR_MIGRATING, DIR_UNASSIGNED, ClusterImage
from kraftlake.metadata import uuids

from test_elections import Cluster

BROKERS = range(1, 7)
DIRS = [DIR_MIGRATING, DIR_UNASSIGNED, DIR_LOST, uuids.from_bytes(bytes([7] * 16)), uuids.from_bytes(bytes([9] * 16))]


def one_by_one(image: ClusterImage, broker: int, ctx: Context, directories: frozenset[str] | None,
               in_elr: bool, unclean_shutdown: bool) -> list[dict]:
    """The failover as its rule reads: every partition of every owned topic, in order, asked alone."""
    eligible = eligible_replicas(image, excluded=(broker,))
    records = []
    for topic in image.topics.values():
        if not ctx.owns(topic.id):
            continue
        for p in topic.partitions.values():
            if broker not in p.isr and not (in_elr and broker in p.elr):
                continue
            if directories is not None and dict(zip(p.replicas, p.directories)).get(broker) not in directories:
                continue
            change = change_partition(p, eligible, isr=[r for r in p.isr if r != broker],
                                      election=topic_election(image, topic.name, ctx), mv=metadata_version(image),
                                      unclean_shutdown=(broker,) if unclean_shutdown else (),
                                      **elr_policy(image, topic, ctx.config))
            if change is not None:
                records.append(change)
    return records


def _some(rng: random.Random, items: list[int], most: int) -> list[int]:
    return rng.sample(items, rng.randint(0, min(most, len(items))))


def _partition(rng: random.Random, factor: int) -> dict:
    replicas = rng.sample(list(BROKERS), factor)
    isr = _some(rng, replicas, factor)
    return {"Replicas": replicas, "Isr": isr, "Leader": rng.choice(isr + [-1]) if isr else -1,
            "LeaderEpoch": rng.randint(0, 9), "PartitionEpoch": rng.randint(0, 9),
            "LeaderRecoveryState": rng.choice([0, 0, 1]), "RemovingReplicas": _some(rng, replicas, 1),
            "AddingReplicas": _some(rng, replicas, 1),
            "EligibleLeaderReplicas": _some(rng, [r for r in replicas if r not in isr], 2),
            "LastKnownElr": _some(rng, replicas, 1),
            "Directories": [rng.choice(DIRS) for _ in replicas] if rng.random() < 0.7 else []}


def random_cluster(rng: random.Random, make: Callable[[int | None], Cluster] = Cluster) -> Cluster:
    """``make``: the cluster for a metadata.version (say, one that keeps the records it replays)."""
    mv = rng.choice([None, 7, 14, 19, 23, 25])
    c = make(mv)
    if mv is None or mv >= 23:
        c.apply([record("FeatureLevelRecord", {"Name": "eligible.leader.replicas.version",
                                               "FeatureLevel": rng.choice([0, 1, 1])})])
    for b in BROKERS:
        c.broker(b, fenced=rng.random() < 0.2, shutdown=rng.random() < 0.15)
    bases = [_partition(rng, rng.randint(1, 4)) for _ in range(3)]
    for n in range(1, rng.randint(2, 9)):
        configs = {}
        if rng.random() < 0.5:
            configs["min.insync.replicas"] = str(rng.randint(1, 3))
        if rng.random() < 0.3:
            configs["unclean.leader.election.enable"] = "true"
        tid = c.topic(f"t{n}", [], n=n, configs=configs)
        base = rng.choice(bases)  # topics alike but for their policy share shapes
        factor = len(base["Replicas"])
        records = []
        for pid in range(rng.randint(1, 40)):
            # partitions differing from the topic's first in one field: shapes that must not merge
            name = rng.choice([*base, "new"])
            if name == "new":
                fields = _partition(rng, factor)
            elif name == "Replicas":  # the same replicas in another order
                fields = {**base, name: rng.sample(base[name], factor)}
            else:
                fields = {**base, name: _partition(rng, factor)[name]}
            records.append(record("PartitionRecord", {**fields, "TopicId": tid, "PartitionId": pid}))
        records = rng.sample(records, len(records))
        half = len(records) // 2
        c.apply(records[:half])
        c.image.store.flush()  # the rows of the first half first: rows out of partition order
        c.apply(records[half:])
        if rng.random() < 0.3:  # some partitions changed since: objects not yet in the columns
            c.apply([record("PartitionChangeRecord", {"TopicId": tid, "PartitionId": pid,
                                                      "Isr": rng.sample(list(BROKERS), 2)})
                     for pid in range(0, 40, 3) if pid < len(records)])
    for topic in list(c.image.topics.values()):
        if rng.random() < 0.2:
            c.apply([record("RemoveTopicRecord", {"TopicId": topic.id})])
    return c


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), through_bytes=st.booleans())
def test_a_failover_decided_by_shape_is_the_failover_decided_one_by_one(seed, through_bytes):
    rng = random.Random(seed)
    c = random_cluster(rng)
    image = ClusterImage.from_bytes(c.image.to_bytes()) if through_bytes else c.image
    owned = {t for t in image.topics if rng.random() < 0.6}
    contexts = [Context(now_ms=0, offset=1000), Context(now_ms=0, offset=1000, owns=owned.__contains__),
                Context(now_ms=0, offset=1000, config={"unclean.leader.election.enable": "true",
                                                       "min.insync.replicas": "2"})]
    for broker in BROKERS:
        for ctx in contexts:
            for options in ({}, {"also_elr": True}, {"unclean_shutdown": True},
                            {"directories": frozenset(rng.sample(DIRS, 2))}):
                expected = one_by_one(image, broker, ctx, options.get("directories"),
                                      options.get("also_elr", False) or options.get("unclean_shutdown", False),
                                      options.get("unclean_shutdown", False))
                assert broker_failover(image, broker, ctx, **options) == expected, (broker, options)


@pytest.mark.parametrize("shapes_from", [0, 1 << 30])
def test_a_failover_decides_alike_with_and_without_shapes(monkeypatch, shapes_from):
    """A failover of fewer than ``SHAPES_FROM`` partitions decides each on its own: by shape for all sizes, or
    for none, the records are those asked partition by partition."""
    monkeypatch.setattr(replication, "SHAPES_FROM", shapes_from)
    sizes = set()
    for seed in range(12):
        rng = random.Random(seed)
        image = random_cluster(rng).image
        for broker in BROKERS:
            for ctx in (Context(now_ms=0, offset=1000), Context(now_ms=0, offset=1000, config={
                    "unclean.leader.election.enable": "true", "min.insync.replicas": "2"})):
                expected = one_by_one(image, broker, ctx, None, False, False)
                sizes.add(len(expected))
                assert broker_failover(image, broker, ctx) == expected, (seed, broker)
    assert min(sizes) < 10 and max(sizes) > 64  # failovers on both sides of the default


def test_shapes_group_rows_alike_in_every_field_but_identity_epochs_and_offsets():
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("a", [[1, 2, 3], [1, 2, 3], [2, 1, 3], [1, 2, 3]], isr=[[1, 2, 3], [1, 2, 3], [2, 1, 3], [1, 2]], n=1)
    c.topic("b", [[1, 2, 3], [1, 2, 3]], n=2, LeaderEpoch=7, PartitionEpoch=3)
    store = c.image.store
    store.flush()
    rows = np.array([store.maps[tid].rows[p] for tid in c.image.topics for p in sorted(store.maps[tid].rows)])
    shape, representatives = store.shapes(rows)
    # a0, a1, b0, b1 alike (topic, partition and epochs aside); a2 (other replicas) and a3 (other ISR) not
    assert shape[0] == shape[1] == shape[4] == shape[5]
    assert len({shape[0], shape[2], shape[3]}) == 3 and len(representatives) == 3
    assert all(shape[place] == s for s, place in enumerate(representatives.tolist()))
    # a key of the caller's splits a shape
    split, _ = store.shapes(rows, np.array([0, 0, 0, 0, 1, 1]))
    assert split[0] == split[1] != split[4] == split[5]
