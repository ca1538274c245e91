"""SQL text as statements: split at the semicolons Spark's parser would see as the end of a statement.

Spark SQL takes one statement per call, so a file, stdin or a QUERY argument holding several must be cut
first, and a `;` inside a string literal ('...', "..." with backslash escapes), a quoted identifier
(`...`, where a doubled backtick is one backtick), a `--` comment or a `/* */` comment (nested, as Spark
allows them) is not an end. Each statement keeps the line it starts on, so that an error can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Split", "Statement", "split_statements"]


@dataclass(frozen=True)
class Statement:
    text: str
    line: int  # 1-based line of the statement's first character in the text it was cut from


@dataclass(frozen=True)
class Split:
    """The statements a text ends, and what follows the last `;`: an unfinished statement for a shell to
    continue on its next line, or the last statement of a file that does not end in `;`."""

    statements: tuple[Statement, ...]
    rest: Statement | None  # None: nothing but blanks and comments after the last `;`
    end: int  # where the text after the last `;` starts (0 without any)
    open_quote: str | None  # the quote or comment the text ends inside (' " ` or /*), if any


def _is_blank(text: str, start: int, end: int, code: list[bool]) -> bool:
    """No character of text[start:end] outside comments other than white space."""
    return not any(code[i] and not text[i].isspace() for i in range(start, end))


def split_statements(text: str) -> Split:
    """``text`` cut at each `;` outside literals, quoted identifiers and comments; statements holding
    only comments are dropped."""
    code = [True] * len(text)  # False for characters inside comments
    ends: list[int] = []
    quote: str | None = None  # ' " ` while inside one
    depth = 0  # nesting of /* */ comments
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        pair = text[i:i + 2]
        if depth:
            if pair == "/*":
                depth += 1
                code[i] = code[i + 1] = False
                i += 2
            elif pair == "*/":
                depth -= 1
                code[i] = code[i + 1] = False
                i += 2
            else:
                code[i] = False
                i += 1
        elif quote:
            if c == "\\" and quote != "`":
                i += 2  # an escaped character, whatever it is
            else:
                if c == quote:  # a doubled quote closes and reopens: the same cut points
                    quote = None
                i += 1
        elif pair == "--":
            newline = text.find("\n", i)
            stop = n if newline < 0 else newline
            for j in range(i, stop):
                code[j] = False
            i = stop
        elif pair == "/*":
            depth = 1
            code[i] = code[i + 1] = False
            i += 2
        else:
            if c in "'\"`":
                quote = c
            elif c == ";":
                ends.append(i)
            i += 1
    statements: list[Statement] = []
    start = 0
    for end in ends:
        if not _is_blank(text, start, end, code):
            statements.append(_statement(text, start, end, code))
        start = end + 1
    rest = None if _is_blank(text, start, n, code) else _statement(text, start, n, code)
    return Split(tuple(statements), rest, start, quote or ("/*" if depth else None))


def _statement(text: str, start: int, end: int, code: list[bool]) -> Statement:
    """text[start:end] from its first character outside comments (the comments before it are dropped)."""
    first = next(i for i in range(start, end) if code[i] and not text[i].isspace())
    return Statement(text[first:end].rstrip(), text.count("\n", 0, first) + 1)
