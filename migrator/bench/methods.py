"""The contenders `migrator bench` measures, each one run on the testbed:
Ferry's post-copy migration and the baselines that apply to a bare process
tree. Each returns a dict of figures for one repetition."""
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time

from benchlib import BUILD, ENV, TESTBED, Workload, parse_touch, sh, testbed

# The downtime's parts as Ferry's report names them (downtime_breakdown_ms).
BREAKDOWN = ("freeze", "dump", "images", "restore", "resume")
# Gathers each Ferry run's logs (slow_logs.SlowLogs), if the bench keeps them.
SLOW_LOGS = None


def migrate_a_to_b(*what, timeout=600):
    """`migrator migrate WHAT --to b --json` on host a: its report, with
    breakdown_ms; raises with the migrator's own error if it failed."""
    b = testbed("addr", "b").stdout.strip()
    # --keep-images keeps the source's work directory, CRIU's dump.log in it.
    keep = ["--keep-images"] if SLOW_LOGS and SLOW_LOGS.on else []
    r = testbed("exec", "a", "migrator", "migrate", *what, "--to", b, "--json", *keep, check=False,
                timeout=timeout)
    try:
        res = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"migrator printed no report: {r.stderr.strip()[-500:]}")
    if not res["ok"]:
        raise RuntimeError("ferry migration failed: " + res["error"])
    logs = SLOW_LOGS.gather(res) if keep else None
    return dict(res, breakdown_ms=res["downtime_breakdown_ms"], **({"logs_dir": logs} if logs else {}))


def touch_cdf(w, mark):
    """The workload's touch_cdf line, as a list of ns."""
    return [int(x) for x in w.wait_line("touch_cdf ns=", 10, mark).split("=", 1)[1].split(",")]


def ferry(mib, fabric="tcp", touch=False, order="random", touch_threads=1, precopy=False):
    """`migrator migrate` of a fresh memload tree from host a to host b: its
    report, with breakdown_ms (and, with touch, the workload's first-access
    latencies in `order`)."""
    w = Workload("a", mib, ["--touch-after-freeze", "--touch-order", order, "--touch-threads", str(touch_threads)]
                 if touch else [])
    mark = len(w.lines())
    dest = None
    try:
        out = migrate_a_to_b("--pid", str(w.pid), "--fabric", fabric, *(["--precopy"] if precopy else []))
        dest = out["destination_pid"]
        if touch:
            out["touch"] = parse_touch(w.wait_line("touch pages=", 600, mark))
            out["touch_cdf_ns"] = touch_cdf(w, mark)
        return out
    finally:
        w.stop(dest)


def stop_and_copy(mib):
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
        return {"downtime_ms": (t3 - t0) * 1e3,
                "breakdown_ms": {"dump": (t1 - t0) * 1e3, "images": (t2 - t1) * 1e3, "restore": (t3 - t2) * 1e3}}
    finally:
        w.stop(restored)
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(dst, ignore_errors=True)


