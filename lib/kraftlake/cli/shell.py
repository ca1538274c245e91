"""Browse the metadata image at any offset or time, as ``kafka-metadata-shell.sh`` browses a snapshot.

    .venv/bin/python jobs/shell.py --warehouse W                         # the image at the log's end, interactive
    .venv/bin/python jobs/shell.py --warehouse W --offset 4200 -c "ls /topics" -c "cat /brokers/1"
    .venv/bin/python jobs/shell.py --warehouse W --time 2025-01-22T07:20:00Z -c "find /topics/orders"

The image is the pure core's replay of ``metadata_log`` (with the records ``controller_log`` holds right
after the requests that caused them, as ``check`` replays them) cut after ``--offset``, or after the
last event before the first one later than ``--time``: exactly what the controller's image was there,
every field of it, read through delta-rs without Spark. Commands: ``ls``, ``cd``, ``cat``, ``find``,
``pwd``, ``help``, ``exit``; paths may hold globs (``cat /topics/orders/*``). Output goes to stdout, one
entry per line; a path that is not there is said on stderr (with ``-c``: exit code 2, nothing after it run).
"""

from __future__ import annotations

import argparse
import fnmatch
import posixpath
import shlex
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from itertools import takewhile
from typing import Callable, TextIO

from kraftlake.cli.check import warehouse_events
from kraftlake.cli.config import add_common_arguments, config_from_args
from kraftlake.cli.launcher import UserError
from kraftlake.cli.report import parse_time
from kraftlake.cli.runtime import storage_options, warehouse_root
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.nodes import Node, image_tree
from kraftlake.image.replay import replay
from kraftlake.metadata.config import Config

HELP = """Commands (paths absolute or from the current directory; globs * ? [...] allowed):
  ls [PATH...]     the names in a directory (a leaf: its own name)
  cd [PATH]        change directory (default /)
  cat PATH...      a leaf's content
  find [PATH...]   every path under PATH (default: the current directory)
  pwd              the current directory
  help             this text
  exit             leave the shell (also Ctrl-D)"""


class NoSuchNode(Exception):
    """A path the image does not have, or a command used on the wrong kind of node."""


def _position(event: dict) -> int:
    """The offset an event belongs to: its own, or (a controller record) the request's that caused it."""
    cause = event.get("cause_offset")
    return event["offset"] if cause is None else cause


def image_at(events: Iterator[dict], offset: int | None = None, time_ms: int | None = None
             ) -> tuple[ClusterImage, dict | None]:
    """The image after every event up to ``offset`` (included), or up to the first event later than
    ``time_ms`` (excluded), or after them all; and the last event replayed (None: none)."""
    if offset is not None:
        events = takewhile(lambda e: _position(e) <= offset, events)
    if time_ms is not None:
        events = takewhile(lambda e: e["timestamp"] <= time_ms, events)
    image, last = ClusterImage(), None
    for event in events:
        replay(image, event)
        last = event
    return image, last


