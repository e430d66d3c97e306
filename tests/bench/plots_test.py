#!/usr/bin/python3
"""`migrator bench`'s plots (migrator/bench/plots.py) on made-up runs: a
method whose every run failed is left out of the downtime plot, and a bench
where every run failed draws no downtime plot rather than failing (it used
to raise from matplotlib's log axis, and the bench lost its results.json)."""
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "migrator", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

# Debian's python3 and matplotlib (examples/setup.sh --bench), as migrator
# bench runs them.
import plots  # noqa: E402
import results  # noqa: E402


def run(downtime_ms):
    return {"downtime_ms": downtime_ms, "phases_ms": {"post_copy": 1000.0}, "pages_total": 1 << 18}


class DowntimePlot(unittest.TestCase):
    def draw(self, downtime):
        summary = results.summarize({"downtime": downtime, "faults": {}})
        with tempfile.TemporaryDirectory() as d:
            drawn = plots.draw_all(d, summary)
            return drawn, sorted(os.listdir(d))

    def test_every_run_failed_draws_no_downtime_plot(self):
        drawn, files = self.draw({"ferry": {"1024": [{"error": "restore failed"}, {"error": "restore failed"}]}})
        self.assertNotIn("downtime_vs_size.png", drawn)
        self.assertNotIn("downtime_vs_size.png", files)

    def test_a_method_that_failed_is_left_out(self):
        drawn, files = self.draw({"ferry": {"1024": [run(20.0), run(22.0)]},
                                  "bare_process": {"1024": [{"error": "dump failed"}]}})
        self.assertIn("downtime_vs_size.png", drawn)
        self.assertIn("downtime_vs_size.png", files)


if __name__ == "__main__":
    unittest.main()
