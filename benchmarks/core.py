"""The pure core measured alone: replay, state size, broker failover, scaling, a profile."""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import pstats
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from kraftlake import codec
from kraftlake.codec.events import validate_event
from kraftlake.controller.cluster_control import ControllerState, expire_sessions, take_over
from kraftlake.controller.decisions import Context, Records
from kraftlake.controller.dispatch import decide
from kraftlake.controller.shards import Block, ShardState, replay_log, routed, step
from kraftlake.image import partition_changes
from kraftlake.image.partition_changes import Shaped
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.replay import replay
from kraftlake.metadata.progress import Meter
from kraftlake.sim.cluster import ClusterSimulator, SimulationOptions
from kraftlake.sim.workload import failover_cluster, generate

from benchmarks.stats import chunks, fit, log

def decode_all(path: Path, start: str = codec.HISTORY) -> int:
    """Records decoded from a partition directory (the decode stage: codec only, nothing kept)."""
    return sum(1 for item in codec.decode_partition_dir(path, start) if isinstance(item, dict))


def core_replay_chunked(events: Iterable[dict], shards: int, chunk: int = 50_000,
                        meter: Meter | None = None, per_chunk: list[tuple[int, float, float]] | None = None
                        ) -> tuple[float, int, list[ShardState]]:
    """The shards' steps over the log in chunks of ``chunk`` events, as the streaming job runs them per
    micro-batch (state kept, outputs dropped). Only routing and the steps are timed, not generating the
    events, and the log is never held whole: memory stays that of the images. ``per_chunk`` gets each
    chunk's (events, seconds, CPU seconds): over a long log of requests the cost of a chunk follows what
    it holds (failovers), not how far into the log it is (docs/performance.md, "The core over a longer
    requests log")."""
    states = [ShardState(ClusterImage()) for _ in range(shards)]
    seconds, count = 0.0, 0
    for batch in chunks(events, chunk):
        cpu = time.process_time()
        started = time.perf_counter()
        per_shard = routed(batch, shards)
        for shard in range(shards):
            step(shard, shards, states[shard], per_shard[shard])
        took = time.perf_counter() - started
        if per_chunk is not None:
            per_chunk.append((len(batch), took, time.process_time() - cpu))
        seconds += took
        count += len(batch)
        if meter is not None:
            meter.update(count)
    return seconds, count, states


def simulated_requests(count: int, options: SimulationOptions, config: Mapping[str, str]) -> Iterator[dict]:
    """The simulated cluster's first ``count`` requests (the soak's traffic: nine in ten are heartbeats) as
    ingest hands them to the controller (every field of their version, ``source`` and ``position``)."""
    for position, event in enumerate(ClusterSimulator(options, config).events(count), start=1):
        yield {**validate_event(event), "source": "simulated", "position": position}


def state_sizes(states: list[ShardState]) -> list[int]:
    return [len(s.to_bytes()) for s in states]


def build_image(events: Iterable[dict]) -> tuple[ClusterImage, dict]:
    """The image of a generated log, and its last event."""
    image = ClusterImage()
    last: dict = {}
    for last in events:
        result = replay(image, last)
        if result.rejected is not None:
            raise RuntimeError(f"generated record rejected: {result.rejected}")
    return image, last


def shutdown_request(image: ClusterImage, broker: int, offset: int, now_ms: int) -> dict:
    return {"offset": offset, "leader_epoch": 1, "timestamp": now_ms, "type": "BrokerHeartbeatRequest",
            "version": 1, "source": None, "position": None,
            "data": {"BrokerId": broker, "BrokerEpoch": image.brokers[broker].epoch, "CurrentMetadataOffset": offset,
                     "WantFence": False, "WantShutDown": True, "OfflineLogDirs": []}}


