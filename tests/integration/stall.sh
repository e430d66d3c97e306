#!/usr/bin/env bash
# A CRIU that stalls: the migrator returns within its deadlines with a clear
# error, never waits on the stuck CRIU again, and the source workload runs
# on wherever it can be saved (migrator/README.md has the matrix).
#
# CRIU is made to stall by an action script (--criu-config) that never
# returns at a chosen notification: CRIU waits for it in wait4, as a CRIU
# whose breakpoint never fires waits for its trap. Deadlines are scaled down
# (--deadline-scale) so that each case takes seconds.
#
# Without FERRY_TEST_ENGINE, a bare process tree:
#   pre-dump      CRIU stops before it seizes: the tasks never froze
#   post-dump     tasks frozen, parasite cured, no page server: CRIU is
#                 killed, the kernel detaches the tasks, they run on
#   status-ready  the page server listens but never answers CLOSE: the
#                 destination runs the workload, so the source tasks are killed
#   abort         `migrator status` shows the stuck migration and
#                 `migrator abort ID` ends it from another terminal
#   orphan        the migrator is SIGKILLed meanwhile: `migrator status`
#                 says so and `migrator abort ID` releases the workload
#                 (CRIU, stuck in wait4, outlives its migrator)
# With FERRY_TEST_ENGINE=podman|docker, a container stalls at post-dump: CRIU
# (under the engine's runc) is found by its migration and killed, its network
# lock removed, and the container runs on as its engine reports it.
source "$(dirname "$0")/lib.sh"

engine=${FERRY_TEST_ENGINE:-}
scale=0.2 # dump deadline 9 s at this size, page server 3 s, release 2.4 s
bound=60  # seconds a stalled migration may take in all: far beyond its deadlines

# A test that fails half-way must not leave a stopped CRIU holding tasks.
test_cleanup() {
  local f
  for f in "$work"/criu-stalled-*.pid "$work"/stall-sleeper-*.pid; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  return 0
}

# stalled_criu_gone PHASE: the CRIU stopped at PHASE no longer exists.
# Also ends the script it was waiting for, which outlives it.
stalled_criu_gone() {
  local f="$work/criu-stalled-$1.pid"
  [ -f "$f" ] || fail "CRIU never reached $1 (no $f)"
  wait_gone "$(cat "$f")" || true
  gone "$(cat "$f")" || fail "the CRIU stalled at $1 (pid $(cat "$f")) is still there"
  kill -KILL "$(cat "$work/stall-sleeper-$1.pid")" 2>/dev/null || true
}

# The destination kills a copy that may not resume as soon as the migrator
# refuses it or goes away; give it a moment.
no_copy_on_b() {
  local p
  for p in $(ip netns pids "$FERRY_TESTBED-b"); do
    [ "$p" = "$(cat "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.pid")" ] && continue
    grep -q memload "/proc/$p/cmdline" 2>/dev/null || continue
    wait_gone "$p" 10 || true
    gone "$p" || fail "a restored copy runs on b (pid $p)"
  done
  return 0
}

# migrate_stalled NAME PHASE ARGS...: runs a migration whose CRIU stalls at
# PHASE; its JSON goes to $work/NAME.json. Fails if it outlives $bound.
migrate_stalled() {
  local name=$1 phase=$2 conf t0 t1 rc=0
  shift 2
  conf=$(stall_config "$work" "$phase")
  rm -f "$work/criu-stalled-$phase.pid"
  t0=$(date +%s)
  on a timeout -s KILL $((bound + 30)) migrator migrate --json --deadline-scale "$scale" \
    --criu-config "$conf" --to "$(addr b)" "$@" >"$work/$name.json" 2>"$work/$name.err" || rc=$?
  t1=$(date +%s)
  cat "$work/$name.json" >&2
  echo >&2
  [ "$rc" != 137 ] || fail "$name: the migrator hung (killed after $((bound + 30)) s)"
  [ $((t1 - t0)) -le "$bound" ] || fail "$name: the migrator took $((t1 - t0)) s, over $bound s"
  log "$name: the migrator returned after $((t1 - t0)) s (exit $rc)"
  return $rc
}

