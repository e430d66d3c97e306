"""The logs of `migrator bench`'s slow runs. A Ferry run now and then takes
several times its usual downtime (a 60-100 ms dump phase among 8-9 ms ones),
and by then the migrator has removed its work directory and the testbed is
gone. So every Ferry run's logs are gathered as it ends (CRIU's dump.log on
the source, kept with `--keep-images`; restore.log and lazy-pages.log from
the destination daemon's session directory), and once every run is in,
only those of runs slower than FACTOR x the median of their method and
size stay, under OUT/slow-runs/<migration id>."""
import os
import shutil

from benchlib import ENV, TESTBED, sh

# The source's work root (migrator migrate --work-dir's default).
SOURCE_WORK_ROOT = "/dev/shm/ferry"


class SlowLogs:
    def __init__(self, out_dir, factor, env=ENV):
        self.root = os.path.join(out_dir, "slow-runs") if factor > 0 else None
        self.factor = factor
        self.env = env

    @property
    def on(self):
        return self.root is not None

    def gather(self, report):
        """Copies one Ferry run's logs into ROOT/<id>, and drops the source's
        kept images (a lazy dump's are small, but /dev/shm is memory).
        Returns the directory, or None if there was nothing to copy."""
        mid = report.get("migration_id")
        if not self.on or not mid:
            return None
        dest = os.path.join(self.root, mid)
        b_dir = sh(TESTBED, "dir", "b", env=self.env).stdout.strip()
        sources = [(os.path.join(SOURCE_WORK_ROOT, mid), "source"),
                   (os.path.join(b_dir, "incoming", mid), "destination")]
        copied = 0
        for src, side in sources:
            # A container's images (and CRIU's log) are in a directory below.
            for top, _, files in os.walk(src):
                for f in sorted(files):
                    path = os.path.join(top, f)
                    if f.endswith(".log") and os.path.isfile(path) and not os.path.islink(path):
                        to = os.path.join(dest, side, os.path.relpath(path, src))
                        os.makedirs(os.path.dirname(to), exist_ok=True)
                        shutil.copy2(path, to)
                        copied += 1
        shutil.rmtree(sources[0][0], ignore_errors=True)
        return dest if copied else None

    def prune(self, downtime_runs, warmups):
        """Keeps the logs of runs slower than factor x the median of their
        method and size (marking them with "logs"), removes the rest, and
        the warm-ups'. Returns how many runs' logs stay."""
        if not self.on:
            return 0
        kept = 0
        for sizes in downtime_runs.values():
            for runs in sizes.values():
                for r, slow in zip(runs, slower_than_median(runs, self.factor)):
                    logs = r.pop("logs_dir", None)
                    if logs and slow:
                        r["logs"] = logs
                        kept += 1
                    elif logs:
                        shutil.rmtree(logs, ignore_errors=True)
        for runs in warmups.values():
            for r in runs:
                if r.get("logs_dir"):
                    shutil.rmtree(r.pop("logs_dir"), ignore_errors=True)
        if os.path.isdir(self.root) and not os.listdir(self.root):
            os.rmdir(self.root)
        return kept


def slower_than_median(runs, factor):
    """For each run, whether its downtime exceeds factor x the median of the
    runs that worked (the lower median for an even count, so that one slow
    run of two is not its own yardstick). Failed runs are never "slow"."""
    times = sorted(r["downtime_ms"] for r in runs if "downtime_ms" in r)
    if not times:
        return [False] * len(runs)
    median = times[(len(times) - 1) // 2]
    return ["downtime_ms" in r and r["downtime_ms"] > factor * median for r in runs]
