#!/usr/bin/env bash
# Failures before the destination resumes: each gets a clear error and the
# source workload keeps running unharmed (among them VMA flags that changed
# as the tree was frozen, which the source refuses to commit, and a migrator
# stopped before its commit, whose source the source's daemon resumes while
# it stays stopped, and one killed between the commit and its word to
# resume, whose source resumes when the destination says it killed its
# copy). Then a page corrupted in flight is
# caught by its checksum, refetched, and the migration completes. Last, the
# source's daemon stops on SIGTERM, also mid post-copy with its migrator gone.
source "$(dirname "$0")/lib.sh"

testbed_up
latency_before=$(cpu_latency_target)
pid=$(start_workload a victim --mib 32 --child-mib 4 --threads 2)
out="$work/victim.out"
log "workload pid $pid on host a"

# expect_failure NAME PATTERN MIGRATE-ARGS...: the migration fails with an
# error matching PATTERN, and the source is verified intact and running.
expect_failure() {
  local name=$1 pattern=$2 mark
  shift 2
  log "case: $name"
  if on a migrator migrate --pid "$pid" --json "$@" >"$work/$name.json" 2>"$work/$name.err"; then
    fail "$name: the migration succeeded"
  fi
  cat "$work/$name.json" >&2
  grep -q -- "$pattern" "$work/$name.json" || fail "$name: error does not mention '$pattern'"
  [ "$(json "$work/$name.json" source_running)" = true ] || fail "$name: migrator says the source is not running"
  running "$pid" || fail "$name: source pid $pid is not running"
  verify_workload "$pid" "$out" 8192 1024
  # Neither host's idle polling outlives the failed migration.
  latency_target_back "$name" "$latency_before"
}

# Bad input rejected before anything is frozen.
log "case: unknown pid"
on a migrator migrate --pid 999999 --to "$(addr b)" >"$work/nopid.out" 2>&1 && fail "unknown pid accepted"
grep -q "no process with pid 999999" "$work/nopid.out" || fail "unclear error for an unknown pid: $(cat "$work/nopid.out")"
log "case: not a PID namespace root"
on a migrator migrate --pid $$ --to "$(addr b)" >"$work/notroot.out" 2>&1 && fail "a non-namespace pid accepted"
grep -q "not the init of its own PID namespace" "$work/notroot.out" || fail "unclear error: $(cat "$work/notroot.out")"
log "case: malformed destination"
on a migrator migrate --pid "$pid" --to "nowhere" >"$work/badaddr.out" 2>&1 && fail "a malformed address accepted"
grep -q "is not an IP:PORT address" "$work/badaddr.out" || fail "unclear error: $(cat "$work/badaddr.out")"

# Nothing listens on port 1 of host b; no host has address .99.
expect_failure refused "cannot reach the destination daemon" --to "${FERRY_TESTBED_NET}.2:1"
expect_failure unreachable "cannot reach the destination daemon" --to "${FERRY_TESTBED_NET}.99:7140"
# These namespace hosts have no RDMA device: the source says so before the freeze.
expect_failure no-rdma-device "the source cannot use that fabric" --to "$(addr b)" --fabric rdma

# The destination daemon dies (SIGKILL) as the images arrive, before restore.
"$testbed" stop b
FERRY_FAULT=dest-die-before-restore "$testbed" start b
expect_failure dest-dies "destination" --to "$(addr b)"
# The source's daemon lets go of the aborted migration at once: a channel
# the dying destination had opened (its HOLES channel waits for a scan that
# never comes) once held it, its staging and its channels, for 2 minutes.
wait_for "$("$testbed" dir a)/pagesrv.log" "migration $(json "$work/dest-dies.json" migration_id): released" 10