class Shell:
    """The commands over one image's tree; ``out`` gets what they print, errors raise ``NoSuchNode``."""

    def __init__(self, tree: dict[str, Node], out: TextIO) -> None:
        self.tree = tree
        self.cwd = "/"
        self.out = out
        self.commands: dict[str, Callable[[list[str]], None]] = {
            "ls": self.ls, "cd": self.cd, "cat": self.cat, "find": self.find, "pwd": self.pwd, "help": self.help}

    def run(self, line: str) -> bool:
        """Run one command line; False on ``exit``."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise NoSuchNode(f"cannot read {line!r}: {exc}") from None
        if not words:
            return True
        if words[0] in ("exit", "quit"):
            return False
        command = self.commands.get(words[0])
        if command is None:
            raise NoSuchNode(f"{words[0]}: no such command (help lists them)")
        command(words[1:])
        return True

    def _say(self, text: str) -> None:
        print(text, file=self.out)

    def _resolve(self, path: str) -> list[tuple[str, Node]]:
        """The nodes ``path`` names (several when it holds globs), as (absolute path, node)."""
        parts = [p for p in posixpath.normpath(posixpath.join(self.cwd, path)).split("/") if p]
        found: list[tuple[str, Node]] = [("/", self.tree)]
        for part in parts:
            found = [(posixpath.join(at, name), child) for at, node in found if isinstance(node, dict)
                     for name, child in node.items() if name == part or (_is_glob(part) and fnmatch.fnmatchcase(name, part))]
        if not found:
            raise NoSuchNode(f"{path}: no such node")
        return found

    def ls(self, args: list[str]) -> None:
        for at, node in (n for path in args or ["."] for n in self._resolve(path)):
            if len(args) > 1 and isinstance(node, dict):
                self._say(f"{at}:")
            for name in (node if isinstance(node, dict) else [posixpath.basename(at)]):
                self._say(name)

    def cd(self, args: list[str]) -> None:
        targets = self._resolve(args[0] if args else "/")
        if len(targets) != 1 or not isinstance(targets[0][1], dict):
            raise NoSuchNode(f"{args[0]}: not a directory")
        self.cwd = targets[0][0]

    def cat(self, args: list[str]) -> None:
        if not args:
            raise NoSuchNode("cat: which leaf? (cat PATH)")
        for at, node in (n for path in args for n in self._resolve(path)):
            if isinstance(node, dict):
                raise NoSuchNode(f"{at}: is a directory (ls it)")
            self._say(node)

    def find(self, args: list[str]) -> None:
        for at, node in (n for path in args or ["."] for n in self._resolve(path)):
            for path in _walk(at, node):
                self._say(path)

    def pwd(self, args: list[str]) -> None:
        self._say(self.cwd)

    def help(self, args: list[str]) -> None:
        self._say(HELP)


def _is_glob(part: str) -> bool:
    return any(c in part for c in "*?[")


def _walk(at: str, node: Node) -> Iterator[str]:
    yield at
    if isinstance(node, dict):
        for name, child in node.items():
            yield from _walk(posixpath.join(at, name), child)


def _describe(last: dict | None, asked: str) -> str:
    if last is None:
        return f"the image at {asked}: empty (no event of the log is at or before it)"
    when = datetime.fromtimestamp(last["timestamp"] / 1000, timezone.utc).isoformat(timespec="milliseconds")
    return f"the image at {asked}: after offset {_position(last)} ({when}, {last['type']})"


def open_image(config: Config, offset: int | None, time_ms: int | None) -> tuple[ClusterImage, dict | None]:
    root = warehouse_root(config, writes=False, needs_log=True)
    return image_at(warehouse_events(root, storage_options=storage_options(config)), offset, time_ms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    at = parser.add_mutually_exclusive_group()
    at.add_argument("--offset", type=int, help="the image after this offset of metadata_log (default: the log's end)")
    at.add_argument("--time", help="the image at this event time (ISO 8601, e.g. 2025-01-22T07:20:00Z, or epoch ms)")
    parser.add_argument("-c", "--command", action="append", default=[],
                        help="run this command, then exit (repeatable, run in order)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.offset is not None and args.offset < 0:
        raise UserError(f"--offset {args.offset}: offsets start at 0")
    try:
        time_ms = parse_time(args.time)
    except ValueError as exc:
        raise UserError(f"--time: {exc}") from None
    image, last = open_image(config_from_args(args), args.offset, time_ms)
    asked = f"offset {args.offset}" if args.offset is not None else f"time {args.time}" if args.time else "the log's end"
    print(_describe(last, asked), file=sys.stderr, flush=True)
    shell = Shell(image_tree(image), sys.stdout)
    if args.command:
        for line in args.command:
            try:
                shell.run(line)
            except NoSuchNode as exc:
                raise UserError(str(exc)) from None
        return 0
    return _interactive(shell, sys.stdin)


def _interactive(shell: Shell, stdin: TextIO) -> int:
    """Read commands until ``exit`` or the end of input; a prompt only when a person types (a terminal)."""
    prompt = ">> " if stdin.isatty() else ""
    if prompt:
        print("[ kraftlake metadata shell ] help lists the commands", file=sys.stderr)
    while True:
        try:
            line = input(prompt) if prompt else stdin.readline()
        except EOFError:
            return 0
        if not prompt and not line:
            return 0
        try:
            if not shell.run(line):
                return 0
        except NoSuchNode as exc:
            print(f"shell: {exc}", file=sys.stderr, flush=True)
