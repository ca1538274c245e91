"""A ``Timeline`` as one self-contained HTML page: inline CSS and SVG, nothing fetched when it opens.

Every drawn element carries its numbers as ``data-*`` attributes (a broker band's state and start, a
bucket's counts, a quiet stretch's times), so what a person sees can be checked by a program reading the
rendered page. The command lines it offers are quoted for a POSIX shell: whatever the warehouse's path or
its data hold, pasting one runs jobs/sql.py and nothing else.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timezone
from html import escape

import numpy as np

from kraftlake.metadata.progress import spoken_duration
from kraftlake.report.timeline import OFFLINE, REASSIGNING, STATES, UNDER_MIN_ISR, Timeline

WIDTH, LEFT, ROW = 980, 110, 22
PLOT = WIDTH - LEFT
CHAR_WIDTH, LABEL_AIR = 6.2, 8  # px of a time label's character (11 px digits) and between two labels
TICK_EVERY = 160  # px: at most this far between two time labels where nothing else calls for one
COLORS = {"registered": "#9ecae1", "unfenced": "#41ab5d", "controlled shutdown": "#fdae6b", "fenced": "#d62728",
          "unregistered": "#bdbdbd"}
QUORUM_COLOR, NO_LEADER_COLOR = "#6baed6", "#d9d9d9"
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1040px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px}
.muted{color:#666} table{border-collapse:collapse;margin-top:6px} td,th{padding:3px 8px;border-bottom:1px solid #eee;
text-align:left;vertical-align:top} th{font-weight:600} .num{text-align:right} pre{margin:2px 0;white-space:pre-wrap}
.legend span{display:inline-block;margin-right:14px} .sw{display:inline-block;width:12px;height:12px;margin-right:4px;
vertical-align:-1px} svg text{font-size:11px;fill:#333} svg text.gap-label{font-size:10px;fill:#666}
.kpi{display:inline-block;margin-right:22px} .kpi b{font-size:18px}
.notice{background:#fff3cd;border:1px solid #e0c36c;padding:6px 10px;margin:8px 0}
"""
# The hatching of quiet stretches, defined once for every drawing of the page: grey on white, lighter on
# a colour.
PATTERN = ('<svg width="0" height="0" style="position:absolute"><defs><pattern id="quiet" width="6" height="6" '
           'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#000" '
           'fill-opacity="0.07"/><rect width="3" height="6" fill="#fff" fill-opacity="0.6"/></pattern></defs></svg>')


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _x(tl: Timeline, ms: int) -> float:
    return LEFT + PLOT * tl.axis.fraction(min(max(ms, tl.start_ms), tl.end_ms + 1))


def _tick_label(tl: Timeline, ms: int, previous: int | None) -> str:
    """A time label: hours to milliseconds, the date too over a window of days; only the seconds when the
    label before it is of the same minute."""
    if tl.end_ms - tl.start_ms >= 86_400_000:
        return _time(ms)[5:19]
    text = _time(ms)[11:23]
    return ":" + text[6:] if previous is not None and _time(previous)[:16] == _time(ms)[:16] else text


def _label_extent(tl: Timeline, ms: int, text: str) -> tuple[float, float, str]:
    """Where a time label at ``ms`` lies on the axis (from, to) and its anchor: labels at the ends stay
    inside the drawing."""
    x, width = _x(tl, ms), len(text) * CHAR_WIDTH
    if x - LEFT < width / 2:
        return x, x + width, "start"
    if WIDTH - x < width / 2:
        return x - width, x, "end"
    return x - width / 2, x + width / 2, "middle"


