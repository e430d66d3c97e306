#!/usr/bin/env bash
# Installs everything Ferry needs on a fresh Debian 12 machine, as root.
# Idempotent: each step checks first and skips what is already present.
# Ends with `criu check`.
#   examples/setup.sh [--bench]   (--bench: also what `migrator bench` plots with)
set -euo pipefail

with_bench=""
for arg in "$@"; do
  case "$arg" in
    --bench) with_bench=1 ;;
    *) echo "usage: $0 [--bench]" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
grep -q '^VERSION_CODENAME=bookworm' /etc/os-release || log "warning: not Debian 12 (bookworm); continuing"

CRIU_VERSION=4.1.1
CRIU_PREFIX=/usr/local
# CRIU caches its kernel-feature probe (about 25 ms, paid by every criu run,
# including inside a migration's downtime) only in a tmpfs directory. /run is
# tmpfs on most systems but not on all (not on Firecracker guests); then
# /dev/shm is used.
if [ "$(findmnt -n -o FSTYPE -T /run 2>/dev/null)" = tmpfs ]; then
  CRIU_RUNDIR=/run
else
  CRIU_RUNDIR=/dev/shm
fi
CRIU_STAMP=$CRIU_PREFIX/share/ferry/criu-build
# Ferry's patches to CRIU (each file says why); a change to them rebuilds CRIU.
CRIU_PATCHES=$(cd "$(dirname "$0")" && pwd)/criu-patches
criu_patch_set() { cat "$CRIU_PATCHES"/*.patch 2>/dev/null | sha256sum | cut -c1-16; }

# Build tools and the libraries Ferry links against.
ferry_packages=(
  g++ make meson ninja-build pkg-config git ca-certificates
  catch2 libprotobuf-c-dev protobuf-c-compiler libnl-3-dev libnl-route-3-dev
  libxxhash-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libisal-dev libarchive-dev libcurl4-openssl-dev libgnutls28-dev prometheus-cpp-dev
  clang-14 libclang-rt-14-dev libfuzzer-14-dev
  libbenchmark-dev
  libibverbs-dev librdmacm-dev ibverbs-providers ibverbs-utils rdmacm-utils
  qemu-system-x86 cpio busybox-static file
  iproute2 procps util-linux psmisc python3 xz-utils clang-format patch tcpdump systemd iptables
  nftables
)
# AES-GCM for the TLS records: Intel's multi-buffer crypto library, which
# Debian builds for amd64 only (lib/tls/gcm_engine; elsewhere GnuTLS seals).
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  ferry_packages+=(libipsec-mb-dev)
fi
# nftables: a CRIU that had to be killed leaves its network lock (an nftables
# table in the workload's namespace); the migrator removes it with nft.
# Container engines and the workloads users migrate (issue: containers).
# crun is not used: it fails on this machine kind's cgroup setup; runc works.
engine_packages=(
  podman runc conmon containerd docker.io uidmap fuse-overlayfs catatonit
  redis-server redis-tools debootstrap
)
# What CRIU 4.1.1 needs to build (as verified on this machine kind).
criu_build_packages=(
  libprotobuf-dev protobuf-compiler python3-protobuf libnet1-dev libcap-dev
  libbsd-dev libgnutls28-dev libnftables-dev libaio-dev uuid-dev libnl-3-dev
  libprotobuf-c-dev protobuf-c-compiler dpkg-dev
)

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

apt_updated=0
apt_install() {
  local missing
  missing=$(missing_packages "$@" | sort -u)
  [ -n "$missing" ] || return 0
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
  log "installing: $(echo $missing | tr '\n' ' ')"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

criu_is_good() {
  command -v criu >/dev/null 2>&1 || return 1
  local v
  v=$(criu --version 2>/dev/null | sed -n 's/^Version: *//p')
  [ -n "$v" ] || return 1
  # Needs >= 4.1: Debian 12's 3.17 fails on this kernel.
  dpkg --compare-versions "$v" ge 4.1 || return 1
  [ -f "$CRIU_PREFIX/include/criu/criu-plugin.h" ] && [ -f "$CRIU_PREFIX/include/criu/rpc.proto" ] &&
    [ "$(cat "$CRIU_STAMP" 2>/dev/null)" = "$CRIU_VERSION rundir=$CRIU_RUNDIR patches=$(criu_patch_set)" ]
}

