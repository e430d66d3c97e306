#!/usr/bin/env bash
# A workload's network moves with it (issue 18): a TCP echo server with its
# own address on the testbed's container network (a macvlan segment hosts
# a, b and c share), and a client on host c holding ONE connection with a
# request every 5 ms throughout.
#   1. Migrated a -> b: the same connection goes on (no reconnect, no broken
#      connection, every request answered with its own line), the copy on
#      b has the source's address and MAC (taken with the host's grace
#      periods expedited, and the knob put back after), a new connection
#      from c reaches it there, and the source is gone.
#   2. A migration stopped at the last moment before the commit (the copy
#      is restored on b, with the same address, waiting to resume): the
#      source keeps its address and its connection, which goes on, nothing
#      is left on b, and no frame from the source's MAC ever came from b.
# FERRY_TEST_ENGINE picks the workload: a podman (default) or docker
# container on the network "ferry", or `tree`: a bare process tree (the
# init of its own PID namespace) in a network namespace of its own, with a
# macvlan link on the host's eth1 and a route; the destination makes that
# namespace anew.
. "$(dirname "$0")/lib.sh"
# This test reads CRIU's debug lines (its call-outs, its mounts): level 4
# for the engine's CRIU too (Ferry's plugin sets it; 3 is the default).
export FERRY_CRIU_LOG_LEVEL=4

engine=${FERRY_TEST_ENGINE:-podman}
ctr() { local h=$1; shift; on "$h" "$engine" "$@"; }
client=$FERRY_BUILD/examples/ferry-echo-client
server_script=$work/echo.pl
# Echoes every line on port 7000 (a restore interrupts its blocking calls:
# EINTR is retried). Its argument names the server.
cat >"$server_script" <<'PERL'
use IO::Socket::INET;
$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7000, ReuseAddr => 1) or die;
while (1) { my $c = $s->accept or next; while (1) { my $l = <$c>; if (!defined $l) { last if !$!{EINTR}; next } print $c $l } }
PERL

# tree_pids NAME: the processes of the process tree NAME, the source's and
# any copy's (their command line names the server).
tree_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" = "perl $server_script $1 " ] && echo "${p#/proc/}"
  done
  return 0
}
test_cleanup() {
  local p
  [ "$engine" = tree ] || return 0
  for p in $(tree_pids e1) $(tree_pids e2) $(tree_pids e3); do kill -9 "$p" 2>/dev/null || true; done
  umount "$work/e1.netns" 2>/dev/null || true
}

if [ "$engine" = tree ]; then
  "$testbed" up --container-net --client >&2
else
  "$testbed" up --engines --client >&2
  image=$(engine_image "$engine")
fi
cnet=$("$testbed" container-net)
cnet=${cnet%.0/24}

# pid_of HOST NAME: the process in whose network namespace NAME runs on
# HOST (empty if none).
pid_of() {
  if [ "$engine" != tree ]; then
    ctr "$1" inspect "$2" --format '{{.State.Pid}}' 2>/dev/null || true
    return 0
  fi
  local src p
  src=$(cat "$work/$2.pid")
  for p in $(tree_pids "$2"); do
    running "$p" || continue
    if [ "$1" = a ] && [ "$p" = "$src" ]; then echo "$p"; fi
    if [ "$1" = b ] && [ "$p" != "$src" ]; then echo "$p"; fi
  done
  return 0
}
state() {
  local s
  if [ "$engine" = tree ]; then
    [ -n "$(pid_of "$1" "$2")" ] && echo running || echo absent
    return 0
  fi
  s=$(ctr "$1" inspect "$2" --format '{{.State.Status}}' 2>/dev/null) && echo "$s" || echo absent
}
# migrate NAME ARGS...: migrates NAME from a to b; the JSON goes to $work/NAME.json.
migrate() {
  local name=$1
  shift
  if [ "$engine" = tree ]; then
    on a migrator migrate --pid "$(cat "$work/$name.pid")" --to "$(addr b)" --json "$@" >"$work/$name.json" 2>"$work/$name.err"
  else
    on a migrator migrate --engine "$engine" --container "$name" --to "$(addr b)" --json "$@" >"$work/$name.json" 2>"$work/$name.err"
  fi
}

