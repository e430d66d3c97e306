#!/usr/bin/env bash
# Containers migrate post-copy between the testbed's hosts, each with its own
# engine instances (testbed up --engines), on a Debian image built here.
# FERRY_TEST_ENGINE picks the engine: podman (default) or docker.
#   1. a memload container (64 MiB + a forked child, a listening socket, env,
#      label, writable-layer changes) arrives on b with its name, config, files and memory; the
#      source container is gone, its /dev/shm files came along; logs/stop/rm
#      work on the copy, and its /dev and empty tmpfs mounts are the same
#      (CRIU archived them without tar, and read /dev through a clone of
#      that one mount); CRIU dumped its UTS, IPC and network namespaces in
#      its own process and restored its hostname without a worker, walked
#      its cgroup directories without ftw() and forked no cgroupd for its
#      restore (its threads share their cgroups); CRIU locked
#      its network with nftables (where CRIU can), and the lock is gone on b;
#      the restore started warm (before the freeze); CRIU ran its action
#      script only where Ferry acts (criu-patches/0013); CRIU used the
#      host's cgroup mounts, and the copy is in its engine's cgroups; the
#      daemons set favordynmods (--favor-cgroup-moves) or found it set;
#      runc heard of post-restore once CRIU let the root task make the
#      namespaces (0025); the tasks' seccomp filters (podman's and
#      docker's default profile) came back, loaded during post-restore
#      where CRIU takes --seccomp-early (0027);
#   2. the destination daemon dies as the images arrive: the source
#      container keeps running, its memory intact; nothing is left on b once
#      its daemon is back; (2a, where CRIU's breakpoints work) CRIU's restore
#      fails after runc heard of post-restore: the same;
#      (2b) the destination dies while its warm restore waits: the
#      source's checkpoint is refused before anything froze, and the warm
#      container on b is removed when its daemon is back; (2c) the warm start
#      fails: the destination restores cold and the migration succeeds (and,
#      with no TCP socket in the container, CRIU locks nothing); (2e) the
#      migrator stops once the container is dumped: the source's daemon
#      releases it, and the engine has it running, its memory intact;
#      (2f) the migrator is killed between the commit and its word to
#      resume: b kills its copy, tells a, and a resumes the container;
#      (2g) dirty-rate tracks the container's writes through the engine's
#      seccomp filter, and leaves it as it was;
#   3. a container of that name already exists on b: refused before the
#      freeze, and neither container is touched;
#   4. a container with a named volume (which Ferry does not move): refused
#      before the freeze, and it keeps running;
#   5. (docker) containerd's copy of each checkpoint it restored from, which
#      it never removes, is gone: the move's end removed it, or the daemon's
#      restart after it was killed.
. "$(dirname "$0")/lib.sh"
# This test reads CRIU's debug lines (its call-outs, its mounts): level 4
# for the engine's CRIU too (Ferry's plugin sets it; 3 is the default).
export FERRY_CRIU_LOG_LEVEL=4

engine=${FERRY_TEST_ENGINE:-podman}
ctr() { local h=$1; shift; on "$h" "$engine" "$@"; }
# remove_now HOST NAME: removes a container at once (podman's rm waits 10 s
# for a stop unless told not to; docker's kills at once and has no -t).
remove_now() {
  if [ "$engine" = podman ]; then ctr "$1" rm -f -t 0 "$2"; else ctr "$1" rm -f "$2"; fi
}

# restore_log NAME: CRIU's restore.log on b of the migration NAME.json reports.
restore_log() {
  echo "/tmp/ferry-testbed/$FERRY_TESTBED/b/incoming/$(json "$work/$1.json" migration_id)/restore.log"
}

"$testbed" up --engines >&2
image=$(engine_image "$engine")

