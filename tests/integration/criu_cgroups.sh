#!/usr/bin/env bash
# CRIU's dump of a tree's cgroups (examples/criu-patches/0021), on the real
# CRIU: a 64 MiB memload in its own PID namespace is moved into a cgroup of
# its own in every hierarchy this machine mounts under /sys/fs/cgroup, with
# properties set there and an empty nested cgroup below it, then dumped (the
# tree stops). Its cgroups are removed, and the restore (CRIU's default
# soft mode, as runc's) must make them again.
#  1. CRIU walked the cgroup directories without ftw() and found the empty
#     nested cgroup, and read the properties set (0021).
#  2. The restored tree is in its cgroups again, which have the properties
#     they had, and the empty nested cgroup is back with its own; the tree's
#     memory verifies. No thread had a cgroup of its own, so CRIU forked no
#     cgroupd (0022).
#  3. (cgroup v1: a thread may live apart from its process.) One thread is
#     moved into the nested cgroup and the tree is dumped and restored
#     again, with CRIU mounting the hierarchies itself: CRIU starts its
#     cgroupd, and that thread, only it, is back in the nested cgroup.
#  2b. Dumped with --cgroup-skip-leaf-root-props (0029), as Ferry dumps a
#     container: with the nested cgroup, the tree's cgroup is read and
#     comes back as before; without it, its properties are not read, and a
#     restore into cgroups made beforehand (as runc makes them) puts the
#     tree there and leaves their values; its memory verifies.
#  4. (cgroup v1.) The tree stays in its cgroup in the pids hierarchy only
#     and moves to the root of the others; CRIU, mounting its own, dumps and
#     restores it there (0021 reads a hierarchy's root through its mount's
#     O_PATH fd), with the tree's /proc opened before the freeze (0026).
# Steps 1-2 give CRIU this machine's hierarchies as its yard, as Ferry does
# for a container; where CRIU mounts cgroup2 itself (step 3, or every step
# on a cgroup v2 host) the hierarchy's flags, favordynmods set by the test
# among them, must be the same afterwards (0024).
# Nothing here needs the testbed: CRIU runs on this machine directly.
source "$(dirname "$0")/lib.sh"

out="$work/memload.out"
start_local "$out"

name="ferry-cgtest-$$"
# Every hierarchy mounted as /sys/fs/cgroup/X (a cgroup v1 or hybrid host),
# or /sys/fs/cgroup itself (a cgroup v2 host).
hierarchies=()
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  hierarchies=(/sys/fs/cgroup)
  v2_only=yes
