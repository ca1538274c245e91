"""An incident as a timeline, aggregated from the warehouse's tables (no re-replay).

What an operator reads an incident by, over event time: each broker's state (registered, unfenced, in
controlled shutdown, fenced, unregistered) from the broker records of ``metadata_log`` and
``controller_log``; how many partitions were offline (no leader) or under ``min.insync.replicas``, from
the ``anomalies`` table's episodes, and how many were being reassigned, from ``partition_history``;
leaderships and ISR membership gained and lost per broker; the metadata quorum's leader and epoch
(LeaderChangeMessage records, and the partition directory's ``quorum-state`` file when the log ends
without its leader); and the notable moments, each with its log offset and the SQL that shows it.

Every anomaly the report shows is a row of ``anomalies``, so the page says what the table says: an outage
is counted from its episodes' starts and ends (the ``min.insync.replicas`` each was measured against is
the one in force then, as the controller looked it up), and every other kind (unclean and ELR elections,
stuck reassignments, flapping brokers, leader imbalances, and any kind added later) is one moment per
episode.

A KRaft log is mostly quiet (a NoOpRecord every half second) around incidents of a few hundred
milliseconds, so the time axis (``time_axis``) draws the time between two changes by the logarithm of its
length: the incidents get the width, the quiet hours between them stay on the page as context.

The counts are computed column-wise (numpy over Arrow), never partition by partition in Python, and drawn
per time bucket (the most within it, so a short outage still shows): a 10^6-partition history becomes a
few hundred points.

A report is drawn whatever the tables hold: a value it cannot use (a timestamp no date can hold) is set
aside with one notice line, never fatal.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlake.metadata.progress import spoken_duration
from kraftlake.storage.deltars import DeltaRsTables

# Broker states, in the order a band legend lists them.
REGISTERED, UNFENCED, SHUTTING_DOWN, FENCED, UNREGISTERED = (
    "registered", "unfenced", "controlled shutdown", "fenced", "unregistered")
STATES = (REGISTERED, UNFENCED, SHUTTING_DOWN, FENCED, UNREGISTERED)
BROKER_RECORDS = ("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord",
                  "UnfenceBrokerRecord", "UnregisterBrokerRecord")
HISTORY_COLUMNS = ["offset", "applied_offset", "timestamp", "change", "topic", "partition", "leader_before", "leader",
                   "isr_before", "isr", "adding_replicas", "removing_replicas"]
# The three partition conditions the report counts over time, with what a person calls them.
OFFLINE, UNDER_MIN_ISR, REASSIGNING = "offline", "under min.insync.replicas", "reassigning"
# The anomaly kinds counted over time, by their condition: an outage is one episode per partition, so a
# moment per episode would bury it. Every other kind of the table, whatever it holds, is a moment per episode.
COUNTED_KINDS = {"offline_partition": OFFLINE, "under_min_isr": UNDER_MIN_ISR}
ANOMALY_COLUMNS = ["kind", "entity", "topic", "partition", "start_offset", "start_time", "end_offset", "end_time",
                   "detail"]
# The tables only the controller writes that the report reads: without them it would draw no change at all.
CONTROLLER_TABLES = ("partition_history", "controller_log")
# Event times a date can hold (years 1 to 9999, as Python's datetime): the page writes every time as one,
# the window's end + 1 ms included.
MIN_MS, MAX_MS = -62_135_596_800_000, 253_402_300_799_998
# The time axis: a stretch between two changes longer than QUIET_MS is quiet, and weighs QUIET_WEIGHT of
# what its length would.
QUIET_MS, QUIET_WEIGHT = 1_000, 0.5
# Kafka's legal topic name characters: such a name is written as itself in the moments' SQL.
PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]*")


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
class Leadership:
    """The metadata quorum led by ``leader`` (-1: no leader) in ``epoch`` from ``start_ms`` (offset)."""

    start_ms: int
    offset: int
    leader: int
    epoch: int
    from_quorum_state: bool = False  # the log has no LeaderChangeMessage for it: the quorum-state file says


@dataclass
class QuorumStateFile:
    """The partition directory's ``quorum-state`` (the newest epoch, when several were ingested); ``ahead``:
    its epoch is later than the log's last LeaderChangeMessage, whose first record in the log is at
    ``first_offset`` (None: the log holds none)."""

    file: str
    leader: int
    epoch: int
    voted: int
    ahead: bool = False
    first_offset: int | None = None


@dataclass(frozen=True)
class Stretch:
    """A piece of the time axis: event time [start_ms, end_ms) drawn from x0 to x1 (fractions of the
    width); ``quiet``: nothing changed in it for longer than QUIET_MS."""

    start_ms: int
    end_ms: int
    x0: float
    x1: float
    quiet: bool


class TimeAxis:
    """Event time to a fraction of the drawing's width, linear between consecutive knots (``ms``, each
    drawn at ``x``); ``quiet[i]``: the stretch from knot i to knot i + 1 is quiet."""

    def __init__(self, ms: np.ndarray, x: np.ndarray, quiet: np.ndarray) -> None:
        self.ms, self.x, self.quiet = ms, x, quiet
        self._ms, self._x = ms.astype(np.float64), x.astype(np.float64)

    def fraction(self, ms: float) -> float:
        return float(np.interp(ms, self._ms, self._x))

    def edges(self, buckets: int) -> np.ndarray:
        """``buckets`` + 1 bucket edges in event time, the buckets equally wide on the page."""
        times = np.floor(np.interp(np.linspace(0.0, 1.0, buckets + 1), self._x, self._ms)).astype(np.int64)
        times[0], times[-1] = self.ms[0], self.ms[-1]
        return np.maximum.accumulate(times)

    def stretches(self, quiet_only: bool = False, min_width: float = 0.0) -> list[Stretch]:
        picked = np.flatnonzero((self.quiet | (not quiet_only)) & (np.diff(self.x) >= min_width))
        return [Stretch(int(self.ms[i]), int(self.ms[i + 1]), float(self.x[i]), float(self.x[i + 1]),
                        bool(self.quiet[i])) for i in picked]

    @property
    def linear(self) -> bool:
        return len(self.quiet) == 1


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (numpy's ``unique`` hashes int64 about a hundred times slower)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def time_axis(start_ms: int, end_ms: int, activity: np.ndarray, linear: bool = False) -> TimeAxis:
    """The axis of the window [start_ms, end_ms], whose changes happened at the times ``activity``: each
    stretch between two consecutive changes (and from the window's start to the first, from the last to
    its end) is drawn in proportion to the logarithm of its length, log(1 + ms), a quiet one at
    QUIET_WEIGHT of that. A millisecond-long burst, a 100 ms controlled shutdown and an hour of quiet all
    get a width a person can see; ``linear``: event time to scale."""
    stop = end_ms + 1
    knots = _distinct(np.concatenate(([start_ms], activity[(activity > start_ms) & (activity < stop)], [stop])))
    if linear or len(knots) == 2:
        return TimeAxis(np.array([start_ms, stop], dtype=np.int64), np.array([0.0, 1.0]), np.array([False]))
    lengths = np.diff(knots)
    quiet = lengths > QUIET_MS
    weights = np.log1p(lengths) * np.where(quiet, QUIET_WEIGHT, 1.0)
    x = np.concatenate(([0.0], np.cumsum(weights) / weights.sum()))
    x[-1] = 1.0
    return TimeAxis(knots, x, quiet)


@dataclass
class Timeline:
    start_ms: int
    end_ms: int
    axis: TimeAxis
    edges: np.ndarray  # bucket i holds event times [edges[i], edges[i + 1])
    brokers: dict[int, list[Span]] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    leaderships_gained: Counter = field(default_factory=Counter)
    leaderships_lost: Counter = field(default_factory=Counter)
    isr_joins: Counter = field(default_factory=Counter)  # ISR expansions, per broker that joined
    isr_leaves: Counter = field(default_factory=Counter)  # ISR shrinks, per broker that left
    quorum: list[Leadership] = field(default_factory=list)
    quorum_state: QuorumStateFile | None = None
    moments: list[Moment] = field(default_factory=list)
    partitions: int = 0  # partitions at the end of the window
    changes: int = 0  # partition_history rows in the window
    notices: list[str] = field(default_factory=list)  # what the data held that the report could not use

    @classmethod
    def over(cls, start_ms: int, end_ms: int, axis: TimeAxis | None = None, buckets: int = 240) -> Timeline:
        axis = axis or time_axis(start_ms, end_ms, np.zeros(0, dtype=np.int64), linear=True)
        return cls(start_ms, end_ms, axis, axis.edges(buckets))

    @property
    def buckets(self) -> int:
        return len(self.edges) - 1

    def bucket_start(self, i: int) -> int:
        return int(self.edges[i])


def as_millis(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Event time as epoch milliseconds, whatever unit the table stores timestamps in."""
    if pa.types.is_timestamp(column.type):  # a finer unit than ms is cut to the ms (whatever wrote the table)
        column = pc.cast(column, pa.timestamp("ms", column.type.tz), safe=False)
    return np.asarray(pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


class Clock:
    """Event times as the page can draw them. A timestamp no date can hold (a hand-written event's 10^15
    ms) is drawn at the time of the log's event before it (the offsets say it came after that one): the
    tables derived from the log carry its offsets, so they are mended by offset the same way."""

    def __init__(self, offsets: np.ndarray, times: np.ndarray) -> None:
        bad = (times < MIN_MS) | (times > MAX_MS)
        self.bad_offsets = np.sort(offsets[bad])
        self.examples = list(zip(offsets[bad][:1].tolist(), times[bad][:1].tolist()))
        if not len(self.bad_offsets):
            self.mended = np.zeros(0, dtype=np.int64)
            return
        order = np.argsort(offsets, kind="stable")
        good = ~bad[order]
        if not good.any():
            raise ValueError("no event of metadata_log has a timestamp a date can hold (years 1 to 9999): "
                             "there is no time to draw the log over")
        last_good = np.maximum.accumulate(np.where(good, np.arange(len(order)), -1))
        last_good = np.where(last_good < 0, np.argmax(good), last_good)  # before any good one: the first
        mended = times[order][last_good]
        self.mended = mended[~good]  # in the order of bad_offsets (both sorted by offset)

    def mend(self, offsets: np.ndarray, times: np.ndarray) -> np.ndarray:
        if not len(self.bad_offsets):
            return times
        bad = (times < MIN_MS) | (times > MAX_MS)
        if not bad.any():
            return times
        at = np.clip(np.searchsorted(self.bad_offsets, offsets[bad]), 0, len(self.bad_offsets) - 1)
        times = times.copy()
        times[bad] = np.where(self.bad_offsets[at] == offsets[bad], self.mended[at],
                              np.clip(times[bad], MIN_MS, MAX_MS))
        return times

    def notice(self) -> str | None:
        if not len(self.bad_offsets):
            return None
        offset, ms = self.examples[0]
        return (f"{len(self.bad_offsets):,} event(s) of metadata_log have a timestamp no date can hold (years 1 to "
                f"9999; offset {offset:,}: {ms:,} ms): each is drawn at the time of the event before it")


def _rows(table: pa.Table, clock: Clock) -> Iterator[dict]:
    """Rows as dicts with ``timestamp`` in drawable milliseconds (for the few tables read row by row)."""
    millis = clock.mend(np.asarray(table["offset"].to_numpy(), dtype=np.int64), as_millis(table["timestamp"])).tolist()
    for row, ms in zip(table.drop_columns(["timestamp"]).to_pylist(), millis):  # no datetime: any int64 goes
        row["timestamp"] = ms
        yield row


def build(tables: DeltaRsTables, start_ms: int | None = None, end_ms: int | None = None,
          topics: Iterable[str] | None = None, buckets: int = 240, linear: bool = False) -> Timeline:
    """The timeline of the warehouse between ``start_ms`` and ``end_ms`` (event time; default: the whole
    log), for the given topics' partitions (default: all; brokers, the quorum and the anomalies that are
    not a partition's are always shown). ``linear``: every stretch of the window drawn to the same scale."""
    clock, lo, hi = _time_range(tables, start_ms, end_ms)
    topic_list = None if topics is None else sorted(set(topics))
    broker_events = _broker_events(tables, clock)
    history = _history(tables, topic_list, clock)
    episodes = read_episodes(tables, topic_list, clock)
    leader_changes = _leader_changes(tables, clock)
    state, epoch_start = _quorum_state(tables, leader_changes, clock)
    activity = np.concatenate([np.array([r["timestamp"] for r in broker_events + leader_changes + epoch_start],
                                        dtype=np.int64), as_millis(history["timestamp"]),
                               episodes["start_ms"].to_numpy(), pc.drop_null(episodes["end_ms"]).to_numpy()])
    tl = Timeline.over(lo, hi, time_axis(lo, hi, activity, linear), buckets)
    tl.notices = [n for n in [clock.notice()] if n]
    _brokers(tl, broker_events)
    count_episodes(tl, episodes, topic_list)
    count_partitions(tl, history, topic_list)
    _episodes(tl, episodes)
    _quorum(tl, leader_changes, state, epoch_start)
    _voter_assignments(tl, _leader_changes(tables, clock, "VoterAssignmentMessage"))
    tl.moments.sort(key=lambda m: (m.offset, m.what))
    return tl


def _time_range(tables: DeltaRsTables, start: int | None, end: int | None) -> tuple[Clock, int, int]:
    if not tables.exists("metadata_log"):
        raise ValueError(f"no metadata_log table in {tables.root}: ingest a log first")
    missing = [name for name in CONTROLLER_TABLES if not tables.exists(name)]
    if missing:
        raise ValueError(f"{tables.root} has no {' or '.join(missing)}: the controller has not replayed its log yet, "
                         f"so the report would draw no partition change; run ./spark-submit.sh jobs/controller.py "
                         f"--warehouse {tables.root} --once first")
    if not tables.exists("anomalies"):  # every controller since it was added writes the table, empty or not
        raise ValueError(f"{tables.root} has no anomalies table: its controller ran under a release without it, so "
                         f"the report would draw no offline partition nor any other anomaly; replay the log again "
                         f"with ./spark-submit.sh jobs/controller.py --warehouse {tables.root} --once --reset")
    log = tables.read_arrow("metadata_log", columns=["offset", "timestamp"])
    if log.num_rows == 0:
        raise ValueError(f"the metadata_log of {tables.root} is empty: ingest a log first")
    offsets, ts = np.asarray(log["offset"].to_numpy(), dtype=np.int64), as_millis(log["timestamp"])
    clock = Clock(offsets, ts)
    ts = clock.mend(offsets, ts)
    for name, value in (("start", start), ("end", end)):
        if value is not None and not MIN_MS <= value <= MAX_MS:
            raise ValueError(f"the window's {name} ({value} ms) is not a date between the years 1 and 9999")
    lo, hi = (int(ts.min()) if start is None else start), (int(ts.max()) if end is None else end)
    if hi < lo:
        raise ValueError(f"the window ends ({hi} ms) before it starts ({lo} ms)")
    return clock, lo, hi


# -- brokers ---------------------------------------------------------------------------------------------

def _broker_events(tables: DeltaRsTables, clock: Clock) -> list[dict]:
    """The broker records of the log and of the controller's decisions, in log order, their event time
    never going back (a clock that stepped back draws at the time already reached)."""
    events = []
    for name in ("metadata_log", "controller_log"):
        schema = tables.table(name).schema().to_arrow()
        present = [t for t in BROKER_RECORDS if schema.get_field_index(t) >= 0]
        if not present:
            continue
        columns = ["offset", "timestamp", "type"] + present + (["seq"] if name == "controller_log" else [])
        table = tables.read_arrow(name, columns=columns, filter=pc.field("type").isin(present))
        for row in _rows(table, clock):
            row.setdefault("seq", -1)
            events.append(row)
    events.sort(key=lambda r: (r["offset"], r["seq"]))
    reached = MIN_MS
    for row in events:
        reached = row["timestamp"] = max(reached, row["timestamp"])
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


def _brokers(tl: Timeline, events: list[dict]) -> None:
    state: dict[int, tuple[bool, bool]] = {}
    for row in events:
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

def _history(tables: DeltaRsTables, topics: list[str] | None, clock: Clock) -> pa.Table:
    history = tables.read_arrow("partition_history", columns=HISTORY_COLUMNS,
                                filter=None if topics is None else pc.field("topic").isin(topics))
    if len(clock.bad_offsets):
        offsets = np.asarray(pc.fill_null(history["offset"], 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        mended = clock.mend(offsets, as_millis(history["timestamp"]))
        history = history.set_column(history.schema.get_field_index("timestamp"), "timestamp",
                                     pa.array(mended, pa.timestamp("ms", "UTC")))
    return history


def _list_lengths(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _int_column(column: pa.ChunkedArray, null: int) -> np.ndarray:
    return np.asarray(pc.fill_null(column, null).to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclass(frozen=True)
class LevelSql:
    """The SQL of a count's moments: ``open_at(offset)`` lists what is in the condition after that offset,
    ``changed(first, last)`` what went in or out of it between two offsets."""

    open_at: Callable[[int], str]
    changed: Callable[[int, int], str]


def _levels(offsets: np.ndarray, times: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, times, level after each): the count after each distinct offset, from what each row adds to
    it (changes at one offset land together: no half-applied state counts). Event time follows the offsets;
    a clock that stepped back must not unsort the searches made in it."""
    order = np.argsort(offsets, kind="stable")
    change_offsets, first_row = np.unique(offsets[order], return_index=True)
    if not len(offsets):
        return change_offsets, times[:0], deltas[:0]
    change_times = np.maximum.accumulate(times[order][first_row])
    return change_offsets, change_times, np.cumsum(np.add.reduceat(deltas[order], first_row))


def _reassigning_sql(topics: list[str] | None) -> LevelSql:
    """A reassignment is not an anomaly (its stuck ones are): its moments' SQL reads partition_history."""
    condition = "(size(adding_replicas) > 0 OR size(removing_replicas) > 0)" + _topic_filter(topics)
    return LevelSql(
        lambda offset: ("SELECT topic, partition, leader, isr, adding_replicas, removing_replicas, offset AS "
                        "changed_at FROM (SELECT *, row_number() OVER (PARTITION BY topic, partition ORDER BY "
                        f"offset DESC, applied_offset DESC) AS n FROM partition_history WHERE offset <= {offset}) "
                        f"WHERE n = 1 AND change <> 'delete' AND {condition} ORDER BY topic, partition"),
        lambda first, last: ("SELECT offset, cause, topic, partition, leader_before, leader, adding_replicas, "
                             f"removing_replicas FROM partition_history WHERE offset BETWEEN {first} AND {last}"
                             f"{_topic_filter(topics)} ORDER BY offset"))


def count_partitions(tl: Timeline, history: pa.Table, topics: list[str] | None = None) -> None:
    """Fill ``tl``'s partitions being reassigned, partition count, changes and per-broker counts from
    ``partition_history`` rows (any order; ``topics`` only shapes the SQL of the moments)."""
    history = history.filter(pc.less_equal(as_millis(history["timestamp"]), tl.end_ms))
    n = history.num_rows
    offsets = _int_column(history["offset"], 0)
    applied = _int_column(history["applied_offset"], 0)
    times = as_millis(history["timestamp"])
    partition = _int_column(history["partition"], 0)
    encoded = pc.dictionary_encode(history["topic"].combine_chunks())
    topic_ids = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    alive = np.asarray(pc.not_equal(history["change"], "delete").to_numpy(zero_copy_only=False), dtype=bool)
    moving = alive & ((_list_lengths(history["adding_replicas"]) + _list_lengths(history["removing_replicas"])) > 0)

    # Each partition's rows in its own order, to know what it was before each change.
    by_partition = np.lexsort((applied, offsets, partition, topic_ids))
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[1:] = (topic_ids[by_partition][1:] == topic_ids[by_partition][:-1]) & \
                   (partition[by_partition][1:] == partition[by_partition][:-1])
    flag = moving.astype(np.int64)
    before = np.zeros(n, dtype=np.int64)
    if n > 1:
        before[by_partition[1:]] = np.where(same[1:], flag[by_partition][:-1], 0)
    change_offsets, change_times, levels = _levels(offsets, times, flag - before)
    tl.series[REASSIGNING] = _series(tl, REASSIGNING, change_times, levels)
    _level_moments(tl, REASSIGNING, change_offsets, change_times, levels, _reassigning_sql(topics))
    tl.partitions = int(np.sum(alive[_last_rows(by_partition, same)])) if n else 0
    window = (times >= tl.start_ms) & (times <= tl.end_ms)
    tl.changes = int(np.sum(window))
    _per_broker(tl, history, window & (np.asarray(pc.equal(history["change"], "change").to_numpy(
        zero_copy_only=False), dtype=bool)))


# -- anomalies -------------------------------------------------------------------------------------------

def read_episodes(tables: DeltaRsTables, topics: list[str] | None, clock: Clock) -> pa.Table:
    """The anomalies table's episodes (``ANOMALY_COLUMNS``) of ``topics``' partitions and of no partition
    (a broker's, the quorum's), with ``start_ms`` and ``end_ms`` (null while it lasts) in drawable
    milliseconds."""
    rows = tables.read_arrow("anomalies", columns=ANOMALY_COLUMNS)
    # topics compared after the read: a filter on a string column meets string_view statistics that pyarrow
    # cannot compare
    rows = rows.set_column(rows.schema.get_field_index("kind"), "kind", rows["kind"].cast(pa.string()))
    if topics is not None:
        topic = rows["topic"].cast(pa.string())
        rows = rows.filter(pc.or_kleene(pc.is_null(topic), pc.is_in(topic, pa.array(topics, pa.string()))))
    starts = clock.mend(_int_column(rows["start_offset"], 0), as_millis(rows["start_time"]))
    ended = np.asarray(pc.is_valid(rows["end_offset"]).to_numpy(zero_copy_only=False), dtype=bool)
    ends = clock.mend(_int_column(rows["end_offset"], 0), as_millis(pc.fill_null(rows["end_time"], 0)))
    return rows.append_column("start_ms", pa.array(starts, pa.int64())).append_column(
        "end_ms", pa.array(ends, pa.int64(), mask=~ended))


def _of_kind(episodes: pa.Table, kind: str) -> pa.Table:
    return episodes.filter(pc.equal(episodes["kind"], kind))


def _episode_sql(kind: str, topics: list[str] | None) -> LevelSql:
    """What an episode count's moments show: the episodes open after an offset (exactly the partitions
    counted), and those that began or ended between two offsets."""
    which = f"FROM anomalies WHERE kind = {sql_string(kind)}"
    return LevelSql(
        lambda offset: (f"SELECT topic, partition, start_offset, start_time, cause, cause_offset, detail {which} AND "
                        f"start_offset <= {offset} AND (end_offset IS NULL OR end_offset > {offset})"
                        f"{_topic_filter(topics)} ORDER BY topic, partition"),
        lambda first, last: (f"SELECT entity, start_offset, start_time, end_offset, end_time, detail {which} AND "
                             f"(start_offset BETWEEN {first} AND {last} OR end_offset BETWEEN {first} AND {last})"
                             f"{_topic_filter(topics)} ORDER BY coalesce(end_offset, start_offset), entity"))


def count_episodes(tl: Timeline, episodes: pa.Table, topics: list[str] | None = None) -> None:
    """Fill ``tl``'s offline and under-min.insync.replicas series and moments from the episodes of
    ``COUNTED_KINDS`` (``read_episodes``; any order): each adds one partition to its count at its start and
    takes it away at its end, and the count after an offset is what the table says was open then."""
    for kind, name in COUNTED_KINDS.items():
        rows = _of_kind(episodes, kind)
        starts, ends = rows["start_ms"].to_numpy(), pc.fill_null(rows["end_ms"], 0).to_numpy()
        ended = np.asarray(pc.is_valid(rows["end_offset"]).to_numpy(zero_copy_only=False), dtype=bool)
        offsets = np.concatenate([_int_column(rows["start_offset"], 0), _int_column(rows["end_offset"], 0)[ended]])
        times = np.concatenate([starts, ends[ended]])
        deltas = np.concatenate([np.ones(len(starts), np.int64), -np.ones(int(ended.sum()), np.int64)])
        seen = times <= tl.end_ms
        change_offsets, change_times, levels = _levels(offsets[seen], times[seen], deltas[seen])
        tl.series[name] = _series(tl, name, change_times, levels)
        _level_moments(tl, name, change_offsets, change_times, levels, _episode_sql(kind, topics))


def _episodes(tl: Timeline, episodes: pa.Table) -> None:
    """A moment where each episode of a kind not counted began within the window, with its row's one line:
    every kind the table holds, those added after this report was written too."""
    rows = episodes.filter(pc.invert(pc.is_in(episodes["kind"], pa.array(list(COUNTED_KINDS)))))
    for row in rows.select(["kind", "entity", "start_offset", "start_ms", "detail"]).to_pylist():
        if tl.start_ms <= row["start_ms"] <= tl.end_ms:
            tl.moments.append(Moment(row["start_offset"], row["start_ms"],
                                     f"{row['kind'].replace('_', ' ')}: {row['detail']}",
                                     f"SELECT * FROM anomalies WHERE kind = {sql_string(row['kind'])} AND entity = "
                                     f"{sql_string(row['entity'])} AND start_offset = {row['start_offset']}"))


def _last_rows(by_partition: np.ndarray, same: np.ndarray) -> np.ndarray:
    """Indices of each partition's last row (its state at the end of the window)."""
    last = np.ones(len(by_partition), dtype=bool)
    last[:-1] = ~same[1:]
    return by_partition[last]


def _series(tl: Timeline, name: str, times: np.ndarray, levels: np.ndarray) -> Series:
    """Per bucket the most partitions in the condition at any moment of it: every level reached by a change
    within it, and the level in force when it opened (until its first change)."""
    starts = tl.edges[:-1]
    opened = np.searchsorted(times, starts, side="left") - 1  # the last change before each bucket
    values = np.where(opened >= 0, levels[np.maximum(opened, 0)], 0) if len(levels) else np.zeros(tl.buckets, int)
    inside = (times >= tl.start_ms) & (times <= tl.end_ms)
    if inside.any():
        idx = np.minimum(np.searchsorted(tl.edges, times[inside], side="right") - 1, tl.buckets - 1)
        np.maximum.at(values, idx, levels[inside])
    last = np.searchsorted(times, tl.end_ms, side="right") - 1
    return Series(name, [int(v) for v in values], int(levels[last]) if last >= 0 else 0,
                  int(values.max()) if len(values) else 0)


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string that means exactly it and that nothing in it can end: a legal Kafka
    topic name as a literal, anything else spelled in hex (no quote or backslash of the data reaches the
    parser, whatever its escaping rules)."""
    if PLAIN_NAME.fullmatch(value):
        return f"'{value}'"
    return f"decode(unhex('{value.encode('utf-8').hex().upper()}'), 'UTF-8')"


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join(sql_string(v) for v in values)


def _topic_filter(topics: list[str] | None) -> str:
    return "" if topics is None else f" AND topic IN ({_sql_list(topics)})"


def _level_moments(tl: Timeline, name: str, offsets: np.ndarray, times: np.ndarray, levels: np.ndarray,
                   sql: LevelSql) -> None:
    """A moment where the count leaves zero (with how many partitions went into that condition at that
    millisecond), where it at least doubles to a new high within the same outage (so "1 offline" followed
    by fifty more has a moment for the fifty), and where it returns to zero (with the most it reached).
    Every change of one millisecond counts together: a broker's failover is many records of one instant."""
    if not len(levels):
        return
    _, first = np.unique(times, return_index=True)  # times never go back: one group per millisecond
    last = np.append(first[1:], len(times)) - 1
    before = np.where(first > 0, levels[np.maximum(first - 1, 0)], 0)
    after, peak = levels[last], np.maximum.reduceat(levels, first)
    starts = (before == 0) & (peak > 0)
    episode = np.cumsum(starts)  # the outage each millisecond belongs to (0: before the first)
    episode_peak = np.zeros(int(episode[-1]) + 1, dtype=np.int64)
    np.maximum.at(episode_peak, episode, peak)
    episode_start = np.zeros(len(episode_peak), dtype=np.int64)
    episode_start[episode[starts]] = times[first[starts]]
    # the outage's high before each millisecond: a running max that starts again with each outage
    lift = episode * (int(peak.max()) + 1)
    high = np.maximum.accumulate(after + lift) - lift
    high_before = np.where(starts, 0, np.concatenate(([0], high[:-1])))
    rises = ~starts & (high_before > 0) & (after >= 2 * high_before)
    ends = (before > 0) & (after == 0)
    in_window = (times[first] >= tl.start_ms) & (times[first] <= tl.end_ms)
    for g in np.flatnonzero(in_window & (starts | rises | ends)):
        a, b = int(first[g]), int(last[g])
        changes = sql.changed(int(offsets[a]), int(offsets[b]))
        if after[g] > 0:
            began = a + int(np.argmax(levels[a:b + 1] > before[g]))
            more = f" ({int(after[g] - before[g]):,} more)" if rises[g] else ""
            tl.moments.append(Moment(int(offsets[began]), int(times[a]), f"{int(after[g]):,} partition(s) {name}{more}",
                                     sql.open_at(int(offsets[b]))))
        elif starts[g]:
            tl.moments.append(Moment(int(offsets[a]), int(times[a]),
                                     f"{int(peak[g]):,} partition(s) {name} and back within the millisecond", changes))
        else:
            e = int(episode[g])
            tl.moments.append(Moment(int(offsets[b]), int(times[a]), f"no partition {name} any more (at most "
                                     f"{int(episode_peak[e]):,}, for {spoken_duration(int(times[a] - episode_start[e]))})",
                                     changes))


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
    tl.isr_joins.update(_counts(new[~_member(new, old)] & 0xFFFFFFFF))
    tl.isr_leaves.update(_counts(old[~_member(old, new)] & 0xFFFFFFFF))


def _membership(column: pa.ChunkedArray) -> np.ndarray:
    """(row, broker) pairs of a list column as one int64 each: set differences per row become ``isin``."""
    lists = column.combine_chunks()
    brokers = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    parents = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    return (parents << 32) | (brokers & 0xFFFFFFFF)


def _member(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """``np.isin`` by a binary search in the sorted other side (isin's own sorting path is ten times slower)."""
    if not len(of):
        return np.zeros(len(values), dtype=bool)
    ordered = np.sort(of)
    return ordered[np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)] == values


def _counts(values: np.ndarray) -> dict[int, int]:
    keys, counts = np.unique(values, return_counts=True)
    return {int(k): int(c) for k, c in zip(keys, counts)}


# -- the metadata quorum ---------------------------------------------------------------------------------

def _leader_changes(tables: DeltaRsTables, clock: Clock, type_: str = "LeaderChangeMessage") -> list[dict]:
    """The log's LeaderChangeMessages (or other control records of the quorum) in offset order, their event
    time never going back."""
    schema = tables.table("metadata_log").schema().to_arrow()
    if schema.get_field_index(type_) < 0:
        return []
    table = tables.read_arrow("metadata_log", columns=["offset", "timestamp", "leader_epoch", type_],
                              filter=pc.field("type") == type_)
    rows = sorted(_rows(table, clock), key=lambda r: r["offset"])
    reached = MIN_MS
    for row in rows:
        reached = row["timestamp"] = max(reached, row["timestamp"])
    return rows


def _quorum_state(tables: DeltaRsTables, leader_changes: list[dict], clock: Clock
                  ) -> tuple[QuorumStateFile | None, list[dict]]:
    """The newest quorum-state file ingested (epochs only grow: the highest is the latest) and, when its
    epoch is later than the log's last LeaderChangeMessage (a log that starts at a snapshot, or ends in an
    election), the log's first record of that epoch (none: the epoch began after the log's end)."""
    if not tables.exists("quorum_files"):
        return None, []
    rows = tables.read_arrow("quorum_files", columns=["file", "kind", "leader_id", "leader_epoch", "voted_id"],
                             filter=pc.field("kind") == "quorum-state").to_pylist()
    rows = [r for r in rows if r["leader_epoch"] is not None]
    if not rows:
        return None, []
    r = max(rows, key=lambda r: r["leader_epoch"])
    state = QuorumStateFile(r["file"], _int(r["leader_id"]), r["leader_epoch"], _int(r["voted_id"]))
    if leader_changes and state.epoch <= _int(leader_changes[-1]["leader_epoch"]):
        return state, []
    state.ahead = True
    first = tables.read_arrow("metadata_log", columns=["offset", "timestamp"],
                              filter=pc.field("leader_epoch") >= state.epoch)
    if first.num_rows == 0:
        return state, []
    row = min(_rows(first, clock), key=lambda r: r["offset"])
    state.first_offset = row["offset"]
    return state, [row]


def _int(value: int | None) -> int:
    return -1 if value is None else int(value)


def _voter_assignments(tl: Timeline, rows: list[dict]) -> None:
    """The KIP-595 draft's bootstrap (ADR 0012): the first VoterAssignmentMessage carries the cluster id its
    leader generated; each later one, voters AlterQuorum changed."""
    for i, r in enumerate(rows):
        if tl.start_ms <= r["timestamp"] <= tl.end_ms:
            data = r["VoterAssignmentMessage"]
            voters = [v["VoterId"] for v in data["Voters"]]
            what = f"quorum bootstrapped: cluster id {data['ClusterId']}, voters {voters}" if i == 0 else \
                f"quorum voters {voters}"
            tl.moments.append(Moment(r["offset"], r["timestamp"], f"{what}, epoch {_int(r['leader_epoch'])}",
                                     "SELECT offset, timestamp, leader_epoch, VoterAssignmentMessage FROM metadata_log "
                                     f"WHERE offset = {r['offset']}"))


def _quorum(tl: Timeline, leader_changes: list[dict], state: QuorumStateFile | None, epoch_start: list[dict]) -> None:
    """The quorum's leader and epoch from the log's LeaderChangeMessages, then the quorum-state file's
    epoch from its first record in the log when the log has no LeaderChangeMessage for it."""
    tl.quorum_state = state
    leaderships = [Leadership(r["timestamp"], r["offset"], r["LeaderChangeMessage"]["LeaderId"], _int(r["leader_epoch"]))
                   for r in leader_changes]
    if state is not None:
        leaderships += [Leadership(r["timestamp"], r["offset"], state.leader, state.epoch, True) for r in epoch_start]
    for leadership in leaderships:
        if leadership.start_ms > tl.end_ms:
            break
        last = tl.quorum[-1] if tl.quorum else None
        if last is not None and (last.leader, last.epoch) == (leadership.leader, leadership.epoch):
            continue
        if leadership.start_ms <= tl.start_ms:  # the leadership in force when the window opens
            leadership.start_ms = tl.start_ms
            tl.quorum[:] = [leadership]
            continue
        tl.quorum.append(leadership)
        who = f"leader {leadership.leader}" if leadership.leader >= 0 else "no leader"
        column, source = ("type", " (the quorum-state file)") if leadership.from_quorum_state else \
            ("LeaderChangeMessage", "")
        tl.moments.append(Moment(leadership.offset, leadership.start_ms,
                                 f"quorum {who}, epoch {leadership.epoch}{source}",
                                 f"SELECT offset, timestamp, leader_epoch, {column} FROM metadata_log "
                                 f"WHERE offset = {leadership.offset}"))
