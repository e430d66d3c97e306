#!/usr/bin/env bash
# Runs the post-copy benchmark after installing and building what is missing.
#   examples/bench/run.sh [--sizes 256,1024,2048] [--runs 5] [--latency-sizes 256,1024] [--json out.json]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
"$repo/examples/setup.sh" >/dev/null
"$repo/examples/build.sh"
exec python3 "$repo/examples/bench/postcopy.py" "$@"
