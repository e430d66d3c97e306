#!/usr/bin/env python3
"""Redis in a container, loaded with known data, migrated between the
testbed's hosts while a client on a third host keeps reading and writing.

  redis_lab.py example [--engine podman|docker] [--mib 1024] [--host-network]
      one Ferry migration a -> b, with the client's view and a key check
  redis_lab.py test [--engine podman|docker] [--mib 64] [--host-network]
      the same at a reduced size; exits 1 unless every key is intact, no reply
      was wrong, no acknowledged write was lost and the container runs on b
  (the benchmark against podman's checkpoint is `migrator bench --workload
  redis`, migrator/bench/redis.py, which drives this lab)

By default the container has an address of its own on the testbed's
container network "ferry" (a macvlan segment every host shares), and its
network moves with it: the client on c holds one connection throughout, and
after the migration the same connection goes on to the container on b. Fails
unless the client never reconnected.

With --host-network the container shares its host's network (Redis listens
on the host's address), so after a migration Redis answers at the
destination's address. The client (ferry-redis-client) knows both addresses
and fails over after a 20 ms silence; established connections cannot follow
the container (their addresses stay behind), so Ferry migrates with
--tcp-close and the client reconnects. Podman's checkpoint has no such
option: the benchmark gives the baseline the same CRIU options through
/etc/criu/runc.conf (restored after).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
import benchlib  # noqa: E402
from benchlib import pct, sh  # noqa: E402

CLIENT = os.path.join(benchlib.BUILD, "examples", "ferry-redis-client")
VALUE_BYTES = 4000
PORT = 6379
RUNC_CONF = "/etc/criu/runc.conf"
# The container's own address on the container network (in host a's IPAM
# pool, examples/testbed.sh).
CONTAINER_HOST_PART = 70


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Lab:
    def __init__(self, engine, mib, name="ferry-redis", net="10.81.0", host_network=False):
        self.engine = engine
        self.host_network = host_network
        n1, n2, n3 = net.split(".")
        self.container_ip = f"{n1}.{int(n2) + 1}.{n3}.{CONTAINER_HOST_PART}"
        self.keys = max(1024, mib * 1024 * 1024 // VALUE_BYTES)
        self.env = dict(benchlib.ENV, FERRY_TESTBED=name, FERRY_TESTBED_NET=net)
        self.ip = {"a": f"{net}.1", "b": f"{net}.2", "c": f"{net}.3"}
        self.work = tempfile.mkdtemp(prefix="ferry-redis.")
        self.image = "localhost/ferry-redis:latest" if engine == "podman" else "ferry-redis:latest"
        self.where = "a"

    # --- the testbed ---------------------------------------------------
    def tb(self, *args, **kw):
        return sh(benchlib.TESTBED, *args, env=self.env, **kw)

    def on(self, host, *args, **kw):
        return self.tb("exec", host, *args, **kw)

    def ctr(self, host, *args, engine=None, **kw):
        return self.on(host, engine or self.engine, *args, **kw)

    def up(self):
        self.tb("down", check=False)
        self.tb("up", "--engines", "--client", timeout=300)
        tar = os.path.join(self.work, "redis-rootfs.tar")
        log("building a Redis image from Debian's redis-server (debootstrap)")
        sh(os.path.join(benchlib.REPO, "examples", "image.sh"), tar, "redis-server", timeout=900)
        for h in ("a", "b"):
            self.ctr(h, "import", tar, self.image)
        os.unlink(tar)

    def down(self):
        self.tb("down", check=False)
        # The client's replies and the baseline's checkpoint copies: read
        # before this, and a run's own (each left one behind before).
        shutil.rmtree(self.work, ignore_errors=True)

    # --- Redis -----------------------------------------------------------
    def start_redis(self):
        network = ["--network", "host"] if self.host_network else \
            ["--network", "ferry", "--ip", self.container_ip]
        self.ctr("a", "run", "-d", "--name", "redis", *network, self.image,
                 "redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no",
                 "--port", str(PORT))
        for _ in range(100):
            if self.client("checksum", "--addr", self.addr("a"), "--keys", "1", check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("redis did not start")

    def addr(self, host):
        """Where Redis answers when it runs on `host`."""
        return f"{self.ip[host] if self.host_network else self.container_ip}:{PORT}"

    def client(self, *args, **kw):
        return self.on("c", CLIENT, *args, **kw)

    def load(self):
        log(f"loading {self.keys} keys of {VALUE_BYTES} bytes ({self.keys * VALUE_BYTES / 2**20:.0f} MiB)")
        self.client("load", "--addr", self.addr(self.where), "--keys", str(self.keys),
                    "--value-bytes", str(VALUE_BYTES), timeout=1800)

    def checksum(self, host):
        r = self.client("checksum", "--addr", self.addr(host), "--keys", str(self.keys),
                        "--value-bytes", str(VALUE_BYTES), timeout=600)
        return json.loads(r.stdout)

    def redis_info(self, host, field):
        r = self.on("c", "redis-cli", "-h", self.addr(host).split(":")[0], "-p", str(PORT), "info", "memory")
        for line in r.stdout.splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
        return ""

    def counter(self, host):
        r = self.on("c", "redis-cli", "-h", self.addr(host).split(":")[0], "-p", str(PORT), "get", "ferry:counter")
        return int(r.stdout.strip() or 0)

    # --- a migration under load -------------------------------------------
    def under_load(self, migrate, settle=2.0, after=3.0):
        """Runs the client, then migrate() (returns a dict), then lets the
        client go on for `after` seconds; returns (migration, client)."""
        stop = os.path.join(self.work, "stop")
        if os.path.exists(stop):
            os.unlink(stop)
        replies = os.path.join(self.work, "replies.log")
        other = "b" if self.where == "a" else "a"
        # Host networking: both hosts' addresses, failing over after 20 ms of
        # silence. Its own address: one connection, which must hold.
        addrs = f"{self.addr(self.where)},{self.addr(other)}" if self.host_network \
            else self.addr(self.where)
        # Its own address: podman's own checkpoint/restore of 1 GiB keeps
        # the connection frozen for about 15 s; the client waits it out.
        timeout_ms = "20" if self.host_network else "60000"
        cmd = [benchlib.TESTBED, "exec", "c", CLIENT, "run", "--addrs", addrs, "--keys", str(self.keys),
               "--value-bytes", str(VALUE_BYTES), "--seconds", "300", "--max-ops", "100000000",
               "--timeout-ms", timeout_ms, "--out", replies, "--stop-file", stop]
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(settle)
            # The client's clock is CLOCK_MONOTONIC too: its replies before
            # this moment are the baseline, untouched by the move's preparation.
            started_ns = time.monotonic_ns()
            m = migrate(self.where, other)
            time.sleep(after)
        finally:
            open(stop, "w").close()
            out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"client failed: {err.strip()}")
        c = json.loads(out)
        # The replies log counts from the client's start (CLOCK_MONOTONIC too).
        start = c.get("start_monotonic_ns")
        c.update(client_phases(replies, m.get("post_copy_ms", 0.0),
                               started_ns - start if start is not None else None,
                               resumed_ns=resumed_in_replies(m, c)))
        self.where = other
        return m, c

    def ferry(self, src, dst, fabric="tcp", extra=()):
        t0 = time.monotonic()
        tcp_close = ["--tcp-close"] if self.host_network else []
        r = self.on(src, "migrator", "migrate", "--engine", self.engine, "--container", "redis",
                    *tcp_close, "--to", self.tb("addr", dst).stdout.strip(), "--fabric", fabric, *extra, "--json",
                    check=False, timeout=900)
        wall = time.monotonic() - t0
        try:
            j = json.loads(r.stdout)
        except ValueError:
            raise RuntimeError(f"migrator printed no JSON: {r.stderr.strip()[-2000:]}")
        if not j.get("ok"):
            raise RuntimeError(f"migration failed: {j.get('error')}")
        # When the copy resumed, on CLOCK_MONOTONIC (the client's clock):
        # where the switchover is in the client's replies.
        resumed = (j["freeze_monotonic_ns"] + round(j["downtime_ms"] * 1e6)
                   if j.get("freeze_monotonic_ns") else None)
        return {"method": "ferry", "downtime_ms": j["downtime_ms"], "total_ms": j["total_ms"],
                "resumed_monotonic_ns": resumed,
                "post_copy_ms": j["phases_ms"]["post_copy"], "breakdown": j["downtime_breakdown_ms"],
                "pages_total": j["pages_total"], "pages_faulted": j["pages_faulted"], "wall_s": wall,
                "source_removed": j.get("source_container_removed", False),
                "network_lock": j.get("criu_network_lock", ""),
                "network": j.get("network", ""), "held_packets": j.get("held_packets", 0),
                "engine_restore": j.get("engine_restore", ""),
                "precopy": j.get("precopy"),
                **{k: j.get(k) for k in MIGRATION_FIGURES},
                "restore_log": os.path.join("/tmp/ferry-testbed", self.env["FERRY_TESTBED"], dst, "incoming",
                                            j.get("migration_id", ""), "restore.log")}

    def baseline(self, src, dst):
        """podman's own stop-and-copy: checkpoint --export, copy, restore --import."""
        export = os.path.join(self.work, "redis-checkpoint.tar")
        copy = os.path.join(self.work, "redis-checkpoint-copy.tar")
        # Its own address: podman keeps it and the connections (the
        # restore takes the address and MAC from the checkpoint).
        tcp = [] if self.host_network else ["--tcp-established"]
        t0 = time.monotonic()
        self.ctr(src, "container", "checkpoint", "--export", export, "--compress", "none", *tcp,
                 "redis", engine="podman", timeout=900)
        t1 = time.monotonic()
        sh("cp", export, copy, timeout=900)  # the network copy a real migration makes
        t2 = time.monotonic()
        self.ctr(dst, "container", "restore", "--import", copy, *tcp, engine="podman", timeout=900)
        t3 = time.monotonic()
        self.ctr(src, "rm", "-f", "redis", engine="podman")
        size = os.path.getsize(export)
        os.unlink(export)
        os.unlink(copy)
        return {"method": "podman-export-import", "downtime_ms": (t3 - t0) * 1e3,
                "breakdown": {"checkpoint_export": (t1 - t0) * 1e3, "copy": (t2 - t1) * 1e3,
                              "restore_import": (t3 - t2) * 1e3},
                "export_bytes": size, "post_copy_ms": 0.0, "wall_s": t3 - t0}


