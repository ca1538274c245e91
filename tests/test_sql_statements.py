"""Cutting SQL text into statements at the semicolons Spark would see (no Spark needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftlake.cli.statements import Statement, split_statements


def texts(text: str) -> list[str]:
    split = split_statements(text)
    return [s.text for s in split.statements] + ([split.rest.text] if split.rest else [])


def test_semicolons_inside_literals_identifiers_and_comments_do_not_end_a_statement() -> None:
    text = ("SELECT 'a;b', \"c;d\", `e;f` FROM t; -- not; an end\n"
            "SELECT 'it\\'s; here' /* a; /* nested; */ still; */ AS x;\n"
            "SELECT `odd``;name` FROM u")
    assert texts(text) == [
        "SELECT 'a;b', \"c;d\", `e;f` FROM t",
        "SELECT 'it\\'s; here' /* a; /* nested; */ still; */ AS x",
        "SELECT `odd``;name` FROM u",
    ]


def test_each_statement_keeps_the_line_it_starts_on() -> None:
    text = "-- questions\n\nSELECT 1;\nSELECT\n  2; SELECT 3;\n/* the last */\nSELECT 'x\ny'\n"
    split = split_statements(text)
    assert split.statements == (Statement("SELECT 1", 3), Statement("SELECT\n  2", 4), Statement("SELECT 3", 5))
    assert split.rest == Statement("SELECT 'x\ny'", 7)


def test_statements_of_only_comments_or_blanks_are_dropped() -> None:
    assert texts(";;  ; -- nothing\n;/* nor this */;\n") == []


def test_an_unfinished_text_says_what_it_is_inside_of() -> None:
    assert split_statements("SELECT 'open; still").open_quote == "'"
    assert split_statements('SELECT "open').open_quote == '"'
    assert split_statements("SELECT `open").open_quote == "`"
    assert split_statements("SELECT 1 /* a /* b */").open_quote == "/*"
    finished = split_statements("SELECT 1; -- done\n")
    assert finished.open_quote is None and finished.rest is None and finished.end == len("SELECT 1;")
    going_on = split_statements("SELECT 1;\nSELECT\n")
    assert going_on.rest == Statement("SELECT", 2) and going_on.end == len("SELECT 1;")


# Statements built from pieces that hold semicolons in every place that must not cut: code, and pieces
# that are comments or blanks only (a statement of those alone is dropped).
CODE = ["SELECT 1", "x", "'a;b'", "'it\\'s;'", '"q;"', "`i;d`", "`a``;b`", "f(1, 2)"]
NOT_CODE = ["/* c; */", "/* n /* m; */ ; */", "-- line; comment\n", "\n", "  "]
STATEMENTS = st.lists(st.sampled_from(CODE + NOT_CODE), min_size=1, max_size=6)


@given(st.lists(STATEMENTS, min_size=1, max_size=5), st.booleans())
def test_joined_statements_split_back_into_themselves(statements: list[list[str]], final_semicolon: bool) -> None:
    text = ";\n".join(" ".join(pieces) for pieces in statements) + (";" if final_semicolon else "")
    # each statement with code, from its first piece of code (the comments before it are not kept)
    expected = [" ".join(pieces[next(i for i, p in enumerate(pieces) if p in CODE):]).rstrip()
                for pieces in statements if any(p in CODE for p in pieces)]
    assert texts(text) == expected
