#!/usr/bin/env bash
# Ferry between hosts that do not trust the network (issue: deployable).
# Every host has a certificate from the testbed's cluster CA. Shown here:
#   - a migrator whose certificate comes from another CA is refused before
#     anything is frozen, with an error that names the authentication;
#   - page data crosses the veth encrypted: a capture of a tcp migration holds
#     none of the workload's known pattern (and, as a control, a capture of
#     an --insecure-plaintext-pages migration does);
#   - an authenticated host that is not part of a migration (host c) asks the
#     source for its pages and is refused;
#   - raw clients (a plaintext control frame, garbage, a replay of a captured
#     handshake) get no control frame back, and a storm of 1,000 garbage,
#     half-open and idle connections leaves the daemon serving a normal
#     migration, with bounded descriptors and memory.
source "$(dirname "$0")/lib.sh"
probe="$repo/tests/integration/peer_probe.py"
state_dir=/tmp/ferry-testbed/$FERRY_TESTBED
capture_pid=""

test_cleanup() {
  [ -z "$capture_pid" ] || kill "$capture_pid" 2>/dev/null || true
}

"$testbed" up --client >&2
a_ip=$("$testbed" ip a)
b_ip=$("$testbed" ip b)

# capture_start FILE: records host a's traffic on the bridge (bounded: 300 s).
capture_start() {
  ip netns exec "$FERRY_TESTBED-sw" timeout 300 tcpdump -i v-a -s 0 -B 16384 -U -w "$1" tcp 2>"$1.log" &
  capture_pid=$!
  wait_for "$1.log" "listening on" 10
}
capture_stop() {
  kill -INT "$capture_pid" 2>/dev/null || true
  wait "$capture_pid" 2>/dev/null || true
  capture_pid=""
}

# --- another CA: refused before the freeze --------------------------------
pid=$(start_workload a outsider --mib 32 --child-mib 0 --threads 2)
"$FERRY_BUILD/migrator/migrator" credentials init --credentials "$work/foreign-ca" >/dev/null
"$FERRY_BUILD/migrator/migrator" credentials issue a --address "$a_ip" \
  --credentials "$work/foreign-ca" --out "$work/foreign-a" >/dev/null
log "case: a migrator with a certificate from another CA"
if on a migrator migrate --credentials "$work/foreign-a" --pid "$pid" --to "$(addr b)" --json \
  >"$work/foreign.json" 2>"$work/foreign.err"; then
  fail "a migrator from another CA was let in"
fi
cat "$work/foreign.json" >&2
grep -q "TLS authentication of $b_ip" "$work/foreign.json" || fail "the error does not name the authentication failure"
[ "$(json "$work/foreign.json" source_running)" = true ] || fail "the migrator says the source is not running"
awk -v d="$(json "$work/foreign.json" downtime_ms)" 'BEGIN { exit !(d == 0) }' || fail "the workload was frozen"
grep -q "TLS" "$state_dir/b/pagesrv.log" || fail "host b logged nothing about the refused peer"
verify_workload "$pid" "$work/outsider.out" 8192

# --- plaintext pages, the capture's control ------------------------------
log "case: --insecure-plaintext-pages, captured"
capture_start "$work/plain.pcap"
on a migrator migrate --pid "$pid" --to "$(addr b)" --insecure-plaintext-pages --json >"$work/plain.json" ||
  { cat "$work/plain.json"; fail "the plaintext-pages migration failed"; }
capture_stop
[ "$(json "$work/plain.json" ok)" = true ] || fail "the plaintext-pages migration is not ok"
python3 "$probe" find-pattern "$work/plain.pcap" --pages 8192 >"$work/plain-find.json"
cat "$work/plain-find.json" >&2
[ "$(json "$work/plain-find.json" found)" -ge 16 ] ||
  fail "plaintext pages are not visible in the capture: the detector cannot be trusted"
plain_dest=$(json "$work/plain.json" destination_pid)
verify_workload "$plain_dest" "$work/outsider.out" 8192
kill -KILL "$plain_dest"
wait_gone "$plain_dest" 10

# Background pulls one page at a time on b: the post-copy lasts seconds, a
# window in which to ask for the pages.
"$testbed" stop b
FERRY_LAZY_PAGES_ARGS="--background-depth 1 --background-chunk 1" "$testbed" start b

