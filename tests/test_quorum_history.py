"""quorum_history: the metadata quorum's epochs as the log itself records them (KIP-595)."""

from __future__ import annotations

import struct
from collections import OrderedDict

from kraftlake.storage.ingest import ingest_source
from kraftlake.spark.views import register_views
from kraftlake.storage import Warehouse

RESTARTS = "single-broker-restarts/__cluster_metadata-0"


def epochs_from_batch_headers(segment: bytes) -> "OrderedDict[int, list[int]]":
    """epoch → [first offset, records], read straight off the batch headers (independent of the codec)."""
    out: OrderedDict[int, list[int]] = OrderedDict()
    pos = 0
    while pos + 61 <= len(segment):
        base, length, epoch = struct.unpack_from(">qii", segment, pos)
        count = struct.unpack_from(">i", segment, pos + 57)[0]
        entry = out.setdefault(epoch, [base, 0])
        entry[1] += count
        pos += 12 + length
    return out


def test_six_epochs_of_single_broker_restarts_including_one_that_wrote_nothing(spark, fixtures_dir, tmp_path):
    warehouse = Warehouse(str(tmp_path / "w"), spark=spark)
    ingest_source(warehouse, str(fixtures_dir / RESTARTS))
    register_views(warehouse)
    rows = [r.asDict() for r in spark.sql("SELECT * FROM quorum_history ORDER BY epoch").collect()]
    headers = epochs_from_batch_headers((fixtures_dir / RESTARTS / "00000000000000000000.log").read_bytes())
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5, 6]  # the issue: "single-broker-restarts shows six epochs"
    assert 4 not in headers  # no batch of epoch 4: its election left no record
    for row in rows:
        if row["epoch"] == 4:
            assert (row["leader"], row["records"], row["first_offset"]) == (None, 0, None)
            continue
        assert [row["first_offset"], row["records"]] == headers[row["epoch"]]
        assert (row["leader"], row["voters"], row["granting_voters"]) == (1, [1], [1])  # one-node quorum
    # durations tile the log: each epoch lasts until the next one that wrote something
    timed = [r for r in rows if r["first_timestamp"] is not None]
    for this, following in zip(timed, timed[1:]):
        assert this["duration_ms"] == (following["first_timestamp"] - this["first_timestamp"]).total_seconds() * 1000