examples=$FERRY_BUILD/examples
# run_memload HOST NAME [listen]: a memload container; waits until both
# processes are ready. With "listen", a perl child of memload also listens on
# TCP port 7777 (so the container's network namespace has a socket); it
# sleeps in a loop because a restore interrupts the sleep it was in.
run_memload() {
  local memload="/ferry/memload --mib 64 --child-mib 16 --seed 11"
  local cmd=($memload)
  if [ "${3:-}" = listen ]; then
    cmd=(sh -c "perl -MIO::Socket::INET -e 'my \$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7777, ReuseAddr => 1) or die; sleep 100000 while 1' & exec $memload")
  fi
  ctr "$1" run -d --name "$2" -e FERRY_TEST=yes --label ferry.test="$engine" \
    -v "$examples:/ferry:ro" "$image" "${cmd[@]}" >/dev/null
  for _ in $(seq 1 200); do
    ctr "$1" logs "$2" 2>&1 | grep -q "ready child" && return 0
    sleep 0.1
  done
  fail "container $2 on $1 did not get ready"
}
# verified HOST NAME: SIGUSR1 makes memload check every page of both processes.
verified() {
  local pid out
  pid=$(ctr "$1" inspect "$2" --format '{{.State.Pid}}')
  kill -USR1 "$pid"
  for _ in $(seq 1 100); do
    out=$(ctr "$1" logs "$2" 2>&1)
    if grep -q "verify ok parent" <<<"$out" && grep -q "verify ok child" <<<"$out"; then
      grep -q "verify FAIL" <<<"$out" && return 1
      return 0
    fi
    sleep 0.1
  done
  return 1
}
# The installed CRIU dumps a mount namespace before the freeze and builds
# it while a restore waits (criu-patches/0030).
mounts_early_here() { criu --mnt-early --version >/dev/null 2>&1; }
# mounts_early FILE END: what the migration's JSON says of it at END.
mounts_early() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("mounts_early", {}).get(sys.argv[2], ""))' "$1" "$2"; }
state() {
  local s
  s=$(ctr "$1" inspect "$2" --format '{{.State.Status}}' 2>/dev/null) && echo "$s" || echo absent
}
migrate() {
  local name=$1
  shift
  on a migrator migrate --engine "$engine" --container "$name" --to "$(addr b)" --json "$@"
}

# listening HOST NAME: the container has a TCP socket listening on 7777.
listening() {
  grep -q ' 00000000:1E61 00000000:0000 0A ' "/proc/$(ctr "$1" inspect "$2" --format '{{.State.Pid}}')/net/tcp"
}

log "1. migrate a memload $engine container (and a listening socket) from a to b"
run_memload a m1 listen
for _ in $(seq 1 50); do listening a m1 && break; sleep 0.1; done
listening a m1 || fail "m1's listener did not start"
ctr a exec m1 sh -c 'echo migrated > /etc/ferry-marker && rm /etc/issue.net && rm -r /usr/share/doc/apt'
ctr a exec m1 sh -c 'echo in-shm > /dev/shm/ferry-shm-marker'
# runc masks /proc/acpi with an empty read-only tmpfs.
acpi=$(ctr a exec m1 stat -c '%F %a %u %g' /proc/acpi) || fail "no /proc/acpi in m1"
# /dev is a tmpfs of device nodes and symlinks (and the mountpoints of
# others): what it holds, with mode, owner, device numbers, target and mtime.
dev_tmpfs() {
  ctr "$1" exec "$2" sh -c "stat -c '%n %f %u %g %Y' /dev && find /dev -xdev -mindepth 1 ! -type d -exec stat -c '%n %f %u %g %t %T %Y %N' {} + | sort"
}
dev_before=$(dev_tmpfs a m1) || fail "cannot list m1's /dev"
# --keep-images: CRIU's dump.log stays in the source's work dir.
migrate m1 --keep-images >"$work/m1.json" 2>"$work/m1.err" || fail "migration failed: $(cat "$work/m1.json" "$work/m1.err")"
[ "$(json "$work/m1.json" ok)" = true ] || fail "not ok"
[ "$(json "$work/m1.json" source_container_removed)" = true ] || fail "source container not removed"
[ "$(state a m1)" = absent ] || fail "m1 still exists on a: $(state a m1)"
[ "$(state b m1)" = running ] || fail "m1 is not running on b: $(state b m1)"
[ "$(json "$work/m1.json" engine_restore)" = warm ] ||
  fail "$engine's restore did not start warm: $(json "$work/m1.json" engine_restore)"
