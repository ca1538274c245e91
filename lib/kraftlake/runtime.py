"""What every job does first: read the config, get the warehouse (and a Spark session when needed)."""

from __future__ import annotations

from kraftlake.config import Config
from kraftlake.sparkutil import get_spark
from kraftlake.storage import Warehouse


def open_warehouse(config: Config, app_name: str, with_spark: bool = True) -> Warehouse:
    """The configured warehouse; with a Spark session unless the job only commits through delta-rs."""
    engine = config.get_str("kraftlake.engine")
    spark = get_spark(config, app_name) if with_spark or engine != "delta-rs" else None
    return Warehouse(config.get_path("kraftlake.warehouse"), engine=engine, spark=spark)


# In the spirit of `kafka-topics.sh --describe`: one line per partition, topics by name.
DESCRIBE = """
SELECT topic, topic_id, partition, leader, replicas, isr, adding_replicas, removing_replicas, elr,
       leader_epoch, partition_epoch,
       CASE leader_recovery_state WHEN 1 THEN 'RECOVERING' ELSE 'RECOVERED' END AS leader_recovery_state
FROM partitions ORDER BY topic, partition
"""


def kafka_configs(config: Config) -> dict[str, str]:
    """The Kafka settings of ``config`` (``broker.session.timeout.ms``, ...) that decisions read."""
    return {k: v for k, v in config.items() if not k.startswith(("kraftlake.", "spark."))}


def register_views(warehouse: Warehouse) -> list[str]:
    """Every table of the warehouse as a temporary view named after it, plus ``describe``."""
    names = warehouse.names()
    for name in names:
        warehouse.read_df(name).createOrReplaceTempView(name)
    if "partitions" in names:
        warehouse.spark.sql(DESCRIBE).createOrReplaceTempView("describe")
        names.append("describe")
    return names
