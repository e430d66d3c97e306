#!/usr/bin/env bash
# Runs the rdma-against-tcp benchmark between two VMs after installing and
# building what is missing.
#   examples/bench/run-rdma.sh [--mib 64] [--runs 3] [--touch] [--json FILE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
"$repo/examples/setup.sh" >/dev/null
"$repo/examples/build.sh"
exec python3 "$repo/examples/bench/rdma.py" "$@"