else
  for h in /sys/fs/cgroup/*; do
    case "$(stat -fc %T "$h" 2>/dev/null)" in cgroup2fs | cgroupfs) hierarchies+=("$h") ;; esac
  done
  v2_only=no
fi
[ ${#hierarchies[@]} -gt 0 ] || fail "no cgroup hierarchy under /sys/fs/cgroup"
# Steps 1 and 2 run CRIU as Ferry does for a container: this machine's
# hierarchies are its yard where they are all there by CRIU's names
# (criu/cgroup_yard.hpp). Step 3 lets CRIU mount its own, as a plain `criu`
# does. A cgroup2 mount applies its flags to the one hierarchy, host-wide:
# CRIU must mount it with the flags it has (0024), or nsdelegate,
# favordynmods and the like are gone for every cgroup. The test sets
# favordynmods (if the kernel has it) to see that, and puts the flags back.
yard=()
[ "$v2_only" = yes ] || yard=(--cgroup-yard /sys/fs/cgroup)
# mountinfo: the file system type and super options follow the "-".
v2_mount=$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") break} $(i + 1) == "cgroup2" {print $5; exit}' /proc/self/mountinfo)
v2_flags() {
  awk -v m="$v2_mount" '{for (i = 7; i <= NF; i++) if ($i == "-") break}
    $5 == m && $(i + 1) == "cgroup2" {
      n = split($(i + 3), o, ",")
      for (j = 1; j <= n; j++) if (o[j] ~ /^(nsdelegate|favordynmods|memory_[a-z_]+|pids_localevents)$/) printf "%s%s", (k++ ? "," : ""), o[j]
      exit
    }' /proc/self/mountinfo
}
orig_flags="" want_flags=""
if [ -n "$v2_mount" ]; then
  orig_flags=$(v2_flags)
  case ",$orig_flags," in
  *,favordynmods,*) want_flags=$orig_flags ;;
  *) mount -o "remount${orig_flags:+,$orig_flags},favordynmods" "$v2_mount" 2>/dev/null && want_flags=$(v2_flags) ;;
  esac
fi
test_cleanup() {
  local p h d
  if [ -n "$v2_mount" ] && [ "$(v2_flags)" != "$orig_flags" ]; then
    mount -o "remount${orig_flags:+,$orig_flags}" "$v2_mount" || log "cannot put $v2_mount's flags back to '$orig_flags'"
  fi
  for p in "${local_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${local_pids[@]}"; do wait_gone "$p" 5 || true; done
  for h in "${hierarchies[@]}"; do
    for d in task/empty/inner task/empty task ""; do
      [ -d "$h/$name/$d" ] && rmdir "$h/$name/$d" 2>/dev/null || true
    done
  done
}

# The tree goes into $name/task everywhere; $name/task/empty/inner holds no
# task, so only a walk of task's directories finds it.
pids_h="" cpu_h=""
for h in "${hierarchies[@]}"; do
  mkdir -p "$h/$name/task/empty/inner"
  if [ -f "$h/cpuset.cpus" ]; then # v1 cpuset: a new cgroup takes no task until it has CPUs and nodes
    for d in "$name" "$name/task"; do
      cat "$(dirname "$h/$d")/cpuset.cpus" >"$h/$d/cpuset.cpus"
      cat "$(dirname "$h/$d")/cpuset.mems" >"$h/$d/cpuset.mems"
    done
  fi
  echo "$pid" >"$h/$name/task/cgroup.procs" || fail "cannot move the tree into $h/$name/task"
  [ -f "$h/pids.max" ] || [ -f "$h/$name/task/pids.max" ] && pids_h=$h
  [ -f "$h/$name/task/cpu.shares" ] && cpu_h=$h
done
if [ "$v2_only" = yes ]; then
  # A cgroup holding tasks enables no controller below it (v2): only the
  # tree's own cgroup gets properties here.
  echo "+pids" >"/sys/fs/cgroup/$name/cgroup.subtree_control" 2>/dev/null || true
  [ -f "/sys/fs/cgroup/$name/task/pids.max" ] && pids_h=/sys/fs/cgroup || pids_h=""
fi
[ -n "$pids_h" ] || fail "no pids controller to set a property in"
echo 777 >"$pids_h/$name/task/pids.max"
[ "$v2_only" = yes ] || echo 33 >"$pids_h/$name/task/empty/inner/pids.max"
[ -z "$cpu_h" ] || echo 512 >"$cpu_h/$name/task/cpu.shares"
grep -q "$name/task" "/proc/$pid/cgroup" || fail "the tree is not in its cgroups: $(cat "/proc/$pid/cgroup")"

dir="$work/images"
local_dump "$dir" "$pid" "${yard[@]}"

log "1. CRIU walked the cgroup directories and read the properties"
grep -q "cg: walking the directories of .*/$name/task" "$dir/dump.log" ||
  fail "CRIU did not walk the cgroup directories the new way: $(grep -n 'cg: adding' "$dir/dump.log" | head -n 3)"
grep -q "cg: adding cgroup .*/$name/task/empty/inner" "$dir/dump.log" ||
  fail "the empty nested cgroup was not found: $(grep -n 'cg: adding' "$dir/dump.log" | head)"
grep -q "cg: Dumping value 777 from .*/$name/task/pids.max" "$dir/dump.log" ||
  fail "pids.max was not read: $(grep -n 'pids.max' "$dir/dump.log" | head -n 3)"
[ -z "$cpu_h" ] || grep -q "cg: Dumping value 512 from .*/$name/task/cpu.shares" "$dir/dump.log" ||
  fail "cpu.shares was not read: $(grep -n 'cpu.shares' "$dir/dump.log" | head -n 3)"

