"""The metadata quorum, like ``kafka-metadata-quorum.sh describe`` (KIP-595), from the warehouse.

    ./spark-submit.sh jobs/quorum.py --warehouse W describe --status
    ./spark-submit.sh jobs/quorum.py --warehouse W describe --replication [--format json]

With quorum traffic in the log (``jobs/simulate.py --quorum``, or recorded VoteRequest / FetchRequest /
... events), the figures are those of the replica leading the highest epoch, as the quorum query
(``jobs/controller.py``) left them in ``quorum_state`` and ``quorum_replicas``. A real cluster's log has
no traffic: the leader, epoch and voters then come from its last LeaderChangeMessage / VotersRecord and
the high watermark from its end, and what a log cannot tell (the followers' lag) is printed as unknown.
Every epoch of the log, with its leader and voters, is in the ``quorum_history`` view (jobs/sql.py).
"""

from __future__ import annotations

import argparse
import json
import sys

import pyarrow.compute as pc

from kraftlake.cli.config import JSON, add_common_arguments, add_format_argument, config_from_args
from kraftlake.cli.launcher import FAILED
from kraftlake.cli.runtime import checkpoint_location, storage_options, warehouse_root
from kraftlake.raft.describe import LogView, format_replication, format_status, replication, status
from kraftlake.spark.queries import BackfillGuard
from kraftlake.storage import Warehouse


def log_view(warehouse: Warehouse) -> LogView:
    """Leader, epoch, voters and end of the log's own records (hand-written events have epoch -1)."""
    if not warehouse.exists("metadata_log"):
        return LogView(None, None, None, None)
    names = set(warehouse.table("metadata_log").schema().to_arrow().names)
    columns = ["offset", "leader_epoch", "type"] + [c for c in ("LeaderChangeMessage", "VotersRecord") if c in names]
    rows = warehouse.read_arrow("metadata_log", columns, pc.field("leader_epoch") >= 0)
    if rows.num_rows == 0:
        return LogView(None, None, None, None)
    end = pc.max(rows["offset"]).as_py() + 1
    epoch = pc.max(rows["leader_epoch"]).as_py()
    control = rows.filter(pc.field("type").isin(["LeaderChangeMessage", "VotersRecord"])).sort_by("offset").to_pylist()
    leader, voters, from_voters_record = None, None, False
    for row in control:  # a VotersRecord (kraft.version 1) rules the voters; else each LeaderChangeMessage
        if row["type"] == "VotersRecord":
            voters, from_voters_record = sorted(v["VoterId"] for v in row["VotersRecord"]["Voters"]), True
            continue
        change = row["LeaderChangeMessage"]
        if not from_voters_record:
            voters = sorted(v["VoterId"] for v in change["Voters"])
        if row["leader_epoch"] == epoch:
            leader = change["LeaderId"]
    return LogView(leader, epoch, end, voters)


def read_rows(warehouse: Warehouse, name: str) -> list[dict]:
    return warehouse.read_arrow(name).to_pylist() if warehouse.exists(name) else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="the quorum's status or its replicas' progress")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="leader, epoch, high watermark, lag, voters")
    what.add_argument("--replication", action="store_true", help="each replica's log end offset and lag")
    add_format_argument(describe, "the status or the replicas")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    # the tables are read through delta-rs: no Spark session (and no JVM start) for a one-screen answer
    warehouse = Warehouse(warehouse_root(config, writes=False, needs_log=True), engine="delta-rs",
                          storage_options=storage_options(config))
    states, replicas, log = read_rows(warehouse, "quorum_state"), read_rows(warehouse, "quorum_replicas"), \
        log_view(warehouse)
    stale = BackfillGuard(warehouse, checkpoint_location(config, warehouse, "controller")).stale() \
        if states or replicas else None
    if stale is not None:  # the quorum query's tables missed rows an ingest added below what it had read
        print(f"quorum: {stale}", file=sys.stderr)
        return FAILED
    if args.status:
        fields = status(states, replicas, log)
        print(json.dumps(dict(fields)) if args.format == JSON else format_status(fields))
    else:
        rows = replication(states, replicas, log)
        print(json.dumps(rows) if args.format == JSON else format_replication(rows))
    return 0

