"""What every job does first: read the config, get the warehouse (and a Spark session when needed)."""

from __future__ import annotations

from kraftlake.metadata.config import Config
from kraftlake.metadata.progress import Meter, wanted
from kraftlake.spark.session import get_spark
from kraftlake.storage import Warehouse


def open_warehouse(config: Config, app_name: str, with_spark: bool = True) -> Warehouse:
    """The configured warehouse; with a Spark session unless the job only commits through delta-rs."""
    engine = config.get_str("kraftlake.engine")
    spark = get_spark(config, app_name) if with_spark or engine != "delta-rs" else None
    return Warehouse(config.get_path("kraftlake.warehouse"), engine=engine, spark=spark)


def kafka_configs(config: Config) -> dict[str, str]:
    """The Kafka settings of ``config`` (``broker.session.timeout.ms``, ...) that decisions read."""
    return {k: v for k, v in config.items() if not k.startswith(("kraftlake.", "spark."))}


def meter(config: Config, label: str, unit: str = "records", total: int | None = None) -> Meter:
    """A progress meter as ``kraftlake.progress`` and ``kraftlake.progress.interval.ms`` say."""
    return Meter(label, unit, total, every=config.get_int("kraftlake.progress.interval.ms", minimum=0) / 1000,
                 enabled=wanted(config.get_str("kraftlake.progress")))
