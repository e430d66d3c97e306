#!/usr/bin/env bash
# A testbed host that is a virtual machine: qemu in software emulation (TCG),
# Debian 12's kernel and this host's root read-only (examples/vm/image.sh),
# kept up and taking commands through an agent (examples/vm/agent.sh): the
# host names a job on a virtio-serial port (DIR/ctl.in, a FIFO qemu reads)
# and the job's script, output and status are files in DIR on the share.
# For what the host kernel cannot do, such as Soft-RoCE (rdma_rxe):
# examples/testbed.sh up --vm uses it.
#
#   host.sh boot DIR --ip IP/PREFIX --link listen:PORT|connect:PORT|udp:LOCAL_PORT:PEER_PORT [--rdma]
#       start a VM whose state (agent queue, console log, qemu pid) is DIR,
#       on the share; its virtio NIC eth0 gets IP and is joined to the other
#       VM of the pair by a qemu socket link on this machine's loopback
#       (testbed.sh: UDP, a datagram per frame, so a VM booted again is on it
#       at once); --rdma adds a Soft-RoCE device rxe0 on
#       eth0. Waits (bounded) until the agent takes commands.
#   host.sh exec DIR CMD...
#       runs CMD in the VM from the caller's directory, streams its stdout
#       and stderr, and exits with its status (255 if the VM is gone);
#       SIGINT/SIGTERM kill it inside the VM. Bounded by FERRY_VM_EXEC_TIMEOUT
#       seconds (default 3600).
#   host.sh halt DIR
#       power the VM off (SIGKILL to qemu after 30 s).
#   host.sh kill DIR
#       SIGKILL to qemu at once (a guest that no longer answers).
#   host.sh cpus DIR
#       each vCPU's instruction pointer, flags and halted state, read twice
#       2 s apart through qemu's monitor (DIR/monitor.sock): a guest that
#       stopped answering shows whether its vCPUs still advance.
#
# FERRY_VM_MEM (MiB, default 2048) and FERRY_VM_SMP (default 1) size a VM.
# One vCPU: a testbed's VMs are four-plus emulated CPUs on a 2-CPU machine
# otherwise, and in two CI runs on 2026-12-06 a 2-vCPU guest
# stopped for minutes while CRIU dumped in it (tests/README, "vm"); one
# vCPU has no cross-CPU waits to starve, and the lane ran faster with it.
# A boot that does not come up is tried once more (FERRY_VM_FIRST_BOOT_WAIT).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
die() { echo "vm host: $*" >&2; exit 255; }