expect_saved() {
  local name=$1
  [ "$(json "$work/$name.json" ok)" = false ] || fail "$name: the migration succeeded"
  [ "$(json "$work/$name.json" criu_stuck)" = true ] || fail "$name: not reported as a stuck CRIU"
  grep -q "in time" "$work/$name.json" || fail "$name: the error does not say CRIU ran out of time"
  grep -q "killed CRIU" "$work/$name.json" || fail "$name: the recovery does not say CRIU was killed"
  [ "$(json "$work/$name.json" source_running)" = true ] || fail "$name: the migrator says the source does not run"
}

if [ -z "$engine" ]; then
  testbed_up
  pid=$(start_workload a victim --mib 32 --child-mib 4 --threads 2)
  out="$work/victim.out"
  log "workload pid $pid on host a"

  for phase in pre-dump post-dump; do
    log "case: CRIU stalls at $phase"
    migrate_stalled "stall-$phase" "$phase" --pid "$pid" && fail "stall at $phase: the migration succeeded"
    expect_saved "stall-$phase"
    stalled_criu_gone "$phase"
    running "$pid" || fail "stall at $phase: source pid $pid is not running"
    verify_workload "$pid" "$out" 8192 1024
    no_copy_on_b
  done

  log "case: CRIU stalls at status-ready (after the commit, CLOSE is never answered)"
  mark=$(lines "$out")
  migrate_stalled stall-status-ready status-ready --pid "$pid" || fail "status-ready: the migration failed"
  [ "$(json "$work/stall-status-ready.json" ok)" = true ] || fail "status-ready: not ok"
  grep -q "did not take CLOSE" "$work/stall-status-ready.json" || fail "status-ready: no word of the forced end"
  stalled_criu_gone status-ready
  wait_gone "$pid" || true
  gone "$pid" || fail "status-ready: the source pid $pid still exists beside its copy"
  dest=$(json "$work/stall-status-ready.json" destination_pid)
  verify_workload "$dest" "$out" 8192 1024
  kill -KILL "$dest"

  log "case: migrator status and migrator abort on a stuck migration"
  pid=$(start_workload a victim2 --mib 32 --child-mib 4 --threads 2)
  out="$work/victim2.out"
  conf=$(stall_config "$work" post-dump)
  rm -f "$work/criu-stalled-post-dump.pid"
  # Deadlines as long as a real run's: only the abort ends this one early.
  on a migrator migrate --json --criu-config "$conf" --to "$(addr b)" --pid "$pid" \
    >"$work/aborted.json" 2>"$work/aborted.err" &
  migrator_job=$!
  for _ in $(seq 1 200); do [ -f "$work/criu-stalled-post-dump.pid" ] && break; sleep 0.05; done
  [ -f "$work/criu-stalled-post-dump.pid" ] || fail "abort: CRIU never reached post-dump"
  on a migrator status >"$work/status.txt"
  cat "$work/status.txt" >&2
  on a migrator status --json >"$work/status.json"
  id=$(python3 -c 'import json,sys; m=[m for m in json.load(open(sys.argv[1]))["migrations"] if m["source_pid"]==int(sys.argv[2])]; print(m[0]["id"] if m else "")' "$work/status.json" "$pid")
  [ -n "$id" ] || fail "abort: migrator status does not list the migration of pid $pid"
  grep -q "${id:0:12}" "$work/status.txt" || fail "abort: the status table lacks ${id:0:12}"
  python3 -c 'import json,sys; m=[m for m in json.load(open(sys.argv[1]))["migrations"] if m["id"]==sys.argv[2]][0]; assert m["migrator_alive"] and m["workload"]=="frozen" and m["criu_pids"], m' \
    "$work/status.json" "$id" || fail "abort: status does not show a live migrator, a frozen workload and its CRIU"
  on a timeout -s KILL 90 migrator abort "${id:0:8}" >"$work/abort.txt" || fail "abort failed: $(cat "$work/abort.txt")"
  cat "$work/abort.txt" >&2
  grep -q "the workload runs" "$work/abort.txt" || fail "abort: no word that the workload runs"
  wait "$migrator_job" && fail "abort: the aborted migration succeeded"
  grep -q interrupted "$work/aborted.json" || fail "abort: the migrator does not say it was interrupted"
  stalled_criu_gone post-dump
  verify_workload "$pid" "$out" 8192 1024
  no_copy_on_b
  on a migrator status --json | grep -q "$id" && fail "abort: the migration is still listed"
  rm -f "$work/criu-stalled-post-dump.pid"

  log "case: the migrator dies while CRIU is stuck; abort releases the workload"
  on a migrator migrate --json --criu-config "$conf" --to "$(addr b)" --pid "$pid" \
    >"$work/orphan.json" 2>"$work/orphan.err" &
  for _ in $(seq 1 200); do [ -f "$work/criu-stalled-post-dump.pid" ] && break; sleep 0.05; done
  [ -f "$work/criu-stalled-post-dump.pid" ] || fail "orphan: CRIU never reached post-dump"
  # this_migration FIELD: a field of the record of the migration of $pid.
  this_migration() {
    python3 -c 'import json,sys; print([m for m in json.load(open(sys.argv[1]))["migrations"] if m["source_pid"]==int(sys.argv[2])][0][sys.argv[3]])' \
      <(on a migrator status --json) "$pid" "$1"
  }
  migrator_pid=$(this_migration migrator_pid)
  kill -KILL "$migrator_pid"
  wait_gone "$migrator_pid" || true
  on a migrator status >"$work/status-orphan.txt"
  cat "$work/status-orphan.txt" >&2
  grep -q GONE "$work/status-orphan.txt" || fail "orphan: status does not say the migrator is gone"
  id=$(this_migration id)
  on a timeout -s KILL 90 migrator abort "$id" >"$work/abort-orphan.txt" || fail "orphan abort failed: $(cat "$work/abort-orphan.txt")"
  cat "$work/abort-orphan.txt" >&2
  stalled_criu_gone post-dump
  running "$pid" || fail "orphan: source pid $pid is not running"
  verify_workload "$pid" "$out" 8192 1024
  no_copy_on_b
  log "PASS"
  exit 0
