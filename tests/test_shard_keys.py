"""The controller shards' group keys: each shard in a shuffle partition of its own, and a checkpoint keeping
the keys its state is stored under."""

from __future__ import annotations

import json

import pytest

from kraftlake.spark.queries import group_keys, murmur3_int, spread_keys


def test_murmur3_is_sparks_hash_of_an_int(spark):
    from pyspark.sql import functions as F

    values = [0, 1, 2, 3, 7, -1, -5, 123_456, 2**31 - 1, -(2**31)]
    frame = spark.createDataFrame([(v,) for v in values], "v int")
    assert [r[0] for r in frame.select(F.hash("v")).collect()] == [murmur3_int(v) for v in values]
    # where a groupBy puts them: the keys 0..3 crowd into two partitions of four
    placed = [r[0] for r in frame.select(F.pmod(F.hash("v"), F.lit(4))).collect()]
    assert placed[:4] == [murmur3_int(v) % 4 for v in range(4)] and len(set(placed[:4])) < 4


@pytest.mark.parametrize("shards, partitions", [(4, 4), (2, 4), (8, 4), (3, 2), (5, 200)])
def test_spread_keys_give_each_partition_its_share(shards, partitions):
    keys = spread_keys(shards, partitions)
    assert len(set(keys)) == shards
    assert [murmur3_int(k) % partitions for k in keys] == [s % partitions for s in range(shards)]


def test_a_checkpoint_keeps_its_keys(tmp_path):
    fresh = tmp_path / "fresh"
    keys = group_keys(str(fresh), 4, 4)
    assert keys == spread_keys(4, 4) and json.loads((fresh / "kraftlake-keys.json").read_text()) == {"keys": keys}
    assert group_keys(str(fresh), 4, 200) == keys  # the partitions a restart is configured with do not matter
    with pytest.raises(RuntimeError, match="written with 4 shards, not 3"):
        group_keys(str(fresh), 3, 4)
    older = tmp_path / "older"
    (older / "offsets").mkdir(parents=True)  # a checkpoint of a release before the keys file
    assert group_keys(str(older), 4, 4) == [0, 1, 2, 3]
