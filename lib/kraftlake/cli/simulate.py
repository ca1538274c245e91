"""Simulate a Kafka cluster: write its controller request log into the warehouse, deterministically.

    ./spark-submit.sh jobs/simulate.py --warehouse W --brokers 100 --topics 1000 --partitions-per-topic 100 \\
        --events 1000000 --seed 1

Brokers register and heartbeat (every broker.heartbeat.interval.ms of event time), topics are created,
followers fall behind and catch up (AlterPartition from the leaders), brokers crash (session expiry),
rolling restarts go through controlled shutdown, preferred elections, reassignments started, completed
and cancelled, topics deleted (``kraftlake.sim.cluster``). The requests are written as JSON lines files
of --chunk-lines lines under W/_simulate and each is ingested as it is complete, exactly as
``jobs/ingest.py`` would (the log is never held in memory); run ``jobs/controller.py`` to decide them.
The same seed and options always give the same log. The warehouse's metadata_log must be empty: the
simulated brokers' epochs are the offsets of their registrations.

--quorum simulates the metadata quorum's Raft traffic instead (``kraftlake.sim.quorum_traffic``) with
--voters, --observers and --duration-ms; it exits 1 if a Raft safety rule was broken. --protocol draft
runs the KIP-595 draft's quorum (ADR 0012): the voters are quorum.voters, the observers find them with
DiscoverBrokers, the first leader generates the cluster id, and --grow-to N has AlterQuorum grow the voters
(the draft's bootstrapping example: --voters 1 --grow-to 3 --observers 2). --check-seeds A:B runs the
simulator's safety checker over those seeds without writing anything.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.launcher import FAILED, UserError
from kraftlake.cli.runtime import kafka_configs, meter, open_tables
from kraftlake.sim.cluster import DEFAULT_MIX, START_MS, ClusterSimulator, SimulationOptions, parse_mix
from kraftlake.raft.config import DRAFT, PROTOCOLS, RaftConfig
from kraftlake.sim.cluster_traffic import IngestMismatch, Written, write_requests
from kraftlake.sim.quorum import SimConfig
from kraftlake.storage.deltars import DeltaRsTables


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = SimulationOptions()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cluster = parser.add_argument_group("the simulated cluster")
    cluster.add_argument("--brokers", type=int, default=defaults.brokers)
    cluster.add_argument("--topics", type=int, default=defaults.topics, help="topics created at the start")
    cluster.add_argument("--partitions-per-topic", type=int, default=defaults.partitions_per_topic)
    cluster.add_argument("--replication-factor", type=int, default=defaults.replication_factor)
    cluster.add_argument("--racks", type=int, default=defaults.racks)
    cluster.add_argument("--events", type=int, default=100_000, help="requests to write")
    cluster.add_argument("--seed", type=int, default=defaults.seed)
    cluster.add_argument("--start-ms", type=int, default=START_MS, help="event time of the first request")
    rates = parser.add_argument_group("mix and rates (event time)")
    rates.add_argument("--isr-shrinks-per-s", type=float, default=defaults.isr_shrinks_per_s,
                       help="followers falling behind, cluster-wide")
    rates.add_argument("--catch-up-ms", type=float, default=defaults.catch_up_ms,
                       help="mean time a follower needs to catch up")
    rates.add_argument("--reassign-copy-ms", type=float, default=defaults.reassign_copy_ms,
                       help="mean time a new replica of a reassignment needs to copy its data")
    rates.add_argument("--operation-interval-ms", type=float, default=defaults.operation_interval_ms,
                       help="mean time between operational events (crash, restart, election, ...)")
    rates.add_argument("--mix", default="", metavar="NAME=WEIGHT,...",
                       help="weights of the operational events; defaults: "
                            + ", ".join(f"{k}={v:g}" for k, v in DEFAULT_MIX.items()))
    rates.add_argument("--crash-downtime-ms", type=float, default=defaults.crash_downtime_ms)
    rates.add_argument("--restart-ms", type=float, default=defaults.restart_ms,
                       help="mean time a broker of a rolling restart takes to start again")
    rates.add_argument("--stale-share", type=float, default=defaults.stale_share,
                       help="share of AlterPartitions sent with an outdated partition epoch")
    output = parser.add_argument_group("output")
    output.add_argument("--chunk-lines", type=int, default=200_000, help="requests per JSON lines file")
    output.add_argument("--keep-chunks", action="store_true",
                        help="keep the JSON lines files under W/_simulate after ingesting them")
    quorum = parser.add_argument_group("--quorum mode")
    quorum.add_argument("--quorum", action="store_true",
                        help="simulate the metadata quorum's Raft traffic instead of a cluster")
    quorum.add_argument("--voters", type=int, default=3)
    quorum.add_argument("--observers", type=int, default=0)
    quorum.add_argument("--duration-ms", type=int, default=20000)
    quorum.add_argument("--alter-every-ms", type=int, default=0,
                        help="mean time between AlterQuorum requests (voter changes); 0: none")
    quorum.add_argument("--protocol", choices=PROTOCOLS,
                        help="the quorum's protocol: kafka (what Kafka shipped) or draft (the KIP-595 draft); "
                             "default: kraftlake.quorum.protocol")
    quorum.add_argument("--grow-to", type=int, default=0,
                        help="draft: AlterQuorum grows the voters to this many once the cluster id is committed")
    quorum.add_argument("--partition-every-ms", type=int, default=SimConfig.partition_every_ms,
                        help="mean time between network partitions")
    quorum.add_argument("--partition-ms", type=int, default=SimConfig.partition_ms, help="mean length of one")
    quorum.add_argument("--foreign-every-ms", type=int, default=0,
                        help="mean time between requests of a stray node of another cluster (0: none)")
    quorum.add_argument("--check-seeds", metavar="A:B",
                        help="run the safety checker over seeds A to B-1 (nothing is written) and exit 1 on a violation")
    add_common_arguments(parser)
    return parser.parse_args(argv)


def quorum_sim_config(args: argparse.Namespace, protocol: str) -> SimConfig:
    if args.grow_to and protocol != DRAFT:
        raise UserError("--grow-to is the KIP-595 draft's bootstrapping: use it with --protocol draft")
    if args.grow_to and args.grow_to > args.voters + args.observers:
        raise UserError(f"--grow-to {args.grow_to}: there are only {args.voters + args.observers} replicas")
    return SimConfig(voters=args.voters, observers=args.observers, duration_ms=args.duration_ms,
                     alter_every_ms=args.alter_every_ms, protocol=protocol, grow_to=args.grow_to,
                     foreign_every_ms=args.foreign_every_ms, partition_every_ms=args.partition_every_ms,
                     partition_ms=args.partition_ms)


def check_seeds(cfg: SimConfig, seeds: str) -> int:
    """The safety checker over a range of seeds, in-process: what a long run of the CI test is."""
    from kraftlake.sim.quorum import simulate

    try:
        first, end = (int(v) for v in seeds.split(":"))
    except ValueError:
        raise UserError(f"--check-seeds {seeds}: expected A:B, two integers") from None
    seen: Counter = Counter()
    failed = 0
    for seed in range(first, end):
        result = simulate(seed, cfg)
        seen.update(e["event"] for e in result.events)
        seen["foreign requests refused"] += result.foreign_refused
        for violation in result.violations:
            print(f"seed {seed}: VIOLATION at {violation.time_ms} ms: {violation.rule}: {violation.detail}")
        failed += bool(result.violations)
    print(f"quorum ({cfg.protocol}): {end - first:,} seeds, {failed} with a violation; "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(seen.items()) if k in CHECK_COUNTS))
    return FAILED if failed else 0


# What --check-seeds counts (the hard cases a run went through).
CHECK_COUNTS = ("leader_elected", "voters_changed", "truncation", "zombie_leader_detected", "cluster_id_generated",
                "cluster_id_committed", "quorum_discovered", "foreign requests refused")


def run_quorum(warehouse: DeltaRsTables, args: argparse.Namespace, cfg: SimConfig) -> int:
    from kraftlake.sim.quorum_traffic import write_simulation

    result = write_simulation(warehouse, seed=args.seed, voters=args.voters, observers=args.observers,
                              duration_ms=args.duration_ms, config=cfg)
    leaders = ", ".join(f"{epoch}: {leader}" for epoch, leader in sorted(result.leaders.items()))
    print(f"quorum: {args.voters} voter(s), {args.observers} observer(s), {args.duration_ms} ms, seed {args.seed}: "
          f"{result.messages:,} messages, {result.committed:,} committed")
    print(f"  leaders by epoch: {{{leaders}}}")
    if cfg.protocol == DRAFT:
        last = max((r.node for r in result.replicas.values() if r.node is not None), key=lambda n: n.epoch)
        print(f"  protocol draft: cluster id {', '.join(result.cluster_ids) or 'none committed'}, voters "
              f"{list(last.voters)}, {result.foreign_refused} request(s) of another cluster refused")
    for violation in result.violations:
        print(f"  VIOLATION at {violation.time_ms} ms: {violation.rule}: {violation.detail}")
    print(f"  {len(result.violations)} violation(s)")
    return FAILED if result.violations else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        options = SimulationOptions(
            brokers=args.brokers, topics=args.topics, partitions_per_topic=args.partitions_per_topic,
            replication_factor=args.replication_factor, racks=args.racks, seed=args.seed, start_ms=args.start_ms,
            isr_shrinks_per_s=args.isr_shrinks_per_s, catch_up_ms=args.catch_up_ms,
            reassign_copy_ms=args.reassign_copy_ms, operation_interval_ms=args.operation_interval_ms,
            mix=parse_mix(args.mix), crash_downtime_ms=args.crash_downtime_ms, restart_ms=args.restart_ms,
            stale_share=args.stale_share)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.events < 0 or args.chunk_lines < 1:
        raise UserError("--events must be >= 0 and --chunk-lines >= 1")
    config = config_from_args(args)
    if args.quorum:
        try:
            cfg = quorum_sim_config(args, args.protocol or RaftConfig.from_properties(config).protocol)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if args.check_seeds:
            return check_seeds(cfg, args.check_seeds)
        return run_quorum(open_tables(config), args, cfg)
    warehouse = open_tables(config)
    if warehouse.exists("metadata_log") and warehouse.max_value("metadata_log", "offset") is not None:
        raise UserError(f"{warehouse.path('metadata_log')} is not empty; the simulated cluster starts a log of its "
                        "own (broker epochs are the offsets of its registrations): use a new warehouse")

    simulator = ClusterSimulator(options, kafka_configs(config))
    started = time.monotonic()

    progress = meter(config, "simulate", "requests", args.events)

    def on_chunk(w: Written) -> None:
        progress.update(w.requests, f"offsets {w.first_offset}..{w.last_offset}, generated at "
                                    f"{w.requests / max(w.generating_s, 1e-9):,.0f} requests/s, ingested at "
                                    f"{w.requests / max(w.ingesting_s, 1e-9):,.0f} rows/s, event time "
                                    f"{(simulator.now - options.start_ms) / 1000:,.0f} s")

    try:
        written = write_requests(warehouse, simulator, args.events, f"seed-{args.seed}", args.chunk_lines,
                                 args.keep_chunks, on_chunk)
    except IngestMismatch as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return FAILED

    refused = Counter()
    for (type_, error), count in simulator.outcomes.items():
        if error != "NONE":
            refused[f"{type_} {error}"] += count
    total = sum(simulator.outcomes.values())
    print(f"simulate: {written.requests:,} requests into {warehouse.path('metadata_log')} in "
          f"{time.monotonic() - started:.1f} s (generating {written.generating_s:.1f} s, ingesting "
          f"{written.ingesting_s:.1f} s), {(simulator.now - options.start_ms) / 1000:,.0f} s "
          f"of event time; the controller accepts {100 * (1 - sum(refused.values()) / max(total, 1)):.2f}%")
    for type_, count in sorted(written.by_type.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {type_:<40} {count:>12,}")
    for what, count in sorted(refused.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  refused: {what:<60} {count:>9,}")
    print("run jobs/controller.py --warehouse ... to decide them")
    return 0

