"""Draw an incident: one self-contained HTML page of the warehouse's history over event time.

    ./spark-submit.sh jobs/report.py --warehouse W --out report.html [--from T] [--to T] [--topic NAME ...]
                                     [--linear-time] [--screenshot report.png]

Brokers' state bands, partitions offline and under min.insync.replicas, reassignments in progress, the
metadata quorum's leader and epoch, leaderships and ISR changes per broker, and the notable moments with
their offsets and the SQL (for jobs/sql.py) that shows each. It reads the history tables through
delta-rs (no Spark session, no replay); the controller must have replayed the log first. T is an ISO
time (UTC unless it says otherwise) or epoch ms. The stretches where something changed are drawn wide
and the quiet ones between them compressed, unless ``--linear-time``. ``--screenshot`` renders the page
with headless Chromium into a PNG. What the data holds that the report cannot use is one notice line each,
on stderr and on the page.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.launcher import FAILED, UserError
from kraftlake.cli.runtime import storage_options, warehouse_root
from kraftlake.report.html import render
from kraftlake.metadata.config import Config
from kraftlake.report.timeline import Timeline, build
from kraftlake.storage.deltars import DeltaRsTables

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
# Headless Chromium without anything that reaches out: this machine's network is closed to it.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")


def parse_time(text: str | None) -> int | None:
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither an ISO time (2026-01-30T17:23:54Z) nor epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def find_chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def chromium(page: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run headless Chromium on a local page (a fresh profile, removed after); its stdout is the result
    of ``--dump-dom``."""
    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError("no Chromium found: install Debian's `chromium` package "
                                "(apt-get install -y chromium), or put chromium on PATH")
    with tempfile.TemporaryDirectory(prefix="kraftlake-chromium-") as profile:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout, check=True)


def screenshot(page: Path, png: Path, height: int = 1400, width: int = 1100) -> None:
    chromium(page, f"--screenshot={png.resolve()}", f"--window-size={width},{height}")


def page_height(timeline: Timeline) -> int:
    """About how tall the page is (headless Chromium shoots the window, not the page): the charts, a band
    per broker, a row per broker and per moment shown."""
    rows = len(timeline.brokers) * 2 + min(len(timeline.moments), 200)
    return min(20_000, 1_060 + 27 * rows)


def write_report(root: str, out: Path, config: Config, start_ms: int | None = None, end_ms: int | None = None,
                 topics: list[str] | None = None, title: str | None = None, linear: bool = False) -> Timeline:
    """Build the warehouse's timeline and write it as one HTML page; ValueError when there is nothing to
    draw (no log yet, no replay yet, an empty window)."""
    tables = DeltaRsTables(root, storage_options(config))
    timeline = build(tables, start_ms, end_ms, topics, linear=linear)
    out.write_text(render(timeline, title or f"kraftlake: {root}", root), encoding="utf-8")
    return timeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the HTML file to write")
    parser.add_argument("--from", dest="start", help="start of the window (event time)")
    parser.add_argument("--to", dest="end", help="end of the window (event time)")
    parser.add_argument("--topic", action="append", help="only these topics' partitions (repeatable)")
    parser.add_argument("--title", help="the page's title (default: the warehouse)")
    parser.add_argument("--linear-time", action="store_true",
                        help="draw event time to scale (default: quiet stretches compressed, the rest wide)")
    parser.add_argument("--screenshot", help="also write a PNG of the page (needs Chromium)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from_args(args)
    root = warehouse_root(config, writes=False)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: {out.parent} is not a directory")
    started = time.perf_counter()
    try:
        timeline = write_report(root, out, config, parse_time(args.start), parse_time(args.end), args.topic,
                                args.title, args.linear_time)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for notice in timeline.notices:
        print(f"report: notice: {notice}", file=sys.stderr)
    print(f"report: {out} ({timeline.changes:,} partition changes, {len(timeline.brokers)} brokers, "
          f"{len(timeline.moments)} moments) in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if args.screenshot:
        try:
            screenshot(out, Path(args.screenshot), page_height(timeline))
        except (FileNotFoundError, subprocess.SubprocessError) as exc:
            print(f"report: no screenshot: {exc}", file=sys.stderr)
            return FAILED
        print(f"report: {args.screenshot}", file=sys.stderr)
    return 0