qemu_alive() { local p; p=$(cat "$1/qemu.pid" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
# A line to the agent. Opened read-write, a FIFO never blocks the opener,
# even with qemu gone.
tell() { printf '%s\n' "$2" 1<>"$1/ctl.in"; }

boot() {
  local dir=$1 ip="" link="" rdma=0
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --ip) ip=$2; shift 2 ;;
      --link) link=$2; shift 2 ;;
      --rdma) rdma=1; shift ;;
      *) die "unknown option to boot: $1" ;;
    esac
  done
  [ -n "$ip" ] && [ -n "$link" ] || die "usage: $0 boot DIR --ip IP/PREFIX --link listen:PORT|connect:PORT|udp:LOCAL_PORT:PEER_PORT [--rdma]"
  . "$here/image.sh" # kernel, initrd, share
  case "$dir" in "$share"/*) ;; *) die "$dir is not on the share ($share)" ;; esac
  qemu_alive "$dir" && die "a VM runs in $dir already"
  mkdir -p "$dir/jobs"
  rm -f "$dir/ready" "$dir/jobs/"* "$dir/ctl.in" "$dir/ctl.out"
  mkfifo "$dir/ctl.in" "$dir/ctl.out" || die "mkfifo in $dir"
  cp "$here/agent.sh" "$dir/agent.sh"
  local netdev mac octets
  case "$link" in
    listen:*) netdev="socket,id=n0,listen=127.0.0.1:${link#listen:}" ;;
    connect:*) netdev="socket,id=n0,connect=127.0.0.1:${link#connect:}" ;;
    udp:*:*)
      local ports=${link#udp:}
      netdev="socket,id=n0,localaddr=127.0.0.1:${ports%%:*},udp=127.0.0.1:${ports#*:}"
      ;;
    *) die "--link takes listen:PORT, connect:PORT or udp:LOCAL_PORT:PEER_PORT" ;;
  esac
  IFS=. read -r -a octets <<<"${ip%/*}"
  mac=$(printf '52:54:00:%02x:%02x:%02x' "${octets[1]}" "${octets[2]}" "${octets[3]}")
  # loglevel=5: a soft lockup's or a hung task's stack (printed at the
  # default level) reaches the console too, not only its first line.
  local append="console=ttyS0 panic=-1 quiet loglevel=5 vmagent=$dir vmip=$ip"
  [ "$rdma" = 1 ] && append+=" vmrdma=1"
  # A TCG guest sometimes stalls early in its boot (its timers stop firing:
  # "rcu_preempt kthread timer wakeup didn't happen" on the console, seen in
  # CI on 2026-12-02) and never comes up: one more try, within the same 180 s
  # (FERRY_VM_FIRST_BOOT_WAIT, tenths of a second, 900: the first try's share).
  local attempt first=${FERRY_VM_FIRST_BOOT_WAIT:-900}
  for attempt in 1 2; do
    start_qemu
    wait_ready $((attempt == 1 ? first : 1800 - first)) && return 0
    [ "$attempt" = 1 ] || break
    echo "vm host: the VM in $dir did not come up within $((first / 10)) s; its console's last lines:" >&2
    tail -n 5 "$dir/console.log" >&2
    echo "vm host: booting it once more" >&2
    kill_qemu "$dir"
  done
  tail -n 20 "$dir/console.log" >&2
  die "the VM in $dir did not come up within 180 s"
}

# start_qemu, wait_ready TENTHS: boot()'s two steps, sharing its locals.
start_qemu() {
  : >"$dir/console.log"
  qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max \
    -smp "${FERRY_VM_SMP:-1}" -m "${FERRY_VM_MEM:-2048}" -display none -no-reboot -nodefaults \
    -serial "file:$dir/console.log" -monitor "unix:$dir/monitor.sock,server=on,wait=off" -daemonize -pidfile "$dir/qemu.pid" \
    -kernel "$kernel" -initrd "$initrd" -append "$append" \
    -netdev "$netdev" -device "virtio-net-pci,netdev=n0,mac=$mac" \
    -device virtio-serial-pci -chardev "pipe,id=ctl,path=$dir/ctl" \
    -device virtserialport,chardev=ctl,name=ferry.ctl \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$share",mount_tag=share,security_model=none,multidevs=remap \
    </dev/null >"$dir/qemu.out" 2>&1 || { cat "$dir/qemu.out" >&2; die "qemu did not start"; }
}

wait_ready() {
  local i
  for i in $(seq 1 "$1"); do # TCG boots in ~10 s
    [ -e "$dir/ready" ] && return 0
    qemu_alive "$dir" || { tail -n 20 "$dir/console.log" >&2; die "the VM in $dir died while booting"; }
    sleep 0.1
  done
  return 1
}

# SIGKILL to a VM's qemu, waited for (bounded: 10 s).
kill_qemu() {
  local pid i
  pid=$(cat "$1/qemu.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  rm -f "$1/qemu.pid"
}

# Prints FILE's bytes from offset AT on to fd OUT (3: the caller's stdout,
# 2: its stderr) and echoes the new offset.
copy_new() {
  local f=$1 at=$2 out=$3 size
  size=$(stat -c %s "$f" 2>/dev/null) || { echo "$at"; return; }
  [ "$size" -gt "$at" ] && tail -c +"$((at + 1))" "$f" | head -c "$((size - at))" >&"$out"
  echo "$size"
}

run() {
  local dir=$1
  shift
  [ -e "$dir/ready" ] && qemu_alive "$dir" || die "no VM runs in $dir"
  local j
  j=$dir/jobs/$(date +%s%N).$$.$RANDOM
  {
    echo "cd $(printf %q "$PWD") 2>/dev/null || cd /"
    printf '%q ' "$@"
    echo
    # One write, so the host never reads half a status.
    echo "echo \$? >$(printf %q "$j.rc")"
  } >"$j.tmp" && mv "$j.tmp" "$j.cmd" || die "cannot queue the command"
  tell "$dir" "run ${j##*/}"
  trap 'touch "$j.kill"; tell "$dir" "kill ${j##*/}"' INT TERM HUP
  # Streams the job's output as it grows, until it has ended (or the VM has,
  # or the bound has passed), then what is left.
  local bound=${FERRY_VM_EXEC_TIMEOUT:-3600} end out_at=0 err_at=0 done=0
  end=$((SECONDS + bound))
  exec 3>&1 # copy_new's own stdout carries the offset
  while :; do
    [ -s "$j.rc" ] && done=1
    out_at=$(copy_new "$j.out" "$out_at" 3)
    err_at=$(copy_new "$j.err" "$err_at" 2)
    [ "$done" = 1 ] && break
    [ $SECONDS -lt $end ] && qemu_alive "$dir" || break
    sleep 0.05
  done
  local rc
  if [ -s "$j.rc" ]; then
    rc=$(cat "$j.rc")
  elif qemu_alive "$dir"; then
    touch "$j.kill"
    tell "$dir" "kill ${j##*/}"
    echo "vm host: the command ran over its ${bound}s bound and was killed" >&2
    rc=255
  else
    echo "vm host: the VM died; its console ends with:" >&2
    tail -n 20 "$dir/console.log" >&2
    rc=255
  fi
  rm -f "$j".{cmd,run,out,err,rc,kill}
  exit "$rc"
}

