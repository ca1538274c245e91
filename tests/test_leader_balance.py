"""auto.leader.rebalance.enable: a broker that came back leads again at the next check, not at once."""

from __future__ import annotations

import pytest

from kraftlake.metadata import uuids
from kraftlake.codec.events import check_struct
from kraftlake.metadata.schemas import registry
from kraftlake.controller.shards import replay_log

TOPIC = uuids.from_bytes(bytes([9] * 16))
T0 = 1_763_000_000_000


def event(offset: int, type_: str, version: int = 0, timestamp: int = T0, **data) -> dict:
    return {"offset": offset, "leader_epoch": 1, "timestamp": timestamp, "type": type_, "version": version,
            "data": check_struct(registry()[type_], data, version, type_), "source": None, "position": None}


def log_with_leader_away_from_preferred() -> list[dict]:
    """Broker 1 is the preferred leader, in the ISR and eligible, but broker 2 leads (as after 1 came back)."""
    events = [event(0, "RegisterBrokerRecord", 1, BrokerId=1, BrokerEpoch=0, IncarnationId=uuids.from_bytes(b"\x01" * 16),
                    Fenced=False),
              event(1, "RegisterBrokerRecord", 1, BrokerId=2, BrokerEpoch=1, IncarnationId=uuids.from_bytes(b"\x02" * 16),
                    Fenced=False),
              event(2, "TopicRecord", Name="orders", TopicId=TOPIC),
              event(3, "PartitionRecord", PartitionId=0, TopicId=TOPIC, Replicas=[1, 2], Isr=[1, 2], Leader=2,
                    LeaderEpoch=0, PartitionEpoch=0)]
    return events


def heartbeats(first_offset: int, *seconds: int) -> list[dict]:
    out = []
    for i, second in enumerate(seconds):
        out.append(event(first_offset + i, "BrokerHeartbeatRequest", 1, timestamp=T0 + second * 1000, BrokerId=1,
                         BrokerEpoch=0, CurrentMetadataOffset=first_offset + i))
    return out


CONFIG = {"broker.session.timeout.ms": "100000000", "leader.imbalance.check.interval.seconds": "300"}


@pytest.mark.parametrize("shards", [1, 3])
def test_preferred_leader_is_restored_one_interval_after_takeover(shards):
    log = log_with_leader_away_from_preferred() + heartbeats(4, 0, 299, 300, 301)
    tables, _ = replay_log(log, shards, CONFIG)
    (partition,) = tables["partitions"].values()
    assert partition["leader"] == 1 and partition["leader_epoch"] == 1
    elections = [r for r in tables["controller_log"] if r["type"] == "PartitionChangeRecord"]
    assert [(r["offset"], r["data"]["Leader"]) for r in elections] == [(6, 1)]  # the heartbeat at +300 s


def test_not_before_the_interval_and_never_when_disabled():
    early = replay_log(log_with_leader_away_from_preferred() + heartbeats(4, 0, 299), 2, CONFIG)[0]
    assert next(iter(early["partitions"].values()))["leader"] == 2
    disabled = {**CONFIG, "auto.leader.rebalance.enable": "false"}
    late = replay_log(log_with_leader_away_from_preferred() + heartbeats(4, 0, 300, 900), 2, disabled)[0]
    assert next(iter(late["partitions"].values()))["leader"] == 2
    assert not [r for r in late.get("controller_log", []) if r["type"] == "PartitionChangeRecord"]
