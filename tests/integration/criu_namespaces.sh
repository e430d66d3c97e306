#!/usr/bin/env bash
# CRIU's dump and restore of UTS and IPC namespaces (examples/criu-patches/
# 0018 and 0019), on the real CRIU: a 64 MiB memload in its own PID, UTS,
# IPC and network namespaces, whose hostname, domainname, an IPC sysctl, a
# SysV shared memory segment, a message queue and two network sysctls were
# changed after it started, is dumped (the tree stops) and restored the way
# Ferry's destination does, waiting on --restore-wait-fd first.
#  1. CRIU dumped the UTS, IPC and network namespaces in its own process,
#     not in a forked child each (0019).
#  2. The restore wrote the UTS sysctls from the namespace's restorer, with
#     no worker (0018).
#  3. The restored tree has the hostname, domainname, msgmax, segment (with
#     its bytes) and queue (with its message) it had; its memory verifies.
#  4. The restore made the tree's network namespace while it waited, and
#     the root task entered that one (0023): a namespace of its own, with
#     the links and the sysctls (ping_group_range, unix max_dgram_qlen) the
#     tree had.
#  5. While it waited, the restore also made the empty mount namespace
#     mount-v2 starts from (0028), and dropped it with its roots yard's
#     directory: this tree has no mount namespace of its own. A restore
#     called off before it (its wait fd closed) made and removed them too.
# The copies of /dev and /sys/fs/cgroup a container's dump reads through a
# clone of one mount (0020) are checked by containers.sh.
# Nothing here needs the testbed: CRIU runs on this machine directly.
source "$(dirname "$0")/lib.sh"

out="$work/memload.out"
start_local "$out" --uts --ipc --net

in_ns() { nsenter -t "$pid" -u -i -n "$@"; }
# The namespace's state, as a line per item: what must come back.
ns_state() {
  in_ns python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("hostname", os.uname().nodename)
print("domainname", open("/proc/sys/kernel/domainname").read().strip())
print("msgmax", open("/proc/sys/kernel/msgmax").read().strip())
shm = open("/proc/sysvipc/shm").read().split("\n")[1:]
print("shm", [" ".join(l.split()[:4]) for l in shm if l.strip()])
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0x46455259, 4096, 0)
assert shmid >= 0, "no segment"
addr = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
print("shm bytes", ctypes.string_at(addr, 16))
libc.shmdt(ctypes.c_void_p(addr))
msg = open("/proc/sysvipc/msg").read().split("\n")[1:]
print("msg", [" ".join(l.split()[:5]) for l in msg if l.strip()])
print("ping_group_range", open("/proc/sys/net/ipv4/ping_group_range").read().split())
print("max_dgram_qlen", open("/proc/sys/net/unix/max_dgram_qlen").read().strip())
import subprocess
print("links", subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.strip())
PY
}
# Changed after the start, so only CRIU can bring them back.
in_ns sh -c 'echo ferry-uts-test > /proc/sys/kernel/hostname &&
  echo ferry.domain > /proc/sys/kernel/domainname && echo 12345 > /proc/sys/kernel/msgmax &&
  echo "100 200" > /proc/sys/net/ipv4/ping_group_range && echo 77 > /proc/sys/net/unix/max_dgram_qlen' ||
  fail "cannot change the namespaces"
in_ns python3 - <<'PY' || fail "cannot make the SysV objects"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0x46455259, 4096, 0o1600)  # IPC_CREAT | 0600
assert shmid >= 0, ctypes.get_errno()
addr = libc.shmat(shmid, None, 0)
ctypes.memmove(addr, b"ferry-shm-bytes!", 16)
libc.shmdt(ctypes.c_void_p(addr))
qid = libc.msgget(0x46455260, 0o1600)
assert qid >= 0, ctypes.get_errno()
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 8)]
m = Msg(7, b"ferrymsg")
assert libc.msgsnd(qid, ctypes.byref(m), 8, 0) == 0, ctypes.get_errno()
PY
before=$(ns_state) || fail "cannot read the namespaces' state"
case "$before" in *ferry-uts-test*ferry.domain*12345*ferry-shm-bytes*100*200*77*lo*) ;; *) fail "unexpected state: $before" ;; esac

