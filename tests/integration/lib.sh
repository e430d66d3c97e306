# Shared helpers for the integration tests: a private testbed, workloads in
# it, and bounded waits on their output. Source this file; it installs an
# EXIT trap that tears everything down, even on failure.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export FERRY_BUILD=${FERRY_BUILD:-$repo/build}
# A testbed of our own, so tests never touch a developer's testbed.
export FERRY_TESTBED=${FERRY_TESTBED:-ft$$}
export FERRY_TESTBED_NET=${FERRY_TESTBED_NET:-10.$((100 + $$ % 100)).$(($$ % 250)).0}
export FERRY_TESTBED_NET=${FERRY_TESTBED_NET%.0}
testbed="$repo/examples/testbed.sh"
work=$(mktemp -d /tmp/ferry-itest.XXXXXX)

# Leftovers of tests killed before their clean-up (meson's timeout does
# that, and CI reuses machines). A VM testbed's marker is stale, whatever
# its name, when its state is gone, or when it is over 30 minutes old (an
# `up` writes it before its VMs start, and takes minutes) and none of its
# VMs' qemu runs. A testbed named after this shell's pid can only be a
# leftover: the test that had this pid before has ended. Its marker would
# make testbed.sh take this test's testbed for that old VM one.
qemu_runs() {
  local p
  p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && [[ "$(ps -o comm= -p "$p" 2>/dev/null)" == qemu* ]]
}
sweep_leftover_testbeds() {
  local f state q alive base=${FERRY_TESTBED_DIR:-/tmp/ferry-testbed}
  for f in "$base"/*.vm; do
    [ -f "$f" ] || continue
    state=$(cat "$f")
    if [ ! -d "$state" ]; then
      rm -f "$f"
      continue
    fi
    [ -n "$(find "$f" -mmin +30)" ] || continue
    alive=no
    for q in "$state"/vm-*/qemu.pid; do qemu_runs "$q" && alive=yes; done
    if [ $alive = no ]; then
      echo "removing VM testbed $(basename "$f" .vm): none of its VMs runs" >&2
      rm -rf "$state"
      rm -f "$f"
    fi
  done
  if [ "$FERRY_TESTBED" = "ft$$" ] && { [ -e "$base/ft$$.vm" ] || [ -d "$base/ft$$" ]; }; then
    echo "removing testbed ft$$, left by an earlier test with this pid" >&2
    timeout 200 "$testbed" down >/dev/null 2>&1 || true
  fi
}
sweep_leftover_testbeds

last_step=""
log() {
  printf '[%s] %s\n' "$(date +%T)" "$*" >&2
  last_step=$*
}
fail() {
  log "FAIL: $*"
  exit 1
}

# CRIU's no-breakpoint fallback: taken when forced (FERRY_NO_HW_BREAKPOINTS=1)
# and wherever this machine's breakpoints do not trap (CRIU's own probe, with
# examples/criu-patches/0003). Where they do not, the plain variant of a test
# already takes and checks the fallback, so the forced variant skips (77)
# instead of repeating it.
breakpoints_trap() { timeout 60 criu check --feature breakpoints >/dev/null 2>&1; }
if [ "${FERRY_NO_HW_BREAKPOINTS:-0}" = 1 ]; then
  breakpoints_trap || {
    echo "SKIP: hardware breakpoints do not trap here, so the plain variant of this test takes CRIU's fallback already"
    exit 77
  }
  fallback_expected=yes
elif breakpoints_trap; then
  fallback_expected=no
else
  fallback_expected=yes
fi

# Processes a test started on this machine itself (start_local and the
# like): killed by their pids on exit.
local_pids=()

