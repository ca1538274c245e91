"""``kraftlake.replication``: scenarios replayed through the image, each checked against both KIP-841
invariants, and the failover of a real Kafka log compared with what its controller wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftlake.codec.logdir import read_partition_dir
from kraftlake.decisions import Context
from kraftlake.replay import replay
from kraftlake.image import ClusterImage
from kraftlake.replication import broker_failover

from test_elections import Cluster, changed_fields, check_kip841, state, topic_id

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-logs"


def ctx(offset: int = 1000, **config: str) -> Context:
    return Context(now_ms=0, offset=offset, config={k.replace("_", "."): v for k, v in config.items()})


# --- broker failover (fence and controlled shutdown) ---------------------------------------------------

@pytest.mark.parametrize("how", ["fence", "shutdown"])
def test_failover_leaves_isrs_and_moves_leadership(how):
    c = Cluster()
    c.brokers(1, 2, 3)
    c.topic("t", [[1, 2, 3], [2, 1, 3], [3, 2, 1], [2, 3]], isr=[[3, 1, 2], [2, 1, 3], [3, 2, 1], [2, 3]],
            leaders=[1, 2, 3, 2])
    records = broker_failover(c.image, 1, ctx())
    assert len(records) == 3  # partition 3 has no replica on broker 1
    # Kafka persists a fencing after the partition changes, a controlled shutdown before them.
    if how == "fence":
        check_kip841(c, records + [c.broker_change(1, fenced=True)])
    else:
        check_kip841(c, [c.broker_change(1, shutdown=True)] + records)
    # ISR order is kept; the new leader is the first *assigned* replica in the ISR.
    assert state(c.partition("t", 0)) == ([1, 2, 3], [3, 2], 2, 6, 11)
    assert state(c.partition("t", 1)) == ([2, 1, 3], [2, 3], 2, 5, 11)
    assert state(c.partition("t", 2)) == ([3, 2, 1], [3, 2], 3, 5, 11)
    assert state(c.partition("t", 3)) == ([2, 3], [2, 3], 2, 5, 10)


def test_failover_of_the_last_isr_member_goes_offline_and_keeps_it():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]])
    [rec] = broker_failover(c.image, 1, ctx())
    assert changed_fields(rec) == {"TopicId": topic_id(1), "PartitionId": 0, "Leader": -1}
    c.set_broker(1, fenced=True)
    check_kip841(c, [rec])
    assert state(c.partition("t")) == ([1, 2], [1], -1, 6, 11)
    assert broker_failover(c.image, 1, ctx()) == []  # nothing left to take away


def test_failover_never_elects_a_fenced_or_shutting_down_replica():
    c = Cluster()
    c.brokers(1, 4)
    c.broker(2, fenced=True)
    c.broker(3, shutdown=True)
    c.topic("t", [[1, 2, 3, 4], [1, 2, 3]], isr=[[1, 2, 3, 4], [1, 2, 3]])
    records = broker_failover(c.image, 1, ctx())
    check_kip841(c, records)
    assert state(c.partition("t", 0))[1:3] == ([2, 3, 4], 4)
    assert state(c.partition("t", 1))[1:3] == ([2, 3], -1)


def test_failover_unclean_where_the_topic_allows_it():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("dirty", [[1, 2]], n=1, isr=[[1]], configs={"unclean.leader.election.enable": "true"})
    c.topic("clean", [[1, 2]], n=2, isr=[[1]])
    records = broker_failover(c.image, 1, ctx())
    check_kip841(c, records)
    dirty, clean = c.partition("dirty"), c.partition("clean")
    assert state(dirty) == ([1, 2], [2], 2, 6, 11) and dirty.leader_recovery_state == 1
    assert state(clean) == ([1, 2], [1], -1, 6, 11)


def test_failover_unclean_from_the_cluster_default():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]], isr=[[1]])
    records = broker_failover(c.image, 1, ctx(unclean_leader_election_enable="true"))
    check_kip841(c, records)
    assert state(c.partition("t")) == ([1, 2], [2], 2, 6, 11)


def test_failover_touches_only_this_shards_topics():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("mine", [[1, 2]], n=1)
    c.topic("theirs", [[1, 2]], n=2)
    records = broker_failover(c.image, 1, Context(now_ms=0, offset=1, owns=lambda tid: tid == topic_id(1)))
    assert [r["data"]["TopicId"] for r in records] == [topic_id(1)]


def test_failover_does_not_mutate_the_image():
    c = Cluster()
    c.brokers(1, 2)
    c.topic("t", [[1, 2]])
    before = c.image.to_bytes()
    broker_failover(c.image, 1, ctx())
    assert c.image.to_bytes() == before


def test_failover_matches_the_real_controller_on_single_broker_shutdown():
    """Replay the log up to the record that starts broker 1's controlled shutdown, apply it, and
    compare what ``broker_failover`` writes with what Kafka's controller wrote next."""
    events = list(read_partition_dir(FIXTURES / "single-broker-shutdown" / "__cluster_metadata-0"))
    start = next(i for i, e in enumerate(events) if e["type"] == "BrokerRegistrationChangeRecord"
                 and e["data"]["InControlledShutdown"] == 1)
    image = ClusterImage()
    for e in events[:start + 1]:
        assert replay(image, e).rejected is None
    real = [e for e in events[start + 1:] if e["type"] == "PartitionChangeRecord"]
    assert len(real) == 54

    ours = broker_failover(image, 1, ctx(offset=events[start]["offset"]))

    def key(rec: dict) -> tuple:
        return rec["data"]["TopicId"], rec["data"]["PartitionId"]

    assert sorted(map(key, ours)) == sorted(map(key, real))
    real_by_key = {key(r): r for r in real}
    for rec in ours:
        theirs = real_by_key[key(rec)]
        assert rec["version"] == theirs["version"]
        assert rec["data"] == {k: theirs["data"][k] for k in rec["data"]}
    # Replayed, both give the same partitions: leader -1, ISR [1], epochs one up.
    expected, actual = image.copy(), image.copy()
    for rec in real:
        replay(expected, rec)
    for i, rec in enumerate(ours):
        replay(actual, {**rec, "offset": real[i]["offset"], "timestamp": real[i]["timestamp"]})
    assert {key_: state(p) for key_, p in _partitions(actual)} == {key_: state(p) for key_, p in _partitions(expected)}
    assert all(p.leader == -1 and p.isr == (1,) for _, p in _partitions(actual))


def _partitions(image: ClusterImage):
    return [((p.topic_id, p.partition_id), p) for p in image.iter_partitions()]
