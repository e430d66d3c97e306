#!/usr/bin/env bash
# Configures (once) and builds Ferry into <repo>/build.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$repo/build/build.ninja" ] || meson setup "$repo/build" "$repo" >/dev/null
ninja -C "$repo/build" >/dev/null