# start_tree HOST NAME: the echo server NAME as a process tree on HOST, the
# init of its own PID namespace, in a network namespace of its own with
# nothing but loopback yet; its pid goes to $work/NAME.pid.
start_tree() {
  local launcher pid=""
  # testbed.sh execs its way down to unshare, so $! is unshare's pid. The
  # tree's init leads its own session (CRIU wants the session inside).
  "$testbed" exec "$1" setsid unshare --pid --fork --net setsid perl "$server_script" "$2" </dev/null >"$work/$2.out" 2>&1 &
  launcher=$!
  # Until then the launcher is still the shell of testbed.sh, whose own
  # short-lived children (command substitutions) must not be taken for it.
  for _ in $(seq 1 100); do
    pid=""
    read -r pid _ 2>/dev/null <"/proc/$launcher/task/$launcher/children" || true
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = perl ] && break
    sleep 0.05
  done
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = perl ] || pid=""
  [ -n "$pid" ] || fail "cannot find the pid of the tree $2"
  echo "$pid" >"$work/$2.pid"
}

# migrate_back NAME: migrates NAME from b to a; the JSON goes to $work/NAME.back.json.
migrate_back() {
  if [ "$engine" = tree ]; then
    on b migrator migrate --pid "$(pid_of b "$1")" --to "$(addr a)" --json >"$work/$1.back.json" 2>"$work/$1.back.err"
  else
    on b migrator migrate --engine "$engine" --container "$1" --to "$(addr a)" --json >"$work/$1.back.json" 2>"$work/$1.back.err"
  fi
}

# echo_server HOST NAME IP: the echo server NAME at IP, a container on the
# ferry network, or a process tree whose namespace has a macvlan eth0 on
# the host's eth1 with IP and a route to 10.99.0.0/24 via c.
echo_server() {
  if [ "$engine" = tree ]; then
    local pid
    start_tree "$1" "$2"
    pid=$(cat "$work/$2.pid")
    on "$1" ip link add link eth1 name "mv-$2" type macvlan mode bridge
    on "$1" ip link set "mv-$2" netns "$pid"
    nsenter -t "$pid" -n sh -c "ip link set mv-$2 name eth0 && ip addr add $3/24 dev eth0 &&
      ip link set eth0 up && ip link set lo up && ip route add 10.99.0.0/24 via $cnet.253" ||
      fail "cannot configure the network of the tree $2"
  else
    ctr "$1" run -d --name "$2" --network ferry --ip "$3" "$image" sh -c \
      "perl -e '$(cat "$server_script")' $2" >/dev/null
  fi
  for _ in $(seq 1 100); do
    on c "$client" --addr "$3:7000" --max-requests 1 --seconds 2 --no-reconnect >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "the echo server $2 at $3 does not answer from c"
}
# start_client NAME IP: one connection, a request every 5 ms, until $work/NAME.stop.
start_client() {
  on c "$client" --addr "$2:7000" --interval-ms 5 --timeout-ms 10000 --seconds 120 --no-reconnect \
    --stop-file "$work/$1.stop" --out "$work/$1.replies" >"$work/$1.client.json" 2>"$work/$1.client.err" &
  echo $! >"$work/$1.client.pid"
  sleep 1
}
# stop_client NAME: ends the client and checks that its one connection held.
stop_client() {
  touch "$work/$1.stop"
  wait "$(cat "$work/$1.client.pid")" || fail "the client of $1 failed: $(cat "$work/$1.client.err")"
  local j=$work/$1.client.json
  [ "$(json "$j" connection_broke)" = false ] || fail "$1's connection broke: $(json "$j" first_error)"
  [ "$(json "$j" reconnects)" = 0 ] || fail "the client of $1 reconnected"
  [ "$(json "$j" wrong_replies)" = 0 ] || fail "$1 answered $(json "$j" wrong_replies) requests wrongly"
  [ "$(json "$j" replies)" = "$(json "$j" requests)" ] ||
    fail "$1 answered $(json "$j" replies) of $(json "$j" requests) requests"
}
# mac_in HOST NAME: the MAC of eth0 in the workload's network namespace.
# (Through netlink: /sys/class/net shows the links of the namespace that
# mounted sysfs, not those of the namespace nsenter entered.)
mac_in() {
  nsenter -t "$(pid_of "$1" "$2")" -n ip -o link show dev eth0 | sed -n 's/.* link\/ether \([0-9a-f:]*\) .*/\1/p'
}
addresses_in() { nsenter -t "$(pid_of "$1" "$2")" -n ip -4 -o addr show dev eth0; }

log "1. migrate a $engine echo server on the container network while a client on c holds one connection"
ip1=$cnet.70
echo_server a e1 "$ip1"
mac_a=$(mac_in a e1)
[ -n "$mac_a" ] || fail "cannot read the MAC of e1 on a"
if [ "$engine" = tree ]; then
  # A name that outlives the tree (as `ip netns add` makes): its moved link
  # must go, or the MAC would stay on the segment twice.
  touch "$work/e1.netns"
  mount --bind "/proc/$(pid_of a e1)/ns/net" "$work/e1.netns"
