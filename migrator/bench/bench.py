#!/usr/bin/env python3
"""`migrator bench`: Ferry's downtime against the baselines, in one
interleaved run on this machine's testbed (two hosts as network namespaces),
with results.json (p50/p99 and ratios) and plots. migrator's `bench`
subcommand checks the options and runs this; it can also be run directly.

Workload memload (a bare process tree that owns a known memory pattern):
  * downtime at each size: Ferry post-copy, stop-and-copy with CRIU, CRIU's
    own lazy dump;
  * the latency of each first access to a page after the resume, every page
    touched once in random order, as a CDF: Ferry per fabric, and CRIU's
    lazy-pages daemon from local images.
Repetitions are interleaved (run 1 of every method and size, then run 2...),
so slow phases of a shared machine hit every contender alike. Nothing here
asserts anything about time: it measures and reports.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

import containers  # noqa: E402
import methods  # noqa: E402
import redis  # noqa: E402
import results  # noqa: E402
import slow_logs  # noqa: E402
from benchlib import one_bench_at_a_time, sh, testbed  # noqa: E402
from progress import Progress  # noqa: E402


def parse_size(text):
    """256M, 1G, 4096 (MiB) -> MiB."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    if t.endswith("G"):
        mult, t = 1024, t[:-1]
    elif t.endswith("M"):
        t = t[:-1]
    mib = int(t) * mult
    if mib < 16 or mib > 64 * 1024:
        raise argparse.ArgumentTypeError(f"size {text}: between 16M and 64G")
    return mib


