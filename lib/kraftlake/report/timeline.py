"""An incident as a timeline, aggregated from the warehouse's tables (no re-replay).

What an operator reads an incident by, over event time: each broker's state (registered, unfenced, in
controlled shutdown, fenced, unregistered) from the broker records of ``metadata_log`` and
``controller_log``; how many partitions were offline (no leader), under ``min.insync.replicas`` or being
reassigned, from ``partition_history``; leaderships and ISR membership gained and lost per broker; the
metadata quorum's leader and epoch (LeaderChangeMessage records); and the notable moments, each with its
log offset and the SQL that shows it.

The counts are computed column-wise (numpy over Arrow), never partition by partition in Python, and drawn
per time bucket (the most within it, so a short outage still shows): a 10^6-partition history becomes a
few hundred points. ``min.insync.replicas`` is the topic's current config (``configs``), else the cluster
default there, else ``conf/``: the history does not say what it was at the time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlake.metadata.config import defaults, setting
from kraftlake.metadata.tables import table_arrow_schema
from kraftlake.storage.deltars import DeltaRsTables

# Broker states, in the order a band legend lists them.
REGISTERED, UNFENCED, SHUTTING_DOWN, FENCED, UNREGISTERED = (
    "registered", "unfenced", "controlled shutdown", "fenced", "unregistered")
STATES = (REGISTERED, UNFENCED, SHUTTING_DOWN, FENCED, UNREGISTERED)
BROKER_RECORDS = ("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord",
                  "UnfenceBrokerRecord", "UnregisterBrokerRecord")
CONFIG_TOPIC, CONFIG_BROKER = 2, 4  # Kafka's ConfigResource.Type ids
HISTORY_COLUMNS = ["offset", "applied_offset", "timestamp", "change", "topic", "partition", "leader_before", "leader",
                   "isr_before", "isr", "adding_replicas", "removing_replicas"]
# The three partition conditions the report counts over time, with what a person calls them.
OFFLINE, UNDER_MIN_ISR, REASSIGNING = "offline", "under min.insync.replicas", "reassigning"


@dataclass
class Span:
    """A broker in one state from ``start_ms`` (log ``offset``) until the next span."""

    state: str
    start_ms: int
    offset: int


@dataclass
class Moment:
    offset: int
    timestamp: int
    what: str
    sql: str


@dataclass
class Series:
    """How many partitions were in one condition: per bucket the most at any moment within it."""

    name: str
    buckets: list[int]
    at_end: int  # at the end of the window
    worst: int  # the most at any moment of the window


@dataclass
class Timeline:
    start_ms: int
    end_ms: int
    bucket_ms: int
    buckets: int
    brokers: dict[int, list[Span]] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    leaderships_gained: Counter = field(default_factory=Counter)
    leaderships_lost: Counter = field(default_factory=Counter)
    isr_joins: Counter = field(default_factory=Counter)  # ISR expansions, per broker that joined
    isr_leaves: Counter = field(default_factory=Counter)  # ISR shrinks, per broker that left
    quorum: list[tuple[int, int, int, int]] = field(default_factory=list)  # (time, offset, leader, epoch)
    moments: list[Moment] = field(default_factory=list)
    partitions: int = 0  # partitions at the end of the window
    changes: int = 0  # partition_history rows in the window

    def bucket_start(self, i: int) -> int:
        return self.start_ms + i * self.bucket_ms


def as_millis(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Event time as epoch milliseconds, whatever unit the table stores timestamps in."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("ms", column.type.tz))
    return np.asarray(pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _rows(table: pa.Table) -> Iterator[dict]:
    """Rows as dicts with ``timestamp`` in milliseconds (for the few tables read row by row)."""
    millis = as_millis(table["timestamp"]).tolist()
    for row, ms in zip(table.to_pylist(), millis):
        row["timestamp"] = ms
        yield row


def build(tables: DeltaRsTables, start_ms: int | None = None, end_ms: int | None = None,
          topics: Iterable[str] | None = None, buckets: int = 240,
          kafka_config: Mapping[str, str] | None = None) -> Timeline:
    """The timeline of the warehouse between ``start_ms`` and ``end_ms`` (event time; default: the whole
    log), for the given topics' partitions (default: all; brokers and the quorum are always shown).
    ``kafka_config`` is what the controller ran with (its ``min.insync.replicas`` is the default)."""
    lo, hi = _time_range(tables, start_ms, end_ms)
    width = max(1, -(-(hi - lo + 1) // buckets))
    tl = Timeline(lo, hi, width, buckets)
    _brokers(tl, tables)
    _partitions(tl, tables, None if topics is None else sorted(set(topics)), kafka_config or defaults())
    _quorum(tl, tables)
    tl.moments.sort(key=lambda m: (m.offset, m.what))
    return tl


def _time_range(tables: DeltaRsTables, start: int | None, end: int | None) -> tuple[int, int]:
    if not tables.exists("metadata_log"):
        raise ValueError(f"no metadata_log table in {tables.root}: ingest a log first")
    ts = as_millis(tables.read_arrow("metadata_log", columns=["timestamp"])["timestamp"])
    if len(ts) == 0:
        raise ValueError(f"the metadata_log of {tables.root} is empty: ingest a log first")
    lo, hi = (int(ts.min()) if start is None else start), (int(ts.max()) if end is None else end)
    if hi < lo:
        raise ValueError(f"the window ends ({hi} ms) before it starts ({lo} ms)")
    return lo, hi


# -- brokers ---------------------------------------------------------------------------------------------

def _broker_events(tables: DeltaRsTables) -> list[dict]:
    """The broker records of the log and of the controller's decisions, in log order."""
    events = []
    for name in ("metadata_log", "controller_log"):
        if not tables.exists(name):
            continue
        schema = tables.table(name).schema().to_arrow()
        present = [t for t in BROKER_RECORDS if schema.get_field_index(t) >= 0]
        if not present:
            continue
        columns = ["offset", "timestamp", "type"] + present + (["seq"] if name == "controller_log" else [])
        table = tables.read_arrow(name, columns=columns, filter=pc.field("type").isin(present))
        for row in _rows(table):
            row.setdefault("seq", -1)
            events.append(row)
    events.sort(key=lambda r: (r["offset"], r["seq"]))
    return events


