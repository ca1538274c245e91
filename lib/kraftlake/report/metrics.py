"""The continuous controller's metrics, in Prometheus' text exposition format, served over HTTP.

What an operator's dashboard already shows for a Kafka controller is its JMX gauges
(``kafka.controller:type=KafkaController,name=OfflinePartitionsCount`` ...), which the Prometheus JMX
exporter's usual Kafka rules turn into ``kafka_controller_kafkacontroller_offlinepartitionscount``: the
gauges Kafka has are given those names here, so a panel built for a real cluster reads this one too.
What Kafka's controller has no gauge for (how far behind the log the replay is, how long a micro-batch
took, partitions under min.insync.replicas cluster-wide, open anomalies) is ``kraftlake_controller_*``
and ``kraftlake_anomalies_*``. docs/jobs/controller.md lists them all with their JMX names.

The values come from the tables the controller committed (read through delta-rs after each micro-batch,
never inside a scrape), so they are what a SQL query over the warehouse would count at that version: a
scrape only copies the last text, and a slow scraper cannot slow the controller.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pyarrow.compute as pc

from kraftlake.image.cluster_image import CONFIG_BROKER, CONFIG_TOPIC
from kraftlake.metadata.config import setting
from kraftlake.storage.deltars import DeltaRsTables

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PATH = "/metrics"
KAFKA_CONTROLLER = "kafka_controller_kafkacontroller_"  # kafka.controller:type=KafkaController,name=...
OWN = "kraftlake_controller_"


@dataclass(frozen=True)
class Gauge:
    """One sample: ``name{labels} value``, with its family's help line."""

    name: str
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


def _kafka(name: str, help: str, value: float) -> Gauge:
    """A gauge Kafka's controller has (``name`` as its MBean names it), under the JMX exporter's name."""
    return Gauge(KAFKA_CONTROLLER + name.lower(), f"{help} (kafka.controller:type=KafkaController,name={name})", value)


def min_insync_replicas(value: object) -> int | None:
    """A ``min.insync.replicas`` value as Kafka's config parser takes it (an int, at least 1), else None."""
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,10}", text) or not 1 <= int(text) <= 2**31 - 1:
        return None
    return int(text)


def min_isr_settings(tables: DeltaRsTables, kafka_config: Mapping[str, str]) -> tuple[dict[str, int], int]:
    """Each topic's min.insync.replicas as configured now, and the default for the others: the cluster's
    dynamic default if the log set one, else the controller's configuration. A value that is not a count
    is counted as the default."""
    configured = setting(kafka_config, "min.insync.replicas")
    default = min_insync_replicas(configured)
    if default is None:
        raise ValueError(f"min.insync.replicas={configured!r} is not an integer of at least 1")
    per_topic: dict[str, int] = {}
    if tables.exists("configs"):
        rows = [r for r in tables.read_arrow("configs").to_pylist() if r["name"] == "min.insync.replicas"]
        for r in sorted(rows, key=lambda r: r["resource_type"] != CONFIG_BROKER):  # the cluster default first
            value = min_insync_replicas(r["value"])
            if value is None:
                continue
            if r["resource_type"] == CONFIG_BROKER and r["resource_name"] == "":
                default = value
            elif r["resource_type"] == CONFIG_TOPIC:
                per_topic[r["resource_name"]] = value
    return per_topic, default


