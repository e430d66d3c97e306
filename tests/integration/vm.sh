#!/usr/bin/env bash
# The VM lane (testbed.sh up --vm): hosts a and b are qemu guests with
# Debian 12's kernel, each with a Soft-RoCE device on its virtio NIC.
#   1. both rxe devices are ACTIVE, and RDMA CM traffic crosses between them
#      (rping, 3 round trips);
#   2. a memload tree (64 MiB parent, 16 MiB child, threads) migrates from a
#      to b post-copy over tcp: it verifies on b, the source is gone, and
#      CRIU inside the guests used the stop method this kernel's CPU allows
#      (TCG's CPU traps hardware breakpoints, so CRIU uses them there).
# TCG is slow: sizes stay small and every wait is bounded.
. "$(dirname "$0")/lib.sh"

test_cleanup() {
  local d
  d=$("$testbed" dir a 2>/dev/null) || return 0
  for h in a b; do
    f=$("$testbed" dir "$h")/pagesrv.log
    [ -f "$f" ] && { echo "== $f"; tail -n 30 "$f"; }
  done
}

"$testbed" up --vm >&2
shared=$("$testbed" shared-dir)

log "1. Soft-RoCE on both guests"
for h in a b; do
  on "$h" rdma link show | grep -q "rxe0/1 state ACTIVE" || fail "no active rxe0 on $h"
done
ip_b=$("$testbed" ip b)
on b bash -c "timeout 60 rping -s -a $ip_b -C 3 >$shared/rping-server.log 2>&1 &"
ok=0
for _ in $(seq 1 20); do
  if on a timeout 30 rping -c -a "$ip_b" -C 3 -v >"$work/rping.out" 2>&1; then ok=1; break; fi
  sleep 0.5 # the server may not listen yet
done
[ "$ok" = 1 ] || fail "rping from a to b failed: $(tail -n 5 "$work/rping.out")"
[ "$(grep -c 'ping data' "$work/rping.out")" = 3 ] || fail "rping did not make 3 round trips"

log "2. a memload tree migrates from VM a to VM b"
out=$shared/memload.out
on a bash -c "setsid unshare --pid --fork $FERRY_BUILD/examples/memload --mib 64 --child-mib 16 --threads 2 >$out 2>&1 &"
for _ in $(seq 1 300); do grep -q "ready parent" "$out" 2>/dev/null && break; sleep 0.2; done
grep -q "ready child" "$out" || fail "memload did not get ready: $(tail -n 3 "$out")"
pid=$(on a pgrep -o -x memload) || fail "no memload on a"
on a timeout 600 migrator migrate --pid "$pid" --to "$("$testbed" addr b)" --json >"$work/m.json" ||
  fail "the migration failed: $(cat "$work/m.json")"
[ "$(json "$work/m.json" ok)" = true ] || fail "not ok: $(json "$work/m.json" error)"
if on a timeout 60 criu check --feature breakpoints >/dev/null 2>&1; then
  want="hardware breakpoints"
else
  want="syscall stepping"
fi
case "$(json "$work/m.json" criu_stop_method)" in
  "$want"*) ;;
  *) fail "CRIU in the guest stopped tasks by '$(json "$work/m.json" criu_stop_method)', not $want" ;;
esac
dest=$(json "$work/m.json" destination_pid)
mark=$(wc -l <"$out")
on b kill -USR1 "$dest"
for _ in $(seq 1 300); do
  [ "$(tail -n +"$((mark + 1))" "$out" | grep -c "verify ok")" = 2 ] && break
  sleep 0.2
done
tail -n +"$((mark + 1))" "$out" | grep -q "verify FAIL" && fail "memory does not verify on b"
[ "$(tail -n +"$((mark + 1))" "$out" | grep -c "verify ok")" = 2 ] || fail "no verify from b: $(tail -n 3 "$out")"
on a pgrep -x memload >/dev/null && fail "the source tree still runs on a"
log "   downtime $(json "$work/m.json" downtime_ms) ms, post-copy $(json "$work/m.json" post_copy_ms) ms (TCG)"
on b kill -KILL "$dest" || true
log "OK"
