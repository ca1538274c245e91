"""Partitions in columns (``image.partition_store``) and runs of PartitionChangeRecords applied to them at
once (``image.partition_changes``): the same image, the same bytes and the same tables as the record-by-record
path, on generated logs of every kind of event, in any batching (pure core, no Spark)."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kraftlake.codec.events import validate_event
from kraftlake.controller import shards
from kraftlake.controller.shards import ShardState, apply_outputs, iter_rows, replay_log, routes, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.partition_changes import is_simple
from kraftlake.image.partition_store import Codes, PartitionRegistration
from kraftlake.image.replay import replay
from kraftlake.sim.workload import generate

from streaming_helpers import generate_log


def _events(seed: int, size: int) -> list[dict]:
    """A generated log (brokers, topics made and removed, reassignments, transactions, records that do not
    apply) as the controller reads it: offsets, every field."""
    events = []
    for offset, event in enumerate(generate_log(seed, size).events):
        full = validate_event({**event, "offset": offset})
        events.append({**full, "offset": offset, "leader_epoch": 1, "source": None, "position": None})
    return events


CHANGE_FIELDS = ("TopicId", "PartitionId", "Isr", "Leader", "Replicas", "RemovingReplicas", "AddingReplicas",
                 "LeaderRecoveryState", "Directories", "EligibleLeaderReplicas", "LastKnownElr")


def _with_more_changes(events: list[dict], seed: int) -> list[dict]:
    """The log with bursts of simple PartitionChangeRecords (the column-wise path's input) copied from
    its own changes, ISRs and leaders shuffled, so runs are long and hit partitions repeatedly."""
    rng = random.Random(seed)
    out: list[dict] = []
    bursts = 0
    for event in events:
        out.append(event)
        if event["type"] in ("PartitionRecord", "PartitionChangeRecord") and (not bursts or rng.random() < 0.5):
            bursts += 1
            for _ in range(rng.randint(1, 40)):
                data = dict(event["data"], Replicas=None, AddingReplicas=None, RemovingReplicas=None,
                            Directories=None, EligibleLeaderReplicas=None, LastKnownElr=None,
                            LeaderRecoveryState=rng.choice([-1, -1, 0, 1]))
                data["Isr"] = rng.choice([None, [1], [1, 2], [2, 3, 4], []])
                data["Leader"] = rng.choice([-2, -2, -1, 1, 2, 3])
                out.append({**event, "type": "PartitionChangeRecord", "version": 0,
                            "data": {k: data[k] for k in CHANGE_FIELDS}})
    return [{**e, "offset": i, "timestamp": e["timestamp"] + i} for i, e in enumerate(out)]


def _rows(tables: dict) -> dict[str, list[str]]:
    """Each table's rows; a table left empty (its rows deleted in a later batch) as one never written."""
    return {name: sorted(map(repr, iter_rows(rows))) for name, rows in tables.items() if rows}


@pytest.fixture(autouse=True)
def short_runs(monkeypatch):
    monkeypatch.setattr(shards, "FAST_RUN", 2)  # every run of two or more goes to the columns
    monkeypatch.setattr(shards, "DECIDED_RUN", 2)  # a decision's too


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(20, 120), shard_count=st.integers(1, 3))
def test_the_columns_give_the_tables_and_images_of_the_plain_path(seed, size, shard_count):
    events = _with_more_changes(_events(seed, size), seed)
    assume(any(e["type"] == "PartitionChangeRecord" and is_simple(e["data"]) for e in events))  # a log with topics
    fast, fast_states = replay_log(events, shard_count, columns=True)
    plain, plain_states = replay_log(events, shard_count, columns=False)
    assert _rows(fast) == _rows(plain)
    for a, b in zip(fast_states, plain_states):
        assert a.image == b.image
        assert a.to_bytes() == b.to_bytes()


