"""Anomaly episodes: what an operator must hear about, opened and closed as a shard applies the log.

An episode opens at the event after which its rule holds and closes at the event after which it no longer
does (docs/anomalies.md states each rule). Rules only look at what a shard already knows, in the order it
applies the log, and at event time (the log's timestamps), never the wall clock; their state
(``Anomalies``) goes into the shard's state between micro-batches, so a log yields the same episodes in
one micro-batch or in thousands.

A shard sees its own topics' records and every other event (``shards.routes``). So that the episodes do not
depend on how many shards there are either, a threshold in time is checked at the next event that every
shard sees (a broker record or request, a config, a topic; not another topic's partition records) or at a
change of the entity itself (``tick``, ``partition_change``). A leader imbalance spans the shards: they
report their counts, and it is judged after them (``Leadership``).
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence

from kraftlake.controller.elections import topic_config_values
from kraftlake.image import causes
from kraftlake.image.causes import Cause
from kraftlake.image.cluster_image import NO_LEADER, ClusterImage, PartitionRegistration
from kraftlake.metadata.config import setting
from kraftlake.metadata.progress import spoken_duration

# the cause of an under_min_isr episode that a change of min.insync.replicas opened or closed
MIN_ISR_CONFIG = "min_insync_replicas_config"
OFFLINE, UNDER_MIN_ISR, UNCLEAN, ELR, STUCK, FLAPPING, IMBALANCE = (
    "offline_partition", "under_min_isr", "unclean_election", "elr_election", "stuck_reassignment", "broker_flapping",
    "leader_imbalance")
IMBALANCE_PERCENTAGE = "leader.imbalance.per.broker.percentage"  # Kafka's setting
RECOVERING = 1  # Kafka's LeaderRecoveryState
STUCK_MS = "kraftlake.anomaly.reassignment.stuck.ms"
FLAPPING_UNFENCINGS = "kraftlake.anomaly.broker.flapping.unfencings"
FLAPPING_WINDOW_MS = "kraftlake.anomaly.broker.flapping.window.ms"
MIN_ISR = "min.insync.replicas"
# event-time bounds (``Anomalies.idle_until``): before every time, after every time
NEVER, FOREVER = -(1 << 63), (1 << 63) - 1


class Seen(NamedTuple):
    """A partition as a run of changes on the columns leaves it: the parts of its registration the rules read."""

    leader: int
    isr: Sequence[int]
    elr: Sequence[int]
    replicas: Sequence[int]
    adding_replicas: Sequence[int]
    removing_replicas: Sequence[int]
    leader_recovery_state: int


# What the rules read of a partition: its registration, or what a run on the columns left
Shape = PartitionRegistration | Seen


class Place(NamedTuple):
    """Where a partition change happened: the event that applied it, its time, and the partition."""

    offset: int
    timestamp: int
    topic: str
    topic_id: str
    partition: int


@dataclass(frozen=True)
class Thresholds:
    stuck_ms: int
    flapping_unfencings: int
    flapping_window_ms: int

    @classmethod
    def of(cls, config: Mapping[str, str]) -> Thresholds:
        return cls(int(setting(config, STUCK_MS)), int(setting(config, FLAPPING_UNFENCINGS)),
                   int(setting(config, FLAPPING_WINDOW_MS)))


def min_insync_replicas(image: ClusterImage, topic: str, config: Mapping[str, str]) -> int:
    """The topic's ``min.insync.replicas`` in force now, looked up as Kafka's controller does; a value that
    is not a count of at least 1 is skipped for the next in the lookup (Kafka would refuse to store it)."""
    for value in topic_config_values(image, topic, MIN_ISR, config):
        try:
            count = int(str(value).strip())
        except ValueError:
            continue
        if count >= 1:
            return count
    return 1


def partition_entity(topic: str, topic_id: str, partition: int) -> str:
    """A partition as Kafka's tools write it (orders-3); by its topic's id while the name is unknown."""
    return f"{topic or topic_id}-{partition}"


def _row(kind: str, entity: str, offset: int, timestamp: int, cause: str, cause_offset: int,
         cause_type: str | None, detail: str, place: Place | None = None, broker: int | None = None) -> dict:
    return {"kind": kind, "entity": entity, "broker_id": broker,
            "topic": None if place is None else place.topic, "topic_id": None if place is None else place.topic_id,
            "partition": None if place is None else place.partition,
            "start_offset": offset, "start_time": timestamp, "end_offset": None, "end_time": None,
            "cause": cause, "cause_offset": cause_offset, "cause_type": cause_type, "detail": detail}


# An open episode's row in the state store: the values of these columns (the others are null while it lasts).
_KEPT = ("kind", "entity", "broker_id", "topic", "topic_id", "partition", "start_offset", "start_time", "cause",
         "cause_offset", "cause_type", "detail")
_COLUMNS = ("kind", "entity", "broker_id", "topic", "topic_id", "partition", "start_offset", "start_time",
            "end_offset", "end_time", "cause", "cause_offset", "cause_type", "detail")  # as ``_row`` makes them


def _closed(row: dict, offset: int, timestamp: int, why: str) -> dict:
    length = spoken_duration(timestamp - row["start_time"])
    return {**row, "end_offset": offset, "end_time": timestamp, "detail": f"{row['detail']}; for {length}, until {why}"}


def _ids(values: Sequence[int]) -> str:
    return "[" + ",".join(map(str, values)) + "]"


@dataclass
class Anomalies:
    """A shard's open episodes and what its time thresholds wait for; ``rows`` collects the anomalies rows
    (upserts) the events applied since the last ``take`` opened or closed, in order.

    ``reassigning``: partitions with a reassignment in progress, by entity: (the offset and time it began,
    the type of the event that began it, the place); ``unfencings``: each broker's recent unfencings, as
    (offset, time), those of the flapping window."""

    thresholds: Thresholds = field(default_factory=lambda: Thresholds.of({}))
    open: dict[tuple[str, str], dict] = field(default_factory=dict)
    reassigning: dict[str, tuple[int, int, str, Place]] = field(default_factory=dict)
    unfencings: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    rows: list[tuple[int, dict]] = field(default_factory=list)
    # per broker, of this shard's partitions: how many it leads and how many have it as first replica
    leaders: Counter = field(default_factory=Counter)
    preferred: Counter = field(default_factory=Counter)
    counted: bool = True  # the counts are those last reported (``Leadership``)
    reported: list[tuple[int, int, dict[int, tuple[int, int]]]] = field(default_factory=list)
    watched: dict[str, int] = field(default_factory=dict)  # topic id -> open episodes and reassignments
    # the reassignments not stuck yet, as (time begun, entity, offset begun): a heap, soonest deadline first
    _due: list[tuple[int, str, int]] = field(default_factory=list)
    # the earliest of the brokers' last unfencings (None: to be found again): ``tick`` runs at every
    # broadcast event, and walking every broker of ``unfencings`` there would mostly find none calm
    _last_unfenced: int | None = None

    # ---- bookkeeping

    def take(self) -> list[tuple[int, dict]]:
        rows, self.rows = self.rows, []
        return rows

    def counts(self) -> dict[int, tuple[int, int]]:
        """Per broker: (partitions it leads, partitions whose first replica it is), of this shard."""
        return {b: (self.leaders[b], self.preferred[b]) for b in sorted(self.leaders.keys() | self.preferred.keys())
                if b != NO_LEADER and (self.leaders[b] or self.preferred[b])}

    def lead(self, before: Shape | None, after: Shape | None) -> None:
        """A partition change, as leadership counts."""
        old = None if before is None else (before.leader, before.replicas[0] if before.replicas else NO_LEADER)
        new = None if after is None else (after.leader, after.replicas[0] if after.replicas else NO_LEADER)
        if old != new:  # (get, not the Counter's own lookup: a change of every partition comes through here)
            leaders, preferred = self.leaders, self.preferred
            if old is not None:
                leaders[old[0]] = leaders.get(old[0], 0) - 1
                preferred[old[1]] = preferred.get(old[1], 0) - 1
            if new is not None:
                leaders[new[0]] = leaders.get(new[0], 0) + 1
                preferred[new[1]] = preferred.get(new[1], 0) + 1
            self.counted = False

    def _watch(self, topic_id: str | None, delta: int) -> None:
        if topic_id is None:
            return
        count = self.watched.get(topic_id, 0) + delta
        if count:
            self.watched[topic_id] = count
        else:
            self.watched.pop(topic_id, None)

    def _open(self, offset: int, row: dict) -> None:
        self.open[(row["kind"], row["entity"])] = row
        self._watch(row["topic_id"], 1)
        self.rows.append((offset, row))

    def _close(self, kind: str, entity: str, offset: int, timestamp: int, why: str) -> None:
        row = self.open.pop((kind, entity), None)
        if row is not None:
            self._watch(row["topic_id"], -1)
            self.rows.append((offset, _closed(row, offset, timestamp, why)))

    def _instant(self, offset: int, row: dict) -> None:
        self.rows.append((offset, {**row, "end_offset": row["start_offset"], "end_time": row["start_time"]}))

    # ---- time thresholds

    def tick(self, offset: int, timestamp: int) -> None:
        """An event every shard sees, at ``offset``: the reassignments that have been in progress for the
        threshold by its time get stuck, the flapping brokers quiet for a whole window calm down, and the
        leadership counts, if they changed, are reported for the leader imbalance (``Leadership``)."""
        if not self.counted:
            self.reported.append((offset, timestamp, self.counts()))
            self.counted = True
        while self._due and self._due[0][0] + self.thresholds.stuck_ms <= timestamp:
            _, entity, start = heapq.heappop(self._due)
            self._stuck(entity, start, offset, timestamp)
        if not self.unfencings:
            return
        window = self.thresholds.flapping_window_ms
        if self._last_unfenced is None:
            self._last_unfenced = min(recent[-1][1] for recent in self.unfencings.values())
        if timestamp < self._last_unfenced + window:
            return
        for broker, recent in list(self.unfencings.items()):
            if timestamp >= recent[-1][1] + window:  # a whole window without an unfencing
                del self.unfencings[broker]
                self._close(FLAPPING, f"broker {broker}", offset, timestamp,
                            f"{spoken_duration(window)} without an unfencing")
        self._last_unfenced = None

    def idle_until(self) -> int:
        """The event time before which ``tick`` changes nothing, for as long as only ticks come: no
        reassignment's threshold, no flapping window ends before it, and the counts were reported
        (``NEVER``: the next tick has work)."""
        if not self.counted:
            return NEVER
        bound = FOREVER
        if self._due:
            bound = self._due[0][0] + self.thresholds.stuck_ms
        if self.unfencings:
            if self._last_unfenced is None:
                self._last_unfenced = min(recent[-1][1] for recent in self.unfencings.values())
            bound = min(bound, self._last_unfenced + self.thresholds.flapping_window_ms)
        return bound

    def _stuck(self, entity: str, start: int, offset: int, timestamp: int) -> None:
        pending = self.reassigning.get(entity)
        if pending is None or pending[0] != start or (STUCK, entity) in self.open:
            return
        begun, begun_at, type_, place = pending
        self._open(offset, _row(STUCK, entity, offset, timestamp, causes.REASSIGNMENT, begun, type_,
                                f"{entity} reassigning for {spoken_duration(timestamp - begun_at)} "
                                f"(since offset {begun})", place._replace(offset=offset, timestamp=timestamp)))

    # ---- partitions

    def partition_change(self, place: Place, before: Shape | None, after: Shape | None, cause: Cause,
                         cause_type: str | None, min_isr: int) -> None:
        """A change of one partition (``after`` None: deleted with its topic), ``cause`` as partition_history
        names it (its offset None: the change's own event, of type ``cause_type``)."""
        if place.topic_id not in self.watched and (after is None or (
                after.leader != NO_LEADER and len(after.isr) >= min_isr and after.leader_recovery_state != RECOVERING
                and not after.adding_replicas and not after.removing_replicas
                and (before is None or after.leader == before.leader or after.leader in before.isr))):
            return  # nothing of its topic is open or waited for, and nothing opens: the common case, made cheap
        offset, timestamp = place.offset, place.timestamp
        entity = partition_entity(place.topic, place.topic_id, place.partition)
        pending = self.reassigning.get(entity)
        if pending is not None and timestamp >= pending[1] + self.thresholds.stuck_ms:
            self._stuck(entity, pending[0], offset, timestamp)
        why = cause.kind
        cause_offset = offset if cause.offset is None else cause.offset
        said = f"{why} at offset {cause_offset}" if cause_offset != offset else why
        if after is None:
            for kind in (OFFLINE, UNDER_MIN_ISR, UNCLEAN, STUCK):
                self._close(kind, entity, offset, timestamp, "its topic was deleted")
            if self.reassigning.pop(entity, None) is not None:
                self._watch(place.topic_id, -1)
            return
        leader = after.leader
        if leader == NO_LEADER:
            if (OFFLINE, entity) not in self.open:
                self._open(offset, _row(OFFLINE, entity, offset, timestamp, why, cause_offset, cause_type,
                                        f"{entity} has no leader (replicas {_ids(after.replicas)}, ISR "
                                        f"{_ids(after.isr)}) after {said}", place))
        else:
            self._close(OFFLINE, entity, offset, timestamp, f"broker {leader} led it ({said})")
        self.measure(place, after.isr, min_isr, why, cause_offset, cause_type)
        recovering = after.leader_recovery_state == RECOVERING
        if before is not None and leader != before.leader and leader != NO_LEADER:
            if leader not in before.isr and leader in before.elr:
                self._instant(offset, _row(ELR, entity, offset, timestamp, why, cause_offset, cause_type,
                                           f"{entity}: broker {leader} elected from the ELR {_ids(before.elr)} "
                                           f"(ISR was {_ids(before.isr)}) after {said}", place))
            elif leader not in before.isr or recovering:
                self._close(UNCLEAN, entity, offset, timestamp, "another election")
                row = _row(UNCLEAN, entity, offset, timestamp, why, cause_offset, cause_type,
                           f"{entity}: broker {leader} elected from outside the ISR {_ids(before.isr)} "
                           f"(leader before: {before.leader}), data may be lost, after {said}", place)
                if recovering:
                    self._open(offset, row)
                else:
                    self._instant(offset, row)
        elif not recovering:
            self._close(UNCLEAN, entity, offset, timestamp, f"the leader recovered ({said})")
        moving = bool(after.adding_replicas or after.removing_replicas)
        if moving and pending is None:
            self.reassigning[entity] = (offset, timestamp, cause_type or "", place)
            self._watch(place.topic_id, 1)
            heapq.heappush(self._due, (timestamp, entity, offset))
        elif not moving and pending is not None:
            del self.reassigning[entity]
            self._watch(place.topic_id, -1)
            self._close(STUCK, entity, offset, timestamp, f"it ended with replicas {_ids(after.replicas)}")

    def measure(self, place: Place, isr: Sequence[int], min_isr: int, why: str, cause_offset: int,
                cause_type: str | None) -> None:
        """The partition's ISR against the min.insync.replicas in force, after a change of either."""
        entity = partition_entity(place.topic, place.topic_id, place.partition)
        said = f"{why} at offset {cause_offset}" if cause_offset != place.offset else why
        if len(isr) < min_isr:
            if (UNDER_MIN_ISR, entity) not in self.open:
                self._open(place.offset, _row(UNDER_MIN_ISR, entity, place.offset, place.timestamp, why, cause_offset,
                                              cause_type, f"{entity} has {len(isr)} in-sync replica(s) {_ids(isr)}, "
                                              f"fewer than min.insync.replicas={min_isr}, after {said}", place))
        else:
            self._close(UNDER_MIN_ISR, entity, place.offset, place.timestamp,
                        f"its ISR was {_ids(isr)} against min.insync.replicas={min_isr} ({said})")

    # ---- brokers

    def broker_state(self, row: dict) -> None:
        """A broker_history row (shard 0): unfencings count towards flapping; an unregistered broker no
        longer flaps."""
        broker, offset, timestamp = row["broker_id"], row["offset"], row["timestamp"]
        entity = f"broker {broker}"
        self._last_unfenced = None
        if row["state"] == causes.UNREGISTERED:
            self.unfencings.pop(broker, None)
            self._close(FLAPPING, entity, offset, timestamp, "it was unregistered")
            return
        if row["state"] != causes.UNFENCED:
            return
        window, limit = self.thresholds.flapping_window_ms, self.thresholds.flapping_unfencings
        recent = [u for u in self.unfencings.get(broker, []) if u[1] > timestamp - window] + [(offset, timestamp)]
        self.unfencings[broker] = recent
        if len(recent) > limit and (FLAPPING, entity) not in self.open:
            self._open(offset, _row(FLAPPING, entity, offset, timestamp, causes.UNFENCED, offset, row["record"],
                                    f"broker {broker} unfenced {len(recent)} times within "
                                    f"{spoken_duration(window)} (first at offset {recent[0][0]})", broker=broker))

    # ---- state store

    def to_dict(self) -> dict:
        return {"leaders": sorted([b, n] for b, n in self.leaders.items() if n),
                "preferred": sorted([b, n] for b, n in self.preferred.items() if n), "counted": self.counted,
                "open": [[row[k] for k in _KEPT] for row in self.open.values()],
                "reassigning": [[e, s, t, ty, list(p)] for e, (s, t, ty, p) in sorted(self.reassigning.items())],
                "unfencings": [[b, [list(u) for u in us]] for b, us in sorted(self.unfencings.items())]}

    @classmethod
    def from_dict(cls, d: dict | None) -> Anomalies:
        """Also a state written before anomalies existed (None): nothing open. The thresholds are the
        step's (``Thresholds.of`` its config)."""
        self = cls()
        for values in (d or {}).get("open", []):
            kept = dict(zip(_KEPT, values))
            row = {k: kept.get(k) for k in _COLUMNS}  # the end null while it lasts; keys in _row's order
            self.open[(row["kind"], row["entity"])] = row
            self._watch(row["topic_id"], 1)
        for entity, start, time, type_, place in (d or {}).get("reassigning", []):
            self.reassigning[entity] = (start, time, type_, Place(*place))
            self._watch(place[3], 1)
            if (STUCK, entity) not in self.open:
                self._due.append((time, entity, start))
        heapq.heapify(self._due)
        self.unfencings = {b: [tuple(u) for u in us] for b, us in (d or {}).get("unfencings", [])}
        self.leaders = Counter(dict((d or {}).get("leaders", [])))
        self.preferred = Counter(dict((d or {}).get("preferred", [])))
        self.counted = (d or {}).get("counted", True)
        return self


@dataclass
class Leadership:
    """Leader imbalance, which no shard can judge alone: a broker leading more partitions than its preferred
    share (those whose first replica it is) by over ``leader.imbalance.per.broker.percentage`` of that share
    (Kafka's setting, which its controller applies to each broker's preferred partitions led by others).

    Each shard reports its counts at the events every shard sees, when they changed since its last report,
    and at the start of each step (``Anomalies.reported``, ``start``); the sum over the shards at each such
    event is judged, in offset order. What carries over from one micro-batch to the next is only the
    episodes still open: the controller's sink reads them from the anomalies table."""

    percentage: float
    open: dict[int, dict]  # broker -> its open episode's row

    def rows(self, reports: list[tuple[int, int, int, dict[int, tuple[int, int]]]]) -> list[tuple[int, dict]]:
        """``reports``: (offset, timestamp, shard, counts); a shard's report at the start of a step has the
        offset of the last event it applied before it (``start``). The rows of the episodes opened or closed."""
        current: dict[int, dict[int, tuple[int, int]]] = {}
        out: list[tuple[int, dict]] = []
        ordered = sorted(reports, key=lambda r: (r[0], r[2]))
        for i, (offset, timestamp, shard, counts) in enumerate(ordered):
            current[shard] = counts
            if i + 1 < len(ordered) and ordered[i + 1][0] == offset:
                continue  # every shard's report at this event first
            if timestamp < 0:
                continue  # a step's start: what was already judged
            led, preferred = Counter(), Counter()
            for per_broker in current.values():
                for broker, (n, p) in per_broker.items():
                    led[broker] += n
                    preferred[broker] += p
            for broker in sorted((led.keys() | preferred.keys() | self.open.keys()) - {NO_LEADER}):
                over = led[broker] - preferred[broker]
                entity = f"broker {broker}"
                if over > 0 and over * 100 > preferred[broker] * self.percentage:
                    if broker not in self.open:
                        row = _row(IMBALANCE, entity, offset, timestamp, "leader_election", offset, None,
                                   f"broker {broker} leads {led[broker]:,} partitions, {over:,} more than the "
                                   f"{preferred[broker]:,} whose first replica it is", broker=broker)
                        self.open[broker] = row
                        out.append((offset, row))
                elif broker in self.open:
                    row = self.open.pop(broker)
                    out.append((offset, _closed(row, offset, timestamp, f"it led {led[broker]:,} of its "
                                                                        f"{preferred[broker]:,}")))
        return out
