"""Ingest Kafka metadata logs and hand-written events into the warehouse's ``metadata_log``.

Sources, in the order given (offsets continue across them):
  a ``__cluster_metadata-0`` partition directory (the whole log when its segments start at offset 0, else
  the snapshot that bridges to them; ``--from-snapshot``: the newest snapshot, as Kafka loads it),
  a segment (``*.log``), a snapshot (``*.checkpoint``), JSON lines (``*.jsonl``), Avro (``*.avro``).

Ingesting the same bytes twice adds nothing. Damaged or invalid parts land in ``rejected`` with
their location and reason and the ingest goes on; ``--strict`` stops at the first one (exit 1)
and commits nothing of that source.

With ``kraftlake.ingest.decoders=spark`` a Kafka log's records are decoded by Spark's tasks (the job then
starts a Spark session: on a cluster, ``--master spark://...``); the rest of the ingest stays in this process.

``--follow DIR`` tails a live node's ``__cluster_metadata-0`` directory instead, appending new records
as batches land (every ``kraftlake.ingest.follow.poll.ms``), until stopped (SIGINT/SIGTERM); it exits 1
if the node's log was rewritten under records already ingested (``kraftlake.storage.follow``).

    ./spark-submit.sh jobs/ingest.py --warehouse W path/to/__cluster_metadata-0 events.jsonl
    ./spark-submit.sh jobs/ingest.py --warehouse W --follow /var/lib/kafka/__cluster_metadata-0
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import pyarrow.compute as pc

from kraftlake.cli.config import TEXT, add_common_arguments, add_format_argument, config_from_args
from kraftlake.cli.launcher import FAILED, PATH_ERRORS, UserError, error_line
from kraftlake.cli.runtime import meter, open_tables
from kraftlake.codec.bounds import Limits
from kraftlake.metadata.config import Config
from kraftlake.metadata.progress import NEVER
from kraftlake.storage import DeltaRsTables
from kraftlake.storage.follow import Follower, FollowError, print_poll
from kraftlake.storage.ingest import HistoryConflict, SourceSummary, StrictModeError, ingest, sources_exist
from kraftlake.storage.pieces import DecodeFailure

if TYPE_CHECKING:
    from kraftlake.spark.decoders import SparkDecoders

DECODERS = "kraftlake.ingest.decoders"
LOCAL, SPARK = "local", "spark"


def print_summary(summary: SourceSummary, warehouse: str = "W", file: TextIO | None = None) -> None:
    """What an ingest did to one source: the ingest job's output (stdout), another job's narrative (``file``)."""
    if summary.status == "already ingested":
        print(f"{summary.source} ({summary.kind}): already ingested, nothing added", file=file)
        return
    span = "no new records" if summary.first_offset is None else \
        f"offsets {summary.first_offset}..{summary.last_offset}"
    rate = summary.records / summary.seconds if summary.seconds else 0.0
    print(f"{summary.source} ({summary.kind}): {summary.records:,} records, {span}, "
          f"{summary.bytes:,} bytes read, {summary.rejected} rejected, {summary.seconds:.2f} s "
          f"({rate:,.0f} records/s)", file=file)
    for line in summary.notes(warehouse):
        print(f"  {line}", file=file)
    for type_, count in sorted(summary.by_type.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {type_:<40} {count:>12,}", file=file)
    if summary.quorum_state is not None:
        print(f"  quorum-state: {json.dumps(summary.quorum_state)}", file=file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*", help="partition directories, segments, snapshots, .jsonl, .avro")
    parser.add_argument("--follow", metavar="DIR",
                        help="tail a live node's __cluster_metadata-0 directory until stopped (no other sources)")
    history = parser.add_mutually_exclusive_group()
    history.add_argument("--full-history", action="store_true",
                         help="for a directory: read every segment from its first record, ignoring snapshots")
    history.add_argument("--from-snapshot", action="store_true",
                         help="for a directory: the newest snapshot, then the records after it (Kafka's loader)")
    add_format_argument(parser, "the summary")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if bool(args.follow) == bool(args.sources):
        parser.error("give sources to ingest, or --follow DIR, not both")
    config = config_from_args(args)
    if args.follow:
        return follow(config, args.follow)
    tables = open_tables(config)

    def printer(summary: SourceSummary) -> None:
        if args.format == TEXT:
            print_summary(summary, tables.root)
        else:
            print(json.dumps(summary.as_dict(), default=str))
        for warning in summary.warnings(tables.root):
            print(f"ingest: warning: {warning}", file=sys.stderr)

    try:
        sources_exist(args.sources)  # (``ingest`` asks too: here, before a Spark session is started for nothing)
        with spark_decoders(config) if config.get_str(DECODERS, choices=(LOCAL, SPARK)) == SPARK \
                else nullcontext() as decoders:
            summaries = ingest(tables, args.sources, strict=config.get_bool("kraftlake.strict"),
                               full_history=args.full_history, from_snapshot=args.from_snapshot,
                               batch_records=config.get_int("kraftlake.ingest.batch.records", minimum=1),
                               meter=lambda source: meter(config, f"ingest {source}"), on_source=printer,
                               limits=Limits.from_settings(config),
                               workers=config.get_int("kraftlake.ingest.workers", minimum=0),
                               workers_min_bytes=config.get_int("kraftlake.ingest.workers.min.bytes", minimum=0),
                               compact_files=config.get_int("kraftlake.ingest.compact.files", minimum=0),
                               decoders=decoders)
    except (StrictModeError, DecodeFailure) as exc:
        print(f"ingest: {exc}; nothing of this source was committed", file=sys.stderr)
        return FAILED
    except HistoryConflict as exc:
        print(f"ingest: {exc}", file=sys.stderr)
        return FAILED
    except (ValueError, *PATH_ERRORS) as exc:
        raise UserError(error_line(exc)) from None
    rejected = sum(s.rejected for s in summaries)
    if args.format == TEXT:
        records = sum(s.records for s in summaries)
        print(f"total: {records:,} records from {len(summaries)} source(s) into {tables.path('metadata_log')}, "
              f"{rejected} rejected")
    # not a log at all (even when ingested before), or a log of which not one record could be read
    unreadable = [s for s in summaries if s.kind == "unknown" or s.status == "ingested" and s.rejected
                  and not s.records and not s.existing.records and not s.occupied.records]
    if rejected > sum(s.rejected for s in unreadable):
        print(f"ingest: {rejected} bad part(s) written to {tables.path('rejected')}; "
              "query them with jobs/sql.py \"SELECT * FROM rejected\"", file=sys.stderr)
    if unreadable:
        raise UserError("; ".join(nothing_read(tables, s) for s in unreadable))
    return 0


def spark_decoders(config: Config) -> SparkDecoders:
    """Spark's tasks as the ingest's decoders, in the job's session (``get_spark``: spark-submit's master).
    Starting the session takes seconds before the first record is read: said on stderr (as the controller
    says its own), so that a small log's ingest does not look stuck."""
    from kraftlake.spark.decoders import SparkDecoders
    from kraftlake.spark.session import get_spark

    say = config.get_str("kraftlake.progress") != NEVER
    if say:
        print(f"[ingest] starting a Spark session: {DECODERS}={SPARK}", file=sys.stderr, flush=True)
    started = time.monotonic()
    context = get_spark(config, "kraftlake-ingest").sparkContext
    if say:
        print(f"[ingest] Spark session ready in {time.monotonic() - started:.1f} s ({context.master}, "
              f"{context.defaultParallelism} core(s) now)", file=sys.stderr, flush=True)
    return SparkDecoders(context)