def broker_state(state: dict[int, tuple[bool, bool]], row: dict) -> tuple[int, str]:
    """(broker, its state now) after one broker record; ``state`` holds (fenced, in controlled shutdown)
    per registered broker, as ClusterControlManager's replay keeps them."""
    t, d = row["type"], row[row["type"]]
    if t == "RegisterBrokerRecord":
        fenced, shutting = bool(d["Fenced"]), bool(d.get("InControlledShutdown"))
        state[d["BrokerId"]] = (fenced, shutting)
        return d["BrokerId"], REGISTERED if fenced else (SHUTTING_DOWN if shutting else UNFENCED)
    if t == "UnregisterBrokerRecord":
        state.pop(d["BrokerId"], None)
        return d["BrokerId"], UNREGISTERED
    broker = d["Id"] if t in ("FenceBrokerRecord", "UnfenceBrokerRecord") else d["BrokerId"]
    fenced, shutting = state.get(broker, (True, False))
    if t == "FenceBrokerRecord" or (t == "BrokerRegistrationChangeRecord" and d["Fenced"] == 1):
        fenced = True
    elif t == "UnfenceBrokerRecord" or (t == "BrokerRegistrationChangeRecord" and d["Fenced"] == -1):
        fenced = False
    if t == "BrokerRegistrationChangeRecord" and d.get("InControlledShutdown") == 1:
        shutting = True
    state[broker] = (fenced, shutting)
    return broker, FENCED if fenced else SHUTTING_DOWN if shutting else UNFENCED


