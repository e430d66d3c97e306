#!/usr/bin/env python3
"""What CRIU's fallback for machines without working hardware breakpoints
costs in a migration's downtime (not a test: it asserts nothing about time).

compel stops the parasite (dump) and the restorer (restore) at their last
rt_sigreturn either with a debug-register breakpoint or, where breakpoints
do not trap, by stepping through syscalls (PTRACE_SYSCALL; CRIU_FAULT=130,
which Ferry's --no-hw-breakpoints asks for). In one run, with the
repetitions interleaved, this migrates a memload tree (a parent with
threads and a forked child) between the testbed's hosts both ways at each
size, and reports the downtime and CRIU's part of it (dump and restore) as
p50/p99 with the fallback's ratio to breakpoints.

Where breakpoints do not trap (CRIU's kerndat probe and Ferry's agree), only
the fallback can run: the report says so and gives no ratio.

    examples/bench/run-breakpoints.sh [--sizes 256,1024] [--runs 5] [--json out.json]
"""
import argparse
import json
import subprocess
import sys

from benchlib import migrate_memload, one_bench_at_a_time, p50_p99 as summary, testbed


def breakpoints_trap():
    return subprocess.run(["criu", "check", "--feature", "breakpoints"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def migrate(mib, fallback):
    res = migrate_memload(mib, *(["--no-hw-breakpoints"] if fallback else []))
    parts = res["downtime_breakdown_ms"]
    return {"downtime_ms": res["downtime_ms"], "dump_ms": parts["dump"],
            "restore_ms": parts["restore"], "method": res["criu_stop_method"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256,1024", help="workload sizes, MiB")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    both = breakpoints_trap()
    methods = ["breakpoints", "fallback"] if both else ["fallback"]
    lock = one_bench_at_a_time("breakpoints.py") or sys.exit(2)  # noqa: F841  (held while this process lives)
    testbed("down", check=False)
    testbed("up")
    results = {}
    try:
        for mib in sizes:
            runs = {m: [] for m in methods}
            for i in range(a.runs):
                for m in methods:  # interleaved, so drift hits both alike
                    r = migrate(mib, m == "fallback")
                    runs[m].append(r)
                    print(f"  {mib} MiB run {i + 1} {m:11s} downtime {r['downtime_ms']:7.1f} ms "
                          f"(dump {r['dump_ms']:.1f}, restore {r['restore_ms']:.1f}) [{r['method']}]",
                          file=sys.stderr)
            results[mib] = {m: {k: summary(runs[m], k) for k in ("downtime_ms", "dump_ms", "restore_ms")}
                            for m in methods}
            results[mib]["methods_reported"] = sorted({r["method"] for m in methods for r in runs[m]})
    finally:
        testbed("down", check=False)

    print(f"CRIU stops tasks at sigreturn: hardware breakpoints {'trap' if both else 'DO NOT trap'} here")
    for mib, res in results.items():
        print(f"\n{mib} MiB, {a.runs} runs each")
        print(f"  {'':11s} {'downtime p50':>13s} {'p99':>8s} {'dump p50':>9s} {'restore p50':>12s}")
        for m in methods:
            d = res[m]
            print(f"  {m:11s} {d['downtime_ms']['p50']:11.1f} ms {d['downtime_ms']['p99']:6.1f} ms "
                  f"{d['dump_ms']['p50']:7.1f} ms {d['restore_ms']['p50']:10.1f} ms")
        if both:
            f, h = res["fallback"], res["breakpoints"]
            for k in ("downtime_ms", "dump_ms", "restore_ms"):
                res.setdefault("ratio_fallback_to_breakpoints", {})[k] = {
                    p: f[k][p] / h[k][p] if h[k][p] else float("nan") for p in ("p50", "p99")}
            r = res["ratio_fallback_to_breakpoints"]
            print(f"  fallback / breakpoints: downtime p50 {r['downtime_ms']['p50']:.3f} "
                  f"p99 {r['downtime_ms']['p99']:.3f}; dump p50 {r['dump_ms']['p50']:.3f}; "
                  f"restore p50 {r['restore_ms']['p50']:.3f}")
        else:
            print("  no ratio: breakpoints cannot be measured where they do not trap")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"breakpoints_trap": both, "runs": a.runs, "sizes": results}, f, indent=1)


if __name__ == "__main__":
    main()
