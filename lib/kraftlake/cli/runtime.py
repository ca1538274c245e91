"""What every job does first: read the config, get the warehouse (and a Spark session when needed)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from kraftlake.cli.launcher import UserError, error_line, is_storage_error
from kraftlake.metadata.config import ANOMALY_THRESHOLDS, DECODE_LIMITS, STORAGE_PREFIX, Config
from kraftlake.metadata.progress import Meter, wanted
from kraftlake.spark.session import get_spark
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables, FormatError, is_local

# Hadoop's filesystem for S3; Spark writes checkpoints through Hadoop, so s3a:// is where they go on S3
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def storage_options(config: Config) -> dict[str, str]:
    """``kraftlake.storage.<key>`` settings as delta-rs' storage options ``<key>`` (empty values left out)."""
    return {k[len(STORAGE_PREFIX):]: v for k, v in config.subset(STORAGE_PREFIX).items() if v.strip()}


def warehouse_root(config: Config, writes: bool = True, needs_log: bool = False) -> str:
    """The configured warehouse, once it can be used; else ``UserError`` saying what and why, before the job
    starts Spark or writes: a local path must lead to a directory the job may write in (``writes``), an
    object store must answer (bucket, credentials, endpoint), the tables must be in a format this release
    reads (else the migration to make, ``DeltaRsTables.check_format``), and ``metadata_log`` must be there
    for a job that works on it (``needs_log``)."""
    root = config.get_path("kraftlake.warehouse")
    tables = DeltaRsTables(root, storage_options(config))
    if is_local(tables.root):
        _check_local(tables.root, writes)
    try:
        tables.check_format()
        has_log = tables.exists("metadata_log")  # the store itself answers (a listing finds no missing bucket)
    except FormatError as exc:
        raise UserError(str(exc)) from None
    except Exception as exc:
        if not is_storage_error(exc):
            raise
        raise UserError(f"cannot use the warehouse {root}: {error_line(exc)}") from None
    if needs_log and not has_log:
        raise UserError(f"no metadata_log in {tables.root}: ingest a log first (jobs/ingest.py)")
    return root


def _check_local(root: str, writes: bool) -> None:
    existing = Path(root)
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"cannot use the warehouse {root}: {existing} is not a directory")
    if not writes:
        return
    try:  # a job that writes would create it anyway; here the system says why it cannot
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write the warehouse {root}: {exc.strerror}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        why = "Read-only file system" if os.statvfs(root).f_flag & os.ST_RDONLY else "Permission denied"
        raise UserError(f"cannot write the warehouse {root}: {why}")


def open_warehouse(config: Config, app_name: str, with_spark: bool = True, root: str | None = None) -> Warehouse:
    """The configured warehouse (``root``: one ``warehouse_root`` checked already); with a Spark session
    unless the job only commits through delta-rs."""
    root = root or warehouse_root(config)
    engine = config.get_str("kraftlake.engine")
    spark = get_spark(config, app_name) if with_spark or engine != "delta-rs" else None
    return Warehouse(root, engine=engine, spark=spark, storage_options=storage_options(config))


def open_tables(config: Config, writes: bool = True) -> DeltaRsTables:
    """The configured warehouse, checked by ``warehouse_root``, for a job that needs no Spark: everything it
    reads and writes goes through delta-rs (``kraftlake.cli.launcher.NO_SPARK``)."""
    return DeltaRsTables(warehouse_root(config, writes), storage_options(config))


def checkpoint_location(config: Config, warehouse: Warehouse, query: str, given: str | None = None) -> str:
    """Where query ``query`` keeps its checkpoint: ``given`` (``--checkpoint``), else under
    ``kraftlake.checkpoints``, else the warehouse's ``_checkpoints`` (an ``s3://`` warehouse's as ``s3a://``:
    Spark reaches S3 only through Hadoop's S3A).

    An ``s3a://`` location is refused up front when the session cannot load S3A (the hadoop-aws jar is
    not in pyspark): Spark would otherwise fail at the first micro-batch with a bare
    ClassNotFoundException."""
    root = config.get_str("kraftlake.checkpoints")
    root = config.get_path("kraftlake.checkpoints") if root else f"{warehouse.root}/_checkpoints"
    location = given or f"{root.rstrip('/')}/{query}"
    if urlparse(location).scheme == "s3":
        location = "s3a" + location[len("s3"):]
    if urlparse(location).scheme == "s3a" and warehouse.spark is not None:
        from kraftlake.storage.native import class_loadable  # imports pyspark: only where a session is
    if urlparse(location).scheme == "s3a" and warehouse.spark is not None \
            and not class_loadable(warehouse.spark, S3A_CLASS):
        raise RuntimeError(
            f"the checkpoint {location} needs Hadoop's S3A filesystem ({S3A_CLASS}, in the hadoop-aws jar "
            "matching Spark's Hadoop, with the AWS SDK bundle), which this Spark does not have: add it with "
            "--jars or --packages org.apache.hadoop:hadoop-aws:<Hadoop version>, or set kraftlake.checkpoints "
            "to a location Hadoop reaches without it (hdfs://..., a shared mount). See docs/deployment.md.")
    return location


def kafka_configs(config: Config) -> dict[str, str]:
    """The Kafka settings of ``config`` (``broker.session.timeout.ms``, ...) that decisions read."""
    return {k: v for k, v in config.items() if not k.startswith(("kraftlake.", "spark."))}


QUORUM_PROTOCOL = "kraftlake.quorum.protocol"


def replay_configs(config: Config) -> dict[str, str]:
    """What a replay on Spark's executors reads of ``config``: the Kafka settings, the decode limits
    (``kraftlake.decode.*``) within which the quorum's replicas decode the record batches a FetchResponse
    event carries (the controller's shards decode nothing), the anomaly rules' thresholds, and the quorum's
    protocol for replicas whose traffic has no ReplicaStartup to name it."""
    return {**kafka_configs(config),
            **{k: config[k] for k in (*DECODE_LIMITS, *ANOMALY_THRESHOLDS, QUORUM_PROTOCOL) if k in config}}


def meter(config: Config, label: str, unit: str = "records", total: int | None = None) -> Meter:
    """A progress meter as ``kraftlake.progress`` and ``kraftlake.progress.interval.ms`` say."""
    return Meter(label, unit, total, every=config.get_int("kraftlake.progress.interval.ms", minimum=0) / 1000,
                 enabled=wanted(config.get_str("kraftlake.progress")))
