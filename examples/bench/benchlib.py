"""Helpers shared by Ferry's benchmarks: the testbed, memload workloads, and
percentiles."""
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("FERRY_BUILD", os.path.join(REPO, "build"))
TESTBED = os.path.join(REPO, "examples", "testbed.sh")
MEMLOAD = os.path.join(BUILD, "examples", "memload")
ENV = dict(os.environ, FERRY_TESTBED="fbench", FERRY_TESTBED_NET="10.80.0", FERRY_BUILD=BUILD)


def sh(*args, check=True, capture=True, env=ENV, timeout=600):
    r = subprocess.run(list(args), env=env, check=False, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None,
                       text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r


def testbed(*args, **kw):
    return sh(TESTBED, *args, **kw)


# One bench at a time on a host: each starts by tearing down the testbed a
# bench uses, which would pull the hosts from under one already running.
BENCH_LOCK = "/run/lock/ferry-bench.lock"


def take_bench_lock(path=BENCH_LOCK):
    """The open lock file (held until the process exits, however it ends),
    or a RuntimeError naming the bench that holds it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise RuntimeError(f"another Ferry bench is running on this host (pid {holder}); "
                           f"wait for it to end (it holds {path})") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def stop_on(*signums):
    def stop(signum, _frame):
        for n in signums:  # a second signal must not cut the cleanup short
            signal.signal(n, signal.SIG_IGN)
        raise SystemExit(128 + signum)
    for n in signums:
        signal.signal(n, stop)


def one_bench_at_a_time(prog):
    """For a bench's main, before it touches the testbed: the bench lock
    (keep it while the bench runs), or None once the reason is printed (the
    bench then exits 2). From here SIGTERM (timeout(1), a service stop) and
    SIGHUP (a closed terminal) end the bench as Ctrl-C does: through its
    cleanup, so that no testbed, container or workload outlives it."""
    try:
        lock = take_bench_lock()
    except RuntimeError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None
    stop_on(signal.SIGTERM, signal.SIGHUP)
    return lock


def pct(values, p):
    """Nearest-rank percentile."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = max(1, min(len(v), int(-(-p * len(v) // 100))))
    return v[k - 1]


def p50_p99(runs, key):
    """{"p50", "p99"} of runs[i][key]."""
    v = [r[key] for r in runs]
    return {"p50": pct(v, 50), "p99": pct(v, 99)}


def migrate_memload(mib, *migrate_args):
    """Migrates a fresh memload tree (parent with 3 threads, a 16 MiB child)
    from host a to host b with `migrator migrate --json MIGRATE_ARGS`;
    returns the report, and ends both trees."""
    w = Workload("a", mib, ["--child-mib", "16", "--threads", "3"])
    dest = None
    try:
        b = testbed("addr", "b").stdout.strip()
        r = testbed("exec", "a", "migrator", "migrate", "--pid", str(w.pid), "--to", b, "--json",
                    *migrate_args, check=False)
        res = json.loads(r.stdout)
        if not res["ok"]:
            raise RuntimeError("migration failed: " + res["error"])
        dest = res["destination_pid"]
        return res
    finally:
        w.stop(dest)


class Workload:
    """memload as the init of a new PID namespace on a testbed host (or, with
    host=None, on the machine itself); output appended to a file."""

    def __init__(self, host, mib, extra=(), tmp="/tmp"):
        self.out = tempfile.NamedTemporaryFile(prefix="ferry-bench-", suffix=".out", dir=tmp, delete=False).name
        cmd = ["setsid", "unshare", "--pid", "--fork", MEMLOAD, "--mib", str(mib), "--child-mib", "0",
               "--threads", "1", *extra]
        if host:
            cmd = [TESTBED, "exec", host, *cmd]
        self.launcher = subprocess.Popen(cmd, env=ENV, stdin=subprocess.DEVNULL,
                                         stdout=open(self.out, "a"), stderr=subprocess.STDOUT)
        self.wait_line("ready parent", 120)
        deadline = time.time() + 10
        self.pid = None
        while self.pid is None and time.time() < deadline:
            try:
                kids = open(f"/proc/{self.launcher.pid}/task/{self.launcher.pid}/children").read().split()
                self.pid = int(kids[0]) if kids else None
            except OSError:
                pass
            if self.pid is None:
                time.sleep(0.01)
        if self.pid is None:
            raise RuntimeError("workload pid not found")

    def lines(self):
        with open(self.out) as f:
            return f.read().splitlines()

    def wait_line(self, pattern, secs, after=0):
        deadline = time.time() + secs
        while time.time() < deadline:
            for line in self.lines()[after:]:
                if pattern in line:
                    return line
            time.sleep(0.02)
        raise RuntimeError(f"no '{pattern}' from the workload within {secs}s")

    def stop(self, *pids):
        for p in (self.pid, *pids):
            if p:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.launcher.kill()
            self.launcher.wait(10)
        except Exception:
            pass
        # A killed workload frees its memory as it exits: gigabytes take the
        # kernel a while, which must not fall into the next run's downtime.
        for p in (self.pid, *pids):
            if p:
                wait_gone(p, 10)
        os.unlink(self.out)


def wait_gone(pid, secs):
    """Waits until pid has exited (gone, or a zombie: its memory is freed)."""
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.01)


def parse_touch(line):
    kv = dict(x.split("=") for x in line.split()[1:])
    return {k: float(v) for k, v in kv.items()}


