#!/usr/bin/env bash
# image.sh TARBALL [PACKAGE...]: a minimal Debian 12 root filesystem holding
# PACKAGEs, as a tarball for `podman import` / `docker import`. No registry
# is reachable from Ferry's test machines, so container images are built
# from Debian packages, through the machine's own apt mirror.
set -euo pipefail

die() { echo "image.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: $0 TARBALL [PACKAGE...]"
out=$1
shift
command -v debootstrap >/dev/null || die "debootstrap is missing (run examples/setup.sh)"

# The first Debian mirror in the machine's apt sources (deb822 or one-line).
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit} $1 == "deb" {print $3; exit}' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
[ -n "$mirror" ] || die "no Debian mirror found in the apt configuration"

root=$(mktemp -d /tmp/ferry-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
include=""
[ $# -eq 0 ] || include="--include=$(IFS=,; echo "$*")"
debootstrap --variant=minbase $include bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
  { tail -n 20 "$root.log" >&2; rm -f "$root.log"; die "debootstrap failed"; }
rm -f "$root.log"
# Package caches and lists are of no use inside a container image.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -cf "$out" .
echo "$out"