def machine():
    def first(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception as e:  # reported, not fatal
            return f"unknown ({e})"
    mem = next((line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal")), "?")
    return {"kernel": platform.release(), "cpus": os.cpu_count(), "mem_kib": int(mem),
            "criu": first(["criu", "--version"]).splitlines()[0] if first(["criu", "--version"]) else "?",
            "hw_breakpoints": "trap" if subprocess.run(["criu", "check", "--feature", "breakpoints"],
                                                       capture_output=True).returncode == 0 else "do not trap",
            # a container's restore waits ~10-15 ms for an RCU grace period without it (README, Tuning)
            "cgroup_favordynmods": any("favordynmods" in line.split(" - ", 1)[-1].split()[-1].split(",")
                                       for line in open("/proc/self/mountinfo")
                                       if " - cgroup" in line)}


METHODS = ("ferry", "stop_and_copy", "criu_lazy_dump")
# For containers "ferry" is Ferry moving the container; "bare_process" is
# Ferry moving the same memory as a bare process tree.
CONTAINER_METHODS = {"podman": ("ferry", "bare_process", "podman_checkpoint"),
                     "docker": ("ferry", "bare_process", "docker_checkpoint")}
# For Redis every method moves the container back and forth; "ferry_idle" is
# Ferry with no client, "ferry", "ferry_precopy" (Ferry with --precopy) and
# "podman_checkpoint" run under a client.
REDIS_METHODS = {"podman": ("ferry_idle", "ferry", "ferry_precopy", "podman_checkpoint"),
                 "docker": ("ferry_idle", "ferry", "ferry_precopy")}


def plan(a):
    """The measurements, in the order they run."""
    items = []
    # Goal 3 sets Ferry's moves against the bare link, measured in the same
    # run: once per repetition and size, just before that size's moves, so
    # both find the guest's memory in the same state. Per size, since the
    # link into fresh memory is not one figure on a VM: here 0.74 GB/s at
    # 1 GiB but 0.33 at 4 GiB (methods.raw_link says why).
    raw_link = (a.raw_link == "on" and a.workload in ("memload", "redis")
                and any(m in ("ferry", "ferry_idle") for m in a.methods))
    # Warm-up runs first, one per contender at the smallest size, kept in
    # results.json apart from the figures: the first move after the testbed
    # or an image comes up pays for cold caches (a podman container's first
    # run was the outlier in every bench on one machine: 190 ms against 74-88).
    for run in range(a.warmup):
        for method in a.methods:
            items.append(("warmup", method, a.sizes[0], run))
    for run in range(a.runs):
        for mib in a.sizes:
            if raw_link:
                items.append(("raw", f"raw {a.fabric} link a -> b", mib, run))
            for method in a.methods:
                items.append(("downtime", method, mib, run))
        for fabric in a.fault_fabrics:
            for threads in a.fault_threads:
                items.append(("faults", fault_name(fabric, threads), a.fault_mib, run))
                if a.fault_precopy:
                    items.append(("faults", fault_name(fabric, threads, True), a.fault_mib, run))
        if a.fault_fabrics:
            items.append(("faults", "CRIU lazy-pages, local images", a.fault_mib, run))
    if a.workload == "redis":
        # Podman's own restore takes the container's address from podman's
        # record, which for a copy Ferry moved names the copy's first
        # address, not the one it serves on (engines/README.md): the
        # baseline's runs go first, on the container podman started.
        items.sort(key=lambda i: i[1] != "podman_checkpoint")
    return items


def fault_name(fabric, threads, precopy=False):
    return f"Ferry over {fabric}" + (f", {threads} threads" if threads > 1 else "") + (", pre-copy" if precopy else "")


def measure(kind, name, mib, ctr=None, fabric="tcp"):
    if kind == "warmup":
        kind = "downtime"
    if kind == "raw":
        # The Redis lab's testbed has a name of its own.
        in_lab = isinstance(ctr, redis.RedisBench)
        return methods.raw_link(mib, ctr.lab.env if in_lab else methods.ENV, fabric=fabric, fill_source=not in_lab)
    if isinstance(ctr, redis.RedisBench):
        return {"ferry_idle": ctr.ferry_idle, "ferry": ctr.ferry, "ferry_precopy": ctr.ferry_precopy,
                "podman_checkpoint": ctr.podman_checkpoint}[name](mib)
    if ctr and kind == "downtime":
        return {"ferry": ctr.ferry, "bare_process": ctr.bare, "podman_checkpoint": ctr.podman_checkpoint,
                "docker_checkpoint": ctr.docker_checkpoint}[name](mib)
    if kind == "downtime":
        if name == "ferry":
            return methods.ferry(mib, fabric=fabric)
        return {"stop_and_copy": methods.stop_and_copy, "criu_lazy_dump": methods.criu_lazy_dump}[name](mib)
    if name.startswith("Ferry over "):
        fabric, *rest = name.removeprefix("Ferry over ").split(", ")
        threads = next((int(r.split()[0]) for r in rest if r.endswith(" threads")), 1)
        return methods.ferry(mib, fabric=fabric, touch=True, touch_threads=threads, precopy="pre-copy" in rest)
    return methods.criu_lazy_local(mib)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="migrator bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="memload", choices=["memload", "container", "redis"],
                    help="memload: a bare process tree; container: memload in a container; redis: Redis in a "
                    "container with known keys, under a client (one size, default 1G)")
    ap.add_argument("--engine", default="podman", choices=["podman", "docker"],
                    help="the container engine (--workload container)")
    ap.add_argument("--network", default="",
                    help="the container's network (--workload container): the engine's default if empty; "
                         "'ferry' is the testbed's container network (a macvlan segment), as a real "
                         "container's own address would be")
    ap.add_argument("--sizes", default=None, help="memory sizes, e.g. 256M,1G,4G (default; redis: 1G)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions of each measurement")
    ap.add_argument("--warmup", type=int, default=1,
                    help="unrecorded runs of each contender before the measured ones (0: none)")
    ap.add_argument("--methods", default=None,
                    help="the downtime contenders, comma-separated (default all): memload: " + ", ".join(METHODS)
                    + "; container: " + ", ".join(CONTAINER_METHODS["podman"]))
    ap.add_argument("--fabric", default="tcp", choices=["tcp", "shm"],
                    help="the fabric of Ferry's moves (memload, redis) and of the bare link set against them")
    ap.add_argument("--raw-link", default="on", choices=["on", "off"],
                    help="measure the bare link before each size's Ferry moves (goal 3's yardstick); off "
                         "leaves the moves without it: on a VM its gigabytes into fresh memory can slow "
                         "the moves right after")
    ap.add_argument("--fault-precopy", action="store_true",
                    help="also measure each fault run's fabric and threads with Ferry's --precopy (memload only "
                         "reads its memory after filling it: every page is staged and valid)")
    ap.add_argument("--fault-fabrics", default="tcp,shm",
                    help="fabrics for the fault-latency CDF (empty: none)")
    ap.add_argument("--fault-threads", default="1,4",
                    help="threads touching the pages in the fault-latency runs, comma-separated")
    ap.add_argument("--fault-size", default=None, help="memory of the fault-latency runs (default: smallest size)")
    ap.add_argument("--out", default=None, help="results directory (default ./ferry-bench-DATE)")
    ap.add_argument("--slow-logs", type=float, default=1.5, metavar="FACTOR",
                    help="keep CRIU's and lazy-pages' logs of the Ferry runs whose downtime exceeds FACTOR x "
                         "the median of their method and size, in OUT/slow-runs/<migration id> (memload and "
                         "container workloads; 0: keep none)")
    a = ap.parse_args(argv)
    a.sizes = a.sizes or ("1G" if a.workload == "redis" else "256M,1G,4G")
    a.sizes = sorted({parse_size(s) for s in a.sizes.split(",") if s})
    if a.workload == "redis" and len(a.sizes) != 1:
        ap.error("--workload redis takes one size (its keys are loaded once)")
    if not a.sizes:
        ap.error("--sizes names no size")
    if a.runs < 1 or a.runs > 100:
        ap.error("--runs: 1 to 100")
    if a.warmup < 0 or a.warmup > 10:
        ap.error("--warmup: 0 to 10")
    a.fault_fabrics = [f for f in a.fault_fabrics.split(",") if f]
    a.fault_threads = sorted({int(t) for t in a.fault_threads.split(",") if t})
    if not a.fault_threads or a.fault_threads[0] < 1 or a.fault_threads[-1] > 64:
        ap.error("--fault-threads: 1 to 64")
    known = {"memload": METHODS, "container": CONTAINER_METHODS[a.engine],
             "redis": REDIS_METHODS[a.engine]}[a.workload]
    a.methods = [m for m in (a.methods or ",".join(known)).split(",") if m]
    for m in a.methods:
        if m not in known:
            ap.error(f"--methods: {m} does not apply to this workload (known: {', '.join(known)})")
    if a.workload == "container" and a.fabric != "tcp":
        ap.error("--fabric: --workload container moves over tcp only")
    if a.workload != "memload":
        a.fault_fabrics = []  # the fault CDF is measured on memload
    a.fault_mib = parse_size(a.fault_size) if a.fault_size else a.sizes[0]
    a.out = a.out or os.path.abspath(datetime.datetime.now().strftime("ferry-bench-%Y%m%d-%H%M%S"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("migrator bench: matplotlib is missing; install it with examples/setup.sh --bench", file=sys.stderr)
        return 2
    if a.slow_logs < 0:
        ap.error("--slow-logs: a factor >= 0")
    os.makedirs(a.out, exist_ok=True)
    methods.SLOW_LOGS = slow_logs.SlowLogs(a.out, a.slow_logs)

    lock = one_bench_at_a_time("migrator bench")  # held while this process lives
    if lock is None:
        return 2
    items = plan(a)
    raw = {"downtime": {}, "faults": {}, "raw_link": [], "warmup": {}}
    progress = Progress(len(items))
    failures = 0
    testbed("down", check=False)
    ctr = None
    try:
        if a.workload == "redis":
            progress.note(f"[bench] starting the testbed (a and b with {a.engine}, client host c), building a Redis "
                          f"image and loading {a.sizes[0]} MiB of keys")
            ctr = redis.RedisBench(a.engine, a.sizes[0], a.fabric)
            ctr.prepare()
        elif a.workload == "container":
            progress.note(f"[bench] starting the testbed (hosts a and b, each with its own {a.engine})")
            testbed("up", "--engines", timeout=600)
            ctr = containers.ContainerBench(a.engine, a.network)
            progress.note("[bench] building a Debian image (debootstrap) for both hosts")
            ctr.prepare()
        else:
            progress.note("[bench] starting the testbed (hosts a and b)")
            testbed("up")
        for kind, name, mib, run in items:
            progress.step(f"{name} {mib} MiB, " + (f"warm-up {run + 1}/{a.warmup}" if kind == "warmup"
                                                   else f"run {run + 1}/{a.runs}"))
            try:
                r = measure(kind, name, mib, ctr, a.fabric)
            except Exception as e:  # one failed run is reported, the rest go on
                failures += 1
                r = {"error": str(e)[-1000:]}
                progress.note(f"[bench] {name} at {mib} MiB, run {run + 1} FAILED: {r['error'][-300:]}")
            if kind == "downtime":
                raw["downtime"].setdefault(name, {}).setdefault(str(mib), []).append(r)
            elif kind == "raw":
                raw["raw_link"].append(r)
            elif kind == "warmup":
                raw["warmup"].setdefault(name, []).append(r)  # not in the figures
            else:
                raw["faults"].setdefault(name, []).append(r)
            progress.advance()
    finally:
        testbed("down", check=False)
        if ctr:
            ctr.cleanup()
        progress.finish()

    kept = methods.SLOW_LOGS.prune(raw["downtime"], raw["warmup"])
    if kept:
        progress.note(f"[bench] the logs of {kept} run(s) slower than {a.slow_logs:g} x their median "
                      f"are in {methods.SLOW_LOGS.root}")
    summary = results.summarize(raw)
    if isinstance(ctr, redis.RedisBench):
        summary["redis"] = results.redis_summary(raw, summary.get("raw_link_gbytes_per_s"))
        summary["redis"]["timeline"] = ctr.last_timeline
    doc = {"command": ["migrator", "bench", *(argv if argv is not None else sys.argv[1:])],
           "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
           "workload": a.workload, "engine": a.engine if a.workload != "memload" else None, "fabric": a.fabric,
           "network": (a.network or "engine default") if a.workload == "container" else None,
           "sizes_mib": a.sizes, "runs": a.runs, "methods": a.methods, "fault_mib": a.fault_mib,
           "failed_runs": failures, "summary": summary, "raw": raw}
    # The figures first: a plot that fails (every run of a method failed,
    # say) must not take them with it.
    results_path = os.path.join(a.out, "results.json")
    doc["plots"] = []
    with open(results_path, "w") as f:
        json.dump(doc, f, indent=1)
    import plots
    try:
        doc["plots"] = plots.draw_all(a.out, summary)
    except Exception as e:  # noqa: BLE001 (any plotting error)
        doc["plots_error"] = f"{type(e).__name__}: {e}"
        print(f"migrator bench: the plots failed ({doc['plots_error']}); the figures are in results.json",
              file=sys.stderr)
    with open(results_path, "w") as f:
        json.dump(doc, f, indent=1)
    results.print_table(summary, sys.stdout)
    print(f"\nresults: {os.path.join(a.out, 'results.json')}; plots: " + ", ".join(doc["plots"]))
    if failures:
        print(f"{failures} run(s) failed; see results.json", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
