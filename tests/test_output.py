"""The text table printer: whatever a value holds, the layout holds and the terminal gets no control."""

from __future__ import annotations

import io
import re

from kraftlake.cli.output import print_table


def table(columns: list[str], rows: list[tuple], max_width: int = 80) -> str:
    out = io.StringIO()
    print_table(columns, rows, out=out, max_width=max_width)
    return out.getvalue()


def test_a_topic_name_with_escape_sequences_and_a_newline_is_shown_escaped_on_one_line() -> None:
    # issue 28 point 9: a name that clears the screen, turns the text red and starts a fake row
    name = "orders\x1b[2J\x1b[31m\n| evil | 1 |"
    printed = table(["topic", "partition"], [(name, 0), ("payments", 1)])
    assert printed == (
        "+-------------------------------------+-----------+\n"
        "| topic                               | partition |\n"
        "+-------------------------------------+-----------+\n"
        "| orders\\x1b[2J\\x1b[31m\\n| evil | 1 | | 0         |\n"
        "| payments                            | 1         |\n"
        "+-------------------------------------+-----------+\n")


def test_no_control_or_bidi_character_reaches_the_terminal() -> None:
    hostile = "a\tb\rc\x00d\x07e\x7ff\x9bg\u202eh\u2066i\u200bj\u2028k\ufeffl"
    printed = table([hostile], [(hostile,), ({"key": hostile},)])
    lines = printed.split("\n")[:-1]
    assert all(c == " " or c.isprintable() for line in lines for c in line), printed
    assert "a\\tb\\rc\\x00d\\x07e\\x7ff\\x9bg\\u202eh\\u2066i\\u200bj\\u2028k\\ufeffl" in printed
    assert len({len(line) for line in lines}) == 1


def test_wide_characters_take_two_columns() -> None:
    assert table(["name"], [("中文",), ("abcde",)]) == (
        "+-------+\n"
        "| name  |\n"
        "+-------+\n"
        "| 中文  |\n"
        "| abcde |\n"
        "+-------+\n")


def test_long_cells_wrap_without_losing_a_character() -> None:
    words = "the partitions of broker 3 lost their leader when it shut down at offset 12897"
    printed = table(["offset", "cause"], [(12897, words), (1, "x" * 25)], max_width=20)
    assert printed == (
        "+--------+----------------------+\n"
        "| offset | cause                |\n"
        "+--------+----------------------+\n"
        "| 12897  | the partitions of    |\n"
        ":        : broker 3 lost their  :\n"
        ":        : leader when it shut  :\n"
        ":        : down at offset 12897 :\n"
        "| 1      | xxxxxxxxxxxxxxxxxxxx |\n"
        ":        : xxxxx                :\n"
        "+--------+----------------------+\n")


def test_an_escape_is_never_cut_by_a_wrap() -> None:
    printed = table(["v"], [("abcdefgh\x1b",)], max_width=10)
    assert re.findall(r"[|:] (\S*) +[|:]", printed)[1:] == ["abcdefgh", "\\x1b"]