# Figures of a Ferry move passed on from the migrator's JSON as they are
# (None where an older migrator lacks them).
MIGRATION_FIGURES = ("fault_p99_us", "fault_fetch_p50_us", "fault_fetch_p99_us", "source_serve_cpu_ms",
                     "lazy_pages_cpu_ms")


def resumed_in_replies(m, c):
    """When the copy resumed, on the replies log's clock (from the client's
    start); None where the migration (podman's baseline) or the client
    gives no stamp."""
    resumed, start = m.get("resumed_monotonic_ns"), c.get("start_monotonic_ns")
    return resumed - start if None not in (resumed, start) else None


def replies_around_gap(replies_path, resumed_ns=None):
    """The client's replies as (time ns, latency ns), and the index of the
    first reply after the switchover; None if there are fewer than two
    replies. With `resumed_ns` (when the copy resumed, on the replies log's
    clock) that is the first reply completed after it; without, the first
    after the longest gap between two. A stall longer than the switchover's
    gap later in the post-copy (one of 419 ms was seen on 2026-12-07) made
    the longest gap the wrong anchor."""
    rows = []
    with open(replies_path) as f:
        for line in f:
            t, lat, _, _ = line.split()
            rows.append((int(t), int(lat)))
    if len(rows) < 2:
        return rows, None
    if resumed_ns is not None:
        after = next((i for i, (t, _) in enumerate(rows) if t >= resumed_ns), None)
        if after is not None and after >= 1:
            return rows, after
    return rows, max(range(1, len(rows)), key=lambda i: rows[i][0] - rows[i - 1][0])


