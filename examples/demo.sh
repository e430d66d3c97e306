#!/usr/bin/env bash
# The demo: two hosts as network namespaces on this machine, a memory-heavy
# workload (1 GiB by default) on host a, migrated post-copy to host b while it
# runs; then the downtime and statistics, and the workload's own check of its
# memory on b.
#
#   examples/demo.sh [--mib N]
#
# Installs what is missing (examples/setup.sh) and builds Ferry first.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
mib=1024
while [ $# -gt 0 ]; do
  case "$1" in
    --mib) mib=$2; shift 2 ;;
    *) echo "usage: $0 [--mib N]" >&2; exit 2 ;;
  esac
done

"$repo/examples/setup.sh"
"$repo/examples/build.sh"

export FERRY_TESTBED=ferry-demo FERRY_TESTBED_NET=10.79.0
testbed="$repo/examples/testbed.sh"
out=$(mktemp /tmp/ferry-demo.XXXXXX.out)
cleanup() { "$testbed" down >/dev/null 2>&1 || true; rm -f "$out"; }
trap cleanup EXIT
"$testbed" down >/dev/null 2>&1 || true
"$testbed" up

echo "== starting a ${mib} MiB workload (4 threads, plus a forked child with 64 MiB) on host a"
"$testbed" exec a setsid unshare --pid --fork memload --mib "$mib" --child-mib 64 --threads 3 </dev/null >>"$out" 2>&1 &
launcher=$!
for _ in $(seq 1 1200); do
  grep -q "ready parent" "$out" && grep -q "ready child" "$out" && break
  sleep 0.05
done
read -r pid _ <"/proc/$launcher/task/$launcher/children" || true  # no trailing newline
echo "   workload pid $pid, in its own PID namespace"

echo "== migrating it to host b ($("$testbed" addr b)), post-copy"
"$testbed" exec a migrator migrate --pid "$pid" --to "$("$testbed" addr b)" --json >"$out.json"
python3 - "$out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if not r["ok"]:
    print("   migration FAILED:", r["error"]); sys.exit(1)
p = r["phases_ms"]
print(f"   downtime        {r['downtime_ms']:8.1f} ms   (dump {p['dump']:.1f}, ship images {p['ship_images']:.1f}, "
      f"restore {p['restore_until_gate']:.1f}, commit {p['commit']:.2f}, resume {p['resume']:.1f})")
print(f"   total           {r['total_ms']:8.1f} ms   (post-copy {p['post_copy']:.1f} ms)")
print(f"   lazy pages      {r['pages_total']:8d}      faulted {r['pages_faulted']}, prefetched {r['pages_prefetched']}, "
      f"background {r['pages_background']}, holes never sent {r['pages_absent']}")
print(f"   sent            {r['bytes_sent']/2**20:8.1f} MiB  ({r['image_files']} image files, {r['image_bytes']/1024:.0f} KiB)")
print(f"   fault latency   p50 {r['fault_p50_us']:.0f} us, p99 {r['fault_p99_us']:.0f} us over {r['faults']} faults")
print(f"   now running on host b as pid {r['destination_pid']}")
PY
dest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["destination_pid"])' "$out.json")
rm -f "$out.json"

echo "== asking the migrated workload to check every page of its memory"
mark=$(wc -l <"$out")
kill -USR1 "$dest"
for _ in $(seq 1 600); do
  [ "$(tail -n +"$((mark + 1))" "$out" | grep -c "^verify")" -ge 2 ] && break
  sleep 0.05
done
tail -n +"$((mark + 1))" "$out" | grep "^verify" | sed 's/^/   /'
tail -n +"$((mark + 1))" "$out" | grep -q "verify FAIL" && exit 1
echo "== done; tearing the testbed down"