# The downtime starts at CRIU's freeze: docker's pause before its checkpoint
# was skipped by the shim (it would have been reported as engine-pause).
freeze_from=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timing_source"]["freeze"])' "$work/m1.json")
[ "$freeze_from" = criu-plugin ] || fail "the freeze moment came from $freeze_from, not CRIU's plugin"
[ "$(ctr b exec m1 printenv FERRY_TEST)" = yes ] || fail "environment lost"
listening b m1 || fail "m1's listening socket did not come along"
# CRIU locks the container's network with nftables when both hosts' CRIU can
# (no iptables-restore run inside it in the downtime), and the lock is gone
# once it runs on b.
if criu check --feature network_lock_nftables >/dev/null 2>&1; then
  [ "$(json "$work/m1.json" criu_network_lock)" = nftables ] ||
    fail "network lock: $(json "$work/m1.json" criu_network_lock)"
  m1_pid=$(ctr b inspect m1 --format '{{.State.Pid}}')
  tables=$(nsenter -t "$m1_pid" -n python3 "$repo/tests/integration/nft_tables.py") || fail "cannot list m1's nftables tables"
  case "$tables" in *CRIU*) fail "CRIU's network lock is still in m1's namespace on b: $tables" ;; esac
fi
# CRIU archived and restored the container's small tmpfs mounts without
# running tar (criu-patches/0008 and 0012): the empty ones and /dev, with
# its device nodes and symlinks; the copies are the same.
m1_id=$(json "$work/m1.json" migration_id)
m1_restore_log=$(restore_log m1)
# lazy-pages began its bulk transfer once the tasks ran, told by the daemon
# on the plugin's "resumed" (CRIU's "restore finished" comes before its
# last steps).
grep -q 'main pass from .* (the daemon says the tasks run)' "$(dirname "$m1_restore_log")/lazy-pages.log" ||
  fail "lazy-pages did not hear from the daemon that m1's tasks run"
grep -q "Restored the tmpfs at .* without tar: 1 entries" "$m1_restore_log" ||
  fail "CRIU ran tar for the empty tmpfs mounts"
grep -Eq "Restored the tmpfs at .* without tar: ([2-9]|[1-9][0-9]+) entries" "$m1_restore_log" ||
  fail "CRIU ran tar for /dev"
# CRIU called out only where Ferry or runc act (criu-patches/0013 and
# 0017), not at the other five or six steps of the restore: it asked the
# daemon's gate itself at post-restore (the commit gate), with no action
# script's fork and exec, and notified runc only there (the bundle has no
# hooks for setup-namespaces). Connections move here, but the bundle names
# the copy's network namespace (podman's; docker's once its hook ran
# ahead), so the shim dropped setup-namespaces from the gate's steps
# (engine_request.hpp).
steps=$(criu_callouts "$m1_restore_log" socket)
[ "$steps" = "post-restore " ] ||
  fail "CRIU's socket call-outs were at: '$steps' (network: $(json "$work/m1.json" network))"
