"""BrokerHeartbeatRequests as columns (issue 27).

Nine requests in ten are heartbeats, and every shard sees each of them. The streaming job hands them to the
shard step as columns (``Heartbeats``, as it hands simple PartitionChangeRecords as ``Changes``); while the
step is calm, those that ``cluster_control.steady_heartbeat`` would accept or ``stale_heartbeat`` refuse are
decided from the columns (``shards._Step.heartbeats``), without a dict each, and only the others become the
dict the full path takes (``Heartbeats.event``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kraftlake.image.partition_changes import LogColumns

HEARTBEAT = "BrokerHeartbeatRequest"
# The request's fields, in the order of its schema (``schemas/request``): what ``Heartbeats.event`` gives back.
FIELDS = ("BrokerId", "BrokerEpoch", "CurrentMetadataOffset", "WantFence", "WantShutDown", "OfflineLogDirs")
# What the calm path finds of a heartbeat: refused as another incarnation's, steady (``IsCaughtUp`` false), or
# steady and caught up.
STALE, STEADY, CAUGHT_UP = 0, 1, 2


@dataclass(eq=False)
class Heartbeats(LogColumns):
    """Heartbeats whose scalar fields are all set, in offset order, as columns (every int column int64)."""

    brokers: np.ndarray  # int64, BrokerId
    epochs: np.ndarray  # int64, BrokerEpoch
    metadata_offsets: np.ndarray  # int64, CurrentMetadataOffset
    fence: np.ndarray  # bool, WantFence
    shutdown: np.ndarray  # bool, WantShutDown
    dirs: list[list[str] | None]  # OfflineLogDirs
    offline: np.ndarray  # bool: OfflineLogDirs names a directory (the few whose directories are looked at)

    @classmethod
    def of_columns(cls, offsets: np.ndarray, timestamps: np.ndarray, leader_epochs: np.ndarray, versions: np.ndarray,
                   sources: list[str | None], positions: list[int | None], brokers: np.ndarray, epochs: np.ndarray,
                   metadata_offsets: np.ndarray, fence: np.ndarray, shutdown: np.ndarray,
                   dirs: list[list[str] | None]) -> Heartbeats:
        """Sorted by offset (the columns may come in any order)."""
        made = cls(*(np.asarray(a, np.int64) for a in (offsets, timestamps, leader_epochs, versions)), sources,
                   positions, *(np.asarray(a, np.int64) for a in (brokers, epochs, metadata_offsets)),
                   np.asarray(fence, bool), np.asarray(shutdown, bool), dirs,
                   np.fromiter((bool(d) for d in dirs), bool, len(dirs)))
        if len(made) > 1 and not np.all(made.offsets[1:] > made.offsets[:-1]):
            made = made.take(np.argsort(made.offsets, kind="stable"))
        return made

    @classmethod
    def of_events(cls, events: list[dict]) -> Heartbeats:
        """Heartbeat events (each with every scalar field set) as columns."""
        data = [e["data"] for e in events]

        def column(name: str) -> list:
            return [d[name] for d in data]

        return cls.of_columns([e["offset"] for e in events], [e["timestamp"] for e in events],
                              [e["leader_epoch"] for e in events], [e["version"] for e in events],
                              [e.get("source") for e in events], [e.get("position") for e in events],
                              column("BrokerId"), column("BrokerEpoch"), column("CurrentMetadataOffset"),
                              column("WantFence"), column("WantShutDown"), column("OfflineLogDirs"))

    @classmethod
    def concat(cls, parts: list[Heartbeats]) -> Heartbeats:
        """The heartbeats of ``parts`` in one, sorted by offset."""
        if len(parts) == 1:
            return parts[0]
        names = [f for f in cls.__dataclass_fields__ if f != "offline"]
        return cls.of_columns(*(np.concatenate([getattr(p, f) for p in parts])
                                if isinstance(getattr(parts[0], f), np.ndarray)
                                else [v for p in parts for v in getattr(p, f)] for f in names))

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self, index: np.ndarray) -> Heartbeats:
        picked = index.tolist()
        return Heartbeats(self.offsets[index], self.timestamps[index], self.leader_epochs[index], self.versions[index],
                          [self.sources[i] for i in picked], [self.positions[i] for i in picked], self.brokers[index],
                          self.epochs[index], self.metadata_offsets[index], self.fence[index], self.shutdown[index],
                          [self.dirs[i] for i in picked], self.offline[index])

    def event(self, i: int) -> dict:
        """Heartbeat ``i`` as the event dict the full path decides (as the streaming job made it of its JSON)."""
        values = (int(self.brokers[i]), int(self.epochs[i]), int(self.metadata_offsets[i]), bool(self.fence[i]),
                  bool(self.shutdown[i]), self.dirs[i])
        return {"offset": int(self.offsets[i]), "leader_epoch": int(self.leader_epochs[i]),
                "timestamp": int(self.timestamps[i]), "type": HEARTBEAT, "version": int(self.versions[i]),
                "data": dict(zip(FIELDS, values)), "source": self.sources[i], "position": self.positions[i]}

    def events(self) -> list[dict]:
        """Every heartbeat as its event dict (``event``)."""
        return [self.event(i) for i in range(len(self))]

    @cached_property
    def values(self) -> tuple[list, ...]:
        """Offsets, timestamps, brokers, epochs, metadata offsets, WantFence, WantShutDown, ``offline`` and
        versions as lists: the calm path reads them one heartbeat at a time, and a list's item is a Python
        value already (a numpy array's would be made per read). The runs between two other requests are short
        (ten heartbeats on average in the soak's mix, where one request in ten is an AlterPartition): too short
        for a pass of numpy calls to pay."""
        return tuple(a.tolist() for a in (self.offsets, self.timestamps, self.brokers, self.epochs,
                                          self.metadata_offsets, self.fence, self.shutdown, self.offline,
                                          self.versions))
