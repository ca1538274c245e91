"""Shared fixtures: one SparkSession per test process (starting Spark costs seconds, a test should cost
milliseconds) and the location of the real Kafka logs; the ``slow`` tests first."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
LIB = REPO_ROOT / "lib"
if str(LIB) not in sys.path:
    sys.path.insert(0, str(LIB))  # `pytest` straight from the venv works too, not only ./run-tests.sh


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: runs whole jobs or restarts them (half a minute or more)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first: dealt in turn to the test processes (run-tests.sh), they overlap each other
    and the quick ones fill the gaps, rather than one of them running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the file order otherwise


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # Python workers must run this interpreter, or they import another pyspark/pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")  # task retries, as the jobs' local default (spark/session.py)
        .appName("kraftlake-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``<repo>/../shared/fixtures/kafka-logs``: logs written by real Kafka clusters."""
    path = REPO_ROOT.parent / "shared" / "fixtures" / "kafka-logs"
    if not path.is_dir():
        pytest.fail(
            f"Kafka log fixtures not found at {path}: the tests expect the shared/ directory "
            "beside the repository (shared/fixtures/kafka-logs)."
        )
    return path


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """moto's S3 on 127.0.0.1, started once, for the tests that ask for it."""
    from servers import S3Server

    server = S3Server.start(tmp_path_factory.mktemp("s3"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A Spark standalone master and two one-core workers from the pinned pyspark, started once, for the
    tests that ask for it."""
    import pyspark
    from servers import SparkCluster

    cluster = SparkCluster(Path(pyspark.__file__).parent, tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
