#!/usr/bin/env python3
"""What the machine's CPUs did inside each Ferry move's downtime, from a
perf profile of a `migrator bench` run:

  perf record -F 8000 -a -g -k mono -o perf.data -- \\
      build/migrator/migrator bench --out DIR ...
  examples/bench/downtime_profile.py perf.data DIR/results.json [--frame SYMBOL]...

Each Ferry run's report gives the freeze on CLOCK_MONOTONIC
(freeze_monotonic_ns) and the downtime; `-k mono` puts perf's samples on
the same clock. Printed per move and in all: the CPU time per command
inside the window (samples / frequency; "swapper" is idle), and the CPU
time of samples whose call chain holds any of the --frame symbols (default:
ext4's inode allocator and any ext4 or jbd2 function), per command."""
import argparse
import collections
import json
import re
import subprocess
import sys

HEADER = re.compile(r"^\s*(\S.*?)\s+(\d+)\s+([\d.]+):\s*$")


def windows(results):
    out = []
    for name, sizes in results["raw"]["downtime"].items():
        for runs in sizes.values():
            for r in runs:
                if "freeze_monotonic_ns" in r and "downtime_ms" in r:
                    t0 = r["freeze_monotonic_ns"] / 1e9
                    out.append((t0, t0 + r["downtime_ms"] / 1e3, name, r["downtime_ms"]))
    return sorted(out)


def samples(perf_data):
    """(time s, command, [frames]) per sample, from perf script."""
    p = subprocess.Popen(["perf", "script", "-F", "comm,tid,time,ip,sym", "-i", perf_data],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    cur = None
    for line in p.stdout:
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        m = HEADER.match(line.rstrip("\n"))
        if m and not line.startswith("\t"):
            if cur:
                yield cur
            cur = (float(m.group(3)), m.group(1).strip(), [])
        elif cur is not None:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                cur[2].append(parts[1].split("+")[0])
    if cur:
        yield cur
    p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("perf_data")
    ap.add_argument("results_json")
    ap.add_argument("--frequency", type=float, default=8000, help="perf record -F (samples per second per CPU)")
    ap.add_argument("--frame", action="append", default=None,
                    help="count samples whose call chain holds this symbol (prefix; repeatable)")
    a = ap.parse_args()
    frames = a.frame or ["__ext4_new_inode", "ext4_", "__ext4", "jbd2"]
    wins = windows(json.load(open(a.results_json)))
    if not wins:
        sys.exit("no run in the results has freeze_monotonic_ns (a migrator from before 2026-11-27?)")
    per_win = [(collections.Counter(), collections.Counter()) for _ in wins]
    for t, comm, chain in samples(a.perf_data):
        for i, (t0, t1, _, _) in enumerate(wins):
            if t0 <= t <= t1:
                per_win[i][0][comm] += 1
                if any(f.startswith(p) for f in chain for p in frames):
                    per_win[i][1][comm] += 1
                break
    ms = 1000.0 / a.frequency
    total, hits = collections.Counter(), collections.Counter()
    for (t0, t1, name, down), (by, hit) in zip(wins, per_win):
        total.update(by)
        hits.update(hit)
        print(f"{name}: downtime {down:.1f} ms; CPU ms by command: "
              + ", ".join(f"{c} {n * ms:.1f}" for c, n in by.most_common(8))
              + f"; in {'/'.join(frames)}: {sum(hit.values()) * ms:.1f}")
    n = len(wins)
    print(f"\nper move ({n} moves): CPU ms by command: "
          + ", ".join(f"{c} {v * ms / n:.1f}" for c, v in total.most_common(12)))
    print(f"per move, in {'/'.join(frames)}: {sum(hits.values()) * ms / n:.1f} ms ("
          + ", ".join(f"{c} {v * ms / n:.1f}" for c, v in hits.most_common(6)) + ")")


if __name__ == "__main__":
    main()
