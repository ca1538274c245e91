"""The replicated log as Raft sees it: entries and their leader epochs, divergence and truncation."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple


# The control records that set the voters: Kafka's (KIP-853) and the KIP-595 draft's.
VOTER_RECORDS = ("VotersRecord", "VoterAssignmentMessage")


class LogEntry(NamedTuple):
    epoch: int
    value: Any


class RaftLog:
    """The replicated log as Raft sees it: entries with their leader epoch, offsets from 0 (no snapshots)."""

    def __init__(self, entries: Iterable[LogEntry] = ()) -> None:
        self.entries: list[LogEntry] = [LogEntry(*e) for e in entries]

    @property
    def end_offset(self) -> int:
        return len(self.entries)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def epoch_at(self, offset: int) -> int:
        return self.entries[offset].epoch

    def append(self, epoch: int, value: Any) -> int:
        if epoch < self.last_epoch:
            raise ValueError(f"append in epoch {epoch} after epoch {self.last_epoch}")
        self.entries.append(LogEntry(epoch, value))
        return len(self.entries) - 1

    def truncate_to(self, offset: int) -> None:
        del self.entries[offset:]

    def latest_voters(self) -> tuple[tuple[int, ...], int] | None:
        """The voter set of the last VotersRecord in the log and its offset: a voter change takes effect
        when it is appended, committed or not (KIP-853's rule, which the seed's AlterQuorum shares). The
        KIP-595 draft's VoterAssignmentMessage (ADR 0012) sets them the same way."""
        for offset in range(len(self.entries) - 1, -1, -1):
            value = self.entries[offset].value
            if isinstance(value, dict) and value.get("type") in VOTER_RECORDS:
                return tuple(sorted(v["VoterId"] for v in value["data"]["Voters"])), offset
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of the largest epoch <= ``epoch`` in the log (the leader epoch cache's
        ``endOffsetFor``): its end is where the next epoch starts, or the log end for the last epoch.
        With no epoch <= ``epoch`` it is (epoch, start of the first epoch); an empty log gives (0, 0)."""
        if not self.entries:
            return 0, 0
        floor_epoch = None
        for offset, entry in enumerate(self.entries):
            if entry.epoch > epoch:
                return (epoch, offset) if floor_epoch is None else (floor_epoch, offset)
            floor_epoch = entry.epoch
        return floor_epoch, self.end_offset  # type: ignore[return-value]

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> tuple[bool, int, int]:
        """``ReplicatedLog.validateOffsetAndEpoch``: (valid, epoch, offset); when not valid, the
        diverging epoch and the end offset the fetcher must truncate to."""
        if offset == 0:
            return True, 0, 0
        end_epoch, end = self.end_offset_for_epoch(epoch)
        if end_epoch != epoch or end < offset:
            return False, end_epoch, end
        return True, epoch, offset

    def truncate_to_end_offset(self, epoch: int, end_offset: int) -> int:
        """``ReplicatedLog.truncateToEndOffset``: the follower's side of a DivergingEpoch."""
        if epoch == 0:
            truncation = min(end_offset, self.end_offset)
        else:
            local_epoch, local_end = self.end_offset_for_epoch(epoch)
            truncation = min(local_end, end_offset) if local_epoch == epoch else local_end
        self.truncate_to(truncation)
        return truncation
