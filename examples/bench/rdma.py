#!/usr/bin/env python3
"""What the rdma fabric saves, measured between two VMs with Soft-RoCE (not a
test: it asserts nothing). Absolute times under qemu TCG mean nothing, so it
reports what carries over to real hardware, for --fabric rdma against tcp in
one interleaved run (memload trees of --mib MiB migrated from VM a to VM b):

  * the source daemon's wake-ups per 1,000 faults: how often a thread
    serving the migration's page channels had to sleep for a request (each
    channel logs its count when it closes), plus for rdma the wake-ups of
    the thread answering stage requests (its own count); and the daemon's
    CPU time (utime + stime of /proc/PID/stat, exited threads included) per
    page moved;
  * round trips per fault request on the destination's fault channel (rdma:
    READ batches + 2 per stage ask, from the channel's own counters; tcp: one
    request, one reply);
  * bytes on the wire per page served: both VMs' NIC counters (eth0 rx+tx on
    b) over the migration, divided by the pages moved post-copy.

Run it through examples/bench/run-rdma.sh, which installs and builds first.
The projection of fault latency on a 100 Gb/s RoCE NIC is faults.py's
`--fabrics shm:lat=2us,bw=100gbit,tcp` (run-faults.sh), on this machine.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from benchlib import BUILD, REPO, TESTBED

ENV = dict(os.environ, FERRY_TESTBED="rbench", FERRY_TESTBED_NET="10.81.0", FERRY_BUILD=BUILD)
MEMLOAD = os.path.join(BUILD, "examples", "memload")


def tb(*args, check=True, timeout=900):
    r = subprocess.run([TESTBED, *args], env=ENV, text=True, capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"testbed {' '.join(args)} failed: {r.stderr.strip()[-1500:]}")
    return r.stdout


def on(host, script, check=True):
    return tb("exec", host, "bash", "-c", script, check=check)


def cpu_seconds(host, pid):
    fields = on(host, f"cat /proc/{pid}/stat").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nic_bytes(host):
    out = on(host, "cat /sys/class/net/eth0/statistics/rx_bytes /sys/class/net/eth0/statistics/tx_bytes")
    return sum(int(x) for x in out.split())


def one_run(fabric, mib, shared, n, touch):
    out = f"{shared}/bench-{n}.out"
    # --touch: the workload touches every page in random order the moment it
    # resumes, so faults race the source's staging (stage asks, on rdma).
    extra = "--touch-after-freeze --touch-order random" if touch else ""
    on("a", f"setsid unshare --pid --fork {MEMLOAD} --mib {mib} --child-mib 0 --threads 2 {extra} >{out} 2>&1 &")
    for _ in range(600):
        if os.path.exists(out) and "ready parent" in open(out).read():
            break
        time.sleep(0.2)
    pid = on("a", "pgrep -o -x memload").strip()
    daemon = open(os.path.join(tb("dir", "a").strip(), "pagesrv.pid")).read().strip()
    cpu0, nic0 = cpu_seconds("a", daemon), nic_bytes("b")
    r = subprocess.run([TESTBED, "exec", "a", "migrator", "migrate", "--pid", pid, "--to",
                        tb("addr", "b").strip(), "--json", "--fabric", fabric],
                       env=ENV, text=True, capture_output=True, timeout=900)
    res = json.loads(r.stdout)
    if not res["ok"]:
        raise RuntimeError(f"{fabric}: {res['error']}")
    time.sleep(1)  # the channels' threads log as they close
    cpu1, nic1 = cpu_seconds("a", daemon), nic_bytes("b")
    mid = res["migration_id"]
    src = open(os.path.join(tb("dir", "a").strip(), "pagesrv.log")).read()
    served = re.findall(rf"migration {mid}: page channel closed: (\d+) requests served, (\d+) wake-ups", src)
    row = {
        "fabric": fabric,
        "faults": res["pages_faulted"],
        "pages": res["pages_faulted"] + res["pages_background"],
        "source_wakeups": sum(int(w) for _, w in served),
        "source_requests": sum(int(n) for n, _ in served),
        "source_cpu_s": cpu1 - cpu0,
        "wire_bytes": nic1 - nic0,
        "image_bytes": res["image_bytes"],
        "downtime_ms": res["downtime_ms"],
        "post_copy_ms": res["phases_ms"]["post_copy"],
    }
    if fabric == "rdma":
        log = on("b", f"cat /var/lib/ferry-testbed/b/incoming/{mid}/lazy-pages.log", check=False)
        m = re.search(r"rdma fault channel: (\d+) requests, (\d+) READ round trips, (\d+) stage asks", log)
        if m:
            row["fault_requests"], row["read_batches"], row["stage_asks"] = map(int, m.groups())
        m = re.search(rf"migration {mid}: rdma: (\d+) stage requests answered, (\d+) wake-ups", src)
        if m:
            row["stage_requests_served"], row["server_wakeups"] = map(int, m.groups())
            row["source_wakeups"] += row["server_wakeups"]
    on("b", f"kill -KILL {res['destination_pid']}", check=False)
    return row


def summarize(rows):
    out = {}
    for f in sorted({r["fabric"] for r in rows}):
        rs = [r for r in rows if r["fabric"] == f]
        per_k = [1000 * r["source_wakeups"] / max(1, r["faults"]) for r in rs]
        per_page = [(r["wire_bytes"] - r["image_bytes"]) / max(1, r["pages"]) for r in rs]
        s = {"runs": len(rs),
             "faults_p50": statistics.median(r["faults"] for r in rs),
             "source_wakeups_per_1000_faults_p50": statistics.median(per_k),
             "wire_bytes_per_page_p50": statistics.median(per_page),
             "source_cpu_us_per_page_p50": statistics.median(1e6 * r["source_cpu_s"] / max(1, r["pages"]) for r in rs)}
        if f == "rdma":
            s["round_trips_per_fault_request_p50"] = statistics.median(
                (r["read_batches"] + 2 * r["stage_asks"]) / max(1, r["fault_requests"])
                for r in rs if "read_batches" in r)
            s["stage_asks_p50"] = statistics.median(r.get("stage_asks", 0) for r in rs)
            s["server_wakeups_p50"] = statistics.median(r.get("server_wakeups", 0) for r in rs)
        else:
            s["round_trips_per_fault_request_p50"] = 1.0
        out[f] = s
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--touch", action="store_true",
                    help="the workload touches every page at once after resuming (faults race staging)")
    ap.add_argument("--json", help="also write the raw rows here")
    a = ap.parse_args()
    tb("down", check=False)
    tb("up", "--vm")
    rows = []
    try:
        shared = tb("shared-dir").strip()
        for n in range(a.runs):
            for fabric in ("tcp", "rdma"):  # interleaved: drift hits both
                rows.append(one_run(fabric, a.mib, shared, f"{fabric}-{n}", a.touch))
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        tb("down", check=False)
    s = summarize(rows)
    print(json.dumps(s, indent=2))
    if "tcp" in s and "rdma" in s:
        t, r = s["tcp"], s["rdma"]
        print(f"source wake-ups per 1000 faults: tcp {t['source_wakeups_per_1000_faults_p50']:.0f}, "
              f"rdma {r['source_wakeups_per_1000_faults_p50']:.0f} "
              f"(ratio {r['source_wakeups_per_1000_faults_p50'] / max(1e-9, t['source_wakeups_per_1000_faults_p50']):.3f})")
        print(f"source CPU per page moved: tcp {t['source_cpu_us_per_page_p50']:.1f} us, "
              f"rdma {r['source_cpu_us_per_page_p50']:.1f} us (TCG: the ratio, not the figures)")
        print(f"round trips per fault request: tcp 1, rdma {r['round_trips_per_fault_request_p50']:.2f}")
        print(f"wire bytes per page: tcp {t['wire_bytes_per_page_p50']:.0f}, rdma {r['wire_bytes_per_page_p50']:.0f} "
              f"(ratio {r['wire_bytes_per_page_p50'] / t['wire_bytes_per_page_p50']:.3f})")
    if a.json:
        json.dump({"rows": rows, "summary": s}, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
