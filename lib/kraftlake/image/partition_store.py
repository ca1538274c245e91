"""Partitions in columns: how an image holds a million partitions cheaply.

The streaming job keeps each shard's image in Spark's state store between micro-batches. Held as objects
(one ``PartitionRegistration`` per partition), an image of 250,000 partitions took seconds to serialise and
to parse again at every micro-batch, and making the objects was most of that (docs/performance.md). Held in
columns -- numpy arrays with a row per partition, each list field a code into a table of the distinct tuples
seen (an ISR is one of a few thousand combinations of brokers) -- the state is the arrays' bytes, and a run
of PartitionChangeRecords is applied to whole arrays at once (``image.partition_changes``).

The objects stay the model everyone else works with: ``TopicImage.partitions`` is a ``PartitionMap``, a
mapping that makes the registration of a row when it is asked for (and keeps it, so the same object comes
back), and holds registrations assigned to it until ``flush`` writes them into the columns. Code that works
on the columns flushes first and drops the made objects after (``PartitionStore.flush``,
``PartitionStore.forget_objects``).
"""

from __future__ import annotations

import json
import operator
import weakref
import zlib
from collections.abc import Iterator, MutableMapping
from typing import Iterable, NamedTuple

import numpy as np


class PartitionRegistration(NamedTuple):
    """One partition as Kafka's ``PartitionRegistration`` holds it. A named tuple: one is made per change
    decided and again per change replayed, and a tuple is made in about a third of a frozen dataclass's time
    (docs/performance.md, "Fourth pass")."""

    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_recovery_state: int  # 0 RECOVERED, 1 RECOVERING
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]
    directories: tuple[str, ...]  # one per replica, same order
    last_offset: int  # log offset of the record that last changed this partition
    last_timestamp: int  # its event time, ms


# A registration's fields after its topic id, in order; the columns of the same names hold them.
FIELDS = ("partition_id", "replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
          "leader_epoch", "partition_epoch", "elr", "last_known_elr", "directories", "last_offset", "last_timestamp")
INT_LISTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "elr", "last_known_elr")  # codes into ``ints``
LISTS = INT_LISTS + ("directories",)  # directories: codes into ``dirs``
CODED = ((INT_LISTS, "ints"), (("directories",), "dirs"))  # the list columns coding into each tuple table
LONGS = ("last_offset", "last_timestamp")
_FIELD_VALUES = operator.attrgetter(*FIELDS)  # a registration's FIELDS, in order
COLUMNS = {**{name: np.int64 if name in LONGS else np.int32 for name in FIELDS}, "topic": np.int32, "alive": np.bool_}
_FORMAT = 1  # of ``to_bytes``


# The fields a partition's shape is made of (``PartitionStore.shapes``): all but its identity, epochs and offsets.
SHAPE_FIELDS = ("replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_recovery_state", "elr",
                "last_known_elr", "directories")