steps=$(criu_callouts "$m1_restore_log" script)
[ -z "$steps" ] || fail "CRIU still ran an action script at: $steps"
# runc heard of post-restore once CRIU let the root task make the
# namespaces, after setup-namespaces (0025), not at the step itself: no
# other RPC call-out, and CRIU read runc's answer at post-restore, before it
# asked the gate.
steps=$(criu_callouts "$m1_restore_log" rpc)
[ -z "$steps" ] || fail "CRIU notified runc at: '$steps', not early"
order=$(awk '/Running setup-namespaces scripts/ { print "setup-ns" }
  /Sent post-restore to the RPC client early/ { print "early" }
  /Running post-restore scripts/ { print "step" }
  /The RPC client answered post-restore, sent early/ { print "answer" }
  /\[action socket / { print "gate" }' "$m1_restore_log" | tr '\n' ' ')
[ "$order" = "setup-ns early step answer gate " ] ||
  fail "runc's early post-restore: the log's order is '$order', not 'setup-ns early step answer gate'"
# The copy's tasks have their seccomp filter back (the engine's default
# profile), loaded while CRIU ran post-restore where it takes
# --seccomp-early (0027), not in the steps after it.
m1_b_pid=$(ctr b inspect m1 --format '{{.State.Pid}}')
grep -q '^Seccomp:[[:space:]]*2' "/proc/$m1_b_pid/status" ||
  fail "m1 runs on b without its seccomp filter: $(grep '^Seccomp' "/proc/$m1_b_pid/status" | tr '\n' ' ')"
if criu --seccomp-early --version >/dev/null 2>&1; then
  grep -q "seccomp: loading the filters while CRIU runs post-restore" "$m1_restore_log" ||
    fail "CRIU loaded m1's seccomp filter after post-restore: $(grep -n 'seccomp' "$m1_restore_log" | head -n 3)"
fi
# CRIU dumped the container's UTS, IPC and network namespaces in its own
# process (criu-patches/0019), read /dev, which has mounts on it, through a
# clone of that one mount (0020), and restored the hostname without a
# worker (0018). The /dev comparison below checks what it read.
m1_dump_log=/dev/shm/ferry/$m1_id/images/dump.log
[ -f "$m1_dump_log" ] || fail "--keep-images kept no dump.log at $m1_dump_log"
for ns in uts ipc net; do
  grep -q "Dumped $ns namespace [0-9]* in CRIU's process" "$m1_dump_log" ||
    fail "CRIU did not dump m1's $ns namespace in its own process"
done
grep -q "cloned [0-9]*:./dev alone" "$m1_dump_log" ||
  fail "CRIU did not read /dev through a clone: $(grep -n 'dev(' "$m1_dump_log" | head -n 5)"
grep -q "Writing UTS sysctls without a worker" "$m1_restore_log" ||
  fail "CRIU's restore wrote the UTS sysctls through a worker"
grep -q "cg: walking the directories of" "$m1_dump_log" ||
  fail "CRIU did not walk m1's cgroup directories the 0021 way"
# runc makes m1's cgroups at restore, with the spec's settings: CRIU did not
# read the properties of those (0029, which Ferry asks for in every engine
# dump where the CRIU has it).
grep -q "Not reading the properties of .*: the tree's own cgroup, made at restore" "$m1_dump_log" ||
  fail "CRIU read the properties of m1's own cgroups: $(grep -n 'Not reading\|pids.max' "$m1_dump_log" | head -n 3)"
grep -q "No thread has a cgroup set of its own: no cgroupd" "$m1_restore_log" ||
  fail "CRIU's restore forked a cgroupd for m1, whose threads share their cgroups"
# A network namespace CRIU made while it waited (0023) is one the tree
# entered: none is made for a tree given its namespace.
if grep -q "Made a network namespace while waiting" "$m1_restore_log"; then
  grep -q "Entered the network namespace made while waiting" "$m1_restore_log" ||
    fail "CRIU made a network namespace for m1's restore and did not use it"
fi
# So was the empty mount namespace mount-v2 starts from (0028), and m1's
# root task took it.
grep -q "Made an empty mount namespace while waiting" "$m1_restore_log" ||
  fail "CRIU made no empty mount namespace while it waited for m1's images"
grep -q "Using the empty mount namespace made while waiting" "$m1_restore_log" ||
  fail "m1's root task did not take the mount namespace made while waiting: $(grep -n 'mntns\|mount namespace' "$m1_restore_log" | head -n 3)"
rm -rf "/dev/shm/ferry/$m1_id"
dev_after=$(dev_tmpfs b m1) || fail "cannot list m1's /dev on b"
[ "$dev_after" = "$dev_before" ] || fail "/dev changed: $(diff <(echo "$dev_before") <(echo "$dev_after"))"
# b's CRIU built m1's mount tree while it waited for the images, from the
# mount namespace a's CRIU dumped before the freeze (criu-patches/0030), and
# used it: the final images held the same files. The mounts and /dev above
# are that tree's.
if mounts_early_here; then
  [ "$(mounts_early "$work/m1.json" destination)" = "built while waiting, used" ] ||
    fail "m1's early mount tree: $(mounts_early "$work/m1.json" destination) (source: $(mounts_early "$work/m1.json" source))"
  grep -q "Using the mount tree built while waiting" "$m1_restore_log" ||
    fail "CRIU did not say it used the mount tree built while waiting"
fi
# CRIU took the host's cgroup mounts as its yard where their layout allows
# (lib/criu/cgroup_yard.hpp), and the copy runs in its engine's cgroups.
if [ "$(json "$work/m1.json" criu_cgroup_yard)" = /sys/fs/cgroup ]; then
  grep -q "Opening /sys/fs/cgroup as cg yard" "$m1_restore_log" ||
    fail "CRIU's restore mounted a cgroup yard of its own"
fi
m1_b_id=$(ctr b inspect m1 --format '{{.Id}}')
# The testbed's daemons run with --favor-cgroup-moves: b's found favordynmods
# on a cgroup mount or set it there, and the kernel shows it.
grep -Eq "a cgroup mount has favordynmods|reconfigured with favordynmods" \
  "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log" ||
  fail "b's daemon did not report favordynmods: $(grep -i cgroup "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log")"
awk '$0 ~ / - cgroup2? / { n = split($NF, o, ","); for (i = 1; i <= n; i++) if (o[i] == "favordynmods") f = 1 } END { exit !f }' \
  /proc/self/mountinfo || fail "no cgroup mount has favordynmods after b's daemon started"
# --own-netns-socket-tables too: the container made on a after a's daemon
# started has a TCP table of its own (a positive size; negative: the host's).
grep -Eq "socket tables of their own|socket tables of network namespaces created here" \
  "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log" ||
  fail "b's daemon did not report its child socket tables: $(grep -i socket "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log")"
m1_b_ehash=$(nsenter -t "$(ctr b inspect m1 --format '{{.State.Pid}}')" -n cat /proc/sys/net/ipv4/tcp_ehash_entries)
[ "$m1_b_ehash" -gt 0 ] || fail "m1 on b uses the host's TCP table (tcp_ehash_entries $m1_b_ehash)"
grep -q "$m1_b_id" "/proc/$(ctr b inspect m1 --format '{{.State.Pid}}')/cgroup" ||
  fail "m1 on b is not in its container's cgroups: $(cat "/proc/$(ctr b inspect m1 --format '{{.State.Pid}}')/cgroup")"
[ "$(ctr b exec m1 stat -c '%F %a %u %g' /proc/acpi)" = "$acpi" ] ||
  fail "/proc/acpi changed: $(ctr b exec m1 stat -c '%F %a %u %g' /proc/acpi), was $acpi"
[ "$(ctr b exec m1 stat -f -c %T /proc/acpi)" = tmpfs ] || fail "/proc/acpi is no longer a tmpfs"
[ -z "$(ctr b exec m1 ls -A /proc/acpi)" ] || fail "/proc/acpi is not empty on b"
[ "$(ctr b inspect m1 --format '{{index .Config.Labels "ferry.test"}}')" = "$engine" ] || fail "label lost"
[ "$(ctr b exec m1 cat /etc/ferry-marker)" = migrated ] || fail "added file lost"
[ "$(ctr b exec m1 cat /dev/shm/ferry-shm-marker)" = in-shm ] || fail "/dev/shm content lost"
ctr b exec m1 test ! -e /etc/issue.net || fail "a deleted file came back"
ctr b exec m1 test ! -e /usr/share/doc/apt || fail "a deleted directory came back"
ctr b exec m1 test -e /usr/share/doc/dpkg || fail "a directory beside the deleted one is gone"
verified b m1 || fail "memory does not verify on b: $(ctr b logs --tail 5 m1 2>&1)"
if [ "$fallback_expected" = yes ]; then
  # The fallback reached the CRIU under the engine's runc (through the
  # shim's restore request), which stepped through syscalls.
  case "$(json "$work/m1.json" criu_stop_method)" in
    "syscall stepping"*) ;;
    *) fail "the fallback was expected, but the report says: $(json "$work/m1.json" criu_stop_method)" ;;
  esac
  grep -q "Force no-breakpoints" "$m1_restore_log" ||
    fail "CRIU's restore under $engine did not step through syscalls"
