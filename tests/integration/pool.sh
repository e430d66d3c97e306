#!/usr/bin/env bash
# Pool mode on the real stack: a source, a destination and pool hosts p1..p7,
# each running `pagesrv --pool-node` with a small arena so that pages also
# spill to the disk tier. The destination's background fetches one page at a
# time, so the restored workload is still faulting when the failures land.
#
#   1. RAID-5 over p1..p4 (spare p5): kill p2 while the workload faults. It
#      finishes with its pattern intact; p2's members are rebuilt onto p5
#      and a scrub finds every member present and the parity right.
#   2. RAID-6 over p1..p5 (spares p6, p7): kill p2 and p4; the same.
#   3. RAID-5: kill the source's daemon after the hand-off; the same.
#      3b. RAID-5: kill p3 while the source still pushes (slowed down): the
#      source rebuilds p3's members onto a spare before it hands off.
#      3c. The destination gets every page before the (slowed) push ends:
#      the push is cancelled and the pool keeps nothing of it.
#   4. Eviction: every node's arena is far smaller than its share, so pages
#      went to the disk tier (the nodes' counters say so), and all of them
#      came back correct (the workload's own verify).
#   5. A loss redundancy cannot cover (two nodes under RAID-5, no spare):
#      the migration stops with an error naming the lost nodes.
#   6. RAID-5, no spare, after the hand-off: p2 killed, then p3 stalled
#      (SIGSTOP) for 3 s. p3's loss would leave stripes unreadable, so the
#      destination waits for it instead of declaring it dead after 0.5 s of
#      silence; the workload verifies once p3 answers again.
source "$(dirname "$0")/lib.sh"

export FERRY_POOL_CAPACITY=${FERRY_POOL_CAPACITY:-8M}
mib=${FERRY_TEST_POOL_MIB:-48}
pages=$((mib * 256))

"$testbed" up --pool 7 >&2
# The background moves one page at a time, so the restored workload is still
# faulting when the failures land.
one_page_background="--background-chunk 1 --background-depth 1"
"$testbed" stop b
FERRY_LAZY_PAGES_ARGS="$one_page_background" "$testbed" start b
# restart_b [FAULT]: b's daemon again, with the test-only FAULT if given.
restart_b() {
  "$testbed" stop b
  FERRY_FAULT=${1:-} FERRY_LAZY_PAGES_ARGS="$one_page_background" "$testbed" start b
}

p() { "$testbed" addr "p$1"; }
nodes() {
  local out="" i
  for i in "$@"; do out+="${out:+,}$(p "$i")"; done
  echo "$out"
}
# pjson FILE KEY: a value of the result's "pool" object.
pjson() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["pool"][sys.argv[2]]; print(str(v).lower() if isinstance(v,bool) else v)' "$1" "$2"; }

expect_handoff=true
# run_case NAME ACTION RAID NODES SPARES: migrates a fresh workload in pool
# mode; once it runs on b (and faults), ACTION runs; then the workload
# verifies every page. Leaves the result in $work/NAME.json.
run_case() {
  local name=$1 action=$2 raid=$3 members=$4 spares=$5 pid out mark dest i
  log "case: $name"
  pid=$(start_workload a "$name" --mib "$mib" --child-mib 4 --threads 2)
  out="$work/$name.out"
  mark=$(lines "$out")
  on a migrator migrate --pid "$pid" --to "$(addr b)" --json --pool "$members" --raid "$raid" \
    ${spares:+--pool-spare "$spares"} >"$work/$name.json" 2>"$work/$name.err" &
  local mig=$!
  # Resumed on b: the workload ticks again after the freeze.
  wait_for "$out" "tick parent" 60 "$mark"
  for i in $(seq 1 100); do dest=$(restored_pid b) && break; sleep 0.05; done
  [ -n "${dest:-}" ] || fail "$name: no restored workload on host b"
  "$action" "$pid"
  mark=$(lines "$out")
  kill -USR1 "$dest"
  wait_for "$out" "verify ok parent pages=$pages" 120 "$mark"
  wait_for "$out" "verify ok child pages=1024" 120 "$mark"
  if tail -n +"$((mark + 1))" "$out" | grep -q "FAIL"; then
    fail "$name: the workload reported corruption"
  fi
  local rc=0
  wait "$mig" || rc=$?
  cat "$work/$name.json" >&2
  echo >&2
  [ $rc = 0 ] || fail "$name: migrator exited $rc: $(cat "$work/$name.err")"
  [ "$(json "$work/$name.json" ok)" = true ] || fail "$name: migration not ok"
  if [ "$expect_handoff" = true ]; then
    [ "$(pjson "$work/$name.json" handed_off)" = true ] || fail "$name: no hand-off to the pool"
  fi
  gone "$pid" || fail "$name: the source still exists after the migration"
  running "$dest" || fail "$name: the destination is not running"
  # It is the init of its PID namespace: its whole tree goes with it.
  kill -KILL "$dest" 2>/dev/null || true
  wait_gone "$dest" || true
}

