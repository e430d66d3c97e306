#!/usr/bin/env python3
"""examples/bench/criu_steps.py on a made-up bench directory: each step is
the span from its last start line before its first end line, per method,
and a warm-up's or a move's missing markers leave nothing."""
import json
import os
import shutil
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "examples", "bench"))

import criu_steps  # noqa: E402


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


DUMP = """(00.001000) cg: Dumping cgroups for thread 10
(00.001100) cg: Set 1 is criu one
(00.020000) cg: Dumping cgroups for thread 11
(00.020500) cg: adding cgroup /proc/self/fd/3/a
(00.023250) cg: Set 2 is root one
(00.024000) Dump UTS namespace 12 via 11
(00.024600) Namespaces dump complete
"""
RESTORE = """(00.050000) The restore goes on
(00.051000) cg: Preparing cgroups yard (cgroups restore mode 0x4)
(00.051500) Running pre-restore scripts
(00.052000) Wait until namespaces are created
(00.052400) 1: timens: monotonic -1 1
(00.053000) 1: mnt: Restoring mount namespace
(00.060000) Running post-setup-namespaces scripts
(00.070000) Running post-restore scripts
"""


class Steps(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        runs = {"ferry": {"1024": [{"migration_id": "aa"}, {"migration_id": "bb"}]},
                "bare_process": {"1024": [{"migration_id": "cc"}]}}
        write(os.path.join(self.dir, "results.json"), json.dumps({"raw": {"downtime": runs}}))
        write(os.path.join(self.dir, "slow-runs/aa/source/images/dump.log"), DUMP)
        write(os.path.join(self.dir, "slow-runs/aa/destination/restore.log"), RESTORE)
        # A slower cgroup collection in the second move.
        write(os.path.join(self.dir, "slow-runs/bb/source/images/dump.log"),
              DUMP.replace("(00.023250) cg: Set 2", "(00.025000) cg: Set 2"))
        # A bare process: only its dump's markers, the collection short.
        write(os.path.join(self.dir, "slow-runs/cc/source/dump.log"),
              "(00.000100) cg: Dumping cgroups for thread 5\n(00.000200) cg: Set 1 is root one\n")
        # A warm-up's logs: not in results.json's runs.
        write(os.path.join(self.dir, "slow-runs/dd/source/images/dump.log"), DUMP)

    def test_spans_per_method(self):
        steps = criu_steps.steps_of(self.dir)
        self.assertEqual(sorted(steps), ["bare_process", "ferry"])
        ferry = steps["ferry"]
        # From the thread dumped after CRIU's own set, not from CRIU's own.
        self.assertEqual([round(v, 3) for v in ferry["dump: cgroup collection"]], [3.25, 5.0])
        self.assertEqual([round(v, 3) for v in ferry["dump: namespaces"]], [0.6, 0.6])
        self.assertEqual([round(v, 3) for v in ferry["restore: goes on -> post-restore"]], [20.0])
        self.assertEqual([round(v, 3) for v in ferry["restore: cgroup set-up"]], [0.5])
        self.assertEqual([round(v, 3) for v in ferry["restore: root task's namespaces"]], [0.4])
        self.assertEqual([round(v, 3) for v in ferry["restore: mount namespace"]], [7.0])
        self.assertEqual({k: [round(v, 3) for v in vs] for k, vs in steps["bare_process"].items()},
                         {"dump: cgroup collection": [0.1]})

    def test_a_step_without_its_end_is_left_out(self):
        lines = criu_steps.stamped(os.path.join(self.dir, "slow-runs/aa/source/images/dump.log"))
        self.assertIsNone(criu_steps.span(lines, "Dump UTS namespace", "never logged"))
        self.assertIsNone(criu_steps.span(lines, "never logged", "Namespaces dump complete"))


if __name__ == "__main__":
    unittest.main()
