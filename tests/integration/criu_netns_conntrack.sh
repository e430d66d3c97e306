#!/usr/bin/env bash
# CRIU's conntrack dump of a network namespace (examples/criu-patches/0011),
# on the real CRIU: a 64 MiB memload in its own network and PID namespaces
# is dumped twice (--leave-running, so it runs on).
#  1. The namespace tracks nothing: CRIU says so and walks no conntrack
#     table; no conntrack image is written.
#  2. A conntrack rule in the namespace and one TCP connection over its
#     loopback: the namespace tracks it, CRIU dumps the table as before, and
#     the connection is in the image.
# The workload verifies its memory after both dumps; it owns no inet socket,
# so neither dump lists the namespace's inet sockets (criu-patches/0016).
#  3. A process that owns a listening socket, both ends of a TCP connection
#     and a UDP socket, in a namespace of its own: CRIU lists the inet
#     sockets on first need, dumps the connection (--tcp-established), and
#     the process goes on talking over it.
# Nothing here needs the testbed: CRIU runs on this machine directly.
source "$(dirname "$0")/lib.sh"

command -v iptables >/dev/null || fail "iptables is missing: examples/setup.sh installs it"
out="$work/memload.out"
start_local "$out" --net
in_ns() { nsenter -t "$pid" -n "$@"; }
in_ns ip link set lo up

# dump NAME: a bounded full dump that leaves the workload running.
dump() {
  dir="$work/$1"
  mkdir -p "$dir"
  timeout -s KILL 60 criu dump -t "$pid" -D "$dir" --leave-running -o dump.log -v4 >/dev/null 2>&1 ||
    fail "$1: the dump failed: $(grep -E 'Error' "$dir/dump.log" | head -n 5)"
}
ct_image_bytes() { cat "$dir"/netns-ct-*.img 2>/dev/null | wc -c; }

log "1. a namespace that tracks nothing"
[ "$(in_ns cat /proc/sys/net/netfilter/nf_conntrack_count)" = 0 ] ||
  fail "the fresh namespace already tracks connections"
dump untracked
grep -q "No connection tracked in the namespace: no conntrack dump" "$dir/dump.log" ||
  fail "CRIU walked the conntrack table of a namespace that tracks nothing: $(grep -n 'conntrack\|Dumping netns' "$dir/dump.log" | head)"
[ "$(ct_image_bytes)" = 0 ] || fail "a conntrack image was written for a namespace that tracks nothing"
# no_inet_walk: the dump did not list inet sockets for a tree that owns none.
no_inet_walk() {
  grep -q "Collecting unix sockets\|Collect netlink sock\|Switching to .* for collecting sockets" "$dir/dump.log" ||
    fail "$1: the dump log shows no socket collection at all"
  grep -E "inet sockets of netns|collect procedure family AF_INET" "$dir/dump.log" &&
    fail "$1: CRIU listed inet sockets for a tree that owns none"
  return 0
}
no_inet_walk untracked

log "2. one tracked connection"
in_ns iptables -A INPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT
# One connection to a listener on the namespace's loopback, closed at once:
# its conntrack entry lingers (TIME_WAIT) long after.
timeout 20 nsenter -t "$pid" -n python3 - <<'PY'
import socket
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
c = socket.create_connection(srv.getsockname(), timeout=5)
s, _ = srv.accept()
c.sendall(b"x")
assert s.recv(1) == b"x"
for k in (c, s, srv):
    k.close()
PY
tracked=$(in_ns cat /proc/sys/net/netfilter/nf_conntrack_count)
[ "$tracked" -gt 0 ] || fail "the connection was not tracked (nf_conntrack_count $tracked)"
dump tracked
grep -q "No connection tracked" "$dir/dump.log" && fail "CRIU skipped the conntrack dump with $tracked tracked"
bytes=$(ct_image_bytes)
[ "$bytes" -gt 0 ] || fail "no conntrack entry in the images with $tracked tracked"
log "tracked: $tracked connection(s), $bytes bytes of conntrack image"
no_inet_walk tracked

mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"

log "3. a process that owns inet sockets"
talker_out="$work/talker.out"
setsid unshare --net --fork setsid python3 -u - >"$talker_out" 2>&1 <<'PY' &
import socket, subprocess, time
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
c = socket.create_connection(srv.getsockname(), timeout=5)
s, _ = srv.accept()
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.bind(("::1", 0))
for n in range(1, 6000):  # bounded: 5 minutes at most
    c.sendall(b"ping")
    assert s.recv(4) == b"ping"
    print(f"round {n}", flush=True)
    time.sleep(0.05)
PY
local_pids+=("$!")
wait_for "$talker_out" "round 1" 30
read -r talker _ <"/proc/$!/task/$!/children" || true
[ -n "$talker" ] || fail "cannot find the talker's pid"
local_pids+=("$talker")
dir="$work/inet"
mkdir -p "$dir"
timeout -s KILL 60 criu dump -t "$talker" -D "$dir" --leave-running --tcp-established -o dump.log -v4 >/dev/null 2>&1 ||
  fail "inet: the dump failed: $(grep -E 'Error' "$dir/dump.log" | head -n 5)"
grep -q "Collecting inet sockets of netns .* on first need" "$dir/dump.log" ||
  fail "inet: CRIU did not list the inet sockets when it met the first one"
ls "$dir"/tcp-stream-*.img >/dev/null 2>&1 || fail "inet: the TCP connection is not in the images"
mark=$(lines "$talker_out")
wait_for "$talker_out" "round" 30 "$mark"
log "PASS"
