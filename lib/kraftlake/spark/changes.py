"""A second streaming query beside the controller: one line per change of a state table, from its change feed.

    changes of <table> (Warehouse.read_changes) ──where <condition>──▶ foreachBatch: a line per row

The recipe for alerts (docs/warehouse.md, "Subscribe instead of poll"): over ``anomalies`` with
``_change_type = 'insert'`` it says each new anomaly once, as the controller's micro-batch that opened it
commits, without polling the table. Its position is the table's Delta version, kept in its own checkpoint,
so a restart goes on after the last micro-batch it finished.
"""

from __future__ import annotations

from typing import Any, Callable

from kraftlake.spark.queries import start_sink
from kraftlake.storage import Warehouse
from kraftlake.storage.deltars import CHANGE_FIELDS, CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION

CHANGE_COLUMNS = tuple(f.name for f in CHANGE_FIELDS)


def alert_line(table: str, row: dict[str, Any]) -> str:
    """``<commit time> <table> <change> column=value ...``: the row's own columns in the table's order,
    what changed first, so one line reads as the event and greps by any of its values."""
    when = row[COMMIT_TIMESTAMP]
    stamp = when.isoformat(sep=" ", timespec="milliseconds") if when is not None else "-"
    fields = " ".join(f"{k}={_text(v)}" for k, v in row.items() if k not in CHANGE_COLUMNS)
    return f"{stamp} {table} {row[CHANGE_TYPE]} version={row[COMMIT_VERSION]} {fields}"


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v) for v in value) + "]"
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return f'"{text}"' if not text or any(c.isspace() or c == '"' for c in text) else text


def start_alerts(warehouse: Warehouse, table: str, condition: str, checkpoint: str, once: bool,
                 trigger_interval_ms: int, emit: Callable[[dict[str, Any]], None],
                 starting_version: int | None = None) -> Any:
    """Start the query; ``emit`` gets each change row matching ``condition`` (Spark SQL over the table's
    columns and Delta's ``_change_type``, ``_commit_version``, ``_commit_timestamp``), in commit order.
    Without ``starting_version`` it begins with the table's rows now, as inserts (Delta's default)."""
    changes = warehouse.read_changes(table, starting_version=starting_version).where(condition)

    def write(batch: Any, txn: tuple[str, int]) -> None:
        rows = batch.toArrow().sort_by([(COMMIT_VERSION, "ascending")]).to_pylist()
        for row in rows:
            emit(row)

    return start_sink(changes, f"alerts-{table}", checkpoint, once, trigger_interval_ms, write,
                      warehouse.storage_options)