def _brokers(tl: Timeline, tables: DeltaRsTables) -> None:
    state: dict[int, tuple[bool, bool]] = {}
    for row in _broker_events(tables):
        if row["timestamp"] > tl.end_ms:
            break
        broker, now = broker_state(state, row)
        spans = tl.brokers.setdefault(broker, [])
        if spans and spans[-1].state == now:
            continue
        if row["timestamp"] <= tl.start_ms:
            spans[:] = [Span(now, tl.start_ms, row["offset"])]  # the state the window opens with
        else:
            spans.append(Span(now, row["timestamp"], row["offset"]))
    for broker, spans in tl.brokers.items():
        for span, following in zip(spans, spans[1:] + [None]):
            if span.start_ms > tl.start_ms:
                tl.moments.append(Moment(span.offset, span.start_ms, f"broker {broker}: {span.state}",
                                         _broker_sql(broker, span.offset, following and following.offset)))


def _broker_sql(broker: int, start: int, end: int | None) -> str:
    """What changed for the broker's partitions while it was in this state (until its next state)."""
    upper = "" if end is None else f" AND offset < {end}"
    return ("SELECT offset, cause, topic, partition, leader_before, leader, isr_before, isr FROM partition_history "
            f"WHERE offset >= {start}{upper} AND (leader_before = {broker} OR leader = {broker} OR "
            f"array_contains(isr_before, {broker}) OR array_contains(isr, {broker})) ORDER BY offset, topic, partition")


# -- partitions ------------------------------------------------------------------------------------------

def _min_isr(tables: DeltaRsTables, kafka_config: Mapping[str, str]) -> tuple[dict[str, int], int]:
    """Each topic's min.insync.replicas as configured now, and the default for the others: the cluster's
    dynamic default if the log set one, else the controller's configuration."""
    default = int(setting(kafka_config, "min.insync.replicas"))
    per_topic: dict[str, int] = {}
    if tables.exists("configs"):
        for r in tables.read_arrow("configs").to_pylist():
            if r["name"] != "min.insync.replicas":
                continue
            if r["resource_type"] == CONFIG_TOPIC:
                per_topic[r["resource_name"]] = int(r["value"])
            elif r["resource_type"] == CONFIG_BROKER and r["resource_name"] == "":
                default = int(r["value"])
    return per_topic, default


