#!/usr/bin/env bash
# Configures (once) and builds Ferry into <repo>/build. Quiet when it
# works; a failure shows what ninja said (compiler errors go to its stdout).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$repo/build/build.ninja" ] || meson setup "$repo/build" "$repo" >/dev/null
if ! ninja -C "$repo/build" >"$repo/build/ninja.log" 2>&1; then
  tail -n 60 "$repo/build/ninja.log" >&2
  echo "build failed; the whole output is in $repo/build/ninja.log" >&2
  exit 1
fi
