"""Heartbeats handed to the shard step as columns (``heartbeats.Heartbeats``, as the streaming job reads them)
decide exactly as the same heartbeats as dicts, and as the plain path (``fast=False``): the same tables and the
same shard states, on the fast-path tests' hard logs (every request type, heartbeats at every version, stale,
fenced, with offline directories, going back in time) and on the soak's mix, cut into micro-batches at random,
in 1 to 4 shards."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kraftlake.controller.heartbeats import FIELDS, HEARTBEAT, Heartbeats
from kraftlake.controller.shards import Answers, ShardState, apply_outputs, routed, step
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.storage.tables import answers_to_arrow
from test_request_fast_path import CONFIG, SHORT_THRESHOLDS, hard_log, rows, soak_log


def plain(event: dict) -> bool:
    """A heartbeat that crosses as columns (``controller_query.routed_columns``' ``plain``): its scalar fields set."""
    return event["type"] == HEARTBEAT and all(event["data"].get(f) is not None for f in FIELDS[:-1])


def replayed(events: list[dict], shard_count: int, cuts: list[int], as_columns: bool, fast: bool = True,
             columns: bool = True, config: dict = CONFIG, outputs: list | None = None,
             json_offsets: frozenset[int] | set[int] = frozenset()) -> tuple[dict, list[bytes]]:
    """Tables and shard states after the shards' steps over the log cut at ``cuts``; ``as_columns``: each step's
    heartbeats handed to it as ``Heartbeats`` (in reverse order: the columns may come in any order), but those at
    ``json_offsets``."""
    states = [ShardState(ClusterImage()) for _ in range(shard_count)]
    tables: dict = {}
    for lo, hi in zip([0, *cuts], [*cuts, len(events)]):
        per_shard = routed(events[lo:hi], shard_count)
        made = []
        for shard in range(shard_count):
            mine = per_shard[shard]
            crossed = [as_columns and plain(e) and e["offset"] not in json_offsets for e in mine]
            beats = [e for e, c in zip(mine, crossed) if c]
            heartbeats = Heartbeats.of_events(beats[::-1]) if beats else None
            made += step(shard, shard_count, states[shard], [e for e, c in zip(mine, crossed) if not c], config,
                         columns=columns, fast=fast, heartbeats=heartbeats)
        if outputs is not None:
            outputs += made
        apply_outputs(tables, made, config)
    return tables, [s.to_bytes() for s in states]


def assert_same(got: tuple[dict, list[bytes]], expected: tuple[dict, list[bytes]]) -> None:
    assert sorted(got[0]) == sorted(expected[0])
    for name in expected[0]:
        assert rows(got[0][name]) == rows(expected[0][name]), name
    assert got[1] == expected[1]


def behind(events: list[dict], seed: int) -> list[dict]:
    """The log with now and then a heartbeat of a broker not caught up (``IsCaughtUp`` false in a steady answer):
    its metadata offset below the broker's registration."""
    rng = random.Random(seed)
    return [{**e, "data": {**e["data"], "CurrentMetadataOffset": 0}} if e["type"] == HEARTBEAT and rng.random() < 0.03
            else e for e in events]


@pytest.fixture(scope="module")
def logs() -> dict[int, list[dict]]:
    return {seed: behind(hard_log(seed), seed) for seed in (3, 5)}


def test_heartbeats_as_columns_are_the_events_they_were(logs) -> None:
    beats = [e for e in logs[3] if e["type"] == HEARTBEAT]
    assert sum(map(plain, beats)) == len(beats) > 1000
    columns = Heartbeats.of_events(beats[::-1])
    assert columns.events() == beats
    assert Heartbeats.concat([columns.take(np.arange(500, len(beats))), columns.take(np.arange(500))]).events() == beats
    offline = [e for e in beats if e["data"]["OfflineLogDirs"]]
    assert offline and columns.offline.sum() == len(offline)


@pytest.mark.parametrize("seed", [3, 5])
@pytest.mark.parametrize("shard_count", [1, 2, 3, 4])
def test_heartbeats_as_columns_decide_as_dicts_and_as_the_plain_path(logs, seed, shard_count) -> None:
    events = logs[seed]
    rng = random.Random(seed * 100 + shard_count)
    cuts = sorted(rng.sample(range(1, len(events)), rng.randrange(0, 12)))
    outputs: list = []
    got = replayed(events, shard_count, cuts, as_columns=True, outputs=outputs)
    assert_same(got, replayed(events, shard_count, cuts, as_columns=False))
    assert_same(got, replayed(events, shard_count, cuts, as_columns=False, fast=False))
    # the columns were decided on: shard 0 answered most heartbeats from them
    answered = sum(len(o.offsets) for o in outputs if isinstance(o, Answers))
    assert answered > sum(1 for e in events if e["type"] == HEARTBEAT) // 2


@pytest.mark.parametrize("fast, columns", [(False, True), (True, False)])
def test_heartbeats_as_columns_go_back_to_dicts_off_the_fast_path(logs, fast, columns) -> None:
    events = logs[5]
    cuts = sorted(random.Random(7).sample(range(1, len(events)), 5))
    outputs: list = []
    got = replayed(events, 3, cuts, as_columns=True, fast=fast, columns=columns, outputs=outputs)
    assert not any(isinstance(o, Answers) for o in outputs)
    assert_same(got, replayed(events, 3, cuts, as_columns=False, fast=False))


@pytest.mark.parametrize("shard_count, cuts", [(2, 0), (3, 9)])
def test_heartbeats_as_columns_decide_as_the_plain_path_when_thresholds_fall_due(logs, shard_count, cuts) -> None:
    """Short anomaly thresholds fall due between heartbeats: the calm bound ends runs on the columns."""
    events = logs[5]
    at = sorted(random.Random(cuts).sample(range(1, len(events)), cuts))
    assert_same(replayed(events, shard_count, at, as_columns=True, config=SHORT_THRESHOLDS),
                replayed(events, shard_count, at, as_columns=False, fast=False, config=SHORT_THRESHOLDS))


def test_heartbeats_as_json_are_decided_in_their_place_among_the_columns(logs) -> None:
    """A heartbeat that crossed as JSON (a null field: none reaches the step, intake refuses them, but the routing
    sends such a row as JSON) is a dict among the columns: decided in its place."""
    events = logs[3]
    rng = random.Random(11)
    json_offsets = {e["offset"] for e in events if e["type"] == HEARTBEAT and rng.random() < 0.1}
    cuts = sorted(rng.sample(range(1, len(events)), 4))
    assert_same(replayed(events, 2, cuts, as_columns=True, json_offsets=json_offsets),
                replayed(events, 2, cuts, as_columns=False, fast=False))


@pytest.mark.parametrize("chunk", [997, 5000])
def test_the_soak_mix_with_heartbeats_as_columns_decides_as_the_plain_path(chunk) -> None:
    events = soak_log(15_000, seed=chunk)
    cuts = list(range(chunk, len(events), chunk))
    outputs: list = []
    got = replayed(events, 4, cuts, as_columns=True, config={}, outputs=outputs)
    assert_same(got, replayed(events, 4, cuts, as_columns=False, fast=False, config={}))
    beats = sum(1 for e in events if e["type"] == HEARTBEAT)
    assert sum(len(o.offsets) for o in outputs if isinstance(o, Answers)) > 0.9 * beats


def test_answers_in_arrow_are_the_rows_they_hold(logs) -> None:
    outputs: list = []
    replayed(logs[3], 1, [], as_columns=True, outputs=outputs)
    answers = [o for o in outputs if isinstance(o, Answers)]
    assert answers
    for block in answers:
        # stale answers, steady ones caught up or not
        assert {(t["data"]["ErrorCode"], t["data"].get("IsCaughtUp")) for t in block.templates} >= \
            {(0, True), (0, False)} and any(t["data"]["ErrorCode"] for t in block.templates)
        assert block.arrow().equals(answers_to_arrow([o.row for o in block.outputs()]))
