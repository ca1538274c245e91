"""Controller shards: how the log is split, and one shard's step over its events (pure Python).

A topic's records go to shard ``crc32(topic id) % N``; everything broker- or cluster-scoped is sent to
every shard, so each shard holds the whole (small) broker registry plus its own topics and is a complete,
deterministic controller for its partitions (DESIGN.md, "Sharding"). Cluster-wide rows (brokers,
configs) are emitted by shard 0 only, topic rows by the topic's shard (ADR 0002).

``step`` is exactly what the streaming job runs inside ``applyInPandasWithState``; ``replay_log`` runs the
same steps in-process and is the reference the Spark job is tested against.
"""

from __future__ import annotations

import json
import operator
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cache
from itertools import chain
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from kraftlake.codec.events import json_bytes
from kraftlake.controller.anomalies import (IMBALANCE, IMBALANCE_PERCENTAGE, MIN_ISR, MIN_ISR_CONFIG, NEVER,
                                           RECOVERING, Anomalies, Leadership, Place, Seen, Thresholds, min_insync_replicas)
from kraftlake.controller.cluster_control import (ControllerState, Session, decided_cause, quiet_until,
                                                  running_sessions, session_timeout_ms, shutting_down, stale_heartbeat,
                                                  steady_heartbeat)
from kraftlake.controller.decisions import Context, Records, error_code, response
from kraftlake.controller.dispatch import BROKER_REQUESTS, handle_request, merge_responses
from kraftlake.controller.heartbeats import CAUGHT_UP, STALE, STEADY, Heartbeats
from kraftlake.controller.replication import altered_elsewhere
from kraftlake.image import causes, features, partition_changes
from kraftlake.image.causes import Batch, Cause, Marks
from kraftlake.image.cluster_image import (NO_LEADER, BrokerRegistration, ClusterImage, PartitionRegistration,
                                           normalize_uuid)
from kraftlake.image.partition_changes import Shaped
from kraftlake.image.partitions import merge, registration
from kraftlake.image.partition_store import PartitionStore
from kraftlake.image.replay import replay
from kraftlake.metadata.collector import collector_paused
from kraftlake.metadata.config import setting
from kraftlake.metadata.errors import error_name
from kraftlake.metadata.schemas import QUORUM_TRAFFIC, registry
from kraftlake.metadata.tables import answers_schema, schema_arrays, table_arrow_schema, table_keys

# Records that concern one topic's partitions, by the topic's id; every other event is broadcast,
# TopicRecord and RemoveTopicRecord included: every shard knows every topic's name (topic configs are
# keyed by name, and shard 0 must see a removal to drop them), only the owner holds its partitions.
TOPIC_SCOPED = {"PartitionRecord": "TopicId", "PartitionChangeRecord": "TopicId"}
# Events that change nothing a shard holds: filtered out before the shuffle. The quorum's traffic is the
# quorum query's (``quorum_stream``), not the controller's.
SKIPPED = frozenset({"NoOpRecord"}) | QUORUM_TRAFFIC
MARKERS = frozenset({"EndTransactionRecord", "SnapshotFooterRecord"})
# Records whose replay changes no config, no feature and not the active controller: what a topic's
# settings are looked up from (``_Step.min_isr``, ``Context.elections``) stays as it was.
CONFIG_NEUTRAL = frozenset(TOPIC_SCOPED) | {"RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord",
                                            "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord"}
# Events that may set feature levels (features rows): the records themselves, or the ends of what held them.
FEATURE_EVENTS = frozenset({"FeatureLevelRecord", "KRaftVersionRecord"}) | MARKERS
# A run of at least this many simple PartitionChangeRecords is applied to the columns at once
# (``image.partition_changes``); shorter ones one by one, where the fixed cost of a column pass would
# outweigh the records.
FAST_RUN = 32
# A decision's stretch of simple records (``_Step.shaped``) goes to the columns from this length: a column pass
# has a fixed cost of about a millisecond (more amid AlterPartitions, whose registrations it writes and then
# drops), a record one by one about 11 µs, and a controlled shutdown of a broker in 32 to 40 of a shard's ISRs
# was a column pass in the soak's mix (docs/performance.md, "The last 12 %").
DECIDED_RUN = 128
# The shards' leadership counts for the leader imbalance, judged after them (``leader_imbalance``): no table's rows
LEADER_COUNTS = "leader_counts"
_FAST = object()  # ``latest_partitions``: the partition's state is in the columns, not an object
_OFFSET = operator.itemgetter("offset")
_TYPE = operator.itemgetter("type")
# ``tuple.__new__``: what a NamedTuple's constructor calls, through a Python function, for rows and places made
# per record or answer
_tuple_new = tuple.__new__


def shard_of_topic(topic_id: str, shards: int) -> int:
    """Spark computes the same with ``pmod(crc32(encode(topic_id, 'UTF-8')), shards)``."""
    return zlib.crc32(topic_id.encode("utf-8")) % shards


def _ownership(shard: int, shards: int) -> Callable[[str], bool]:
    """Whether a topic is ``shard``'s, cached by topic id. A function of its own, not a method of the step:
    the step's ``Context`` holds it, and a bound method there would make the step a cycle that only the
    collector frees, with every row it collected (issue 27)."""
    owned: dict[str, bool] = {}

    def owns(topic_id: str) -> bool:
        found = owned.get(topic_id)
        if found is None:
            found = owned[topic_id] = shard_of_topic(topic_id, shards) == shard
        return found

    return owns


def routes(event: dict, shards: int) -> Sequence[int]:
    kind = event["type"]
    key = TOPIC_SCOPED.get(kind)
    if key is not None:
        return (shard_of_topic(event["data"][key], shards),)
    return () if kind in SKIPPED else range(shards)


def routed(events: Iterable[dict], shards: int) -> list[list[dict]]:
    """Each shard's events, in order: what ``routes`` sends it (as the streaming job's shuffle does)."""
    per_shard: list[list[dict]] = [[] for _ in range(shards)]
    for event in events:
        for shard in routes(event, shards):
            per_shard[shard].append(event)
    return per_shard


class Output(NamedTuple):
    """One row for a warehouse table. ``op``: append (history, rejected), upsert or delete (state).
    A named tuple: a step makes several per request that changes state, and a tuple is made in less
    than half the time of a frozen dataclass (docs/performance.md, "Third pass")."""

    table: str
    op: str
    offset: int
    seq: int  # order of rows produced by one event
    row: dict


class Decided(NamedTuple):
    """What a run on the columns that a request decided is explained by: the request, the batch of its
    records that cause others, and each record's place among its records."""

    request: dict
    batch: Batch | None
    places: np.ndarray


