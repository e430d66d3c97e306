# What every Ferry VM boots: Debian 12's linux-image-amd64 kernel, unpacked
# (not installed) into $FERRY_VM_DIR once, and a busybox initramfs, rebuilt
# when this file changes. Sourced by run.sh (one command, then power off) and
# host.sh (a testbed host that stays up); sets `kernel`, `initrd`, `share`.
#
# The initramfs mounts this host's root read-only over 9p under an overlay
# whose writes stay in the VM's memory, and $FERRY_VM_DIR/share read-write at
# the same path, then either
#   vmrun=ID            runs $share/runs/ID/cmd chrooted and powers off, or
#   vmagent=DIR         runs DIR/agent.sh (host.sh copies examples/vm/agent.sh
#                       there) chrooted: a host that takes commands through
#                       DIR until told to power off;
#   vmip=IP/PREFIX      gives eth0 that address;
#   vmrdma=1            loads Soft-RoCE (rdma_rxe) and the verbs and RDMA CM
#                       user interfaces.

vm_dir=${FERRY_VM_DIR:-/var/tmp/ferry-vm}
share=$vm_dir/share

vm_die() { echo "vm: $*" >&2; exit 255; }
[ "$(id -u)" = 0 ] || vm_die "must run as root"
mkdir -p "$share/runs"

vm_missing=()
command -v qemu-system-x86_64 >/dev/null || vm_missing+=(qemu-system-x86)
command -v cpio >/dev/null || vm_missing+=(cpio)
file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || vm_missing+=(busybox-static)
command -v file >/dev/null || vm_missing+=(file)
if [ ${#vm_missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${vm_missing[@]}" >&2 ||
    vm_die "cannot install ${vm_missing[*]}"
fi

# One builder at a time.
exec 9>"$vm_dir/.build.lock"
flock 9
kpkg=$vm_dir/kernel
if [ ! -s "$kpkg/version" ]; then
  kver=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { sub("linux-image-", "", $2); print $2; exit }')
  [ -n "$kver" ] || vm_die "cannot find the kernel linux-image-amd64 depends on (apt-get update?)"
  rm -rf "$kpkg.tmp" && mkdir -p "$kpkg.tmp"
  (cd "$kpkg.tmp" && apt-get download -qq "linux-image-$kver" >&2) || vm_die "cannot download linux-image-$kver"
  dpkg -x "$kpkg.tmp"/linux-image-"$kver"_*.deb "$kpkg.tmp" || vm_die "cannot unpack linux-image-$kver"
  rm -f "$kpkg.tmp"/*.deb
  busybox depmod -b "$kpkg.tmp" "$kver" || vm_die "depmod failed"
  echo "$kver" >"$kpkg.tmp/version"
  rm -rf "$kpkg" && mv "$kpkg.tmp" "$kpkg"
fi
kver=$(cat "$kpkg/version")
kernel=$kpkg/boot/vmlinuz-$kver
initrd=$vm_dir/initramfs.cpio.gz

# Early modules (insmod, in dependency order): virtio, 9p to mount the host
# root, and the NIC. Later ones load through modprobe from the unpacked
# tree: what CRIU's kernel probes need (socket diag, tun, nftables) and veth
# for testbeds; anything else loads on demand.
early="crc32_generic virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p overlay failover net_failover virtio_net virtio_console"
late="veth tun unix_diag inet_diag tcp_diag udp_diag raw_diag netlink_diag af_packet_diag nfnetlink nf_tables"
rdma_modules="rdma_rxe ib_uverbs rdma_ucm"
if [ ! -s "$initrd" ] || [ "$(readlink -f "${BASH_SOURCE[0]}")" -nt "$initrd" ]; then
  root=$vm_dir/initramfs.root
  rm -rf "$root" && mkdir -p "$root"/{bin,dev,proc,sys,mnt,host,rw,modules} || vm_die "mkdir $root"
  cp /bin/busybox "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  for m in $early; do
    f=$(find "$kpkg/lib/modules/$kver" \( -name "$m.ko" -o -name "$m.ko.xz" \) | head -n1)
    [ -n "$f" ] || vm_die "module $m not found in $kver"
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
run= agent= vmip= vmrdma=
for a in \$(cat /proc/cmdline); do
  case \$a in
    vmrun=*) run=\${a#vmrun=} ;;
    vmagent=*) agent=\${a#vmagent=} ;;
    vmip=*) vmip=\${a#vmip=} ;;
    vmrdma=1) vmrdma=1 ;;
  esac
done
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
if [ "\$vmrdma" = 1 ]; then
  for m in $rdma_modules; do modprobe \$m || say "modprobe \$m failed"; done
fi
mount -t proc proc /mnt/proc
mount -t sysfs sys /mnt/sys
mount -t cgroup2 cgroup2 /mnt/sys/fs/cgroup 2>/dev/null
mount -t devtmpfs dev /mnt/dev
mkdir -p /mnt/dev/pts /mnt/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /mnt/dev/pts
mount -t tmpfs tmpfs /mnt/dev/shm
# A one-shot run gets a fresh /tmp; a host keeps this machine's (read-only
# under the overlay, writes in its memory), so a checkout or build under
# /tmp runs in it too.
[ -n "\$agent" ] || mount -t tmpfs tmpfs /mnt/tmp
mount -t tmpfs tmpfs /mnt/run
chmod 1777 /mnt/tmp /mnt/dev/shm
if ! mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=524288 share /mnt$share; then
  say "cannot mount the share"
  poweroff -f
fi
if [ -n "\$vmip" ]; then
  ip link set eth0 up && ip addr add "\$vmip" dev eth0 || say "cannot configure eth0 with \$vmip"
fi
if [ "\$vmrdma" = 1 ]; then
  chroot /mnt /usr/bin/rdma link add rxe0 type rxe netdev eth0 || say "cannot add rxe0 on eth0"
fi
clean_env="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TERM=dumb LANG=C.UTF-8"
if [ -n "\$agent" ]; then
  chroot /mnt /usr/bin/env -i \$clean_env /bin/bash "\$agent/agent.sh" "\$agent" \\
    </dev/null >/dev/console 2>&1
else
  d=$share/runs/\$run
  if [ -n "\$run" ] && [ -f "/mnt\$d/cmd" ]; then
    chroot /mnt /usr/bin/env -i \$clean_env /bin/bash "\$d/cmd" </dev/null >"/mnt\$d/stdout" 2>"/mnt\$d/stderr"
    echo \$? >"/mnt\$d/rc"
  fi
fi
sync
poweroff -f
INIT
  chmod 755 "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp" && mv "$initrd.tmp" "$initrd" ||
    vm_die "cannot pack the initramfs"
fi
flock -u 9
exec 9>&-
