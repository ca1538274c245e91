"""One way for every job to get its SparkSession, whether started by spark-submit or plain python.

spark-submit options win: a ``spark.*`` key from the kraftlake config is applied only when the
launcher did not set it, so ``--conf spark.sql.shuffle.partitions=200`` on a cluster beats the
laptop-sized default in conf/kraftlake.properties. pyspark is imported inside the function so that
importing this module stays cheap for Spark-free code paths.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING

from kraftlake.metadata.config import Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["get_spark"]

LOOPBACK = "127.0.0.1"
# Local mode gives a task one attempt unless the master says otherwise (local[N,F]); a cluster retries it
# spark.task.maxFailures (4) times. A transient task failure (seen: two queries' first tasks failing to
# deserialise together) must not end a streaming job on a laptop when it would not on a cluster.
LOCAL_MASTER = "local[*,4]"
LOCAL_ADDRESSES = ("spark.driver.bindAddress", "spark.driver.host")
# Spark makes its catalog's warehouse directory (``spark-warehouse``) in the job's current directory when a
# session starts, though no kraftlake table lives there (the tables are Delta paths): left to that default, every
# job would leave an empty directory wherever an operator ran it.
CATALOG_WAREHOUSE = "spark.sql.warehouse.dir"


def catalog_warehouse() -> str:
    """Where a session's catalog directory goes unless the config or spark-submit says: one per user under the
    system's temporary directory, never the current one."""
    return os.path.join(tempfile.gettempdir(), f"kraftlake-{os.getuid()}", "spark-warehouse")


def get_spark(config: Config, app_name: str) -> SparkSession:
    """The job's session: an already active one as it is, else a new one built from ``config``.

    An active session belongs to whoever made it (the test suite, a notebook), so it is not
    reconfigured. Without any master (``python jobs/x.py``) the job runs in ``LOCAL_MASTER``.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers must import the same pyspark/pyarrow/deltalake as this driver. spark-submit.sh
    # sets this; a plain `python jobs/x.py` would otherwise start workers with the system python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # ... and kraftlake from where this driver has it: a plain `python jobs/x.py` puts lib/ on its own
    # sys.path only, and the workers inherit the environment of the JVM started below.
    library = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if library not in paths and os.path.isdir(library):
        os.environ["PYTHONPATH"] = os.pathsep.join([library, *paths])

    launched_here = "PYSPARK_GATEWAY_PORT" not in os.environ and "--master" not in os.environ.get(
        "PYSPARK_SUBMIT_ARGS", "")
    if launched_here:
        # plain `python jobs/x.py`: this process starts the JVM, in local mode; its web UI (when enabled)
        # binds SPARK_LOCAL_IP, else every interface
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    # The JVM must be up before SparkConf() can see what spark-submit put in its system properties.
    SparkContext._ensure_initialized()
    submitted = SparkConf()

    builder = SparkSession.builder
    # spark-submit names the app after the job file (plain python: "pyspark-shell") unless --name
    # was given: keep a real --name, replace the placeholders.
    submitted_name = submitted.get("spark.app.name", None)
    if submitted_name in (None, "pyspark-shell", os.path.basename(sys.argv[0] or "")):
        builder = builder.appName(app_name)
    settings = dict(config.subset("spark."))
    if launched_here or not submitted.contains("spark.master"):
        # The JVM this process launched holds its launcher's default master (local[*]: one attempt per
        # task), which nobody chose: the config's (--override spark.master=...) or LOCAL_MASTER wins.
        master = settings.pop("spark.master", LOCAL_MASTER)
        builder = builder.master(master)
    else:
        master = submitted.get("spark.master")
    if master.startswith("local"):
        # Local mode talks to nobody else: its driver (RPC and block manager, unauthenticated by default)
        # listens on loopback, not on every interface, unless the user sets these.
        for key in LOCAL_ADDRESSES:
            settings.setdefault(key, LOOPBACK)
    settings.setdefault(CATALOG_WAREHOUSE, catalog_warehouse())
    for key, value in sorted(settings.items()):
        if not submitted.contains(key):
            builder = builder.config(key, value)

    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet_when_the_jvm_is_gone(spark.sparkContext)
    return spark


def _quiet_when_the_jvm_is_gone(context: object) -> None:
    """pyspark's accumulator server (a socket server in a thread of the driver) prints a traceback when the
    JVM's connection to it ends mid-message, which is what a JVM killed or crashed does; the job then says
    in one line that Spark's JVM is gone (``cli.launcher``), so that error alone is not printed."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return
    default = server.handle_error

    def handle_error(request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            default(request, client_address)

    server.handle_error = handle_error
