#!/usr/bin/env bash
# Podman containers migrate post-copy between the testbed's hosts, each with
# its own podman (testbed up --engines), on a Debian image built here:
#   1. a memload container (64 MiB + a forked child, env, label, writable-layer
#      changes) arrives on b with its name, config, files and memory; the
#      source container is gone; podman logs/stop/rm work on the copy;
#   2. the destination daemon dies as the images arrive: the source
#      container keeps running, its memory intact;
#   3. a container of that name already exists on b: refused before the
#      freeze, and neither container is touched.
. "$(dirname "$0")/lib.sh"

"$testbed" up --engines >&2
image=localhost/ferry-test:latest
log "building a Debian image (debootstrap)"
"$repo/examples/image.sh" "$work/rootfs.tar" >/dev/null
for h in a b; do on "$h" podman import "$work/rootfs.tar" "$image" >/dev/null; done

examples=$FERRY_BUILD/examples
# run_memload HOST NAME: a memload container; waits until both processes are ready.
run_memload() {
  on "$1" podman run -d --name "$2" -e FERRY_TEST=yes --label ferry.test=podman \
    -v "$examples:/ferry:ro" "$image" /ferry/memload --mib 64 --child-mib 16 --seed 11 >/dev/null
  for _ in $(seq 1 200); do
    on "$1" podman logs "$2" 2>&1 | grep -q "ready child" && return 0
    sleep 0.1
  done
  fail "container $2 on $1 did not get ready"
}
# verified HOST NAME: SIGUSR1 makes memload check every page of both processes.
verified() {
  local pid
  pid=$(on "$1" podman inspect "$2" --format '{{.State.Pid}}')
  kill -USR1 "$pid"
  for _ in $(seq 1 100); do
    local out
    out=$(on "$1" podman logs "$2" 2>&1)
    if grep -q "verify ok parent" <<<"$out" && grep -q "verify ok child" <<<"$out"; then
      grep -q "verify FAIL" <<<"$out" && return 1
      return 0
    fi
    sleep 0.1
  done
  return 1
}
state() { on "$1" podman inspect "$2" --format '{{.State.Status}}' 2>/dev/null || echo absent; }

log "1. migrate a memload container from a to b"
run_memload a m1
on a podman exec m1 sh -c 'echo migrated > /etc/ferry-marker && rm /etc/issue.net'
on a migrator migrate --container m1 --to "$(addr b)" --json >"$work/m1.json" 2>"$work/m1.err" ||
  fail "migration failed: $(cat "$work/m1.json" "$work/m1.err")"
[ "$(json "$work/m1.json" ok)" = true ] || fail "not ok"
[ "$(json "$work/m1.json" source_container_removed)" = true ] || fail "source container not removed"
[ "$(state a m1)" = absent ] || fail "m1 still exists on a: $(state a m1)"
[ "$(state b m1)" = running ] || fail "m1 is not running on b: $(state b m1)"
[ "$(on b podman exec m1 printenv FERRY_TEST)" = yes ] || fail "environment lost"
[ "$(on b podman inspect m1 --format '{{index .Config.Labels "ferry.test"}}')" = podman ] || fail "label lost"
[ "$(on b podman exec m1 cat /etc/ferry-marker)" = migrated ] || fail "added file lost"
on b podman exec m1 test ! -e /etc/issue.net || fail "a deleted file came back"
verified b m1 || fail "memory does not verify on b: $(on b podman logs --tail 5 m1 2>&1)"
faulted=$(json "$work/m1.json" pages_faulted)
log "   downtime $(json "$work/m1.json" downtime_ms) ms, $faulted pages faulted"
on b podman stop -t 1 m1 >/dev/null || fail "podman stop failed on the copy"
on b podman rm m1 >/dev/null || fail "podman rm failed on the copy"

log "2. the destination dies before the restore: the source keeps running"
run_memload a m2
"$testbed" stop b
FERRY_FAULT=dest-die-before-restore "$testbed" start b
on a migrator migrate --container m2 --to "$(addr b)" --json >"$work/m2.json" 2>"$work/m2.err" &&
  fail "migration to a dying destination succeeded"
[ "$(json "$work/m2.json" source_running)" = true ] || fail "migrator says the source is not running"
[ "$(state a m2)" = running ] || fail "m2 is not running on a: $(state a m2)"
verified a m2 || fail "m2's memory does not verify after the abort"
"$testbed" stop b
"$testbed" start b
[ "$(state b m2)" = absent ] || fail "a half-restored m2 was left on b"

log "3. a container of the same name on b: refused before the freeze"
run_memload b m2
on a migrator migrate --container m2 --to "$(addr b)" --json >"$work/m3.json" 2>"$work/m3.err" &&
  fail "migration onto an existing name succeeded"
grep -q "already exists on the destination" "$work/m3.json" || fail "unclear error: $(cat "$work/m3.json")"
[ "$(state a m2)" = running ] || fail "the source m2 stopped"
[ "$(state b m2)" = running ] || fail "b's own m2 was touched"
log "podman: all cases passed"
