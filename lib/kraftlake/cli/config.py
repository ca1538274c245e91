"""The command-line face of the settings: the options every job shares, layered over the defaults."""

from __future__ import annotations

import argparse

from kraftlake.metadata.config import ENGINES, Config, load_layers, parse_override
from kraftlake.metadata.progress import ALWAYS, NEVER

__all__ = ["TEXT", "JSON", "add_common_arguments", "add_format_argument", "config_from_args"]

TEXT, JSON = "text", "json"


def add_common_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every job shares, so ``--warehouse`` means the same thing everywhere."""
    group = parser.add_argument_group("kraftlake configuration")
    group.add_argument("--warehouse", metavar="PATH",
                       help="directory or URI of the Delta tables (kraftlake.warehouse)")
    group.add_argument("--conf-file", metavar="FILE",
                       help="properties file layered over conf/kraftlake.properties")
    group.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                       help="set one setting (repeatable); wins over --conf-file")
    group.add_argument("--strict", action="store_const", const=True, default=None,
                       help="stop at the first bad input event instead of writing it to `rejected` (kraftlake.strict)")
    group.add_argument("--engine", choices=ENGINES,
                       help="Delta storage engine (kraftlake.engine)")
    group.add_argument("--progress", dest="progress", action="store_const", const=ALWAYS, default=None,
                       help="progress lines on stderr even when it is not a terminal (kraftlake.progress)")
    group.add_argument("--no-progress", dest="progress", action="store_const", const=NEVER,
                       help="no progress lines (kraftlake.progress=never)")
    return parser


def add_format_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--format {text,json}``: the same two words in every job that has both (``table``, the older name of
    ``text`` in some jobs, is still taken)."""
    parser.add_argument("--format", choices=(TEXT, JSON), default=TEXT, type=lambda v: TEXT if v == "table" else v,
                        help=f"{what}: text for people (default), json for programs (one object per line)")


def config_from_args(args: argparse.Namespace) -> Config:
    """Build the Config for parsed arguments; the dedicated flags win over ``--override``."""
    overrides = dict(parse_override(e) for e in (getattr(args, "override", None) or []))
    flags: dict[str, str] = {}
    warehouse = getattr(args, "warehouse", None)
    if warehouse is not None:
        flags["kraftlake.warehouse"] = warehouse
    if getattr(args, "strict", None):
        flags["kraftlake.strict"] = "true"
    engine = getattr(args, "engine", None)
    if engine is not None:
        flags["kraftlake.engine"] = engine
    progress = getattr(args, "progress", None)
    if progress is not None:
        flags["kraftlake.progress"] = progress
    return load_layers(getattr(args, "conf_file", None),
                       [(overrides, "--override"), (flags, "--warehouse/--engine/--strict/--progress")])