def _in_record_batches(events: list[dict], seed: int) -> list[dict]:
    """The log as Kafka would lay it out in record batches of 1 to 60 consecutive records (each its own
    source position): controlled shutdowns, fencings and their partition changes share batches."""
    rng = random.Random(seed)
    out, start = [], 0
    while start < len(events):
        size = rng.randint(1, 60)
        out += [{**e, "source": "00000000000000000000.log", "position": start} for e in events[start:start + size]]
        start += size
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(20, 120), shard_count=st.integers(1, 3))
def test_the_columns_find_the_causes_the_plain_path_finds_in_record_batches(seed, size, shard_count):
    events = _in_record_batches(_with_more_changes(_events(seed, size), seed), seed)
    fast, _ = replay_log(events, shard_count, columns=True)
    plain, _ = replay_log(events, shard_count, columns=False)
    assert _rows(fast) == _rows(plain)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_any_batching_through_the_state_bytes_gives_the_same_tables(seed, cuts):
    """Micro-batches: the state goes through ``to_bytes`` / ``from_bytes`` between steps, as in the state
    store, and the columns are where the partitions are after it."""
    events = _with_more_changes(_events(seed, 60), seed)
    expected, _ = replay_log(events, 2, columns=False)
    raw = [ShardState(ClusterImage()).to_bytes() for _ in range(2)]
    tables: dict = {}
    start = 0
    for cut in cuts + [len(events)]:
        chunk, start = events[start:start + cut], start + cut
        outputs = []
        for shard in range(2):
            state = ShardState.from_bytes(raw[shard])
            outputs.extend(step(shard, 2, state, [e for e in chunk if shard in routes(e, 2)]))
            raw[shard] = state.to_bytes()
        apply_outputs(tables, outputs)
    assert _rows(tables) == _rows(expected)


def test_a_generated_workload_at_scale():
    """The benchmark's workload (a million-partition cluster's shape, smaller): equal, and the column
    runs really ran (no partition row made one by one for the changes)."""
    events = list(generate(30_000, brokers=6, topics=20, partitions_per_topic=500))
    fast, fast_states = replay_log(events, 2, columns=True)
    plain, plain_states = replay_log(events, 2, columns=False)
    assert _rows(fast) == _rows(plain)
    assert [s.to_bytes() for s in fast_states] == [s.to_bytes() for s in plain_states]
    state = ShardState(ClusterImage())
    outputs = step(0, 1, state, events)
    assert any(isinstance(o, shards.Block) and o.table == "partition_history" for o in outputs)


def test_the_partition_map_behaves_as_a_dict():
    image = ClusterImage()
    replay(image, {"type": "TopicRecord", "offset": 0, "timestamp": 1, "leader_epoch": 1,
                   "data": {"Name": "t", "TopicId": "AAAAAAAAAAAAAAAAAAAAAQ"}})
    partitions = image.topics["AAAAAAAAAAAAAAAAAAAAAQ"].partitions
    made = [PartitionRegistration("AAAAAAAAAAAAAAAAAAAAAQ", p, (1, 2), (1,), (), (), 1, 0, 0, 0, (), (),
                                  ("d", "d"), p, p) for p in (3, 0, 7)]
    for p in made:
        partitions[p.partition_id] = p
    assert list(partitions) == [0, 3, 7] and len(partitions) == 3 and 3 in partitions and 5 not in partitions
    image.store.forget_objects()  # into the columns, objects dropped: made again from the rows
    assert partitions[3] == made[0] and partitions.get(5) is None and partitions.get(7) == made[2]
    assert partitions[3] is partitions[3]  # made once, then kept
    del partitions[0]
    assert list(partitions) == [3, 7]
    with pytest.raises(KeyError):
        del partitions[0]
    restored = ClusterImage.from_bytes(image.to_bytes())
    assert restored == image and dict(restored.topics["AAAAAAAAAAAAAAAAAAAAAQ"].partitions.items()) == {
        3: made[0], 7: made[2]}
    copy = image.copy()
    partitions[3] = made[2].__class__(*[*(getattr(made[0], f) for f in ("topic_id", "partition_id", "replicas")),
                                         (2,), *(getattr(made[0], f) for f in (
                                             "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
                                             "leader_epoch", "partition_epoch", "elr", "last_known_elr", "directories",
                                             "last_offset", "last_timestamp"))])
    assert copy.topics["AAAAAAAAAAAAAAAAAAAAAQ"].partitions[3].isr == (1,)  # the copy is independent
    assert image.topics["AAAAAAAAAAAAAAAAAAAAAQ"].partitions[3].isr == (2,)