def measure_failover(partitions: int, brokers: int, repeats: int, full_step: bool) -> dict:
    """Broker 1 is in every partition's ISR and leads a third of them. Timed: the controller's decision
    for its controlled shutdown (``BrokerHeartbeatRequest`` with ``WantShutDown``, through
    ``controller.decide``) and for its session expiring (``expire_sessions``), best and median of
    ``repeats``; replaying the decision's records into the image (one by one, on the columns as records read
    from the log, and on the columns as the decision hands them over); and, with ``full_step``, the whole
    shard step over that request as the streaming job runs it (take-over, decision, replay, rows)."""
    broker = 1
    started = time.perf_counter()
    image, last = build_image(failover_cluster(partitions, brokers=brokers, broker=broker))
    build_s = time.perf_counter() - started
    now, offset = last["timestamp"] + 1000, last["offset"] + 1
    state = ControllerState()
    take_over(image, state, now)
    request = shutdown_request(image, broker, offset, now)
    ctx = Context(now_ms=now, offset=offset)
    decide_s, records = [], []
    for _ in range(repeats):
        fresh = copy.deepcopy(state)
        t = time.perf_counter()
        records = decide(image, fresh, request, ctx).records
        decide_s.append(time.perf_counter() - t)
    decided_s = replay_decided(image.copy(), records, offset, now)
    expiry_s = []
    timeout = 9000
    for _ in range(repeats):
        fresh = copy.deepcopy(state)
        for broker_id, session in fresh.sessions.items():
            session.contact_ms = now + timeout if broker_id != broker else now - 1
        expiry_ctx = Context(now_ms=now + timeout, offset=offset)
        t = time.perf_counter()
        expired = expire_sessions(image, fresh, expiry_ctx)
        expiry_s.append(time.perf_counter() - t)
    changed = sum(1 for r in records if r["type"] == "PartitionChangeRecord")
    led = sum(1 for p in image.iter_partitions() if p.leader == broker)
    events = [{**rec, "offset": offset, "leader_epoch": 1, "timestamp": now} for rec in records]
    columns_s = replay_on_columns(image.copy(), [e for e in events if e["type"] == "PartitionChangeRecord"])
    t = time.perf_counter()
    for event in events:
        replay(image, event)
    apply_s = time.perf_counter() - t
    out = {"partitions": partitions, "brokers": brokers, "broker_led": led, "partition_changes": changed,
           "expiry_records": len(expired), "build_image_s": round(build_s, 3),
           "decide_controlled_shutdown_s": {"min": round(min(decide_s), 3),
                                            "median": round(statistics.median(decide_s), 3)},
           "decide_session_expiry_s": {"min": round(min(expiry_s), 3),
                                       "median": round(statistics.median(expiry_s), 3)},
           "replay_records_s": round(apply_s, 3), "replay_records_on_columns_s": round(columns_s, 3),
           "replay_decided_on_columns_s": round(decided_s, 3)}
    if full_step:
        image = records = None
        gc.collect()
        image, last = build_image(failover_cluster(partitions, brokers=brokers, broker=broker))
        shard = ShardState(image, last_offset=last["offset"])
        t = time.perf_counter()
        rows = step(0, 1, shard, [request])
        out["shard_step_s"] = round(time.perf_counter() - t, 3)
        out["shard_step_rows"] = sum(o.rows.num_rows if isinstance(o, Block) else 1 for o in rows)
    log(f"failover over {partitions:,} partitions: decide {out['decide_controlled_shutdown_s']['min']:.3f} s "
        f"(controlled shutdown), {out['decide_session_expiry_s']['min']:.3f} s (session expiry), "
        f"replay {apply_s:.3f} s ({columns_s:.3f} s on the columns, {decided_s:.3f} s as decided)"
        + (f", shard step {out['shard_step_s']:.2f} s" if full_step else ""))
    return out


def replay_on_columns(image: ClusterImage, events: list[dict]) -> float:
    """Seconds to replay a run of simple PartitionChangeRecords as the shard step does a long run read from
    the log (``partition_changes``: the records as columns, their rows, applied at once), image only."""
    if not all(partition_changes.is_simple(e["data"]) for e in events):
        raise RuntimeError("the failover wrote records the columns do not take: only simple changes were expected")
    image.store.flush()
    t = time.perf_counter()
    changes = partition_changes.Changes.of_events(events)
    partition_changes.apply(image, changes, partition_changes.rows_of(image, changes))
    return time.perf_counter() - t


