#!/usr/bin/env bash
# CRIU's action socket (examples/criu-patches/0017), on the real CRIU: a
# 64 MiB memload in its own PID namespace is dumped once, then restored
# three times with --action-socket at post-restore only, against a peer
# that answers each time differently:
#  1. "refuse testing": the restore fails, CRIU says why, and the restored
#     tasks, which never ran, are gone;
#  2. no answer (the peer closes the socket): the same;
#  3. "ok": the restore goes on and the workload runs with its memory.
# Each time the peer must have been asked once, "post-restore PID", with
# the restored root's pid: nothing at the restore's other steps.
# This is the commit gate of Ferry's container restores (engines/): a
# refusal there is what keeps a copy from running when the source did not
# commit. Nothing here needs the testbed: CRIU runs on this machine.
source "$(dirname "$0")/lib.sh"

out="$work/memload.out"
start_local "$out"
images="$work/images"
mkdir -p "$images"
timeout -s KILL 60 criu dump -t "$pid" -D "$images" -o dump.log -v4 >/dev/null 2>&1 ||
  fail "the dump failed: $(grep -E 'Error' "$images/dump.log" | head -n 5)"
wait_gone "$pid" 10 || fail "the dumped workload is still running"

# peer MODE: listens on $work/MODE.socket, answers the first connection as
# MODE says and records what it was asked in $work/MODE.asked; it stops
# after one connection, or after 90 s.
peer() {
  local mode=$1
  rm -f "$work/$mode.socket" "$work/$mode.asked"
  timeout 90 python3 - "$work/$mode.socket" "$work/$mode.asked" "$mode" <<'PY' &
import socket, sys
path, asked, mode = sys.argv[1:4]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(4)
conn, _ = srv.accept()
conn.settimeout(30)
line = b""
while not line.endswith(b"\n"):
    chunk = conn.recv(256)
    if not chunk:
        break
    line += chunk
open(asked, "a").write(line.decode())
if mode == "refuse":
    conn.sendall(b"refuse testing\n")
elif mode == "ok":
    conn.sendall(b"ok\n")
conn.close()  # "hangup": no answer at all
PY
  local_pids+=("$!")
  wait_for_socket "$work/$mode.socket"
}
wait_for_socket() {
  local i
  for i in $(seq 100); do
    [ -S "$1" ] && return 0
    sleep 0.1
  done
  fail "the peer's socket $1 did not appear"
}

# restore MODE: a detached restore asking the peer at post-restore; its
# exit status is CRIU's.
restore() {
  local mode=$1
  peer "$mode"
  timeout -s KILL 60 criu restore -D "$images" --restore-detached --pidfile "$work/$mode.pid" \
    --action-socket "$work/$mode.socket" --action-script-actions post-restore \
    -o "restore-$mode.log" -v4 >/dev/null 2>&1
}

# asked_once MODE: the peer was asked once, at post-restore, with a pid.
# Prints the pid.
asked_once() {
  local mode=$1 step asked_pid extra
  [ -s "$work/$mode.asked" ] || fail "$mode: CRIU never asked the action socket"
  read -r step asked_pid extra <"$work/$mode.asked"
  [ "$step" = post-restore ] && [ -z "$extra" ] && [ "$(lines "$work/$mode.asked")" = 1 ] ||
    fail "$mode: CRIU asked '$(cat "$work/$mode.asked")', not one 'post-restore PID'"
  [ "$asked_pid" -gt 0 ] 2>/dev/null || fail "$mode: CRIU gave no root pid: '$asked_pid'"
  echo "$asked_pid"
}

# refused MODE WHY: the restore failed, restore.log says WHY, and the
# restored root the peer was told of is gone.
refused() {
  local mode=$1 why=$2 root
  restore "$mode" && fail "$mode: CRIU restored although the action socket did not say ok"
  root=$(asked_once "$mode")
  grep -q "$why" "$images/restore-$mode.log" ||
    fail "$mode: restore.log does not say '$why': $(grep -E 'Error|action socket' "$images/restore-$mode.log" | head -n 5)"
  grep -q "Aborting restore due to post-restore script" "$images/restore-$mode.log" ||
    fail "$mode: CRIU did not abort at post-restore"
  wait_gone "$root" 10 || fail "$mode: the restored root $root still exists after the refusal"
}

log "1. the peer refuses"
refused refuse "The action socket refused post-restore: refuse testing"

log "2. the peer hangs up without an answer"
refused hangup "The action socket closed without answering post-restore"

log "3. the peer says ok"
restore ok || fail "the restore failed: $(grep -E 'Error' "$images/restore-ok.log" | head -n 5)"
root=$(asked_once ok)
restored=$(cat "$work/ok.pid")
[ "$restored" = "$root" ] || fail "CRIU asked with pid $root, restored $restored"
local_pids+=("$restored")
verify_workload "$restored" "$out" 16384
kill -KILL "$restored"
log "PASS"
