"""Progress lines for long work: how much is done of how much, how fast, and when it will end.

An operator replaying a year of a large cluster's log wants to know it is alive and how long to wait;
a script or a CI log wants no noise. So a ``Meter`` prints at most one line per interval on stderr, and
only when asked or when stderr is a terminal (``kraftlake.progress``: auto | always | never). Under
spark-submit the driver's stderr is a pipe (into spark-submit.sh's own stderr, or failing that the
JVM's stdout), so the launcher says whether that end is a terminal in ``KRAFTLAKE_PROGRESS_TERMINAL``.
The same meter serves ingest (bytes of the source), the controller (log offsets), the simulator (requests) and
the benchmarks, so every long job reads the same way.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

AUTO, ALWAYS, NEVER = "auto", "always", "never"
TERMINAL_ENV = "KRAFTLAKE_PROGRESS_TERMINAL"
MODES = (AUTO, ALWAYS, NEVER)


def wanted(mode: str, out: TextIO | None = None) -> bool:
    """Whether progress lines should be printed: ``auto`` means only on a terminal."""
    if mode not in MODES:
        raise ValueError(f"kraftlake.progress is {mode!r}; expected one of {', '.join(MODES)}")
    if mode == AUTO:
        stream = out or sys.stderr
        if getattr(stream, "isatty", lambda: False)():
            return True
        return out is None and os.environ.get(TERMINAL_ENV) == "1"
    return mode == ALWAYS


def duration(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss``): an ETA is read at a glance, not computed."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def spoken_duration(ms: int) -> str:
    """A length of event time as a person says it: 84 ms, 51.4 s, 26 min, 3.2 h, 12 days, 31,000 years (a
    report, an anomaly's detail: read, not parsed)."""
    for unit, size in (("years", 365.25 * 86_400_000), ("days", 86_400_000), ("h", 3_600_000), ("min", 60_000),
                       ("s", 1_000)):
        if ms >= size:
            value = ms / size
            return f"{value:,.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    return f"{ms} ms"


class Meter:
    """One line per ``every`` seconds: ``[label] done of total unit (pct), rate, ETA, note``.

    ``total`` may be unknown (None: no percentage or ETA) or change while the work runs (a log that
    grows while it is replayed). The rate is over the whole run so far, which is steadier than the
    last interval's and what an ETA should rest on. ``done`` and ``total`` are counted in ``scale``ths of
    the unit (bytes for ``unit="MB", scale=1e6``); ``base`` is where this run started counting (a replay
    that resumes at offset 10^6 has not done 10^6 offsets in its first second).
    """

    def __init__(self, label: str, unit: str = "records", total: int | None = None, every: float = 5.0,
                 enabled: bool = True, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.unit, self.total, self.every, self.enabled = label, unit, total, every, enabled
        self.scale = 1.0
        self.base = 0
        self.out = out
        self.clock = clock
        self.started = clock()
        self.last_print: float | None = None
        self.lines = 0

    def line(self, done: int, note: str = "") -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = (done - self.base) / elapsed
        digits = 0 if self.scale == 1 else 1
        amount = f"{done / self.scale:,.{digits}f}"
        parts = [f"{amount} of {self.total / self.scale:,.{digits}f} {self.unit} ({100 * done / self.total:.0f}%)"
                 if self.total else f"{amount} {self.unit}", f"{rate / self.scale:,.{digits}f} {self.unit}/s"]
        if self.total and rate > 0:
            parts.append(f"ETA {duration(max(0, self.total - done) / rate)}")
        parts.append(f"elapsed {duration(elapsed)}")
        if note:
            parts.append(note)
        return f"[{self.label}] " + ", ".join(parts)

    def update(self, done: int, note: str = "", total: int | None = None) -> bool:
        """Print a line if the interval has passed since the last one; True if it printed."""
        if total is not None:
            self.total = total
        if not self.enabled:
            return False
        now = self.clock()
        if self.last_print is not None and now - self.last_print < self.every:
            return False
        if self.last_print is None and now - self.started < self.every:
            return False  # short work prints nothing at all
        self.last_print = now
        self.emit(self.line(done, note))
        return True

    def finish(self, done: int, note: str = "") -> None:
        """A last line, only if earlier ones were printed (so the run's end is visible in the log)."""
        if self.enabled and self.lines:
            self.emit(self.line(done, note))

    def emit(self, text: str) -> None:
        self.lines += 1
        print(text, file=self.out or sys.stderr, flush=True)