def test_format_1_state_of_an_older_release_is_still_read():
    """A shard's state written by the release before the columns (partitions as JSON rows) loads."""
    import json
    import zlib

    doc = [1, [], [], [["AAAAAAAAAAAAAAAAAAAAAQ", "t", [[0, [1, 2], [1], [], [], 1, 0, 4, 5, [], [], ["d", "d"], 9, 10]]]],
           [], [], -1, [], [], [], [], 0, [-1, -1, [], [], [], 0], None, []]
    image = ClusterImage.from_bytes(zlib.compress(json.dumps(doc).encode()))
    p = image.topics["AAAAAAAAAAAAAAAAAAAAAQ"].partitions[0]
    assert (p.replicas, p.isr, p.leader_epoch, p.partition_epoch, p.directories, p.last_offset) == (
        (1, 2), (1,), 4, 5, ("d", "d"), 9)
    assert ClusterImage.from_bytes(image.to_bytes()) == image


@settings(max_examples=50, deadline=None)
@given(first=st.lists(st.lists(st.integers(0, 6), max_size=4), max_size=8),
       later=st.lists(st.lists(st.integers(0, 6), max_size=4), max_size=8), item=st.integers(0, 6))
def test_which_tuples_hold_an_item_is_answered_for_tuples_coded_after_it_was_first_asked(first, later, item):
    assert Codes().holding(item).tolist() == []  # (a store read from bytes without any list)
    codes = Codes([()])
    codes.codes_of(tuple(t) for t in first)
    assert codes.holding(item).tolist() == [item in v for v in codes.values]
    codes.codes_of(tuple(t) for t in later)
    assert codes.holding(item).tolist() == [item in v for v in codes.values]
    assert codes.holding(item + 1).tolist() == [item + 1 in v for v in codes.values]


def test_a_state_kept_in_memory_keeps_the_tuples_its_partitions_hold_not_every_one_seen():
    """Issue 27: a worker keeps the state it wrote last, so steps follow each other on one state without
    the bytes round trip; a partition whose ISR goes through a thousand different lists must not leave the
    store with a thousand tuples, and the state stays what the round trip gives."""
    topic_id = "8GwUSgJbQT-KmgIepkin3Q"
    log = [{"type": "TopicRecord", "version": 0, "data": {"Name": "t", "TopicId": topic_id}},
           {"type": "PartitionRecord", "version": 0,
            "data": {"PartitionId": 0, "TopicId": topic_id, "Replicas": [1, 2, 3], "Isr": [1, 2, 3], "Leader": 1}}]
    log += [{"type": "PartitionChangeRecord", "version": 0,
             "data": {"PartitionId": 0, "TopicId": topic_id, "Isr": [1, 2 + i]}} for i in range(1000)]
    events = [{**validate_event({**e, "timestamp": 1_000 + i}), "offset": i, "leader_epoch": 1, "source": None,
               "position": None} for i, e in enumerate(log)]
    kept, raw = ShardState(ClusterImage()), ShardState(ClusterImage()).to_bytes()
    kept_tables: dict = {}
    bytes_tables: dict = {}
    for start in range(0, len(events), 100):
        chunk = events[start:start + 100]
        apply_outputs(kept_tables, step(0, 1, kept, chunk))
        through_bytes = ShardState.from_bytes(raw)
        apply_outputs(bytes_tables, step(0, 1, through_bytes, chunk))
        raw = through_bytes.to_bytes()
        assert kept.to_bytes() == raw
    assert _rows(kept_tables) == _rows(bytes_tables)
    assert len(bytes_tables["partition_history"]) == 1001
    store = kept.image.store
    held = {t for p in kept.image.iter_partitions() for t in (p.replicas, p.isr, p.removing_replicas,
                                                               p.adding_replicas, p.elr, p.last_known_elr)}
    assert kept.image.partition(topic_id, 0).isr == (1, 1001)
    assert len(store.ints.values) <= 2 * len(held | {()})