dir="$work/images"
# --mnt-early (0030), as Ferry asks of a container's dump: this tree is in
# CRIU's mount namespace, so nothing is written before the freeze.
local_dump "$dir" "$pid" --mnt-early
grep -q "The tree is in CRIU's mount namespace: nothing to dump early" "$dir/dump.log" ||
  fail "the dump did not say it had no mount namespace to dump early: $(grep -n 'early' "$dir/dump.log" | head -n 3)"
[ ! -e "$dir/mnt-early" ] && [ ! -e "$dir/mnt-early.tmp" ] || fail "the dump left an early mount dir"

log "1. the namespaces were dumped in CRIU's process"
for ns in uts ipc net; do
  grep -q "Dumped $ns namespace [0-9]* in CRIU's process" "$dir/dump.log" ||
    fail "CRIU did not dump the $ns namespace in its own process: $(grep -n 'namespace' "$dir/dump.log" | head)"
done
grep -q "Namespaces dump complete" "$dir/dump.log" || fail "the namespaces' dump did not complete"

# The roots yard's directory a restore log names ("Move the root to" it).
roots_yard() { sed -n 's|.*mnt: Move the root to \(/tmp/\.criu\.mntns\.[A-Za-z0-9]*\)$|\1|p' "$1" | head -n 1; }

# Called off first: the wait fd is at its end, so nothing is restored.
timeout -s KILL 60 criu restore -D "$dir" --shell-job -o restore-off.log -v4 --restore-detached \
  --restore-wait-fd 3 3</dev/null >/dev/null 2>&1 && fail "a restore whose wait fd closed went on"
grep -q "The restore was called off" "$dir/restore-off.log" ||
  fail "the restore did not say it was called off: $(grep -n 'Error' "$dir/restore-off.log" | head -n 3)"
yard_off=$(roots_yard "$dir/restore-off.log")
grep -q "Made an empty mount namespace while waiting" "$dir/restore-off.log" && [ -n "$yard_off" ] ||
  fail "the restore called off made no empty mount namespace while it waited"
[ ! -e "$yard_off" ] || fail "the restore called off left its roots yard's directory $yard_off"

log "2. the restore wrote the UTS sysctls without a worker"
# --restore-wait-fd: the bytes are already there, as the images are. An
# 'm' first says early mount images are in (0030): there are none, so the
# tree is built at the go, and the restore goes on as without it.
local_restore "$dir" --restore-wait-fd 3 3< <(printf mg)
grep -q "is built at the go" "$dir/restore.log" ||
  fail "CRIU did not try the early mount images on 'm': $(grep -n 'early\|Waiting on fd' "$dir/restore.log" | head -n 3)"
grep -q "Writing UTS sysctls without a worker" "$dir/restore.log" ||
  fail "the UTS sysctls went through a worker: $(grep -n 'hostname\|UTS' "$dir/restore.log" | head)"

log "3. the restored namespaces are as they were"
after=$(ns_state) || fail "cannot read the restored namespaces' state"
[ "$after" = "$before" ] || fail "the namespaces changed: $(diff <(echo "$before") <(echo "$after"))"
mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"

log "4. the root task entered the network namespace made while CRIU waited"
grep -q "Made a network namespace while waiting" "$dir/restore.log" ||
  fail "CRIU made no network namespace while it waited: $(grep -n 'Waiting on fd' "$dir/restore.log" | head -n 3)"
grep -q "Entered the network namespace made while waiting" "$dir/restore.log" ||
  fail "the root task did not enter it: $(grep -n 'net-namespace\|netns' "$dir/restore.log" | head -n 3)"
[ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ] ||
  fail "the restored tree shares this machine's network namespace"
log "5. the empty mount namespace made while CRIU waited was dropped with its yard"
yard=$(roots_yard "$dir/restore.log")
grep -q "Made an empty mount namespace while waiting" "$dir/restore.log" && [ -n "$yard" ] ||
  fail "CRIU made no empty mount namespace while it waited: $(grep -n 'mntns\|mount namespace' "$dir/restore.log" | head -n 3)"
! grep -q "Using the empty mount namespace made while waiting" "$dir/restore.log" ||
  fail "a tree without a mount namespace of its own took the empty one"
[ ! -e "$yard" ] || fail "the roots yard's directory $yard outlived the restore"
log "PASS ($(echo "$after" | tr '\n' ';'))"
