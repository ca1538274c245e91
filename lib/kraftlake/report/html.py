"""A ``Timeline`` as one self-contained HTML page: inline CSS and SVG, nothing fetched when it opens.

Every drawn element carries its numbers as ``data-*`` attributes (a broker band's state and start, a
bucket's counts), so what a person sees can be checked by a program reading the rendered page.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from kraftlake.report.timeline import OFFLINE, REASSIGNING, STATES, UNDER_MIN_ISR, Timeline

WIDTH, LEFT, ROW = 980, 110, 22
COLORS = {"registered": "#9ecae1", "unfenced": "#41ab5d", "controlled shutdown": "#fdae6b", "fenced": "#d62728",
          "unregistered": "#bdbdbd"}
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1040px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px}
.muted{color:#666} table{border-collapse:collapse;margin-top:6px} td,th{padding:3px 8px;border-bottom:1px solid #eee;
text-align:left;vertical-align:top} th{font-weight:600} .num{text-align:right} pre{margin:2px 0;white-space:pre-wrap}
.legend span{display:inline-block;margin-right:14px} .sw{display:inline-block;width:12px;height:12px;margin-right:4px;
vertical-align:-1px} svg text{font-size:11px;fill:#333} .kpi{display:inline-block;margin-right:22px}
.kpi b{font-size:18px}
"""


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _x(tl: Timeline, ms: int) -> float:
    span = max(1, tl.end_ms - tl.start_ms)
    return LEFT + (WIDTH - LEFT) * (min(max(ms, tl.start_ms), tl.end_ms) - tl.start_ms) / span


def _axis(tl: Timeline, y: int) -> str:
    ticks = []
    for i in range(5):
        ms = tl.start_ms + (tl.end_ms - tl.start_ms) * i // 4
        x = _x(tl, ms)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        ticks.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>'
                     f'<text x="{x:.1f}" y="{y + 16}" text-anchor="{anchor}">{_time(ms)[11:23]}</text>')
    return f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH}" y2="{y}" stroke="#999"/>' + "".join(ticks)


def _bands(tl: Timeline) -> str:
    rows = []
    for n, (broker, spans) in enumerate(sorted(tl.brokers.items())):
        y = n * ROW
        rows.append(f'<text x="{LEFT - 8}" y="{y + 15}" text-anchor="end">broker {broker}</text>')
        for i, s in enumerate(spans):
            end = spans[i + 1].start_ms if i + 1 < len(spans) else tl.end_ms
            x0, x1 = _x(tl, s.start_ms), _x(tl, end)
            rows.append(f'<a href="#offset-{s.offset}"><rect class="band" data-broker="{broker}" data-state="{s.state}" '
                        f'data-start="{s.start_ms}" data-offset="{s.offset}" x="{x0:.1f}" y="{y + 2}" '
                        f'width="{max(1.0, x1 - x0):.1f}" height="{ROW - 4}" fill="{COLORS[s.state]}"><title>broker '
                        f'{broker}: {s.state} from {_time(s.start_ms)} (offset {s.offset})</title></rect></a>')
    height = max(1, len(tl.brokers)) * ROW
    legend = "".join(f'<span><i class="sw" style="background:{COLORS[s]}"></i>{s}</span>' for s in STATES)
    return (f'<div class="legend">{legend}</div><svg width="{WIDTH + 10}" height="{height + 24}">'
            + "".join(rows) + _axis(tl, height + 2) + "</svg>")


def _bars(tl: Timeline, colors: dict[str, str], height: int = 120) -> str:
    series = [(name, tl.series[name].buckets, color) for name, color in colors.items()]
    top = max([1] + [v for _, values, _ in series for v in values])
    width = (WIDTH - LEFT) / tl.buckets
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
                             f'height="{height - ys[i]:.1f}" fill="transparent"><title>{name}: {v} at '
                             f'{_time(tl.bucket_start(i))}</title></rect>')
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{n} (most in a '
                     f'{tl.bucket_ms:,} ms step)</span>' for n, _, c in series)
    return (f'<div class="legend">{legend}</div><svg width="{WIDTH + 10}" height="{height + 24}">'
            + "".join(parts) + _axis(tl, height + 2) + "</svg>")


def _quorum(tl: Timeline) -> str:
    if not tl.quorum:
        return '<p class="muted">No LeaderChangeMessage in this part of the log.</p>'
    parts = []
    for i, (ms, offset, leader, epoch) in enumerate(tl.quorum):
        end = tl.quorum[i + 1][0] if i + 1 < len(tl.quorum) else tl.end_ms
        x0, x1 = _x(tl, ms), _x(tl, end)
        parts.append(f'<rect class="quorum" data-leader="{leader}" data-epoch="{epoch}" data-offset="{offset}" '
                     f'x="{x0:.1f}" y="2" width="{max(1.0, x1 - x0):.1f}" height="18" fill="#6baed6" stroke="#fff">'
                     f'<title>leader {leader}, epoch {epoch}, from offset {offset}</title></rect>'
                     f'<text x="{x0 + 3:.1f}" y="15">{leader} / e{epoch}</text>')
    return (f'<svg width="{WIDTH + 10}" height="46"><text x="{LEFT - 8}" y="15" text-anchor="end">leader / epoch'
            f'</text>' + "".join(parts) + _axis(tl, 22) + "</svg>")


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


def _moments(tl: Timeline, warehouse: str, limit: int = 200) -> str:
    rows = "".join(
        f'<tr class="moment" id="offset-{m.offset}" data-offset="{m.offset}"><td>{_time(m.timestamp)}</td>'
        f'<td class="num">{m.offset}</td><td>{escape(m.what)}</td><td><details><summary>SQL</summary>'
        f'<pre class="sql">{escape(m.sql)}</pre><pre class="cmd">./spark-submit.sh jobs/sql.py --warehouse '
        f'{escape(warehouse)} "{escape(m.sql)}"</pre></details></td></tr>' for m in tl.moments[:limit])
    more = (f'<p class="muted">{len(tl.moments) - limit:,} more moments not shown.</p>'
            if len(tl.moments) > limit else "")
    return ("<table><tr><th>time (UTC)</th><th>offset</th><th>what</th><th>show it (jobs/sql.py)</th></tr>"
            + rows + "</table>" + more)


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
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head><body>
<h1>{escape(title)}</h1>
<p class="muted">{_time(tl.start_ms)} to {_time(tl.end_ms)} UTC (event time), from the warehouse's tables.</p>
<div>{kpis}</div>
<h2>Brokers</h2>{_bands(tl)}
<h2>Partitions offline and under min.insync.replicas</h2>
{_bars(tl, {OFFLINE: "#d62728", UNDER_MIN_ISR: "#fdae6b"})}
<h2>Reassignments in progress</h2>{_bars(tl, {REASSIGNING: "#756bb1"}, height=60)}
<h2>Metadata quorum</h2>{_quorum(tl)}
<h2>Leaderships and ISR membership, per broker</h2>{_per_broker(tl)}
<h2>Notable moments</h2>{_moments(tl, warehouse)}
</body></html>
"""
