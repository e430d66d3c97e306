#!/usr/bin/env python3
"""CRIU's own time for named steps of each move a `migrator bench --slow-logs
FACTOR` run kept, from the timestamps in its dump.log and restore.log. The
markers are CRIU's info lines: run the bench with FERRY_CRIU_LOG_LEVEL=3
(Ferry's default, 2, logs warnings and errors only).

    examples/bench/criu_steps.py OUT_DIR [OUT_DIR ...]

Prints, per method of each bench, the p50 and the range of every step found
(a step whose markers a log lacks is left out for that move). The steps are
where a container's CRIU work differs from a bare process's; see
engines/README.md for what changed them."""
import glob
import json
import os
import re
import statistics
import sys

STAMP = re.compile(r"^\((\d+)\.(\d+)\)\s*(.*)")

# name, log, start marker, end marker: the span from the last start line
# before the first end line to that end line.
STEPS = [
    ("dump: cgroup collection", "dump", "Dumping cgroups for thread", "is root one"),
    ("dump: namespaces", "dump", "Dump UTS namespace", "Namespaces dump complete"),
    ("restore: goes on -> post-restore", "restore", "The restore goes on", "Running post-restore scripts"),
    ("restore: cgroup set-up", "restore", "Preparing cgroups yard", "Running pre-restore scripts"),
    ("restore: root task's namespaces", "restore", "Wait until namespaces are created", "timens:"),
    ("restore: mount namespace", "restore", "mnt: Restoring mount namespace", "Running post-setup-namespaces"),
]


def stamped(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = STAMP.match(line)
            if m:
                out.append((int(m.group(1)) * 1000 + int(m.group(2)) / 1000, m.group(3)))
    return out


def span(lines, start, end):
    ends = [i for i, (_, text) in enumerate(lines) if end in text]
    if not ends:
        return None
    starts = [i for i, (_, text) in enumerate(lines[: ends[0]]) if start in text]
    if not starts:
        return None
    return lines[ends[0]][0] - lines[starts[-1]][0]


def logs_of(run_dir):
    """The dump.log and restore.log a kept run holds (either may be missing)."""
    found = {}
    for kind, pattern in (("dump", "source/**/dump.log"), ("restore", "destination/**/restore.log")):
        paths = sorted(glob.glob(os.path.join(run_dir, pattern), recursive=True))
        if paths:
            found[kind] = stamped(paths[0])
    return found


def steps_of(out_dir):
    """{method: {step: [ms per move]}} for the moves OUT_DIR kept."""
    results = json.load(open(os.path.join(out_dir, "results.json")))
    method_of = {}
    for method, sizes in results["raw"]["downtime"].items():
        for runs in sizes.values():
            for r in runs:
                if r.get("migration_id"):
                    method_of[r["migration_id"]] = method
    out = {}
    for run_dir in sorted(glob.glob(os.path.join(out_dir, "slow-runs", "*"))):
        method = method_of.get(os.path.basename(run_dir))
        if not method:
            continue  # a warm-up's
        logs = logs_of(run_dir)
        for name, kind, start, end in STEPS:
            ms = span(logs[kind], start, end) if kind in logs else None
            if ms is not None:
                out.setdefault(method, {}).setdefault(name, []).append(ms)
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for out_dir in argv[1:]:
        print(out_dir)
        for method, steps in steps_of(out_dir).items():
            print(f"  {method}")
            for name, _, _, _ in STEPS:
                v = steps.get(name)
                if v:
                    print(f"    {name:36} p50 {statistics.median(v):6.2f} ms"
                          f"  ({min(v):.2f}-{max(v):.2f}, {len(v)} moves)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
