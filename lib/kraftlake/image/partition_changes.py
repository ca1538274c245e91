"""Runs of PartitionChangeRecords applied to the partition columns at once.

Most of a metadata log is PartitionChangeRecords that move a leader or change an ISR and nothing else. Applied
one by one (``partitions.merge``), each costs a dict, a registration and a history row; applied to the
columns of a ``PartitionStore`` as a run, they cost a few numpy operations for the whole run. The rule is
``merge``'s, restricted to the records it covers (``is_simple``): the ISR and the leader recovery state are
replaced when given, a leader other than -2 is taken with a new leader epoch, every record is a new
partition epoch. Anything else -- another field set, a partition the columns do not hold -- is left to
``merge`` by the caller, and tests hold both paths equal on generated logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kraftlake.image.cluster_image import NO_LEADER_CHANGE, ClusterImage, normalize_uuid
from kraftlake.image.partitions import LRS_NO_CHANGE
from kraftlake.metadata.collector import collector_paused

# What makes a PartitionChangeRecord simple: these lists unset (null), Directories null or empty, and a
# LeaderRecoveryState among these. One rule for ``is_simple`` and the Spark job's routing, which picks the
# same records out in Spark SQL.
UNSET_FIELDS = ("Replicas", "RemovingReplicas", "AddingReplicas", "EligibleLeaderReplicas", "LastKnownElr")
SIMPLE_RECOVERY_STATES = (LRS_NO_CHANGE, 0, 1)


def is_simple(data: dict) -> bool:
    """A PartitionChangeRecord whose only changes are the ISR, the leader and the leader recovery state."""
    return (all(data[name] is None for name in UNSET_FIELDS) and not data["Directories"]
            and data["LeaderRecoveryState"] in SIMPLE_RECOVERY_STATES)


@dataclass(eq=False)
class LogColumns:
    """Where each of a run of log rows read as columns sits in the log: what a row's event and a rejection
    row name. The first columns of every such run (``Changes``, ``controller.heartbeats.Heartbeats``)."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, ms
    leader_epochs: np.ndarray  # the log's
    versions: np.ndarray
    sources: list[str | None]
    positions: list[int | None]


@dataclass(eq=False)
class Changes(LogColumns):
    """Simple PartitionChangeRecords in offset order, as columns (leader epochs and versions int32)."""

    topic_ids: list[str]  # normalised
    partitions: np.ndarray  # int32
    leaders: np.ndarray  # int32, -2: unchanged
    isrs: list[tuple[int, ...] | None]  # None: unchanged
    recovery: np.ndarray  # int32 LeaderRecoveryState, -1: unchanged
    # int32 codes of ``isrs`` into the image's ``store.ints`` (-1: unchanged), when whoever made the run coded
    # them per shape (``Shaped.changes``); None: ``apply`` codes them record by record
    isr_codes: np.ndarray | None = None

    @classmethod
    def of_events(cls, events: list[dict]) -> Changes:
        n = len(events)
        data = [e["data"] for e in events]
        return cls(np.fromiter((e["offset"] for e in events), np.int64, n),
                   np.fromiter((e["timestamp"] for e in events), np.int64, n),
                   np.fromiter((e["leader_epoch"] for e in events), np.int32, n),
                   np.fromiter((e["version"] for e in events), np.int32, n),
                   [e.get("source") for e in events], [e.get("position") for e in events],
                   [normalize_uuid(d["TopicId"]) for d in data],
                   np.fromiter((d["PartitionId"] for d in data), np.int32, n),
                   np.fromiter((d["Leader"] for d in data), np.int32, n),
                   [None if d["Isr"] is None else tuple(d["Isr"]) for d in data],
                   np.fromiter((d["LeaderRecoveryState"] for d in data), np.int32, n))

    @classmethod
    def concat(cls, parts: list[Changes]) -> Changes:
        """The records of ``parts`` in one, sorted by offset (parts may come in any order; ISR codes are left
        to ``apply``)."""
        merged = cls(*(np.concatenate([getattr(p, f) for p in parts]) if isinstance(getattr(parts[0], f), np.ndarray)
                       else [v for p in parts for v in getattr(p, f)] for f in cls.__dataclass_fields__
                       if f != "isr_codes"))
        return merged.take(np.argsort(merged.offsets, kind="stable"))

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self, index: np.ndarray) -> Changes:
        picked = index.tolist()
        return Changes(self.offsets[index], self.timestamps[index], self.leader_epochs[index], self.versions[index],
                       [self.sources[i] for i in picked], [self.positions[i] for i in picked],
                       [self.topic_ids[i] for i in picked], self.partitions[index], self.leaders[index],
                       [self.isrs[i] for i in picked], self.recovery[index],
                       None if self.isr_codes is None else self.isr_codes[index])

    def event(self, i: int) -> dict:
        """Record ``i`` as the event dict replay takes (for the records the columns leave to ``merge``)."""
        isr = self.isrs[i]
        return {"offset": int(self.offsets[i]), "leader_epoch": int(self.leader_epochs[i]),
                "timestamp": int(self.timestamps[i]), "type": "PartitionChangeRecord", "version": int(self.versions[i]),
                "source": self.sources[i], "position": self.positions[i],
                "data": {"TopicId": self.topic_ids[i], "PartitionId": int(self.partitions[i]),
                         "Isr": None if isr is None else list(isr), "Leader": int(self.leaders[i]),
                         "Replicas": None, "RemovingReplicas": None, "AddingReplicas": None,
                         "LeaderRecoveryState": int(self.recovery[i]), "Directories": None,
                         "EligibleLeaderReplicas": None, "LastKnownElr": None}}