def replay_decided(image: ClusterImage, records: Records, offset: int, now: int) -> float:
    """Seconds to replay a failover's records on the columns as the shard step does (``_Step.shaped``): each
    shape's record coded once (``Shaped.changes``), the rows the decision found, applied at once; image only."""
    runs = [part for part in records.parts if isinstance(part, Shaped)]
    if not all(run.simple().all() for run in runs):
        raise RuntimeError("the failover wrote records the columns do not take: only simple changes were expected")
    image.store.flush()
    t = time.perf_counter()
    for run in runs:
        partition_changes.apply(image, *run.changes(image, offset, now, 1, np.arange(len(run))))
    return time.perf_counter() - t


def profile_core(events: list[dict], shards: int, top: int = 15) -> dict:
    profiler = cProfile.Profile()
    profiler.enable()
    replay_log(events, shards)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        short = filename.split("/lib/", 1)[-1] if "/lib/kraftlake/" in filename else Path(filename).name
        rows.append({"function": f"{short}:{line}({name})" if line else name, "calls": ncalls,
                     "own_s": round(tottime, 3), "cumulative_s": round(cumtime, 3)})
    return {"events": len(events), "shards": shards, "total_s": round(stats.total_tt, 3),
            "by_cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:top],
            "by_own_time": sorted(rows, key=lambda r: -r["own_s"])[:top]}


def scaling(sizes: dict, args: argparse.Namespace, meter: Callable[[str, int], Meter] | None = None) -> dict:
    """How replay time, state and failover grow with partitions and events; ``meter(label, events)`` makes
    a progress meter for each replay."""
    out: dict = {"partitions": [], "events": []}
    ppt = args.partitions_per_topic
    for partitions in sizes["scaling_partitions"]:
        topics = max(1, partitions // ppt)
        # as many changes as partitions, so that the log grows with the cluster and the slope says how
        # the cost per event does
        total = 2 * args.brokers + topics + 2 * topics * ppt
        seconds, count, states = core_replay_chunked(
            generate(total, brokers=args.brokers, topics=topics, partitions_per_topic=ppt), args.shards,
            meter=meter and meter(f"bench scaling {topics * ppt:,} partitions", total))
        sizes_ = state_sizes(states)
        states = None
        gc.collect()
        failover = measure_failover(partitions, args.brokers, repeats=1, full_step=False)
        gc.collect()
        out["partitions"].append({"partitions": topics * ppt, "events": count, "replay_s": round(seconds, 3),
                                  "records_per_s": round(count / seconds), "state_bytes": sum(sizes_),
                                  "state_bytes_per_shard": sizes_,
                                  "failover_decide_s": failover["decide_controlled_shutdown_s"]["min"],
                                  "failover_replay_on_columns_s": failover["replay_records_on_columns_s"],
                                  "failover_replay_decided_s": failover["replay_decided_on_columns_s"]})
        log(f"scaling: {topics * ppt:,} partitions, {count:,} events replayed in {seconds:.2f} s, "
            f"state {sum(sizes_):,} bytes")
    events_sizes = list(sizes["scaling_events"]) + ([10_000_000] if args.events_1e7 else [])
    for events in events_sizes:
        seconds, count, states = core_replay_chunked(
            generate(events, brokers=args.brokers, topics=args.topics, partitions_per_topic=ppt), args.shards,
            meter=meter and meter(f"bench scaling {events:,} events", events))
        out["events"].append({"events": count, "partitions": args.topics * ppt, "replay_s": round(seconds, 3),
                              "records_per_s": round(count / seconds), "state_bytes": sum(state_sizes(states))})
        states = None
        gc.collect()
        log(f"scaling: {count:,} events over {args.topics * ppt:,} partitions in {seconds:.2f} s")
    rows = out["partitions"]
    xs = [r["partitions"] for r in rows]
    out["fits"] = {
        "replay_time_vs_partitions": fit(xs, [r["replay_s"] for r in rows]),
        "state_bytes_vs_partitions": fit(xs, [r["state_bytes"] for r in rows]),
        "failover_time_vs_partitions": fit(xs, [r["failover_decide_s"] for r in rows]),
        "replay_time_vs_events": fit([r["events"] for r in out["events"]], [r["replay_s"] for r in out["events"]]),
    }
    return out
