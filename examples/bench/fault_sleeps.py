#!/usr/bin/env python3
"""Where a faulting thread's wait goes, from a scheduler trace of a fault
bench (lazy-pages names its threads lp-handlerN and lp-backgroundN):

  perf record -k CLOCK_MONOTONIC -a -e sched:sched_switch -e sched:sched_wakeup \\
      -o sched.data -- build/migrator/migrator bench --sizes 256M --runs 1 \\
      --warmup 0 --methods ferry --fault-fabrics shm --fault-threads 1 --out DIR
  examples/bench/fault_sleeps.py sched.data [--comm memload] [--timeline N]

Each sleep of the touching thread that a Ferry handler served (it blocks in
the fault, a handler's UFFDIO_COPY wakes it) is split in three: from the
fault until a handler runs, from then until the thread is woken, and from
the wake until the thread runs. Per band of sleep length (p40-p60, p90-p98,
the top 2%): the mean of each part, how often the handler ran on the
faulting thread's CPU, and what each CPU did meanwhile (busy ms by task,
idle ms). --timeline N prints the context switches around N median
sleeps. CRIU's own lazy-pages runs in the same bench have no lp-handler
and are left out."""
import argparse
import collections
import sys

from downtime_sched import SWITCH, WAKEUP, perf_script


def events(lines):
    """('switch', t, cpu, prev, prev_pid, prev_state, next, next_pid, line) or
    ('wakeup', t, cpu, comm, pid, target_cpu, line), in time order."""
    for line in lines:
        m = SWITCH.search(line)
        if m:
            yield ("switch", float(m.group(2)), int(m.group(1)), m.group(3), int(m.group(4)),
                   m.group(5), m.group(6), int(m.group(7)), line)
            continue
        m = WAKEUP.search(line)
        if m:
            yield ("wakeup", float(m.group(2)), int(m.group(1)), m.group(3), int(m.group(4)),
                   int(m.group(5)), line)


def split_sleeps(lines, comm):
    """The sleeps of `comm` that an lp-handler thread served, of the threads
    that sleep so more than a tenth as often as the busiest, each a dict:
    t0 (switched out in the fault), cpu, handler and handler_cpu (the first
    handler to run after t0), woken, target, waker, t1 (running again),
    run_cpu. Also each CPU's busy spans [(start, end, task)] and the kept
    (time, line) pairs, in time order."""
    sleeping = {}   # pid -> the sleep in progress
    sleeps = []
    running = {}    # cpu -> task now on it
    busy = collections.defaultdict(list)
    since = {}      # cpu -> when its task started
    kept = []
    for ev in events(lines):
        if ev[0] == "switch":
            _, t, cpu, prev, prev_pid, state, nxt, next_pid, line = ev
            kept.append((t, line.rstrip()))
            if cpu in since:
                busy[cpu].append((since[cpu], t, prev))
            since[cpu], running[cpu] = t, nxt
            if prev == comm and state.startswith(("S", "D")):
                sleeping[prev_pid] = {"t0": t, "cpu": cpu, "handler": None, "pid": prev_pid}
                # A handler already running elsewhere (polling) starts at once.
                for c, task in running.items():
                    if task.startswith("lp-handler"):
                        sleeping[prev_pid].update(handler=t, handler_cpu=c)
                        break
            if nxt.startswith("lp-handler"):
                for s in sleeping.values():
                    if s["handler"] is None:
                        s["handler"], s["handler_cpu"] = t, cpu
            if nxt == comm and next_pid in sleeping:
                s = sleeping.pop(next_pid)
                if s["handler"] is not None and "woken" in s and s["handler"] <= s["woken"]:
                    s["t1"], s["run_cpu"] = t, cpu
                    sleeps.append(s)
        else:
            _, t, cpu, task, pid, target, line = ev
            kept.append((t, line.rstrip()))
            s = sleeping.get(pid)
            if s is not None and "woken" not in s:
                s["woken"], s["waker"], s["target"] = t, running.get(cpu, "?"), target
    # The touching threads fault thousands of times; a thread of the same
    # name that only sleeps now and then (a main thread waiting) is not one.
    per_thread = collections.Counter(s["pid"] for s in sleeps)
    if per_thread:
        most = max(per_thread.values())
        sleeps = [s for s in sleeps if per_thread[s["pid"]] * 10 > most]
    return sleeps, busy, kept


