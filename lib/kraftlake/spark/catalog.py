"""The warehouse in one SparkSession: every table and view by its name, for as long as the session lives.

A statement may name any table of the warehouse or any view of ``kraftlake.spark.views``. Registering
them all costs a Spark analysis each, most of which a session never uses, so a name is registered the
first time Spark reports it missing (the statement is then run again); SHOW TABLES / SHOW VIEWS, which
list only what is registered, get everything first. ``register_all`` is there for sessions whose clients
do not come through ``sql`` (a SQL server, a notebook).

A registered table is a snapshot: the warehouse's data source plans its files when it is registered, so
a query would not see rows committed afterwards. Each table's Delta table id and version are therefore
remembered, and ``refresh`` (run before every statement by ``sql``) registers again the tables that moved
on and drops those that are gone (``controller --reset``). Views are kept as SQL text and so always read
the tables as they are registered now.

pyspark is imported inside the functions: the CLI imports this module to parse its arguments, and that
must not load Spark.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltalake.exceptions import TableNotFoundError

from kraftlake.metadata.tables import table_avro, table_names, table_role
from kraftlake.spark.views import VIEWS, View
from kraftlake.storage import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Catalog", "Entry", "NotInWarehouse", "first_sentence"]

MISSING = "TABLE_OR_VIEW_NOT_FOUND"
LISTINGS = ("ShowTables", "ShowTablesExtended", "ShowViews")  # Spark's plans of SHOW TABLES / VIEWS
_VIEWS = {view.name: view for view in VIEWS}
_PART = re.compile(r"`((?:[^`]|``)*)`|([^.`]+)")


@dataclass(frozen=True)
class Entry:
    """A name a statement can use, for listings: ``present`` says whether the warehouse has it now;
    ``missing`` names the table that keeps it out (the table itself, or one a view reads)."""

    name: str
    kind: str  # table | view
    doc: str
    present: bool
    missing: str | None = None


class NotInWarehouse(Exception):
    """``name`` is one of the warehouse's tables or views, but the table ``table`` (``name`` itself, or one
    that the view reads) has not been written yet, by any of ``writers`` (schemas/tables: kraftlake.writers)."""

    def __init__(self, name: str, table: str, writers: tuple[str, ...]) -> None:
        super().__init__(f"{name} is not in the warehouse yet" + (f" (it reads {table})" if table != name else ""))
        self.name, self.table, self.writers = name, table, writers


def first_sentence(doc: str) -> str:
    """The first sentence of a schema's doc: what a one-line listing shows."""
    end = doc.find(". ")
    return doc if end < 0 else doc[:end + 1]


def missing_relation(exc: BaseException) -> str | None:
    """The unqualified name of the table or view Spark could not find, lower-cased (Spark's names are
    case-insensitive), if ``exc`` says that; None for any other error or a qualified name."""
    from pyspark.errors import AnalysisException

    if not isinstance(exc, AnalysisException) or exc.getCondition() != MISSING:
        return None
    relation = (exc.getMessageParameters() or {}).get("relationName", "")
    parts = [quoted.replace("``", "`") if quoted is not None and plain == "" else plain
             for quoted, plain in _PART.findall(relation)]
    return parts[0].lower() if len(parts) == 1 else None


