#!/usr/bin/env python3
"""What encrypting page data costs a migration (not a test: it asserts
nothing about time).

Page channels are TLS 1.3 (AES-GCM) by default; --insecure-plaintext-pages
leaves TLS after the authenticated handshake. In one run, with the
repetitions interleaved, this migrates a memload tree (a parent with
threads and a forked child) from host a to host b of the testbed both ways,
and reports the downtime and the post-copy time (resume to the last page)
as p50/p99, with TLS's ratio to plaintext. The target: post-copy within
1.2x plaintext, downtime unchanged beyond noise.

    examples/bench/run-tls.sh [--sizes 1024] [--runs 5] [--json out.json]
"""
import argparse
import json
import sys

from benchlib import migrate_memload, one_bench_at_a_time, p50_p99 as summary, testbed


def migrate(mib, plaintext):
    res = migrate_memload(mib, *(["--insecure-plaintext-pages"] if plaintext else []))
    return {"downtime_ms": res["downtime_ms"], "post_copy_ms": res["phases_ms"]["post_copy"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024", help="workload sizes, MiB")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    modes = ["plaintext", "tls"]
    lock = one_bench_at_a_time("tls.py") or sys.exit(2)  # noqa: F841  (held while this process lives)
    testbed("down", check=False)
    testbed("up")
    results = {}
    try:
        for mib in sizes:
            runs = {m: [] for m in modes}
            for i in range(a.runs):
                for m in modes:  # interleaved, so drift hits both alike
                    r = migrate(mib, m == "plaintext")
                    runs[m].append(r)
                    print(f"  {mib} MiB run {i + 1} {m:9s} downtime {r['downtime_ms']:7.1f} ms "
                          f"post-copy {r['post_copy_ms']:8.1f} ms", file=sys.stderr)
            res = {m: {k: summary(runs[m], k) for k in ("downtime_ms", "post_copy_ms")} for m in modes}
            res["ratio_tls_to_plaintext"] = {
                k: {p: res["tls"][k][p] / res["plaintext"][k][p] if res["plaintext"][k][p] else float("nan")
                    for p in ("p50", "p99")} for k in ("downtime_ms", "post_copy_ms")}
            results[mib] = res
    finally:
        testbed("down", check=False)

    for mib, res in results.items():
        print(f"\n{mib} MiB, {a.runs} runs each")
        print(f"  {'':9s} {'downtime p50':>13s} {'p99':>8s} {'post-copy p50':>14s} {'p99':>9s}")
        for m in modes:
            d = res[m]
            print(f"  {m:9s} {d['downtime_ms']['p50']:11.1f} ms {d['downtime_ms']['p99']:6.1f} ms "
                  f"{d['post_copy_ms']['p50']:12.1f} ms {d['post_copy_ms']['p99']:7.1f} ms")
        r = res["ratio_tls_to_plaintext"]
        print(f"  tls / plaintext: downtime p50 {r['downtime_ms']['p50']:.3f} p99 {r['downtime_ms']['p99']:.3f}; "
              f"post-copy p50 {r['post_copy_ms']['p50']:.3f} p99 {r['post_copy_ms']['p99']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": a.runs, "sizes": results}, f, indent=1)


if __name__ == "__main__":
    main()
