#!/usr/bin/env python3
"""examples/bench/fault_sleeps.py on a made-up scheduler trace: a fault's
sleep splits at the first handler to run (or the fault, if one runs
already) and at the thread's wake, a sleep of a thread that rarely
sleeps is not a touching thread's, a sleep
no lp-handler served is left out, and each CPU's share of the sleeps'
time is measured against the faulting thread's CPU."""
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

import fault_sleeps  # noqa: E402


def switch(cpu, t, prev, prev_pid, state, nxt, next_pid):
    return (f"[{cpu:03d}] {t:.6f}: sched:sched_switch: prev_comm={prev} prev_pid={prev_pid} "
            f"prev_prio=120 prev_state={state} ==> next_comm={nxt} next_pid={next_pid} next_prio=120\n")


def wakeup(cpu, t, comm, pid, target):
    return f"[{cpu:03d}] {t:.6f}: sched:sched_wakeup: comm={comm} pid={pid} prio=120 target_cpu={target:03d}\n"


def fault(t0, to_handler, to_wake, to_run, cpu=0):
    """One fault of memload (pid 10) on `cpu`, served by lp-handler0 (pid 20)
    there; the other CPU runs the stager (pid 30) throughout."""
    h, w, r = t0 + to_handler, t0 + to_handler + to_wake, t0 + to_handler + to_wake + to_run
    return [
        switch(cpu, t0, "memload", 10, "S", "swapper/0", 0),
        switch(cpu, h, "swapper/0", 0, "R", "lp-handler0", 20),
        wakeup(cpu, w, "memload", 10, cpu),
        switch(cpu, r, "lp-handler0", 20, "R", "memload", 10),
    ]


class FaultSleeps(unittest.TestCase):
    def test_split_and_shares(self):
        lines = [switch(1, 0.5, "swapper/1", 0, "R", "stager", 30)]
        t = 1.0
        for _ in range(10):
            lines += fault(t, 4e-6, 16e-6, 2e-6)
            t += 100e-6
        # A sleep no handler served (the thread waits on something else).
        lines += [switch(0, 2.0, "memload", 10, "S", "swapper/0", 0),
                  wakeup(1, 2.5, "memload", 10, 0),
                  switch(0, 2.5, "swapper/0", 0, "R", "memload", 10)]
        # Another memload thread that sleeps now and then: not a touching thread.
        lines += [switch(0, 2.6, "memload", 11, "S", "lp-handler0", 20),
                  wakeup(0, 2.7, "memload", 11, 0),
                  switch(0, 2.7, "lp-handler0", 20, "R", "memload", 11)]
        lines.append(switch(1, 3.0, "stager", 30, "S", "swapper/1", 0))
        sleeps, busy, _ = fault_sleeps.split_sleeps(lines, "memload")
        self.assertEqual(len(sleeps), 10)
        for s in sleeps:
            self.assertAlmostEqual((s["handler"] - s["t0"]) * 1e6, 4, places=3)
            self.assertAlmostEqual((s["woken"] - s["handler"]) * 1e6, 16, places=3)
            self.assertAlmostEqual((s["t1"] - s["woken"]) * 1e6, 2, places=3)
        (band,) = [b for b in fault_sleeps.bands(sleeps, busy) if b["band"] == "p40-p60"]
        self.assertEqual(band["sleeps"], 2)
        self.assertAlmostEqual(band["to_handler_us"], 4, places=3)
        self.assertAlmostEqual(band["to_wake_us"], 16, places=3)
        self.assertAlmostEqual(band["to_run_us"], 2, places=3)
        self.assertEqual(band["handler_on_fault_cpu"], 1.0)
        self.assertEqual(band["woken_elsewhere"], 0.0)
        share = band["share"]
        # On the fault's CPU: idle until the handler (4 of 22 µs), then the handler.
        self.assertAlmostEqual(share[("the fault's CPU", "idle")], 4 / 22, places=3)
        self.assertAlmostEqual(share[("the fault's CPU", "lp-handler0")], 18 / 22, places=3)
        # The other CPU ran the stager throughout.
        self.assertAlmostEqual(share[("CPU 1", "stager")], 1.0, places=3)

    def test_a_thread_woken_onto_another_cpu(self):
        lines = [switch(1, 0.5, "swapper/1", 0, "R", "lp-handler1", 21)]
        lines += [switch(0, 1.0, "memload", 10, "S", "swapper/0", 0),
                  wakeup(1, 1.00003, "memload", 10, 1),
                  switch(1, 1.00004, "lp-handler1", 21, "R", "memload", 10)]
        sleeps, busy, _ = fault_sleeps.split_sleeps(lines, "memload")
        # lp-handler1 was already running on CPU 1 when the fault came: it
        # counts from the fault on.
        self.assertEqual(len(sleeps), 1)
        self.assertEqual(sleeps[0]["handler"], 1.0)
        self.assertEqual(sleeps[0]["handler_cpu"], 1)
        lines = [switch(0, 1.0, "memload", 10, "S", "swapper/0", 0),
                 switch(1, 1.00001, "swapper/1", 0, "R", "lp-handler1", 21),
                 wakeup(1, 1.00003, "memload", 10, 1),
                 switch(1, 1.00004, "lp-handler1", 21, "R", "memload", 10)]
        sleeps, busy, _ = fault_sleeps.split_sleeps(lines, "memload")
        self.assertEqual(len(sleeps), 1)
        (band,) = [b for b in fault_sleeps.bands(sleeps * 10, busy) if b["band"] == "p40-p60"]
        self.assertEqual(band["handler_on_fault_cpu"], 0.0)
        self.assertEqual(band["woken_elsewhere"], 1.0)


if __name__ == "__main__":
    unittest.main()
