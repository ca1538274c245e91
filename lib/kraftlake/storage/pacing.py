"""Micro-batches sized by the time they take: the ``maxBatchMillis`` option of the ``kraftlake_delta`` source.

Spark writes a micro-batch's range into the checkpoint before running it, and whoever runs the query next (a
restart, a standby taking over after a kill) runs that range again, whole: a micro-batch that takes longer
than a controller lives is re-run by each successor and never finishes (the 10^5-partition soak: one of
50,000 requests taken over by 39 standbys in a row, each killed before it was done). A row cap alone cannot
prevent it, since what a row costs varies a hundredfold with the cluster's size and the requests' kind; so
the reader sizes the next micro-batch from how long the last ones took, below the cap.

Spark tells a stream reader on the driver when a micro-batch is planned (``latestOffset`` returns its end)
and asks for the next one as soon as it is committed (``latestOffset`` from that end), so the time between
the two is the micro-batch's, planning, state store and sink included. ``commit(end)`` comes too late to
use: Spark calls it only once the micro-batch after ``end`` is planned. The time between the two calls also
holds the wait for the next trigger when a micro-batch ends before its trigger interval (it is then read as
the interval), so the bound must exceed the interval: longer micro-batches are timed exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# The fewest rows a paced micro-batch is given (or the cap, if smaller): progress however slow the rows are,
# and few enough that a cold start at 10^5 partitions commits within seconds.
FLOOR_ROWS = 1_000
# A fast micro-batch lets the next one grow this many times at most: a micro-batch's cost is not linear in its
# rows (a failover's requests cost thousands of partition changes each, heartbeats next to nothing), so the
# size is found again step by step rather than extrapolated from one lucky batch.
GROWTH = 2


def paced_rows(rows: int, elapsed_s: float, limit: int, target_s: float, cap: int) -> int:
    """The most rows for the next micro-batch, after one of ``rows`` rows (planned with at most ``limit``)
    that took ``elapsed_s``: as many as the last one's pace fits in ``target_s``, at most ``GROWTH`` times
    its rows and ``cap``, at least ``FLOOR_ROWS`` (or ``cap``).

    A micro-batch cut short by the log's end (fewer rows than ``limit``) that was in time keeps the limit:
    it was small because little was waiting, and its pace, fixed costs over a few rows, says nothing of a
    full one."""
    if rows < limit and elapsed_s <= target_s:
        return limit
    fits = rows * target_s / elapsed_s if elapsed_s > 0 else cap
    return max(min(FLOOR_ROWS, cap), min(int(fits), GROWTH * rows, cap))


class Pace:
    """One stream reader's micro-batches as it sees them, and the most rows it plans next (``rows``).

    A reader that has timed nothing yet plans ``FLOOR_ROWS``: a new controller with a backlog (a standby
    after a takeover, a restart) does not know how long the cap takes, and a first micro-batch longer than
    its life would be re-run by every successor. A micro-batch run whose plan this reader did not make (the
    one a restart or a takeover re-runs, seen in ``partitions``) is timed from the reader's creation: an
    overestimate, on the safe side."""

    def __init__(self, target_ms: int, cap: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.target_s = target_ms / 1000
        self.cap = cap
        self.clock = clock
        self.created = clock()
        self.limit = min(FLOOR_ROWS, cap)
        self.planned: tuple[int, int, int, float] | None = None  # (after, end, limit, when) of the last plan
        self.ran: tuple[int, int] | None = None  # (after, end) of the last micro-batch run

    def rows(self, start: int, count: Callable[[int, int], int]) -> int:
        """The most rows for the micro-batch after ``start`` (the end of the last one, now committed);
        ``count(after, end)``: the rows in (after, end]."""
        if self.planned is not None and self.planned[1] == start:
            after, _, limit, since = self.planned
        elif self.ran is not None and self.ran[1] == start:
            (after, _), limit, since = self.ran, None, self.created
        else:
            return self.limit
        self.planned = self.ran = None
        done = count(after, start)
        self.limit = paced_rows(done, self.clock() - since, done if limit is None else limit, self.target_s, self.cap)
        return self.limit

    def plan(self, after: int, end: int, limit: int) -> None:
        """A micro-batch of the rows in (after, end], planned with at most ``limit`` rows, starts now."""
        self.planned = (after, end, limit, self.clock())

    def run(self, after: int, end: int) -> None:
        """Spark runs the micro-batch (after, end]: one this reader planned, or one planned before it."""
        self.ran = (after, end)


__all__ = ["FLOOR_ROWS", "GROWTH", "Pace", "paced_rows"]
