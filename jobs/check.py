"""Check the KIP-841 invariants at every offset of the warehouse's log (exit code 1 on any violation).

    ./spark-submit.sh jobs/check.py --warehouse W [--format table|json]

Replays `metadata_log`, with the records of `controller_log` (when it exists) right after the events
that caused them, through the pure core, and reports every partition change that elects a fenced, shutting
down or unregistered broker, adds one to an ISR, or leaves a leader outside its ISR. Table output ends
with a summary line; with --format json, stdout holds only the violations (one JSON object per line) and
the summary goes to stderr. No Spark session is needed: the tables are read through delta-rs, whatever
the engine that wrote them.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.controller.invariants import InvariantChecker, Violation, warehouse_events
from kraftlake.cli.output import json_line, print_table

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", choices=("table", "json"), default="table")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    root = config_from_args(args).get_path("kraftlake.warehouse")
    checker = InvariantChecker()
    found: list[Violation] = []
    try:
        for event in warehouse_events(root):
            for violation in checker.check(event):
                if args.format == "json":
                    print(json_line(violation.to_dict()), flush=True)
                found.append(violation)
    except FileNotFoundError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(summary(checker, len(found)), file=sys.stderr)
    else:
        if found:
            print_table(COLUMNS, [_row(v) for v in found])
        print(summary(checker, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
