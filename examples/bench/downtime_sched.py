#!/usr/bin/env python3
"""Who ran, who waited for a CPU, and who slept inside each Ferry move's
downtime, from a scheduler trace of a `migrator bench` run (or of one
`migrator migrate --json`, its report as the results):

  perf record -k CLOCK_MONOTONIC -a -e sched:sched_switch -e sched:sched_wakeup \\
      -o sched.data -- build/migrator/migrator bench --out DIR ...
  examples/bench/downtime_sched.py sched.data DIR/results.json [--timeline]

downtime_profile.py samples where the CPU time went; this shows what
sampling cannot: a task that was runnable but queued behind another on
its CPU while the other CPU idled (a task switched out in state R, until
it runs again), and how long each task slept. Per move, and summed over
the moves: on-CPU ms per task, queued ms per task, and idle ms per CPU.
--timeline prints each move's context switches (a few hundred lines)."""
import argparse
import collections
import json
import re
import subprocess
import sys

from downtime_profile import windows

SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:\s+prev_comm=(.*?) prev_pid=(\d+) "
                    r"prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")


WAKEUP = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_wakeup:\s+comm=(.*?) pid=(\d+) "
                    r"prio=\d+ target_cpu=(\d+)")


def perf_script(perf_data):
    """The trace's lines, as `perf script -F cpu,time,event,trace` prints them
    (what SWITCH and WAKEUP read)."""
    p = subprocess.Popen(["perf", "script", "-i", perf_data, "-F", "cpu,time,event,trace"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    yield from p.stdout
    if p.wait() != 0:
        sys.exit(f"perf script -i {perf_data} failed")


def switches(perf_data):
    """(time s, cpu, prev task, prev state, next task) per context switch."""
    for line in perf_script(perf_data):
        m = SWITCH.search(line)
        if m:
            yield (float(m.group(2)), int(m.group(1)), f"{m.group(3)}/{m.group(4)}", m.group(5),
                   f"{m.group(6)}/{m.group(7)}")


def overlap(a0, a1, b0, b1):
    return max(0.0, min(a1, b1) - max(a0, b0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("perf_data")
    ap.add_argument("results_json")
    ap.add_argument("--timeline", action="store_true", help="print each move's context switches")
    a = ap.parse_args()
    report = json.load(open(a.results_json))
    # One migrate report, or a bench's results.
    wins = windows(report if "raw" in report else {"raw": {"downtime": {"ferry": {"": [report]}}}})
    if not wins:
        sys.exit("no run in the results has freeze_monotonic_ns and downtime_ms")
    running = {}  # cpu -> (task, since)
    queued = {}   # task -> switched out runnable at
    on_cpu = [collections.Counter() for _ in wins]
    waits = [collections.Counter() for _ in wins]
    lines = [[] for _ in wins]
    for t, cpu, prev, state, nxt in switches(a.perf_data):
        if cpu in running:
            task, since = running[cpu]
            for i, (t0, t1, _, _) in enumerate(wins):
                on_cpu[i][task if not task.startswith("swapper") else f"idle cpu{cpu}"] += overlap(since, t, t0, t1)
        if nxt in queued:
            q = queued.pop(nxt)
            for i, (t0, t1, _, _) in enumerate(wins):
                waits[i][nxt] += overlap(q, t, t0, t1)
        if state.startswith("R") and not prev.startswith("swapper"):
            queued[prev] = t
        running[cpu] = (nxt, t)
        if a.timeline:
            for i, (t0, t1, _, _) in enumerate(wins):
                if t0 <= t <= t1:
                    lines[i].append(f"  {(t - t0) * 1e3:8.3f} ms cpu{cpu} {prev:>24} ({state}) -> {nxt}")
    total_cpu, total_wait = collections.Counter(), collections.Counter()
    for (t0, t1, name, down), cpu_by, wait_by, tl in zip(wins, on_cpu, waits, lines):
        total_cpu.update(cpu_by)
        total_wait.update(wait_by)
        print(f"{name}: downtime {down:.1f} ms; on CPU: "
              + ", ".join(f"{c} {v * 1e3:.2f}" for c, v in cpu_by.most_common(10))
              + "; queued while runnable: "
              + ", ".join(f"{c} {v * 1e3:.2f}" for c, v in wait_by.most_common(5) if v > 0))
        for line in tl:
            print(line)
    n = len(wins)
    print(f"\nper move ({n} moves), on CPU ms: "
          + ", ".join(f"{c} {v * 1e3 / n:.2f}" for c, v in total_cpu.most_common(14)))
    print("per move, queued while runnable ms: "
          + ", ".join(f"{c} {v * 1e3 / n:.2f}" for c, v in total_wait.most_common(8) if v > 0))


if __name__ == "__main__":
    main()