def criu_lazy_dump(mib):
    """CRIU's own lazy dump: the freeze until its page server listens, which
    is where a CRIU lazy migration's downtime starts. (Its page server cannot
    serve pages on Linux 6.16+, "page-pipe: splice: Bad file descriptor", so
    the restore half cannot be measured between hosts.)"""
    w = Workload("a", mib)
    d = tempfile.mkdtemp(prefix="ferry-lazy-", dir="/dev/shm")
    try:
        rfd, wfd = os.pipe()
        port = 27000 + os.getpid() % 1000
        p = subprocess.Popen([TESTBED, "exec", "a", "criu", "dump", "-t", str(w.pid), "-D", d, "--lazy-pages",
                              "--address", "127.0.0.1", "--port", str(port), "--status-fd", str(wfd),
                              "-o", "dump.log", "-v4"], env=ENV, pass_fds=(wfd,), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        os.close(wfd)
        # status-ready, or CRIU gave up (the pipe closes); a stuck CRIU is
        # killed and the run ends with an error (the workload is ended below).
        ready, _, _ = select.select([rfd], [], [], 120)
        got = os.read(rfd, 1) if ready else b""
        os.close(rfd)
        if not got:
            p.kill()
            p.wait(30)
            log = os.path.join(d, "dump.log")
            tail = open(log).read()[-500:] if os.path.exists(log) else ""
            raise RuntimeError(f"CRIU's lazy dump did not reach status-ready within 120 s (or failed): {tail}")
        # CLOSE: a 24-byte v4.1 header, cmd 0x1023; CRIU answers int32 0.
        sh(TESTBED, "exec", "a", "python3", "-c",
           "import socket,struct,sys; s=socket.create_connection(('127.0.0.1',int(sys.argv[1])));"
           "s.sendall(struct.pack('<IIQQ',0x1023,0,0,0)); s.recv(4); s.close()", str(port))
        p.wait(120)
        # From CRIU's own log: the freeze starts right after the "pre-dump"
        # scripts, the page server listens at "status-ready".
        stamps = {}
        for line in open(os.path.join(d, "dump.log")):
            m = re.match(r"\((\d+\.\d+)\) Running (pre-dump|status-ready) scripts", line)
            if m:
                stamps[m.group(2)] = float(m.group(1))
        ms = (stamps["status-ready"] - stamps["pre-dump"]) * 1e3
        return {"downtime_ms": ms, "breakdown_ms": {"dump": ms}}
    finally:
        w.stop()
        shutil.rmtree(d, ignore_errors=True)


def criu_lazy_local(mib, order="random"):
    """CRIU's lazy-pages daemon restoring from local images (no network: its
    page server cannot serve on this kernel), the workload touching every
    page once in random order after it resumes: the fault-latency baseline."""
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
        return {"touch": parse_touch(w.wait_line("touch pages=", 600, mark)),
                "touch_cdf_ns": touch_cdf(w, mark)}
    finally:
        w.stop(restored)
        if daemon:
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(10)
        shutil.rmtree(d, ignore_errors=True)


RAW_PORT = 7991


def raw_link(mib, env=ENV, sends=3, fabric="tcp", fill_source=True):
    """The `fabric` link from host a to host b without Ferry, `mib` MiB into
    fresh memory, as a migration's pages must land. Goal 3 sets Ferry's move
    against it.
    tcp: sent by raw-throughput across the testbed `env` names; shm:
    raw-throughput's one-sided reads of 1 MiB from a shared region, what the
    shm fabric's link is.
    The figure ("gbytes_per_s") is the first send, made from `mib` MiB the
    sender has just filled, as a move of a fresh memload holds its
    workload's: on a VM it finds the guest's memory as a move does. Here
    fresh memory beyond ~2 GiB lands at 0.4-0.5 GB/s (UFFDIO_COPY into fresh
    memory: 2.1 GB/s for the first 2 GiB, 0.42 after), most likely because
    free guest memory goes back to the hypervisor (the balloon device offers
    free page reporting). Where the workload already holds its memory
    (Redis: fill_source=False), the sender fills nothing, or the send would
    take a second source's memory that no move takes (the Redis lab's link
    fell to 0.41 GB/s so, below the idle move's own rate).
    The sends after it land in the memory the first just freed, warm: the
    fastest of all is kept as "warm_gbytes_per_s" (the yardstick until
    stop 45: 0.83 GB/s at 4 GiB where the first send from memory got 0.33)."""
    if fabric == "shm":
        figures = [raw_shm(mib) for _ in range(sends)]
    else:
        figures = [raw_tcp(mib, env, from_memory=fill_source)] + [raw_tcp(mib, env) for _ in range(sends - 1)]
    return {"gbytes_per_s": figures[0], "warm_gbytes_per_s": max(figures), "sends_gbytes_per_s": figures,
            "mib": mib, "fabric": fabric}


def raw_shm(mib, lat_ns=0):
    """One run of raw-throughput's shm mode (with the link model's latency
    per 1 MiB read), GB/s."""
    tool = os.path.join(BUILD, "examples", "raw-throughput")
    r = subprocess.run([tool, "shm", str(mib), str(lat_ns), "0"], capture_output=True, text=True, timeout=300)
    m = re.search(r"shm_gbytes_per_s=([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"raw-throughput shm printed no figure: {(r.stdout + r.stderr).strip()[-300:]}")
    return float(m.group(1))


def raw_tcp(mib, env=ENV, from_memory=False):
    """One send of `mib` MiB from host a to host b of the testbed `env` names
    (from_memory: from `mib` MiB the sender fills first), GB/s."""
    tool = os.path.join(BUILD, "examples", "raw-throughput")
    ip_b = testbed("ip", "b", env=env).stdout.strip()
    # `timeout`: a sink whose sender never came does not outlive the bench.
    sink = subprocess.Popen([TESTBED, "exec", "b", "timeout", "300", tool, "tcp-sink", f"{ip_b}:{RAW_PORT}"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The sink prints "ready" once it listens; bounded, like every wait here.
        ready, _, _ = select.select([sink.stdout], [], [], 30)
        if not ready or "ready" not in sink.stdout.readline():
            raise RuntimeError("raw-throughput's sink on b did not get ready")
        r = testbed("exec", "a", tool, "tcp-send", f"{ip_b}:{RAW_PORT}", str(mib),
                    *(["from-memory"] if from_memory else []), env=env, timeout=300)
        m = re.search(r"tcp_gbytes_per_s=([0-9.]+)", r.stdout)
        if not m:
            raise RuntimeError(f"raw-throughput printed no figure: {r.stdout.strip()[-300:]}")
        sink.wait(timeout=60)
        return float(m.group(1))
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
