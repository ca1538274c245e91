"""Run Spark SQL over the warehouse: every Delta table in it is registered under its own name.

    ./spark-submit.sh jobs/sql.py --warehouse W "SELECT type, count(*) FROM metadata_log GROUP BY type"

Output is an aligned table (up to --max-rows rows), or one JSON object per line with --format json
(streamed from the executors, no row limit).
"""

from __future__ import annotations

import argparse
import sys

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.output import json_line, print_table
from kraftlake.cli.runtime import open_warehouse
from kraftlake.spark.views import QueryError, query_errors, register_views


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("query", help="a Spark SQL query")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--max-rows", type=int, default=1000, help="rows shown in table format")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    warehouse = open_warehouse(config, "kraftlake-sql", with_spark=True)
    names = register_views(warehouse)
    try:
        with query_errors():
            frame = warehouse.spark.sql(args.query)
            if args.format == "json":
                for row in frame.toLocalIterator():
                    print(json_line(row.asDict(recursive=True)))
                return 0
            rows = frame.limit(args.max_rows + 1).collect()
    except QueryError as exc:
        print(f"sql: {exc}", file=sys.stderr)
        print(f"sql: tables in {warehouse.root}: {', '.join(names) or 'none'}", file=sys.stderr)
        return 1
    shown = print_table(frame.columns, [tuple(r) for r in rows[:args.max_rows]])
    more = " (more rows not shown: raise --max-rows or use --format json)" if len(rows) > args.max_rows else ""
    print(f"{shown} row(s){more}")
    return 0

