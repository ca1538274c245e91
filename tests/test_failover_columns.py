"""A failover's records held as columns (``partition_changes.Shaped``, in ``decisions.Records``) until read one by
one: they read as the list of dicts the failover wrote before, and the shard step that applies them to the
columns (``shards._Step.shaped``) gives the tables and the state of the step that applies them one by one
(``columns=False``), on random images and for every decision that fails a broker over: a controlled shutdown,
a fencing asked for, sessions expiring (several brokers at once, each failover seeing the one before), an
unregistration, a new incarnation after an unclean shutdown, a directory going offline."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlake.codec.events import validate_event
from kraftlake.controller import shards
from kraftlake.controller.decisions import Context, Records, record
from kraftlake.controller.replication import broker_failover
from kraftlake.controller.shards import Block, ShardState, apply_outputs, iter_rows, routes, step
from kraftlake.image import causes
from kraftlake.image.causes import Batch
from kraftlake.image.cluster_image import ClusterImage, PartitionRegistration
from kraftlake.image.partition_changes import Shaped, rows_of
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids
from kraftlake.sim.workload import failover_cluster

from test_elections import TS, Cluster
from test_failover_shapes import BROKERS, DIRS, random_cluster

TIMEOUT = 9000  # broker.session.timeout.ms (Kafka's default)
FEATURES = [{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": 30},
            {"Name": "eligible.leader.replicas.version", "MinSupportedVersion": 0, "MaxSupportedVersion": 1}]


@pytest.fixture(autouse=True)
def short_runs(monkeypatch):
    monkeypatch.setattr(shards, "FAST_RUN", 2)  # every stretch of two or more simple records goes to the columns
    monkeypatch.setattr(shards, "DECIDED_RUN", 2)  # a decision's too


def _request(type_: str, offset: int, timestamp: int, **data) -> dict:
    return {**validate_event({"type": type_, "timestamp": timestamp, "data": data}), "offset": offset,
            "leader_epoch": 1, "source": None, "position": None}


def _requests(image: ClusterImage, rng: random.Random, offset: int) -> list[dict]:
    """A term begun by a steady heartbeat, then requests that fail brokers over, a heartbeat late enough that
    every other unfenced broker's session has expired, and new incarnations of brokers so fenced."""
    brokers = sorted(image.brokers)
    live = [b for b in brokers if not image.brokers[b].fenced]
    first = rng.choice(live or brokers)
    epoch = {b: image.brokers[b].epoch for b in brokers}

    def heartbeat(broker: int, at: int, **fields) -> dict:
        return _request("BrokerHeartbeatRequest", offset + at, TS + at, BrokerId=broker, BrokerEpoch=epoch[broker],
                        CurrentMetadataOffset=offset, **fields)

    out = [heartbeat(first, 1)]
    for at, broker in enumerate(rng.sample(brokers, rng.randint(1, 3)), start=2):
        kind = rng.choice(["shutdown", "fence", "unregister", "offline"])
        if kind == "shutdown":
            out.append(heartbeat(broker, at, WantShutDown=True))
        elif kind == "fence":
            out.append(heartbeat(broker, at, WantFence=True))
        elif kind == "unregister":
            out.append(_request("UnregisterBrokerRequest", offset + at, TS + at, BrokerId=broker))
        else:
            out.append(heartbeat(broker, at, OfflineLogDirs=[DIRS[3]]))
    out.append(heartbeat(first, TIMEOUT + 10))
    for at, broker in enumerate(rng.sample(brokers, 2), start=TIMEOUT + 11):
        # another incarnation, not naming the epoch it last had: an unclean shutdown (KIP-966)
        out.append(_request("BrokerRegistrationRequest", offset + at, TS + at, BrokerId=broker,
                            IncarnationId=uuids.from_bytes(bytes([broker] * 16)), PreviousBrokerEpoch=-1,
                            LogDirs=[uuids.from_bytes(bytes([16 + broker] * 16))], Features=FEATURES))
    return out


class LoggedCluster(Cluster):
    """A cluster that keeps the log it was built from, for the shard step to replay: the step's anomaly rules
    then know every reassignment in progress, as they would in the job (the column path relies on it)."""

    def __init__(self, metadata_version: int | None = None):
        self.log: list[dict] = []
        super().__init__(metadata_version)

    def apply(self, records: list[dict]) -> None:
        start = self.offset
        super().apply(records)
        self.log += [{**validate_event({**rec, "timestamp": TS + start + i}), "offset": start + i, "leader_epoch": 1,
                      "source": None, "position": None} for i, rec in enumerate(records, start=1)]


def _tables(outputs: list) -> dict[str, list[str]]:
    tables: dict = {}
    apply_outputs(tables, outputs)
    return {name: sorted(map(repr, iter_rows(rows))) for name, rows in tables.items() if rows}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shard_count=st.integers(1, 3))
def test_a_failover_applied_as_columns_gives_the_tables_and_state_of_one_applied_record_by_record(seed, shard_count):
    rng = random.Random(seed)
    c = random_cluster(rng, LoggedCluster)
    for b in rng.sample(list(BROKERS), 2):  # brokers with directories the partitions name, for a JBOD failure
        c.broker(b, fenced=c.image.brokers[b].fenced, log_dirs=(DIRS[3], DIRS[4]))
    requests = _requests(c.image, rng, c.offset)
    for shard in range(shard_count):
        events = [e for e in c.log if shard in routes(e, shard_count)] + requests
        results = []
        for columns in (True, False):
            state = ShardState(ClusterImage())
            outputs = step(shard, shard_count, state, events, columns=columns)
            results.append((_tables(outputs), state.to_bytes()))
        assert results[0][0] == results[1][0]
        assert results[0][1] == results[1][1]


