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

__all__ = ["SINGLE_SESSION", "ThriftServer", "beeline_path", "start_thrift_server"]

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
