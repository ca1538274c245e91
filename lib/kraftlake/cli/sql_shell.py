"""The SQL shell: ``jobs/sql.py --warehouse W`` on a terminal.

Statements end in `;` and may span lines (the prompt says when a statement, a quote or a comment goes
on); lines are edited with readline and kept in a history file (kraftlake.sql.history.file). Backslash
commands, in the spirit of psql and kafka-metadata-shell, answer questions about the warehouse itself.
Ctrl-C cancels the statement being typed or running, Ctrl-D quits; a failed statement prints one line
and the shell goes on.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from kraftlake.cli.output import print_table
from kraftlake.cli.sql_session import FORMATS, Session, not_in_warehouse
from kraftlake.cli.statements import split_statements
from kraftlake.metadata.config import Config
from kraftlake.report.timeline import sql_string
from kraftlake.spark.catalog import NotInWarehouse
from kraftlake.spark.views import anomalies_of

PROMPT = "kraftlake> "
# the continuation prompt ends like the primary one, with what the statement is still inside of
CONTINUED = {None: "-> ", "'": "'> ", '"': '"> ', "`": "`> ", "/*": "*> "}

HELP = """\
Statements end in `;` and may span lines; Ctrl-C cancels the one being typed or running, Ctrl-D quits.
  \\tables, \\d          every table and view, with what it holds and whether the warehouse has it
  \\d NAME              the columns of a table or view
  \\anomalies           the anomalies open now (the view open_anomalies)
  \\anomalies WHAT      every anomaly, open or ended, of a kind, an entity (orders-3, broker 2) or a topic
  \\format text|json    how rows are shown (now: {format})
  \\timing              say how long each statement took, or stop saying it (now: {timing})
  \\help                this
  \\q                   quit"""


class Shell:
    """A read-eval-print loop over one ``Session``."""

    def __init__(self, session: Session, config: Config) -> None:
        self.session = session
        history = config.get_str("kraftlake.sql.history.file").strip()
        self.history = os.path.expanduser(history) if history else None
        self.commands: dict[str, Callable[[str], bool]] = {
            "\\tables": self.tables, "\\d": self.describe, "\\anomalies": self.anomalies,
            "\\format": self.set_format,
            "\\timing": self.toggle_timing, "\\help": self.help, "\\?": self.help, "\\q": self.quit,
        }

    def run(self) -> int:
        """Until Ctrl-D or \\q; the exit code (0: a shell's failed statements were answered already)."""
        editing = sys.stdout.isatty()  # input() edits with readline only when both ends are a terminal
        if editing:
            self._start_readline()
        # Ctrl-C raises KeyboardInterrupt here; the statement runner turns it into a job group cancel
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print(f"kraftlake SQL on {self.session.root}: \\tables lists the tables and views, \\help the commands, "
              "\\q quits.", file=sys.stderr)
        buffer = ""
        try:
            while True:
                open_quote = split_statements(buffer).open_quote if buffer else None
                prompt = PROMPT if not buffer else CONTINUED[open_quote].rjust(len(PROMPT))
                try:
                    line = self._read(prompt, editing)
                except KeyboardInterrupt:
                    print(file=sys.stderr)
                    buffer = ""
                    continue
                except EOFError:
                    print(file=sys.stderr)
                    return 0
                if not buffer and line.strip().startswith("\\"):
                    self._remember(line.strip(), editing)
                    if not self.command(line.strip()):
                        return 0
                    continue
                buffer += line + "\n"
                split = split_statements(buffer)
                for statement in split.statements:
                    self._remember(statement.text + ";", editing)  # recalled, it runs as it is
                    try:
                        self.session.run(statement.text)
                    except KeyboardInterrupt:
                        print("sql: cancelled", file=sys.stderr)
                buffer = buffer[split.end:] if split.rest is not None or split.open_quote else ""
        finally:
            if editing and self.history:
                self._save_history()

    def _read(self, prompt: str, editing: bool) -> str:
        if editing:
            return input(prompt)
        print(prompt, end="", file=sys.stderr, flush=True)  # stdout is for rows only
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    def command(self, line: str) -> bool:
        """Run a backslash command; False to quit."""
        name, _, argument = line.partition(" ")
        handler = self.commands.get(name)
        if handler is None:
            print(f"sql: unknown command {name}; \\help lists them", file=sys.stderr)
            return True
        return handler(argument.strip())

    def tables(self, argument: str) -> bool:
        if argument:
            print("sql: \\tables takes no argument; \\d NAME shows a table's columns", file=sys.stderr)
            return True
        try:
            entries = self.session.catalog.entries()
        except KeyboardInterrupt:
            return True
        rows = [(e.name, e.kind, e.doc if e.present else
                 f"(not in the warehouse yet{'' if e.missing == e.name else f': needs {e.missing}'}) {e.doc}")
                for e in entries]
        print_table(("name", "kind", "description"), rows)
        return True

    def describe(self, argument: str) -> bool:
        if not argument:
            return self.tables(argument)
        try:
            columns = self.session.catalog.columns(argument)
        except NotInWarehouse as exc:
            print(f"sql: {not_in_warehouse(exc, self.session.root)}", file=sys.stderr)
        except KeyError:
            print(f"sql: no table or view {argument!r}; \\tables lists them", file=sys.stderr)
        else:
            print_table(("column", "type", "doc"), columns)
        return True

    def anomalies(self, argument: str) -> bool:
        """The anomalies table's short questions, as statements: what is open now, or every episode of a
        kind, an entity or a topic (whatever kinds the table holds)."""
        try:
            self.session.run(anomalies_of(sql_string(argument)) if argument else "SELECT * FROM open_anomalies")
        except KeyboardInterrupt:
            print("sql: cancelled", file=sys.stderr)
        return True

    def set_format(self, argument: str) -> bool:
        if argument not in FORMATS:
            print(f"sql: \\format takes {' or '.join(FORMATS)} (now: {self.session.format})", file=sys.stderr)
        else:
            self.session.format = argument
        return True

    def toggle_timing(self, argument: str) -> bool:
        self.session.timing = not self.session.timing
        print(f"timing {'on' if self.session.timing else 'off'}", file=sys.stderr)
        return True

    def help(self, argument: str) -> bool:
        print(HELP.format(format=self.session.format, timing="on" if self.session.timing else "off"),
              file=sys.stderr)
        return True

    def quit(self, argument: str) -> bool:
        return False

    def _start_readline(self) -> None:
        import readline

        readline.set_auto_history(False)  # a statement is one entry, however many lines it took
        names = [*self.commands, *(e for e in self._names())]
        readline.set_completer(lambda text, state: ([n for n in names if n.startswith(text)] + [None])[state])
        readline.set_completer_delims(" \t\n;,()")
        readline.parse_and_bind("tab: complete")
        if self.history:
            try:
                readline.read_history_file(self.history)
            except OSError:
                pass  # none yet (or unreadable: this session's history still gets written if it can be)

    def _names(self) -> list[str]:
        from kraftlake.metadata.tables import table_names
        from kraftlake.spark.views import VIEWS

        return sorted({*table_names(), *self.session.catalog.warehouse.names(), *(v.name for v in VIEWS)})

    def _remember(self, entry: str, editing: bool) -> None:
        if editing:
            import readline

            entry = entry if "--" in entry else " ".join(entry.split("\n"))
            last = readline.get_current_history_length()
            if not last or readline.get_history_item(last) != entry:  # a statement run again is kept once
                readline.add_history(entry)

    def _save_history(self) -> None:
        import readline

        try:
            readline.set_history_length(1000)
            if not os.path.exists(self.history):
                os.close(os.open(self.history, os.O_WRONLY | os.O_CREAT, 0o600))  # statements may hold secrets
            readline.write_history_file(self.history)
        except OSError as exc:
            print(f"sql: history not saved to {self.history}: {exc.strerror}", file=sys.stderr)