def test_the_failover_of_a_large_cluster_is_applied_on_the_columns():
    """The bench's cluster: the controlled shutdown's 1,000 records go to the columns in one stretch, with the
    request as their cause, logged in full, and give what the record-by-record path gives."""
    image = ClusterImage()
    for last in failover_cluster(1000, brokers=6, broker=1):
        assert replay(image, {**last, "leader_epoch": 1}).rejected is None
    request = _request("BrokerHeartbeatRequest", last["offset"] + 1, last["timestamp"] + 1, BrokerId=1,
                       BrokerEpoch=image.brokers[1].epoch, CurrentMetadataOffset=last["offset"], WantShutDown=True)
    results = []
    for columns in (True, False):
        state = ShardState(image.copy(), last_offset=last["offset"])
        outputs = step(0, 1, state, [request], columns=columns)
        blocks = [o for o in outputs if isinstance(o, Block) and o.table == "partition_history"]
        results.append((_tables(outputs), state.to_bytes(), blocks))
    assert results[0][:2] == results[1][:2]
    [block] = results[0][2]
    assert block.rows.num_rows == 1000 and set(block.rows.column("_cause").to_pylist()) == {"BrokerHeartbeatRequest"}
    assert not results[1][2]
    assert len(results[0][0]["controller_log"]) == 1001  # the shutdown's record, a PartitionChangeRecord per partition


def test_records_read_as_the_list_of_dicts_they_stand_for():
    c = random_cluster(random.Random(7))
    ctx = Context(now_ms=0, offset=1000)
    failover = next(r for b in BROKERS if len(r := broker_failover(c.image, b, ctx)) > 2)
    [run] = failover.parts
    assert isinstance(run, Shaped) and run._made is None  # no dict made yet
    made = list(failover)
    assert all(r["type"] == "PartitionChangeRecord" for r in made) and len(made) == len(failover)
    head, tail = record("RegisterBrokerRecord", {"BrokerId": 9}), record("FenceBrokerRecord", {"Id": 9})
    both = [head] + failover + [tail]
    assert isinstance(both, Records) and both == [head, *made, tail] and [head, *made, tail] == both
    assert both[0] == head and both[-1] == tail and both[1] == made[0] and both[1:3] == made[:2]
    assert len(both) == len(made) + 2 and both != made
    longer = failover + []
    longer.append(tail)
    assert longer == made + [tail] and failover == made  # an append to a sum leaves its terms alone
    with pytest.raises(IndexError):
        both[len(both)]
    data = run.data(np.array([len(run) - 1, 0]))
    assert data == [made[-1]["data"], made[0]["data"]]


def test_the_column_causes_name_a_broker_that_only_the_elr_held():
    """``causes.change_causes`` follows ``explains``: a fencing explains the change of a partition whose ELR
    alone held the broker, as ``partition_cause`` finds (an unregistration's failover visits such partitions)."""
    ints = [(), (1, 2), (3,)]
    before = PartitionRegistration("AAAAAAAAAAAAAAAAAAAAAQ", 0, (1, 2, 3), (1, 2), (), (), 1, 0, 5, 5, (3,), (), (),
                                   0, 0)
    after = before._replace(leader=2, leader_epoch=6, partition_epoch=6)
    fencing = {"type": "BrokerRegistrationChangeRecord",
               "data": {"BrokerId": 3, "BrokerEpoch": 100, "Fenced": 1, "InControlledShutdown": 0}}
    batch = Batch.of([(5, 100, fencing)])
    expected = causes.partition_cause(batch, 1, before, after, 100)
    kinds, offsets, brokers = causes.change_causes(np.array([1]), np.array([0]), [batch], (np.array([1]), np.array([2])),
                                                   (np.array([1]), np.array([1])), np.array([2]), ints)
    assert (causes.COLUMN_KINDS[kinds[0]], offsets[0], brokers[0]) == tuple(expected) == (causes.FENCED, 100, 3)


def test_a_run_finds_its_rows_again_in_an_image_whose_rows_moved():
    """The rows a failover saw are used while they hold its partitions; an image read from bytes keeps its rows
    in another order, and the run's rows are then looked up (``partition_changes.rows_of``)."""
    c = random_cluster(random.Random(11))
    ctx = Context(now_ms=0, offset=1000)
    run = next(p for b in BROKERS for p in broker_failover(c.image, b, ctx).parts if len(p) > 3)
    index = np.arange(len(run))
    changes, rows = run.changes(c.image, 1000, TS, 1, index)
    assert rows.tolist() == run.rows.tolist() == rows_of(c.image, changes).tolist()
    moved = ClusterImage.from_bytes(c.image.to_bytes())
    changes, rows = run.changes(moved, 1000, TS, 1, index)
    assert rows.tolist() == rows_of(moved, changes).tolist() and rows.tolist() != run.rows.tolist()
    assert (moved.store.cols["partition_id"][rows] == run.partitions).all()