# Gone, so the restore must make them from the images.
for h in "${hierarchies[@]}"; do
  rmdir "$h/$name/task/empty/inner" "$h/$name/task/empty" "$h/$name/task" ||
    fail "cannot remove $h/$name/task"
done

log "2. the restore made the cgroups again, with their properties"
local_restore "$dir" "${yard[@]}"
for h in "${hierarchies[@]}"; do
  grep -qx "$pid" "$h/$name/task/cgroup.procs" || fail "the restored tree is not in $h/$name/task"
  [ -d "$h/$name/task/empty/inner" ] || fail "$h/$name/task/empty/inner was not made again"
done
got=$(cat "$pids_h/$name/task/pids.max")
[ "$got" = 777 ] || fail "pids.max is $got, not 777"
if [ "$v2_only" = no ]; then
  got=$(cat "$pids_h/$name/task/empty/inner/pids.max")
  [ "$got" = 33 ] || fail "the nested cgroup's pids.max is $got, not 33"
fi
if [ -n "$cpu_h" ]; then
  got=$(cat "$cpu_h/$name/task/cpu.shares")
  [ "$got" = 512 ] || fail "cpu.shares is $got, not 512"
fi
grep -q "No thread has a cgroup set of its own: no cgroupd" "$dir/restore.log" ||
  fail "CRIU started a cgroupd nobody needed: $(grep -n 'cgroud\|cgroupd' "$dir/restore.log" | head -n 3)"
grep -q "cgroud: Daemon started" "$dir/restore.log" && fail "a cgroupd started anyway"
mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"

log "2b. --cgroup-skip-leaf-root-props (0029), as Ferry dumps a container"
# With a cgroup below it, the tree's own cgroup is read as before.
dir_s="$work/images-skip"
local_dump "$dir_s" "$pid" "${yard[@]}" --cgroup-skip-leaf-root-props
grep -q "cg: Dumping value 777 from .*/$name/task/pids.max" "$dir_s/dump.log" ||
  fail "with a nested cgroup, the tree's own cgroup was not read: $(grep -n 'Not reading\|pids.max' "$dir_s/dump.log" | head -n 3)"
! grep -q "Not reading the properties of .*/$name/task:" "$dir_s/dump.log" || fail "the properties of a cgroup with sub-cgroups were skipped"
for h in "${hierarchies[@]}"; do
  rmdir "$h/$name/task/empty/inner" "$h/$name/task/empty" "$h/$name/task" || fail "cannot remove $h/$name/task"
done
local_restore "$dir_s" "${yard[@]}"
got=$(cat "$pids_h/$name/task/pids.max")
[ "$got" = 777 ] || fail "with a nested cgroup and the option, pids.max came back as $got, not 777"
[ -d "$pids_h/$name/task/empty/inner" ] || fail "the nested cgroup was not made again"
# A leaf: its properties are not read, and the restore (as runc's, into
# cgroups made beforehand with the spec's values) leaves them as made.
for h in "${hierarchies[@]}"; do rmdir "$h/$name/task/empty/inner" "$h/$name/task/empty" || fail "cannot remove $h/$name/task/empty"; done
dir_l="$work/images-leaf"
local_dump "$dir_l" "$pid" "${yard[@]}" --cgroup-skip-leaf-root-props
grep -q "Not reading the properties of .*/$name/task: the tree's own cgroup" "$dir_l/dump.log" ||
  fail "the leaf cgroup's properties were read: $(grep -n 'pids.max\|Not reading' "$dir_l/dump.log" | head -n 3)"
! grep -q "cg: Dumping value .* from .*/$name/task/" "$dir_l/dump.log" || fail "a property of the leaf cgroup was read"
echo 555 >"$pids_h/$name/task/pids.max"
local_restore "$dir_l" "${yard[@]}"
for h in "${hierarchies[@]}"; do
  grep -qx "$pid" "$h/$name/task/cgroup.procs" || fail "the tree restored from a leaf dump is not in $h/$name/task"