def _list_lengths(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _int_column(column: pa.ChunkedArray, null: int) -> np.ndarray:
    return np.asarray(pc.fill_null(column, null).to_numpy(zero_copy_only=False), dtype=np.int64)


def _as_of_sql(offset: int, condition: str) -> str:
    """The partitions in ``condition`` as of ``offset``: each one's last history row at or before it."""
    return ("SELECT topic, partition, leader, isr, adding_replicas, removing_replicas, offset AS changed_at FROM "
            "(SELECT *, row_number() OVER (PARTITION BY topic, partition ORDER BY offset DESC, applied_offset DESC) "
            f"AS n FROM partition_history WHERE offset <= {offset}) WHERE n = 1 AND change <> 'delete' AND "
            f"{condition} ORDER BY topic, partition")


SQL_CONDITIONS = {OFFLINE: "leader = -1", REASSIGNING: "(size(adding_replicas) > 0 OR size(removing_replicas) > 0)"}


def _partitions(tl: Timeline, tables: DeltaRsTables, topics: list[str] | None,
                kafka_config: Mapping[str, str]) -> None:
    if tables.exists("partition_history"):
        history = tables.read_arrow("partition_history", columns=HISTORY_COLUMNS,
                                    filter=None if topics is None else pc.field("topic").isin(topics))
    else:  # nothing replayed yet: the brokers and the quorum still have a story
        history = table_arrow_schema("partition_history").empty_table().select(HISTORY_COLUMNS)
    per_topic, default = _min_isr(tables, kafka_config)
    count_partitions(tl, history, per_topic, default, topics)


def count_partitions(tl: Timeline, history: pa.Table, per_topic: dict[str, int], default: int,
                     topics: list[str] | None = None) -> None:
    """Fill ``tl``'s series, partition count, changes and per-broker counts from ``partition_history`` rows
    (any order; ``topics`` only shapes the SQL of the moments)."""
    history = history.filter(pc.less_equal(pc.cast(history["timestamp"], pa.timestamp("ms", "UTC")),
                                           pa.scalar(tl.end_ms, pa.timestamp("ms", "UTC"))))
    n = history.num_rows
    offsets = _int_column(history["offset"], 0)
    applied = _int_column(history["applied_offset"], 0)
    times = as_millis(history["timestamp"])
    partition = _int_column(history["partition"], 0)
    encoded = pc.dictionary_encode(history["topic"].combine_chunks())
    topic_ids = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    topic_names = encoded.dictionary.to_pylist()
    min_isr = np.array([per_topic.get(t, default) for t in topic_names] or [default], dtype=np.int64)
    alive = np.asarray(pc.not_equal(history["change"], "delete").to_numpy(zero_copy_only=False), dtype=bool)
    leader = _int_column(history["leader"], -1)
    isr_len = _list_lengths(history["isr"])
    moving_now = (_list_lengths(history["adding_replicas"]) + _list_lengths(history["removing_replicas"])) > 0
    after = {OFFLINE: alive & (leader == -1), UNDER_MIN_ISR: alive & (isr_len < min_isr[topic_ids]),
             REASSIGNING: alive & moving_now}

    # Each partition's rows in its own order, to know what it was before each change.
    by_partition = np.lexsort((applied, offsets, partition, topic_ids))
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[1:] = (topic_ids[by_partition][1:] == topic_ids[by_partition][:-1]) & \
                   (partition[by_partition][1:] == partition[by_partition][:-1])
    # The level after each offset (changes at one offset land together: no half-applied state counts).
    order = np.argsort(offsets, kind="stable")
    change_offsets, first_row = np.unique(offsets[order], return_index=True)
    # Event time follows the offsets; a clock that stepped back must not unsort the search below.
    change_times = np.maximum.accumulate(times[order][first_row]) if n else times
    in_window = (change_times >= tl.start_ms) & (change_times <= tl.end_ms)
    for name in (OFFLINE, UNDER_MIN_ISR, REASSIGNING):
        flag = after[name].astype(np.int64)
        before = np.zeros(n, dtype=np.int64)
        if n > 1:
            before[by_partition[1:]] = np.where(same[1:], flag[by_partition][:-1], 0)
        delta = np.add.reduceat((flag - before)[order], first_row) if n else np.zeros(0, dtype=np.int64)
        levels = np.cumsum(delta)
        tl.series[name] = _series(tl, name, change_times, levels)
        _level_moments(tl, name, change_offsets, change_times, levels, in_window,
                       _sql_condition(name, per_topic, default, topics))
    tl.partitions = int(np.sum(alive[_last_rows(by_partition, same)])) if n else 0
    window = (times >= tl.start_ms) & (times <= tl.end_ms)
    tl.changes = int(np.sum(window))
    _per_broker(tl, history, window & (np.asarray(pc.equal(history["change"], "change").to_numpy(
        zero_copy_only=False), dtype=bool)))


def _last_rows(by_partition: np.ndarray, same: np.ndarray) -> np.ndarray:
    """Indices of each partition's last row (its state at the end of the window)."""
    last = np.ones(len(by_partition), dtype=bool)
    last[:-1] = ~same[1:]
    return by_partition[last]


def _series(tl: Timeline, name: str, times: np.ndarray, levels: np.ndarray) -> Series:
    """Per bucket the most partitions in the condition at any moment of it: every level reached by a change
    within it, and the level in force when it opened (until its first change)."""
    starts = tl.start_ms + tl.bucket_ms * np.arange(tl.buckets, dtype=np.int64)
    opened = np.searchsorted(times, starts, side="left") - 1  # the last change before each bucket
    values = np.where(opened >= 0, levels[np.maximum(opened, 0)], 0) if len(levels) else np.zeros(tl.buckets, int)
    inside = (times >= tl.start_ms) & (times <= tl.end_ms)
    if inside.any():
        idx = np.minimum((times[inside] - tl.start_ms) // tl.bucket_ms, tl.buckets - 1)
        np.maximum.at(values, idx, levels[inside])
    last = np.searchsorted(times, tl.end_ms, side="right") - 1
    return Series(name, [int(v) for v in values], int(levels[last]) if last >= 0 else 0,
                  int(values.max()) if len(values) else 0)


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _sql_condition(name: str, per_topic: dict[str, int], default: int, topics: list[str] | None) -> str:
    """The SQL for a partition in condition ``name``, with the same min.insync.replicas the counts used."""
    if name == UNDER_MIN_ISR:
        cases = "".join(f" WHEN {_sql_list([t])} THEN {v}" for t, v in sorted(per_topic.items()) if v != default)
        condition = f"size(isr) < CASE topic{cases} ELSE {default} END" if cases else f"size(isr) < {default}"
    else:
        condition = SQL_CONDITIONS[name]
    return condition if topics is None else f"{condition} AND topic IN ({_sql_list(topics)})"


def _level_moments(tl: Timeline, name: str, offsets: np.ndarray, times: np.ndarray, levels: np.ndarray,
                   in_window: np.ndarray, condition: str) -> None:
    """A moment where the count leaves zero and where it returns to it: when an outage began and ended."""
    if not len(levels):
        return
    previous = np.concatenate(([0], levels[:-1]))
    began = in_window & (previous == 0) & (levels > 0)
    ended = in_window & (previous > 0) & (levels == 0)
    for i in np.flatnonzero(began | ended):
        offset, count = int(offsets[i]), int(levels[i])
        what = f"{count:,} partition(s) {name}" if began[i] else f"no partition {name} any more"
        sql = _as_of_sql(offset, condition) if began[i] else \
            f"SELECT topic, partition, leader, isr, cause FROM partition_history WHERE offset = {offset}"
        tl.moments.append(Moment(offset, int(times[i]), what, sql))


def _per_broker(tl: Timeline, history: pa.Table, rows: np.ndarray) -> None:
    """Leaderships and ISR membership gained and lost per broker, over the window's PartitionChange rows."""
    picked = history.filter(pa.array(rows))
    if picked.num_rows == 0:
        return
    before, leader = _int_column(picked["leader_before"], -1), _int_column(picked["leader"], -1)
    moved = before != leader
    tl.leaderships_gained.update(_counts(leader[moved & (leader >= 0)]))
    tl.leaderships_lost.update(_counts(before[moved & (before >= 0)]))
    old, new = _membership(picked["isr_before"]), _membership(picked["isr"])
    tl.isr_joins.update(_counts(new[~np.isin(new, old)] & 0xFFFFFFFF))
    tl.isr_leaves.update(_counts(old[~np.isin(old, new)] & 0xFFFFFFFF))


def _membership(column: pa.ChunkedArray) -> np.ndarray:
    """(row, broker) pairs of a list column as one int64 each: set differences per row become ``isin``."""
    lists = column.combine_chunks()
    brokers = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    parents = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    return (parents << 32) | (brokers & 0xFFFFFFFF)


def _counts(values: np.ndarray) -> dict[int, int]:
    keys, counts = np.unique(values, return_counts=True)
    return {int(k): int(c) for k, c in zip(keys, counts)}


# -- the metadata quorum ---------------------------------------------------------------------------------

def _quorum(tl: Timeline, tables: DeltaRsTables) -> None:
    """The quorum's leader and epoch from the LeaderChangeMessages of the log."""
    schema = tables.table("metadata_log").schema().to_arrow()
    if schema.get_field_index("LeaderChangeMessage") < 0:
        return
    table = tables.read_arrow("metadata_log", columns=["offset", "timestamp", "leader_epoch", "LeaderChangeMessage"],
                              filter=pc.field("type") == "LeaderChangeMessage")
    for row in sorted(_rows(table), key=lambda r: r["offset"]):
        if row["timestamp"] > tl.end_ms:
            break
        leader, epoch = row["LeaderChangeMessage"]["LeaderId"], row["leader_epoch"]
        if tl.quorum and tl.quorum[-1][2:] == (leader, epoch):
            continue
        if row["timestamp"] <= tl.start_ms:
            tl.quorum[:] = [(tl.start_ms, row["offset"], leader, epoch)]
            continue
        tl.quorum.append((row["timestamp"], row["offset"], leader, epoch))
        tl.moments.append(Moment(row["offset"], row["timestamp"], f"quorum leader {leader}, epoch {epoch}",
                                 "SELECT offset, timestamp, leader_epoch, LeaderChangeMessage FROM metadata_log "
                                 f"WHERE offset = {row['offset']}"))