fi
start_client e1 "$ip1"
# No ARP from b may give e1's address with another MAC than e1's: the copy
# must have the source's MAC before its tasks run (pagesrv's
# finish_taking_macs), or the client sends to the copy's first MAC for a
# second (its ARP entry is locked that long).
ip netns exec "$FERRY_TESTBED-sw" python3 "$repo/tests/integration/mac_watch.py" --link n-b \
  --mac "$mac_a" --arp-ip "$ip1" --stop-file "$work/e1.watch.stop" --ready-file "$work/e1.watch.ready" \
  --seconds 120 >"$work/e1.watch.json" &
watch1_pid=$!
for _ in $(seq 1 100); do [ -e "$work/e1.watch.ready" ] && break; sleep 0.05; done
[ -e "$work/e1.watch.ready" ] || fail "the watch on b's port did not start"
rcu_expedited_before=$(cat /sys/kernel/rcu_expedited)
migrate e1 || fail "migration failed: $(cat "$work/e1.json" "$work/e1.err")"
[ "$(json "$work/e1.json" ok)" = true ] || fail "not ok"
case "$(json "$work/e1.json" network)" in
  "moves with its connections: eth0 $ip1/24"*) ;;
  *) fail "the network did not move: $(json "$work/e1.json" network)" ;;
esac
# An engine's CRIU asked the gate (its action socket, criu-patches/0017)
# at post-restore (the commit gate) only: the bundle names the copy's
# network namespace, which got the source's addresses before CRIU started,
# so the shim dropped setup-namespaces (engine_request.hpp).
if [ "$engine" != tree ]; then
  e1_id=$(json "$work/e1.json" migration_id)
  actions=$(criu_callouts "/tmp/ferry-testbed/$FERRY_TESTBED/b/incoming/$e1_id/restore.log" socket)
  [ "$actions" = "post-restore " ] || fail "CRIU asked the gate at: '$actions' in e1's restore"
  # CRIU joined the namespace the engine set up before the restore: podman
  # names it in the bundle; docker's hook ran ahead of the restore
  # (engines/network_hook.hpp), not inside it at setup-namespaces.
  grep -q "Found id extRootNetNS" "/tmp/ferry-testbed/$FERRY_TESTBED/b/incoming/$e1_id/restore.log" ||
    fail "CRIU did not join a network namespace set up before e1's restore"
fi
[ "$(state a e1)" = absent ] || fail "e1 is still on a: $(state a e1)"
[ "$(state b e1)" = running ] || fail "e1 is not running on b: $(state b e1)"
# The client goes on for a second with the container on b.
sleep 1
touch "$work/e1.watch.stop"
wait "$watch1_pid" || fail "the watch on b's port failed"
[ "$(json "$work/e1.watch.json" foreign_arp)" = 0 ] ||
  fail "b gave e1's address with another MAC than $(json "$work/e1.watch.json" mac) in" \
    "$(json "$work/e1.watch.json" foreign_arp) ARP frames (first: $(json "$work/e1.watch.json" first_foreign_arp))"
stop_client e1
gap=$(json "$work/e1.client.json" longest_gap_ms)
last=$(awk 'END { print $1 }' "$work/e1.replies")
gap_end=$(python3 -c "import json; j = json.load(open('$work/e1.client.json')); print(int((j['longest_gap_start_ms'] + j['longest_gap_ms']) * 1e6))")
[ "$last" -gt $((gap_end + 500000000)) ] ||
  fail "the connection did not go on after the move (last reply at $last ns, the gap ended at $gap_end ns)"
[ "$(mac_in b e1)" = "$mac_a" ] || fail "the copy's MAC is $(mac_in b e1), the source's was $mac_a"
addresses_in b e1 | grep -q " $ip1/24 " || fail "the copy has no $ip1: $(addresses_in b e1)"
# b's daemon made the host's grace periods expedited for the copy's MAC
# change (lib/sys/expedited_rcu.hpp) and put the knob back after it.
if [ "$rcu_expedited_before" = 0 ]; then want_rcu=held; else want_rcu="already expedited on this host"; fi
grep -q "took over .*(expedited grace periods: $want_rcu)" "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log" ||
  fail "b's takeover did not say 'expedited grace periods: $want_rcu': $(grep 'took over' "/tmp/ferry-testbed/$FERRY_TESTBED/b/pagesrv.log" | tail -n 1)"
[ "$(cat /sys/kernel/rcu_expedited)" = "$rcu_expedited_before" ] ||
  fail "/sys/kernel/rcu_expedited is $(cat /sys/kernel/rcu_expedited) after the move, $rcu_expedited_before before"
on c "$client" --addr "$ip1:7000" --max-requests 20 --seconds 5 --no-reconnect >"$work/e1.new.json" ||
  fail "a new connection to $ip1 failed"