def cluster_gauges(tables: DeltaRsTables, kafka_config: Mapping[str, str]) -> list[Gauge]:
    """The cluster's gauges from the state tables as committed now; a table not written yet counts nothing."""
    fenced = active = 0
    if tables.exists("brokers"):
        brokers = tables.read_arrow("brokers", columns=["fenced"])
        fenced = int(pc.sum(brokers["fenced"]).as_py() or 0)
        active = brokers.num_rows - fenced
    topics = tables.read_arrow("topics", columns=[]).num_rows if tables.exists("topics") else 0
    offline = under_min_isr = imbalanced = total = 0
    if tables.exists("partitions"):
        rows = tables.read_arrow("partitions", columns=["topic", "leader", "isr", "replicas"])
        total = rows.num_rows
        per_topic, default = min_isr_settings(tables, kafka_config)
        leader = rows["leader"].to_numpy(zero_copy_only=False)
        offline = int(np.sum(leader == -1))
        min_isr = np.array([per_topic.get(t, default) for t in rows["topic"].to_pylist()], dtype=np.int64)
        under_min_isr = int(np.sum(pc.list_value_length(rows["isr"]).to_numpy(zero_copy_only=False) < min_isr))
        preferred = pc.list_element(rows["replicas"], 0) if total else rows["leader"]
        # Kafka counts a partition whose leader is not its first replica, a leaderless one included
        imbalanced = int(np.sum(leader != preferred.to_numpy(zero_copy_only=False)))
    return [
        _kafka("ActiveBrokerCount", "Registered brokers that are not fenced", active),
        _kafka("FencedBrokerCount", "Registered brokers that are fenced", fenced),
        _kafka("GlobalTopicCount", "Topics", topics),
        _kafka("GlobalPartitionCount", "Partitions", total),
        _kafka("OfflinePartitionsCount", "Partitions without a leader", offline),
        _kafka("PreferredReplicaImbalanceCount", "Partitions whose leader is not their first (preferred) replica",
               imbalanced),
        Gauge(OWN + "under_min_isr_partitions", "Partitions whose ISR is smaller than their min.insync.replicas",
              under_min_isr),
        *anomaly_gauges(tables),
    ]


def anomaly_gauges(tables: DeltaRsTables) -> list[Gauge]:
    """Open anomaly episodes (``end_offset`` null) by kind, once an ``anomalies`` table exists; a kind whose
    episodes all ended is at 0 rather than gone, so an alert on it resolves."""
    if not tables.exists("anomalies"):
        return []
    rows = tables.read_arrow("anomalies", columns=["kind", "end_offset"])
    kinds = sorted(set(rows["kind"].to_pylist()))
    open_kinds = rows.filter(pc.is_null(rows["end_offset"]))["kind"].to_pylist()
    return [Gauge("kraftlake_anomalies_open", "Anomaly episodes that have not ended, by kind",
                  open_kinds.count(k), (("kind", k),)) for k in kinds]


def progress_gauges(lag_offsets: int | None, lag_seconds: float | None, batch_seconds: float | None,
                    batch_id: int | None, offset: int | None) -> list[Gauge]:
    """Where the replay stands; a value not known yet (before the first micro-batch) is left out."""
    found = [
        (OWN + "lag_offsets", "Offsets of metadata_log not replayed yet", lag_offsets),
        (OWN + "lag_seconds", "Event time between the last offset replayed and the log's end", lag_seconds),
        (OWN + "batch_duration_seconds", "Wall-clock time of the last micro-batch", batch_seconds),
        (OWN + "last_batch_id", "The last micro-batch's id (checkpointed: it goes on across restarts)", batch_id),
        (OWN + "replayed_offset", "The last metadata_log offset replayed", offset),
    ]
    return [Gauge(n, h, v) for n, h, v in found if v is not None]


def exposition(gauges: list[Gauge]) -> str:
    """Prometheus' text format (0.0.4): a HELP and TYPE line per family, then its samples."""
    lines: list[str] = []
    seen: set[str] = set()
    for g in gauges:
        if g.name not in seen:
            seen.add(g.name)
            lines += [f"# HELP {g.name} {g.help}", f"# TYPE {g.name} gauge"]
        labels = ",".join(f'{k}="{_escaped(v)}"' for k, v in g.labels)
        value = int(g.value) if float(g.value).is_integer() else g.value
        lines.append(f"{g.name}{{{labels}}} {value}" if labels else f"{g.name} {value}")
    return "\n".join(lines) + "\n"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsServer:
    """Serves the last text ``publish`` was given at ``GET /metrics``, from a thread, until ``close``."""

    def __init__(self, host: str, port: int) -> None:
        self.text = exposition([])
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != PATH:
                    self.send_error(404, f"the metrics are at {PATH}")
                    return
                body = owner.text.encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # a scrape every few seconds is not news on stderr

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="kraftlake-metrics", daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def publish(self, gauges: list[Gauge]) -> None:
        self.text = exposition(gauges)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