def _dense(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the distinct ``values``, and how many there are. Values in a range not much
    wider than their count (codes, broker ids) are ranked by a table over the range instead of a sort."""
    if not len(values):
        return np.zeros(0, np.int64), 0
    low, high = int(values.min()), int(values.max())
    if low == high:  # (most list columns of a failover: no reassignment, no ELR)
        return np.zeros(len(values), np.int64), 1
    if high - low <= 4 * len(values) + 1024:
        shifted = values.astype(np.int64) - low
        present = np.zeros(high - low + 1, np.bool_)
        present[shifted] = True
        ranks = np.cumsum(present) - 1
        return ranks[shifted], int(ranks[-1]) + 1
    distinct, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), len(distinct)


class Codes:
    """Distinct values (the tuples of some list columns, or topic ids), each known by its code: its index
    here."""

    __slots__ = ("values", "codes", "_holding")

    def __init__(self, values: Iterable[tuple] = ()) -> None:
        self.values: list[tuple] = list(values)
        self.codes: dict[tuple, int] = {v: i for i, v in enumerate(self.values)}
        self._holding: dict[object, np.ndarray] = {}

    def holding(self, item: object) -> np.ndarray:
        """Whether each value (a tuple) holds ``item``, by code. Kept per item and extended as values come
        (they only come: a code is never reused): a failover asks it of every tuple, and the list columns
        of a busy cluster gather thousands, most of them no longer in any row."""
        known = self._holding.get(item)
        start = 0 if known is None else len(known)
        if known is None or start < len(self.values):
            more = np.fromiter((item in v for v in self.values[start:]), np.bool_, len(self.values) - start)
            known = self._holding[item] = more if known is None else np.concatenate([known, more])
        return known

    def code(self, value: tuple) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code

    def codes_of(self, values: Iterable[tuple]) -> list[int]:
        codes, code = self.codes, self.code
        return [codes[v] if v in codes else code(v) for v in values]


class PartitionStore:
    """Every partition of one image, a row each; ``PartitionMap``s (one per topic) are its face."""

    def __init__(self) -> None:
        self.cols: dict[str, np.ndarray] = {name: np.zeros(0, dtype) for name, dtype in COLUMNS.items()}
        self.size = 0  # rows in use (dead ones included, until ``to_bytes`` compacts)
        self.ints = Codes([()])
        self.dirs = Codes([()])
        self.topics = Codes()  # topic id <-> its ordinal (the ``topic`` column)
        self.dirty: set[PartitionMap] = set()  # maps holding registrations not yet in the columns
        self.maps: dict[str, PartitionMap] = {}  # by topic id: the maps made over this store
        self._lookup: tuple[np.ndarray, np.ndarray] | None = None  # sorted (topic, partition) keys, rows
        self._checked = {"ints": 1, "dirs": 1}  # each table's size when ``compact_codes`` last looked at it

    # -- topics and rows ------------------------------------------------------------------------------

    def new_map(self, topic_id: str) -> PartitionMap:
        """The (empty) partitions of a new topic; a topic created again gets a new map over new rows."""
        self.topics.code(topic_id)
        self.drop(topic_id)
        partitions = self.maps[topic_id] = PartitionMap(self, topic_id, {})
        return partitions

    def drop(self, topic_id: str) -> None:
        """A removed topic's rows die with it (its map keeps answering for the objects handed out)."""
        partitions = self.maps.pop(topic_id, None)
        if partitions is not None:
            for row in partitions.rows.values():
                self.kill(row)
            self.dirty.discard(partitions)

    def _allocate(self, count: int) -> int:
        start, end = self.size, self.size + count
        capacity = len(self.cols["alive"])
        if end > capacity:
            grown = max(end, 2 * capacity, 1024)
            for name, column in self.cols.items():
                bigger = np.zeros(grown, column.dtype)
                bigger[:self.size] = column[:self.size]
                self.cols[name] = bigger
        self.size = end
        self._lookup = None
        return start

    def kill(self, row: int) -> None:
        self.cols["alive"][row] = False
        self._lookup = None

    # -- registrations <-> rows -----------------------------------------------------------------------

    def write(self, rows: list[int], registrations: list[PartitionRegistration]) -> None:
        """Registrations into their rows, column by column."""
        if not rows:
            return
        cols = self.cols
        rows = np.asarray(rows, np.int64)  # (once, not once per column: a failover writes every AlterPartition since)
        for name, values in zip(FIELDS, zip(*map(_FIELD_VALUES, registrations))):
            if name in INT_LISTS:
                values = self.ints.codes_of(values)
            elif name == "directories":
                values = self.dirs.codes_of(values)
            cols[name][rows] = values
        cols["topic"][rows] = [self.topics.code(r.topic_id) for r in registrations]
        cols["alive"][rows] = True

    def make(self, rows: list[int] | np.ndarray, topic_id: str | list[str]) -> list[PartitionRegistration]:
        """The registrations of ``rows`` (all of topic ``topic_id``, or each of its own), made in bulk."""
        cols, ints, dirs = self.cols, self.ints.values, self.dirs.values
        index = np.asarray(rows, dtype=np.int64)
        values = []
        for name in FIELDS:
            column = cols[name][index].tolist()
            if name in INT_LISTS:
                column = [ints[c] for c in column]
            elif name == "directories":
                column = [dirs[c] for c in column]
            values.append(column)
        if isinstance(topic_id, str):
            return [PartitionRegistration(topic_id, *row) for row in zip(*values)]
        return [PartitionRegistration(*row) for row in zip(topic_id, *values)]

    def make_one(self, row: int, topic_id: str) -> PartitionRegistration:
        """The registration of one row (``make``'s): read value by value, since indexing fourteen columns with
        an array costs about as much as a whole AlterPartition decision."""
        cols, ints, dirs = self.cols, self.ints.values, self.dirs.values
        return PartitionRegistration(topic_id, *[
            ints[cols[name].item(row)] if name in INT_LISTS else dirs[cols[name].item(row)] if name == "directories"
            else cols[name].item(row) for name in FIELDS])

    def flush(self) -> None:
        """Write every registration assigned to a map since the last flush into the columns: in one write,
        not one per map (a column assignment costs the same for one row as for a hundred, and a heartbeat
        of a broker in controlled shutdown flushes after every AlterPartition of the topics)."""
        rows: list[int] = []
        registrations: list[PartitionRegistration] = []
        for partitions in list(self.dirty):
            partitions.take_pending(rows, registrations)
        self.write(rows, registrations)
        self.dirty.clear()

    def forget_objects(self) -> None:
        """Drop the registrations the maps made or hold (after a flush): the columns are about to change
        under them, and they would answer with what the partitions were before."""
        self.flush()
        for partitions in self.maps.values():
            partitions.objects.clear()

    def lookup(self, topic_ords: np.ndarray, partition_ids: np.ndarray) -> np.ndarray:
        """The row of each (topic ordinal, partition id), -1 where there is none (after ``flush``)."""
        if self._lookup is None:
            live = np.flatnonzero(self.cols["alive"][:self.size])
            keys = (self.cols["topic"][live].astype(np.int64) << 32) | self.cols["partition_id"][live].astype(np.int64)
            order = np.argsort(keys, kind="stable")
            self._lookup = (keys[order], live[order])
        keys, rows = self._lookup
        wanted = (topic_ords.astype(np.int64) << 32) | (partition_ids.astype(np.int64) & 0xFFFFFFFF)
        if not len(keys):
            return np.full(len(wanted), -1, np.int64)
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        return np.where(keys[at] == wanted, rows[at], -1)

    def rows_led_by(self, leader: int) -> np.ndarray:
        """The live rows whose leader is ``leader`` (``NO_LEADER``: the leaderless ones), after ``flush``."""
        self.flush()
        return np.flatnonzero(self.cols["alive"][:self.size] & (self.cols["leader"][:self.size] == leader))

    def rows_holding(self, broker_id: int, lists: tuple[str, ...]) -> np.ndarray:
        """The live rows where ``broker_id`` is in any of the ``lists`` (INT_LISTS names), after ``flush``:
        membership is asked once per distinct tuple, then looked up per row."""
        member = self.ints.holding(broker_id)
        held = np.zeros(self.size, np.bool_)
        for name in lists:
            held |= member[self.cols[name][:self.size]]
        return np.flatnonzero(held & self.cols["alive"][:self.size])

    def shapes(self, rows: np.ndarray, *keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shape of each of ``rows``, the place in ``rows`` of one of each shape): rows of one shape agree
        in every field but their topic, partition id, epochs and offsets, and in each of ``keys`` (an array
        per row). A decision that reads only those fields is then made once per shape, not per partition."""
        key, size = np.zeros(len(rows), np.int64), 1
        for column in [self.cols[name][rows] for name in SHAPE_FIELDS] + list(keys):
            ranks, count = _dense(column)
            if size * count >= 1 << 62:
                key, size = _dense(key)
            key, size = key * count + ranks, size * count
        shape, count = _dense(key)
        representative = np.empty(count, np.int64)
        representative[shape] = np.arange(len(rows))  # any row of a shape stands for it
        return shape, representative

    def compact_codes(self) -> None:
        """Drop the list tuples no row holds once they outnumber the held ones, renumbering the codes (the
        empty tuple stays 0; a removed topic's rows keep theirs, as its map still answers). A table only
        gains a tuple per list ever seen, so a state kept in memory between micro-batches -- never going
        through ``to_bytes``, which keeps only the held -- grew with the requests, not with the cluster
        (issue 27). A table is looked at again only once it has doubled since the last look (finding the
        held codes reads every row), so it stays within four times the held tuples. Call between steps:
        codes held outside the columns (a run's ``partition_changes.Applied``) would point at other tuples
        afterwards."""
        self.flush()
        for names, key in CODED:
            table: Codes = getattr(self, key)
            if len(table.values) <= 2 * self._checked[key]:
                continue
            held = np.zeros(len(table.values), np.bool_)
            held[0] = True
            for n in names:
                held[self.cols[n][:self.size]] = True
            used = np.flatnonzero(held)
            self._checked[key] = len(table.values)
            if len(table.values) <= 2 * len(used):
                continue
            self._checked[key] = len(used)
            remap = (np.cumsum(held) - 1).astype(np.int32)
            for n in names:
                self.cols[n][:self.size] = remap[self.cols[n][:self.size]]
            setattr(self, key, Codes(table.values[c] for c in used.tolist()))

    # -- copies and bytes -----------------------------------------------------------------------------

    def copy(self) -> PartitionStore:
        """An independent store with a copy of every map (registrations are immutable: shared)."""
        self.flush()
        other = PartitionStore()
        other.cols = {name: column.copy() for name, column in self.cols.items()}
        other.size = self.size
        other.ints, other.dirs = Codes(self.ints.values), Codes(self.dirs.values)
        other.topics = Codes(self.topics.values)
        other._checked = dict(self._checked)
        for topic_id, partitions in self.maps.items():
            other.maps[topic_id] = PartitionMap(other, topic_id, dict(partitions.rows), dict(partitions.objects))
        return other

    def to_bytes(self, topic_ids: list[str]) -> bytes:
        """The partitions of ``topic_ids`` (in that order), each topic's by partition id, list codes
        renumbered by tuple value: equal images give equal bytes whatever their history."""
        self.flush()
        cols = self.cols
        rows = [partitions.rows for partitions in (self.maps[t] for t in topic_ids)]
        order = np.fromiter((row for topic in rows for _, row in sorted(topic.items())), np.int64,
                            sum(len(topic) for topic in rows))
        counts = [len(topic) for topic in rows]
        arrays = {}
        tables = {}
        for names, key in CODED:
            table = getattr(self, key)
            used = np.unique(np.concatenate([cols[n][order] for n in names])).tolist()
            values = sorted(table.values[c] for c in used)
            position = {v: i for i, v in enumerate(values)}
            remap = np.zeros(len(table.values), np.int32)
            remap[used] = [position[table.values[c]] for c in used]
            for n in names:
                arrays[n] = remap[cols[n][order]]
            tables[key] = [list(v) for v in values]
        for name in FIELDS:
            if name not in arrays:
                arrays[name] = cols[name][order]
        header = json.dumps({"format": _FORMAT, "rows": int(len(order)), "counts": counts, **tables},
                            separators=(",", ":")).encode()
        body = b"".join(np.ascontiguousarray(arrays[name], COLUMNS[name]).tobytes() for name in FIELDS)
        return len(header).to_bytes(4, "big") + header + zlib.compress(body, 1)

    @classmethod
    def from_bytes(cls, raw: bytes, topic_ids: list[str]) -> PartitionStore:
        size = int.from_bytes(raw[:4], "big")
        header = json.loads(raw[4:4 + size])
        if header["format"] != _FORMAT:
            raise ValueError(f"unknown partition store format {header['format']!r}, this code reads {_FORMAT}")
        body = zlib.decompress(raw[4 + size:])
        store = cls()
        n = header["rows"]
        store.ints = Codes(tuple(v) for v in header["ints"])
        store.dirs = Codes(tuple(v) for v in header["dirs"])
        store._checked = {"ints": len(store.ints.values), "dirs": len(store.dirs.values)}
        store._allocate(n)
        at = 0
        for name in FIELDS:
            dtype = np.dtype(COLUMNS[name])
            store.cols[name][:n] = np.frombuffer(body, dtype, n, at)
            at += n * dtype.itemsize
        store.cols["alive"][:n] = True
        start = 0
        pids = store.cols["partition_id"]
        for topic_id, count in zip(topic_ids, header["counts"]):
            store.cols["topic"][start:start + count] = store.topics.code(topic_id)
            store.maps[topic_id] = PartitionMap(store, topic_id,
                                                dict(zip(pids[start:start + count].tolist(), range(start, start + count))))
            start += count
        return store


class PartitionMap(MutableMapping):
    """One topic's partitions by id, over its image's ``PartitionStore``; iterates in partition order.

    ``rows`` are the partitions in the columns; ``objects`` the registrations made from them or assigned
    since the last flush, and ``pending`` the ids among those not yet written to the columns.

    ``store`` is a weak proxy: the store holds its maps (``maps``, ``dirty``), and a strong reference back
    would make every image a cycle that only the collector frees once dropped (issue 27): a copy of the
    image a decision builds on (``cluster_control.expire_sessions``), the image a snapshot replaces, a
    shard's state parsed again. The store lives as long as its image, which every map is reached through.
    """

    __slots__ = ("store", "topic_id", "rows", "objects", "pending", "_keys")

    def __init__(self, store: PartitionStore, topic_id: str, rows: dict[int, int],
                 objects: dict[int, PartitionRegistration] | None = None) -> None:
        self.store, self.topic_id, self.rows = weakref.proxy(store), topic_id, rows
        self.objects: dict[int, PartitionRegistration] = objects or {}
        self.pending: set[int] = set()
        self._keys: list[int] | None = None

    def __hash__(self) -> int:
        return id(self)

    def __getitem__(self, partition_id: int) -> PartitionRegistration:
        found = self.objects.get(partition_id)
        if found is None:
            found = self.store.make_one(self.rows[partition_id], self.topic_id)
            self.objects[partition_id] = found
        return found

    def get(self, partition_id: int, default: PartitionRegistration | None = None) -> PartitionRegistration | None:
        found = self.objects.get(partition_id)
        if found is not None:
            return found
        return self[partition_id] if partition_id in self.rows else default

    def __setitem__(self, partition_id: int, registration: PartitionRegistration) -> None:
        if partition_id not in self.rows and partition_id not in self.objects:
            self._keys = None
        self.objects[partition_id] = registration
        self.pending.add(partition_id)
        self.store.dirty.add(self)

    def __delitem__(self, partition_id: int) -> None:
        row = self.rows.pop(partition_id, None)
        found = self.objects.pop(partition_id, None) is not None or row is not None
        if not found:
            raise KeyError(partition_id)
        if row is not None:
            self.store.kill(row)
        self.pending.discard(partition_id)
        self._keys = None

    def __contains__(self, partition_id: object) -> bool:
        return partition_id in self.objects or partition_id in self.rows

    def keys_sorted(self) -> list[int]:
        if self._keys is None:
            self._keys = sorted(self.rows.keys() | self.objects.keys())
        return self._keys

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_sorted())

    def __len__(self) -> int:
        return len(self.keys_sorted())

    def _all(self) -> list[PartitionRegistration]:
        keys = self.keys_sorted()
        missing = [p for p in keys if p not in self.objects]
        if missing:
            made = self.store.make([self.rows[p] for p in missing], self.topic_id)
            self.objects.update(zip(missing, made))
        return [self.objects[p] for p in keys]

    def values(self) -> list[PartitionRegistration]:  # type: ignore[override]
        return self._all()

    def items(self) -> list[tuple[int, PartitionRegistration]]:  # type: ignore[override]
        return list(zip(self.keys_sorted(), self._all()))

    def take_pending(self, rows: list[int], registrations: list[PartitionRegistration]) -> None:
        """The registrations assigned since the last flush, and their rows (new partitions get new rows),
        added to ``rows`` and ``registrations`` for the store to write."""
        if not self.pending:
            return
        new = [p for p in self.pending if p not in self.rows]
        if new:
            start = self.store._allocate(len(new))
            self.rows.update(zip(new, range(start, start + len(new))))
        ids = list(self.pending)
        rows += [self.rows[p] for p in ids]
        registrations += [self.objects[p] for p in ids]
        self.pending.clear()

    def __repr__(self) -> str:
        return f"PartitionMap({dict(self.items())!r})"
