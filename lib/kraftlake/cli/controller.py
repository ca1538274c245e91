"""The controller: replay ``metadata_log`` into the state tables as an exactly-once streaming query.

    ./spark-submit.sh jobs/controller.py --warehouse W --once    # batch replay (AvailableNow), then exit
    ./spark-submit.sh jobs/controller.py --warehouse W           # keep running; new log rows as they land
    ./spark-submit.sh jobs/controller.py --warehouse W --standby # Spark up, waits to take over the running one

Replays the log's records and decides its requests (BrokerHeartbeatRequest, CreateTopicsRequest, ...)
as Kafka's controller would. Writes brokers, topics, configs, partitions, features (current state),
partition_history and broker_history (every change, with its cause), controller_log (the records the
controller generated), responses (its answer to each request) and rejected (what does not apply). A second query replays the
metadata quorum's traffic (VoteRequest, FetchRequest, ... addressed to replicas) into quorum_state,
quorum_replicas and quorum_events (``kraftlake.spark.quorum_query``). The checkpoints live in
kraftlake.checkpoints/controller, by default W/_checkpoints/controller (the quorum query's in its quorum/
folder); kill the job at any point and start it again: the tables end as if it had never stopped. One
controller runs per warehouse: it holds the lease W/_leases/controller, and a second one started on the
same warehouse is refused, naming the running one (``kraftlake.storage.lease``), unless it is started as a
standby (``--standby``): that one starts its Spark session, waits for the lease and takes over as soon as
the running one stops or is gone, without a new process's seconds of starting Spark.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.launcher import UserError
from kraftlake.cli.runtime import (QUORUM_PROTOCOL, checkpoint_location, meter, open_warehouse, replay_configs,
                                   storage_options, warehouse_root)
from kraftlake.metadata.config import Config
from kraftlake.metadata.progress import NEVER
from kraftlake.raft.config import PROTOCOLS
from kraftlake.spark.controller_query import ControllerSettings, keep_warm, reset, run
from kraftlake.storage import Warehouse
from kraftlake.storage.lease import Holder, Lease

MAX_BATCH_MS = "kraftlake.controller.max.batch.ms"
TRIGGER_INTERVAL_MS = "kraftlake.controller.trigger.interval.ms"


def metrics_address(config: Config, host: str | None, port: int | None) -> tuple[str, int] | None:
    """Where to serve the metrics: the flags, else the settings; None when no port is set (no server)."""
    port_text = str(port) if port is not None else config.get_str("kraftlake.controller.metrics.port").strip()
    if not port_text:
        return None
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise UserError(f"metrics port {port_text!r}: a TCP port 0..65535 (0: any free one)")
    return host or config.get_str("kraftlake.controller.metrics.host"), int(port_text)


def max_batch_ms(config: Config, once: bool) -> int | None:
    """The time bound on a continuous controller's micro-batches (None: none). A replay (``--once``) keeps
    the row cap alone: no one kills it on a schedule, and its micro-batches are fastest at the cap. The
    bound is timed between two triggers, so it must exceed the trigger interval (``storage.pacing``)."""
    bound = config.get_int(MAX_BATCH_MS, minimum=0)
    if once or not bound:
        return None
    interval = config.get_int(TRIGGER_INTERVAL_MS, minimum=0)
    if bound <= interval:
        raise UserError(f"{MAX_BATCH_MS}={bound} must exceed {TRIGGER_INTERVAL_MS}={interval}: a micro-batch is "
                        "timed from one trigger to the next (0: no time bound)")
    return bound


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--once", action="store_true", help="process what the log holds now, then exit")
    parser.add_argument("--shards", type=int, help="controller shards (kraftlake.shards)")
    parser.add_argument("--max-records-per-batch", type=int,
                        help="cap on log rows per micro-batch (kraftlake.controller.max.records.per.batch)")
    parser.add_argument("--checkpoint",
                        help="checkpoint location (default: kraftlake.checkpoints/controller, W/_checkpoints/controller "
                             "when that is empty)")
    parser.add_argument("--reset", action="store_true",
                        help="delete the checkpoint and the derived tables first, and replay from offset 0")
    parser.add_argument("--protocol", choices=PROTOCOLS,
                        help="the quorum's protocol for replicas whose traffic names none in a ReplicaStartup "
                             "(kraftlake.quorum.protocol)")
    parser.add_argument("--metrics-port", type=int,
                        help="serve Prometheus metrics at http://HOST:PORT/metrics (kraftlake.controller.metrics.port; "
                             "0: any free port, said on stderr)")
    parser.add_argument("--metrics-host",
                        help="the address the metrics are served on (kraftlake.controller.metrics.host, 127.0.0.1: "
                             "this machine only; 0.0.0.0 exposes them to the network)")
    parser.add_argument("--standby", action="store_true",
                        help="start Spark, then wait for the running controller's lease and take over once it "
                             "stops or is gone (kraftlake.controller.standby.poll.ms); continuous mode only")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.standby and (args.once or args.reset):
        raise UserError(f"--standby with {'--once' if args.once else '--reset'}: a standby waits to take over a "
                        "running controller and then runs continuously")
    if args.shards is not None and args.shards < 1:
        raise UserError(f"--shards {args.shards}: a controller has at least one shard")
    if args.protocol:
        args.override.append(f"{QUORUM_PROTOCOL}={args.protocol}")
    config = config_from_args(args)
    metrics = metrics_address(config, args.metrics_host, args.metrics_port)
    batch_ms = max_batch_ms(config, args.once)
    root = warehouse_root(config, needs_log=True)
    ttl_ms = config.get_int("kraftlake.controller.lease.ttl.ms", minimum=1)
    poll_ms = config.get_int("kraftlake.controller.standby.poll.ms", minimum=1) if args.standby else None
    status = None if config.get_str("kraftlake.progress") == NEVER else \
        config.get_int("kraftlake.controller.status.interval.ms", minimum=1) / 1000

    def open_session() -> Warehouse:
        opened = open_warehouse(config, "kraftlake-controller", root=root)
        if status is not None and not args.once:  # a restart's downtime, as an operator weighs it
            print(f"[controller] Spark session ready {time.monotonic() - started:.1f} s after the job's start",
                  file=sys.stderr, flush=True)
        return opened

    def waiting(holder: Holder) -> None:
        print(f"[controller] standby: waiting for the controller lease held by {holder.describe()}; taking over "
              f"once it is released, its holder on this host is gone, or {ttl_ms / 1000:.0f} s after its last "
              "renewal", file=sys.stderr, flush=True)

    def settings_of(warehouse: Warehouse) -> ControllerSettings:
        limit = args.max_records_per_batch or config.get_int("kraftlake.controller.max.records.per.batch", minimum=0)
        return ControllerSettings(
            shards=args.shards or config.get_int("kraftlake.shards", minimum=1),
            checkpoint=checkpoint_location(config, warehouse, "controller", args.checkpoint),
            once=args.once, max_records_per_batch=limit or None, max_batch_ms=batch_ms if limit else None,
            trigger_interval_ms=config.get_int(TRIGGER_INTERVAL_MS, minimum=0),
            kafka_config=replay_configs(config), lease_ttl_ms=ttl_ms, metrics_address=metrics)

    try:
        # the lease first, unless a standby: a second controller is turned away before it starts Spark or
        # touches anything, while a standby has its session up and warm by the time the lease is free
        warehouse = open_session() if args.standby else None
        warming = keep_warm(warehouse, settings_of(warehouse)) if warehouse is not None else nullcontext(None)
        lease_held = Lease(root, "controller", ttl_ms, storage_options=storage_options(config)).held(poll_ms, waiting)
        with warming as stop_warming, lease_held as lease:
            if warehouse is None:
                warehouse = open_session()
            else:
                print(f"[controller] standby: took the controller lease over (epoch {lease.epoch}) "
                      f"{time.monotonic() - started:.1f} s after the job's start; starting the queries",
                      file=sys.stderr, flush=True)
                stop_warming()
            settings = settings_of(warehouse)
            if args.reset:
                reset(warehouse, settings.checkpoint)
            finished = run(warehouse, settings, meter(config, "controller", "offsets"), status_every=status,
                           lease=lease, started=started)
    except RuntimeError as exc:
        print(f"controller: {exc}", file=sys.stderr)
        return 1
    if not finished:
        return 130
    counts = {name: warehouse.read_arrow(name, columns=[]).num_rows
              for name in ("brokers", "topics", "partitions", "partition_history", "rejected", "quorum_state",
                           "quorum_events")
              if warehouse.exists(name)}
    print("controller: " + ", ".join(f"{name} {count:,}" for name, count in counts.items()))
    return 0
