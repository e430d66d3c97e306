"""The Redis workload of `migrator bench`: Redis in a podman or docker
container holding known keys, moved back and forth between the testbed's
hosts (examples/redis/redis_lab.py's lab):
  * Ferry with no client (the idle post-copy, for goal 3's throughput ratio);
  * Ferry while a client on host c reads and increments throughout;
  * podman's checkpoint --export + copy + restore --import under the same
    client (podman only; with --tcp-established, the container keeping its
    address on the container network as with Ferry).
The container has its own address on the testbed's container network, so
its one client connection moves with it (issue 18); the client-visible
downtime is the longest gap between two replies on that connection.
After every move every key is checked, and no acknowledged write may be lost.
The replies of the last Ferry run under load are kept for the switchover
timeline plot."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "redis"))
import redis_lab  # noqa: E402

TIMELINE_BEFORE_MS, TIMELINE_AFTER_MS, TIMELINE_POINTS = 1000.0, 4000.0, 4000


def timeline(replies_path, resumed_ns=None):
    """Reply latency against time around the switchover (the resume at
    `resumed_ns` on the replies log's clock, else the longest gap): [(ms
    from the resume, latency us)], thinned to at most TIMELINE_POINTS, and
    the switchover's gap."""
    rows, gap_i = redis_lab.replies_around_gap(replies_path, resumed_ns)
    if gap_i is None:
        return {}
    resumed = rows[gap_i][0]
    pts = [((t - resumed) / 1e6, lat / 1e3) for t, lat in rows
           if -TIMELINE_BEFORE_MS * 1e6 <= t - resumed <= TIMELINE_AFTER_MS * 1e6]
    step = max(1, len(pts) // TIMELINE_POINTS)
    # Thinned, but never the slowest replies: every point above the p99 stays.
    slow = sorted(lat for _, lat in pts)[int(0.99 * (len(pts) - 1))] if pts else 0
    kept = [p for i, p in enumerate(pts) if i % step == 0 or p[1] >= slow]
    return {"points_ms_us": kept, "gap_ms": (rows[gap_i][0] - rows[gap_i - 1][0]) / 1e6}


class RedisBench:
    def __init__(self, engine, mib, fabric="tcp"):
        self.engine = engine
        self.mib = mib
        self.fabric = fabric  # of Ferry's moves
        self.lab = redis_lab.Lab(engine, mib, name="fbench-redis", net="10.82.0")
        self.before = None
        self.saved_runc_conf = None
        self.last_timeline = {}

    def prepare(self):
        if self.engine == "podman" and self.lab.host_network:
            conf = redis_lab.RUNC_CONF
            self.saved_runc_conf = open(conf).read() if os.path.exists(conf) else ""
            os.makedirs(os.path.dirname(conf), exist_ok=True)
            with open(conf, "w") as f:
                f.write("# ferry migrator bench: podman's checkpoint of a server with clients\n"
                        "tcp-close\nskip-in-flight\n")
        self.lab.up()
        self.lab.start_redis()
        self.lab.load()
        self.before = self.lab.checksum("a")

    def cleanup(self):
        self.lab.down()
        if self.saved_runc_conf is not None:
            conf = redis_lab.RUNC_CONF
            if self.saved_runc_conf:
                with open(conf, "w") as f:
                    f.write(self.saved_runc_conf)
            elif os.path.exists(conf):
                os.unlink(conf)

    def _checked(self, m, c):
        bad, _ = redis_lab.check(self.lab, self.before, m, c)
        if bad:
            raise RuntimeError("; ".join(bad))

    def ferry_idle(self, mib):
        src = self.lab.where
        dst = "b" if src == "a" else "a"
        m = self.lab.ferry(src, dst, self.fabric)
        self.lab.where = dst
        after = self.lab.checksum(dst)
        if after["missing"] or after["wrong"] or after["xxh64"] != self.before["xxh64"]:
            raise RuntimeError(f"keys not intact after an idle move: {after}")
        return self._figures(m, None)

    def ferry(self, mib):
        m, c = self.lab.under_load(lambda src, dst: self.lab.ferry(src, dst, self.fabric))
        self._checked(m, c)
        self.last_timeline = timeline(os.path.join(self.lab.work, "replies.log"),
                                      redis_lab.resumed_in_replies(m, c))
        return self._figures(m, c)

    def ferry_precopy(self, mib):
        """Ferry under the same client with --precopy: the memory streams to
        the destination before the freeze, and the post-copy fetches only
        what Redis wrote in the last round."""
        m, c = self.lab.under_load(lambda src, dst: self.lab.ferry(src, dst, self.fabric, ("--precopy",)))
        self._checked(m, c)
        pc = m.get("precopy") or {}
        if pc.get("error") or pc.get("unused"):
            raise RuntimeError(f"the pre-copy did not serve: {pc.get('error') or pc.get('unused')}")
        return self._figures(m, c)

    def podman_checkpoint(self, mib):
        m, c = self.lab.under_load(self.lab.baseline)
        self._checked(m, c)
        return self._figures(m, c)

    def _figures(self, m, c):
        out = {"downtime_ms": m["downtime_ms"], "breakdown_ms": m["breakdown"],
               "post_copy_ms": m.get("post_copy_ms", 0.0), "total_ms": m.get("total_ms", m["downtime_ms"])}
        if "pages_total" in m:
            out["moved_bytes"] = m["pages_total"] * 4096
        pc = m.get("precopy")
        if pc:
            # The pre-copy runs before the freeze: its time counts in the
            # migration's total, reported both ways.
            out["precopy_ms"] = pc["wait_ms"]
            out["precopy_pages_installed"] = pc["pages_installed"]
            out["precopy_pages_sent"] = pc["pages_sent"]
            out["total_with_precopy_ms"] = pc["wait_ms"] + out["total_ms"]
        if "pages_total" in m and out["post_copy_ms"] > 0:
            out["background_mib_per_s"] = m["pages_total"] * 4096 / 2**20 / (out["post_copy_ms"] / 1e3)
        for k in redis_lab.MIGRATION_FIGURES + ("pages_faulted", "engine_restore"):
            if m.get(k) is not None:  # an older migrator reports fewer
                out[k] = m[k]
        if c:
            # The gap at the switchover (the resume where the migrator gives
            # it), and apart from it the longest gap during the post-copy.
            gap = c.get("switchover_gap_ms", c["longest_gap_ms"])
            out.update({"client_gap_ms": gap,
                        "client_gap_over_downtime_ms": gap - m["downtime_ms"],
                        "client_longest_gap_after_ms": c.get("longest_gap_after_ms", 0.0),
                        "reply_p99_before_us": c.get("before_p99_us", 0.0),
                        "reply_p99_preparing_us": c.get("preparing_p99_us", 0.0),
                        "reply_p99_after_us": c.get("after_p99_us", 0.0), "replies": c["replies"],
                        "failovers": c["failovers"]})
        return out
