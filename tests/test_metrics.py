"""Metrics to scrape from the continuous controller: Prometheus' text format over HTTP on 127.0.0.1.

The values must be what the committed tables (and, for the real fixture, its independent image) say; the
scrape goes over a real socket while the controller runs, and the server is gone once it stops.
"""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from servers import wait_for
from kraftlake.cli.controller import main as controller_main
from kraftlake.cli.launcher import USAGE, run_job
from kraftlake.report.metrics import Gauge, cluster_gauges, exposition
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import DeltaRsTables
from kraftlake.storage.ingest import ingest_source

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-logs" / "single-broker-shutdown"


def parse(text: str) -> dict[str, float]:
    """``name{labels}`` -> value, every sample line; each family announced by HELP and TYPE first."""
    found, announced = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            announced.add(line.split()[2])
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            assert key.split("{")[0] in announced, line
            found[key] = float(value)
    return found


def test_the_text_format() -> None:
    text = exposition([Gauge("a_count", "Things", 3), Gauge("b", "By kind", 1, (("kind", 'x"y'),)),
                       Gauge("b", "By kind", 0.5, (("kind", "z"),))])
    assert text == ('# HELP a_count Things\n# TYPE a_count gauge\na_count 3\n'
                    '# HELP b By kind\n# TYPE b gauge\nb{kind="x\\"y"} 1\nb{kind="z"} 0.5\n')


def test_open_anomalies_by_kind_once_the_table_exists(tmp_path: Path) -> None:
    tables = DeltaRsTables(str(tmp_path / "w"))
    assert not [g for g in cluster_gauges(tables, {}) if g.name.startswith("kraftlake_anomalies")]
    write_deltalake(tables.path("anomalies"), pa.table({
        "kind": ["offline_partition", "offline_partition", "broker_flapping", "under_min_isr"],
        "end_offset": pa.array([None, 40, 12, None], pa.int64())}))
    found = {dict(g.labels)["kind"]: g.value for g in cluster_gauges(tables, {}) if g.name == "kraftlake_anomalies_open"}
    assert found == {"offline_partition": 1, "broker_flapping": 0, "under_min_isr": 1}


def scrape(url: str) -> tuple[str, dict[str, float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.headers["Content-Type"], parse(response.read().decode("utf-8"))


def test_a_running_controller_serves_its_gauges_on_loopback(spark, tmp_path: Path) -> None:  # noqa: ANN001
    from kraftlake.spark import controller_query as streaming

    oracle = json.loads((FIXTURE / "expected-image.json").read_text())
    warehouse = Warehouse(str(tmp_path / "w"), spark=spark)
    ingest_source(warehouse, str(FIXTURE / "__cluster_metadata-0"))
    end = warehouse.max_value("metadata_log", "offset")
    settings = streaming.ControllerSettings(shards=2, checkpoint=str(tmp_path / "checkpoint"), once=False,
                                            trigger_interval_ms=200, kafka_config={"min.insync.replicas": "2"},
                                            metrics_address=("127.0.0.1", 0))
    out, failure = io.StringIO(), []

    def running() -> None:
        try:
            streaming.run(warehouse, settings, out=out)
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            failure.append(exc)

    controller = threading.Thread(target=running, daemon=True)
    controller.start()
    try:
        assert wait_for(lambda: "metrics at http://" in out.getvalue() or failure, 120), failure
        url = out.getvalue().split("metrics at ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        scraped: list[dict[str, float]] = []

        def caught_up() -> bool:
            scraped[:] = [scrape(url)[1]]
            return scraped[0].get("kraftlake_controller_replayed_offset") == end or bool(failure)

        assert wait_for(caught_up, 180, every=0.5), (failure, scraped)
        content_type, metrics = scrape(url)
    finally:
        for query in spark.streams.active:
            query.stop()
        controller.join(60)
    assert not failure and not controller.is_alive()
    assert content_type.startswith("text/plain; version=0.0.4")

    brokers = warehouse.read_arrow("brokers").to_pylist()
    partitions = warehouse.read_arrow("partitions").to_pylist()
    assert metrics["kafka_controller_kafkacontroller_fencedbrokercount"] == sum(b["fenced"] for b in brokers) == \
        sum(b["fenced"] for b in oracle["brokers"].values()) == 1
    assert metrics["kafka_controller_kafkacontroller_activebrokercount"] == 0
    assert metrics["kafka_controller_kafkacontroller_globalpartitioncount"] == len(partitions) == \
        len(oracle["partitions"]) == 54
    assert metrics["kafka_controller_kafkacontroller_globaltopiccount"] == len(oracle["topics"]) == 5
    assert metrics["kafka_controller_kafkacontroller_offlinepartitionscount"] == \
        sum(p["leader"] == -1 for p in partitions) == sum(p["leader"] == -1 for p in oracle["partitions"]) == 54
    assert metrics["kafka_controller_kafkacontroller_preferredreplicaimbalancecount"] == \
        sum(p["leader"] != p["replicas"][0] for p in partitions)
    # min.insync.replicas=2 against ISRs of one replica: every partition
    assert metrics["kraftlake_controller_under_min_isr_partitions"] == sum(len(p["isr"]) < 2 for p in partitions) == 54
    assert metrics["kraftlake_controller_lag_offsets"] == 0 and metrics["kraftlake_controller_lag_seconds"] == 0
    assert metrics["kraftlake_controller_batch_duration_seconds"] > 0
    with pytest.raises(urllib.error.URLError):
        scrape(url)  # the server stopped with the controller


def test_a_metrics_port_that_is_not_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ingest_source(DeltaRsTables(str(tmp_path / "w")), str(FIXTURE / "__cluster_metadata-0"))
    code = run_job("controller", controller_main, ["--warehouse", str(tmp_path / "w"), "--metrics-port", "70000"])
    assert code == USAGE
    assert capsys.readouterr().err.strip() == "controller: metrics port '70000': a TCP port 0..65535 (0: any free one)"
