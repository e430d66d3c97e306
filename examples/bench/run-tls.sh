#!/usr/bin/env bash
# Runs the page-encryption benchmark after installing and building what is missing.
#   examples/bench/run-tls.sh [--sizes 1024] [--runs 5] [--json out.json]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
"$repo/examples/setup.sh" >/dev/null
"$repo/examples/build.sh"
exec python3 "$repo/examples/bench/tls.py" "$@"