# Failure injection, run once the workload has resumed on b.
kill_p2() { "$testbed" stop p2; }
kill_p2_p4() {
  "$testbed" stop p2
  "$testbed" stop p4
}
kill_source_after_handoff() {
  local i
  # The hand-off ends CRIU's dump: the source tasks disappear.
  for i in $(seq 1 600); do gone "$1" && break; sleep 0.05; done
  gone "$1" || fail "the source never handed off"
  "$testbed" stop a
}
nothing() { :; }

expect_rebuilt() {
  local f=$1 lost=$2
  if [ "$(json "$f" pages_total)" = 0 ]; then
    # Seen twice before criu-patches/0010: CRIU's lazy dump put every page
    # into the images, so no node held anything to lose. The migrator keeps
    # CRIU's logs then.
    local id
    id=$(json "$f" migration_id)
    tail -n 30 "/dev/shm/ferry/$id/dump.log" >&2 || true
    fail "$f: no page was lazy (CRIU's dump log above)"
  fi
  case "$(pjson "$f" lost_nodes)" in *"$lost"*) ;; *) fail "$f: $lost not reported lost" ;; esac
  [ "$(pjson "$f" degraded_stripes)" -gt 0 ] || fail "$f: no read went degraded"
  [ "$(pjson "$f" rebuilt_chunks)" -gt 0 ] || fail "$f: nothing was rebuilt"
  [ "$(pjson "$f" scrubbed_stripes)" -gt 0 ] || fail "$f: no scrub after the rebuild"
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["pool"]; sys.exit("scrub_error" in p)' "$f" ||
    fail "$f: the scrub found a problem: $(pjson "$f" scrub_error)"
}

# CRIU 4.1.1 with Ferry's patches has, three times in some 30 runs, put every
# page of a lazy dump into the images ("Pagemap generated: 12288 pages (0
# lazy)" with --lazy-pages set; not understood yet, see the issue notes).
# The migration is then correct but nothing is in the pool to lose, so the
# case says nothing about the pool: its dump log is kept and it runs once
# more. A second such dump fails the test.
# run_pool_case NAME ACTION RAID NODES SPARES HOSTS_TO_RESTART...
run_pool_case() {
  local name=$1 action=$2 raid=$3 members=$4 spares=$5 h id
  shift 5
  run_case "$name" "$action" "$raid" "$members" "$spares"
  [ "$(json "$work/$name.json" pages_total)" = 0 ] || return 0
  id=$(json "$work/$name.json" migration_id)
  cp "/dev/shm/ferry/$id/dump.log" "$work/$name.nothing-lazy.dump.log" 2>/dev/null || true
  log "WARNING: $name: CRIU's lazy dump left no page lazy (log: $work/$name.nothing-lazy.dump.log); running the case once more"
  for h in "$@"; do "$testbed" start "$h"; done
  run_case "$name" "$action" "$raid" "$members" "$spares"
}

# 1. RAID-5, one node killed while faulting.
run_pool_case raid5 kill_p2 5 "$(nodes 1 2 3 4)" "$(nodes 5)" p2
expect_rebuilt "$work/raid5.json" "$(p 2)"
case "$(pjson "$work/raid5.json" members)" in *"$(p 5)"*) ;; *) fail "raid5: p5 did not take p2's place" ;; esac
"$testbed" start p2

# 2. RAID-6, two nodes killed: both rebuilt, onto p6 and p7.
run_pool_case raid6 kill_p2_p4 6 "$(nodes 1 2 3 4 5)" "$(nodes 6 7)" p2 p4
f="$work/raid6.json"
expect_rebuilt "$f" "$(p 2)"
expect_rebuilt "$f" "$(p 4)"
case "$(pjson "$f" members)" in *"$(p 6)"*"$(p 7)"* | *"$(p 7)"*"$(p 6)"*) ;; *) fail "raid6: the spares did not take over" ;; esac
"$testbed" start p2
"$testbed" start p4

# 3. The source's daemon killed after the hand-off.
run_pool_case source kill_source_after_handoff 5 "$(nodes 1 2 3 4)" "" a
f="$work/source.json"
[ "$(pjson "$f" pages_from_pool)" -gt 0 ] || fail "source: no page came from the pool"
"$testbed" start a

# 3b. A node lost while the source is still pushing: the push goes on
# degraded, the source rebuilds the lost members onto the spare, and hands
# off only then (the pool has the requested redundancy again).
# The destination is slowed down too, and verifies only after the push: it
# must still need the pool when the push ends (else the push is cancelled).
"$testbed" stop a
FERRY_FAULT=slow-pool-push "$testbed" start a
restart_b slow-background
source_log="/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.log"
pushes() { grep -c "pages into the pool in" "$source_log" || true; }
pushed_before=$(pushes)
kill_p3_until_pushed() {
  local i
  "$testbed" stop p3
  for i in $(seq 1 600); do
    [ "$(pushes)" -gt "$pushed_before" ] && return 0
    sleep 0.05
  done
  fail "push-loss: the push did not end within 30 s"
}
run_case push-loss kill_p3_until_pushed 5 "$(nodes 1 2 3 4)" "$(nodes 6)"
f="$work/push-loss.json"
grep -q "rebuilding pool slot 2 onto spare $(p 6) before the hand-off" "$source_log" ||
  fail "push-loss: the source did not rebuild onto the spare"
