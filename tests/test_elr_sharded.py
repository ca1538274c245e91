"""Eligible leader replicas (KIP-966) through the whole controller pipeline: routed to shards, decided,
replayed and folded into tables. ELR decisions concern one partition each, so the tables must not depend
on how many shards decide them; the ELR itself is checked against what Kafka's rules give by hand."""

from __future__ import annotations

from kraftlake.codec.events import check_struct
from kraftlake.controller.shards import replay_log
from kraftlake.metadata import uuids
from kraftlake.metadata.schemas import registry

T0 = 1_763_000_000_000
TOPICS = [uuids.from_bytes(bytes([0x20 + n] * 16)) for n in range(5)]
CONFIG = {"broker.session.timeout.ms": "9000", "auto.leader.rebalance.enable": "false"}


def event(offset: int, type_: str, version: int = 0, second: int = 0, **data) -> dict:
    return {"offset": offset, "leader_epoch": 1, "timestamp": T0 + second * 1000, "type": type_,
            "version": version, "data": check_struct(registry()[type_], data, version, type_),
            "source": None, "position": None}


def elr_log() -> list[dict]:
    """Four live brokers, five topics of two partitions on all four, min.insync.replicas 3 and the ELR
    feature on; then 1 and 2 ask to be fenced, 3 is fenced when its session lapses, and restarts
    without a clean shutdown (no PreviousBrokerEpoch)."""
    records = [("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 23}),
               ("FeatureLevelRecord", 0, {"Name": "eligible.leader.replicas.version", "FeatureLevel": 1})]
    for b in range(4):
        records.append(("RegisterBrokerRecord", 3, {
            "BrokerId": b, "BrokerEpoch": 100 + b, "IncarnationId": uuids.from_bytes(bytes([0xA0 + b] * 16)),
            "Fenced": False, "LogDirs": [uuids.from_bytes(bytes([0x70 + b] * 16))]}))
    for n, topic in enumerate(TOPICS):
        records.append(("TopicRecord", 0, {"Name": f"t{n}", "TopicId": topic}))
        records.append(("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": f"t{n}", "Name": "min.insync.replicas",
                                            "Value": "3"}))
        for pid in range(2):
            replicas = [(pid + n + k) % 4 for k in range(4)]
            records.append(("PartitionRecord", 2, {"TopicId": topic, "PartitionId": pid, "Replicas": replicas,
                                                   "Isr": replicas, "Leader": replicas[0], "LeaderEpoch": 0,
                                                   "PartitionEpoch": 0}))
    events = [event(i, t, v, **d) for i, (t, v, d) in enumerate(records)]
    offset = len(events)
    for second, broker in ((1, 1), (2, 2)):
        events.append(event(offset, "BrokerHeartbeatRequest", 1, second, BrokerId=broker, BrokerEpoch=100 + broker,
                            CurrentMetadataOffset=offset, WantFence=True))
        offset += 1
    for second in (5, 10):  # 0 stays alive; 3 goes silent and its session lapses at second 10
        events.append(event(offset, "BrokerHeartbeatRequest", 1, second, BrokerId=0, BrokerEpoch=100,
                            CurrentMetadataOffset=offset))
        offset += 1
    events.append(event(offset, "BrokerRegistrationRequest", 3, 12, BrokerId=3, ClusterId="c",
                        IncarnationId=uuids.from_bytes(bytes([0xB3] * 16)), PreviousBrokerEpoch=-1,
                        Features=[{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": 23},
                                  {"Name": "eligible.leader.replicas.version", "MinSupportedVersion": 0,
                                   "MaxSupportedVersion": 1}],
                        LogDirs=[uuids.from_bytes(bytes([0x73] * 16))]))
    return events


def test_elr_tables_do_not_depend_on_the_shard_count():
    one = replay_log(elr_log(), 1, CONFIG)[0]
    three = replay_log(elr_log(), 3, CONFIG)[0]
    assert one["partitions"] == three["partitions"]
    assert sorted(map(str, one["partition_history"])) == sorted(map(str, three["partition_history"]))
    rows = list(one["partitions"].values())
    assert len(rows) == 10
    for row in rows:
        # fencing 1 left an ISR of 3 (no ELR); fencing 2 took it below min.insync.replicas, so 2 entered
        # the ELR; 3's lapse added it too; its unclean restart took it out again. 0 alone leads.
        assert (row["isr"], row["leader"], row["elr"], row["last_known_elr"]) == ([0], 0, [2], []), row
