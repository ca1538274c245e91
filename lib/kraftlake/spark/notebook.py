"""The warehouse in a notebook: one warm SparkSession with every table and view by its name.

    from kraftlake.spark.notebook import attach
    catalog = attach("warehouse")                      # or attach(path, spark) with a session of your own
    spark.sql("SELECT * FROM describe WHERE leader = -1").show()

Each cell's ``spark.sql`` reads the tables as registered: a thread registers again, every
``refresh_every_s`` seconds, the tables that changed or appeared (``catalog.close()`` stops it), and
``catalog.sql(...)`` refreshes first and says which job writes a table the warehouse does not have yet.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from kraftlake.metadata.config import load_config
from kraftlake.spark.catalog import Catalog
from kraftlake.spark.session import get_spark
from kraftlake.storage import AUTO, Warehouse
from kraftlake.storage.deltars import StorageOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["attach"]


def attach(warehouse: str, spark: SparkSession | None = None, storage_options: StorageOptions = None,
           engine: str = AUTO, refresh_every_s: float | None = 5.0) -> Catalog:
    """Register every table of ``warehouse`` (a directory or URI; ``storage_options``: delta-rs' for an
    object store) and every view in ``spark`` (default: the active session, else one made from
    conf/kraftlake.properties), kept fresh every ``refresh_every_s`` seconds (None: only by
    ``catalog.refresh()`` and ``catalog.sql``). Raises ``FormatError`` for a warehouse this release
    cannot read."""
    tables = Warehouse(warehouse, engine=engine, spark=spark or get_spark(load_config(), "kraftlake-notebook"),
                       storage_options=storage_options)
    tables.check_format()
    catalog = Catalog(tables)
    catalog.register_all()
    if refresh_every_s is not None:
        catalog.watch(refresh_every_s, lambda exc: warnings.warn(f"kraftlake: registering {warehouse}'s tables "
                                                                 f"again failed: {exc}", stacklevel=1))
    return catalog
