#!/usr/bin/env bash
# Ferry's CRIU plugin in a plain CRIU dump and restore, in a network
# namespace of its own:
#   1. with nobody listening on @ferry-criu-events, the dump and the restore
#      succeed (the plugin must never make CRIU fail);
#   2. with a listener, it receives freeze-start, frozen, dump-end and
#      resumed, tagged with FERRY_MIGRATION_ID, in that order;
#   3. without FERRY_MIGRATION_ID (not a Ferry migration) it reports nothing;
#   4. with FERRY_CRIU_LOG_LEVEL=3 it sets CRIU's log level (runc asks for 4
#      by RPC): the dump and the restore say so and write under 2/3 the lines
#      than case 1's at -v4; outside a migration the variable does nothing.
. "$(dirname "$0")/lib.sh"

plugin_dir=$FERRY_BUILD/criu-plugin
[ -f "$plugin_dir/ferry_criu.so" ] || fail "no plugin in $plugin_dir"
netns=$FERRY_TESTBED-plugin
ip netns add "$netns"
trap 'rc=$?; ip netns del "$netns" 2>/dev/null || true; (exit $rc); cleanup' EXIT
ip -n "$netns" link set lo up
printf 'libdir %s\n' "$plugin_dir" >"$work/criu.conf"
id=0123456789abcdef0123456789abcdef

# dump_and_restore NAME [ENV...]: a sleeping tree in its own PID namespace,
# dumped and restored by CRIU with the plugin loaded; the restored tree is
# then killed.
dump_and_restore() {
  local name=$1 launcher pid="" rpid
  shift
  nsenter --net="/run/netns/$netns" unshare --pid --fork setsid sleep 300 </dev/null >/dev/null 2>&1 &
  launcher=$!
  for _ in $(seq 1 100); do
    read -r pid _ 2>/dev/null <"/proc/$launcher/task/$launcher/children" && [ -n "$pid" ] && break
    sleep 0.05
  done
  [ -n "$pid" ] || fail "$name: no workload"
  mkdir -p "$work/$name"
  env "$@" nsenter --net="/run/netns/$netns" criu dump -t "$pid" -D "$work/$name" \
    --config "$work/criu.conf" -v4 -o dump.log ||
    fail "$name: criu dump failed: $(grep Error "$work/$name/dump.log" | head -5)"
  grep -q "ferry" "$work/$name/dump.log" || fail "$name: CRIU did not load the plugin"
  env "$@" nsenter --net="/run/netns/$netns" criu restore -D "$work/$name" -d \
    --config "$work/criu.conf" -v4 -o restore.log --pidfile "$work/$name/pid" ||
    fail "$name: criu restore failed: $(grep Error "$work/$name/restore.log" | head -5)"
  rpid=$(cat "$work/$name/pid")
  running "$rpid" || fail "$name: the restored tree does not run"
  kill -KILL "$rpid"
}

# A listener on the plugin's socket in the namespace, writing what it gets.
listen() {
  nsenter --net="/run/netns/$netns" python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0ferry-criu-events")
s.settimeout(30)
open(sys.argv[1] + ".ready", "w").close()
with open(sys.argv[1], "w") as out:
    while True:
        try:
            msg = s.recv(512).decode()
        except socket.timeout:
            break
        out.write(msg + "\n"); out.flush()
        if " resumed " in msg:
            break
' "$1" &
  listener=$!
  for _ in $(seq 1 100); do [ -f "$1.ready" ] && return 0; sleep 0.05; done
  fail "the listener did not start"
}

log "1. no daemon listening: CRIU dumps and restores as usual"
dump_and_restore no-daemon FERRY_MIGRATION_ID=$id

log "2. a listener gets every moment, tagged with the migration id"
listen "$work/events"
dump_and_restore with-daemon FERRY_MIGRATION_ID=$id
wait "$listener" || true
events=$(awk -v id=$id '$1 == "ferry-criu" && $2 == 1 && $3 == id {print $4}' "$work/events" | uniq | tr '\n' ' ')
[ "$events" = "freeze-start frozen dump-end resumed " ] || fail "unexpected reports: '$events' from $(cat "$work/events")"

log "3. not a Ferry migration: nothing is reported"
listen "$work/silent"
dump_and_restore no-id
kill "$listener" 2>/dev/null || true
wait "$listener" 2>/dev/null || true
[ ! -s "$work/silent" ] || fail "the plugin reported outside a migration: $(cat "$work/silent")"

log "4. FERRY_CRIU_LOG_LEVEL=3 lowers CRIU's -v4 for a migration, and only for one"
for f in dump restore; do
  ! grep -q "ferry: log level" "$work/no-daemon/$f.log" || fail "case 1's $f changed its log level"
  ! grep -q "ferry: log level" "$work/no-id/$f.log" || fail "case 3's $f changed its log level"
done
dump_and_restore level3 FERRY_MIGRATION_ID=$id FERRY_CRIU_LOG_LEVEL=3
dump_and_restore level3-no-id FERRY_CRIU_LOG_LEVEL=3
for f in dump restore; do
  grep -q "ferry: log level 3, not 4, for migration $id (FERRY_CRIU_LOG_LEVEL)" "$work/level3/$f.log" ||
    fail "the $f did not take level 3: $(grep -n ferry "$work/level3/$f.log" | head -n 3)"
  at4=$(wc -l <"$work/no-daemon/$f.log")
  at3=$(wc -l <"$work/level3/$f.log")
  [ "$((at3 * 3))" -lt "$((at4 * 2))" ] || fail "the $f at level 3 wrote $at3 lines, at 4 $at4"
  ! grep -q "ferry: log level" "$work/level3-no-id/$f.log" ||
    fail "the $f outside a migration changed its log level"
  log "   $f: $at3 lines at level 3, $at4 at 4"
done
log "plugin: all cases passed"
