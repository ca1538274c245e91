"""``jobs/sql.py --serve``: the warehouse for SQL clients and notebooks, over JDBC/ODBC, until stopped.

One warm SparkSession with every table and view registered, shared by every connection; tables that
appear or change are registered again every kraftlake.sql.server.refresh.interval.ms, so clients see new
commits. It listens on 127.0.0.1 unless --bind says otherwise: with HiveServer2's default authentication
(NONE) any client that reaches the port may query everything (docs/jobs/sql.md says how to require a
login and TLS). SIGINT or SIGTERM stops it: the port closes, then Spark.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys
import tempfile
import threading
import time

from kraftlake.cli.config import config_from_args
from kraftlake.cli.runtime import open_warehouse, warehouse_root
from kraftlake.metadata.config import Config
from kraftlake.spark.catalog import Catalog
from kraftlake.spark.session import CATALOG_WAREHOUSE
from kraftlake.spark.thrift import SINGLE_SESSION, beeline_path, start_thrift_server

HIVE_SERVER2 = "hive.server2."
LISTEN_TIMEOUT_S = 60.0


def serve(args: argparse.Namespace) -> int:
    # The server's Hive side keeps a scratch catalog and warehouse directory: not in the current directory
    with tempfile.TemporaryDirectory(prefix="kraftlake-sql-server-") as scratch:
        config = config_from_args(args).with_overrides(
            {SINGLE_SESSION: "true", CATALOG_WAREHOUSE: os.path.join(scratch, "spark-warehouse")}, "--serve")
        return _serve(args, config, scratch)


def _serve(args: argparse.Namespace, config: Config, scratch: str) -> int:
    root = warehouse_root(config, "sql")
    taken = _taken(args.bind, args.port)
    if taken:
        print(f"sql: cannot listen on {args.bind}:{args.port}: {taken}", file=sys.stderr)
        return 1
    warehouse = open_warehouse(config, "kraftlake-sql-server", root=root)
    spark = warehouse.spark
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # after Spark started: pyspark sets its own SIGINT handler
        signal.signal(sig, lambda *_: stopping.set())
    catalog = Catalog(warehouse)
    names = catalog.register_all()
    try:
        server = start_thrift_server(spark, args.bind, args.port, config.subset(HIVE_SERVER2),
                                     os.path.join(scratch, "derby.log"))
    except ValueError as exc:
        print(f"sql: {exc}: leave it to --serve (no --conf {SINGLE_SESSION}=false)", file=sys.stderr)
        spark.stop()
        return 2
    if not _listening(args.bind, args.port, stopping):
        print(f"sql: the server is not listening on {args.bind}:{args.port} (the log above says why)",
              file=sys.stderr)
        server.stop()
        spark.stop()
        return 1
    catalog.watch(config.get_int("kraftlake.sql.server.refresh.interval.ms", minimum=1) / 1000,
                  lambda exc: print(f"sql: registering the tables again failed: {exc}", file=sys.stderr))
    url = f"jdbc:hive2://{_client_host(args.bind)}:{args.port}/"
    print(f"sql: serving {root} ({len(names)} tables and views) on {args.bind}:{args.port} until SIGINT/SIGTERM\n"
          f"sql: JDBC URL {url}\n"
          f"sql: connect: {beeline_path()} -u {url}", file=sys.stderr, flush=True)
    if not _is_loopback(args.bind):
        print(f"sql: {args.bind} is not a loopback address: whoever reaches it can query the warehouse, "
              f"with no login unless {HIVE_SERVER2}authentication says otherwise (docs/jobs/sql.md)",
              file=sys.stderr, flush=True)
    while not stopping.wait(1.0):
        pass
    print("sql: stopping", file=sys.stderr, flush=True)
    catalog.close()
    server.stop()
    spark.stop()
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _client_host(bind: str) -> str:
    """Where a client on this machine reaches a server bound to ``bind``."""
    return "127.0.0.1" if bind in ("0.0.0.0", "") else "[::1]" if bind == "::" else bind


def _taken(bind: str, port: int) -> str | None:
    """Why the server could not listen on ``bind:port`` (checked before Spark starts), if it could not."""
    try:
        socket.create_server((bind, port)).close()
    except OSError as exc:  # create_server adds "(while attempting to bind on address ...)": said already
        return (exc.strerror or str(exc)).split(" (while attempting")[0]
    return None


def _listening(bind: str, port: int, stopping: threading.Event) -> bool:
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while time.monotonic() < deadline and not stopping.is_set():
        try:
            socket.create_connection((_client_host(bind).strip("[]"), port), timeout=1.0).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False
