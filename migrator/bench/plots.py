"""The plots of a `migrator bench` run, drawn with Debian's matplotlib from
results.json alone (so they can be redrawn: plots.py DIR)."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display on a server
import matplotlib.pyplot as plt  # noqa: E402

# Run on its own (plots.py DIR), results.py still needs examples/bench.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "bench"))
from results import BASELINE_NAMES  # noqa: E402

PARTS = ("freeze", "dump", "images", "restore", "resume")


def finish(fig, ax, path, title, xlabel, ylabel, grid="both"):
    """Labels, grid, legend, then the file; every plot ends this way."""
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if grid == "y":
        ax.grid(True, axis="y", alpha=0.3)
    else:
        ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def downtime_vs_size(summary, path):
    # A method whose every run failed has no figure to draw (and a log axis
    # takes no zero).
    measured = {m: by for m, by in summary["downtime_ms"].items()
                if by and all(by[s]["p50"] > 0 for s in by)}
    if not measured:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, by in measured.items():
        sizes = sorted(by, key=int)
        x = [int(s) for s in sizes]
        p50 = [by[s]["p50"] for s in sizes]
        p99 = [by[s]["p99"] for s in sizes]
        line, = ax.plot(x, p50, marker="o", label=BASELINE_NAMES.get(method, method))
        ax.fill_between(x, p50, p99, alpha=0.15, color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    finish(fig, ax, path, "Downtime against memory size", "workload memory, MiB",
           "downtime, ms (p50; band to p99)")
    return True


def breakdown(summary, path):
    by = summary["breakdown_p50_ms"].get("ferry", {})
    if not by:
        return False
    sizes = sorted(by, key=int)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bottom = [0.0] * len(sizes)
    labels = [f"{s} MiB" for s in sizes]
    for part in PARTS:
        vals = [by[s].get(part, 0.0) for s in sizes]
        ax.bar(labels, vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    finish(fig, ax, path, "Ferry's downtime, part by part", None, "ms (p50 of each part)", grid="y")
    return True


def fault_cdf(summary, path):
    if not summary["faults"]:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, f in summary["faults"].items():
        ax.plot([v / 1e3 for v in f["cdf_ns"]], f["cdf_quantiles"], label=name)
    ax.set_xscale("log")
    finish(fig, ax, path, "Fault latency CDF", "latency of the first access to a page after resume, us",
           "fraction of accesses")
    return True


def redis_timeline(summary, path):
    t = summary.get("redis", {}).get("timeline", {})
    pts = t.get("points_ms_us")
    if not pts:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=2)
    ax.axvspan(-t["gap_ms"], 0, color="red", alpha=0.15, label=f"no replies ({t['gap_ms']:.0f} ms)")
    ax.set_yscale("log")
    finish(fig, ax, path, "Redis under a client: replies around Ferry's switchover",
           "ms from the first reply after the switchover", "reply latency, us")
    return True


def draw_all(out_dir, summary):
    drawn = []
    if downtime_vs_size(summary, os.path.join(out_dir, "downtime_vs_size.png")):
        drawn.append("downtime_vs_size.png")
    if breakdown(summary, os.path.join(out_dir, "downtime_breakdown.png")):
        drawn.append("downtime_breakdown.png")
    if fault_cdf(summary, os.path.join(out_dir, "fault_cdf.png")):
        drawn.append("fault_cdf.png")
    if redis_timeline(summary, os.path.join(out_dir, "redis_timeline.png")):
        drawn.append("redis_timeline.png")
    return drawn


if __name__ == "__main__":
    d = sys.argv[1]
    print("\n".join(draw_all(d, json.load(open(os.path.join(d, "results.json")))["summary"])))
