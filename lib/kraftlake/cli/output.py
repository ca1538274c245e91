"""Terminal output shared by the jobs: aligned tables for people, JSON lines for programs."""

from __future__ import annotations

import base64
import json
import sys
import unicodedata
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


# Characters a terminal acts on instead of showing, shown as escapes: C0 and C1 controls (newline, tab,
# ESC starting a control sequence...), format characters (the bidi overrides and isolates that reorder
# what follows, zero-width ones), line and paragraph separators, lone surrogates.
_HIDDEN = {"Cc", "Cf", "Zl", "Zp", "Cs"}
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(c: str) -> str:
    code = ord(c)
    return _NAMED.get(c) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def _glyphs(text: str) -> list[tuple[str, int]]:
    """``text`` as what the terminal is sent, piece by piece, with the columns each piece takes."""
    glyphs = []
    for c in text:
        category = unicodedata.category(c)
        if category in _HIDDEN:
            escaped = _escape(c)
            glyphs.append((escaped, len(escaped)))
        elif category in ("Mn", "Me"):  # combining marks: drawn over the character before
            glyphs.append((c, 0))
        else:
            glyphs.append((c, 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1))
    return glyphs


def _lines(text: str, max_width: int) -> list[tuple[str, int]]:
    """The cell as lines of at most ``max_width`` columns, each with its width: broken after the last
    space that fits, else where the line is full (an escape is never cut); no character is dropped."""
    lines: list[list[tuple[str, int]]] = [[]]
    for glyph, width in _glyphs(text):
        line = lines[-1]
        if line and sum(w for _, w in line) + width > max_width:
            space = max((i for i, (g, _) in enumerate(line) if g == " "), default=-1)
            lines[-1], carried = (line[:space + 1], line[space + 1:]) if space > 0 else (line, [])
            lines.append(carried)
        lines[-1].append((glyph, width))
    return [("".join(g for g, _ in line), sum(w for _, w in line)) for line in lines]


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None,
                max_width: int = 80) -> int:
    """An aligned text table like spark-sql's, safe to print on a terminal whatever the values hold.

    Characters that would act on the terminal (newline, ESC, bidi overrides...) are shown as escapes
    (``\\n``, ``\\x1b``, ``\\u202e``) and widths count terminal columns (a CJK character takes two), so
    no value can break the layout or reach the terminal as a control. A cell wider than ``max_width``
    columns is wrapped, never cut (after a space where it can): its row goes on over more lines, whose
    borders are ``:`` instead of ``|`` to show that they continue the row above. Returns the number of
    rows printed."""
    out = out or sys.stdout
    header = [_lines(name, max_width) for name in columns]
    body = [[_lines(_cell(v), max_width) for v in row] for row in rows]
    widths = [max(width for cell in column for _, width in cell) for column in zip(header, *body)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(rule, file=out)
    _print_row(header, widths, out)
    print(rule, file=out)
    for row in body:
        _print_row(row, widths, out)
    print(rule, file=out)
    return len(body)


def _print_row(cells: list[list[tuple[str, int]]], widths: list[int], out: TextIO) -> None:
    for i in range(max(len(cell) for cell in cells)):
        border = "|" if i == 0 else ":"
        parts = [cell[i] if i < len(cell) else ("", 0) for cell in cells]
        print(border + " " + f" {border} ".join(text + " " * (w - used) for (text, used), w in zip(parts, widths))
              + " " + border, file=out)