class Catalog:
    """The tables and views of ``warehouse`` in its SparkSession (see the module's doc)."""

    def __init__(self, warehouse: Warehouse) -> None:
        if warehouse.spark is None:
            raise ValueError("a Catalog registers tables in a SparkSession: Warehouse(..., spark=session)")
        self.warehouse = warehouse
        self.spark = warehouse.spark
        self._tables: dict[str, tuple[str, int]] = {}  # registered: the snapshot registered (``_snapshot``)
        self._views: set[str] = set()
        self._lock = threading.RLock()  # a refresher thread (the SQL server) against statements
        self._watching: list[tuple[threading.Event, threading.Thread]] = []
        from pyspark.logger import PySparkLogger

        # A failed statement's error reaches the caller; pyspark would also log it, with the JVM's trace.
        for logger in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(logger).setLevel(logging.CRITICAL)
        # the names are this warehouse's from now on: none may answer with another one's tables
        for name in {*table_names(), *_VIEWS, *warehouse.names()}:
            self.spark.catalog.dropTempView(name)

    def sql(self, statement: str) -> DataFrame:
        """``spark.sql(statement)`` over the warehouse as it is now: the tables and views it names are
        registered first if they were not, and again if their table moved on since.

        Raises ``NotInWarehouse`` for a table the warehouse does not have yet (or a view reading one),
        and Spark's own errors otherwise."""
        from pyspark.errors import AnalysisException

        with self._lock:
            self.refresh()
            if self._lists_tables(statement):
                self.register_all()
            resolved: set[str] = set()
            while True:
                try:
                    return self.spark.sql(statement)
                except AnalysisException as exc:
                    name = missing_relation(exc)
                    if name is None or name in resolved or not self.resolve(name):
                        raise
                    resolved.add(name)

    def _lists_tables(self, statement: str) -> bool:
        """Whether Spark parses ``statement`` as SHOW TABLES / SHOW VIEWS, which list only what is
        registered: they get everything. A statement that does not parse is left to ``spark.sql``."""
        from py4j.protocol import Py4JJavaError

        parser = self.spark._jsparkSession.sessionState().sqlParser()
        try:
            kind = parser.parsePlan(statement).getClass().getSimpleName()
        except Py4JJavaError:  # Spark's ParseException, which spark.sql reports
            return False
        return kind in LISTINGS

    def resolve(self, name: str) -> bool:
        """Register ``name`` if it is a table of the warehouse or one of the views (with the tables it
        reads); False when it is neither. Raises ``NotInWarehouse`` for one not written yet."""
        with self._lock:
            if name in self._tables or name in self._views:
                return True
            if name in _VIEWS:
                self._create(_VIEWS[name])
                return True
            if self.warehouse.exists(name):
                self._register(name)
                return True
            if name in table_names():
                raise NotInWarehouse(name, name, tuple(table_role(name).get("writers", ())))
            return False

    def resolve_if_present(self, name: str) -> bool:
        """Register table ``name`` when the warehouse has it (for a view that reads it if it is there)."""
        return self.warehouse.exists(name) and self.resolve(name)

    def _create(self, view: View) -> None:
        from pyspark.errors import AnalysisException

        resolved: set[str] = set()
        while True:
            try:
                sql = view.sql(self) if callable(view.sql) else view.sql
                if sql is None:
                    raise NotInWarehouse(view.name, view.needs, tuple(table_role(view.needs).get("writers", ())))
                self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view.name} AS {sql}")
                self._views.add(view.name)
                return
            except AnalysisException as exc:
                table = missing_relation(exc)
                if table is None or table in resolved:
                    raise
                resolved.add(table)
                try:
                    known = self.resolve(table)
                except NotInWarehouse as missing:
                    raise NotInWarehouse(view.name, missing.table, missing.writers) from None
                if not known:
                    raise

    def _register(self, name: str) -> None:
        snapshot = self._snapshot(name)  # before the read: a commit in between is registered again next time
        self.warehouse.read_df(name).createOrReplaceTempView(name)
        if snapshot is not None:
            self._tables[name] = snapshot

    def _snapshot(self, name: str) -> tuple[str, int] | None:
        """Which table ``name`` is (Delta's table id: a table deleted and created again, as by ``controller
        --reset``, is another table, whatever its version) and its version; None once it is gone."""
        try:
            table = self.warehouse.table(name)
        except TableNotFoundError:
            return None
        return table.metadata().id, table.version()

    def refresh(self) -> list[str]:
        """Register again every registered table whose Delta table moved on, and drop those that are gone;
        the names registered again."""
        again = []
        with self._lock:
            for name, registered in list(self._tables.items()):
                now = self._snapshot(name)
                if now is None:
                    del self._tables[name]
                    self.spark.catalog.dropTempView(name)
                elif now != registered:
                    self._register(name)
                    again.append(name)
        return again

    def register_all(self) -> list[str]:
        """Every table the warehouse has and every view whose tables it has, registered now (and the
        registered tables refreshed); the names, tables first."""
        with self._lock:
            self.refresh()
            tables = self.warehouse.names()
            for name in tables:
                self.resolve(name)
            views = []
            for view in VIEWS:
                try:
                    self.resolve(view.name)
                except NotInWarehouse:
                    continue
                views.append(view.name)
            return tables + views

    def watch(self, every_s: float, on_error: Callable[[Exception], None]) -> None:
        """Keep registering new tables and refreshing moved ones every ``every_s`` seconds in a thread, until
        ``close``: for clients whose statements do not come through ``sql`` (JDBC, a notebook's spark.sql)."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                try:
                    self.register_all()
                except Exception as exc:  # noqa: BLE001 - reported, and the next round tries again
                    on_error(exc)

        thread = threading.Thread(target=loop, name="kraftlake-catalog-refresh", daemon=True)
        thread.start()
        self._watching.append((stop, thread))

    def close(self) -> None:
        """Stop ``watch``'s thread (the registered tables and views stay)."""
        for stop, thread in self._watching:
            stop.set()
            thread.join()
        self._watching.clear()

    def entries(self) -> list[Entry]:
        """Every table (those ``schemas/tables`` declares, and any other Delta table of the warehouse) and
        every view, with its one-line description and whether the warehouse has it now. Views are
        registered to find out, with the tables they read."""
        present = set(self.warehouse.names())
        found = []
        for name in sorted(set(table_names()) | present):
            doc = first_sentence(table_avro(name).get("doc", "")) if name in table_names() else ""
            found.append(Entry(name, "table", doc, name in present, None if name in present else name))
        for view in VIEWS:
            try:
                self.resolve(view.name)
                found.append(Entry(view.name, "view", view.doc, True))
            except NotInWarehouse as missing:
                found.append(Entry(view.name, "view", view.doc, False, missing.table))
        return found

    def columns(self, name: str) -> list[tuple[str, str, str]]:
        """``name``'s columns: name, Spark type and, for a table, the doc its schema gives the column.
        Raises ``NotInWarehouse``, or ``KeyError`` for a name that is neither a table nor a view."""
        if not self.resolve(name.lower()):
            raise KeyError(name)
        docs = _column_docs(name.lower())
        return [(f.name, f.dataType.simpleString(), docs.get(f.name, "")) for f in self.spark.table(name).schema]


def _column_docs(name: str) -> dict[str, str]:
    if name not in table_names():
        return {}
    avro = table_avro(name)
    base = _column_docs("metadata_log") if avro.get("kraftlake", {}).get("extends") == "metadata_log" else {}
    return {**base, **{f["name"]: f.get("doc", "") for f in avro["fields"]}}
