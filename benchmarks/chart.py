"""The report as one PNG: stage throughputs, ratios, latency, scaling."""

from __future__ import annotations

from pathlib import Path


def chart(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(f"kraftlake bench ({report['machine']}): {report['events']:,} events, "
                 f"{report['partitions']:,} partitions, {report['shards']} shards"
                 + (" [--quick]" if report.get("quick") else ""))

    ax = axes[0][0]
    stages = report["stages"]
    names = [n for n in ("decode", "ingest into Delta", "raw Delta scan (Spark)", "core replay",
                         "Spark replay (AvailableNow)") if n in stages]
    values = [stages[n]["records_per_s"] for n in names]
    bars = ax.barh(names, values, color=["#999999", "#999999", "#4c72b0", "#55a868", "#c44e52"][:len(names)])
    ax.bar_label(bars, labels=[f"{v:,}" for v in values], padding=3, fontsize=8)
    ax.set_xlabel("records/s")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:,.0f}k"))
    ax.set_title("throughput, one log, one run")
    ax.invert_yaxis()
    ax.margins(x=0.25)

    ax = axes[0][1]
    latency = report.get("latency") or {}
    per_batch = latency.get("per_batch") or []
    if per_batch:
        xs = range(len(per_batch))
        ax.plot(xs, [b["trigger_ms"] for b in per_batch], marker=".", label="triggerExecution")
        ax.plot(xs, [b["add_batch_ms"] for b in per_batch], marker=".", label="addBatch")
        for key, style in (("p50", ":"), ("p99", "--")):
            value = latency["trigger_execution_ms"][key]
            if value is not None:
                ax.axhline(value, linestyle=style, color="gray", label=f"{key} {value:,.0f} ms")
        ax.axhline(1000, color="red", linewidth=0.8, label="target p99 1 s")
        ax.legend(fontsize=8)
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("ms")
    ax.set_title(f"continuous mode at {latency.get('rate_events_per_s', 0):,} events/s")

    ax = axes[1][0]
    rows = report["scaling"]["partitions"]
    fits = report["scaling"]["fits"]
    xs = [r["partitions"] for r in rows]
    ax.loglog(xs, [r["replay_s"] for r in rows], marker="o",
              label=f"core replay s (slope {fits['replay_time_vs_partitions']['loglog_slope']})")
    ax.loglog(xs, [r["state_bytes"] / 1e6 for r in rows], marker="s",
              label=f"state MB (slope {fits['state_bytes_vs_partitions']['loglog_slope']})")
    ax.loglog(xs, [r["failover_decide_s"] for r in rows], marker="^",
              label=f"failover decide s (slope {fits['failover_time_vs_partitions']['loglog_slope']})")
    ax.axhline(0.5, color="red", linewidth=0.8, label="failover target 0.5 s")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("partitions")
    ax.set_title("scaling with partitions (core)")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    rows = report["scaling"]["events"]
    xs = [r["events"] for r in rows]
    ax.loglog(xs, [r["replay_s"] for r in rows], marker="o",
              label=f"core replay s (slope {fits['replay_time_vs_events']['loglog_slope']})")
    ax2 = ax.twinx()
    ax2.semilogx(xs, [r["records_per_s"] for r in rows], marker="s", color="#55a868", label="records/s")
    ax2.set_ylim(0, 1.15 * max(r["records_per_s"] for r in rows))
    ax2.set_ylabel("records/s")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("events")
    ax.set_title("scaling with events (core)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper left")

    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