[ "$(json "$work/e1.new.json" replies)" = 20 ] || fail "a new connection got $(json "$work/e1.new.json" replies) of 20 replies"
if [ "$engine" = tree ]; then
  routes=$(nsenter -t "$(pid_of b e1)" -n ip -4 route show 10.99.0.0/24)
  case "$routes" in "10.99.0.0/24 via $cnet.253 dev eth0"*) ;; *) fail "the copy lacks the tree's route: '$routes'" ;; esac
  ! nsenter --net="$work/e1.netns" ip link show eth0 >/dev/null 2>&1 ||
    fail "the source's namespace still has its moved eth0"
fi
# Back to a: only the address the workload came with moves, not the one
# b's engine gave the copy on arrival (else each move adds one, and a's
# IPAM may hand an old one out again).
migrate_back e1 || fail "the move back failed: $(cat "$work/e1.back.json" "$work/e1.back.err")"
case "$(json "$work/e1.back.json" network)" in
  "moves with its connections: eth0 $ip1/24 ("*) ;;
  *) fail "the move back took more than $ip1: $(json "$work/e1.back.json" network)" ;;
esac
[ "$engine" = tree ] || [ "$(state a e1)" = running ] || fail "e1 is not running on a after the move back"
on c "$client" --addr "$ip1:7000" --max-requests 20 --seconds 5 --no-reconnect >"$work/e1.back.new.json" ||
  fail "a new connection to $ip1 failed after the move back"
log "   downtime $(json "$work/e1.json" downtime_ms) ms, the client's longest gap $gap ms," \
  "$(json "$work/e1.json" held_packets) packets held at the source and delivered on b"

log "2. a migration stopped right before the commit: the source keeps its address and its connection"
# Far from .70: the IPAM of a gave the copy that came back an address after it.
ip2=$cnet.110
echo_server a e2 "$ip2"
start_client e2 "$ip2"
# Nothing may come from e2's MAC on b's port of the segment's switch: the
# copy takes that MAC before the decision, and one frame from it (IPv6's
# duplicate address detection, say) would send e2's clients to b, where the
# killed copy's kernel resets their connections.
ip netns exec "$FERRY_TESTBED-sw" python3 "$repo/tests/integration/mac_watch.py" --link n-b \
  --mac "$(mac_in a e2)" --stop-file "$work/e2.watch.stop" --ready-file "$work/e2.watch.ready" \
  --seconds 120 >"$work/e2.watch.json" &
watch_pid=$!
for _ in $(seq 1 100); do [ -e "$work/e2.watch.ready" ] && break; sleep 0.05; done
[ -e "$work/e2.watch.ready" ] || fail "the watch on b's port did not start"
if FERRY_FAULT=interrupt-before-commit migrate e2; then
  fail "the interrupted migration succeeded"
fi
[ "$(json "$work/e2.json" ok)" = false ] || fail "the interrupted migration says ok"
[ "$(json "$work/e2.json" source_running)" = true ] || fail "the source is not running: $(cat "$work/e2.json")"
[ "$(state a e2)" = running ] || fail "e2 is not running on a: $(state a e2)"
for _ in $(seq 1 100); do [ "$(state b e2)" = absent ] && break; sleep 0.2; done
[ "$(state b e2)" = absent ] || fail "the copy of e2 is still on b: $(state b e2)"
sleep 1
touch "$work/e2.watch.stop"
wait "$watch_pid" || fail "the watch on b's port failed"
[ "$(json "$work/e2.watch.json" frames)" = 0 ] ||
  fail "b sent $(json "$work/e2.watch.json" frames) frames from e2's MAC before any commit" \
    "(first: $(json "$work/e2.watch.json" first))"
stop_client e2
on c "$client" --addr "$ip2:7000" --max-requests 20 --seconds 5 --no-reconnect >"$work/e2.new.json" ||
  fail "a new connection to $ip2 on a failed"
log "   the connection held; its longest gap $(json "$work/e2.client.json" longest_gap_ms) ms"

if [ "$engine" = tree ]; then
  log "3. a tree whose namespace has a veth (to a host-local bridge) is refused before the freeze"
  start_tree a e3
  pid=$(cat "$work/e3.pid")
  on a ip link add v-e3 type veth peer name eth0 netns "$pid"
  if migrate e3; then fail "a tree with a veth link was migrated"; fi
  case "$(json "$work/e3.json" error)" in
    *"has eth0, a veth link: Ferry moves a process tree's macvlan links only"*) ;;
    *) fail "unclear refusal: $(json "$work/e3.json" error)" ;;
  esac
  running "$pid" || fail "the refused tree does not run"
  [ "$(json "$work/e3.json" downtime_ms)" = 0.0 ] || fail "the refused tree was frozen"
  log "   refused: $(json "$work/e3.json" error)"
fi
log "PASS"
