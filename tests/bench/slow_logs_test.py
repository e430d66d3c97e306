#!/usr/bin/env python3
"""`migrator bench --slow-logs` (migrator/bench/slow_logs.py) on made-up runs
and directories: each Ferry run's logs are gathered from both hosts, and
only the slow runs' stay."""
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "migrator", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

import slow_logs  # noqa: E402

MID = "0123456789abcdef0123456789abcdef"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class SlowerThanMedian(unittest.TestCase):
    def test_a_run_over_the_factor_is_slow(self):
        runs = [{"downtime_ms": 30}, {"downtime_ms": 29}, {"downtime_ms": 128}, {"downtime_ms": 31},
                {"downtime_ms": 45}]
        # Median 31: 45 is under 1.5 x 31 = 46.5, 128 is over.
        self.assertEqual(slow_logs.slower_than_median(runs, 1.5), [False, False, True, False, False])

    def test_one_slow_run_of_two_is_not_its_own_yardstick(self):
        self.assertEqual(slow_logs.slower_than_median([{"downtime_ms": 100}, {"downtime_ms": 10}], 1.5),
                         [True, False])

    def test_failed_runs_are_never_slow(self):
        runs = [{"error": "failed"}, {"downtime_ms": 10}]
        self.assertEqual(slow_logs.slower_than_median(runs, 1.5), [False, False])
        self.assertEqual(slow_logs.slower_than_median([{"error": "failed"}], 1.5), [False])


class GatherAndPrune(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        t = self.tmp.name
        self.saved_root = slow_logs.SOURCE_WORK_ROOT
        slow_logs.SOURCE_WORK_ROOT = os.path.join(t, "shm")
        self.env = dict(os.environ, FERRY_TESTBED_DIR=os.path.join(t, "testbed"), FERRY_TESTBED="fbench")
        self.out = os.path.join(t, "out")

    def tearDown(self):
        slow_logs.SOURCE_WORK_ROOT = self.saved_root
        self.tmp.cleanup()

    def fake_run(self, mid):
        src = os.path.join(slow_logs.SOURCE_WORK_ROOT, mid)
        write(os.path.join(src, "dump.log"), "dump " + mid)
        write(os.path.join(src, "pagemap-1.img"), "image")
        write(os.path.join(src, "images", "criu", "restore.log"), "below " + mid)
        dst = os.path.join(self.env["FERRY_TESTBED_DIR"], "fbench", "b", "incoming", mid)
        write(os.path.join(dst, "restore.log"), "restore " + mid)
        write(os.path.join(dst, "lazy-pages.log"), "lazy " + mid)
        write(os.path.join(dst, "core-1.img"), "image")

    def test_gather_copies_both_hosts_logs_and_drops_the_source_images(self):
        self.fake_run(MID)
        logs = slow_logs.SlowLogs(self.out, 1.5, self.env)
        d = logs.gather({"migration_id": MID})
        self.assertEqual(d, os.path.join(self.out, "slow-runs", MID))
        self.assertEqual(sorted(os.listdir(os.path.join(d, "source"))), ["dump.log", "images"])
        with open(os.path.join(d, "source", "images", "criu", "restore.log")) as f:
            self.assertEqual(f.read(), "below " + MID)
        self.assertEqual(sorted(os.listdir(os.path.join(d, "destination"))), ["lazy-pages.log", "restore.log"])
        with open(os.path.join(d, "destination", "restore.log")) as f:
            self.assertEqual(f.read(), "restore " + MID)
        self.assertFalse(os.path.exists(os.path.join(slow_logs.SOURCE_WORK_ROOT, MID)))

    def test_nothing_to_gather_or_turned_off(self):
        self.assertIsNone(slow_logs.SlowLogs(self.out, 1.5, self.env).gather({"migration_id": MID}))
        self.fake_run(MID)
        off = slow_logs.SlowLogs(self.out, 0, self.env)
        self.assertIsNone(off.gather({"migration_id": MID}))
        self.assertEqual(off.prune({}, {}), 0)
        self.assertTrue(os.path.exists(os.path.join(slow_logs.SOURCE_WORK_ROOT, MID)))

    def test_prune_keeps_only_the_slow_runs(self):
        logs = slow_logs.SlowLogs(self.out, 1.5, self.env)
        runs, warm = [], []
        for i, ms in enumerate([30, 29, 128, 31, 45, 200]):
            mid = f"{i:032x}"
            self.fake_run(mid)
            r = {"downtime_ms": ms, "logs_dir": logs.gather({"migration_id": mid})}
            (warm if i == 5 else runs).append(r)
        kept = logs.prune({"ferry": {"1024": runs}}, {"ferry": warm})
        self.assertEqual(kept, 1)
        self.assertEqual(os.listdir(logs.root), [f"{2:032x}"])
        self.assertEqual(runs[2]["logs"], os.path.join(logs.root, f"{2:032x}"))
        for r in runs + warm:
            self.assertNotIn("logs_dir", r)
        self.assertEqual([("logs" in r) for r in runs], [False, False, True, False, False])

    def test_no_slow_run_leaves_no_directory(self):
        logs = slow_logs.SlowLogs(self.out, 1.5, self.env)
        self.fake_run(MID)
        runs = [{"downtime_ms": 30, "logs_dir": logs.gather({"migration_id": MID})}]
        self.assertEqual(logs.prune({"ferry": {"1024": runs}}, {}), 0)
        self.assertFalse(os.path.exists(logs.root))


if __name__ == "__main__":
    unittest.main()