def client_phases(replies_path, post_copy_ms, started_ns=None, window_ms=2000.0, resumed_ns=None):
    """Reply latencies in three phases: before the move began (`started_ns`,
    on the replies log's clock: from the client's start), while it prepared (from then to
    the switchover: the destination's warm restore and the source's
    checkpoint share the machine with the client), and right after it:
    during the post-copy (its length from the migrator) or, for
    stop-and-copy, the first window_ms. Without `started_ns`, "before" is
    everything before the switchover. The switchover is the resume
    (`resumed_ns`, on the same clock) where the migrator gives it, else the
    longest gap (replies_around_gap). Also the switchover's own gap, and
    the longest gap between replies after it within the window."""
    rows, gap_i = replies_around_gap(replies_path, resumed_ns)
    if gap_i is None:
        return {}
    resumed = rows[gap_i][0] if resumed_ns is None else resumed_ns
    span = (post_copy_ms if post_copy_ms > 0 else window_ms) * 1e6
    before = [lat for t, lat in rows[:gap_i] if started_ns is None or t < started_ns]
    preparing = [lat for t, lat in rows[:gap_i] if started_ns is not None and t >= started_ns]
    if not before:  # the client had not answered before the move began
        before, preparing = preparing, []
    window = [(t, lat) for t, lat in rows[gap_i:] if t - resumed <= span]
    after = [lat for _, lat in window]
    stall = max((b[0] - a[0] for a, b in zip(window, window[1:])), default=0)
    us = lambda v: v / 1e3  # noqa: E731
    out = {"before_p50_us": us(pct(before, 50)), "before_p99_us": us(pct(before, 99)),
           "after_p50_us": us(pct(after, 50)), "after_p99_us": us(pct(after, 99)),
           "after_window_ms": span / 1e6, "after_replies": len(after),
           "switchover_gap_ms": (rows[gap_i][0] - rows[gap_i - 1][0]) / 1e6,
           "longest_gap_after_ms": stall / 1e6}
    if preparing:
        out.update({"preparing_p99_us": us(pct(preparing, 99)), "preparing_replies": len(preparing)})
    return out


