#!/usr/bin/env python3
"""`migrator bench`'s arithmetic (migrator/bench/results.py) on made-up runs:
the figures it reports are ratios of what was measured, nothing else."""
import io
import math
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "migrator", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))
sys.path.insert(0, os.path.join(REPO, "examples", "redis"))

import results  # noqa: E402

GIB = 1 << 30


def memload_run(downtime_ms, post_copy_ms, pages=GIB // 4096):
    return {"downtime_ms": downtime_ms, "phases_ms": {"post_copy": post_copy_ms}, "pages_total": pages}


class TotalOverRawLink(unittest.TestCase):
    def test_memload_total_over_the_link(self):
        # The link carries 1 GiB in 1.0737 s at 1.0 GB/s: a move of 50 + 1561.0 ms is 1.5x that.
        raw = {"downtime": {"ferry": {"1024": [memload_run(50, 1561.0), memload_run(40, 1571.0),
                                               {"error": "failed"}]}},
               "faults": {}, "raw_link": [{"gbytes_per_s": 0.9}, {"gbytes_per_s": 1.0}, {"gbytes_per_s": 1.1},
                                          {"error": "sink did not start"}]}
        s = results.summarize(raw)
        # Links recorded before they were measured per size stand for every size.
        self.assertEqual(s["raw_link_gbytes_per_s"]["any"]["p50"], 1.0)
        self.assertEqual(s["raw_link_gbytes_per_s"]["any"]["n"], 3)
        over = s["ferry_total_over_raw_link"]["1024"]
        self.assertEqual(over["n"], 2)
        self.assertTrue(math.isclose(over["p50"], 1.611 / (GIB / 1e9), rel_tol=1e-9), over)
        self.assertEqual(s["raw_link_fabric"], "tcp")  # links measured before the fabric was recorded

    def test_each_size_against_the_link_at_its_size(self):
        # 1 GiB over a 1.0 GB/s link, 4 GiB over a 0.5 GB/s one: both moves take 1.5x their link.
        raw = {"downtime": {"ferry": {"1024": [memload_run(50, 1561.0)],
                                      "4096": [memload_run(50, 4 * 2 * 1073.741824 * 1.5 - 50, pages=4 * GIB // 4096)],
                                      "256": [memload_run(50, 1000, pages=GIB // 16384)]}},
               "faults": {}, "raw_link": [{"gbytes_per_s": 1.0, "mib": 1024}, {"gbytes_per_s": 0.5, "mib": 4096},
                                          {"gbytes_per_s": 0.6, "mib": 4096}, {"gbytes_per_s": 0.4, "mib": 4096},
                                          {"error": "failed", "mib": 256}]}
        s = results.summarize(raw)
        self.assertEqual(sorted(s["raw_link_gbytes_per_s"]), ["1024", "4096"])
        self.assertEqual(s["raw_link_gbytes_per_s"]["4096"]["p50"], 0.5)
        over = s["ferry_total_over_raw_link"]
        self.assertTrue(math.isclose(over["1024"]["p50"], 1.611 / (GIB / 1e9), rel_tol=1e-9), over)
        self.assertTrue(math.isclose(over["4096"]["p50"], 1.5, rel_tol=1e-9), over)
        # 256 MiB's link failed: no ratio against another size's link.
        self.assertNotIn("256", over)

    def test_moves_set_against_the_first_send_and_the_fastest_apart(self):
        # 4 GiB: the first send (from filled memory) 0.5 GB/s, the fastest 1.0.
        raw = {"downtime": {"ferry": {"4096": [memload_run(50, 4 * 2 * 1073.741824 * 1.5 - 50,
                                                           pages=4 * GIB // 4096)]}},
               "faults": {}, "raw_link": [{"gbytes_per_s": 0.5, "warm_gbytes_per_s": 1.0, "mib": 4096},
                                          {"gbytes_per_s": 0.3, "mib": 1024}]}
        s = results.summarize(raw)
        self.assertEqual(s["raw_link_gbytes_per_s"]["4096"]["p50"], 0.5)
        self.assertEqual(s["raw_link_warm_gbytes_per_s"]["4096"]["p50"], 1.0)
        # Links recorded before warm_gbytes_per_s existed have no warm figure.
        self.assertNotIn("1024", s["raw_link_warm_gbytes_per_s"])
        self.assertTrue(math.isclose(s["ferry_total_over_raw_link"]["4096"]["p50"], 1.5, rel_tol=1e-9))
        self.assertTrue(math.isclose(s["ferry_total_over_warm_link"]["4096"]["p50"], 3.0, rel_tol=1e-9))
        out = io.StringIO()
        results.print_table(s, out)
        self.assertIn("a move's memory state), GB/s p50 (p99): 1024 MiB 0.300 (0.300), 4096 MiB 0.500 (0.500)",
                      out.getvalue())
        self.assertIn("/ (memory moved / the fastest send at its size), p50 (p99): 4096 MiB 3.00 (3.00)",
                      out.getvalue())

    def test_the_link_is_the_fabric_moved_over(self):
        raw = {"downtime": {"ferry": {"1024": [memload_run(50, 1000)]}}, "faults": {},
               "raw_link": [{"error": "failed"}, {"gbytes_per_s": 4.0, "fabric": "shm"}]}
        s = results.summarize(raw)
        self.assertEqual(s["raw_link_fabric"], "shm")
        self.assertEqual(s["raw_link_gbytes_per_s"]["any"]["p50"], 4.0)

    def test_container_socket_tables_are_counted(self):
        own, host = memload_run(70, 1000), memload_run(80, 1000)
        own["source_tcp_ehash_entries"], host["source_tcp_ehash_entries"] = 16384, -262144
        raw = {"downtime": {"ferry": {"1024": [own, host, dict(own), memload_run(75, 1000)]}}, "faults": {}}
        s = results.summarize(raw)
        self.assertEqual(s["container_socket_tables"], {"own": 2, "host": 1})
        self.assertNotIn("container_socket_tables",
                         results.summarize({"downtime": {"ferry": {"1024": [memload_run(50, 1000)]}}, "faults": {}}))

    def test_no_link_no_ratio(self):
        raw = {"downtime": {"ferry": {"1024": [memload_run(50, 1000)]}}, "faults": {}}
        s = results.summarize(raw)
        self.assertNotIn("raw_link_gbytes_per_s", s)
        self.assertNotIn("ferry_total_over_raw_link", s)

    def test_redis_uses_the_bytes_it_moved(self):
        # Half a GiB moved in 0.1 + 0.9 s over a 0.5 GB/s link (1.0737 s for it): 0.93x.
        run = {"downtime_ms": 100.0, "post_copy_ms": 900.0, "moved_bytes": GIB // 2, "total_ms": 1000.0}
        raw = {"downtime": {"ferry_idle": {"1024": [run]}, "ferry": {"1024": [dict(run, post_copy_ms=1900.0)]}}}
        r = results.redis_summary(raw, {"1024": {"p50": 0.5, "p99": 0.5, "n": 1}})
        self.assertAlmostEqual(r["methods"]["ferry_idle"]["total_over_raw_link"]["p50"], 1.0 / (GIB / 1e9), places=9)
        self.assertAlmostEqual(r["methods"]["ferry"]["total_over_raw_link"]["p50"], 2.0 / (GIB / 1e9), places=9)
        self.assertNotIn("total_over_raw_link", results.redis_summary(raw)["methods"]["ferry"])
        self.assertNotIn("total_over_raw_link",
                         results.redis_summary(raw, {"512": {"p50": 0.5, "p99": 0.5, "n": 1}})["methods"]["ferry"])


class CpuPerGib(unittest.TestCase):
    def test_each_side_over_the_gib_moved(self):
        # 2 GiB moved: 1000 ms of the source's serving and 3000 of lazy-pages are 500 and 1500 per GiB.
        run = dict(memload_run(20.0, 2000.0, pages=2 * GIB // 4096), source_serve_cpu_ms=1000.0,
                   lazy_pages_cpu_ms=3000.0)
        s = results.summarize({"downtime": {"ferry": {"2048": [run]}}})
        cpu = s["cpu_ms_per_gib"]["ferry"]["2048"]
        self.assertAlmostEqual(cpu["source"]["p50"], 500.0)
        self.assertAlmostEqual(cpu["destination"]["p50"], 1500.0)
        out = io.StringIO()
        results.print_table(s, out)
        self.assertIn("2048 MiB 500 (500) / 1500 (1500)", out.getvalue())

    def test_runs_without_an_account_give_no_figure(self):
        # An older migrator (no CPU account) or a Redis run's figures without it.
        s = results.summarize({"downtime": {"ferry": {"1024": [memload_run(20.0, 1000.0)]}}})
        self.assertNotIn("cpu_ms_per_gib", s)
        run = {"downtime_ms": 50.0, "post_copy_ms": 900.0, "moved_bytes": GIB, "lazy_pages_cpu_ms": None,
               "source_serve_cpu_ms": None}
        r = results.redis_summary({"downtime": {"ferry": {"1024": [run]}}})
        self.assertNotIn("destination_cpu_ms_per_gib", r["methods"]["ferry"])


class ClientPhases(unittest.TestCase):
    def replies(self, rows):
        import tempfile
        f = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
        self.addCleanup(os.unlink, f.name)
        for t, lat in rows:
            f.write(f"{t} {lat} get 0\n")  # time, latency, and two fields these figures do not read
        f.close()
        return f.name

    def test_before_ends_where_the_move_began(self):
        import redis_lab
        ms = 1_000_000
        # 100 replies of 100 us before the move began at t=100 ms, 50 of 900 us
        # while it prepared, a 60 ms gap, then 100 of 300 us.
        rows = [(i * ms, 100_000) for i in range(100)]
        rows += [(100 * ms + i * ms, 900_000) for i in range(50)]
        rows += [(210 * ms + i * ms, 300_000) for i in range(100)]
        path = self.replies(rows)
        c = redis_lab.client_phases(path, 1000.0, started_ns=100 * ms)
        self.assertAlmostEqual(c["before_p99_us"], 100.0)
        self.assertAlmostEqual(c["preparing_p99_us"], 900.0)
        self.assertEqual(c["preparing_replies"], 50)
        self.assertAlmostEqual(c["after_p99_us"], 300.0)
        # Without the moment the move began, "before" takes the preparation in.
        self.assertAlmostEqual(redis_lab.client_phases(path, 1000.0)["before_p99_us"], 900.0)

    def test_the_switchover_is_the_resume_not_a_longer_stall_after_it(self):
        import redis_lab
        ms = 1_000_000
        # Replies of 100 us, the switchover's 40 ms gap (resumed at 140 ms),
        # replies of 400 us for 300 ms of post-copy with a 200 ms stall in
        # it, then replies of 100 us again.
        rows = [(i * ms, 100_000) for i in range(100)]
        rows += [(140 * ms + i * ms, 400_000) for i in range(100)]
        rows += [(440 * ms + i * ms, 100_000) for i in range(1000)]
        path = self.replies(rows)
        c = redis_lab.client_phases(path, 300.0, resumed_ns=140 * ms)
        self.assertAlmostEqual(c["switchover_gap_ms"], 41.0)
        self.assertAlmostEqual(c["longest_gap_after_ms"], 201.0)
        self.assertAlmostEqual(c["after_p99_us"], 400.0)
        self.assertAlmostEqual(c["before_p99_us"], 100.0)
        # Anchored on the longest gap, the window would start at the stall:
        # the post-copy's replies would count as before it, the ones after
        # it as during.
        wrong = redis_lab.client_phases(path, 300.0)
        self.assertAlmostEqual(wrong["switchover_gap_ms"], 201.0)
        self.assertAlmostEqual(wrong["after_p99_us"], 100.0)


if __name__ == "__main__":
    unittest.main()