fi

# A container whose CRIU, under the engine's runc, stalls at post-dump.
ctr() { local h=$1; shift; on "$h" "$engine" "$@"; }
"$testbed" up --engines >&2
image=$(engine_image "$engine")
ctr a run -d --name stall1 -v "$FERRY_BUILD/examples:/ferry:ro" "$image" \
  /ferry/memload --mib 32 --child-mib 4 --seed 5 >/dev/null
for _ in $(seq 1 200); do ctr a logs stall1 2>&1 | grep -q "ready child" && break; sleep 0.1; done
cpid=$(ctr a inspect stall1 --format '{{.State.Pid}}')
log "case: $engine's CRIU stalls at post-dump"
migrate_stalled "stall-$engine" post-dump --engine "$engine" --container stall1 &&
  fail "$engine: the migration succeeded"
expect_saved "stall-$engine"
stalled_criu_gone post-dump
[ "$(ctr a inspect stall1 --format '{{.State.Status}}')" = running ] ||
  fail "$engine: the engine does not report the container running"
# CRIU locked the container's network namespace; the lock must be gone.
if nsenter --net="/proc/$cpid/ns/net" iptables -w -S CRIU >/dev/null 2>&1; then
  fail "$engine: CRIU's network lock is still in the container's namespace"
fi
mark=$(ctr a logs stall1 2>&1 | wc -l)
kill -USR1 "$cpid"
for _ in $(seq 1 100); do
  ctr a logs stall1 2>&1 | tail -n +"$((mark + 1))" | grep -q "verify ok child" && break
  sleep 0.1
done
ctr a logs stall1 2>&1 | tail -n +"$((mark + 1))" | grep -q "verify ok parent pages=8192" ||
  fail "$engine: the container's memory does not verify"
ctr a logs stall1 2>&1 | grep -q "verify FAIL" && fail "$engine: the container's memory is damaged"
[ -z "$(ctr b ps -a -q)" ] || fail "$engine: a container was left on b"
log "PASS"