def check(lab, before, m, c):
    """What must hold after a migration; returns a list of failures."""
    bad = []
    after = lab.checksum(lab.where)
    if after["missing"] or after["wrong"] or after["xxh64"] != before["xxh64"]:
        bad.append(f"keys not intact: before {before}, after {after}")
    if c["wrong_values"]:
        bad.append(f"{c['wrong_values']} replies carried a wrong value")
    counter = lab.counter(lab.where)
    if counter < c["incr_acked"]:
        bad.append(f"acknowledged INCRs lost: counter {counter} < {c['incr_acked']} acknowledged")
    c["counter"] = counter
    level = os.environ.get("FERRY_CRIU_LOG_LEVEL", "2")
    if m.get("method") == "ferry" and level != "4":
        # runc asks its CRIU for level 4; Ferry's plugin makes it the
        # migration's (2, warnings and errors, unless the environment says).
        try:
            with open(m["restore_log"], errors="replace") as f:
                said = f"ferry: log level {level}, not 4, for migration" in f.read()
        except OSError as e:
            said = False
            bad.append(f"no restore.log of the engine's CRIU: {e}")
        if not said:
            bad.append(f"the engine's CRIU restored at runc's log level, not {level}: {m['restore_log']}")
    if lab.host_network:
        # --tcp-close: no connection moves, so CRIU locks nothing (the lock's
        # deletion cost the resume 10-20 ms, and dropped new clients' SYNs).
        if m.get("method") == "ferry" and not m.get("network_lock", "").startswith("skip"):
            bad.append(f"CRIU locked the network: {m.get('network_lock')}")
    else:
        # Its own address: the one connection held.
        if c["failovers"]:
            bad.append(f"the client reconnected {c['failovers']} times: its connection did not move")
        if m.get("method") == "ferry" and not m.get("network", "").startswith("moves"):
            bad.append(f"the network did not move: {m.get('network')}")
    return bad, after


def summary(m, c):
    return (f"container downtime {m['downtime_ms']:.1f} ms, client-visible downtime "
            f"{c.get('switchover_gap_ms', c['longest_gap_ms']):.1f} ms (the gap between replies "
            f"at the switchover; longest after it {c.get('longest_gap_after_ms', 0):.1f} ms), replies p99 "
            f"before {c.get('before_p99_us', 0):.0f} us, while it prepared {c.get('preparing_p99_us', 0):.0f} us, "
            f"right after {c.get('after_p99_us', 0):.0f} us "
            f"over {c.get('after_window_ms', 0):.0f} ms; {c['replies']} replies, {c['failovers']} reconnects")


def cmd_example(a):
    lab = Lab(a.engine, a.mib, a.testbed, a.net.rsplit(".", 1)[0], a.host_network)
    try:
        lab.up()
        lab.start_redis()
        lab.load()
        before = lab.checksum("a")
        log(f"redis on a: {before['dbsize']} keys, used_memory {lab.redis_info('a', 'used_memory_human')}; "
            f"checksum {before['xxh64']}")
        log(f"migrating the {a.engine} container redis a -> b with Ferry while the client on c runs")
        m, c = lab.under_load(lab.ferry)
        bad, after = check(lab, before, m, c)
        state = lab.ctr("b", "inspect", "redis", "--format", "{{.State.Status}}", check=False).stdout.strip()
        if state != "running":
            bad.append(f"redis is {state or 'absent'} on b")
        if lab.ctr("a", "inspect", "redis", check=False).returncode == 0:
            bad.append("the source container is still on a")
        print(json.dumps({"engine": a.engine, "keys": lab.keys, "migration": m, "client": c,
                          "checksum_before": before, "checksum_after": after}, indent=1))
        log(summary(m, c))
        log(f"downtime breakdown (ms): {json.dumps({k: round(v, 1) for k, v in m['breakdown'].items()})}")
        log("every key intact" if not bad else "FAILED: " + "; ".join(bad))
        return 1 if bad else 0
    finally:
        if not a.keep:
            lab.down()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, mib in (("example", 1024), ("test", 64)):
        s = sub.add_parser(name)
        s.add_argument("--mib", type=int, default=mib)
        s.add_argument("--keep", action="store_true", help="leave the testbed up")
        s.add_argument("--testbed", default="ferry-redis", help="the testbed's name")
        s.add_argument("--net", default="10.81.0.0", help="the testbed's /24")
        s.add_argument("--engine", choices=("podman", "docker"), default="podman")
        s.add_argument("--host-network", action="store_true",
                       help="the container shares its host's network; Ferry migrates it with --tcp-close")
    a = p.parse_args()
    return cmd_example(a)


if __name__ == "__main__":
    sys.exit(main())
