#!/usr/bin/env bash
# The memory pool's benchmark, after installing and building what is missing:
# a testbed with pool hosts p1..p6, then from host b
#   - pool-bench: single-page read latency (what a fault waits for), healthy
#     and with one or two nodes lost, per RAID level and stripe geometry;
#     push and bulk read throughput; bytes stored per byte of data;
#   - raid-codec-bench: parity encode and rebuild throughput on one core.
#   examples/bench/run-pool.sh [--pages 8192] [--reads 4000] [--json out.json]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
"$repo/examples/setup.sh" >/dev/null
"$repo/examples/build.sh"
export FERRY_BUILD=${FERRY_BUILD:-$repo/build}
export FERRY_TESTBED=${FERRY_TESTBED:-fb$$}
export FERRY_TESTBED_NET=${FERRY_TESTBED_NET:-10.$((100 + $$ % 100)).$(($$ % 250))}
testbed="$repo/examples/testbed.sh"
trap '"$testbed" down >/dev/null 2>&1 || true' EXIT
"$testbed" up --pool 6 >&2
nodes=""
for i in 1 2 3 4 5 6; do nodes+="${nodes:+,}$("$testbed" addr "p$i")"; done
echo "== pool-bench (from host b; pool nodes p1..p6 on the testbed's bridge)"
"$testbed" exec b pool-bench --nodes "$nodes" "$@"
if [ -x "$FERRY_BUILD/examples/raid-codec-bench" ]; then
  echo
  echo "== raid-codec-bench (ISA-L, one core)"
  "$FERRY_BUILD/examples/raid-codec-bench" --benchmark_min_time=0.2
fi