@dataclass(eq=False)
class Shaped:
    """PartitionChangeRecords a decision made by shape (``replication.broker_failover``): each record is its
    shape's template with its own TopicId and PartitionId, in the decision's order.

    A broker's failure at 10^6 partitions writes 10^6 records of a few hundred shapes. Held so, the shard step
    applies them to the columns as they are (``changes``: the leader, ISR and recovery state coded once per
    shape), and their dicts are made only for whoever reads them one by one (``records``, ``data``): the
    decision and the replay of such a failover no longer make and read two million dicts
    (docs/performance.md)."""

    templates: list[dict]  # per shape: a record of it (TopicId and PartitionId: one partition's of the shape)
    shape: np.ndarray  # int64, per record: its template
    topic_ids: list[str]  # normalised, each once
    ranks: np.ndarray  # int64, per record: its topic's place in ``topic_ids``
    partitions: np.ndarray  # int32, per record
    rows: np.ndarray  # int64, per record: its partition's row in the columns of the image decided on
    _made: list[dict] | None = field(default=None, repr=False)  # ``records``, once made

    def __len__(self) -> int:
        return len(self.shape)

    def records(self) -> list[dict]:
        """The records as dicts, made once: equal to the templates' with each record's TopicId and PartitionId."""
        if self._made is None:
            versions = [t["version"] for t in self.templates]
            with collector_paused():
                self._made = [{"type": "PartitionChangeRecord", "version": versions[s], "data": data}
                              for s, data in zip(self.shape.tolist(), self.data(np.arange(len(self))))]
        return self._made

    def data(self, index: np.ndarray) -> list[dict]:
        """The ``data`` of records ``index``: the made records' once ``records`` made them, else new dicts
        (sharing their template's lists, as a copy of a record's data would)."""
        if self._made is not None:
            return [self._made[i]["data"] for i in index.tolist()]
        datas, ids = [t["data"] for t in self.templates], self.topic_ids
        return [dict(datas[s], TopicId=ids[r], PartitionId=p) for s, r, p in
                zip(self.shape[index].tolist(), self.ranks[index].tolist(), self.partitions[index].tolist())]

    def simple(self) -> np.ndarray:
        """Whether each record is simple (``is_simple``), asked once per shape."""
        return np.array([is_simple(t["data"]) for t in self.templates], bool)[self.shape]

    def changes(self, image: ClusterImage, offset: int, timestamp: int, leader_epoch: int,
                index: np.ndarray) -> tuple[Changes, np.ndarray]:
        """Records ``index`` (simple ones) as ``apply`` takes them, written at ``offset`` and ``timestamp``
        with the log's ``leader_epoch``, and their rows in ``image`` (flushed): the rows of the image decided
        on when they still hold the same partitions, else looked up (-1: none, as ``rows_of``)."""
        n, shape, ranks = len(index), self.shape[index], self.ranks[index]
        datas = [t["data"] for t in self.templates]
        isrs = [None if d["Isr"] is None else tuple(d["Isr"]) for d in datas]
        code = image.store.ints.code
        ids = self.topic_ids
        changes = Changes(np.full(n, offset, np.int64), np.full(n, timestamp, np.int64),
                          np.full(n, leader_epoch, np.int32),
                          np.array([t["version"] for t in self.templates], np.int32)[shape], [None] * n, [None] * n,
                          [ids[r] for r in ranks.tolist()], self.partitions[index],
                          np.array([d["Leader"] for d in datas], np.int32)[shape],
                          [isrs[s] for s in shape.tolist()],
                          np.array([d["LeaderRecoveryState"] for d in datas], np.int32)[shape],
                          np.array([-1 if isr is None else code(isr) for isr in isrs], np.int32)[shape])
        store, rows = image.store, self.rows[index]
        ordinals = np.array([store.topics.codes.get(t, -1) if t in image.topics else -1 for t in ids],
                            np.int64)[ranks]
        if n and int(rows.max()) < store.size:
            cols = store.cols
            if np.all((ordinals >= 0) & cols["alive"][rows] & (cols["topic"][rows] == ordinals)
                      & (cols["partition_id"][rows] == changes.partitions)):
                return changes, rows
        return changes, rows_of(image, changes)


