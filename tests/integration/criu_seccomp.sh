#!/usr/bin/env bash
# CRIU's restore of seccomp filters with --seccomp-early (examples/
# criu-patches/0027), on the real CRIU: a 64 MiB memload whose two threads
# share a filter (it fails acct(2) with ENOTBLK) is dumped and restored.
#  1. The dump found one filter for both threads, to be restored with
#     TSYNC by the leader alone.
#  2. With --seccomp-early the root task had its filter by the time CRIU ran
#     post-restore: an action script there sees Seccomp mode 2 (it waits up
#     to 3 s). After the restore both threads have the one filter, it still
#     fails acct(2) with ENOTBLK, and the memory verifies.
#  3. The same check tells the old order apart: restored again without the
#     option, the script sees no filter at post-restore (it waits 1 s), and
#     the tree still ends with its filter.
# Nothing here needs the testbed: CRIU runs on this machine directly.
source "$(dirname "$0")/lib.sh"

criu --seccomp-early --version >/dev/null 2>&1 ||
  fail "this CRIU lacks --seccomp-early (examples/setup.sh installs it with criu-patches/0027)"

out="$work/memload.out"
start_local "$out" --seccomp

# Every thread of PID in filter mode with one filter.
one_filter_each() {
  local status n=0
  for status in /proc/"$1"/task/*/status; do
    awk '/^Seccomp:/ {m = $2} /^Seccomp_filters:/ {f = $2} END {exit !(m == 2 && f == 1)}' "$status" ||
      fail "thread $status: $(grep '^Seccomp' "$status" | tr '\n' ' ')"
    n=$((n + 1))
  done
  [ "$n" -ge 2 ] || fail "expected two threads in $1, found $n"
}
# The filter works: acct(2) fails with ENOTBLK, and the memory verifies.
probe() {
  local mark
  mark=$(lines "$out")
  kill -USR1 "$pid"
  wait_for "$out" "verify ok parent pages=16384" 60 "$mark"
  wait_for "$out" "seccomp probe errno=15" 10 "$mark"
}
one_filter_each "$pid"
probe

# At post-restore: the root task's seccomp mode, once it is 2 or after
# FERRY_TEST_SECCOMP_WAIT tenths of a second.
script="$work/at-post-restore.sh"
cat >"$script" <<'SH'
#!/bin/sh
[ "$CRTOOLS_SCRIPT_ACTION" = post-restore ] || exit 0
n=0
while :; do
  mode=$(awk '/^Seccomp:/ {print $2}' "/proc/$CRTOOLS_INIT_PID/status")
  if [ "$mode" = 2 ] || [ "$n" -ge "$FERRY_TEST_SECCOMP_WAIT" ]; then
    break
  fi
  n=$((n + 1))
  sleep 0.1
done
echo "$mode" >"$FERRY_TEST_SECCOMP_SEEN"
SH
chmod +x "$script"
seen="$work/seccomp-seen"

log "1. the dump found one filter for both threads"
dir="$work/images-early"
local_dump "$dir" "$pid"
grep -q "Use SECCOMP_FILTER_FLAG_TSYNC" "$dir/dump.log" ||
  fail "the dump did not take the threads' filter as one: $(grep -n 'seccomp' "$dir/dump.log" | head -n 5)"

log "2. --seccomp-early: the filter is loaded at post-restore"
FERRY_TEST_SECCOMP_WAIT=30 FERRY_TEST_SECCOMP_SEEN=$seen local_restore "$dir" --seccomp-early --action-script "$script"
[ "$(cat "$seen")" = 2 ] || fail "at post-restore the root task's seccomp mode was '$(cat "$seen")', not 2"
one_filter_each "$pid"
probe

log "3. without it, the filter comes after post-restore"
dir="$work/images-late"
local_dump "$dir" "$pid"
FERRY_TEST_SECCOMP_WAIT=10 FERRY_TEST_SECCOMP_SEEN=$seen local_restore "$dir" --action-script "$script"
[ "$(cat "$seen")" = 0 ] || fail "without --seccomp-early the mode at post-restore was '$(cat "$seen")', not 0"
one_filter_each "$pid"
probe
log "PASS"
