"""The container workload of `migrator bench`: memload inside a podman or
docker container on the testbed's host a (its own engine instances), moved
to host b by Ferry, and the same memory as a bare process tree moved by
Ferry (containers should cost no more than processes), and, for podman, its
own `container checkpoint --export` + copy + `container restore --import`,
for docker, its own `docker checkpoint create` + copy + `docker start
--checkpoint` into a container created on b beforehand."""
import os
import shutil
import subprocess
import tempfile
import time

import methods
from benchlib import BUILD, REPO, sh, testbed


class ContainerBench:
    def __init__(self, engine, network=""):
        self.engine = engine
        self.network = network  # empty: the engine's default
        self.image = "localhost/ferry-bench:latest" if engine == "podman" else "ferry-bench:latest"
        self.work = tempfile.mkdtemp(prefix="ferry-bench-ctr.")
        self.serial = 0

    def ctr(self, host, *args, **kw):
        return testbed("exec", host, self.engine, *args, **kw)

    def prepare(self):
        """After `testbed up --engines`: a Debian image on both hosts."""
        tar = os.path.join(self.work, "rootfs.tar")
        sh(os.path.join(REPO, "examples", "image.sh"), tar, timeout=900)
        for h in ("a", "b"):
            self.ctr(h, "import", tar, self.image, timeout=300)
        os.unlink(tar)

    def cleanup(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def run_args(self, name, mib):
        network = ["--network", self.network] if self.network else []
        return ["--name", name, *network, "-v", f"{os.path.join(BUILD, 'examples')}:/ferry:ro", self.image,
                "/ferry/memload", "--mib", str(mib), "--child-mib", "0", "--threads", "1"]

    def start(self, mib):
        """A memload container on a, ready; returns its name."""
        self.serial += 1
        name = f"bench{self.serial}"
        self.ctr("a", "run", "-d", *self.run_args(name, mib))
        deadline = time.time() + 300
        while time.time() < deadline:
            if "ready parent" in self.ctr("a", "logs", name, check=False).stdout:
                return name
            time.sleep(0.2)
        raise RuntimeError(f"container {name} did not get ready")

    def remove(self, name):
        for h in ("a", "b"):
            self.ctr(h, "rm", "-f", name, check=False, timeout=120)

    def socket_table(self, name):
        """The container's TCP hash table size: positive if its network namespace has a table of
        its own (pagesrv --own-netns-socket-tables), negative if it walks the host's."""
        pid = self.ctr("a", "inspect", name, "--format", "{{.State.Pid}}").stdout.strip()
        r = subprocess.run(["nsenter", "-t", pid, "-n", "cat", "/proc/sys/net/ipv4/tcp_ehash_entries"],
                           capture_output=True, text=True, timeout=30)
        return int(r.stdout) if r.returncode == 0 and r.stdout.strip().lstrip("-").isdigit() else None

    def ferry(self, mib):
        name = self.start(mib)
        try:
            table = self.socket_table(name)
            out = methods.migrate_a_to_b("--engine", self.engine, "--container", name, timeout=900)
            out["source_tcp_ehash_entries"] = table
            return out
        finally:
            self.remove(name)

    def bare(self, mib):
        return methods.ferry(mib)

    def podman_checkpoint(self, mib):
        """podman's own stop-and-copy between the hosts."""
        name = self.start(mib)
        export = os.path.join(self.work, f"{name}.tar")
        copy = os.path.join(self.work, f"{name}-copy.tar")
        try:
            t0 = time.monotonic()
            self.ctr("a", "container", "checkpoint", "--export", export, "--compress", "none", name, timeout=900)
            t1 = time.monotonic()
            shutil.copyfile(export, copy)  # the network copy a real migration makes
            t2 = time.monotonic()
            self.ctr("b", "container", "restore", "--import", copy, timeout=900)
            t3 = time.monotonic()
            return {"downtime_ms": (t3 - t0) * 1e3,
                    "breakdown_ms": {"dump": (t1 - t0) * 1e3, "images": (t2 - t1) * 1e3,
                                     "restore": (t3 - t2) * 1e3}}
        finally:
            for f in (export, copy):
                if os.path.exists(f):
                    os.unlink(f)
            self.remove(name)

    def docker_checkpoint(self, mib):
        """docker's own stop-and-copy between the hosts: the container is
        created on b beforehand (outside the downtime, in its favour). dockerd
        takes a checkpoint only from its own container directory (`start
        --checkpoint-dir` is refused: "custom checkpointdir is not supported"),
        so the copy goes from a's to the new container's on b."""
        name = self.start(mib)

        def checkpoints(host):
            root = testbed("dir", host).stdout.strip()
            cid = self.ctr(host, "inspect", "-f", "{{.Id}}", name).stdout.strip()
            return os.path.join(root, "docker", "data", "containers", cid, "checkpoints")

        try:
            self.ctr("b", "create", *self.run_args(name, mib), timeout=300)
            src, dst = os.path.join(checkpoints("a"), "cp"), os.path.join(checkpoints("b"), "cp")
            t0 = time.monotonic()
            self.ctr("a", "checkpoint", "create", name, "cp", timeout=900)
            t1 = time.monotonic()
            shutil.copytree(src, dst)  # the network copy a real migration makes
            t2 = time.monotonic()
            self.ctr("b", "start", "--checkpoint", "cp", name, timeout=900)
            t3 = time.monotonic()
            if self.ctr("b", "inspect", "-f", "{{.State.Running}}", name).stdout.strip() != "true":
                raise RuntimeError(f"docker start --checkpoint left {name} not running on b")
            return {"downtime_ms": (t3 - t0) * 1e3,
                    "breakdown_ms": {"dump": (t1 - t0) * 1e3, "images": (t2 - t1) * 1e3,
                                     "restore": (t3 - t2) * 1e3}}
        finally:
            self.remove(name)
