"""Terminal output shared by the jobs: aligned tables for people, JSON lines for programs."""

from __future__ import annotations

import base64
import json
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Iterable, Sequence, TextIO


def to_jsonable(value: Any) -> Any:
    """JSON-ready value: bytes as base64, timestamps as ISO-8601, Spark Rows as objects."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=False)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def json_line(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), separators=(", ", ": "), ensure_ascii=False)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (dict, list, tuple)) or hasattr(value, "asDict"):
        return json.dumps(to_jsonable(value), separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None,
                max_width: int = 80) -> int:
    """An aligned text table like spark-sql's; cells wider than ``max_width`` are cut with '...'."""
    out = out or sys.stdout
    cells = [[_cell(v) for v in row] for row in rows]
    cells = [[c if len(c) <= max_width else c[:max_width - 3] + "..." for c in row] for row in cells]
    widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(columns)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(rule, file=out)
    print("| " + " | ".join(n.ljust(w) for n, w in zip(columns, widths)) + " |", file=out)
    print(rule, file=out)
    for row in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |", file=out)
    print(rule, file=out)
    return len(cells)