halt() {
  local dir=$1 pid i
  pid=$(cat "$dir/qemu.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  tell "$dir" poweroff
  for i in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$dir/qemu.pid" "$dir/ready" "$dir/ctl.in" "$dir/ctl.out"
}

# cpus DIR: see the usage above. The monitor's answer is bounded at 5 s.
cpus() {
  local dir=$1 round
  [ -S "$dir/monitor.sock" ] && qemu_alive "$dir" || die "no VM monitor in $dir"
  for round in 1 2; do
    echo "vCPUs of $dir, sample $round:"
    timeout 10 python3 - "$dir/monitor.sock" <<'PY' || echo "  (the monitor did not answer)"
import re, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
def until_prompt(out=b""):
    end = time.monotonic() + 5
    while b"(qemu)" not in out and time.monotonic() < end:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out
until_prompt()  # the banner
s.sendall(b"info registers -a\n")
out = until_prompt()
cpu = None
for line in out.decode(errors="replace").splitlines():
    m = re.match(r"CPU#(\d+)", line)
    if m:
        cpu = m.group(1)
    m = re.search(r"RIP=(\S+) RFL=(\S+) .*CPL=(\d).*HLT=(\d)", line)
    if m and cpu is not None:
        print(f"  CPU#{cpu} RIP={m.group(1)} RFLAGS={m.group(2)} CPL={m.group(3)} halted={m.group(4)}")
PY
    [ "$round" = 2 ] || sleep 2
  done
}

cmd=${1:-}
shift || true
case "$cmd" in
  boot) [ $# -ge 1 ] || die "usage: $0 boot DIR ..."; boot "$@" ;;
  exec) [ $# -ge 2 ] || die "usage: $0 exec DIR CMD..."; run "$@" ;;
  halt) [ $# = 1 ] || die "usage: $0 halt DIR"; halt "$1" ;;
  kill) [ $# = 1 ] || die "usage: $0 kill DIR"; kill_qemu "$1"; rm -f "$1/ready" "$1/ctl.in" "$1/ctl.out" ;;
  cpus) [ $# = 1 ] || die "usage: $0 cpus DIR"; cpus "$1" ;;
  *) die "usage: $0 boot DIR --ip IP/PREFIX --link listen:PORT|connect:PORT|udp:LOCAL_PORT:PEER_PORT [--rdma] | exec DIR CMD... | halt DIR | kill DIR | cpus DIR" ;;
esac
