#!/usr/bin/env bash
# The VM lane (testbed.sh up --vm): hosts a and b are qemu guests with
# Debian 12's kernel, each with a Soft-RoCE device on its virtio NIC.
#   1. both rxe devices are ACTIVE, and RDMA CM traffic crosses between them
#      (rping, 3 round trips);
#   2. Ferry's own RDMA layer (lib/transport/rdma, through rdma-probe): b
#      registers 32 MiB of a known pattern, a reads it with one-sided READs
#      and verifies every byte; a peer that dies right after accepting makes
#      the reader fail with an RDMA error, within a bound, not hang;
#   3. a memload tree (64 MiB parent, 16 MiB child, threads) migrates from a
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

log "2. Ferry's RDMA layer: one-sided READs of b's memory from a"
probe=$FERRY_BUILD/examples/rdma-probe
# serve_probe PORT ARGS...: an rdma-probe server on b, once it listens.
serve_probe() {
  local port=$1 log=$shared/probe-$1.log
  shift
  on b bash -c "timeout 120 $probe serve --listen $ip_b:$port $* >$log 2>&1 &"
  for _ in $(seq 1 150); do grep -q "listening" "$log" 2>/dev/null && return 0; sleep 0.2; done
  fail "rdma-probe did not listen on b: $(cat "$log")"
}
serve_probe 7471 --mib 32 --seed 5
on a timeout 120 "$probe" read --to "$ip_b:7471" --mib 32 --seed 5 >"$work/probe.out" 2>&1 ||
  fail "rdma-probe read failed: $(cat "$work/probe.out")"
grep -q "verified" "$work/probe.out" || fail "rdma-probe did not verify: $(cat "$work/probe.out")"
log "   $(grep -o 'read .*' "$work/probe.out")"
for _ in $(seq 1 50); do grep -q "says: ok" "$shared/probe-7471.log" && break; sleep 0.2; done
grep -q "says: ok 32 MiB" "$shared/probe-7471.log" ||
  fail "the server did not hear the verdict: $(cat "$shared/probe-7471.log")"

serve_probe 7472 --mib 32 --die-after-accept
start=$SECONDS
on a timeout 120 "$probe" read --to "$ip_b:7472" --mib 32 >"$work/probe-dead.out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 2 ] || fail "a reader of a dead peer ended with status $rc: $(cat "$work/probe-dead.out")"
grep -q "RDMA connection to .* failed\|no RDMA completion" "$work/probe-dead.out" ||
  fail "the reader's error does not say RDMA failed: $(cat "$work/probe-dead.out")"
log "   dead peer: $(tail -n 1 "$work/probe-dead.out") (after $((SECONDS - start)) s)"

log "3. a memload tree migrates from VM a to VM b"
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
post_copy=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["phases_ms"]["post_copy"]))' "$work/m.json")
log "   downtime $(json "$work/m.json" downtime_ms) ms, post-copy $post_copy ms (TCG)"
on b kill -KILL "$dest" || true
log "OK"