def nothing_read(tables: DeltaRsTables, summary: SourceSummary) -> str:
    """Why not one record of a source could be read: its first rejection, as ``rejected`` keeps it."""
    rows = tables.read_arrow("rejected", ["position", "error", "reason"],
                             (pc.field("stage") == "ingest") & (pc.field("source") == summary.source))
    first = min(rows.to_pylist(), key=lambda r: (r["position"] is None, r["position"] or 0), default=None)
    why = "" if first is None else f": {first['error']}: {first['reason']}"
    more = f" (and {summary.rejected - 1} more bad part(s))" if summary.rejected > 1 else ""
    return f"{summary.source}: nothing could be read{why}{more}; the rejection is in {tables.path('rejected')}"


def follow(config: Config, directory: str) -> int:
    """Tail ``directory`` until SIGINT/SIGTERM. Commits go through delta-rs: no Spark session, no JVM, so
    the follower is a light service next to the node (see docs/deployment.md)."""
    if not Path(directory).is_dir():
        raise UserError(f"--follow {directory}: not a directory")
    tables = open_tables(config)
    follower = Follower(tables, directory, strict=config.get_bool("kraftlake.strict"),
                        limits=Limits.from_settings(config),
                        compact_files=config.get_int("kraftlake.ingest.compact.files", minimum=0))
    stopping = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: stopping.set())
    poll_ms = config.get_int("kraftlake.ingest.follow.poll.ms", minimum=1)
    print(f"[follow] {directory} into {tables.path('metadata_log')}, every {poll_ms} ms", file=sys.stderr, flush=True)
    try:
        follower.run(poll_ms, stopping.is_set, lambda result: print_poll(result, sys.stderr))
    except StrictModeError as exc:
        print(f"ingest --follow: {exc}; nothing of that poll was committed", file=sys.stderr)
        return 1
    except (FollowError, OSError) as exc:
        print(f"ingest --follow: {exc}", file=sys.stderr)
        return 1
    print(f"[follow] stopped at offset {follower.next_offset}; start again to resume there", file=sys.stderr)
    return 0