def rows_of(image: ClusterImage, changes: Changes) -> np.ndarray:
    """The column row each record changes, or -1 for an unknown topic or partition (``merge``'s path
    rejects it). Call with the store flushed.

    ``merge`` also fills in directories that are missing or do not match the replicas one for one, which
    a simple record would leave alone; the columns never hold such a partition, as replay refuses to make
    one, so every known partition is theirs."""
    store = image.store
    ordinals = np.fromiter((store.topics.codes.get(t, -1) if t in image.topics else -1 for t in changes.topic_ids),
                           np.int64, len(changes))
    rows = store.lookup(ordinals, changes.partitions)
    rows[ordinals < 0] = -1
    return rows


@dataclass
class Applied:
    """What a run did, per record in offset order: its row, and each changed field before and after
    (ISRs as codes into ``image.store.ints``)."""

    rows: np.ndarray
    leader: tuple[np.ndarray, np.ndarray]
    isr: tuple[np.ndarray, np.ndarray]
    leader_epoch: tuple[np.ndarray, np.ndarray]
    partition_epoch: tuple[np.ndarray, np.ndarray]
    recovery: np.ndarray  # after (it is not in a history row's "before" columns)


def apply(image: ClusterImage, changes: Changes, rows: np.ndarray) -> Applied:
    """Apply ``changes`` (every ``rows`` entry a real row) to the columns; the made registrations are
    dropped first (``forget_objects``), as they would go stale."""
    store = image.store
    store.forget_objects()
    cols = store.cols
    n = len(changes)
    # Group each row's records together, in offset order within the group.
    order = np.lexsort((np.arange(n), rows))
    r = rows[order]
    first = np.ones(n, bool)
    first[1:] = r[1:] != r[:-1]
    index = np.arange(n)
    group_start = np.maximum.accumulate(np.where(first, index, 0))

    def carried(is_set: np.ndarray, value: np.ndarray, base: np.ndarray) -> np.ndarray:
        """The field after each record: the last value set in its group so far, else the row's."""
        last = np.maximum.accumulate(np.where(is_set, index, -1))
        return np.where(last >= group_start, value[np.maximum(last, 0)], base)

    def before_of(after: np.ndarray, base: np.ndarray) -> np.ndarray:
        previous = np.empty_like(after)
        previous[1:] = after[:-1]
        return np.where(first, base, previous)

    leaders = changes.leaders[order]
    leader_set = leaders != NO_LEADER_CHANGE
    leader_after = carried(leader_set, leaders, cols["leader"][r])
    if changes.isr_codes is not None:
        isr_codes = changes.isr_codes[order]
        isr_set = isr_codes >= 0
    else:
        isr_set = np.fromiter((isr is not None for isr in changes.isrs), bool, n)[order]
        known, code = store.ints.codes, store.ints.code
        isr_codes = np.fromiter((0 if isr is None else known[isr] if isr in known else code(isr)
                                 for isr in changes.isrs), np.int32, n)[order]
    isr_after = carried(isr_set, isr_codes, cols["isr"][r])
    recovery = changes.recovery[order]
    recovery_after = carried(recovery != LRS_NO_CHANGE, recovery, cols["leader_recovery_state"][r])
    counted = np.cumsum(leader_set)
    in_group = counted - (counted[group_start] - leader_set[group_start])  # leader changes so far, this group
    leader_epoch_after = cols["leader_epoch"][r] + in_group.astype(np.int32)
    partition_epoch_after = cols["partition_epoch"][r] + (index - group_start + 1).astype(np.int32)

    result = {}
    for name, after in (("leader", leader_after), ("isr", isr_after), ("leader_epoch", leader_epoch_after),
                        ("partition_epoch", partition_epoch_after)):
        result[name] = (before_of(after, cols[name][r]), after)
    last = np.ones(n, bool)
    last[:-1] = r[1:] != r[:-1]
    final = r[last]
    for name, after in (("leader", leader_after), ("isr", isr_after), ("leader_epoch", leader_epoch_after),
                        ("partition_epoch", partition_epoch_after), ("leader_recovery_state", recovery_after),
                        ("last_offset", changes.offsets[order]), ("last_timestamp", changes.timestamps[order])):
        cols[name][final] = after[last]

    unsort = np.empty(n, np.int64)
    unsort[order] = index
    return Applied(rows, *((b[unsort], a[unsort]) for b, a in (result[k] for k in
                                                               ("leader", "isr", "leader_epoch", "partition_epoch"))),
                   recovery_after[unsort])
