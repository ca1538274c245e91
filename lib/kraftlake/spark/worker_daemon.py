"""Spark's Python worker daemon, with the modules every kraftlake task imports imported once, before it forks.

Spark forks each Python worker (a ``applyInPandasWithState`` task's, a data source read's) from one daemon
process per executor, and a new worker then imports pandas, pyarrow and the controller's modules on its first
task: 1.5-2 s each on a loaded laptop, paid again by every worker at every start of the controller, since
workers live only as long as their JVM. Forked from a daemon that imported them already, a worker starts with
them (copy-on-write pages of the daemon's).

``session.get_spark`` names this module as ``spark.python.daemon.module`` in local mode only, where this
library is on the workers' path; on a cluster Spark's own daemon runs unless a deployment sets it.
"""

from __future__ import annotations

import importlib
import sys

TASK_WORKER = "pyspark.worker"  # the worker module of tasks (UDFs, data source reads)
PRELOADED = ("pandas", "pyarrow", "pyarrow.compute", "kraftlake.spark.controller_query", "kraftlake.spark.quorum_query",
             "kraftlake.storage.datasource")


def main() -> None:
    """Import ``PRELOADED``, then run Spark's daemon (which reads its worker module from ``sys.argv``). Spark
    starts a daemon per worker module: those planning or looking up data sources import none of them."""
    if sys.argv[1:2] in ([], [TASK_WORKER]):
        for name in PRELOADED:
            importlib.import_module(name)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
