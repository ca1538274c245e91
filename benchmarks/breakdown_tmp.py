"""Temporary: where a micro-batch's time goes (variants of the controller query). Not committed."""
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, "lib")
sys.path.insert(0, ".")

from kraftlake.cli.runtime import open_warehouse
from kraftlake.metadata.config import load_config
from kraftlake.spark import controller_query as cq
from kraftlake.controller.shards import step, gc_paused
from kraftlake.storage.ingest import ingest_source
from kraftlake.sim.workload import generate
from benchmarks.suite import write_log_streaming

work = Path(sys.argv[1])
events = int(sys.argv[2])
partitions = int(sys.argv[3])
batch = int(sys.argv[4])
variants = sys.argv[5].split(",")
PHASES = str(work / "phases.jsonl")

config = load_config(overrides=[f"kraftlake.warehouse={work / 'warehouse'}", "kraftlake.engine=delta-rs", "spark.eventLog.enabled=true", f"spark.eventLog.dir={work}/evlog"])
log_dir = work / "log" / "__cluster_metadata-0"
if not log_dir.exists():
    t = time.perf_counter()
    write_log_streaming(log_dir, generate(events, brokers=12, topics=partitions // 1000, partitions_per_topic=1000))
    print("generate", time.perf_counter() - t, flush=True)
warehouse = open_warehouse(config, "breakdown")
if not warehouse.exists("metadata_log"):
    t = time.perf_counter()
    ingest_source(warehouse, str(log_dir))
    print("ingest", time.perf_counter() - t, flush=True)
spark = warehouse.spark


def timed_shard_function(shards, kafka_config, mode, keys):
    config = dict(kafka_config)
    shard_of = {k: s for s, k in enumerate(keys)}

    def run(key, frames, state):
        import time as _t, json as _j, os as _o
        shard = shard_of[int(key[0])]
        marks = {"shard": shard, "pid": _o.getpid(), "mode": mode}
        t0 = _t.perf_counter()
        if mode == "trivial":
            n = sum(len(f) for f in frames)
            marks["rows"] = n
            marks["total"] = _t.perf_counter() - t0
            with open(PHASES, "a") as fh:
                fh.write(_j.dumps(marks) + "\n")
            yield cq.outputs_frame([])
            return
        with gc_paused():
            raw = state.get[0] if state.exists else None
            cached = shard in cq._STATE_CACHE
            current = cq._load_state(shard, raw)
            t1 = _t.perf_counter()
            evs, ch = cq.events_of_frames(frames)
            t2 = _t.perf_counter()
            outputs = step(shard, shards, current, evs, config, changes=ch)
            t3 = _t.perf_counter()
            cq._save_state(shard, current, state)
            t4 = _t.perf_counter()
            frame = cq.outputs_frame(outputs)
            t5 = _t.perf_counter()
        marks.update(rows=len(evs) + (len(ch) if ch is not None else 0), cached=cached, load=t1 - t0, events=t2 - t1, step=t3 - t2, save=t4 - t3,
                     outframe=t5 - t4, outputs=len(outputs), state_mb=len(state.get[0]) / 1e6)
        with open(PHASES, "a") as fh:
            fh.write(_j.dumps(marks) + "\n")
        yield frame

    return run


def run_variant(name):
    from pyspark.sql.streaming.state import GroupStateTimeout
    cp = work / f"cp-{name}"
    shutil.rmtree(cp, ignore_errors=True)
    source = warehouse.read_stream("metadata_log", max_records_per_batch=batch,
                                   **({} if name == "scan" else cq.controller_input(warehouse)))
    shards = 4
    if name == "scan":
        outputs = source
    else:
        mode = {"plumbing": "trivial", "step": "full", "full": "full"}[name]
        from kraftlake.spark.queries import spread_keys
        keys = spread_keys(shards, 4)
        outputs = (cq.routed_events(source, shards, keys).groupBy("shard")
                   .applyInPandasWithState(timed_shard_function(shards, {}, mode, keys), cq.OUTPUT_SCHEMA, cq.STATE_SCHEMA,
                                           "append", GroupStateTimeout.NoTimeout))
    sink_times = []

    def sink(df, batch_id):
        t = time.perf_counter()
        if name == "full":
            for tname in ("partitions", "partition_history", "controller_log", "responses", "rejected", "brokers",
                          "topics", "configs"):
                pass
            a = df.toArrow(); t1 = time.perf_counter()
            o = cq._outputs_of(a); t2 = time.perf_counter()
            w = cq.write_outputs(warehouse, o, (f"bd-{name}", batch_id)); t3 = time.perf_counter()
            print("sink split: compute", round(t1 - t, 1), "outputs_of", round(t2 - t1, 1), "write", round(t3 - t2, 1), w, flush=True)
        elif name == "scan":
            df.selectExpr("sum(hash(*))").collect()
        else:
            df.toArrow()
        sink_times.append(time.perf_counter() - t)

    t = time.perf_counter()
    q = outputs.writeStream.option("checkpointLocation", str(cp)).foreachBatch(sink).trigger(availableNow=True).start()
    q.awaitTermination()
    total = time.perf_counter() - t
    prog = [p for p in q.recentProgress if p["numInputRows"]]
    print(json.dumps({"variant": name, "seconds": round(total, 1), "batches": len(prog),
                      "sink_s": [round(s, 1) for s in sink_times],
                      "addBatch": [p["durationMs"].get("addBatch") for p in prog]}), flush=True)


for v in variants:
    if v == "full":
        for t in ("partitions", "partition_history", "controller_log", "responses", "brokers", "topics", "configs"):
            shutil.rmtree(work / "warehouse" / t, ignore_errors=True)
        from kraftlake.metadata.tables import tables_of, table_arrow_schema
        for t in tables_of("controller"):
            warehouse.create_if_missing(t, table_arrow_schema(t))
    run_variant(v)
