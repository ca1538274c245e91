"""Partition reassignments, like ``kafka-reassign-partitions.sh`` (KIP-455), against the warehouse.

    ./spark-submit.sh jobs/reassign.py --warehouse W --execute plan.json [--incremental]
    ./spark-submit.sh jobs/reassign.py --warehouse W --list
    ./spark-submit.sh jobs/reassign.py --warehouse W --cancel-all
    ./spark-submit.sh jobs/reassign.py --warehouse W --verify plan.json

A plan is Kafka's JSON: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [4, 5, 6]}]}
(a partition with "replicas": null cancels its reassignment). --execute and --cancel-all append an
AlterPartitionReassignmentsRequest to the metadata log (as JSON lines under W/_requests, ingested like any
other events, one millisecond after the log's newest event); the controller job decides it. --list and
--verify read the state tables the controller wrote. Without --incremental, --execute refuses to start
while reassignments are in progress, as the Kafka tool does without --additional.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.launcher import UserError
from kraftlake.cli.runtime import open_warehouse, warehouse_root
from kraftlake.spark.views import register_views
from kraftlake.storage import Warehouse
from kraftlake.storage.ingest import ingest_source


def read_plan(path: str) -> list[dict]:
    try:
        plan = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a reassignment plan: {exc}") from exc
    partitions = plan.get("partitions") if isinstance(plan, dict) else None
    if not isinstance(partitions, list):
        raise ValueError(f"{path}: a plan is {{\"version\": 1, \"partitions\": [...]}}")
    for entry in partitions:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) \
                or not isinstance(entry.get("partition"), int) or "replicas" not in entry:
            raise ValueError(f"{path}: each partition needs topic, partition and replicas: {entry!r}")
    return partitions


def request(partitions: list[dict], timestamp: int) -> dict:
    """One AlterPartitionReassignmentsRequest for the plan's partitions, grouped by topic."""
    topics: dict[str, list[dict]] = {}
    for entry in partitions:
        topics.setdefault(entry["topic"], []).append(
            {"PartitionIndex": entry["partition"], "Replicas": entry["replicas"]})
    return {"type": "AlterPartitionReassignmentsRequest", "version": 0, "timestamp": timestamp,
            "data": {"TimeoutMs": 60000,
                     "Topics": [{"Name": name, "Partitions": parts} for name, parts in topics.items()]}}


def ongoing(warehouse: Warehouse) -> list[dict]:
    register_views(warehouse)
    if "reassignments" not in {t.name for t in warehouse.spark.catalog.listTables()}:
        return []
    return [r.asDict() for r in warehouse.spark.sql("SELECT * FROM reassignments").collect()]


def append_request(warehouse: Warehouse, body: dict, label: str) -> Any:
    """Write the request as JSON lines under W/_requests and ingest it: the log keeps what was asked."""
    newest = warehouse.spark.sql("SELECT unix_millis(max(timestamp)) AS t FROM metadata_log").first().t
    body["timestamp"] = (newest or 0) + 1
    folder = Path(warehouse.path("_requests"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label}-{body['timestamp']}.jsonl"
    path.write_text(json.dumps(body) + "\n")
    return ingest_source(warehouse, str(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", metavar="PLAN", help="start (or change) the reassignments of a plan")
    action.add_argument("--list", action="store_true", help="the reassignments in progress, as a plan")
    action.add_argument("--cancel-all", action="store_true", help="cancel every reassignment in progress")
    action.add_argument("--verify", metavar="PLAN", help="whether the plan's reassignments have completed")
    parser.add_argument("--incremental", action="store_true",
                        help="add to or alter reassignments in progress (Kafka's --additional)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    try:  # the plan first: a mistake in it is found before Spark starts
        plan = read_plan(args.execute or args.verify) if args.execute or args.verify else []
    except ValueError as exc:
        raise UserError(str(exc)) from None
    config = config_from_args(args)
    warehouse = open_warehouse(config, "kraftlake-reassign", root=warehouse_root(config, needs_log=True))
    try:
        if args.list:
            current = ongoing(warehouse)
            plan = {"version": 1, "partitions": [
                {"topic": r["topic"], "partition": r["partition"], "replicas": list(r["target_replicas"])}
                for r in current]} if current else {}
            print(json.dumps(plan))
            return 0
        if args.cancel_all:
            current = ongoing(warehouse)
            if not current:
                print("reassign: no reassignment in progress")
                return 0
            cancels = [{"topic": r["topic"], "partition": r["partition"], "replicas": None} for r in current]
            summary = append_request(warehouse, request(cancels, 0), "cancel-all")
            print(f"reassign: cancellation of {len(cancels)} reassignment(s) appended at offset "
                  f"{summary.first_offset}; run jobs/controller.py to decide it")
            return 0
        if args.verify:
            return verify(warehouse, plan)
        current = ongoing(warehouse)
        if current and not args.incremental:
            print(f"reassign: {len(current)} reassignment(s) in progress; wait for them, cancel them, or add "
                  "--incremental to add to them (KIP-455)", file=sys.stderr)
            return 1
        summary = append_request(warehouse, request(plan, 0), "execute")
        print(f"reassign: AlterPartitionReassignmentsRequest for {len(plan)} partition(s) appended at offset "
              f"{summary.first_offset}; run jobs/controller.py to decide it")
        return 0
    except ValueError as exc:
        print(f"reassign: {exc}", file=sys.stderr)
        return 2


def verify(warehouse: Warehouse, plan: list[dict]) -> int:
    """Kafka's --verify: each partition's reassignment is complete when it has exactly the target
    replicas and nothing is being added or removed."""
    register_views(warehouse)
    rows = {(r.topic, r.partition): r for r in warehouse.spark.sql(
        "SELECT topic, partition, replicas, adding_replicas, removing_replicas FROM partitions").collect()}
    pending = 0
    for entry in plan:
        key = (entry["topic"], entry["partition"])
        row = rows.get(key)
        name = f"{entry['topic']}-{entry['partition']}"
        if row is None:
            print(f"Reassignment of partition {name}: no such partition")
            pending += 1
        elif row.adding_replicas or row.removing_replicas:
            print(f"Reassignment of partition {name} is still in progress.")
            pending += 1
        elif entry["replicas"] is not None and list(row.replicas) != entry["replicas"]:
            print(f"There is no active reassignment of partition {name}, but its replicas are "
                  f"{list(row.replicas)} rather than {entry['replicas']}.")
            pending += 1
        else:
            print(f"Reassignment of partition {name} is completed.")
    return 1 if pending else 0