# The destination's host stops answering during its restore: its daemon
# stalls with every image (it holds the connection open), and its link is
# cut. Nothing closes the connection; the migrator's keepalive finds the
# silence in about 15 s, where it used to wait out the restore's deadline
# (150 s here) with the source frozen. The source runs on.
"$testbed" stop b
FERRY_FAULT=dest-stall-before-restore "$testbed" start b
b_log="$("$testbed" dir b)/pagesrv.log"
mark=$(lines "$b_log")
log "case: dest-silent"
start=$SECONDS
on a migrator migrate --pid "$pid" --json --to "$(addr b)" >"$work/dest-silent.json" 2>"$work/dest-silent.err" &
silent_mig=$!
wait_for "$b_log" "stalling for 60 s before restore" 60 "$mark"
"$testbed" cut b
rc=0
wait "$silent_mig" || rc=$?
"$testbed" mend b
took=$((SECONDS - start))
[ "$rc" != 0 ] || fail "dest-silent: the migration succeeded"
grep -q "the destination host stopped answering" "$work/dest-silent.json" ||
  fail "dest-silent: unclear error: $(cat "$work/dest-silent.json" "$work/dest-silent.err")"
# A functional bound, not a timing: the restore's own deadline is 150 s.
[ "$took" -lt 100 ] || fail "dest-silent: the migrator took $took s to give up on a silent destination"
[ "$(json "$work/dest-silent.json" source_running)" = true ] || fail "dest-silent: the source is not running"
running "$pid" || fail "dest-silent: source pid $pid is not running"
verify_workload "$pid" "$out" 8192 1024
# CRIU resumed the source by itself, and the source's daemon killed no
# CRIU: it once waited out its abort deadline on the migrator's CRIU, ended
# but not yet reaped, then "killed" it, and the destination's CRIU of the
# same migration, which this testbed's shared /proc let it find.
grep -q "the source runs again" "$work/dest-silent.err" ||
  fail "dest-silent: CRIU did not resume the source by itself: $(cat "$work/dest-silent.err")"
silent_id=$(json "$work/dest-silent.json" migration_id)
a_log="$("$testbed" dir a)/pagesrv.log"
grep "migration $silent_id: " "$a_log" | grep -q "killed CRIU" &&
  fail "dest-silent: the source's daemon killed a CRIU: $(grep "migration $silent_id: " "$a_log")"
# The source's daemon lets go of it at once: the abort shuts the silent
# destination's channels down (their threads would wait for its host).
wait_for "$a_log" "migration $silent_id: released" 10
log "   gave up after $took s: $(json "$work/dest-silent.json" error)"

# The destination's daemon hangs with every image while its host answers
# (the same stall, the link left up): keepalive sees nothing wrong, but its
# restore's progress reports stop, and the migrator gives up on their
# silence (25 s) rather than on the restore's deadline. The source runs on.
start=$SECONDS
expect_failure dest-hung "reported no progress of its restore" --to "$(addr b)"
took=$((SECONDS - start))
json "$work/dest-hung.json" error | grep -q 'its last report: none since the images were sent' ||
  fail "dest-hung: the error does not say where the restore stopped: $(json "$work/dest-hung.json" error)"
# A functional bound, not a timing: the restore's own deadline is 150 s.
[ "$took" -lt 100 ] || fail "dest-hung: the migrator took $took s to give up on a hung destination"
log "   gave up after $took s"

# migration_of PID: "MIGRATOR_PID PHASE" of the live migrator moving PID, if any.
migration_of() {
  on a migrator status --json | python3 -c '
import json, sys
for m in json.load(sys.stdin)["migrations"]:
    if m["source_pid"] == int(sys.argv[1]) and m["migrator_alive"]:
        print(m["migrator_pid"], m["phase"])' "$1"
}