fi
log "   downtime $(json "$work/m1.json" downtime_ms) ms, $(json "$work/m1.json" pages_faulted) pages faulted"
ctr b stop -t 1 m1 >/dev/null || fail "$engine stop failed on the copy"
ctr b rm m1 >/dev/null || fail "$engine rm failed on the copy"

# destination_dies NAME FAULT [CHECK]: NAME migrates to a b whose daemon
# dies with FERRY_FAULT=FAULT; the migration fails uncommitted, the source
# keeps running with its memory intact, CHECK (a command) passes while b
# is as the failure left it, and nothing of NAME is left on b once its
# daemon is back.
destination_dies() {
  local name=$1 fault=$2
  run_memload a "$name"
  "$testbed" stop b
  FERRY_FAULT=$fault "$testbed" start b
  migrate "$name" >"$work/$name.json" 2>"$work/$name.err" && fail "$name: migration to a destination dying ($fault) succeeded"
  [ "$(json "$work/$name.json" committed)" = false ] || fail "$name's migration says it committed"
  [ "$(json "$work/$name.json" source_running)" = true ] || fail "migrator says $name is not running"
  [ "$(state a "$name")" = running ] || fail "$name is not running on a: $(state a "$name")"
  verified a "$name" || fail "$name's memory does not verify after the abort"
  [ -z "${3:-}" ] || "$3" "$name"
  "$testbed" stop b
  "$testbed" start b
  [ "$(state b "$name")" = absent ] || fail "a half-restored $name was left on b: $(state b "$name")"
}

