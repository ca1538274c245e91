"""Alert lines from a state table's change feed: one line on stdout per change that matches, as it commits.

    ./spark-submit.sh jobs/alerts.py --warehouse W                       # each new anomaly, until stopped
    ./spark-submit.sh jobs/alerts.py --warehouse W --table brokers \\
        --where "_change_type = 'update_postimage' AND fenced" --once    # each broker fencing so far, then exit

A streaming query of its own beside the controller, over the change data feed the controller's commits
record (``--table``, default anomalies; ``--where``, default each new row): it polls no table, and its
checkpoint (default W/_checkpoints/alerts/<table>) makes a restart go on after the last micro-batch it
finished. Without --starting-version the first micro-batch is the table's rows now, as inserts.
"""

from __future__ import annotations

import argparse
import sys

from kraftlake.cli.config import JSON, add_common_arguments, add_format_argument, config_from_args
from kraftlake.cli.launcher import UserError
from kraftlake.cli.output import json_line
from kraftlake.cli.runtime import checkpoint_location, open_warehouse, warehouse_root
from kraftlake.metadata.tables import change_feed_tables
from kraftlake.spark.changes import alert_line, start_alerts
from kraftlake.spark.queries import supervise

NEW_ROWS = "_change_type = 'insert'"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default="anomalies", help="the state table whose changes to follow (anomalies)")
    parser.add_argument("--where", default=NEW_ROWS,
                        help="Spark SQL condition on the table's columns and _change_type, _commit_version, "
                             f"_commit_timestamp (default: {NEW_ROWS})")
    parser.add_argument("--starting-version", type=int,
                        help="first Delta version of the table whose changes to say (default: its rows now, then "
                             "every change)")
    parser.add_argument("--once", action="store_true", help="say what has been committed so far, then exit")
    parser.add_argument("--checkpoint", help="checkpoint location (default: kraftlake.checkpoints/alerts/<table>)")
    add_format_argument(parser, "the lines")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.table not in change_feed_tables():
        raise UserError(f"--table {args.table}: no state table of this release has that name (those record their "
                        f"changes: {', '.join(change_feed_tables())})")
    config = config_from_args(args)
    root = warehouse_root(config)
    warehouse = open_warehouse(config, "kraftlake-alerts", root=root)
    if not warehouse.exists(args.table):
        raise UserError(f"no {args.table} table in {warehouse.root}: the controller writes it (jobs/controller.py)")
    checkpoint = checkpoint_location(config, warehouse, f"alerts/{args.table}", args.checkpoint)

    def emit(row: dict) -> None:
        print(json_line(row) if args.format == JSON else alert_line(args.table, row), flush=True)

    query = start_alerts(warehouse, args.table, args.where, checkpoint, args.once,
                         config.get_int("kraftlake.controller.trigger.interval.ms", minimum=0), emit,
                         args.starting_version)
    try:
        finished = supervise({"alerts": query}, args.once, checkpoint)
    except RuntimeError as exc:
        print(f"alerts: {exc}", file=sys.stderr)
        return 1
    return 0 if finished else 130