# The migrator itself stops (SIGSTOP: a debugger, a stray signal) before the
# commit. It keeps both connections open and its host answers, so nothing
# closed and no keepalive failed: the source stayed frozen for as long as
# it stayed stopped. Now its heartbeats to the source's daemon stop, and
# the daemon gives up on it and resumes the source itself, while the
# migrator is still stopped. Woken, the migrator fails with the daemon's
# reason. short-heartbeat-silence has the migrator ask for the daemon's
# shortest bound (10 s) rather than 60 s.
# migrator_stopped NAME FAULTS DAEMON-LOG-PATTERN ERROR-PATTERN [STOP-AFTER-B-LOG-PATTERN]:
# with no pattern the migrator stops itself (a fault), else the test stops
# it once b's log shows the pattern.
migrator_stopped() {
  local name=$1 faults=$2 daemon_says=$3 error_says=$4 b_says=${5:-} amark bmark job mpid i rc stopped_at
  log "case: $name"
  amark=$(lines "$a_log")
  bmark=$(lines "$b_log")
  FERRY_FAULT=$faults on a migrator migrate --pid "$pid" --json --to "$(addr b)" \
    >"$work/$name.json" 2>"$work/$name.err" &
  job=$!
  if [ -n "$b_says" ]; then
    wait_for "$b_log" "$b_says" 60 "$bmark"
  fi
  mpid=""
  for ((i = 0; i < 200; i++)); do
    mpid=$(migration_of "$pid" | cut -d' ' -f1)
    [ -n "$mpid" ] && break
    sleep 0.1
  done
  [ -n "$mpid" ] || fail "$name: no migration of pid $pid in 'migrator status'"
  if [ -n "$b_says" ]; then
    kill -STOP "$mpid"
  else
    for ((i = 0; i < 600; i++)); do
      [ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] && break
      sleep 0.1
    done
  fi
  [ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] || fail "$name: the migrator did not stop"
  stopped_at=$SECONDS
  wait_for "$a_log" "$daemon_says" 40 "$amark"
  # The daemon's abort is bounded by CRIU's abort deadline, then a release.
  for ((i = 0; i < 900; i++)); do
    running "$pid" && break
    sleep 0.1
  done
  running "$pid" || fail "$name: the source did not run again while the migrator was stopped"
  verify_workload "$pid" "$out" 8192 1024
  [ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] ||
    fail "$name: the migrator did not stay stopped: the daemon alone resumed nothing"
  log "   the source ran again $((SECONDS - stopped_at)) s after the migrator stopped"
  kill -CONT "$mpid"
  rc=0
  wait "$job" || rc=$?
  cat "$work/$name.json" >&2
  [ "$rc" != 0 ] || fail "$name: the migration succeeded"
  grep -q -- "$error_says" "$work/$name.json" ||
    fail "$name: unclear error: $(cat "$work/$name.json" "$work/$name.err")"
  [ "$(json "$work/$name.json" source_running)" = true ] || fail "$name: the migrator says the source is not running"
  running "$pid" || fail "$name: source pid $pid is not running"
  verify_workload "$pid" "$out" 8192 1024
}
a_log="$("$testbed" dir a)/pagesrv.log"
migrator_stopped "migrator stopped after registering" short-heartbeat-silence \
  "aborting (the migrator sent nothing for 10 s before the commit" \
  "the source daemon aborted the migration and resumed the source: the migrator sent nothing" \
  "stalling for 60 s before restore"
migrator_stopped "migrator stopped before registering" short-heartbeat-silence,migrator-stop-before-register \
  "the migrator sent nothing for 10 s before it registered the migration" \
  "the source daemon released the source: the migrator sent nothing"

# The migrator stops after the commit, while the post-copy runs (slowed on
# b). The copy needs no migrator, but the source's daemon waited for its
# FINISH to end CRIU's dump: the frozen source tree and its memory stayed
# for as long as the migrator was stopped. Now the daemon finishes the
# migration itself once the destination has had every page for the
# migrator's silence bound (10 s here), and answers the migrator's FINISH,
# when it wakes, as if it had come first: the migration succeeds.
log "case: migrator stopped after the commit"
"$testbed" stop b
FERRY_FAULT=slow-background "$testbed" start b
late=$(start_workload a late --mib 64 --child-mib 4 --threads 2)
amark=$(lines "$a_log")
FERRY_FAULT=short-heartbeat-silence on a migrator migrate --pid "$late" --json --to "$(addr b)" \
  >"$work/late.json" 2>"$work/late.err" &
