#!/usr/bin/env python3
"""`migrator bench` stopped by SIGTERM or SIGHUP (timeout(1), a service
stop, a closed terminal) tears its testbed down as Ctrl-C does, and exits
128 + the signal: nothing it started outlives it. And a second bench on
the host refuses to start rather than tear down the first one's testbed."""
import os
import signal
import sys
import tempfile
import types
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "migrator", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

sys.modules.setdefault("matplotlib", types.ModuleType("matplotlib"))  # only its presence is checked first
import bench  # noqa: E402
import benchlib  # noqa: E402


class Stop(unittest.TestCase):
    def setUp(self):
        self.saved = {n: signal.getsignal(n) for n in (signal.SIGTERM, signal.SIGHUP)}
        self.calls = []
        self.saved_testbed, self.saved_measure = bench.testbed, bench.measure
        bench.testbed = lambda *a, **kw: self.calls.append(("testbed",) + a)
        self.tmp = tempfile.TemporaryDirectory()
        self.saved_lock_path = benchlib.take_bench_lock.__defaults__
        benchlib.take_bench_lock.__defaults__ = (os.path.join(self.tmp.name, "lock", "bench.lock"),)

    def tearDown(self):
        bench.testbed, bench.measure = self.saved_testbed, self.saved_measure
        benchlib.take_bench_lock.__defaults__ = self.saved_lock_path
        self.tmp.cleanup()
        for n, h in self.saved.items():
            signal.signal(n, h)

    def stopped_mid_run(self, signum):
        def measure(*_a, **_kw):
            self.calls.append(("measure",))
            os.kill(os.getpid(), signum)
            self.fail("the signal did not stop the run")
        bench.measure = measure
        with tempfile.TemporaryDirectory() as out:
            with self.assertRaises(SystemExit) as stopped:
                bench.main(["--sizes", "256M", "--runs", "1", "--warmup", "0", "--methods", "ferry",
                            "--fault-fabrics", "", "--out", out])
        self.assertEqual(stopped.exception.code, 128 + signum)
        self.assertEqual(self.calls, [("testbed", "down"), ("testbed", "up"), ("measure",), ("testbed", "down")])

    def test_sigterm_tears_the_testbed_down(self):
        self.stopped_mid_run(signal.SIGTERM)

    def test_sighup_tears_the_testbed_down(self):
        self.stopped_mid_run(signal.SIGHUP)

    def test_a_second_bench_refuses_to_start(self):
        held = benchlib.take_bench_lock()
        try:
            bench.measure = lambda *_a, **_kw: self.fail("the second bench measured")
            with tempfile.TemporaryDirectory() as out:
                code = bench.main(["--sizes", "256M", "--runs", "1", "--methods", "ferry", "--fault-fabrics", "",
                                   "--out", out])
            self.assertEqual(code, 2)
            self.assertEqual(self.calls, [], "the second bench touched the testbed")
        finally:
            held.close()
        # Once the first is gone, the next one may run.
        benchlib.take_bench_lock().close()


if __name__ == "__main__":
    unittest.main()
