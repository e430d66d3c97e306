#!/usr/bin/env python3
"""Ferry's post-copy benchmark (not a test: it asserts nothing about time).

In one run on this machine it measures, for each memory size:
  * downtime: Ferry's post-copy migration between the testbed's two hosts,
    against stop-and-copy (criu dump to tmpfs, copy, criu restore) and against
    CRIU's own lazy dump (freeze until its page server listens);
  * per-access latency of a workload that touches every page once, in random
    order, right after it resumes: Ferry against CRIU's lazy-pages daemon
    restoring from local images.
Every figure is reported as p50 and p99 over the repetitions (per-access
latencies over all accesses), with Ferry's ratio to each baseline.

Run it through examples/bench/run.sh, which installs and builds first.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (BUILD, ENV, MEMLOAD, REPO, TESTBED, Workload, parse_touch, pct, sh,  # noqa: F401
                      testbed)

# ---- Ferry ------------------------------------------------------------------

def ferry_run(mib, touch, fabric="tcp", order="random"):
    w = Workload("a", mib, ["--touch-after-freeze", "--touch-order", order] if touch else [])
    mark = len(w.lines())
    dest = None
    try:
        b = testbed("addr", "b").stdout.strip()
        r = testbed("exec", "a", "migrator", "migrate", "--pid", str(w.pid), "--to", b, "--fabric", fabric,
                    "--json", check=False)
        res = json.loads(r.stdout)
        if not res["ok"]:
            raise RuntimeError("ferry migration failed: " + res["error"])
        dest = res["destination_pid"]
        if touch:
            res["touch"] = parse_touch(w.wait_line("touch pages=", 120, mark))
        return res
    finally:
        w.stop(dest)


# ---- stop-and-copy with CRIU ------------------------------------------------

def stop_and_copy_run(mib):
    """criu dump to tmpfs on host a, copy the images, criu restore on host b."""
    w = Workload("a", mib)
    src = tempfile.mkdtemp(prefix="ferry-sc-src-", dir="/dev/shm")
    dst = tempfile.mkdtemp(prefix="ferry-sc-dst-", dir="/dev/shm")
    restored = None
    try:
        t0 = time.monotonic()
        testbed("exec", "a", "criu", "dump", "-t", str(w.pid), "-D", src, "-o", "dump.log")
        t1 = time.monotonic()
        shutil.rmtree(dst)
        shutil.copytree(src, dst)
        t2 = time.monotonic()
        pidfile = os.path.join(dst, "restored.pid")
        testbed("exec", "b", "criu", "restore", "-D", dst, "-d", "--pidfile", pidfile, "-o", "restore.log")
        t3 = time.monotonic()
        restored = int(open(pidfile).read())
        return {"downtime_ms": (t3 - t0) * 1e3, "dump_ms": (t1 - t0) * 1e3, "copy_ms": (t2 - t1) * 1e3,
                "restore_ms": (t3 - t2) * 1e3}
    finally:
        w.stop(restored)
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(dst, ignore_errors=True)


# ---- CRIU's own lazy dump and lazy-pages -------------------------------------

def criu_lazy_dump_run(mib):
    """Freeze until CRIU's lazy page server listens (what Ferry's dump phase
    is made of); then CLOSE it, which ends the dump."""
    w = Workload("a", mib)
    d = tempfile.mkdtemp(prefix="ferry-lazy-", dir="/dev/shm")
    try:
        rfd, wfd = os.pipe()
        port = 27000 + os.getpid() % 1000
        t0 = time.monotonic()
        p = subprocess.Popen([TESTBED, "exec", "a", "criu", "dump", "-t", str(w.pid), "-D", d, "--lazy-pages",
                              "--address", "127.0.0.1", "--port", str(port), "--status-fd", str(wfd),
                              "-o", "dump.log", "-v4"], env=ENV, pass_fds=(wfd,), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        os.close(wfd)
        os.read(rfd, 1)  # status-ready
        t1 = time.monotonic()
        os.close(rfd)
        # CLOSE: a 24-byte v4.1 header, cmd 0x1023; CRIU answers int32 0.
        sh(TESTBED, "exec", "a", "python3", "-c",
           "import socket,struct,sys; s=socket.create_connection(('127.0.0.1',int(sys.argv[1])));"
           "s.sendall(struct.pack('<IIQQ',0x1023,0,0,0)); s.recv(4); s.close()", str(port))
        p.wait(60)
        # From CRIU's own log: the freeze starts right after "pre-dump"
        # scripts, the page server listens at "status-ready". Ferry's dump
        # phase is measured between the same two notifications.
        stamps = {}
        for line in open(os.path.join(d, "dump.log")):
            m = re.match(r"\((\d+\.\d+)\) Running (pre-dump|status-ready) scripts", line)
            if m:
                stamps[m.group(2)] = float(m.group(1))
        return {"freeze_to_listening_ms": (stamps["status-ready"] - stamps["pre-dump"]) * 1e3,
                "process_start_to_listening_ms": (t1 - t0) * 1e3}
    finally:
        w.stop()
        shutil.rmtree(d, ignore_errors=True)


def criu_lazy_local_run(mib, order="random"):
    """criu dump to local images, then criu lazy-pages + criu restore
    --lazy-pages from them; the workload touches every page after resuming."""
    w = Workload(None, mib, ["--touch-after-freeze", "--touch-order", order])
    d = tempfile.mkdtemp(prefix="ferry-lazylocal-", dir="/dev/shm")
    mark = len(w.lines())
    restored = None
    daemon = None
    try:
        sh("criu", "dump", "-t", str(w.pid), "-D", d, "-o", "dump.log")
        daemon = subprocess.Popen(["criu", "lazy-pages", "-D", d, "-o", "lazy.log"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        for _ in range(500):
            if os.path.exists(os.path.join(d, "lazy-pages.socket")):
                break
            time.sleep(0.01)
        pidfile = os.path.join(d, "restored.pid")
        sh("criu", "restore", "-D", d, "--lazy-pages", "-d", "--pidfile", pidfile, "-o", "restore.log")
        restored = int(open(pidfile).read())
        return {"touch": parse_touch(w.wait_line("touch pages=", 120, mark))}
    finally:
        w.stop(restored)
        if daemon:
            daemon.wait(60)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256,1024,2048", help="MiB, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="repetitions per measurement")
    ap.add_argument("--latency-sizes", default="256,1024", help="MiB for the per-access latency runs")
    ap.add_argument("--json", help="also write the raw results here")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",") if s]
    lsizes = [int(s) for s in a.latency_sizes.split(",") if s]

    testbed("down", check=False)
    testbed("up")
    raw = {"downtime": {}, "latency": {}}
    try:
        # Repetitions are interleaved, so slow phases of this shared machine
        # hit every contender alike.
        for mib in sizes:
            ferry, sc, lazy = [], [], []
            for _ in range(a.runs):
                ferry.append(ferry_run(mib, False))
                sc.append(stop_and_copy_run(mib))
                lazy.append(criu_lazy_dump_run(mib))
            raw["downtime"][mib] = {"ferry": ferry, "stop_and_copy": sc, "criu_lazy_dump": lazy}
            report_downtime(mib, ferry, sc, lazy)
        for mib in lsizes:
            ferry, criu = [], []
            for _ in range(a.runs):
                ferry.append(ferry_run(mib, True))
                criu.append(criu_lazy_local_run(mib))
            raw["latency"][mib] = {"ferry": ferry, "criu_lazy_local": criu}
            report_latency(mib, ferry, criu)
    finally:
        testbed("down", check=False)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)


def report_downtime(mib, ferry, sc, lazy):
    fd = [r["downtime_ms"] for r in ferry]
    sd = [r["downtime_ms"] for r in sc]
    ld = [r["freeze_to_listening_ms"] for r in lazy]
    print(f"\n== downtime at {mib} MiB ({len(fd)} runs each), ms")
    print(f"   {'':34} {'p50':>9} {'p99':>9}")
    print(f"   {'Ferry post-copy':34} {pct(fd, 50):9.1f} {pct(fd, 99):9.1f}")
    print(f"   {'stop-and-copy (dump+copy+restore)':34} {pct(sd, 50):9.1f} {pct(sd, 99):9.1f}"
          f"   Ferry is {pct(sd, 50) / pct(fd, 50):.1f}x lower at p50")
    print(f"   {'CRIU lazy dump, freeze->listening':34} {pct(ld, 50):9.1f} {pct(ld, 99):9.1f}"
          f"   Ferry / CRIU lazy dump = {pct(fd, 50) / pct(ld, 50):.2f} at p50")
    phases = {}
    for r in ferry:
        for k, v in r["phases_ms"].items():
            phases.setdefault(k, []).append(v)
        for k, v in r["destination_phases_ms"].items():
            phases.setdefault("dest." + k, []).append(v)
    print("   Ferry's downtime by phase (p50 ms): " + ", ".join(
        f"{k} {pct(v, 50):.1f}" for k, v in phases.items() if k not in ("post_copy", "finish_source")))
    print(f"   stop-and-copy (p50 ms): dump {pct([r['dump_ms'] for r in sc], 50):.1f}, "
          f"copy {pct([r['copy_ms'] for r in sc], 50):.1f}, restore {pct([r['restore_ms'] for r in sc], 50):.1f}")


def report_latency(mib, ferry, criu):
    def agg(runs, key):
        return [r["touch"][key] / 1e3 for r in runs]

    print(f"\n== per-access latency, every page touched once in random order right after resume, {mib} MiB, us")
    print(f"   {'':30} {'p50':>8} {'p99':>8} {'p99.9':>8} {'max':>9}   (median over {len(ferry)} runs)")
    rows = []
    for name, runs in (("Ferry (TCP between hosts)", ferry), ("CRIU lazy-pages, local images", criu)):
        row = [statistics.median(agg(runs, k)) for k in ("p50_ns", "p99_ns", "p999_ns", "max_ns")]
        rows.append(row)
        print(f"   {name:30} {row[0]:8.1f} {row[1]:8.1f} {row[2]:8.1f} {row[3]:9.1f}")
    print(f"   ratio Ferry/CRIU: p50 {rows[0][0] / rows[1][0]:.2f}, p99 {rows[0][1] / rows[1][1]:.2f}, "
          f"p99.9 {rows[0][2] / rows[1][2]:.2f}")
    fp = [r["fault_p50_us"] for r in ferry]
    f9 = [r["fault_p99_us"] for r in ferry]
    print(f"   Ferry's own fault service time (fault read -> UFFDIO_COPY): p50 {statistics.median(fp):.0f} us, "
          f"p99 {statistics.median(f9):.0f} us")


if __name__ == "__main__":
    sys.exit(main())
