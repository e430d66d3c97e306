#!/usr/bin/env bash
# Parking a workload in the memory pool, on the real stack: a source (a), a
# destination (b) and pool hosts p1..p4 running `pagesrv --pool-node`.
#
#   1. `migrator checkpoint --to-pool` freezes a workload into the pool
#      (RAID-5 over p1..p4): the source tasks end, the pool holds it.
#   2. The same name again is refused before any freeze: that workload keeps
#      running.
#   3. While parked, p3 dies. `migrator restore --from-pool` on host b brings
#      it back post-copy (degraded reads) with every page intact; the record
#      is gone afterwards, so a second restore says nothing is parked.
#   4. A checkpoint into a pool with an unreachable node fails, the workload
#      keeps running, and nothing of it stays in the pool.
#   5. The same for a checkpoint interrupted (SIGINT) while the pool takes
#      its pages.
source "$(dirname "$0")/lib.sh"

mib=${FERRY_TEST_PARK_MIB:-32}
pages=$((mib * 256))
"$testbed" up --pool 4 >&2
pool=""
for i in 1 2 3 4; do pool+="${pool:+,}$("$testbed" addr "p$i")"; done

# pool_empty WHEN: no pool node holds a chunk.
pool_empty() {
  local i
  for i in 1 2 3 4; do
    on a migrator pool stats --node "$("$testbed" addr "p$i")" >"$work/s$i.json"
  done
  python3 - "$work"/s?.json <<'PY' || fail "pool nodes still hold chunks $1"
import json, sys
held = {}
for f in sys.argv[1:]:
    s = json.load(open(f))
    held[f] = s["chunks_in_memory"] + s["chunks_on_disk"]
print(held, file=sys.stderr)
sys.exit(1 if any(held.values()) else 0)
PY
}

# 1. Park.
log "case: checkpoint --to-pool"
pid=$(start_workload a w1 --mib "$mib" --child-mib 4 --threads 2)
on a migrator checkpoint --pid "$pid" --to-pool "$pool" --raid 5 --name w1 --restorable-by b --json \
  >"$work/park.json" 2>"$work/park.err" || fail "checkpoint failed: $(cat "$work/park.json" "$work/park.err")"
cat "$work/park.json" >&2
[ "$(json "$work/park.json" ok)" = true ] || fail "checkpoint not ok"
[ "$(json "$work/park.json" mode)" = checkpoint ] || fail "wrong mode"
[ "$(json "$work/park.json" record_bytes)" -gt 0 ] || fail "no record stored"
wait_gone "$pid" || true
gone "$pid" || fail "the parked workload still runs on the source"
python3 - "$work/park.json" <<'PY' || fail "the pool did not take every page"
import json, sys
j = json.load(open(sys.argv[1]))
p = j["pool"]
sys.exit(0 if p["handed_off"] and p["pages_pushed"] == j["pages_total"] > 0 else 1)
PY
"$testbed" exec p1 true # the pool hosts still exist

# 2. The name is taken: refused before the freeze.
log "case: name already parked"
pid2=$(start_workload a w2 --mib 8 --child-mib 0 --threads 1)
rc=0
on a migrator checkpoint --pid "$pid2" --to-pool "$pool" --name w1 --json >"$work/dup.json" 2>&1 || rc=$?
[ $rc != 0 ] || fail "a second checkpoint named w1 succeeded"
grep -q "already parked" "$work/dup.json" || fail "unclear error: $(cat "$work/dup.json")"
running "$pid2" || fail "the refused workload is not running"

# 2b. A host it was not shared with (p4, authenticated by the same CA) can
# neither read its record nor its pages.
log "case: restore --from-pool on a host it was not shared with"
rc=0
on p4 migrator restore --from-pool "$pool" --name w1 --to "$(addr b)" >"$work/stranger.out" 2>&1 || rc=$?
cat "$work/stranger.out" >&2
[ $rc != 0 ] || fail "a host w1 was not shared with restored it"
grep -q "forbidden" "$work/stranger.out" || fail "the refusal does not say why: $(cat "$work/stranger.out")"