def cpu_use(part, busy):
    """ms each task (or "idle") held the faulting thread's CPU, and each
    other CPU, inside the sleeps of `part` (sorted by t0)."""
    use = collections.Counter()
    for cpu, spans in busy.items():
        j = 0
        for s in part:
            while j < len(spans) and spans[j][1] <= s["t0"]:
                j += 1
            k = j
            while k < len(spans) and spans[k][0] < s["t1"]:
                lo, hi, task = spans[k]
                d = min(hi, s["t1"]) - max(lo, s["t0"])
                if d > 0:
                    where = "the fault's CPU" if cpu == s["cpu"] else f"CPU {cpu}"
                    use[(where, "idle" if task.startswith("swapper") else task)] += d * 1e3
                k += 1
    return use


BANDS = ((0.4, 0.6, "p40-p60"), (0.9, 0.98, "p90-p98"), (0.98, 1.0, "top 2%"))


def bands(sleeps, busy):
    """Per band of sleep length: its name, the sleeps in it, the mean µs
    until a handler runs, until woken and until running, the share with
    the handler on the fault's CPU and woken onto another CPU, and the
    share of the band's time each (where, task) took."""
    sleeps = sorted(sleeps, key=lambda s: s["t1"] - s["t0"])
    n = len(sleeps)
    out = []
    for lo, hi, name in BANDS:
        part = sleeps[int(n * lo):int(n * hi)]
        if not part:
            continue
        mean = lambda f: sum(f(s) for s in part) / len(part) * 1e6
        total = sum((s["t1"] - s["t0"]) * 1e3 for s in part)
        use = cpu_use(sorted(part, key=lambda s: s["t0"]), busy)
        out.append({
            "band": name, "sleeps": len(part),
            "to_handler_us": mean(lambda s: s["handler"] - s["t0"]),
            "to_wake_us": mean(lambda s: s["woken"] - s["handler"]),
            "to_run_us": mean(lambda s: s["t1"] - s["woken"]),
            "handler_on_fault_cpu": sum(s["handler_cpu"] == s["cpu"] for s in part) / len(part),
            "woken_elsewhere": sum(s["target"] != s["cpu"] for s in part) / len(part),
            "share": {k: ms / total for k, ms in use.items()},
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("perf_data")
    ap.add_argument("--comm", default="memload", help="the faulting threads' name (memload)")
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="print the switches around N median sleeps")
    a = ap.parse_args()
    sleeps, busy, kept = split_sleeps(perf_script(a.perf_data), a.comm)
    if not sleeps:
        sys.exit(f"no sleep of {a.comm} served by an lp-handler thread in the trace")
    sleeps.sort(key=lambda s: s["t1"] - s["t0"])
    n = len(sleeps)
    q = lambda f: (sleeps[min(n - 1, int(n * f))]["t1"] - sleeps[min(n - 1, int(n * f))]["t0"]) * 1e6
    print(f"{n} sleeps of {a.comm} served by a handler: p50 {q(0.5):.1f}, p90 {q(0.9):.1f}, "
          f"p99 {q(0.99):.1f} us")
    for b in bands(sleeps, busy):
        print(f"{b['band']} ({b['sleeps']} sleeps): until a handler runs {b['to_handler_us']:.1f}, "
              f"until woken {b['to_wake_us']:.1f}, until running {b['to_run_us']:.1f} us; "
              f"handler on the fault's CPU {b['handler_on_fault_cpu']:.0%}, "
              f"woken onto another CPU {b['woken_elsewhere']:.0%}")
        for where in sorted({w for w, _ in b["share"]}, key=lambda w: (not w.startswith("the"), w)):
            top = sorted(((x, task) for (w, task), x in b["share"].items() if w == where), reverse=True)[:4]
            print(f"    {where}, share of the sleeps' time: " + ", ".join(f"{task} {x:.0%}" for x, task in top))
    if a.timeline:
        mid = sleeps[n // 2 - a.timeline // 2:n // 2 + (a.timeline + 1) // 2]
        for s in sorted(mid, key=lambda s: s["t0"]):
            print(f"\n-- a sleep of {(s['t1'] - s['t0']) * 1e6:.1f} us")
            for t, line in kept:
                if s["t0"] - 5e-6 <= t <= s["t1"] + 1e-6:
                    print(line)


if __name__ == "__main__":
    main()