def _ticks(tl: Timeline) -> list[tuple[int, str]]:
    """Where the axis is labelled, and with what: the window's ends, where each burst of changes starts
    (after a quiet stretch), and every TICK_EVERY px between; never two labels on top of each other (the
    window's end wins)."""
    axis = tl.axis
    bursts = axis.ms[1:-1][axis.quiet[:-1]]
    grid = axis.edges(max(1, int(PLOT // TICK_EVERY)))[1:-1]
    grid = grid[~axis.quiet[np.clip(np.searchsorted(axis.ms, grid, side="right") - 1, 0, len(axis.quiet) - 1)]]
    candidates = sorted({tl.start_ms, tl.end_ms, *bursts.tolist(), *grid.tolist()})
    chosen: list[tuple[int, str]] = []
    for ms in candidates:
        while True:
            text = _tick_label(tl, ms, chosen[-1][0] if chosen else None)
            lo = _label_extent(tl, ms, text)[0]
            if not chosen or _label_extent(tl, *chosen[-1])[1] + LABEL_AIR <= lo:
                chosen.append((ms, text))
                break
            if ms != tl.end_ms:
                break
            chosen.pop()  # the window's end is always labelled
    return chosen


def _axis(tl: Timeline, y: int) -> str:
    parts = [f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH}" y2="{y}" stroke="#999"/>']
    for ms, text in _ticks(tl):
        x, anchor = _x(tl, ms), _label_extent(tl, ms, text)[2]
        parts.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>'
                     f'<text class="tick" data-ms="{ms}" x="{x:.1f}" y="{y + 16}" text-anchor="{anchor}">{text}</text>')
    for s in tl.axis.stretches(quiet_only=True, min_width=34 / PLOT):
        parts.append(f'<text class="gap-label" x="{LEFT + PLOT * (s.x0 + s.x1) / 2:.1f}" y="{y + 28}" '
                     f'text-anchor="middle">{spoken_duration(s.end_ms - s.start_ms)}</text>')
    return "".join(parts)


def _quiet(tl: Timeline, height: int) -> str:
    """The quiet stretches, hatched over a drawing of ``height``: nothing changed in them for over a
    second, and they are drawn compressed (those too narrow to see are left out)."""
    return "".join(
        f'<rect class="quiet" data-start="{s.start_ms}" data-end="{s.end_ms}" x="{LEFT + PLOT * s.x0:.1f}" y="0" '
        f'width="{PLOT * (s.x1 - s.x0):.1f}" height="{height}" fill="url(#quiet)">'
        f'<title>quiet for {spoken_duration(s.end_ms - s.start_ms)}: no change from {_time(s.start_ms)} to {_time(s.end_ms)} '
        f'(drawn compressed)</title></rect>' for s in tl.axis.stretches(quiet_only=True, min_width=2 / PLOT))


def _svg(tl: Timeline, height: int, body: str, labels: str = "") -> str:
    """A drawing over the time axis: ``body``, the quiet stretches hatched over it, ``labels`` on top."""
    axis_room = 36 if tl.axis.quiet.any() else 22
    return (f'<svg width="{WIDTH + 10}" height="{height + axis_room}">{body}{_quiet(tl, height)}{labels}'
            f'{_axis(tl, height + 2)}</svg>')


def _bands(tl: Timeline) -> str:
    rows = []
    for n, (broker, spans) in enumerate(sorted(tl.brokers.items())):
        y = n * ROW
        rows.append(f'<text x="{LEFT - 8}" y="{y + 15}" text-anchor="end">broker {broker}</text>')
        for i, s in enumerate(spans):
            end = spans[i + 1].start_ms if i + 1 < len(spans) else tl.end_ms + 1
            x0, x1 = _x(tl, s.start_ms), _x(tl, end)
            rows.append(f'<a href="#offset-{s.offset}"><rect class="band" data-broker="{broker}" data-state="{s.state}" '
                        f'data-start="{s.start_ms}" data-offset="{s.offset}" x="{x0:.1f}" y="{y + 2}" '
                        f'width="{max(1.0, x1 - x0):.1f}" height="{ROW - 4}" fill="{COLORS[s.state]}"><title>broker '
                        f'{broker}: {s.state} from {_time(s.start_ms)} (offset {s.offset})</title></rect></a>')
    legend = "".join(f'<span><i class="sw" style="background:{COLORS[s]}"></i>{s}</span>' for s in STATES)
    return f'<div class="legend">{legend}</div>' + _svg(tl, max(1, len(tl.brokers)) * ROW, "".join(rows))


def _bars(tl: Timeline, colors: dict[str, str], height: int = 120) -> str:
    series = [(name, tl.series[name].buckets, color) for name, color in colors.items()]
    top = max([1] + [v for _, values, _ in series for v in values])
    width = PLOT / tl.buckets
    parts = [f'<text x="{LEFT - 8}" y="12" text-anchor="end">{top}</text>',
             f'<text x="{LEFT - 8}" y="{height}" text-anchor="end">0</text>']
    for name, values, color in series:
        # one step-shaped area per series (no seams between buckets); the buckets as hover targets on top
        ys = [height - height * v / top for v in values]
        steps = " ".join(f"L{LEFT + i * width:.1f},{y:.1f} L{LEFT + (i + 1) * width:.1f},{y:.1f}"
                         for i, y in enumerate(ys))
        parts.append(f'<path class="area" d="M{LEFT},{height} {steps} L{WIDTH},{height} Z" fill="{color}" '
                     f'fill-opacity="0.75"/>')
        for i, v in enumerate(values):
            if v:
                parts.append(f'<rect class="bar" data-series="{name}" data-bucket="{i}" data-value="{v}" '
                             f'x="{LEFT + i * width:.1f}" y="{ys[i]:.1f}" width="{width:.1f}" '
                             f'height="{height - ys[i]:.1f}" fill="transparent"><title>{name}: at most {v} from '
                             f'{_time(tl.bucket_start(i))} to {_time(tl.bucket_start(i + 1))}</title></rect>')
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{n}</span>' for n, _, c in series)
    return (f'<div class="legend">{legend} <span class="muted">(the most at any moment of each of '
            f'{tl.buckets} steps)</span></div>' + _svg(tl, height, "".join(parts)))


def _quorum(tl: Timeline) -> str:
    state = tl.quorum_state
    line = ""
    if state is not None:
        voted = f", voted for {state.voted}" if state.voted >= 0 else ""
        if not state.ahead:
            used = ""
        elif state.first_offset is not None:
            used = (" The log has no LeaderChangeMessage of that epoch: it is drawn (hatched) from the log's first "
                    f"record of the epoch, offset {state.first_offset}.")
        else:
            used = " No record of the log is of that epoch: it began after the log's end."
        line = (f'<p class="muted" data-quorum-state-epoch="{state.epoch}">The partition directory\'s quorum-state file '
                f'({escape(state.file)}): leader {state.leader}, epoch {state.epoch}{voted}.{used}</p>')
    if not tl.quorum:
        return '<p class="muted">No LeaderChangeMessage in this part of the log.</p>' + line
    parts, labels = [], []
    for i, q in enumerate(tl.quorum):
        end = tl.quorum[i + 1].start_ms if i + 1 < len(tl.quorum) else tl.end_ms + 1
        x0, x1 = _x(tl, q.start_ms), _x(tl, end)
        source = "the quorum-state file" if q.from_quorum_state else "a LeaderChangeMessage"
        who = f"leader {q.leader}" if q.leader >= 0 else "no leader"
        parts.append(f'<rect class="quorum" data-leader="{q.leader}" data-epoch="{q.epoch}" data-offset="{q.offset}" '
                     f'data-source="{"quorum-state" if q.from_quorum_state else "LeaderChangeMessage"}" '
                     f'x="{x0:.1f}" y="2" width="{max(1.0, x1 - x0):.1f}" height="18" '
                     f'fill="{QUORUM_COLOR if q.leader >= 0 else NO_LEADER_COLOR}" stroke="#fff">'
                     f'<title>{who}, epoch {q.epoch}, from offset {q.offset} ({source})</title></rect>')
        if q.from_quorum_state:
            parts.append(f'<rect x="{x0:.1f}" y="2" width="{max(1.0, x1 - x0):.1f}" height="18" fill="url(#quiet)"/>')
        if x1 - x0 >= 44:
            labels.append(f'<text x="{x0 + 3:.1f}" y="15">{q.leader if q.leader >= 0 else "none"} / e{q.epoch}</text>')
    return (_svg(tl, 22, f'<text x="{LEFT - 8}" y="15" text-anchor="end">leader / epoch</text>' + "".join(parts),
                 "".join(labels)) + line)


def _per_broker(tl: Timeline) -> str:
    brokers = sorted(set(tl.brokers) | set(tl.leaderships_gained) | set(tl.leaderships_lost) | set(tl.isr_joins)
                     | set(tl.isr_leaves))
    rows = "".join(
        f'<tr data-broker="{b}"><td>{b}</td><td class="num" data-metric="leaderships-gained">'
        f'{tl.leaderships_gained[b]:,}</td><td class="num" data-metric="leaderships-lost">{tl.leaderships_lost[b]:,}'
        f'</td><td class="num" data-metric="isr-joins">{tl.isr_joins[b]:,}</td><td class="num" data-metric="isr-leaves">'
        f'{tl.isr_leaves[b]:,}</td></tr>' for b in brokers)
    return ("<table><tr><th>broker</th><th>leaderships gained</th><th>leaderships lost</th><th>ISR expansions "
            "(joined)</th><th>ISR shrinks (left)</th></tr>" + rows + "</table>")


def sql_command(warehouse: str, sql: str) -> str:
    """The command line that runs ``sql`` on the warehouse, each argument quoted for a POSIX shell (single
    quotes: nothing inside them is expanded, not even by bash's history)."""
    return shlex.join(["./spark-submit.sh", "jobs/sql.py", "--warehouse", warehouse, sql])


def _moments(tl: Timeline, warehouse: str, limit: int = 200) -> str:
    rows = "".join(
        f'<tr class="moment" id="offset-{m.offset}" data-offset="{m.offset}"><td>{_time(m.timestamp)}</td>'
        f'<td class="num">{m.offset}</td><td>{escape(m.what)}</td><td><details><summary>SQL</summary>'
        f'<pre class="sql">{escape(m.sql)}</pre><pre class="cmd">{escape(sql_command(warehouse, m.sql))}</pre>'
        f'</details></td></tr>' for m in tl.moments[:limit])
    more = (f'<p class="muted">{len(tl.moments) - limit:,} more moments not shown.</p>'
            if len(tl.moments) > limit else "")
    return ("<table><tr><th>time (UTC)</th><th>offset</th><th>what</th><th>show it (jobs/sql.py)</th></tr>"
            + rows + "</table>" + more)


def _scale(tl: Timeline) -> str:
    if tl.axis.linear:
        return ""
    return (" Time is drawn by the logarithm of the time between two changes, so that a burst of milliseconds "
            "and an hour of quiet both show: stretches of over a second without any change are hatched (hover "
            "for their times); --linear-time draws it to scale.")


def render(tl: Timeline, title: str, warehouse: str) -> str:
    """The page; ``warehouse`` goes into the command lines that run each moment's SQL."""
    offline, under, moving = tl.series[OFFLINE], tl.series[UNDER_MIN_ISR], tl.series[REASSIGNING]
    kpis = (f'<span class="kpi" data-metric="partitions"><b>{tl.partitions:,}</b> partitions</span>'
            f'<span class="kpi" data-metric="offline-max"><b>{offline.worst:,}</b> offline at worst</span>'
            f'<span class="kpi" data-metric="offline-now"><b>{offline.at_end:,}</b> offline at the end</span>'
            f'<span class="kpi" data-metric="under-min-isr-max"><b>{under.worst:,}</b> under '
            f'min.insync.replicas at worst</span>'
            f'<span class="kpi" data-metric="under-min-isr-now"><b>{under.at_end:,}</b> under min.insync.replicas at '
            f'the end</span>'
            f'<span class="kpi" data-metric="reassigning-max"><b>{moving.worst:,}</b> reassigning at worst</span>'
            f'<span class="kpi" data-metric="changes"><b>{tl.changes:,}</b> partition changes</span>')
    notices = "".join(f'<p class="notice">{escape(n)}</p>' for n in tl.notices)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head><body>
{PATTERN}<h1>{escape(title)}</h1>
<p class="muted">{_time(tl.start_ms)} to {_time(tl.end_ms)} UTC (event time), from the warehouse's tables.{_scale(tl)}</p>
{notices}<div>{kpis}</div>
<h2>Brokers</h2>{_bands(tl)}
<h2>Partitions offline and under min.insync.replicas</h2>
{_bars(tl, {OFFLINE: "#d62728", UNDER_MIN_ISR: "#fdae6b"})}
<h2>Reassignments in progress</h2>{_bars(tl, {REASSIGNING: "#756bb1"}, height=60)}
<h2>Metadata quorum</h2>{_quorum(tl)}
<h2>Leaderships and ISR membership, per broker</h2>{_per_broker(tl)}
<h2>Notable moments</h2>{_moments(tl, warehouse)}
</body></html>
"""
