"""Spark's Thrift JDBC/ODBC server (HiveServer2's protocol; its jars ship with pyspark) over a session.

Started inside the session that has the warehouse's tables as temporary views, with every connection
sharing that session (``spark.sql.hive.thriftServer.singleSession``, which must be set before the session
starts): otherwise each JDBC client would get a session of its own, without the views. Its settings are
HiveServer2's ``hive.server2.*`` (port, bind address, authentication, TLS), set on the session.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SINGLE_SESSION", "ThriftServer", "beeline_path", "driver_on_loopback", "start_thrift_server"]

SINGLE_SESSION = "spark.sql.hive.thriftServer.singleSession"
PORT, BIND_HOST = "hive.server2.thrift.port", "hive.server2.thrift.bind.host"
DERBY_LOG = "derby.stream.error.file"


class ThriftServer:
    """A running server; ``stop`` closes its port and its client sessions (the SparkSession stays)."""

    def __init__(self, handle: Any, host: str, port: int) -> None:
        self._handle = handle
        self.host, self.port = host, port

    def stop(self) -> None:
        self._handle.stop()


def driver_on_loopback(configured_master: str | None) -> dict[str, str]:
    """Settings that keep a local session's own ports (the driver's RPC and block manager, which Spark
    binds to the machine's address and does not authenticate by default) on 127.0.0.1, for a server
    meant for this machine only. None for a cluster master, whose executors must reach the driver.
    ``configured_master``: spark.master from the kraftlake config; spark-submit's --master wins, as in
    ``kraftlake.spark.session``."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the JVM, to read what spark-submit was given
    master = SparkConf().get("spark.master", None) or configured_master or "local"
    return {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"} if master.startswith("local") \
        else {}


def start_thrift_server(spark: SparkSession, host: str, port: int, settings: Mapping[str, str],
                        derby_log: str) -> ThriftServer:
    """The server listening on ``host:port``, with ``settings`` (``hive.server2.*``) applied first; the
    Derby database of its scratch Hive catalog logs to ``derby_log`` (else derby.log in the current
    directory).

    Raises ValueError when the session does not share itself with the server's connections."""
    if (spark.conf.get(SINGLE_SESSION, "false") or "").lower() != "true":
        raise ValueError(f"the session was started without {SINGLE_SESSION}=true: the server's clients would "
                         "not see the warehouse's views")
    for key, value in {**settings, BIND_HOST: host, PORT: str(port)}.items():
        spark.conf.set(key, value)
    jvm = spark.sparkContext._jvm
    if jvm.java.lang.System.getProperty(DERBY_LOG) is None:
        jvm.java.lang.System.setProperty(DERBY_LOG, derby_log)
    server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
    return ThriftServer(server.startWithContext(spark._jsparkSession.sqlContext()), host, port)


def beeline_path() -> str:
    """pyspark's own command-line JDBC client, for the server's clients on this machine."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "beeline")