# --- encrypted pages; a bystander asks for them ---------------------------
pid=$(start_workload a secret --mib 256 --child-mib 0 --threads 2)
log "case: a tcp migration, captured, while host c asks for its pages"
capture_start "$work/tls.pcap"
timeout 300 "$testbed" exec a migrator migrate --pid "$pid" --to "$(addr b)" --json >"$work/tls.json" &
migrator=$!
# The migration's id: the lazy-pages of its incoming session on b says it serves.
id=""
for _ in $(seq 1 600); do
  id=$(grep -l "lazy pages from" "$state_dir"/b/incoming/*/lazy-pages.log 2>/dev/null |
    grep -v "$(json "$work/plain.json" migration_id)" | head -n 1 | xargs -r dirname | xargs -r basename) || true
  [ -n "$id" ] && break
  sleep 0.05
done
[ -n "$id" ] || fail "no incoming migration is in post-copy on b"
"$testbed" exec c python3 "$probe" page-channel "$(addr a)" "$id" \
  --credentials "$state_dir/c/credentials" >"$work/bystander.json"
cat "$work/bystander.json" >&2
[ "$(json "$work/bystander.json" accepted)" = false ] || fail "host c was given the migration's pages"
grep -q "is not part of migration $id" "$work/bystander.json" || fail "the refusal does not say why"
wait "$migrator" || { cat "$work/tls.json"; fail "the encrypted migration failed"; }
capture_stop
[ "$(json "$work/tls.json" ok)" = true ] || fail "the encrypted migration is not ok"
python3 "$probe" find-pattern "$work/tls.pcap" --pages 65536 >"$work/tls-find.json"
cat "$work/tls-find.json" >&2
[ "$(json "$work/tls-find.json" capture_bytes)" -gt $((200 << 20)) ] || fail "the capture missed the migration"
[ "$(json "$work/tls-find.json" found)" = 0 ] || fail "the workload's pages crossed the network in the clear"
grep -q "refused a page channel from c" "$state_dir/a/pagesrv.log" || fail "host a did not log the refusal"
verify_workload "$(json "$work/tls.json" destination_pid)" "$work/secret.out" 65536

# --- an authenticated peer sends images with hostile names -----------------
for name in "../../../../tmp/ferry-hostile-$$" ".hidden" "lazy-pages.socket"; do
  log "case: an image named '$name'"
  on c python3 "$probe" hostile-images "$(addr b)" "$name" \
    --credentials "$state_dir/c/credentials" >"$work/hostile.json"
  cat "$work/hostile.json" >&2
  [ "$(json "$work/hostile.json" refused)" = true ] || fail "an image named '$name' was accepted"
  grep -q "refusing image file name" "$work/hostile.json" || fail "the refusal does not say why"
done
[ ! -e "/tmp/ferry-hostile-$$" ] || fail "a hostile image name wrote outside the session directory"

# --- raw clients ----------------------------------------------------------
b_pid=$(cat "$state_dir/b/pagesrv.pid")
for probe_case in plaintext garbage; do
  log "case: $probe_case to b's daemon"
  on c python3 "$probe" "$probe_case" "$(addr b)" >"$work/$probe_case.json"
  cat "$work/$probe_case.json" >&2
  [ "$(json "$work/$probe_case.json" control_frame)" = false ] || fail "$probe_case got a control frame back"
done
log "case: replay of the migrator's captured connection to b"
on c python3 "$probe" replay "$(addr b)" "$work/tls.pcap" "$a_ip" >"$work/replay.json"
cat "$work/replay.json" >&2
[ "$(json "$work/replay.json" control_frame)" = false ] || fail "a replayed handshake got a control frame back"
kill -0 "$b_pid" || fail "b's daemon died"

log "case: a storm of 1000 connections"
fds_before=$(ls "/proc/$b_pid/fd" | wc -l)
rss_before=$(awk '/VmRSS/ {print $2}' "/proc/$b_pid/status")
on c python3 "$probe" storm "$(addr b)" 1000 >"$work/storm.json"
cat "$work/storm.json" >&2
# Half-open handshakes end at the daemon's 5 s handshake deadline.
for _ in $(seq 1 200); do
  [ "$(ls "/proc/$b_pid/fd" | wc -l)" -le $((fds_before + 4)) ] && break
  sleep 0.1
done
fds_after=$(ls "/proc/$b_pid/fd" | wc -l)
rss_after=$(awk '/VmRSS/ {print $2}' "/proc/$b_pid/status")
log "b's daemon: fds $fds_before -> $fds_after, RSS ${rss_before} -> ${rss_after} KiB"
kill -0 "$b_pid" || fail "b's daemon died in the storm"
[ "$fds_after" -le $((fds_before + 4)) ] || fail "descriptors leaked: $fds_before -> $fds_after"
[ "$rss_after" -le $((rss_before + 65536)) ] || fail "memory grew by more than 64 MiB: $rss_before -> $rss_after KiB"
pid=$(start_workload a after --mib 32 --child-mib 0 --threads 2)
on a migrator migrate --pid "$pid" --to "$(addr b)" --json >"$work/after.json" ||
  { cat "$work/after.json"; fail "no migration after the storm"; }
verify_workload "$(json "$work/after.json" destination_pid)" "$work/after.out" 8192

# --- what the daemons' /metrics say of all this ----------------------------
metric() { # metric HOST REGEX: the value of the first sample matching REGEX
  on "$1" python3 -c '
import re, sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9140/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if not line.startswith("#") and re.match(sys.argv[1], line):
        print(float(line.rsplit(" ", 1)[1])); break
else:
    print(-1)' "$2"
}
log "case: /metrics"
done_b=$(metric b 'ferry_migrations_total\{outcome="finished",role="destination"\}')
faults_b=$(metric b 'ferry_fault_latency_seconds_count')
served_a=$(metric a 'ferry_pages_served_total')
log "b finished $done_b incoming migrations, $faults_b faults in its histogram; a served $served_a pages"
awk -v v="$done_b" 'BEGIN { exit !(v >= 2) }' || fail "b's metrics count $done_b finished incoming migrations since its restart, not 2"
awk -v v="$faults_b" 'BEGIN { exit !(v > 0) }' || fail "no fault latencies in b's metrics"
awk -v v="$served_a" 'BEGIN { exit !(v >= 65536) }' || fail "a's metrics count $served_a pages served"
log "OK"
