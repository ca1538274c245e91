"""Check the KIP-841 invariants at every offset of the warehouse's log (exit code 1 on any violation).

    ./spark-submit.sh jobs/check.py --warehouse W [--format text|json]

Replays `metadata_log`, with the records of `controller_log` (when it exists) right after the events
that caused them, through the pure core, and reports every partition change that elects a fenced, shutting
down or unregistered broker, adds one to an ISR, or leaves a leader outside its ISR. Table output ends
with a summary line; with --format json, stdout holds only the violations (one JSON object per line) and
the summary goes to stderr. No Spark session is needed: the tables are read through delta-rs, whatever
the engine that wrote them. Exit code 1 when anything is found, 2 when there is nothing to check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import datetime, timezone

from kraftlake.cli.config import JSON, add_common_arguments, add_format_argument, config_from_args
from kraftlake.cli.launcher import FAILED, UserError
from kraftlake.cli.output import json_line, print_table
from kraftlake.cli.runtime import storage_options, warehouse_root
from kraftlake.controller.invariants import (CONTROLLER_LOG, METADATA_LOG, InvariantChecker, Violation, check_events,
                                             controller_order, merge_logs)
from kraftlake.storage.deltars import DeltaRsTables, StorageOptions, read_range, split_range
from kraftlake.storage.tables import rows_to_events

COLUMNS = ("offset", "timestamp", "topic", "partition", "kind", "broker", "broker_state", "event_type",
           "leader", "isr", "cause")


def _isr(isr: tuple[int, ...] | None) -> str:
    return "-" if isr is None else "[" + ",".join(map(str, isr)) + "]"


def _row(v: Violation) -> tuple:
    """Before -> after in one cell each, as people read a change; a new partition's before is '-'."""
    return (
        v.offset,
        datetime.fromtimestamp(v.timestamp / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
        v.topic,
        v.partition,
        v.kind,
        v.broker,
        v.broker_state,
        v.event_type,
        f"{'-' if v.leader_before is None else v.leader_before} -> {v.leader_after}",
        f"{_isr(v.isr_before)} -> {_isr(v.isr_after)}",
        "" if v.cause_offset is None else f"{v.cause_type or '?'} @ {v.cause_offset}",
    )


def summary(checker: InvariantChecker, violations: int) -> str:
    requests = f"{checker.requests:,} requests, " if checker.requests else ""
    line = (f"{checker.events_checked:,} events checked ({requests}{checker.partition_changes:,} partition "
            f"changes), {violations:,} violation{'' if violations == 1 else 's'}")
    if checker.not_applied:
        line += f"; {checker.not_applied:,} records did not apply (the controller's `rejected` rows say why)"
    return line


def warehouse_events(root: str, chunk_rows: int = 100_000, storage_options: StorageOptions = None) -> Iterator[dict]:
    """The warehouse's log (and ``controller_log`` when it exists) in replay order, read chunk by chunk.

    Chunks follow the Delta files (their offset ranges come from the log's statistics), so memory is
    bounded by about ``chunk_rows`` rows or one data file, whichever is larger, not by the log.
    """
    tables = DeltaRsTables(root, storage_options)
    if not tables.exists(METADATA_LOG):
        raise UserError(f"no {METADATA_LOG} table in {tables.root}: ingest a log first (jobs/ingest.py)")
    log = tables.table(METADATA_LOG)
    ends = [tables.max_value(METADATA_LOG, "offset")]
    controller = tables.table(CONTROLLER_LOG) if tables.exists(CONTROLLER_LOG) else None
    if controller is not None:
        cause, order = controller_order(f.name for f in controller.schema().fields)
        ends.append(tables.max_value(CONTROLLER_LOG, cause))
    end = max((e for e in ends if e is not None), default=None)
    if end is None:
        return
    for lo, hi in split_range(log, "offset", -1, end, chunk_rows):
        chunk = rows_to_events(read_range(log, "offset", lo, hi))
        generated: list[dict] = []
        if controller is not None:
            rows = read_range(controller, cause, lo, hi).sort_by([(c, "ascending") for c in order])
            causes = rows.column(cause).to_pylist()
            generated = [{**e, "cause_offset": c} for e, c in zip(rows_to_events(rows), causes)]
        yield from merge_logs(chunk, generated)


def check_warehouse(root: str) -> list[Violation]:
    """Every violation in the warehouse's log, in log order."""
    return list(check_events(warehouse_events(root)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_format_argument(parser, "the violations")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    checker = InvariantChecker()
    found: list[Violation] = []
    for event in warehouse_events(warehouse_root(config, writes=False), storage_options=storage_options(config)):
        for violation in checker.check(event):
            if args.format == JSON:
                print(json_line(violation.to_dict()), flush=True)
            found.append(violation)
    if args.format == JSON:
        print(summary(checker, len(found)), file=sys.stderr)
    else:
        if found:
            print_table(COLUMNS, [_row(v) for v in found])
        print(summary(checker, len(found)))
    return FAILED if found else 0
