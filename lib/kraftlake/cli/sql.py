"""Spark SQL over the warehouse: every table by its name, plus the views describe, reassignments, quorum_history.

    ./spark-submit.sh jobs/sql.py --warehouse W "SELECT type, count(*) FROM metadata_log GROUP BY type"
    ./spark-submit.sh jobs/sql.py --warehouse W                  # a shell (\\help), or stdin's statements
    ./spark-submit.sh jobs/sql.py --warehouse W -f questions.sql
    ./spark-submit.sh jobs/sql.py --warehouse W --serve          # a JDBC/ODBC server on 127.0.0.1:10000

QUERY, a file and stdin may hold several statements, each ending in `;`; the first that fails stops the
run (exit 1), naming its line. One session answers them all, its tables registered once. Output is an
aligned table per statement (up to --max-rows rows), or one JSON object per row and line with
--format json (streamed, no row limit; nothing else on stdout).
"""

from __future__ import annotations

import argparse
import os
import sys

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.runtime import open_warehouse, warehouse_root
from kraftlake.cli.sql_server import serve
from kraftlake.cli.sql_session import FORMATS, Session
from kraftlake.cli.sql_shell import Shell
from kraftlake.cli.statements import split_statements
from kraftlake.spark.catalog import Catalog

TABLE = "table"  # the name text had before the jobs agreed on text/json; still accepted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", nargs="?", help="Spark SQL statements, each ending in `;` (the last may omit it)")
    parser.add_argument("-f", "--file", metavar="FILE", help="run the statements of FILE")
    parser.add_argument("--format", choices=(*FORMATS, TABLE), default="text",
                        help="text: aligned tables; json: one JSON object per row and line (table: text)")
    parser.add_argument("--max-rows", type=int, default=1000, help="rows shown per statement in text format")
    parser.add_argument("--timing", action="store_true",
                        help="say how long each statement took (always on in the shell)")
    parser.add_argument("--serve", action="store_true",
                        help="run Spark's Thrift JDBC/ODBC server over the warehouse until SIGINT/SIGTERM")
    parser.add_argument("--port", type=int, default=10000, help="--serve: the port (hive.server2.thrift.port)")
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                        help="--serve: the address to listen on; anything but loopback exposes the warehouse")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if sum(map(bool, (args.query is not None, args.file, args.serve))) > 1:
        parser.error("give one of QUERY, -f FILE and --serve")
    if args.serve:
        if not 0 < args.port < 65536:
            parser.error(f"--port {args.port}: a port is 1 to 65535")
        return serve(args)
    config = config_from_args(args)
    root = warehouse_root(config, "sql")
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            print(f"sql: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 2
    interactive = args.query is None and not args.file and sys.stdin.isatty()
    if not sys.stderr.isatty():
        _no_progress_bar()
    session = Session(Catalog(open_warehouse(config, "kraftlake-sql", root=root)),
                      "text" if args.format == TABLE else args.format, args.max_rows, args.timing or interactive)
    if interactive:
        return Shell(session, config).run()
    if args.query is not None:
        split = split_statements(args.query)
        several = len(split.statements) + (split.rest is not None) > 1
        return session.run_all(args.query.splitlines(keepends=True), "line " if several else None)
    if args.file:
        return session.run_all(text.splitlines(keepends=True), f"{args.file}:")
    return session.run_all(sys.stdin, "stdin:")


def _no_progress_bar() -> None:
    """pyspark starts the JVM of a Python-first driver (spark-submit.sh's driver-first jobs, plain python)
    as a shell's, and a shell gets Spark's progress bar on stderr: fine on a terminal, noise in a log. An
    explicit --conf spark.ui.showConsoleProgress comes after this one and wins."""
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--conf spark.ui.showConsoleProgress=false {submit}"