# The deb-src entry for trixie reuses the URI of the machine's own bookworm
# entry, so no mirror host is ever written into this repository.
debian_archive_uri() {
  local uri=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '
      /^URIs:/ { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") found = u }
      /^$/ { u = "" }
      END { print found }' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "cannot find the bookworm archive in the apt configuration"
  echo "$uri"
}

install_criu() {
  apt_install "${criu_build_packages[@]}"
  local uri list work
  uri=$(debian_archive_uri)
  list=/etc/apt/sources.list.d/ferry-trixie-src.sources
  if [ ! -f "$list" ]; then
    log "adding deb-src trixie from the machine's own archive URI"
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" >"$list"
  fi
  # A full update: a restricted one would drop the other lists' indexes.
  apt-get update -qq

  work=$(mktemp -d /tmp/ferry-criu.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  local tarball="criu_${CRIU_VERSION}.orig.tar.xz" want_sha
  local srcinfo version
  # The source stanza whose upstream version is CRIU_VERSION.
  srcinfo=$(apt-cache showsrc criu 2>/dev/null | awk -v v="${CRIU_VERSION}-" '
      /^Package:/ { keep = 0 } /^Version:/ { keep = (index($2, v) == 1) } keep')
  version=$(awk '/^Version:/ { print $2; exit }' <<<"$srcinfo")
  want_sha=$(awk -v t="$tarball" '
      /^Checksums-Sha256:/ { s = 1; next } /^[A-Za-z]/ { s = 0 } s && $3 == t { print $1; exit }' <<<"$srcinfo")
  [ -n "$version" ] && [ -n "$want_sha" ] || die "criu ${CRIU_VERSION} not listed by apt-cache showsrc (trixie deb-src)"
  log "downloading the criu $version source"
  # apt-get source exits non-zero when the .dsc or Debian diff is missing from
  # the pool, but the orig tarball still arrives; its checksum decides.
  (cd "$work" && apt-get source --download-only -qq "criu=$version" >/dev/null 2>&1) || true
  [ -f "$work/$tarball" ] || die "criu source tarball did not arrive"
  echo "$want_sha  $work/$tarball" | sha256sum -c --quiet - || die "criu tarball checksum mismatch"
  tar -C "$work" -xJf "$work/$tarball"
  local src
  src=$(find "$work" -maxdepth 1 -type d -name 'criu-*' | head -n1)
  [ -n "$src" ] || die "criu tarball has an unexpected layout"
  local patch
  for patch in "$CRIU_PATCHES"/*.patch; do
    [ -e "$patch" ] || continue
    log "patching criu: $(basename "$patch")"
    patch -d "$src" -p1 --quiet <"$patch" || die "$(basename "$patch") does not apply"
  done
  log "building criu ${CRIU_VERSION} (takes a few minutes)"
  make -C "$src" -j"$(nproc)" RUNDIR="$CRIU_RUNDIR" criu >"$work/build.log" 2>&1 ||
    { tail -n 40 "$work/build.log"; die "criu build failed"; }
  make -C "$src" PREFIX="$CRIU_PREFIX" RUNDIR="$CRIU_RUNDIR" install-criu >"$work/install.log" 2>&1 ||
    { tail -n 40 "$work/install.log"; die "criu install failed"; }
  # The plugin header and the RPC schema, for criu-plugin/ and migrator/.
  install -D -m 644 "$src/criu/include/criu-plugin.h" "$CRIU_PREFIX/include/criu/criu-plugin.h"
  install -D -m 644 "$src/images/rpc.proto" "$CRIU_PREFIX/include/criu/rpc.proto"
  ldconfig
  hash -r
  mkdir -p "$(dirname "$CRIU_STAMP")"
  echo "$CRIU_VERSION rundir=$CRIU_RUNDIR patches=$(criu_patch_set)" >"$CRIU_STAMP"
}

apt_install "${ferry_packages[@]}"
[ -z "$with_bench" ] || apt_install python3-matplotlib
# Installing docker.io or redis-server must not start system-wide services:
# the testbed runs its own engine instances per host.
if [ -n "$(missing_packages "${engine_packages[@]}")" ]; then
  policy=/usr/sbin/policy-rc.d
  created_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=1
    trap 'rm -f "$policy"' EXIT
  fi
  apt_install "${engine_packages[@]}"
  if [ -n "$created_policy" ]; then
    rm -f "$policy"
    trap - EXIT
  fi
fi
if criu_is_good; then
  log "criu $(criu --version | sed -n 's/^Version: *//p') already installed"
else
  install_criu
  criu_is_good || die "criu ${CRIU_VERSION} did not install correctly"
fi
# CRIU's lazy dump moves pages through pipes; bigger pipes halve the freeze
# (see migrator/migrate.cpp). The migrator raises it too; this keeps it.
if [ ! -f /etc/sysctl.d/60-ferry.conf ]; then
  echo "fs.pipe-max-size = 4194304" >/etc/sysctl.d/60-ferry.conf
fi
[ "$(cat /proc/sys/fs/pipe-max-size)" -ge 4194304 ] || sysctl -q -w fs.pipe-max-size=4194304
log "criu check"
criu check

# `criu check` looks at kernel features one by one; it does not show that a
# dump and a restore go through. On a machine whose hypervisor does not
# deliver hardware breakpoints, an unpatched CRIU passes `criu check` and
# then hangs in every dump. So: a real dump and restore of a small
# two-thread process in its own PID namespace, each within a bound.
criu_self_test() {
  local dir pid launcher lines_before bound=60 bp
  dir=$(mktemp -d /tmp/ferry-criu-selftest.XXXXXX)
  # shellcheck disable=SC2064
  trap "criu_self_test_cleanup '$dir'" RETURN
  cat >"$dir/twothreads.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <time.h>
static volatile unsigned long ticks;
static void *spin(void *a) {
	(void)a;
	for (;;) {
		struct timespec t = {0, 5000000};
		nanosleep(&t, 0);
		ticks++;
	}
}
int main(int argc, char **argv) {
	pthread_t t;
	FILE *out = argc > 1 ? fopen(argv[1], "w") : 0;
	if (!out)
		return 1;
	pthread_create(&t, 0, spin, 0);
	for (;;) {
		struct timespec s = {0, 50000000};
		nanosleep(&s, 0);
		fprintf(out, "%lu\n", ticks);
		fflush(out);
	}
}
C
  gcc -O1 -pthread -o "$dir/twothreads" "$dir/twothreads.c" || die "cannot build CRIU's self-test program"
  mkdir "$dir/images"
  # The program writes its own file: unshare, which outlives the dumped
  # tree, must not write into a file CRIU restores.
  unshare --pid --fork setsid "$dir/twothreads" "$dir/out" </dev/null >/dev/null 2>&1 &
  launcher=$!
  for _ in $(seq 1 100); do
    pid=$(cat "/proc/$launcher/task/$launcher/children" 2>/dev/null | tr -d ' ')
    [ -n "$pid" ] && [ -s "$dir/out" ] && break
    sleep 0.05
  done
  [ -n "$pid" ] || die "CRIU self-test: the test process did not start"
  echo "$pid" >"$dir/pid"
  if criu check --feature breakpoints >/dev/null 2>&1; then bp="hardware breakpoints trap"; else bp="hardware breakpoints do not trap here: CRIU steps through syscalls"; fi
  log "CRIU self-test: dump and restore of a two-thread process in its own PID namespace ($bp)"
  if ! timeout -s KILL "$bound" criu dump -t "$pid" -D "$dir/images" -o dump.log -v4; then
    die "criu dump of a two-thread process did not complete within ${bound}s ($bp); its log ends with:
$(tail -n 5 "$dir/images/dump.log")
CRIU 4.1.1 without examples/criu-patches/0003 hangs like this where hardware breakpoints do not trap"
  fi
  lines_before=$(wc -l <"$dir/out")
  if ! timeout -s KILL "$bound" criu restore -D "$dir/images" -o restore.log -v4 -d --pidfile "$dir/restored.pid"; then
    die "criu restore of the two-thread process did not complete within ${bound}s ($bp); its log ends with:
$(tail -n 5 "$dir/images/restore.log")"
  fi
  for _ in $(seq 1 100); do
    [ "$(wc -l <"$dir/out")" -gt "$((lines_before + 2))" ] && break
    sleep 0.05
  done
  [ "$(wc -l <"$dir/out")" -gt "$((lines_before + 2))" ] || die "the restored test process does not run"
  log "CRIU self-test passed: dump and restore complete, the restored process runs"
}
criu_self_test_cleanup() {
  local dir=$1 p
  trap - RETURN
  for p in "$dir/restored.pid" "$dir/pid"; do
    if [ -f "$p" ]; then kill -KILL "$(cat "$p")" 2>/dev/null || true; fi
  done
  rm -rf "$dir"
  return 0
}
criu_self_test