log "2. the destination dies before the restore: the source keeps running"
destination_dies m2 dest-die-before-restore

# CRIU fails after runc heard of post-restore early (0025) and before the
# gate: runc's record of the copy goes with it. CRIU takes one fault at a
# time, and the fallback's CRIU_FAULT is taken already.
if [ "$fallback_expected" = no ]; then
  log "2a. CRIU fails after runc heard of post-restore: the source keeps running"
  heard_early() {
    local log
    log=$(restore_log "$1")
    grep -q "Sent post-restore to the RPC client early" "$log" ||
      fail "$1: runc did not hear of post-restore before CRIU failed: $(grep -E "Error|post-restore" "$log" | head -n 5) (the migration: $(json "$work/$1.json" error))"
    [ "$(state b "$1")" != running ] || fail "$1 runs on b after CRIU failed"
  }
  destination_dies m7 criu-fail-before-post-restore heard_early
  remove_now a m7 >/dev/null
fi

log "2b. the destination dies while its warm restore waits: nothing froze"
destination_dies m5 dest-die-warm
remove_now a m5 >/dev/null

log "2c. the destination's warm start fails: it restores cold"
run_memload a m6
"$testbed" stop b
FERRY_FAULT=warm-start-fail "$testbed" start b
migrate m6 >"$work/m6.json" 2>"$work/m6.err" || fail "cold fallback failed: $(cat "$work/m6.json" "$work/m6.err")"
case "$(json "$work/m6.json" engine_restore)" in
  "cold (fault injection"*) ;;
  *) fail "expected a cold restore, got: $(json "$work/m6.json" engine_restore)" ;;
esac
# No TCP socket in m6's network namespace: CRIU locks nothing.
case "$(json "$work/m6.json" criu_network_lock)" in
  "skip (no TCP socket"*) ;;
  *) fail "m6 has no socket, yet: $(json "$work/m6.json" criu_network_lock)" ;;
esac
[ "$(state a m6)" = absent ] || fail "m6 still exists on a"
[ "$(state b m6)" = running ] || fail "m6 is not running on b: $(state b m6)"
verified b m6 || fail "m6's memory does not verify on b"
remove_now b m6 >/dev/null
"$testbed" stop b
"$testbed" start b

if mounts_early_here; then
  log "2d. the early mount images are stale: b's CRIU builds the tree again at the go"
  # b's daemon adds a file to the early image of /dev, as if /dev changed
  # between the early dump and the freeze: the tree built from it must not
  # be used, and the container's /dev is the final images' one.
  run_memload a m7
  dev_before7=$(dev_tmpfs a m7) || fail "cannot list m7's /dev"
  "$testbed" stop b
  FERRY_FAULT=early-mounts-stale "$testbed" start b
  migrate m7 >"$work/m7.json" 2>"$work/m7.err" || fail "m7's migration failed: $(cat "$work/m7.json" "$work/m7.err")"
  [ "$(mounts_early "$work/m7.json" destination)" = "built while waiting, not used: the mounts changed before the freeze" ] ||
    fail "m7's early mount tree: $(mounts_early "$work/m7.json" destination)"
  grep -q "does not fit the images: building it again" "$(restore_log m7)" ||
    fail "CRIU did not say it built the tree again"
  [ "$(state b m7)" = running ] || fail "m7 is not running on b: $(state b m7)"
  dev_after7=$(dev_tmpfs b m7) || fail "cannot list m7's /dev on b"
  [ "$dev_after7" = "$dev_before7" ] || fail "m7's /dev is not the final one: $(diff <(echo "$dev_before7") <(echo "$dev_after7"))"
  verified b m7 || fail "m7's memory does not verify on b"
  remove_now b m7 >/dev/null
  "$testbed" stop b
  "$testbed" start b
fi

log "2e. the migrator stops once the container is dumped: a's daemon releases it"
# The migrator SIGSTOPs itself before it registers (a fault), with CRIU
# holding the container frozen: a's daemon hears no heartbeat for 10 s,
# kills the container's CRIU (runc's child) and releases the tasks while
# the migrator is still stopped. The engine still has it running.
a_log="/tmp/ferry-testbed/$FERRY_TESTBED/a/pagesrv.log"
run_memload a m8
amark=$(lines "$a_log")
FERRY_FAULT=short-heartbeat-silence,migrator-stop-before-register migrate m8 \
  >"$work/m8.json" 2>"$work/m8.err" &
