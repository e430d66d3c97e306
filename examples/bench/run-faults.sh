#!/usr/bin/env bash
# Runs the fault-path benchmark after installing and building what is missing.
#   examples/bench/run-faults.sh [--mib 256] [--runs 3] [--orders random,sequential] [--fabrics shm,shm:lat=2us,tcp]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
"$repo/examples/setup.sh" >/dev/null
"$repo/examples/build.sh"
exec python3 "$repo/examples/bench/faults.py" "$@"
