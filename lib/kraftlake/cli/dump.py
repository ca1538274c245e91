"""Print the records of Kafka metadata log files, one JSON object per line.

Like ``kafka-dump-log.sh --cluster-metadata-decoder``: segments (``*.log``), snapshots
(``*.checkpoint``) or whole ``__cluster_metadata-0`` directories (read as ingest reads them: the whole
log when the segments start at offset 0, else the snapshot that bridges to them and the records after
it). Field names are Kafka's, UUIDs in Kafka's text form. Damaged parts are reported on stderr with file,
byte position and offset, and the dump goes on (``--strict``: stop with exit code 1).

    ./spark-submit.sh jobs/dump.py path/to/00000000000000000000.log
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kraftlake.cli.launcher import FAILED, PATH_ERRORS, UserError, error_line
from kraftlake.cli.output import json_line
from kraftlake.codec.messages import as_written
from kraftlake.metadata.rejections import Rejection
from kraftlake.metadata.schemas import registry
from kraftlake.storage.ingest import StrictModeError, detect_kind, read_source

FIELDS = ("offset", "leader_epoch", "timestamp", "type", "version", "data")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="segment, snapshot or partition directory")
    parser.add_argument("--full-history", action="store_true",
                        help="for a directory: every segment from its first record, ignoring snapshots")
    parser.add_argument("--strict", action="store_true", help="stop at the first damaged part (exit 1)")
    args = parser.parse_args(argv)
    damaged = 0
    for name in args.paths:
        path = Path(name)
        if not path.exists():
            raise UserError(f"{name}: no such file or directory")
        try:
            damaged += dump(path, args.full_history, args.strict)
        except (ValueError, *PATH_ERRORS) as exc:
            raise UserError(error_line(exc)) from None
        except StrictModeError as exc:
            print(f"dump: {exc}", file=sys.stderr)
            return FAILED
    if damaged:
        print(f"dump: {damaged} damaged part(s) skipped; see the messages above", file=sys.stderr)
    return 0


def dump(path: Path, full_history: bool, strict: bool) -> int:
    """Print ``path``'s records; the number of damaged parts. Damage is reported from the first record on
    (what came before it, then as it is met), so that a source with nothing to read at all (not a log) is
    one error, not a list."""
    waiting: list[Rejection] = []
    records = damaged = 0
    for item in read_source(path, detect_kind(path), full_history):
        if isinstance(item, Rejection):
            if strict:
                raise StrictModeError(item)
            damaged += 1
            waiting.append(item)
        else:
            records += 1
        if records:
            for rejection in waiting:
                print(f"dump: rejected: {rejection.describe()}", file=sys.stderr)
            waiting.clear()
        if not isinstance(item, Rejection):
            print(json_line(_as_dumped(item)))
    if waiting:
        more = f" (and {len(waiting) - 1} more damaged part(s))" if len(waiting) > 1 else ""
        raise UserError(f"{path}: nothing could be read: {waiting[0].error}: {waiting[0].reason}{more}")
    return damaged


def _as_dumped(item: dict) -> dict:
    row = {k: item[k] for k in FIELDS}
    spec = registry().by_name.get(item["type"])
    if spec is not None and isinstance(item["data"], dict):
        row["data"] = as_written(spec, item["data"], item["version"])
    return row