@dataclass(frozen=True)
class Block:
    """Rows of one table made column-wise (``rows_table``'s layout): what a run of records on the
    columns produces, instead of an ``Output`` per row."""

    table: str
    rows: pa.Table
    op = "block"

    def outputs(self) -> list[Output]:
        """The rows one by one, as the row-wise path would have made them (timestamps in ms)."""
        names = [f.name for f in table_arrow_schema(self.table)]
        table = self.rows
        for name in names:
            column = table.column(f"_{name}")
            if pa.types.is_timestamp(column.type):
                index = table.schema.get_field_index(f"_{name}")
                table = table.set_column(index, f"_{name}", pa.array(column.cast(pa.int64()).to_numpy() // 1000))
        meta = table.select(["op", "offset", "seq"]).to_pylist()
        rows = table.select([f"_{n}" for n in names]).rename_columns(names).to_pylist()
        return [Output(self.table, m["op"], m["offset"], m["seq"], r) for m, r in zip(meta, rows)]


@dataclass(frozen=True, eq=False)
class Answers:
    """Shard 0's answers to the heartbeats a step decided on its fast paths (``_Step.heartbeats``, ``_Step.steady``):
    each the shared row of its kind (``templates``: ``_steady_row``, ``_stale_row``) at its request's offset and
    time, held as columns instead of a dict per answer (and made into Arrow at once, not by ``answers_to_arrow``
    row by row)."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, ms
    templates: list[dict]
    kinds: np.ndarray  # each answer's place in ``templates``
    seqs: np.ndarray
    table = "responses"
    op = "response"

    def outputs(self) -> list[Output]:
        """The answers one by one, as ``_Step.answer`` makes them."""
        templates = self.templates
        return [Output("responses", "response", offset, seq, {**templates[kind], "offset": offset, "timestamp": ts})
                for offset, ts, kind, seq in zip(self.offsets.tolist(), self.timestamps.tolist(), self.kinds.tolist(),
                                                 self.seqs.tolist())]

    def arrow(self) -> pa.Table:
        """The answers in ``answers_schema``'s layout, as ``storage.tables.answers_to_arrow`` makes them of the
        rows: ``data`` its JSON text, each template's columns taken once per answer of its kind."""
        schema = answers_schema()
        kinds = pa.array(self.kinds, pa.int32())
        texts = [json.dumps(t["data"], default=json_bytes) for t in self.templates]
        columns = {f.name: pa.array([t[f.name] for t in self.templates], f.type).take(kinds) for f in schema
                   if f.name not in ("offset", "timestamp", "data")}
        columns.update(offset=self.offsets, timestamp=self.timestamps, data=pa.array(texts, pa.string()).take(kinds))
        return pa.Table.from_arrays(schema_arrays(schema, columns), schema=schema)


def rows_table(name: str, op: str, offsets: np.ndarray | list[int], seqs: np.ndarray | list[int],
               columns: dict[str, pa.Array | list | np.ndarray]) -> pa.Table:
    """Rows of table ``name`` as one Arrow table: ``op``, ``offset``, ``seq``, then the table's columns
    (its schema, each name prefixed with ``_``; timestamps given in ms). The layout every column-wise
    row takes to the sink."""
    schema = table_arrow_schema(name)
    arrays = [pa.array([op] * len(offsets), pa.string()), pa.array(offsets, pa.int64()), pa.array(seqs, pa.int32()),
              *schema_arrays(schema, columns)]
    meta = [pa.field("op", pa.string()), pa.field("offset", pa.int64()), pa.field("seq", pa.int32())]
    return pa.Table.from_arrays(arrays, schema=pa.schema(meta + [f.with_name(f"_{f.name}") for f in schema]))


def _lists(values: list[tuple], codes: np.ndarray, item: pa.DataType) -> pa.Array:
    """A list column from codes into a tuple table (``PartitionStore.ints`` / ``dirs``). Only the tuples
    the codes name are converted: the table keeps every tuple the store ever held, thousands on a busy
    cluster, and a failover's run asks for a few of them, six columns at a time."""
    used, index = np.unique(codes, return_inverse=True)
    return pa.array([values[code] for code in used.tolist()], pa.list_(item)).take(pa.array(index, pa.int32()))


@dataclass
class ShardState:
    """A shard's image, its controller's soft state, and how far into the log it is.

    ``in_term`` is false while the shard replays records another controller wrote; the first request
    after them starts a term of its own (``cluster_control.take_over``), as a failover does in Kafka.
    ``marks`` (shard 0's, which writes broker_history) say where each broker's registration and
    controlled shutdown began, for the causes that name them (``causes.Marks``). ``anomalies``: the
    shard's open anomaly episodes and what its thresholds wait for.
    """

    image: ClusterImage
    last_offset: int = -1
    controller: ControllerState = field(default_factory=ControllerState)
    in_term: bool = False
    marks: dict[int, Marks] = field(default_factory=dict)
    anomalies: Anomalies = field(default_factory=Anomalies)

    def to_bytes(self) -> bytes:
        marks = [[broker, sorted([state, *mark] for state, mark in m.items())]
                 for broker, m in sorted(self.marks.items())]
        soft = json.dumps({"controller": self.controller.to_dict(), "in_term": self.in_term, "marks": marks,
                           "anomalies": self.anomalies.to_dict()}, separators=(",", ":")).encode()
        return (self.last_offset.to_bytes(8, "big", signed=True) + len(soft).to_bytes(4, "big") + soft
                + self.image.to_bytes())

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> "ShardState":
        """Also an earlier release's state, which has no marks (causes then name no earlier event) and no
        anomalies (none is open)."""
        if not raw:
            return cls(ClusterImage())
        size = int.from_bytes(raw[8:12], "big")
        soft = json.loads(raw[12:12 + size])
        marks = {broker: {state: (offset, type_) for state, offset, type_ in m}
                 for broker, m in soft.get("marks", [])}
        image = ClusterImage.from_bytes(raw[12 + size:])
        anomalies = Anomalies.from_dict(soft.get("anomalies"))
        if "anomalies" not in soft:  # the leadership counts start from the image
            for p in image.iter_partitions():
                anomalies.lead(None, p)
            anomalies.counted = True
        return cls(image, int.from_bytes(raw[:8], "big", signed=True), ControllerState.from_dict(soft["controller"]),
                   soft["in_term"], marks, anomalies)


def partition_row(topic: str, p: PartitionRegistration) -> dict:
    return {"topic": topic, "topic_id": p.topic_id, "partition": p.partition_id, "replicas": list(p.replicas),
            "isr": list(p.isr), "leader": p.leader, "leader_epoch": p.leader_epoch,
            "partition_epoch": p.partition_epoch, "adding_replicas": list(p.adding_replicas),
            "removing_replicas": list(p.removing_replicas), "leader_recovery_state": p.leader_recovery_state,
            "elr": list(p.elr), "last_known_elr": list(p.last_known_elr), "directories": list(p.directories),
            "last_offset": p.last_offset, "last_timestamp": p.last_timestamp}


def history_row(topic: str, event: dict, cause: str, before: PartitionRegistration | None,
                after: PartitionRegistration | None, why: Cause) -> dict:
    """The change ``event`` applied; ``cause``: the type of the record, or of the request that decided it."""
    current = after if after is not None else before
    change = "create" if before is None else "delete" if after is None else "change"
    return {
        "offset": after.last_offset if after is not None else event["offset"],
        "timestamp": after.last_timestamp if after is not None else event["timestamp"],
        "applied_offset": event["offset"], "cause": cause, "change": change,
        "topic": topic, "topic_id": current.topic_id, "partition": current.partition_id,
        "leader_before": None if before is None else before.leader,
        "leader": None if after is None else after.leader,
        "isr_before": None if before is None else list(before.isr),
        "isr": None if after is None else list(after.isr),
        "replicas_before": None if before is None else list(before.replicas),
        "replicas": None if after is None else list(after.replicas),
        "leader_epoch_before": None if before is None else before.leader_epoch,
        "leader_epoch": None if after is None else after.leader_epoch,
        "partition_epoch_before": None if before is None else before.partition_epoch,
        "partition_epoch": None if after is None else after.partition_epoch,
        "adding_replicas": None if after is None else list(after.adding_replicas),
        "removing_replicas": None if after is None else list(after.removing_replicas),
        "elr": None if after is None else list(after.elr),
        "leader_recovery_state": None if after is None else after.leader_recovery_state,
        "cause_kind": why.kind, "cause_offset": why.offset, "cause_broker": why.broker,
    }


def broker_row(b: BrokerRegistration, event: dict) -> dict:
    return {"broker_id": b.id, "epoch": b.epoch, "incarnation_id": b.incarnation_id, "fenced": b.fenced,
            "in_controlled_shutdown": b.in_controlled_shutdown, "rack": b.rack,
            "listeners": [f"{e.name}://{e.host}:{e.port}" for e in b.listeners],
            "last_offset": event["offset"], "last_timestamp": event["timestamp"]}


def rejected_row(event: dict, reason: str, offset: int | None = None, type_: str | None = None) -> dict:
    return {"stage": "replay", "source": event.get("source"), "position": event.get("position"),
            "offset": event["offset"] if offset is None else offset, "type": type_ or event["type"],
            "version": event.get("version"), "error": "INVALID_RECORD", "reason": reason,
            "raw": None, "raw_length": None}


class _Collector:
    def __init__(self) -> None:
        self.rows: list[Output | Block | Answers] = []
        self.seq = 0

    def add(self, table: str, op: str, offset: int, row: dict) -> None:
        # (``tuple.__new__`` is what ``Output(...)`` calls, through a Python function: a row per answer)
        self.rows.append(_tuple_new(Output, (table, op, offset, self.seq, row)))
        self.seq += 1

    def seqs(self, count: int) -> np.ndarray:
        start = self.seq
        self.seq += count
        return np.arange(start, start + count, dtype=np.int32)


def _topics_snapshot(image: ClusterImage) -> dict[str, tuple[str, int]]:
    return {tid: (t.name, len(t.partitions)) for tid, t in image.topics.items()}


def _canonical_order(image: ClusterImage) -> None:
    """Topics by id (partitions always iterate by index): the order an image has after the state store
    (``to_bytes`` sorts). Decisions that walk every topic (failover, unfencing, ElectLeaders over all
    topics) then write their records and answers in one order, whether or not the image went through the
    state store between micro-batches, so the tables do not depend on how the log was batched."""
    topics = sorted(image.topics.items())
    image.topics.clear()
    image.topics.update(topics)
    names = sorted(image.topic_ids.items(), key=lambda item: item[1])
    image.topic_ids.clear()
    image.topic_ids.update(names)


class _Step:
    """One shard over one batch of its events: replays records, decides requests, collects rows."""

    def __init__(self, shard: int, shards: int, state: ShardState, config: Mapping[str, str], fast: bool = True,
                 columns: bool = True):
        self.shard, self.shards, self.state, self.config, self.fast = shard, shards, state, config, fast
        self.columns = columns  # False: a decision's records one by one too (``shaped``)
        self.image = state.image
        self.out = _Collector()
        self.names = {tid: t.name for tid, t in self.image.topics.items()}  # kept after removal, for history
        self.latest_partitions: dict[tuple[str, int], tuple[int, str, PartitionRegistration | None]] = {}
        self.latest_brokers: dict[int, tuple[dict, BrokerRegistration | None]] = {}
        self.unordered = True  # topics or partitions may be out of canonical order (until the first request)
        # the batches of this step's log records that hold records causing others, by (source, position)
        self.batches: dict[tuple[str | None, int | None], Batch] = {}
        self.before_decision = False  # generated records come from what precedes a request's own decision
        self.cause_types: dict[int, str] = {}  # the type of each event of the step that may cause changes
        self.timeout_ms = session_timeout_ms(config)
        self.rebalance = setting(config, "auto.leader.rebalance.enable").strip().lower() == "true"
        # up to this event time no session can expire (``quiet_until``), and the brokers the controller has in
        # controlled shutdown (``shutting_down``); None: not known since brokers or sessions last changed
        self.quiet: int | None = None
        self.leaving: frozenset[int] | None = None
        self.running: dict[int, Session] | None = None  # ``running_sessions``, found again at the same times
        # ``calm_until``, kept over a run of events that took the fast paths; None after any other event
        self.calm: int | None = None
        # shard 0's answers to the heartbeats its fast paths decided, as columns or as dicts: (offset, time,
        # version * 3 + STALE, STEADY or CAUGHT_UP), made into one ``Answers`` at the end (``finish``)
        self.answered: list[tuple[int, int, int]] = []
        self.anomalies = state.anomalies
        self.anomalies.thresholds = Thresholds.of(config)
        # min.insync.replicas and the election (``Context.elections``) by topic name, until an event that may
        # change a config (``apply``)
        self.min_isrs: dict[str, int] = {}
        self.elections: dict = {}
        self.owns = _ownership(shard, shards)
        # what a decision depends on besides the image, one for the step: each request sets its time and offset
        self.ctx = Context(now_ms=0, offset=-1, config=config, owns=self.owns, whole_image=shards == 1,
                           elections=self.elections)

    def cause_type(self, kind: str, offset: int) -> str | None:
        """The type of the event at ``offset`` a cause of ``kind`` names: one of this step's, or one the kind
        alone says (a topic's creation may lie micro-batches back; a broker record causes the changes of its
        own record batch, which a micro-batch never splits)."""
        return self.cause_types.get(offset) or causes.TYPE_OF_KIND.get(kind)

    def event(self, event: dict) -> None:
        kind = event["type"]
        self.calm = None
        if kind not in TOPIC_SCOPED:  # every shard sees it: thresholds in time are checked at it
            self.anomalies.tick(event["offset"], event["timestamp"])
        if self.fast and self.settled(event["timestamp"]) and (
                kind == "BrokerHeartbeatRequest" and self.steady(event)
                or kind == "AlterPartitionRequest" and self.elsewhere(event)):
            return
        if registry()[event["type"]].kind == "request":
            self.request(event)
            return
        self.state.in_term = False  # a record another controller wrote: its term, not ours
        self.changed()
        reporter = event["type"] in TOPIC_SCOPED or self.shard == 0
        self.apply(event, event, reporter, self.batch_of(event), event["offset"])

    def calm_requests(self, events: list[dict], i: int, stop: int) -> int:
        """The heartbeats and AlterPartitions of ``events[i:stop]`` while the step is calm (``calm_until``):
        as ``event`` decides them, without the tick and the ``settled`` test that would find nothing to do,
        in one loop (nine in ten requests are heartbeats). The index of the first event left to ``event``."""
        if not self.fast:
            return i
        # (the step's attributes and methods held in locals, ``steady``'s tests made here rather than through it,
        # and the offset set only where it is read: by a request's decision and after the loop; nine in ten
        # requests come through here, on every shard)
        state, image, elsewhere, calm, running, start = self.state, self.image, self.elsewhere, self.calm, None, i
        answering = self.shard == 0
        for i in range(start, stop):
            event = events[i]
            kind = event["type"]
            if kind != "BrokerHeartbeatRequest" and kind != "AlterPartitionRequest":
                break
            now = event["timestamp"]
            if calm is None:
                calm = self.calm = self.calm_until()
            if now >= calm:
                calm = self.calm_again(now)
                if now >= calm:
                    break
            if kind == "BrokerHeartbeatRequest":
                if running is None:
                    running = self.sessions_running()
                data = event["data"]
                caught_up = steady_heartbeat(image, running, data, now)
                if caught_up is not None or stale_heartbeat(image, data):
                    if answering or self.unordered:
                        self.steady_answer(event, caught_up, answering)
                    continue
            elif elsewhere(event):
                continue
            state.last_offset = event["offset"]
            self.calm = calm = running = None
            self.request(event)
        else:
            i = stop
        if i > start:
            state.last_offset = events[i - 1]["offset"]
        return i

    def heartbeats(self, beats: Heartbeats, start: int, stop: int) -> None:
        """Heartbeats ``start`` to ``stop`` of ``beats`` (no other event between them), as ``calm_requests``
        and ``event`` decide them: while the step is calm, those ``steady`` would take from the columns (the
        sessions' contacts updated, shard 0's answers noted for one ``Answers``), the others as dicts in full
        (``request``); outside the calm, as dicts one by one (``event``)."""
        state, image = self.state, self.image
        self.in_canonical_order()  # (what every path of a heartbeat does first)
        offsets, times, brokers, epochs, metadata, fence, shutdown, offline, versions = beats.values
        registered = image.brokers
        answered = self.answered if self.shard == 0 else None
        while start < stop:
            calm = self.calm
            if calm is None:
                calm = self.calm = self.calm_until()
            if times[start] >= calm:
                calm = self.calm_again(times[start])
                if times[start] >= calm:
                    state.last_offset = offsets[start]
                    self.event(beats.event(start))
                    start += 1
                    continue
            running = self.sessions_running()
            i = start
            while i < stop:  # ``steady`` and ``steady_heartbeat``, on the columns
                now = times[i]
                if now >= calm:
                    break
                broker, epoch = brokers[i], epochs[i]
                session = running.get(broker)
                if session is not None and session.epoch == epoch and not fence[i] and not shutdown[i] \
                        and session.contact_ms <= now \
                        and not (offline[i] and any(d in registered[broker].directories for d in beats.dirs[i])):
                    offset = metadata[i]
                    session.contact_ms, session.metadata_offset = now, offset
                    kind = CAUGHT_UP if offset >= session.registered_offset else STEADY
                else:
                    known = registered.get(broker)
                    if known is not None and known.epoch == epoch:  # (not ``stale_heartbeat``'s)
                        break
                    kind = STALE
                if answered is not None:
                    answered.append((offsets[i], now, versions[i] * 3 + kind))
                i += 1
            if i > start:
                state.last_offset = offsets[i - 1]
                start = i
            if start < stop and times[start] < calm:  # neither steady nor stale
                state.last_offset = offsets[start]
                self.calm = None
                self.request(beats.event(start))
                start += 1

    def batch_of(self, event: dict) -> Batch | None:
        """The causes in ``event``'s batch of the log (``causes``), if any."""
        return self.batches.get((event.get("source"), event.get("position"))) if self.batches else None

    def apply(self, event: dict, cause: dict, reporter: bool, batch: Batch | None, place: int) -> None:
        """Replay one record (read from the log, or generated for ``cause``) and collect its rows. ``batch``
        and ``place``: the record's batch and its place in it, which the causes of its changes are read from."""
        out, image = self.out, self.image
        decided = cause is not event
        kind = event["type"]
        held = image.pending_events if kind in MARKERS and image.pending_kind is not None else []
        if self.shard == 0 and kind in FEATURE_EVENTS:
            settings = features.Settings(image, kind == "SnapshotFooterRecord")
        result = replay(image, event)
        if kind not in CONFIG_NEUTRAL:  # a config, the active controller (LeaderChangeMessage), a snapshot, ...
            self.min_isrs.clear()
            self.elections.clear()
        if result.rejected is not None and reporter:
            out.add("rejected", "append", cause["offset"], rejected_row(event, result.rejected))
        for offset, type_, reason in result.deferred_rejections:
            # held records were routed like any other: the topic's shard reports its own, shard 0 the rest
            if type_ in TOPIC_SCOPED or self.shard == 0:
                out.add("rejected", "append", offset, rejected_row(event, reason, offset, type_))
        if kind == "TopicRecord" and result.rejected is None:
            self.names[event["data"]["TopicId"]] = event["data"]["Name"]  # one name, not all (O(topics²))
        elif kind in MARKERS:  # a transaction's held records, topics among them, applied at once
            self.names.update((tid, t.name) for tid, t in image.topics.items())
        if kind in ("TopicRecord", "PartitionRecord") or kind in MARKERS:
            self.unordered = True
        if kind == "EndTransactionRecord":  # a transaction is one batch, whatever batches carried it
            batch = Batch.of((e["offset"], e["offset"], e) for e in held)
        for before, after in result.partition_changes:
            current = after if after is not None else before
            if kind == "SnapshotFooterRecord":
                why = Cause(causes.SNAPSHOT_LOADED)
            else:
                why = causes.partition_cause(batch, current.last_offset if kind in MARKERS else place, before, after,
                                             cause["offset"] if decided else None)
            self.partition_changed(event, cause, before, after, why)
        if result.rejected is None and (kind == "ConfigRecord" or kind in MARKERS) and any(
                e["type"] == "ConfigRecord" and e["data"]["Name"] == MIN_ISR
                for e in (held if kind in MARKERS else [event])):
            self.min_isr_changed(event, cause)
        if self.shard == 0:
            for before, after in result.broker_changes:
                self.latest_brokers[(after or before).id] = (event, after)
                self.broker_history(event, cause, before, after)
            if kind in FEATURE_EVENTS and result.rejected is None and not result.deferred:
                for row in settings.rows(event, held if kind in MARKERS else [event]):
                    out.add("features", "append", cause["offset"], row)

    def partition_changed(self, event: dict, cause: dict, before: PartitionRegistration | None,
                          after: PartitionRegistration | None, why: Cause) -> None:
        """One partition's change that ``event`` made (for ``cause``: itself, or the request that decided it),
        ``why`` as ``causes.partition_cause`` found it: its partition_history row, the leadership counts, the
        anomaly rules and the partition's latest state."""
        current = after if after is not None else before
        decided = cause is not event
        history_cause = cause["type"]  # a decision's records are the request's changes
        topic = self.names.get(current.topic_id, "")
        self.out.add("partition_history", "append", cause["offset"],
                     history_row(topic, event, history_cause, before, after, why))
        self.anomalies.lead(before, after)
        cause_type = history_cause if decided or why.offset is None else self.cause_type(why.kind, why.offset)
        place = _tuple_new(Place, (cause["offset"], event["timestamp"], topic, current.topic_id, current.partition_id))
        self.anomalies.partition_change(place, before, after, why, cause_type, self.min_isr(topic))
        self.latest_partitions[(current.topic_id, current.partition_id)] = (cause["offset"], topic, after)

    def decided_change(self, request: dict, event: dict, batch: Batch | None, place: int) -> bool:
        """A PartitionChangeRecord ``request``'s decision made (``event``: as written to the log), replayed and
        recorded as ``apply`` would, straight from ``partitions.merge`` (the fast path; ``fast=False``: ``apply``).
        AlterPartitions are a third of a heavy step's CPU, each one or two such records, and ``replay``'s
        dispatch, its result and ``apply``'s tests for other kinds of record are work these do not need
        (docs/performance.md). False, with nothing changed, when the record needs ``apply``: inside a
        transaction (held back), or rejected (an unknown partition, a merge refused)."""
        image = self.image
        if image.pending_kind is not None:
            return False
        data = event["data"]
        topic = image.topics.get(normalize_uuid(data["TopicId"]))
        before = None if topic is None else topic.partitions.get(data["PartitionId"])
        if before is None:
            return False
        after = merge(before, data, event["offset"], event["timestamp"])
        if isinstance(after, str):
            return False
        topic.partitions[before.partition_id] = after
        self.partition_changed(event, request, before, after,
                               causes.partition_cause(batch, place, before, after, request["offset"]))
        return True

    def min_isr(self, topic: str) -> int:
        value = self.min_isrs.get(topic)
        if value is None:
            value = self.min_isrs[topic] = min_insync_replicas(self.image, topic, self.config)
        return value

    def min_isr_changed(self, event: dict, cause: dict) -> None:
        """A ``min.insync.replicas`` changed (a topic's, a broker's, the cluster's): every partition of this
        shard's topics is measured against the value now in force (a rare event, so the whole image is walked)."""
        for topic_id, t in self.image.topics.items():
            if not self.owns(topic_id):
                continue
            min_isr = self.min_isr(t.name)
            for p in t.partitions.values():
                self.anomalies.measure(Place(cause["offset"], event["timestamp"], t.name, topic_id, p.partition_id),
                                       p.isr, min_isr, MIN_ISR_CONFIG, cause["offset"], cause["type"])

    def broker_history(self, event: dict, cause: dict, before: BrokerRegistration | None,
                       after: BrokerRegistration | None) -> None:
        """broker_history rows for one broker's change: a row per state it went through, with the cause."""
        kind = event["type"]
        broker = after if after is not None else before
        registration = kind == "RegisterBrokerRecord" if kind not in MARKERS else causes.is_registration(before, after)
        marks: Marks | None = self.state.marks.get(broker.id, {})
        for state in causes.broker_transitions(before, after, registration):
            if kind == "SnapshotFooterRecord":
                reason, named = causes.SNAPSHOT_LOADED, None
            else:
                reason, named = causes.broker_cause(state, before, after, registration, marks or {})
            if cause is not event:  # this controller's decision: it knows why, and the request is the cause
                reason = decided_cause(state, reason, cause, self.before_decision)
                named = (cause["offset"], cause["type"])
            row = {
                "offset": event["offset"], "timestamp": event["timestamp"], "broker_id": broker.id,
                "epoch": broker.epoch, "incarnation_id": broker.incarnation_id, "state": state, "cause": reason,
                "cause_offset": None if named is None else named[0],
                "cause_type": None if named is None else named[1],
                "record": kind, "fenced": None if after is None else after.fenced,
                "in_controlled_shutdown": None if after is None else after.in_controlled_shutdown}
            self.out.add("broker_history", "append", event["offset"], row)
            self.anomalies.broker_state(row)
            if kind == "SnapshotFooterRecord" and state == causes.REGISTERED:
                marks = {}  # where its registration was, a snapshot does not say
            else:
                marks = causes.marked(marks or {}, state, event["offset"], cause["type"])
        if marks is None:
            self.state.marks.pop(broker.id, None)
        else:
            self.state.marks[broker.id] = marks

    def _record_by_record(self, run: int) -> bool:
        """Whether a run of ``run`` records goes one by one: too short to pay for a column pass, or inside
        a transaction (whose records replay holds back until its end)."""
        return run < FAST_RUN or self.image.pending_kind is not None

    def changes(self, changes: partition_changes.Changes) -> None:
        """A run of simple PartitionChangeRecords (``partition_changes.is_simple``), in offset order: on
        the columns at once where it is long enough and the partitions are there; every record the
        columns cannot take (an unknown partition: a rejection) one by one, in its place."""
        image = self.image
        self.calm = None
        self.state.last_offset = int(changes.offsets[-1])
        if self._record_by_record(len(changes)):
            for i in range(len(changes)):
                self.event(changes.event(i))
            return
        image.store.flush()
        rows = partition_changes.rows_of(image, changes)
        self.state.in_term = False  # records another controller wrote: its term, not ours
        start = 0
        for stop in np.flatnonzero(rows < 0).tolist() + [len(changes)]:
            if stop > start:
                self._on_columns(changes.take(np.arange(start, stop)), rows[start:stop])
            if stop < len(changes):
                self.event(changes.event(stop))
            start = stop + 1

    def creations(self, run: list[dict]) -> None:
        """A run of PartitionRecords: each that makes a new partition of a known topic goes into the image
        without a row of its own, the run's history in one Block (a log creating a million partitions is
        a million of these); any other (a replacement, a rejection, one held in a transaction) one by one
        in its place."""
        image = self.image
        self.calm = None
        if self._record_by_record(len(run)):
            for event in run:
                self.event(event)
            return
        self.state.in_term = False
        self.unordered = True
        made: list[tuple[dict, PartitionRegistration]] = []
        for event in run:
            topic_id = normalize_uuid(event["data"]["TopicId"])
            topic = image.topics.get(topic_id)
            after = None if topic is None or event["data"]["PartitionId"] in topic.partitions else \
                registration(topic_id, event)
            if after is None or isinstance(after, str):
                self._created(made)
                made = []
                self.event(event)
                continue
            topic.partitions[after.partition_id] = after
            made.append((event, after))
        self._created(made)

    def _created(self, made: list[tuple[dict, PartitionRegistration]]) -> None:
        if not made:
            return
        n = len(made)
        regs = [r for _, r in made]
        offsets = [e["offset"] for e, _ in made]
        names = [self.names.get(r.topic_id, "") for r in regs]
        nulls = pa.nulls(n)

        def ints(name: str) -> list:
            return [getattr(r, name) for r in regs]

        why = [causes.partition_cause(self.batch_of(e), e["offset"], None, r, None) for e, r in made]
        self.out.rows.append(Block("partition_history", rows_table(
            "partition_history", "append", offsets, self.out.seqs(n), {
                "offset": offsets, "timestamp": [e["timestamp"] for e, _ in made], "applied_offset": offsets,
                "cause": pa.array(["PartitionRecord"] * n), "change": pa.array(["create"] * n), "topic": names,
                "topic_id": [r.topic_id for r in regs], "partition": ints("partition_id"),
                "leader_before": nulls, "leader": ints("leader"), "isr_before": nulls, "isr": ints("isr"),
                "replicas_before": nulls, "replicas": ints("replicas"), "leader_epoch_before": nulls,
                "leader_epoch": ints("leader_epoch"), "partition_epoch_before": nulls,
                "partition_epoch": ints("partition_epoch"), "adding_replicas": ints("adding_replicas"),
                "removing_replicas": ints("removing_replicas"), "elr": ints("elr"),
                "leader_recovery_state": ints("leader_recovery_state"), "cause_kind": [w.kind for w in why],
                "cause_offset": [w.offset for w in why], "cause_broker": [w.broker for w in why]})))
        latest = self.latest_partitions
        for offset, name, r in zip(offsets, names, regs):
            latest[(r.topic_id, r.partition_id)] = (offset, name, _FAST)
        for (event, r), name, w in zip(made, names, why):
            self.anomalies.lead(None, r)
            min_isr = self.min_isr(name)
            if r.leader == NO_LEADER or len(r.isr) < min_isr or r.adding_replicas or r.removing_replicas:
                self.anomalies.partition_change(Place(event["offset"], event["timestamp"], name, r.topic_id,
                                                      r.partition_id), None, r, w,
                                                "PartitionRecord" if w.offset is None else "TopicRecord", min_isr)

    def _on_columns(self, changes: partition_changes.Changes, rows: np.ndarray, decided: Decided | None = None
                    ) -> None:
        """A run applied to the columns, its rows and anomalies: records read from the log, or ``decided``
        by a request (whose type is then their cause)."""
        applied = partition_changes.apply(self.image, changes, rows)
        kinds, cause_offsets, brokers = self._column_causes(changes, applied, rows, decided)
        store, n = self.image.store, len(changes)
        names = [self.names.get(t, "") for t in changes.topic_ids]
        cols = store.cols
        ints = store.ints.values
        replicas = _lists(ints, cols["replicas"][rows], pa.int32())
        offsets = changes.offsets
        self.out.rows.append(Block("partition_history", rows_table(
            "partition_history", "append", offsets, self.out.seqs(n), {
                "offset": offsets, "timestamp": changes.timestamps, "applied_offset": offsets,
                "cause": pa.array(["PartitionChangeRecord" if decided is None else decided.request["type"]] * n),
                "change": pa.array(["change"] * n),
                "topic": names, "topic_id": changes.topic_ids, "partition": changes.partitions,
                "leader_before": applied.leader[0], "leader": applied.leader[1],
                "isr_before": _lists(ints, applied.isr[0], pa.int32()), "isr": _lists(ints, applied.isr[1], pa.int32()),
                "replicas_before": replicas, "replicas": replicas,
                "leader_epoch_before": applied.leader_epoch[0], "leader_epoch": applied.leader_epoch[1],
                "partition_epoch_before": applied.partition_epoch[0], "partition_epoch": applied.partition_epoch[1],
                "adding_replicas": _lists(ints, cols["adding_replicas"][rows], pa.int32()),
                "removing_replicas": _lists(ints, cols["removing_replicas"][rows], pa.int32()),
                "elr": _lists(ints, cols["elr"][rows], pa.int32()), "leader_recovery_state": applied.recovery,
                "cause_kind": pa.DictionaryArray.from_arrays(pa.array(kinds, pa.int8()), pa.array(causes.COLUMN_KINDS)),
                "cause_offset": pa.array(cause_offsets, pa.int64(), mask=cause_offsets < 0),
                "cause_broker": pa.array(brokers, pa.int32(), mask=brokers < 0)})))
        latest = self.latest_partitions
        for topic_id, partition, offset, name in zip(changes.topic_ids, changes.partitions.tolist(),
                                                     offsets.tolist(), names):
            latest[(topic_id, partition)] = (offset, name, _FAST)
        self._column_anomalies(changes, applied, rows, names, kinds, cause_offsets,
                               None if decided is None else decided.request["type"])

    def _column_causes(self, changes: partition_changes.Changes, applied: partition_changes.Applied, rows: np.ndarray,
                       decided: Decided | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``causes.change_causes`` of a run on the columns: kinds as codes into ``causes.COLUMN_KINDS``,
        cause offsets and brokers (-1: none). A decision's records are placed among its records, in its batch,
        and a change no record of it explains is named with the request's offset (``partition_cause``)."""
        n = len(changes)
        elr = self.image.store.cols["elr"][rows]  # (simple records leave it as it was)
        if decided is not None:
            batches = [] if decided.batch is None else [decided.batch]
            groups = np.full(n, 0 if batches else -1, np.int64)
            kinds, offsets, brokers = causes.change_causes(decided.places, groups, batches, applied.leader,
                                                           applied.isr, elr, self.image.store.ints.values)
            offsets[:] = decided.request["offset"]
            return kinds, offsets, brokers
        groups, batches = np.full(n, -1, np.int64), list(self.batches.values())
        if batches:  # only batches with causes are kept: a step without broker records has none
            index = {key: i for i, key in enumerate(self.batches)}
            groups = np.fromiter((index.get(key, -1) for key in zip(changes.sources, changes.positions)), np.int64, n)
        return causes.change_causes(changes.offsets, groups, batches, applied.leader, applied.isr, elr,
                                    self.image.store.ints.values)

    def _column_anomalies(self, changes: partition_changes.Changes, applied: partition_changes.Applied,
                          rows: np.ndarray, names: list[str], kinds: np.ndarray, cause_offsets: np.ndarray,
                          decided_by: str | None) -> None:
        """The anomaly rules for a run on the columns: column-wise, the changes that may open or close an
        episode (a partition without a leader before or after, an ISR below min.insync.replicas before or
        after, a leader recovering or elected from outside the ISR, a topic with an episode open or a
        reassignment in progress); those one by one, as the row-wise path does every change. ``decided_by``:
        the type of the request that decided the run, the cause of each change."""
        store, anomalies = self.image.store, self.anomalies
        ints, cols = store.ints.values, store.cols
        (leader_before, leader), (isr_before, isr) = applied.leader, applied.isr
        moved_leader = leader != leader_before
        if moved_leader.any():
            for brokers, sign in ((leader_before[moved_leader], -1), (leader[moved_leader], 1)):
                found, counts = np.unique(brokers, return_counts=True)
                anomalies.leaders.update({int(b): sign * int(n) for b, n in zip(found.tolist(), counts.tolist())})
            anomalies.counted = False
        codes = np.unique(np.concatenate([isr_before, isr]))
        sizes = np.fromiter((len(ints[c]) for c in codes.tolist()), np.int64, len(codes))
        topics = pa.array(names, pa.string()).dictionary_encode()
        mins = np.array([self.min_isr(t) for t in topics.dictionary.to_pylist()], np.int64)[topics.indices.to_numpy()]
        seen = ((leader == NO_LEADER) | (leader_before == NO_LEADER) | (applied.recovery == RECOVERING)
                | (sizes[np.searchsorted(codes, isr)] < mins) | (sizes[np.searchsorted(codes, isr_before)] < mins))
        ids = pa.array(changes.topic_ids, pa.string()).dictionary_encode()
        id_list, id_rows = ids.dictionary.to_pylist(), ids.indices.to_numpy()

        def watched() -> np.ndarray:
            return np.array([t in anomalies.watched for t in id_list], bool)[id_rows]

        if anomalies.watched:
            seen |= watched()
        moved = np.flatnonzero((leader != leader_before) & (leader != NO_LEADER) & ~seen)
        if len(moved):  # elected from outside the ISR: decided once per (ISR, leader) pair
            pairs = (isr_before[moved].astype(np.int64) << 32) | leader[moved].astype(np.int64)
            unique = np.unique(pairs)
            outside = np.fromiter(((p & 0xFFFFFFFF) not in ints[p >> 32] for p in unique.tolist()), bool, len(unique))
            seen[moved[outside[np.searchsorted(unique, pairs)]]] = True
        todo, k = np.flatnonzero(seen).tolist(), 0
        while k < len(todo):
            i = todo[k]
            k += 1
            topic_id = changes.topic_ids[i]
            was_watched = topic_id in anomalies.watched
            row, kind, cause_offset = int(rows[i]), causes.COLUMN_KINDS[kinds[i]], int(cause_offsets[i])
            elr, replicas = ints[cols["elr"][row]], ints[cols["replicas"][row]]
            adding, removing = ints[cols["adding_replicas"][row]], ints[cols["removing_replicas"][row]]
            before = Seen(int(leader_before[i]), ints[isr_before[i]], elr, replicas, adding, removing, -1)
            after = Seen(int(leader[i]), ints[isr[i]], elr, replicas, adding, removing, int(applied.recovery[i]))
            why = Cause(kind, None if cause_offset < 0 else cause_offset)
            anomalies.partition_change(
                Place(int(changes.offsets[i]), int(changes.timestamps[i]), names[i], topic_id,
                      int(changes.partitions[i])), before, after, why,
                decided_by or ("PartitionChangeRecord" if cause_offset < 0 else self.cause_type(kind, cause_offset)),
                int(mins[i]))
            if not was_watched and topic_id in anomalies.watched:  # an episode opened: its topic's later changes count
                later = watched()
                later[:i + 1] = False
                seen |= later
                todo = todo[:k] + (np.flatnonzero(seen[i + 1:]) + i + 1).tolist()

    def settled(self, now: int) -> bool:
        """Whether a request at event time ``now`` finds nothing to do before its own decision: this term
        has begun, no leader-imbalance check is due and no session can have expired (``quiet``). Then a
        request that changes nothing may take a fast path (``steady``, ``elsewhere``), which must leave
        the state exactly as ``request`` would."""
        state = self.state
        if not state.in_term:
            return False
        if self.rebalance:
            due = state.controller.balance_due_ms
            if due is None or now >= due:
                return False
        quiet = self.quiet
        return quiet is not None and now <= quiet or self.quiet_at(now)

    def calm_until(self) -> int:
        """The event time before which a heartbeat or AlterPartition finds the step ``settled`` and the
        anomalies' thresholds nothing to check (``Anomalies.idle_until``), for as long as only the fast
        paths run: they change no broker, no term, no threshold, and sessions only get later contacts, so
        neither bound moves earlier. ``NEVER`` when it is not settled now."""
        state = self.state
        if not state.in_term:
            return NEVER
        bound = self.anomalies.idle_until()
        if self.rebalance:
            due = state.controller.balance_due_ms
            if due is None:
                return NEVER
            bound = min(bound, due)
        if self.quiet is None:
            self.quiet = quiet_until(self.image, self.state.controller, self.timeout_ms)
        return NEVER if self.quiet is None else min(bound, self.quiet + 1)

    def calm_again(self, now: int) -> int:
        """``calm_until`` found again for an event at ``now``, at or past the bound last found: ``quiet`` too, if
        ``now`` is past it (a bound from earlier contacts: found again, it is usually much later). A ``quiet``
        that still holds is kept: the bound passed was another (the anomalies' thresholds), and finding it again
        walks every broker's session."""
        if self.quiet is None or now > self.quiet:
            self.quiet = None
        calm = self.calm = self.calm_until()
        return calm

    def steady(self, request: dict) -> bool:
        """The fast path of a heartbeat that changes nothing (``cluster_control.steady_heartbeat``, or
        ``stale_heartbeat``: refused as another incarnation's) while the step is ``settled``: no decision, no
        records, and the answer only from shard 0 (every shard answers a broker request alike, and
        ``merged_responses`` keeps the first shard's). False, with nothing changed, when the request needs
        ``request``."""
        caught_up = steady_heartbeat(self.image, self.sessions_running(), request["data"], request["timestamp"])
        if caught_up is None and not stale_heartbeat(self.image, request["data"]):  # (steady_heartbeat leaves
            return False                                                             # these alone)
        self.steady_answer(request, caught_up, self.shard == 0)
        return True

    def steady_answer(self, request: dict, caught_up: bool | None, answering: bool) -> None:
        """What a heartbeat ``steady`` took leaves besides its session's contact: the topics in canonical order
        (what ``request`` does first), and on shard 0 (``answering``; the other shards have no answer to write)
        its answer, noted for one ``Answers`` (``answers``), not a dict each, unless the step makes no columns."""
        self.in_canonical_order()
        if answering:
            code = request["version"] * 3 + (STALE if caught_up is None else CAUGHT_UP if caught_up else STEADY)
            if self.columns:
                self.answered.append((request["offset"], request["timestamp"], code))
            else:
                self.answer(request, _heartbeat_row(code))

    def sessions_running(self) -> dict[int, Session]:
        """``running_sessions``, found again only after ``changed``."""
        running = self.running
        if running is None:
            running = self.running = running_sessions(self.image, self.state.controller)
        return running

    def elsewhere(self, request: dict) -> bool:
        """The fast path of an AlterPartition about other shards' topics only
        (``replication.altered_elsewhere``) while the step is ``settled``: no decision, and only shard 0
        answers (with no topic, which the merge unites with the owners' answers). False, with nothing
        changed, when it needs ``request``."""
        if not altered_elsewhere(self.image, request, self.owns):
            return False
        self.answer(request, _elsewhere_row(request["version"]))
        return True

    def answer(self, request: dict, row: dict) -> None:
        """Shard 0's ``responses`` row of a fast path, from a shared ``row`` made for the request's type
        and version (``_steady_row``); what ``request`` would have done first (``_canonical_order``)."""
        self.in_canonical_order()
        if self.shard == 0:  # (the answer's ``data`` stays shared: nothing writes into an answer once made)
            row = row.copy()
            row["offset"], row["timestamp"] = request["offset"], request["timestamp"]
            self.out.add("responses", "response", request["offset"], row)

    def in_canonical_order(self) -> None:
        """The topics in canonical order (``_canonical_order``) if a record may have left them out of it: what
        every request's path does first, fast or full."""
        if self.unordered:
            _canonical_order(self.image)
            self.unordered = False

    def changed(self) -> None:
        """Brokers or their sessions may have changed: what ``quiet``, ``leaving`` and ``running`` hold is to be
        found again."""
        self.quiet = self.leaving = self.running = None

    def shutting_down(self) -> frozenset[int]:
        if self.leaving is None:
            self.leaving = shutting_down(self.image, self.state.controller)
        return self.leaving

    def quiet_at(self, now: int) -> bool:
        """Whether no session can have expired by event time ``now``, so ``expire_sessions`` may be skipped."""
        if self.quiet is None:
            self.quiet = quiet_until(self.image, self.state.controller, self.timeout_ms)
        return self.quiet is not None and now <= self.quiet

    def request(self, request: dict) -> None:
        """Decide a request as Kafka's controller would: first fence the brokers whose sessions expired
        by the request's event time, then a leader-imbalance check if one is due, then the decision;
        all their records are replayed and logged."""
        state = self.state
        self.logged = 0  # the request's records in controller_log so far: their seq
        self.in_canonical_order()
        ctx = self.ctx
        ctx.now_ms, ctx.offset = request["timestamp"], request["offset"]
        starts = not state.in_term
        quiet = self.fast and not starts and self.quiet_at(ctx.now_ms)
        decision = handle_request(self.image, state.controller, request, ctx,
                                  lambda records: self.generated(request, records, before_decision=True),
                                  starts_term=starts, expire=not quiet,
                                  shutting_down=None if starts or not quiet else self.shutting_down)
        state.in_term = True
        if starts or not quiet or request["type"] in BROKER_REQUESTS:
            self.changed()  # sessions may have started, expired or changed (broker records: ``apply``)
        if decision is None:
            if self.shard == 0:
                self.out.add("rejected", "append", request["offset"],
                             rejected_row(request, f"the controller does not decide {request['type']} yet"))
            return
        self.generated(request, decision.records)
        self.out.add("responses", "response", request["offset"], response_row(request, decision.response, self.shard))

    def generated(self, request: dict, records: list[dict] | Records, before_decision: bool = False) -> None:
        """Records a decision made: partition records stay with their topic's shard; every other record
        is replayed by every shard (they all decided it alike) and logged by shard 0. They are one batch, as
        in Kafka's log; ``before_decision``: what the controller did before deciding the request itself
        (session expiries, leader balance). A failover's records held as columns (``Records.parts``) are
        applied as such (``shaped``)."""
        parts = records.parts if isinstance(records, Records) else [records]
        causing, place = [], 0
        for part in parts:
            if not isinstance(part, Shaped):  # (a Shaped holds PartitionChangeRecords, which cause nothing)
                causing += [(place + i, request["offset"], r) for i, r in enumerate(part)
                            if r["type"] in causes.CAUSE_TYPES]
            place += len(part)
        batch = Batch.of(causing) if causing else None  # (an empty batch explains no change either)
        self.before_decision = before_decision
        place = 0
        for part in parts:
            if isinstance(part, Shaped):
                self.shaped(request, part, batch, place)
            else:
                for i, record in enumerate(part):
                    self.generated_one(request, record, batch, place + i)
            place += len(part)

    def generated_one(self, request: dict, record: dict, batch: Batch | None, place: int) -> None:
        """One record of a decision, at ``place`` among its records, replayed and logged (``generated``)."""
        topic_id = record["data"].get(TOPIC_SCOPED.get(record["type"], ""))
        if topic_id is not None and not self.owns(topic_id):
            return
        shard = self.shard
        logged = topic_id is not None or shard == 0
        event = {**record, **_written_by(request)}
        if not (self.fast and record["type"] == "PartitionChangeRecord"
                and self.decided_change(request, event, batch, place)):
            self.apply(event, request, logged, batch, place)
        if logged:
            # seq: the record's place among the request's records on this shard, whatever the batch
            self.out.add("controller_log", "append", request["offset"], {**event, "shard": shard, "seq": self.logged})
            self.logged += 1

    def shaped(self, request: dict, run: Shaped, batch: Batch | None, place: int) -> None:
        """A decision's PartitionChangeRecords held as columns (a failover's), the first at ``place`` among its
        records: as ``generated_one`` would apply and log them one by one, but each long enough stretch of
        simple ones (``partition_changes.is_simple``) applied to the columns at once, its history in one
        Block, its controller_log rows made from the columns."""
        n = len(run)
        owned = np.array([self.owns(t) for t in run.topic_ids], bool)[run.ranks]
        # 0: another shard's, 1: one by one, 2: simple, to the columns
        kind = np.where(owned, np.where(run.simple() if self.columns else False, 2, 1), 0)
        bounds = np.flatnonzero(np.diff(kind)) + 1
        for start, stop in zip([0, *bounds.tolist()], [*bounds.tolist(), n]):
            if kind[start] == 0:
                continue
            index = np.arange(start, stop)
            if kind[start] == 2 and stop - start >= DECIDED_RUN and not self._record_by_record(stop - start):
                self.image.store.flush()
                changes, rows = run.changes(self.image, request["offset"], request["timestamp"],
                                            request["leader_epoch"], index)
                if np.all(rows >= 0):  # (a partition the image lacks: replay rejects it, one by one)
                    self._on_columns(changes, rows, Decided(request, batch, place + index))
                    self._logged(request, run, index)
                    continue
            records = run.records()
            for i in range(start, stop):
                self.generated_one(request, records[i], batch, place + i)

    def _logged(self, request: dict, run: Shaped, index: np.ndarray) -> None:
        """controller_log rows of records ``index`` of ``run``, as ``generated_one`` makes them."""
        offset, shard, rows = request["offset"], self.shard, self.out.rows
        fixed = {**_written_by(request), "shard": shard}
        versions = [t["version"] for t in run.templates]
        for seq, logged, shape, data in zip(self.out.seqs(len(index)).tolist(),
                                            range(self.logged, self.logged + len(index)),
                                            run.shape[index].tolist(), run.data(index)):
            rows.append(Output("controller_log", "append", offset, seq,
                               {"type": "PartitionChangeRecord", "version": versions[shape], "data": data, **fixed,
                                "seq": logged}))
        self.logged += len(index)

    def answers(self) -> Answers:
        """Shard 0's answers to the heartbeats its fast paths decided, as ``answer`` would have made them."""
        n = len(self.answered)
        noted = np.fromiter(chain.from_iterable(self.answered), np.int64, 3 * n).reshape(n, 3).T
        kinds, places = np.unique(noted[2], return_inverse=True)
        return Answers(noted[0].copy(), noted[1].copy(), [_heartbeat_row(kind) for kind in kinds.tolist()], places,
                       self.out.seqs(n))

    def finish(self, topics_before: dict, configs_before: dict) -> list[Output]:
        out, image, shard = self.out, self.image, self.shard
        # state tables need only each key's last state of the step: one row per key, not one per event
        on_columns = []
        for key, (offset, topic, after) in self.latest_partitions.items():
            if after is _FAST:
                on_columns.append((key, offset, topic))
            elif after is None:
                out.add("partitions", "delete", offset, {"topic_id": key[0], "partition": key[1]})
            else:
                out.add("partitions", "upsert", offset, partition_row(topic, after))
        if on_columns:
            out.rows.append(Block("partitions", _partition_rows(image, on_columns, out.seqs(len(on_columns)))))
        for broker_id, (event, after) in self.latest_brokers.items():
            if after is None:
                out.add("brokers", "delete", event["offset"], {"broker_id": broker_id})
            else:
                out.add("brokers", "upsert", event["offset"], broker_row(after, event))
        for offset, row in self.anomalies.take():
            out.add("anomalies", "upsert", offset, row)
        if self.answered:
            out.rows.append(self.answers())
        for offset, timestamp, counts in self.anomalies.reported:
            out.add(LEADER_COUNTS, "counts", offset, {"shard": shard, "timestamp": timestamp,
                                                      "counts": [[b, n, p] for b, (n, p) in counts.items()]})
        self.anomalies.reported = []
        last = self.state.last_offset
        topics_after = _topics_snapshot(image)
        for tid in sorted(topics_before.keys() | topics_after.keys()):
            if topics_before.get(tid) == topics_after.get(tid) or not self.owns(tid):
                continue
            if tid in topics_after:
                name, count = topics_after[tid]
                out.add("topics", "upsert", last, {"topic_id": tid, "name": name, "partitions": count})
            else:
                out.add("topics", "delete", last, {"topic_id": tid})
        if shard == 0:
            for key in sorted(configs_before.keys() | image.configs.keys()):
                old, new = configs_before.get(key, {}), image.configs.get(key, {})
                for name in sorted(old.keys() | new.keys()):
                    row = {"resource_type": key[0], "resource_name": key[1], "name": name}
                    if name not in new:
                        out.add("configs", "delete", last, row)
                    elif old.get(name) != new[name]:
                        out.add("configs", "upsert", last, {**row, "value": new[name]})
        return out.rows


def _written_by(request: dict) -> dict:
    """Where a record a request decided is in the log: at the request's offset, time and leader epoch, read
    from no source file."""
    return {"offset": request["offset"], "leader_epoch": request["leader_epoch"], "timestamp": request["timestamp"],
            "source": None, "position": None}


def step(shard: int, shards: int, state: ShardState, events: Iterable[dict],
         config: Mapping[str, str] | None = None, columns: bool = True,
         changes: partition_changes.Changes | None = None, fast: bool = True, heartbeats: Heartbeats | None = None
         ) -> list[Output | Block | Answers]:
    """Replay this shard's records and decide its requests, in offset order; the warehouse's rows.

    Events at or below the state's last offset were applied already (a micro-batch that Spark
    re-runs after a failure) and are skipped, which keeps the step idempotent on its own.
    ``config`` holds the Kafka configs decisions read (``broker.session.timeout.ms``, ...).
    ``changes`` are simple PartitionChangeRecords already in columns (the streaming job reads them so,
    without a dict per record), in offset order, beside ``events``; without them the simple records of
    ``events`` are picked out. ``heartbeats``: heartbeats so read (``Heartbeats``), beside ``events``; decided on
    the columns while the step is calm, and made dicts when anything is unusual (``changes`` beside them,
    ``columns=False``, ``fast=False``), so that the dicts' path stays the reference. ``columns=False`` replays
    every record one by one (the reference the column-wise runs are tested against); ``fast=False`` decides
    every request in full, with no fast path for the requests that change nothing (``_Step.settled``: the
    reference those are tested against).
    """
    # aged on the way out: the next young collection would walk everything the step made (0.46 s a step at 10^5
    # partitions), and what it drops holds no cycle (tests/test_step_cycles.py), so reference counting frees it
    with collector_paused():
        image = state.image
        topics_before = _topics_snapshot(image)
        configs_before = {k: dict(v) for k, v in image.configs.items()} if shard == 0 else {}
        work = _Step(shard, shards, state, config or {}, fast, columns)
        last = state.last_offset
        # the leadership counts as the step starts (``anomalies.Leadership``)
        state.anomalies.reported = [(last, -1, state.anomalies.counts())]
        events = sorted(events, key=_OFFSET)
        if events and events[0]["offset"] <= last:
            events = [e for e in events if e["offset"] > last]
        kinds = set(map(_TYPE, events))
        causing = [e for e in events if e["type"] in causes.CAUSE_TYPES] if kinds & causes.CAUSE_TYPES else []
        work.cause_types = {e["offset"]: e["type"] for e in causing}
        if columns and changes is None and "PartitionChangeRecord" in kinds:
            simple = [e["type"] == "PartitionChangeRecord" and partition_changes.is_simple(e["data"]) for e in events]
            changes = partition_changes.Changes.of_events([e for e, s in zip(events, simple) if s])
            events = [e for e, s in zip(events, simple) if not s]
        elif not columns and changes is not None:
            events = sorted(events + [changes.event(i) for i in range(len(changes))], key=lambda e: e["offset"])
            changes = None
        work.batches = _batches(causing)  # simple PartitionChangeRecords cause nothing: they are not looked at
        if changes is not None:
            changes = changes.take(np.flatnonzero(changes.offsets > state.last_offset))
        if changes is not None and len(changes) == 0:
            changes = None  # a log of requests has none: no run to cut
        if heartbeats is not None:
            if len(heartbeats) and heartbeats.offsets[0] <= last:
                heartbeats = heartbeats.take(np.flatnonzero(heartbeats.offsets > last))
            if changes is not None or not columns or not fast:
                events = sorted(events + heartbeats.events(), key=_OFFSET)
                heartbeats = None
            elif not len(heartbeats):
                heartbeats = None
        if changes is not None:
            # each dict event's place among the column records: those before it are one run
            cuts = np.searchsorted(changes.offsets, [e["offset"] for e in events]).tolist() + [len(changes)]
        if heartbeats is not None:  # and among the heartbeats
            beat_cuts = np.searchsorted(heartbeats.offsets, [e["offset"] for e in events]).tolist() + [len(heartbeats)]
        start, i, beat = 0, 0, 0
        creations: list[dict] = []  # PartitionRecords in a row
        while True:
            if changes is not None and cuts[i] > start:
                if creations:
                    work.creations(creations)
                    creations = []
                work.changes(changes.take(np.arange(start, cuts[i])))
                start = cuts[i]
            if heartbeats is not None and beat_cuts[i] > beat:
                if creations:
                    work.creations(creations)
                    creations = []
                work.heartbeats(heartbeats, beat, beat_cuts[i])
                beat = beat_cuts[i]
            if i == len(events):
                break
            event = events[i]
            state.last_offset = event["offset"]
            i += 1
            if columns and event["type"] == "PartitionRecord":
                creations.append(event)
                continue
            if creations:
                work.creations(creations)
                creations = []
            if changes is None:  # (a run of requests never spans column records)
                # nor column heartbeats: it ends before the next
                stop = len(events) if heartbeats is None else bisect_right(beat_cuts, beat_cuts[i - 1], i - 1,
                                                                           len(events))
                taken = work.calm_requests(events, i - 1, stop)
                if taken >= i:
                    i = taken
                    continue
            work.event(event)
        if creations:
            work.creations(creations)
        rows = work.finish(topics_before, configs_before)
        image.store.compact_codes()
        return rows


def _batches(events: list[dict]) -> dict[tuple[str, int], Batch]:
    """The batches of the log (records sharing a source and position) that hold records causing others.
    The streaming source cuts micro-batches between batches only, so a step sees each of its batches whole."""
    found: dict[tuple[str, int], Batch] = {}
    for event in events:
        if event["type"] not in causes.CAUSE_TYPES:
            continue
        source, position = event.get("source"), event.get("position")
        if source is not None and position is not None:
            found.setdefault((source, position), Batch([], {})).add(event["offset"], event["offset"], event)
    return found


def _partition_rows(image: ClusterImage, entries: list[tuple[tuple[str, int], int, str]], seqs: np.ndarray) -> pa.Table:
    """``partitions`` upserts, from the columns, of partitions last changed by a column-wise run."""
    store: PartitionStore = image.store
    store.flush()
    rows = np.fromiter((image.topics[topic_id].partitions.rows[partition] for (topic_id, partition), _, _ in entries),
                       np.int64, len(entries))
    cols, ints = store.cols, store.ints.values
    return rows_table("partitions", "upsert", [offset for _, offset, _ in entries], seqs, {
        "topic": [topic for _, _, topic in entries], "topic_id": [key[0] for key, _, _ in entries],
        "partition": cols["partition_id"][rows], **{name: _lists(ints, cols[name][rows], pa.int32()) for name in (
            "replicas", "isr", "adding_replicas", "removing_replicas", "elr", "last_known_elr")},
        "directories": _lists(store.dirs.values, cols["directories"][rows], pa.string()),
        **{name: cols[name][rows] for name in ("leader", "leader_epoch", "partition_epoch", "leader_recovery_state",
                                               "last_offset", "last_timestamp")}})


def response_row(request: dict, response: dict, shard: int) -> dict:
    data = response["data"]
    error_code = data.get("ErrorCode")
    return {"offset": request["offset"], "timestamp": request["timestamp"], "request_type": request["type"],
            "request_version": request["version"], "type": response["type"], "version": response["version"],
            "error_code": error_code, "error_name": error_name(error_code),
            "error_message": data.get("ErrorMessage"), "data": data, "shard": shard}


def _answer_row(request_type: str, version: int, data: dict) -> dict:
    """A ``responses`` row (offset and timestamp to be filled in) of shard 0, as ``response_row``
    makes it for the decision's answer ``data``."""
    request = {"offset": None, "timestamp": None, "type": request_type, "version": version}
    answer = response(request_type.replace("Request", "Response"), data, version)
    return response_row(request, answer, 0)


@cache
def _steady_row(version: int, caught_up: bool) -> dict:
    """A steady heartbeat's answer (``cluster_control.decide_broker_heartbeat``); shared: callers copy it."""
    return _answer_row("BrokerHeartbeatRequest", version,
                       {"ErrorCode": 0, "IsCaughtUp": caught_up, "IsFenced": False, "ShouldShutDown": False})


@cache
def _stale_row(version: int) -> dict:
    """The answer to a heartbeat of an unknown broker or another epoch (``cluster_control.stale_heartbeat``)."""
    return _answer_row("BrokerHeartbeatRequest", version, {"ErrorCode": error_code("STALE_BROKER_EPOCH")})


def _heartbeat_row(code: int) -> dict:
    """The shared answer of a heartbeat a fast path decided, by its code (version * 3 + STALE, STEADY or CAUGHT_UP)."""
    version, kind = divmod(code, 3)
    return _stale_row(version) if kind == STALE else _steady_row(version, kind == CAUGHT_UP)


@cache
def _elsewhere_row(version: int) -> dict:
    """The answer of a shard that owns none of an AlterPartition's topics (``replication.alter_partition``)."""
    return _answer_row("AlterPartitionRequest", version, {"ErrorCode": 0, "Topics": []})


def merged_responses(outputs: Iterable[Output]) -> list[dict]:
    """One ``responses`` row per request: the shards' answers merged in shard order."""
    by_request: dict[int, list[dict]] = {}
    for o in outputs:
        if o.op == "response":
            by_request.setdefault(o.offset, []).append(o.row)
    rows = []
    for offset in sorted(by_request):
        parts = by_request[offset]
        if len(parts) > 1:
            parts.sort(key=lambda r: r["shard"])
        row = dict(parts[0])
        del row["shard"]
        if len(parts) > 1:
            row["data"] = merge_responses([p["data"] for p in parts])
        rows.append(row)
    return rows


def expand(outputs: Iterable[Output | Block | Answers]) -> list[Output]:
    """Blocks and answers as the rows they hold, for code that goes row by row."""
    rows: list[Output] = []
    for o in outputs:
        if isinstance(o, (Block, Answers)):
            rows.extend(o.outputs())
        else:
            rows.append(o)
    return rows


def leader_imbalance(outputs: Iterable[Output], open_rows: Iterable[dict], config: Mapping[str, str]) -> list[Output]:
    """The leader_imbalance episodes a micro-batch opened or closed, as anomalies upserts: judged after the
    shards, from the leadership counts they reported (``LEADER_COUNTS``), given the episodes open before it."""
    reports = [(o.offset, o.row["timestamp"], o.row["shard"], {b: (n, p) for b, n, p in o.row["counts"]})
               for o in outputs if o.table == LEADER_COUNTS]
    if not any(timestamp >= 0 for _, timestamp, _, _ in reports):
        return []
    judge = Leadership(float(setting(config, IMBALANCE_PERCENTAGE)),
                       {r["broker_id"]: r for r in open_rows if r["kind"] == IMBALANCE and r["end_offset"] is None})
    return [Output("anomalies", "upsert", offset, -1, row) for offset, row in judge.rows(reports)]


def apply_outputs(tables: dict[str, dict], outputs: Iterable[Output | Block | Answers],
                  config: Mapping[str, str] | None = None) -> None:
    """Fold outputs into in-memory tables (keyed rows for state, lists for appends), in order; the leader
    imbalance judged after them, as the controller's sink does."""
    outputs = expand(outputs)
    responses = merged_responses(outputs)
    if responses:
        tables.setdefault("responses", []).extend(responses)
    outputs += leader_imbalance(outputs, iter_rows(tables.get("anomalies", {})), config or {})
    for o in sorted(outputs, key=lambda o: (o.offset, o.seq)):
        if o.op in ("response", "counts"):
            continue
        if o.op == "append":
            tables.setdefault(o.table, []).append(o.row)
            continue
        key = tuple(o.row[k] for k in table_keys(o.table))
        rows = tables.setdefault(o.table, {})
        if o.op == "delete":
            rows.pop(key, None)
        else:
            rows[key] = o.row


def replay_log(events: Iterable[dict], shards: int, config: Mapping[str, str] | None = None, columns: bool = True,
               fast: bool = True) -> tuple[dict[str, dict | list], list[ShardState]]:
    """The whole pipeline in-process: route, step every shard, fold the outputs into tables."""
    states = [ShardState(ClusterImage()) for _ in range(shards)]
    per_shard = routed(events, shards)
    tables: dict[str, dict | list] = {}
    outputs: list[Output] = []
    for shard in range(shards):
        outputs.extend(step(shard, shards, states[shard], per_shard[shard], config, columns, fast=fast))
    apply_outputs(tables, outputs, config)
    return tables, states


def iter_rows(table: dict | list) -> Iterator[dict]:
    return iter(table.values() if isinstance(table, dict) else table)
