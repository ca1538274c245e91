"""What every job does first: read the config, get the warehouse (and a Spark session when needed)."""

from __future__ import annotations

from kraftlake.metadata.config import Config
from kraftlake.spark.session import get_spark
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables, FormatError


def warehouse_root(config: Config, app_name: str) -> str:
    """The configured warehouse, once its tables are in a format this release reads; else the job exits
    with the migration to make (``DeltaRsTables.check_format``), before it starts Spark or writes."""
    root = config.get_path("kraftlake.warehouse")
    try:
        DeltaRsTables(root).check_format()
    except FormatError as exc:
        raise SystemExit(f"{app_name}: {exc}") from None
    return root


def open_warehouse(config: Config, app_name: str, with_spark: bool = True, root: str | None = None) -> Warehouse:
    """The configured warehouse (``root``: one ``warehouse_root`` checked already); with a Spark session
    unless the job only commits through delta-rs."""
    root = root or warehouse_root(config, app_name)
    engine = config.get_str("kraftlake.engine")
    spark = get_spark(config, app_name) if with_spark or engine != "delta-rs" else None
    return Warehouse(root, engine=engine, spark=spark)


def kafka_configs(config: Config) -> dict[str, str]:
    """The Kafka settings of ``config`` (``broker.session.timeout.ms``, ...) that decisions read."""
    return {k: v for k, v in config.items() if not k.startswith(("kraftlake.", "spark."))}
