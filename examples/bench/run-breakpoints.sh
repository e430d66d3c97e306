#!/usr/bin/env bash
# Runs the breakpoint-fallback benchmark after installing and building what is missing.
#   examples/bench/run-breakpoints.sh [--vm] [--sizes 256,1024] [--runs 5] [--json out.json]
# --vm runs it inside a TCG virtual machine (examples/vm/run.sh), whose CPU
# emulates debug registers, for machines whose hypervisor does not deliver
# hardware breakpoints: there both ways can be measured, in one run. Absolute
# times in the VM are many times the host's; the ratio is what it is for. A
# --json file must then be under /var/tmp/ferry-vm/share to come back.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
"$repo/examples/setup.sh" >/dev/null
"$repo/examples/build.sh"
if [ "${1:-}" = --vm ]; then
  shift
  export FERRY_VM_MEM=${FERRY_VM_MEM:-6144} FERRY_VM_TIMEOUT=${FERRY_VM_TIMEOUT:-5400}
  exec "$repo/examples/vm/run.sh" python3 "$repo/examples/bench/breakpoints.py" "$@"
fi
exec python3 "$repo/examples/bench/breakpoints.py" "$@"
