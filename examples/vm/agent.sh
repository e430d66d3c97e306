#!/bin/bash
# Inside a testbed host VM (examples/vm/host.sh; image.sh's init runs it
# chrooted in the host's root): runs the commands the host queues, each in a
# process group of its own, and reports how they ended. The host says what
# to do on a virtio-serial port named ferry.ctl, one line each ("run ID",
# "kill ID", "poweroff"), so an idle agent costs nothing; the jobs
# themselves are files in DIR, on the share (the host sees the same path):
#   DIR/jobs/ID.cmd      a bash script, which ends by writing ID.rc
#   DIR/jobs/ID.out/.err its output, as it runs
#   DIR/jobs/ID.rc       its exit status, once it has ended (137: killed)
#   DIR/jobs/ID.kill     the host's kill request, should its line be lost
#   DIR/ready            written once the agent listens
set -u
dir=$1
jobs=$dir/jobs
mkdir -p "$jobs"
declare -A running # job id -> its process group

port=
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = ferry.ctl ] && port=/dev/${p##*/}
done
[ -n "$port" ] || { echo "agent: no virtio port named ferry.ctl" >&2; exit 1; }
exec 8<"$port"

finish() { # ID STATUS: the status of a job that could not write its own
  echo "$2" >"$jobs/$1.rc"
}

start_job() {
  local id=$1
  # Started already (its line came after the files said so), or gone.
  [ -f "$jobs/$id.cmd" ] || return 0
  mv "$jobs/$id.cmd" "$jobs/$id.run"
  # The script writes its own status last. setsid execs in place here
  # (bash's child is no group leader), so $! is the new group's id.
  # Without the port (fd 8): a workload must not inherit a device CRIU
  # cannot dump.
  setsid bash "$jobs/$id.run" </dev/null >"$jobs/$id.out" 2>"$jobs/$id.err" 8<&- &
  running[$id]=$!
}

kill_job() {
  local id=$1 pg=${running[$1]:-}
  [ -n "$pg" ] || return 0
  kill -KILL -- "-$pg" 2>/dev/null
  wait "$pg" 2>/dev/null
  rm -f "$jobs/$id.kill"
  [ -e "$jobs/$id.rc" ] || finish "$id" 137
  unset "running[$id]"
}

echo "$(uname -r)" >"$dir/ready"
while :; do
  if read -r -t 1 -u 8 verb id; then
    case "$verb" in
      run) start_job "$id" ;;
      kill) kill_job "$id" ;;
      poweroff) break ;;
    esac
  fi
  # A line cut by the read's timeout is lost: once a second the files say
  # the same (ID.cmd to run, ID.kill to kill).
  for f in "$jobs"/*.cmd; do
    [ -e "$f" ] || continue
    id=${f##*/}
    start_job "${id%.cmd}"
  done
  for id in "${!running[@]}"; do
    [ -e "$jobs/$id.kill" ] && kill_job "$id"
  done
  # A job gone without its status (killed from inside the VM): 255. (The
  # host removes ID.run before ID.rc once it has the status.)
  for id in "${!running[@]}"; do
    if ! kill -0 "${running[$id]}" 2>/dev/null; then
      wait "${running[$id]}" 2>/dev/null
      [ -s "$jobs/$id.rc" ] || [ ! -e "$jobs/$id.run" ] || finish "$id" 255
      unset "running[$id]"
    fi
  done
done
sync
