#!/usr/bin/env bash
# A container's network moves with it (issue 18): a TCP echo server in a
# container with its own address on the testbed's container network
# ("ferry", a macvlan segment hosts a, b and c share), and a client on host
# c holding ONE connection with a request every 5 ms throughout.
#   1. Migrated a -> b: the same connection goes on (no reconnect, no broken
#      connection, every request answered with its own line), the copy on
#      b has the source's address and MAC, a new connection from c reaches
#      it there, and the source container is gone.
#   2. A migration stopped at the last moment before the commit (the copy
#      is restored on b, with the same address, waiting to resume): the
#      source keeps its address and its connection, which goes on, and
#      nothing is left on b.
# FERRY_TEST_ENGINE picks the engine: podman (default) or docker.
. "$(dirname "$0")/lib.sh"

engine=${FERRY_TEST_ENGINE:-podman}
ctr() { local h=$1; shift; on "$h" "$engine" "$@"; }
state() {
  local s
  s=$(ctr "$1" inspect "$2" --format '{{.State.Status}}' 2>/dev/null) && echo "$s" || echo absent
}

"$testbed" up --engines --client >&2
image=$(engine_image "$engine")
cnet=$("$testbed" container-net)
cnet=${cnet%.0/24}
client=$FERRY_BUILD/examples/ferry-echo-client

# echo_server HOST NAME IP: a container on the ferry network whose perl
# echoes every line on port 7000 (a restore interrupts its blocking calls:
# EINTR is retried).
echo_server() {
  ctr "$1" run -d --name "$2" --network ferry --ip "$3" "$image" sh -c \
    "perl -MIO::Socket::INET -e '\$s = IO::Socket::INET->new(Listen => 5, LocalPort => 7000, ReuseAddr => 1) or die; while (1) { my \$c = \$s->accept or next; while (1) { my \$l = <\$c>; if (!defined \$l) { last if !\$!{EINTR}; next } print \$c \$l } }'" >/dev/null
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
# mac_in HOST NAME: the MAC of eth0 in the container's network namespace.
mac_in() {
  nsenter -t "$(ctr "$1" inspect "$2" --format '{{.State.Pid}}')" -n cat /sys/class/net/eth0/address
}
addresses_in() {
  nsenter -t "$(ctr "$1" inspect "$2" --format '{{.State.Pid}}')" -n ip -4 -o addr show dev eth0
}

log "1. migrate a $engine echo server on the container network while a client on c holds one connection"
ip1=$cnet.70
echo_server a e1 "$ip1"
mac_a=$(mac_in a e1)
start_client e1 "$ip1"
on a migrator migrate --engine "$engine" --container e1 --to "$(addr b)" --json >"$work/e1.json" 2>"$work/e1.err" ||
  fail "migration failed: $(cat "$work/e1.json" "$work/e1.err")"
[ "$(json "$work/e1.json" ok)" = true ] || fail "not ok"
case "$(json "$work/e1.json" network)" in
  "moves with its connections: eth0 $ip1/24"*) ;;
  *) fail "the network did not move: $(json "$work/e1.json" network)" ;;
esac
[ "$(state a e1)" = absent ] || fail "e1 is still on a: $(state a e1)"
[ "$(state b e1)" = running ] || fail "e1 is not running on b: $(state b e1)"
# The client goes on for a second with the container on b.
sleep 1
stop_client e1
gap=$(json "$work/e1.client.json" longest_gap_ms)
last=$(awk 'END { print $1 }' "$work/e1.replies")
gap_end=$(python3 -c "import json; j = json.load(open('$work/e1.client.json')); print(int((j['longest_gap_start_ms'] + j['longest_gap_ms']) * 1e6))")
[ "$last" -gt $((gap_end + 500000000)) ] ||
  fail "the connection did not go on after the move (last reply at $last ns, the gap ended at $gap_end ns)"
[ "$(mac_in b e1)" = "$mac_a" ] || fail "the copy's MAC is $(mac_in b e1), the source's was $mac_a"
addresses_in b e1 | grep -q " $ip1/24 " || fail "the copy has no $ip1: $(addresses_in b e1)"
on c "$client" --addr "$ip1:7000" --max-requests 20 --seconds 5 --no-reconnect >"$work/e1.new.json" ||
  fail "a new connection to $ip1 failed"
[ "$(json "$work/e1.new.json" replies)" = 20 ] || fail "a new connection got $(json "$work/e1.new.json" replies) of 20 replies"
log "   container downtime $(json "$work/e1.json" downtime_ms) ms, the client's longest gap $gap ms," \
  "$(json "$work/e1.json" held_packets) packets held at the source and delivered on b"

log "2. a migration stopped right before the commit: the source keeps its address and its connection"
ip2=$cnet.71
echo_server a e2 "$ip2"
start_client e2 "$ip2"
if FERRY_FAULT=interrupt-before-commit on a migrator migrate --engine "$engine" --container e2 --to "$(addr b)" \
  --json >"$work/e2.json" 2>"$work/e2.err"; then
  fail "the interrupted migration succeeded"
fi
[ "$(json "$work/e2.json" ok)" = false ] || fail "the interrupted migration says ok"
[ "$(json "$work/e2.json" source_running)" = true ] || fail "the source is not running: $(cat "$work/e2.json")"
[ "$(state a e2)" = running ] || fail "e2 is not running on a: $(state a e2)"
for _ in $(seq 1 100); do [ "$(state b e2)" = absent ] && break; sleep 0.2; done
[ "$(state b e2)" = absent ] || fail "the copy of e2 is still on b: $(state b e2)"
sleep 1
stop_client e2
on c "$client" --addr "$ip2:7000" --max-requests 20 --seconds 5 --no-reconnect >"$work/e2.new.json" ||
  fail "a new connection to $ip2 on a failed"
log "   the connection held; its longest gap $(json "$work/e2.client.json" longest_gap_ms) ms"
log "PASS"