# 3. A node dies while parked; restore on b reads degraded.
log "case: restore --from-pool after losing p3"
"$testbed" stop p3
out="$work/w1.out"
mark=$(lines "$out")
on b migrator restore --from-pool "$pool" --name w1 --json >"$work/unpark.json" 2>"$work/unpark.err" &
rest=$!
wait_for "$out" "tick parent" 60 "$mark"
dest=""
for i in $(seq 1 100); do dest=$(restored_pid b) && break; sleep 0.05; done
[ -n "$dest" ] || fail "no restored workload on host b"
mark=$(lines "$out")
kill -USR1 "$dest"
wait_for "$out" "verify ok parent pages=$pages" 120 "$mark"
wait_for "$out" "verify ok child pages=1024" 120 "$mark"
if tail -n +"$((mark + 1))" "$out" | grep -q FAIL; then fail "the restored workload reported corruption"; fi
rc=0
wait "$rest" || rc=$?
cat "$work/unpark.json" >&2
[ $rc = 0 ] || fail "restore exited $rc: $(cat "$work/unpark.err")"
[ "$(json "$work/unpark.json" mode)" = restore ] || fail "wrong mode"
python3 - "$work/unpark.json" "$("$testbed" addr p3)" <<'PY' || fail "restore statistics are wrong"
import json, sys
j = json.load(open(sys.argv[1]))
p = j["pool"]
assert j["ok"], j
assert p["pages_from_source"] == 0, p           # there is no source
assert p["pages_from_pool"] > 0, p
assert p["degraded_stripes"] > 0, p             # p3 is gone
assert sys.argv[2] in p["lost_nodes"], p
PY
running "$dest" || fail "the restored workload is not running"
kill -KILL "$dest"
rc=0
on b migrator restore --from-pool "$pool" --name w1 >"$work/again.out" 2>&1 || rc=$?
[ $rc != 0 ] || fail "restoring w1 twice succeeded"
grep -q "no workload named 'w1'" "$work/again.out" || fail "unclear error: $(cat "$work/again.out")"
"$testbed" start p3

# 4. A checkpoint that cannot complete leaves the workload running.
log "case: checkpoint into a pool with a dead node"
"$testbed" stop p2
rc=0
on a migrator checkpoint --pid "$pid2" --to-pool "$pool" --raid 5 --name w2 --json \
  >"$work/bad.json" 2>&1 || rc=$?
cat "$work/bad.json" >&2
[ $rc != 0 ] || fail "a checkpoint into a pool with a dead node succeeded"
grep -q "$("$testbed" addr p2)" "$work/bad.json" || fail "the error does not name the dead node"
sleep 0.5
running "$pid2" || fail "the workload did not resume after the failed checkpoint"
"$testbed" start p2
rc=0
on b migrator restore --from-pool "$pool" --name w2 >"$work/w2.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "no workload named 'w2'" "$work/w2.out" ||
  fail "a failed checkpoint left a record: $(cat "$work/w2.out")"
pool_empty "after every workload left"
kill -KILL "$pid2"

# 5. Ctrl-C while the pool takes the pages (slowed to about 6 s here): the
# migrator waited for the push with no way out, and the source's daemon
# refused an abort until the push was over. Now the push stops, the
# workload runs on, and neither its pages nor its record stay in the pool.
log "case: checkpoint interrupted during the push"
"$testbed" stop a
FERRY_FAULT=slow-pool-push "$testbed" start a
a_log="$("$testbed" dir a)/pagesrv.log"
pid3=$(start_workload a w3 --mib 64 --child-mib 0 --threads 1)
amark=$(lines "$a_log")
on a migrator checkpoint --pid "$pid3" --to-pool "$pool" --raid 5 --name w3 --json \
  >"$work/int.json" 2>"$work/int.err" &
job=$!
wait_for "$a_log" "serving .* lazy pages" 60 "$amark"
sleep 1
mpid=$(on a migrator status --json | python3 -c '
import json, sys
print(*[m["migrator_pid"] for m in json.load(sys.stdin)["migrations"] if m["source_pid"] == int(sys.argv[1])])' "$pid3")
[ -n "$mpid" ] || fail "interrupted push: no migration of pid $pid3 in 'migrator status'"
grep -q "pushed .* pages into the pool" <(tail -n +"$((amark + 1))" "$a_log") &&
  fail "interrupted push: the push was over before the interrupt; slow it down more"
kill -INT "$mpid"
start=$SECONDS
rc=0
wait "$job" || rc=$?
took=$((SECONDS - start))
cat "$work/int.json" >&2
[ $rc != 0 ] || fail "interrupted push: the checkpoint succeeded"
grep -q interrupted "$work/int.json" || fail "interrupted push: unclear error: $(cat "$work/int.json" "$work/int.err")"
[ "$(json "$work/int.json" source_running)" = true ] || fail "interrupted push: the migrator says the source is not running"
running "$pid3" || fail "interrupted push: the workload does not run"
verify_workload "$pid3" "$work/w3.out" $((64 * 256))
# A functional bound, not a timing: the whole push takes about 6 s here.
[ "$took" -lt 30 ] || fail "interrupted push: the migrator took $took s to stop"
grep -q "aborting (.*interrupted" <(tail -n +"$((amark + 1))" "$a_log") ||
  fail "interrupted push: the source's daemon did not abort the migration"
# Stopped, not waited for: a push that ran to its end means the abort waited.
grep -q "pushed .* pages into the pool" <(tail -n +"$((amark + 1))" "$a_log") &&
  fail "interrupted push: the push ran to its end before the abort"
rc=0
on b migrator restore --from-pool "$pool" --name w3 >"$work/w3r.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "no workload named 'w3'" "$work/w3r.out" ||
  fail "interrupted push: a record stayed: $(cat "$work/w3r.out")"
pool_empty "after the interrupted push"
log "   stopped $took s after SIGINT"
kill -KILL "$pid3"
log "PASS"
