#!/usr/bin/env python3
"""`migrator bench`'s plan (migrator/bench/bench.py): which measurements run,
in which order. The bare link is measured at every size, right before that
size's moves, so goal 3 sets each move against the link at its own size."""
import os
import sys
import types
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "migrator", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

import bench  # noqa: E402


def args(**kw):
    a = dict(workload="memload", methods=["ferry"], sizes=[256, 1024, 4096], warmup=0, runs=2, fault_fabrics=[],
             fault_threads=[1], fault_mib=256, fabric="tcp", raw_link="on")
    a.update(kw)
    return types.SimpleNamespace(**a)


class Plan(unittest.TestCase):
    def test_the_link_at_each_size_before_its_moves(self):
        items = bench.plan(args())
        self.assertEqual([(k, m, r) for k, _, m, r in items],
                         [(k, m, r) for r in (0, 1) for m in (256, 1024, 4096) for k in ("raw", "downtime")])
        self.assertEqual({n for k, n, _, _ in items if k == "raw"}, {"raw tcp link a -> b"})

    def test_the_link_is_on_the_fabric_moved_over(self):
        items = bench.plan(args(fabric="shm", sizes=[512], runs=1))
        self.assertEqual(items, [("raw", "raw shm link a -> b", 512, 0), ("downtime", "ferry", 512, 0)])

    def test_no_link_without_a_ferry_move_to_set_against_it(self):
        self.assertFalse([i for i in bench.plan(args(methods=["stop_and_copy"])) if i[0] == "raw"])
        self.assertFalse([i for i in bench.plan(args(workload="container", methods=["ferry", "bare_process"]))
                          if i[0] == "raw"])

    def test_no_link_when_asked(self):
        items = bench.plan(args(raw_link="off"))
        self.assertEqual([(k, m) for k, _, m, _ in items], [("downtime", m) for _ in (0, 1) for m in (256, 1024, 4096)])

    def test_redis_baseline_first_then_each_link_before_its_moves(self):
        items = bench.plan(args(workload="redis", methods=["ferry_idle", "ferry", "podman_checkpoint"], sizes=[1024],
                                warmup=1))
        self.assertEqual([i[:2] for i in items if i[0] != "warmup"][:2],
                         [("downtime", "podman_checkpoint")] * 2)
        rest = [i[:2] for i in items if i[1] != "podman_checkpoint" and i[0] != "warmup"]
        self.assertEqual(rest, [("raw", "raw tcp link a -> b"), ("downtime", "ferry_idle"), ("downtime", "ferry")] * 2)


if __name__ == "__main__":
    unittest.main()
