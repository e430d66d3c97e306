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
# The kernel package is downloaded and unpacked (not installed) into
# $FERRY_VM_DIR once; the initramfs is rebuilt when this script changes.
set -uo pipefail

dir=${FERRY_VM_DIR:-/var/tmp/ferry-vm}
share=$dir/share
timeout_s=${FERRY_VM_TIMEOUT:-1800}
mem=${FERRY_VM_MEM:-4096}
smp=${FERRY_VM_SMP:-2}

die() { echo "vm: $*" >&2; exit 255; }
[ $# -ge 1 ] || die "usage: $0 CMD [ARGS...]"
[ "$(id -u)" = 0 ] || die "must run as root"
mkdir -p "$share/runs"

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v cpio >/dev/null || missing+=(cpio)
file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || missing+=(busybox-static)
command -v file >/dev/null || missing+=(file)
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    die "cannot install ${missing[*]}"
fi

# One builder at a time.
exec 9>"$dir/.build.lock"
flock 9
# The kernel Debian 12's linux-image-amd64 depends on, unpacked, not installed.
kpkg=$dir/kernel
if [ ! -s "$kpkg/version" ]; then
  kver=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { sub("linux-image-", "", $2); print $2; exit }')
  [ -n "$kver" ] || die "cannot find the kernel linux-image-amd64 depends on (apt-get update?)"
  rm -rf "$kpkg.tmp" && mkdir -p "$kpkg.tmp"
  (cd "$kpkg.tmp" && apt-get download -qq "linux-image-$kver" >&2) || die "cannot download linux-image-$kver"
  dpkg -x "$kpkg.tmp"/linux-image-"$kver"_*.deb "$kpkg.tmp" || die "cannot unpack linux-image-$kver"
  rm -f "$kpkg.tmp"/*.deb
  busybox depmod -b "$kpkg.tmp" "$kver" || die "depmod failed"
  echo "$kver" >"$kpkg.tmp/version"
  rm -rf "$kpkg" && mv "$kpkg.tmp" "$kpkg"
fi
kver=$(cat "$kpkg/version")
kernel=$kpkg/boot/vmlinuz-$kver
initrd=$dir/initramfs.cpio.gz

# Early modules (insmod, in dependency order): virtio and 9p to mount the
# host root. Later ones load through modprobe from the unpacked tree: what
# CRIU's kernel probes need (socket diag, tun, nftables) and veth for
# testbeds; anything else loads on demand.
early="crc32_generic virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p overlay"
late="veth tun unix_diag inet_diag tcp_diag udp_diag raw_diag netlink_diag af_packet_diag nfnetlink nf_tables"
if [ ! -s "$initrd" ] || [ "$(readlink -f "$0")" -nt "$initrd" ]; then
  root=$dir/initramfs.root
  rm -rf "$root" && mkdir -p "$root"/{bin,dev,proc,sys,mnt,host,rw,modules} || die "mkdir $root"
  cp /bin/busybox "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  for m in $early; do
    f=$(find "$kpkg/lib/modules/$kver" \( -name "$m.ko" -o -name "$m.ko.xz" \) | head -n1)
    [ -n "$f" ] || die "module $m not found in $kver"
    cp "$f" "$root/modules/"
  done
  cat >"$root/init" <<INIT
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "vm-init: \$*" >/dev/console; }
for m in $early; do
  insmod /modules/\$m.ko 2>/dev/null || insmod /modules/\$m.ko.xz || say "insmod \$m failed"
done
run=
for a in \$(cat /proc/cmdline); do case \$a in vmrun=*) run=\${a#vmrun=} ;; esac; done
ifconfig lo 127.0.0.1 up
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose host /host; then
  say "cannot mount the host's root"
  poweroff -f
fi
# The host's root, read-only, under a tmpfs that takes the VM's writes
# (CRIU's parasite makes a directory in the task's root, for one).
mount -t tmpfs tmpfs /rw
mkdir -p /rw/upper /rw/work
if ! mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /mnt; then
  say "cannot mount the overlay"
  poweroff -f
fi
mkdir -p /lib/modules
mount --bind /host$kpkg/lib/modules /lib/modules
echo /bin/modprobe >/proc/sys/kernel/modprobe
for m in $late; do modprobe \$m 2>/dev/null || say "modprobe \$m failed"; done
mount -t proc proc /mnt/proc
mount -t sysfs sys /mnt/sys
mount -t cgroup2 cgroup2 /mnt/sys/fs/cgroup 2>/dev/null
mount -t devtmpfs dev /mnt/dev
mkdir -p /mnt/dev/pts /mnt/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /mnt/dev/pts
mount -t tmpfs tmpfs /mnt/dev/shm
mount -t tmpfs tmpfs /mnt/tmp
mount -t tmpfs tmpfs /mnt/run
chmod 1777 /mnt/tmp /mnt/dev/shm
if ! mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=524288 share /mnt$share; then
  say "cannot mount the share"
  poweroff -f
fi
d=$share/runs/\$run
if [ -n "\$run" ] && [ -f "/mnt\$d/cmd" ]; then
  chroot /mnt /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    HOME=/tmp TERM=dumb LANG=C.UTF-8 /bin/bash "\$d/cmd" </dev/null >"/mnt\$d/stdout" 2>"/mnt\$d/stderr"
  echo \$? >"/mnt\$d/rc"
fi
sync
poweroff -f
INIT
  chmod 755 "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp" && mv "$initrd.tmp" "$initrd" ||
    die "cannot pack the initramfs"
fi
flock -u 9
exec 9>&-

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