job=$!
mpid=""
for ((i = 0; i < 600; i++)); do
  mpid=$(on a migrator status --json | python3 -c '
import json, sys
for m in json.load(sys.stdin)["migrations"]:
    if m["source_pid"] == int(sys.argv[1]) and m["phase"] in ("committed", "post-copy"):
        print(m["migrator_pid"])' "$late")
  [ -n "$mpid" ] && break
  sleep 0.05
done
[ -n "$mpid" ] || fail "late finish: the migration never reached its commit: $(cat "$work/late.json" "$work/late.err")"
kill -STOP "$mpid"
stopped_at=$SECONDS
wait_for "$a_log" "the migrator has not finished the migration (stopped or hung; its host answers): finishing it here" 90 "$amark"
wait_gone "$late" 30 || fail "late finish: the source tree is still there while the migrator is stopped"
[ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] || fail "late finish: the migrator did not stay stopped"
log "   the source ended $((SECONDS - stopped_at)) s after the migrator stopped"
kill -CONT "$mpid"
wait "$job" || fail "late finish: the migration failed once its migrator woke: $(cat "$work/late.json" "$work/late.err")"
[ "$(json "$work/late.json" ok)" = true ] || fail "late finish: not ok"
dpid=$(json "$work/late.json" destination_pid)
running "$dpid" || fail "late finish: the copy (pid $dpid) does not run on b"
verify_workload "$dpid" "$work/late.out" $((64 * 256)) 1024
kill -KILL "$dpid"

# gap_migrator NAME: starts a migration of $pid whose migrator stops itself
# once the source committed, and sets $job and $mpid.
gap_migrator() {
  local name=$1 phase i
  FERRY_FAULT=migrator-stop-after-commit on a migrator migrate --pid "$pid" --json --to "$(addr b)" \
    >"$work/$name.json" 2>"$work/$name.err" &
  job=$!
  mpid=""
  phase=""
  for ((i = 0; i < 600; i++)); do
    read -r mpid phase < <(migration_of "$pid") || true
    [ -n "$mpid" ] && [ "$(awk '{print $3}' /proc/"$mpid"/stat 2>/dev/null)" = T ] && break
    sleep 0.1
  done
  [ -n "$mpid" ] && [ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] ||
    fail "$name: the migrator did not stop after the commit: $(cat "$work/$name.json" "$work/$name.err")"
  # The record says "committing" from just before the commit until the
  # destination has its answer. Read again now that the migrator is
  # stopped: the look above may have come before it got there.
  phase=$(on a migrator status --json | python3 -c '
import json, sys
for m in json.load(sys.stdin)["migrations"]:
    if m["migrator_pid"] == int(sys.argv[1]):
        print(m["phase"])' "$mpid")
  [ "$phase" = committing ] || fail "$name: the migrator stopped in phase '$phase', not after its commit"
  running "$pid" && fail "$name: the source runs while its migration is committed"
  return 0
}
# gap_source_resumes NAME SECS: b refuses the resume, and a resumes the
# committed source once b says its copy is gone.
gap_source_resumes() {
  local name=$1 secs=$2 i
  wait_for "$b_log" "resume refused (.*); CRIU kills the restored tasks" "$secs" "$bmark"
  wait_for "$a_log" "the destination killed its copy before it ran" 30 "$amark"
  wait_for "$a_log" "aborting (the destination killed its copy before it ran); the source resumes" 30 "$amark"
  for ((i = 0; i < 300; i++)); do
    running "$pid" && break
    sleep 0.1
  done
  running "$pid" || fail "$name: the source did not run again once b killed its copy"
  verify_workload "$pid" "$out" 8192 1024
}

# The migrator stops after the source committed, before it tells the
# destination to resume, and is then killed. b's gate hears it go and kills
# its copy before the copy ran; the committed source once waited an hour
# for a destination that would never finish, then stayed frozen. Now b's
# lazy-pages tells the source its copy is gone, and the source resumes.
log "case: migrator killed between the commit and the resume"
"$testbed" stop b
"$testbed" start b
amark=$(lines "$a_log")
bmark=$(lines "$b_log")
gap_migrator gap-killed
kill -KILL "$mpid"
stopped_at=$SECONDS
wait "$job" && fail "gap-killed: a killed migrator's migration succeeded"
gap_source_resumes gap-killed 30
log "   the source ran again $((SECONDS - stopped_at)) s after its migrator was killed"

# The same gap with the migrator only stopped: b's gate waits 30 s for its
# answer, then kills its copy and tells a, which resumes the source while
# the migrator is still stopped. Woken, the migrator fails, and says the
# source runs.
log "case: migrator stopped between the commit and the resume"
amark=$(lines "$a_log")
bmark=$(lines "$b_log")
gap_migrator gap-stopped
stopped_at=$SECONDS
gap_source_resumes gap-stopped 60
[ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] || fail "gap-stopped: the migrator did not stay stopped"
log "   the source ran again $((SECONDS - stopped_at)) s after its migrator stopped"
kill -CONT "$mpid"
wait "$job" && fail "gap-stopped: the migration succeeded after its destination killed the copy"
cat "$work/gap-stopped.json" >&2
grep -q "restore failed on the destination: the resume was refused (the migrator did not answer within 30 s)" "$work/gap-stopped.json" ||
  fail "gap-stopped: the error does not say the destination refused the resume"
[ "$(json "$work/gap-stopped.json" source_running)" = true ] ||
  fail "gap-stopped: the migrator says the source is not running: $(cat "$work/gap-stopped.err")"
running "$pid" || fail "gap-stopped: source pid $pid is not running"
verify_workload "$pid" "$out" 8192 1024

# criu restore fails on the destination.
"$testbed" stop b
FERRY_FAULT=restore-fail "$testbed" start b
expect_failure restore-fails "restore failed on the destination" --to "$(addr b)"
# ... with --precopy: the tree was write-tracked from the prepare and its
# memory staged on b. The failure detaches the trackers (no VMA of the
# source keeps the uffd's write protection), and the source runs on.
expect_failure restore-fails-precopy "restore failed on the destination" --to "$(addr b)" --precopy --precopy-wait 10
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["precopy"]; sys.exit(0 if not p["error"] and p["pages_sent"] > 0 else 1)' \
  "$work/restore-fails-precopy.json" || fail "restore-fails-precopy: no pre-copy ran before the failure"
tracked_end=$((SECONDS + 10))
while :; do
  tracked=""
  for p in $pid $(descendants_of "$pid"); do
    grep -q '^VmFlags:.* uw' "/proc/$p/smaps" 2>/dev/null && tracked+=" $p"
  done
  [ -z "$tracked" ] && break
  [ $SECONDS -lt $tracked_end ] || fail "restore-fails-precopy: still write-tracked 10 s after the failure:$tracked"
  sleep 0.2
done

# The images are corrupt: the destination's image reader refuses them.
"$testbed" stop b
"$testbed" start b
# Its own work dir, seeded with the logs of 40 older failed migrations: a
# failure keeps its CRIU logs, and only the newest 32 such dirs stay.
wr="$work/work-root"
for i in $(seq 1 40); do
  d="$wr/$(printf '%032x' "$i")"
  mkdir -p "$d" && echo "old $i" >"$d/dump.log" && touch -d "-$((100 - i)) min" "$d"
done
FERRY_FAULT=corrupt-images expect_failure corrupt-images "images are corrupt" --to "$(addr b)" --work-dir "$wr"
id=$(json "$work/corrupt-images.json" migration_id)
[ -s "$wr/$id/dump.log" ] || fail "corrupt-images: CRIU's dump log was not kept in $wr/$id"
[ -z "$(find "$wr/$id" -type f ! -name '*.log')" ] || fail "corrupt-images: more than logs kept: $(ls "$wr/$id")"
kept=$(find "$wr" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$kept" = 32 ] || fail "corrupt-images: $kept failed migrations' logs kept, not the newest 32"
[ -d "$wr/$(printf '%032x' 40)" ] && [ ! -d "$wr/$(printf '%032x' 9)" ] ||
  fail "corrupt-images: the wrong logs were pruned: $(ls "$wr")"
# The destination's CRIU had the restore request since the prepare and
# waited for the images (criu-patches/0015): refusing them called it off,
# and it ended rather than waiting on.
blog="/tmp/ferry-testbed/$FERRY_TESTBED/b/incoming/$id/restore.log"
grep -q "The restore was called off: its wait fd closed" "$blog" ||
  fail "corrupt-images: the waiting CRIU was not called off: $(tail -3 "$blog")"
bpid=$(cat "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.pid")
for _ in $(seq 50); do pgrep -P "$bpid" -x criu >/dev/null || break; sleep 0.1; done
pgrep -P "$bpid" -x criu >/dev/null && fail "corrupt-images: a CRIU is still running under host b's daemon"

# The migrator is interrupted (SIGINT) while the destination waits at the
# commit gate: the source resumes and the restored copy never runs.
no_copy_on_b() {
  local p
  for p in $(ip netns pids "$FERRY_TESTBED-b"); do
    [ "$p" = "$(cat "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.pid")" ] && continue
    grep -q memload "/proc/$p/cmdline" 2>/dev/null && ! gone "$p" && fail "a restored copy runs on b (pid $p)"
  done
  return 0
}
FERRY_FAULT=interrupt-before-commit expect_failure interrupted "interrupted" --to "$(addr b)"
no_copy_on_b

# The destination fails its restore after the source committed, before its
# tasks ran: the source is uncommitted and resumes.
"$testbed" stop b
FERRY_FAULT=dest-fail-after-commit "$testbed" start b
expect_failure dest-fails-after-commit "restore failed on the destination" --to "$(addr b)"
no_copy_on_b
"$testbed" stop b
"$testbed" start b

# The workload changes a VMA's madvise flags between CRIU's early read of
# them and the freeze (injected: the migrator's watch sees a madvise call,
# and the source daemon, reading the frozen tree again, a flag the images
# lack): the commit is refused, the copy never runs, the source resumes.
"$testbed" stop a
FERRY_FAULT=vma-flags-changed "$testbed" start a
FERRY_FAULT=vma-flags-changed expect_failure vma-flags-changed \
  "changed its memory mappings' flags as it was frozen" --to "$(addr b)"
grep -q "checked at the commit: a madvise call was injected" "$work/vma-flags-changed.json" ||
  fail "the report does not say why the flags were checked"
no_copy_on_b

# A page corrupted after the source checksummed it: refetched, never installed.
"$testbed" stop a
FERRY_FAULT=corrupt-page-once "$testbed" start a
log "case: a page corrupted in flight"
mark=$(lines "$out")
on a migrator migrate --pid "$pid" --to "$(addr b)" --json >"$work/corrupt-page.json" || fail "migration failed"
cat "$work/corrupt-page.json" >&2
[ "$(json "$work/corrupt-page.json" pages_refetched)" -ge 1 ] || fail "no page was refetched"
dest=$(json "$work/corrupt-page.json" destination_pid)
kill -USR1 "$dest"
wait_for "$out" "verify ok parent pages=8192" 30 "$mark"
wait_for "$out" "verify ok child pages=1024" 30 "$mark"
# SIGTERM to the source daemon while a committed migration's post-copy
# runs and its migrator is gone: the daemon stops within its drain bound.
# Its session used to wait up to an hour for the destination's report,
# which the shutdown of its page channels made impossible. The restored
# copy loses its source then, and is killed (fail-stop).
log "case: SIGTERM mid post-copy, migrator gone"
"$testbed" stop b
FERRY_LAZY_PAGES_ARGS="--background-chunk 1 --background-depth 1" "$testbed" start b
"$testbed" stop a
FERRY_PAGESRV_ARGS="--drain-timeout 1" "$testbed" start a
big=$(start_workload a drain --mib 256 --child-mib 0)
blog="/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log"
mark=$(lines "$blog")
on a migrator migrate --pid "$big" --to "$(addr b)" --json >"$work/drain.json" 2>"$work/drain.err" &
mig=$!
wait_for "$blog" "resumed as pid" 60 "$mark"
kill -KILL "$mig"
wait "$mig" 2>/dev/null || true
daemon=$(cat "/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.pid")
alog="/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.log"
tail -n +"$((mark + 1))" "$blog" | grep -q "transfer complete" &&
  fail "the post-copy had ended before the SIGTERM: the case proves nothing"
kill -TERM "$daemon"
start=$SECONDS
# Functional bound: drain 1 s, then the sessions' threads end.
wait_gone "$daemon" 60 || fail "the source daemon had not stopped 60 s after SIGTERM: $(tail -n 5 "$alog")"
log "   stopped $((SECONDS - start)) s after SIGTERM: $(grep -o "the migrator left after commit.*\|the daemon stops before the destination finished.*" "$alog" | tr '\n' ' ')"
kill -KILL "$big" 2>/dev/null || true
"$testbed" start a
"$testbed" stop b
"$testbed" start b

# The daemon stops cleanly on SIGTERM.
log "case: SIGTERM"
daemon=$(cat "/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.pid")
kill -TERM "$daemon"
wait_gone "$daemon" 10 || true
gone "$daemon" || fail "pagesrv did not stop on SIGTERM"
grep -q "signal 15: stopping" "/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.log" || fail "no stop message"
grep -q "info: stopped" "/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.log" || fail "pagesrv did not finish its shutdown"
log "PASS"
