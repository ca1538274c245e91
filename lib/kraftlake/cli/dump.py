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

from kraftlake.cli.output import json_line
from kraftlake.codec.messages import as_written
from kraftlake.metadata.rejections import Rejection
from kraftlake.metadata.schemas import registry
from kraftlake.storage.ingest import detect_kind, read_source

FIELDS = ("offset", "leader_epoch", "timestamp", "type", "version", "data")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="segment, snapshot or partition directory")
    parser.add_argument("--full-history", action="store_true",
                        help="for a directory: every segment from its first record, ignoring snapshots")
    parser.add_argument("--strict", action="store_true", help="stop at the first damaged part (exit 1)")
    args = parser.parse_args(argv)
    damaged = 0
    try:
        for name in args.paths:
            path = Path(name)
            if not path.exists():
                print(f"dump: {name}: no such file or directory", file=sys.stderr)
                return 2
            for item in read_source(path, detect_kind(path), args.full_history):
                if isinstance(item, Rejection):
                    damaged += 1
                    print(f"dump: rejected: {item.describe()}", file=sys.stderr)
                    if args.strict:
                        return 1
                    continue
                print(json_line(_as_dumped(item)))
    except BrokenPipeError:  # `| head` closed the pipe: not an error
        sys.stderr.close()
        return 0
    except (OSError, ValueError) as exc:
        print(f"dump: {exc}", file=sys.stderr)
        return 2
    if damaged:
        print(f"dump: {damaged} damaged part(s) skipped; see the messages above", file=sys.stderr)
    return 0


def _as_dumped(item: dict) -> dict:
    row = {k: item[k] for k in FIELDS}
    spec = registry().by_name.get(item["type"])
    if spec is not None and isinstance(item["data"], dict):
        row["data"] = as_written(spec, item["data"], item["version"])
    return row