done
got=$(cat "$pids_h/$name/task/pids.max")
[ "$got" = 555 ] || fail "the restore changed the cgroup made beforehand: pids.max $got, not 555"
mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"
# Steps 3 and 4 want the nested cgroup and the property back.
for h in "${hierarchies[@]}"; do mkdir -p "$h/$name/task/empty/inner"; done
echo 777 >"$pids_h/$name/task/pids.max"
[ "$v2_only" = yes ] || echo 33 >"$pids_h/$name/task/empty/inner/pids.max"

flags_kept() {
  [ -z "$want_flags" ] || [ "$(v2_flags)" = "$want_flags" ] ||
    fail "CRIU's own cgroup2 mounts changed $v2_mount's flags from '$want_flags' to '$(v2_flags)'"
}
if [ "$v2_only" = yes ]; then
  flags_kept
  log "PASS (cgroup v2: ${#hierarchies[@]} hierarchy; pids.max, nested cgroup restored; flags '$want_flags' kept; no thread apart, so step 3 is v1 only)"
  exit 0
fi

log "3. a thread in a cgroup apart from its process comes back there (CRIU mounts its own cgroups)"
tid=$(ls "/proc/$pid/task" | grep -vx "$pid" | head -n 1)
[ -n "$tid" ] || fail "the workload has no second thread"
echo "$tid" >"$pids_h/$name/task/empty/inner/tasks" || fail "cannot move thread $tid"
dir2="$work/images2"
local_dump "$dir2" "$pid"
local_restore "$dir2"
grep -q "cgroud: Daemon started" "$dir2/restore.log" ||
  fail "CRIU did not start its cgroupd for the thread apart: $(grep -n 'cgroup set\|cgroud' "$dir2/restore.log" | head -n 3)"
inner=$(cat "$pids_h/$name/task/empty/inner/tasks")
others=$(cat "$pids_h/$name/task/tasks")
[ "$(echo "$inner" | wc -w)" = 1 ] || fail "the nested cgroup holds [$inner], not one thread"
[ "$inner" != "$pid" ] || fail "the process's main thread went into the nested cgroup"
echo "$others" | grep -qx "$pid" || fail "the main thread is not in $name/task: [$others]"
mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"
flags_kept

log "4. a tree in a cgroup of its own in one hierarchy and in the root of the others (CRIU mounts its own)"
# The walk of a hierarchy where the tree is in the root starts from the
# mount CRIU made: fsmount()'s O_PATH fd, which 0021 opens with
# openat("."); a dup of it could not be read, and the dump failed. This
# tree also has a pid namespace of its own, so CRIU opened a /proc of it
# before the freeze (0026) and the parasite read the cgroups through it.
echo "$inner" >"$pids_h/$name/task/tasks" || fail "cannot move thread $inner back"
for h in "${hierarchies[@]}"; do
  [ "$h" = "$pids_h" ] || echo "$pid" >"$h/cgroup.procs" || fail "cannot move the tree into $h's root"
done
dir4="$work/images4"
local_dump "$dir4" "$pid"
grep -q "cg: walking the directories of /proc/self/fd/[0-9]*/$" "$dir4/dump.log" ||
  fail "CRIU walked no hierarchy from its root: $(grep -n 'walking the directories' "$dir4/dump.log" | head -n 3)"
grep -q "pidns-proc: Opened a /proc of $pid's pid namespace before the freeze" "$dir4/dump.log" ||
  fail "CRIU did not open the tree's /proc before the freeze: $(grep -n 'pidns-proc' "$dir4/dump.log" | head -n 3)"
local_restore "$dir4"
grep -qx "$pid" "$pids_h/$name/task/cgroup.procs" || fail "the restored tree is not in $pids_h/$name/task"
for h in "${hierarchies[@]}"; do
  [ "$h" = "$pids_h" ] || grep -qx "$pid" "$h/cgroup.procs" || fail "the restored tree is not in $h's root"
done
mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"
flags_kept
log "PASS (${#hierarchies[@]} hierarchies; pids.max, nested cgroup${cpu_h:+, cpu.shares} restored; no cgroupd until a thread lived apart; cgroup2 flags '$want_flags' kept; a tree in the root of all but one hierarchy dumped and restored)"
