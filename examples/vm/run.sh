#!/usr/bin/env bash
# Runs a command inside a virtual machine on this host: qemu in software
# emulation (TCG; KVM is not used), Debian 12's linux-image-amd64 kernel, a
# busybox initramfs, and this host's root shared read-only over 9p (under an
# overlay whose writes stay in the VM's memory), in which the command runs
# chrooted, so Ferry's build and CRIU run there unchanged.
# For what the host itself cannot show: hardware breakpoints that trap (the
# TCG CPU emulates debug registers; some hypervisors do not deliver them),
# a kernel of another version, kernel modules.
#
#   examples/vm/run.sh CMD [ARGS...]
#
# The command starts in the caller's directory with a clean environment
# (PATH, HOME=/tmp) and no stdin; its stdout and stderr come back after the
# VM has powered off, and this script exits with its status (255 if the VM
# died first). /tmp, /run and /dev/shm are fresh tmpfs in the VM;
# $FERRY_VM_DIR/share (default /var/tmp/ferry-vm/share) is shared
# read-write at the same path. The whole VM is bounded by FERRY_VM_TIMEOUT
# seconds (default 1800). FERRY_VM_MEM (MiB, default 4096) and FERRY_VM_SMP
# (default 2) size it; FERRY_VM_CONSOLE=1 streams its console to stderr.
#
# The kernel and initramfs: examples/vm/image.sh.
set -uo pipefail

timeout_s=${FERRY_VM_TIMEOUT:-1800}
mem=${FERRY_VM_MEM:-4096}
smp=${FERRY_VM_SMP:-2}

[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 255; }
. "$(dirname "$0")/image.sh" # kernel, initrd, share
die() { vm_die "$@"; }

run_dir=$(mktemp -d "$share/runs/XXXXXXXX") || die "mktemp"
id=${run_dir##*/}
{
  echo "cd $(printf %q "$PWD") 2>/dev/null || cd /"
  printf 'exec'
  printf ' %q' "$@"
  echo
} >"$run_dir/cmd"

qemu=(qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max
  -smp "$smp" -m "$mem" -nographic -no-reboot -nodefaults
  -serial "file:$run_dir/console.log" -monitor none
  -kernel "$kernel" -initrd "$initrd"
  -append "console=ttyS0 panic=-1 quiet loglevel=4 vmrun=$id"
  -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap
  -virtfs local,path="$share",mount_tag=share,security_model=none,multidevs=remap)
if [ "${FERRY_VM_CONSOLE:-0}" = 1 ]; then
  : >"$run_dir/console.log"
  tail -n +1 -f "$run_dir/console.log" >&2 &
  tail_pid=$!
fi
timeout -s TERM -k 10 "$timeout_s" "${qemu[@]}" </dev/null >"$run_dir/qemu.out" 2>&1
qemu_rc=$?
if [ -n "${tail_pid:-}" ]; then kill "$tail_pid" 2>/dev/null; wait "$tail_pid" 2>/dev/null; fi
[ -f "$run_dir/stdout" ] && cat "$run_dir/stdout"
[ -f "$run_dir/stderr" ] && cat "$run_dir/stderr" >&2
if [ -s "$run_dir/rc" ]; then
  rc=$(cat "$run_dir/rc")
else
  [ "$qemu_rc" = 124 ] && echo "vm: stopped by its ${timeout_s}s bound" >&2
  echo "vm: the command did not complete; the console ends with:" >&2
  tail -n 20 "$run_dir/console.log" >&2
  rc=255
fi
rm -rf "$run_dir"
exit "$rc"