cleanup() {
  local rc=$? p
  # The watchdog ignores SIGTERM; its SIGKILLs must not hit the clean-up.
  [ -z "${watchdog:-}" ] || kill -KILL "$watchdog" 2>/dev/null || true
  # A test's own clean-up first (test_cleanup, if it defines one).
  if declare -F test_cleanup >/dev/null; then test_cleanup || true; fi
  for p in "${local_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ $rc -ne 0 ]; then
    log "test failed (rc=$rc); daemon logs follow"
    for f in /tmp/ferry-testbed/"$FERRY_TESTBED"/*/pagesrv.log; do
      [ -f "$f" ] && { echo "== $f"; tail -n 40 "$f"; }
    done
    for f in /tmp/ferry-testbed/"$FERRY_TESTBED"/*/incoming/*/lazy-pages.log; do
      [ -f "$f" ] && { echo "== $f"; tail -n 20 "$f"; }
    done
    for f in "$work"/*.out; do
      [ -f "$f" ] && { echo "== $f"; tail -n 20 "$f"; }
    done
  fi
  "$testbed" down >/dev/null 2>&1 || true
  [ -n "${FERRY_KEEP_WORK:-}" ] || rm -rf "$work"
  exit $rc
}
trap cleanup EXIT

# The test's own bound, under meson's 600 s. At meson's timeout the test's
# process group gets SIGTERM and, 0.5 s later, SIGKILL: no clean-up runs,
# VMs and daemons in sessions of their own are left running, and the log
# does not say where the test stood. Past this bound the watchdog ends what
# the test waits on (SIGTERM, then SIGKILL after 20 s), so bash runs its
# TERM trap: the test fails naming its last step, and the clean-up runs.
test_bound=${FERRY_TEST_BOUND:-500}
trap 'fail "the test ran over its ${test_bound} s bound (FERRY_TEST_BOUND); its last step: ${last_step:-none}"' TERM
# descendants_of PID SKIP: PID's descendants, but not SKIP's subtree.
descendants_of() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do
    [ "$p" = "$2" ] && continue
    echo "$p"
    descendants_of "$p" "$2"
  done
}
(
  trap '' TERM
  me=$BASHPID
  for ((i = 0; i < test_bound; i++)); do
    sleep 1
    kill -0 $$ 2>/dev/null || exit 0
  done
  echo "[$(date +%T)] watchdog: ${test_bound} s passed, ending the test's commands" >&2
  kill -TERM $$ 2>/dev/null || exit 0
  for p in $(descendants_of $$ "$me"); do kill -TERM "$p" 2>/dev/null; done
  sleep 20
  for p in $(descendants_of $$ "$me"); do kill -KILL "$p" 2>/dev/null; done
) </dev/null >/dev/null 2>>"$work/watchdog.log" &
watchdog=$!
disown "$watchdog" # its end, by the clean-up's SIGKILL, is no news

testbed_up() { "$testbed" up >&2; }
on() { "$testbed" exec "$@"; }
addr() { "$testbed" addr "$1"; }

# wait_for FILE PATTERN [SECONDS] [FROM_LINE]: waits until a line matching
# PATTERN appears in FILE after line FROM_LINE.
wait_for() {
  local file=$1 pattern=$2 secs=${3:-30} from=${4:-0} i
  for ((i = 0; i < secs * 20; i++)); do
    if [ -f "$file" ] && tail -n +"$((from + 1))" "$file" | grep -q -- "$pattern"; then
      return 0
    fi
    sleep 0.05
  done
  fail "no line matching '$pattern' in $file within ${secs}s"
}

lines() { wc -l <"$1"; }

# start_workload HOST NAME ARGS...: starts memload as the init of a new PID
# namespace inside HOST; prints its host pid once it is ready. Its output
# goes to $work/NAME.out.
start_workload() {
  local host=$1 name=$2 out launcher pid=""
  shift 2
  out="$work/$name.out"
  # testbed.sh execs its way down to unshare, so $! is unshare's pid.
  # Appending: the restored tree reopens the file at its dump-time offset.
  "$testbed" exec "$host" setsid unshare --pid --fork memload "$@" </dev/null >>"$out" 2>&1 &
  launcher=$!
  wait_for "$out" "ready parent" 60
  case " $* " in *" --child-mib 0 "*) ;; *) wait_for "$out" "ready child" 60 ;; esac
  read -r pid _ <"/proc/$launcher/task/$launcher/children" || true
  [ -n "$pid" ] || fail "cannot find the workload's pid"
  echo "$pid"
}

# start_local OUT [--net] [--uts] [--ipc] [memload options]: a 64 MiB
# memload on this machine (no testbed), the init of its own PID namespace
# (and of the network, UTS and IPC namespaces named); sets pid once it is
# ready. (Not a command substitution: its pids must reach local_pids.)
start_local() {
  local out=$1 launcher ns=(--pid)
  shift
  while [[ "${1:-}" =~ ^--(net|uts|ipc)$ ]]; do
    ns+=("$1")
    shift
  done
  pid=""
  setsid unshare "${ns[@]}" --fork "$FERRY_BUILD/examples/memload" --mib 64 --child-mib 0 --threads 1 "$@" \
    </dev/null >>"$out" 2>&1 &
  launcher=$!
  local_pids+=("$launcher")
  wait_for "$out" "ready parent" 60
  read -r pid _ <"/proc/$launcher/task/$launcher/children" || true
  [ -n "$pid" ] || fail "cannot find the workload's pid"
  local_pids+=("$pid")
}

# local_dump DIR PID [criu options]: CRIU dumps the tree PID of this machine
# (started by start_local) into DIR, with its log in DIR/dump.log; the tree
# must be gone after it.
local_dump() {
  local dir=$1 tree=$2
  shift 2
  mkdir -p "$dir"
  timeout -s KILL 60 criu dump -t "$tree" -D "$dir" --shell-job "$@" -o dump.log -v4 >/dev/null 2>&1 ||
    fail "the dump into $dir failed: $(grep -E 'Error' "$dir/dump.log" | head -n 5)"
  wait_gone "$tree" 5 || fail "the tree dumped into $dir still runs"
}

# local_restore DIR [criu options]: CRIU restores DIR's tree and leaves it
# running (--restore-detached; its session leader is outside it, so
# --shell-job), log in DIR/restore.log; sets pid to the restored tree.
local_restore() {
  local dir=$1
  shift
  timeout -s KILL 60 criu restore -D "$dir" --shell-job "$@" -o restore.log -v4 --restore-detached \
    --pidfile "$dir/pid" >/dev/null 2>&1 ||
    fail "the restore of $dir failed: $(grep -E 'Error' "$dir/restore.log" | head -n 5)"
  pid=$(cat "$dir/pid")
  local_pids+=("$pid")
  running "$pid" || fail "the tree restored from $dir does not run"
}

# running PID: exists, not a zombie, not stopped.
running() {
  local st
  st=$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) || return 1
  case "$st" in Z | X | T | t) return 1 ;; *) return 0 ;; esac
}

gone() {
  local st
  st=$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) || return 0
  [ "$st" = Z ] || [ "$st" = X ]
}

# wait_gone PID [SECONDS]: polls until PID is gone (or a zombie); false if
# it is still there after SECONDS (default 5).
wait_gone() {
  local pid=$1 secs=${2:-5} i
  for ((i = 0; i < secs * 20; i++)); do
    gone "$pid" && return 0
    sleep 0.05
  done
  gone "$pid"
}

# The steps of a restore (restore.log, -v4) at which CRIU called out, by
# how: "rpc" (a notification to its RPC client, runc), "socket" (its action
# socket, criu-patches/0017) or "script" (an action script's fork and exec).
# Prints the steps, space-separated, in order.
criu_callouts() {
  awk -v how="$2" '
    /Running [a-z-]+ scripts/ { match($0, /Running [a-z-]+ scripts/); step = substr($0, RSTART + 8, RLENGTH - 16) }
    how == "rpc" && /\tRPC$/ { printf "%s ", step }
    how == "socket" && /\[action socket / { printf "%s ", step }
    how == "script" && /\t\[\/.*\]$/ { printf "%s ", step }' "$1"
}

# json FILE KEY: a top-level value of the migrator's JSON output.
json() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(str(v).lower() if isinstance(v,bool) else v)' "$1" "$2"; }

netns_of() { readlink "/proc/$1/ns/net"; }

# cpu_latency_target: the host's PM QoS CPU latency target in µs; a
# migration's idle polling (lib/sys/idle_poll.hpp) holds it at 0.
cpu_latency_target() {
  python3 -c 'import struct; print(struct.unpack("i", open("/dev/cpu_dma_latency", "rb").read(4))[0])'
}

# latency_target_back WHAT BEFORE: the target is BEFORE again within 5 s
# (a destination's session may end just after its migrator).
latency_target_back() {
  local t
  for _ in $(seq 50); do
    t=$(cpu_latency_target)
    [ "$t" = "$2" ] && return 0
    sleep 0.1
  done
  fail "$1: the CPU latency target is $t after the migration, not $2 as before it"
}

# cpuidle_driver: this machine's cpuidle driver, or none.
cpuidle_driver() { cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none; }

# idle_poll_held RESULT-JSON WANT: each host's idle polling went as WANT
# says ("held", or "off": the migrator was told not to), where the machine
# has a cpuidle driver; without one, each side says so.
idle_poll_held() {
  local driver side state
  driver=$(cpuidle_driver)
  for side in source destination; do
    state=$(json "$1" "idle_poll_$side")
    if [ "$2" = off ]; then
      case "$side:$state" in
        "source:off (--no-idle-poll)" | "destination:off: the migrator did not ask") ;;
        *) fail "idle polling on the $side was not off: $state" ;;
      esac
    elif [ "$driver" = none ]; then
      case "$state" in "not held: no cpuidle driver"*) ;; *) fail "idle polling on the $side: $state (no cpuidle driver here)" ;; esac
    else
      [ "$state" = held ] || fail "idle polling on the $side: $state"
    fi
  done
}

# restored_pid HOST: the root of a memload tree restored on HOST (a memload
# whose parent is not a memload), assuming one such tree there.
restored_pid() {
  local pid ppid
  for pid in $(ip netns pids "$FERRY_TESTBED-$1"); do
    [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = memload ] || continue
    ppid=$(awk '{print $4}' /proc/"$pid"/stat 2>/dev/null) || continue
    [ "$(cat /proc/"$ppid"/comm 2>/dev/null)" = memload ] || { echo "$pid"; return 0; }
  done
  return 1
}

# verify_workload PID OUT PARENT_PAGES [CHILD_PAGES]: asks a memload tree to
# check all of its memory (SIGUSR1) and waits for every process's verdict,
# then for a fresh tick: the tree is intact and runs.
verify_workload() {
  local pid=$1 out=$2 parent=$3 child=${4:-} mark
  mark=$(lines "$out")
  kill -USR1 "$pid"
  wait_for "$out" "verify ok parent pages=$parent" 30 "$mark"
  [ -z "$child" ] || wait_for "$out" "verify ok child pages=$child" 30 "$mark"
  wait_for "$out" "tick parent" 10 "$(lines "$out")"
}

# stall_config DIR PHASE: a CRIU config whose action script never returns
# when CRIU reaches PHASE ("pre-dump", "post-dump", "status-ready", ...):
# CRIU then waits for it in wait4, as a CRIU whose breakpoint never fires
# does. The script records CRIU's pid (DIR/criu-stalled-PHASE.pid) and its
# own (DIR/stall-sleeper-PHASE.pid), and gives up after 600 s. Prints the
# config's path. In RPC mode CRIU runs a config's action scripts after each
# notification.
stall_config() {
  local dir=$1 phase=$2
  cat >"$dir/criu-stall-$phase.sh" <<SCRIPT
#!/bin/sh
[ "\$CRTOOLS_SCRIPT_ACTION" = "$phase" ] || exit 0
p=\$PPID
while [ "\$p" -gt 1 ]; do
  if [ "\$(cat /proc/\$p/comm)" = criu ]; then
    echo "\$\$" >"$dir/stall-sleeper-$phase.pid"
    echo "\$p" >"$dir/criu-stalled-$phase.pid"
    exec sleep 600
  fi
  p=\$(awk '{print \$4}' /proc/\$p/stat)
done
exit 0
SCRIPT
  chmod +x "$dir/criu-stall-$phase.sh"
  echo "action-script $dir/criu-stall-$phase.sh" >"$dir/criu-stall-$phase.conf"
  echo "$dir/criu-stall-$phase.conf"
}

# engine_image ENGINE: builds a Debian image (debootstrap) and imports it
# into ENGINE (podman or docker) on hosts a and b; prints its name.
engine_image() {
  local engine=$1 image h
  case "$engine" in
    podman) image=localhost/ferry-test:latest ;;
    docker) image=ferry-test:latest ;;
    *) fail "unknown engine $engine" ;;
  esac
  log "building a Debian image (debootstrap)"
  "$repo/examples/image.sh" "$work/rootfs.tar" >/dev/null
  for h in a b; do on "$h" "$engine" import "$work/rootfs.tar" "$image" >/dev/null; done
  echo "$image"
}
