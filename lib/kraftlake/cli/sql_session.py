"""One SQL session of jobs/sql.py: its statements run, their rows shown, their errors said in one line.

Shared by the three ways statements arrive (QUERY, -f FILE or stdin, and the shell).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kraftlake.cli.output import json_line, print_table
from kraftlake.cli.statements import Statement, split_statements
from kraftlake.spark.cancel import cancellable
from kraftlake.spark.catalog import Catalog, NotInWarehouse, missing_relation
from kraftlake.spark.views import VIEWS, QueryError, query_errors

FORMATS = ("text", "json")

# What to run for a table that is not there yet, by the writer schemas/tables names (kraftlake.writers);
# the quorum query runs inside jobs/controller.py.
WRITER_COMMANDS = {
    "ingest": "jobs/ingest.py --warehouse {w} LOG_DIR",
    "controller": "jobs/controller.py --warehouse {w} --once",
    "quorum": "jobs/controller.py --warehouse {w} --once",
}


@dataclass
class Session:
    """One SparkSession's statements and how their results are shown."""

    catalog: Catalog
    format: str
    max_rows: int
    timing: bool

    @property
    def root(self) -> str:
        return self.catalog.warehouse.root

    def run_all(self, lines: Iterable[str], source: str | None) -> int:
        """The statements of ``lines``, each run as soon as its `;` arrives (stdin may be a live pipe);
        the first that fails stops the run: exit 1, its line named after ``source`` (None: unnamed)."""
        buffer, first_line = "", 1

        def run(statement: Statement) -> bool:
            line = first_line + statement.line - 1
            return self.run(statement.text, "" if source is None else f"{source}{line}")

        try:
            for line in lines:
                buffer += line
                split = split_statements(buffer)
                if not all(run(statement) for statement in split.statements):
                    return 1
                first_line += buffer.count("\n", 0, split.end)
                buffer = buffer[split.end:]
            rest = split_statements(buffer).rest
            if rest is not None and not run(rest):
                return 1
        except KeyboardInterrupt:
            print("sql: cancelled", file=sys.stderr)
            return 130
        return 0

    def run(self, statement: str, where: str = "") -> bool:
        """Run one statement and print its rows (stdout) or its error (one line on stderr); whether it
        succeeded. ``where`` names it in the error (``FILE:LINE``). Ctrl-C cancels it: KeyboardInterrupt."""
        started = time.monotonic()
        try:
            shown, more = cancellable(self.catalog.spark, statement, lambda: self._show(statement))
        except NotInWarehouse as exc:
            return self.fail(where, not_in_warehouse(exc, self.root))
        except QueryError as exc:
            return self.fail(where, self._explain(exc))
        if shown is not None and (self.timing or self.format != "json"):
            footer = f"{shown} row(s)" + (f" in {time.monotonic() - started:.2f} s" if self.timing else "")
            footer += " (more rows not shown: raise --max-rows or use --format json)" if more else ""
            print(footer, file=sys.stderr if self.format == "json" else sys.stdout, flush=True)
        return True

    def _show(self, statement: str) -> tuple[int | None, bool]:
        """Rows shown (None for a statement without columns) and whether there were more."""
        with query_errors():
            frame = self.catalog.sql(statement)
            if not frame.columns:
                return None, False
            if self.format == "json":
                count = 0
                for row in frame.toLocalIterator():
                    print(json_line(row.asDict(recursive=True)))
                    count += 1
                sys.stdout.flush()
                return count, False
            rows = frame.limit(self.max_rows + 1).collect()
        shown = print_table(frame.columns, [tuple(r) for r in rows[:self.max_rows]])
        return shown, len(rows) > self.max_rows

    def fail(self, where: str, message: str) -> bool:
        print(f"sql: {where}{': ' if where else ''}{message}", file=sys.stderr, flush=True)
        return False

    def _explain(self, exc: QueryError) -> str:
        """Spark's error in one line; for a name that is neither a table nor a view, what there is."""
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "failed")
        name = missing_relation(exc.__cause__) if exc.__cause__ is not None else None
        if name is None:
            return first
        tables = ", ".join(self.catalog.warehouse.names()) or "none"
        return (f"no table or view `{name}` in {self.root} (its tables: {tables}; "
                f"its views: {', '.join(view.name for view in VIEWS)})")


def not_in_warehouse(exc: NotInWarehouse, root: str) -> str:
    """What to run before ``exc.name`` can be queried, in one line."""
    commands = [WRITER_COMMANDS[w].format(w=root) for w in exc.writers if w in WRITER_COMMANDS]
    jobs = list(dict.fromkeys(command.split()[0] for command in commands))
    writers = f"{' or '.join(jobs) or 'no job'} {'writes' if len(jobs) <= 1 else 'write'}"
    why = f"{writers} it" if exc.table == exc.name else f"it reads `{exc.table}`, which {writers}"
    return f"`{exc.name}` is not in {root} yet: {why}" + (f"; run ./spark-submit.sh {commands[0]} first"
                                                          if commands else "")
