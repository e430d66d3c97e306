#!/usr/bin/env python3
"""Ferry's fault-path benchmark (not a test: it asserts nothing about time).

In one run on this machine, for a workload that touches every page once right
after it resumes, in random and in sequential order, it reports the
per-access latency (p50, p99, p99.9, max) of:
  * Ferry over the shm fabric with no added latency, with lat=2us, and tcp;
  * CRIU's own lazy-pages daemon restoring from local images;
  * the userfaultfd floor (examples/bench/uffd_floor.cpp): same CPU, another
    CPU blocking, another CPU spinning;
with ratios to the same-CPU floor and to CRIU. Then the background transfer
throughput of each transport against that transport's raw throughput.

Run it through examples/bench/run-faults.sh, which installs and builds first.
"""
import argparse
import json
import os
import statistics
import sys

from benchlib import BUILD, one_bench_at_a_time, sh, testbed  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "migrator", "bench"))
from methods import criu_lazy_local, ferry, raw_shm, raw_tcp  # noqa: E402  (shared with migrator bench)

FLOOR = os.path.join(BUILD, "examples", "uffd-floor")


def floor_run(mode, order, pages):
    out = sh(FLOOR, mode, order, str(pages)).stdout
    kv = dict(x.split("=") for x in out.split()[1:])
    return {k: float(v) for k, v in kv.items() if k.endswith("_us")}


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def touch_us(runs):
    """Per-access latencies from memload's touch line, median over runs."""
    t = [{k: v / 1e3 for k, v in r["touch"].items() if k.endswith("_ns")} for r in runs]
    return {k.replace("_ns", "_us"): med(t, k) for k in ("p50_ns", "p99_ns", "p999_ns", "max_ns")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--orders", default="random,sequential")
    ap.add_argument("--fabrics", default="shm,shm:lat=2us,tcp")
    ap.add_argument("--json", help="also write the raw results here")
    a = ap.parse_args()
    # "shm:lat=2us,bw=100gbit,tcp": a model's options continue the fabric before.
    fabrics = []
    for tok in (t for t in a.fabrics.split(",") if t):
        if "=" in tok and ":" not in tok and fabrics:
            fabrics[-1] += "," + tok
        else:
            fabrics.append(tok)
    pages = a.mib * 256
    raw = {"latency": {}, "throughput": {}}

    lock = one_bench_at_a_time("faults.py") or sys.exit(2)  # noqa: F841  (held while this process lives)
    testbed("down", check=False)
    testbed("up")
    try:
        for order in a.orders.split(","):
            rows = {}
            for _ in range(a.runs):  # interleaved repetitions
                for f in fabrics:
                    rows.setdefault(f"Ferry {f}", []).append(ferry(a.mib, f, touch=True, order=order))
                rows.setdefault("CRIU lazy-pages, local images", []).append(criu_lazy_local(a.mib, order))
            floors = {m: [floor_run(m, order, pages) for _ in range(a.runs)]
                      for m in ("same-cpu", "cross-block", "cross-spin")}
            raw["latency"][order] = {"runs": rows, "floor": floors}
            report_latency(order, a.mib, rows, floors, fabrics)

        print(f"\n== background transfer throughput, {a.mib} MiB migrated with no faults, GB/s (median)")
        tput = {}
        for _ in range(a.runs):
            for f in fabrics:
                r = ferry(a.mib, f)
                tput.setdefault(f, []).append(r["pages_total"] * 4096 / (r["phases_ms"]["post_copy"] / 1e3) / 1e9)
        raws = {"tcp": statistics.median(raw_tcp(1024) for _ in range(a.runs))}
        for f in fabrics:
            if f.startswith("shm"):
                lat = 0
                if "lat=" in f:
                    v = f.split("lat=")[1].split(",")[0]
                    lat = float(v[:-2]) * {"ns": 1, "us": 1e3, "ms": 1e6}[v[-2:]]
                raws[f] = statistics.median(raw_shm(1024, lat) for _ in range(a.runs))
        for f in fabrics:
            got = statistics.median(tput[f])
            link = raws["tcp" if f == "tcp" else f]
            print(f"   {f:16} background {got:6.2f}   raw transport {link:6.2f}   ratio {got / link:5.2f}")
        raw["throughput"] = {"ferry": tput, "raw": raws}
    finally:
        testbed("down", check=False)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(raw, fh, indent=1)


def report_latency(order, mib, rows, floors, fabrics):
    print(f"\n== per-access latency, every page of {mib} MiB touched once in {order} order right after resume, us")
    print(f"   {'':32} {'p50':>8} {'p99':>8} {'p99.9':>8} {'max':>9}   faults (served p50/p99 us; fetch, install)")
    table = {}
    for name, runs in rows.items():
        t = touch_us(runs)
        table[name] = t
        extra = ""
        if name.startswith("Ferry"):
            extra = (f"   {med(runs, 'faults'):.0f} ({med(runs, 'fault_p50_us'):.0f}/"
                     f"{med(runs, 'fault_p99_us'):.0f}; fetch {med(runs, 'fault_fetch_p50_us'):.0f}/"
                     f"{med(runs, 'fault_fetch_p99_us'):.0f}, install {med(runs, 'fault_install_p50_us'):.1f}/"
                     f"{med(runs, 'fault_install_p99_us'):.0f})")
        print(f"   {name:32} {t['p50_us']:8.2f} {t['p99_us']:8.1f} {t['p999_us']:8.1f} {t['max_us']:9.1f}{extra}")
    for mode, runs in floors.items():
        f = {k: statistics.median(r[k] for r in runs) for k in ("p50_us", "p99_us", "p999_us", "max_us")}
        table[f"floor {mode}"] = f
        print(f"   {'uffd floor, ' + mode:32} {f['p50_us']:8.2f} {f['p99_us']:8.1f} {f['p999_us']:8.1f} "
              f"{f['max_us']:9.1f}")
    criu = table["CRIU lazy-pages, local images"]
    floor = table["floor same-cpu"]
    for fb in fabrics:
        t = table[f"Ferry {fb}"]
        print(f"   Ferry {fb:14}: p50 {t['p50_us'] / floor['p50_us']:.2f}x the same-CPU floor, "
              f"p99 {t['p99_us'] / floor['p99_us']:.2f}x; vs CRIU p50 {t['p50_us'] / criu['p50_us']:.2f}x, "
              f"p99 {t['p99_us'] / criu['p99_us']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