case "$(pjson "$f" members)" in *"$(p 6)"*) ;; *) fail "push-loss: p6 did not take p3's place" ;; esac
"$testbed" start p3

# 3c. The destination has every page before the (slowed) push is over: the
# push is cancelled, the source ends at once and the pool keeps nothing of it.
restart_b
pool_chunks() {
  local i n total=0
  for i in 1 2 3 4 5 6 7; do
    n=$(on a migrator pool stats --node "$(p "$i")" |
      python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["chunks_in_memory"]+s["chunks_on_disk"])') ||
      fail "pool stats of p$i"
    total=$((total + n))
  done
  echo "$total"
}
before=$(pool_chunks)
expect_handoff=false
run_case push-cancel nothing 5 "$(nodes 1 2 3 4)" ""
expect_handoff=true
f="$work/push-cancel.json"
[ "$(pjson "$f" handoff_cancelled)" = true ] || fail "push-cancel: the push was not cancelled"
[ "$(pjson "$f" handed_off)" = false ] || fail "push-cancel: handed off although cancelled"
grep -q "cancelling the push and dropping its pages" "$source_log" ||
  fail "push-cancel: the source did not say it cancelled"
after=$(pool_chunks)
[ "$after" = "$before" ] || fail "push-cancel: the pool holds $((after - before)) more chunks than before"
"$testbed" stop a
"$testbed" start a

# 4. Eviction happened on the nodes (arena 8 MiB, shares of 16+ MiB).
# (p3 restarted empty after case 3b.)
for i in 1 2 4; do
  on a migrator pool stats --node "$(p "$i")" >"$work/p$i.stats" || fail "pool stats of p$i"
  python3 - "$work/p$i.stats" <<'EOF' || fail "p$i: no eviction to the disk tier: $(cat "$work/p$i.stats")"
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if s["evictions"] > 0 and s["disk_hits"] > 0 else 1)
EOF
done

# 6 (run before 5, which kills p1 and p3). A node stalls while the pool
# cannot lose another: waited for, not declared dead.
restart_b slow-background
lose_p2_then_stall_p3() {
  local i p3
  for i in $(seq 1 600); do gone "$1" && break; sleep 0.05; done
  gone "$1" || fail "stall: the source never handed off"
  "$testbed" stop p2
  p3=$(cat "$("$testbed" dir p3)/pagesrv.pid")
  kill -STOP "$p3"
  sleep 3
  kill -CONT "$p3"
}
run_case stall lose_p2_then_stall_p3 5 "$(nodes 1 2 3 4)" ""
f="$work/stall.json"
case "$(pjson "$f" lost_nodes)" in *"$(p 2)"*) ;; *) fail "stall: p2 not reported lost" ;; esac
case "$(pjson "$f" lost_nodes)" in *"$(p 3)"*) fail "stall: the stalled p3 was declared lost" ;; esac
grep -q "pool node $(p 3): silent for [0-9]* ms, but the pool cannot lose another node" \
  "$("$testbed" dir b)/incoming/$(json "$f" migration_id)/lazy-pages.log" ||
  fail "stall: b never waited for p3 (no such line in its lazy-pages.log)"
# The stall reached the workload: some fault waited out most of it.
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["fault_max_us"] < 2e6)' "$f" ||
  fail "stall: no fault waited for p3 (fault_max_us $(json "$f" fault_max_us))"
"$testbed" start p2

# 5. Two nodes lost under RAID-5 with no spare: a clear error, no zero page.
# The destination's background is slowed down, so pages are still owed when
# the nodes go (otherwise it may have pulled everything already).
log "case: beyond redundancy"
restart_b slow-background
pid=$(start_workload a lost --mib "$mib" --child-mib 4 --threads 2)
out="$work/lost.out"
mark=$(lines "$out")
on a migrator migrate --pid "$pid" --to "$(addr b)" --json --pool "$(nodes 1 2 3 4)" --raid 5 \
  >"$work/lost.json" 2>"$work/lost.err" &
mig=$!
wait_for "$out" "tick parent" 60 "$mark"
# Wait for the hand-off, so the pool is the only copy, then lose two nodes.
for i in $(seq 1 600); do gone "$pid" && break; sleep 0.05; done
"$testbed" stop p1
"$testbed" stop p3
dest=$(restored_pid b) || true
[ -n "$dest" ] && kill -USR1 "$dest" 2>/dev/null || true
rc=0
wait "$mig" || rc=$?
cat "$work/lost.json" >&2
[ $rc != 0 ] || fail "a double loss under RAID-5 did not fail the migration"
grep -q "cannot be read" "$work/lost.json" || fail "the error does not say what was lost"
grep -q "$(p 1)\|$(p 3)" "$work/lost.json" || fail "the error does not name the lost nodes"
if grep -q "verify ok parent" <(tail -n +"$((mark + 1))" "$out"); then
  fail "the workload verified its memory although pages were lost"
fi
restart_b
log "PASS"