job=$!
wait_for "$a_log" "the migrator sent nothing for 10 s before it registered" 120 "$amark"
mpid=$(on a migrator status --json | python3 -c '
import json, sys
print(*[m["migrator_pid"] for m in json.load(sys.stdin)["migrations"] if m["container"] == "m8"])')
[ -n "$mpid" ] || fail "m8: no migration of it in 'migrator status'"
[ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] || fail "m8: the migrator is not stopped"
verified a m8 || fail "m8 does not run (or verify) on a while the migrator is stopped"
[ "$(state a m8)" = running ] || fail "$engine says m8 is $(state a m8) on a"
kill -CONT "$mpid"
rc=0
wait "$job" || rc=$?
[ "$rc" != 0 ] || fail "m8: the migration succeeded"
grep -q "the source daemon released the source: the migrator sent nothing" "$work/m8.json" ||
  fail "m8: unclear error: $(cat "$work/m8.json" "$work/m8.err")"
[ "$(json "$work/m8.json" source_running)" = true ] || fail "the migrator says m8 is not running"
[ "$(state a m8)" = running ] || fail "$engine says m8 is $(state a m8) on a after the migrator woke"
verified a m8 || fail "m8's memory does not verify after the migrator woke"
[ "$(state b m8)" = absent ] || fail "m8 was left on b: $(state b m8)"
remove_now a m8 >/dev/null

log "2f. the migrator is killed between the commit and the resume: a resumes the container"
# The migrator SIGSTOPs itself once a's daemon committed, before it tells
# b to resume, and is then killed: b's gate (the runc shim's question)
# goes unanswered, b kills its copy before it ran and its lazy-pages tells
# a, whose daemon resumes the committed container.
run_memload a m9
amark=$(lines "$a_log")
FERRY_FAULT=migrator-stop-after-commit migrate m9 >"$work/m9.json" 2>"$work/m9.err" &
job=$!
mpid=""
for ((i = 0; i < 600; i++)); do
  mpid=$(on a migrator status --json | python3 -c '
import json, sys
print(*[m["migrator_pid"] for m in json.load(sys.stdin)["migrations"]
        if m["container"] == "m9" and m["migrator_alive"] and m["phase"] == "committing"])')
  [ -n "$mpid" ] && [ "$(awk '{print $3}' /proc/"$mpid"/stat 2>/dev/null)" = T ] && break
  sleep 0.1
done
[ -n "$mpid" ] && [ "$(awk '{print $3}' /proc/"$mpid"/stat)" = T ] ||
  fail "m9: the migrator did not stop after the commit: $(cat "$work/m9.json" "$work/m9.err")"
kill -KILL "$mpid"
wait "$job" && fail "m9: a killed migrator's migration succeeded"
wait_for "$a_log" "aborting (the destination killed its copy before it ran); the source resumes" 60 "$amark"
verified a m9 || fail "m9 does not run (or verify) on a once b killed its copy"
[ "$(state a m9)" = running ] || fail "$engine says m9 is $(state a m9) on a"
for ((i = 0; i < 300; i++)); do
  [ "$(state b m9)" = absent ] && break
  sleep 0.1
done
[ "$(state b m9)" = absent ] || fail "m9 was left on b: $(state b m9)"
remove_now a m9 >/dev/null

log "2g. dirty-rate tracks the container's writes through its seccomp filter"
# write_tracker makes a userfaultfd inside each of the container's
# processes, which the engine's seccomp profile refuses them; the ptrace
# that makes it suspends the filter (lib/sys/remote_syscall). The container
# runs on, its memory intact, and no uffd is left in it.
run_memload a m10
cpid=$(ctr a inspect m10 --format '{{.State.Pid}}')
grep -q "^Seccomp:[[:space:]]*2" "/proc/$cpid/status" || fail "m10 runs without a seccomp filter: the case proves nothing"
fds_before=$(ls "/proc/$cpid/fd" | wc -l)
"$FERRY_BUILD/examples/dirty-rate" --pid "$cpid" --seconds 2.5 --interval-ms 250 \
  >"$work/m10-rate.json" 2>"$work/m10-rate.err" || fail "dirty-rate failed on m10: $(cat "$work/m10-rate.err")"
cat "$work/m10-rate.json" >&2
[ "$(json "$work/m10-rate.json" processes)" -ge 2 ] || fail "dirty-rate did not track m10's parent and child"
python3 - "$work/m10-rate.json" <<'PY' || fail "dirty-rate's figures are wrong: $(cat "$work/m10-rate.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["tracked_mib"] >= 80, r  # 64 MiB in the parent, 16 in the child
assert r["looks"] >= 5, r
assert r["written_mib_s_max"] > 0, r  # its once-a-second ticks write
PY
[ "$(ls "/proc/$cpid/fd" | wc -l)" = "$fds_before" ] || fail "dirty-rate left an fd in m10"
! grep -q " uw" "/proc/$cpid/smaps" || fail "m10's memory is still registered with a uffd"
verified a m10 || fail "m10 does not verify after dirty-rate"
remove_now a m10 >/dev/null

log "2h. --precopy: the container's memory staged on b before the freeze"
# The trackers are made inside the container's processes through their
# seccomp filter, as in 2g; b installs the pages still valid at the freeze
# from its copy, and the memory verifies there.
run_memload a m11
migrate m11 --precopy --precopy-wait 20 >"$work/m11.json" 2>"$work/m11.err" ||
  fail "the --precopy migration failed: $(cat "$work/m11.json" "$work/m11.err")"
python3 - "$work/m11.json" <<'PY' || fail "m11's pre-copy did not serve: $(cat "$work/m11.json")"
import json, sys
r = json.load(open(sys.argv[1]))
p = r["precopy"]
assert r["ok"] and not p["error"] and not p["unused"], p
# 64 MiB in the parent, 16 in the child, read only after the fill.
assert p["pages_valid"] >= 70 * 256 and p["pages_installed"] >= 70 * 256, p
assert r["pages_served_by_source"] < p["pages_installed"], r
PY
log "   pre-copy: $(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["precopy"]; print(p["pages_sent"], "sent,", p["pages_installed"], "installed from it,", p["wait_ms"], "ms before the freeze")' "$work/m11.json")"
[ "$(state b m11)" = running ] || fail "m11 is not running on b: $(state b m11)"
verified b m11 || fail "m11 does not verify on b after a --precopy migration"
remove_now b m11 >/dev/null

log "3. a container of the same name on b: refused before the freeze"
run_memload b m2
migrate m2 >"$work/m3.json" 2>"$work/m3.err" && fail "migration onto an existing name succeeded"
grep -q "already exists on the destination" "$work/m3.json" || fail "unclear error: $(cat "$work/m3.json")"
[ "$(state a m2)" = running ] || fail "the source m2 stopped"
[ "$(state b m2)" = running ] || fail "b's own m2 was touched"

log "4. a named volume: refused before the freeze"
ctr a run -d --name m4 -v ferry-test-volume:/data "$image" sleep 600 >/dev/null
migrate m4 >"$work/m4.json" 2>"$work/m4.err" && fail "migration of a container with a named volume succeeded"
grep -q "named volumes (ferry-test-volume at /data)" "$work/m4.json" || fail "unclear error: $(cat "$work/m4.json")"
[ "$(state a m4)" = running ] || fail "m4 stopped: $(state a m4)"
[ "$(json "$work/m4.json" committed)" = false ] || fail "m4's migration says it committed"
if [ "$engine" = docker ]; then
  log "5. containerd's copies of the checkpoints it restored from are gone"
  # containerd keeps the checkpoint it restored from in a ctrd-checkpoint*
  # directory of its TMPDIR (engines/docker/containerd_staging.hpp): the
  # daemon removes its own when the move ends, and a daemon killed mid-move
  # removes it when it starts again (destination_dies restarts it).
  left=$(python3 - "$work" "${TMPDIR:-/tmp}" <<'PY'
import glob, json, os, sys
work, tmp = sys.argv[1:]
ids = set()
for f in glob.glob(os.path.join(work, "*.json")):
    try:
        r = json.load(open(f))
    except ValueError:
        continue
    if isinstance(r, dict) and r.get("migration_id"):
        ids.add(r["migration_id"])
assert len(ids) >= 4, f"expected the moves' results in {work}, found {ids}"
for f in glob.glob(os.path.join(tmp, "ctrd-checkpoint*", "ferry-restore.json")):
    try:
        if json.load(open(f)).get("migration_id") in ids:
            print(os.path.dirname(f))
    except ValueError:
        pass
PY
  ) || fail "cannot check containerd's copies: $left"
  [ -z "$left" ] || fail "containerd's copies of Ferry's checkpoints are left: $left"
fi
log "$engine: all cases passed"
