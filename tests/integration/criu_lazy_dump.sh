#!/usr/bin/env bash
# CRIU's --lazy-pagemap-only (examples/criu-patches/0004) on the real CRIU:
# the same workload is lazily dumped twice, once as stock CRIU does it (every
# lazy page parked in pipes) and once recording only the pagemap.
#  - Both pagemaps mark the workload's 64 MiB lazy.
#  - The pagemap-only dump holds no pipes for them (stock: one per few MiB).
#  - Its page server refuses a GET at once with a clear error instead of
#    blocking on an empty pipe, and the failed dump leaves the workload
#    running: nothing is lost.
#  - Without --lazy-pages the option is refused.
#  - A thread parked with a page-aligned stack pointer leaves the rest of the
#    task lazy (examples/criu-patches/0010: stock CRIU marked nothing lazy).
# Nothing here needs the testbed: CRIU runs on this machine directly.
source "$(dirname "$0")/lib.sh"

criu --lazy-pagemap-only --version >/dev/null 2>&1 ||
  fail "this CRIU lacks --lazy-pagemap-only: examples/setup.sh installs the patched one"

port=$((28000 + $$ % 1000))

# lazy_dump NAME PID [extra criu options]: starts the lazy dump in the
# background and waits (bounded) until its page server listens. Sets
# criu_pid (CRIU's own) and dir.
lazy_dump() {
  local name=$1 pid=$2
  shift 2
  dir="$work/$name"
  mkdir -p "$dir"
  mkfifo "$dir/status"
  # CRIU's output goes to a file: a CRIU left behind must not hold the
  # test's stdout (meson waits for every holder).
  timeout -s KILL 120 criu dump -t "$pid" -D "$dir" --lazy-pages "$@" --address 127.0.0.1 --port "$port" \
    --status-fd 9 -o dump.log -v4 9>"$dir/status" >"$dir/criu.out" 2>&1 &
  guard=$!
  local_pids+=("$guard")
  # criu opens the fifo for writing; one byte arrives when it listens.
  timeout 60 head -c1 "$dir/status" >/dev/null || fail "$name: CRIU's page server did not listen within 60 s"
  read -r criu_pid _ <"/proc/$guard/task/$guard/children" || true
  [ -n "$criu_pid" ] || fail "$name: cannot find CRIU's pid"
  # Killing timeout does not kill CRIU: the clean-up kills it by its pid.
  local_pids+=("$criu_pid")
}

lazy_pages_in_log() { sed -n 's/.*Pagemap generated: [0-9]* pages (\([0-9]*\) lazy).*/\1/p' "$1" | awk '{s+=$1} END {print s+0}'; }
comm_of() { cat "/proc/$1/comm" 2>/dev/null || echo gone; }
# What a failure needs from CRIU's log: the options it took, each VMA it
# scanned and what it made of it, and any error.
log_excerpt() {
  echo "CRIU's log $1 says:"
  grep -E "Pagemap generated|filling VMA|Dumping pages|lazy|Error|Warn|PAGEMAP_SCAN" "$1" 2>/dev/null | head -n 60
}
pipes_of() { find "/proc/$1/fd" -lname 'pipe:*' 2>/dev/null | wc -l; }

# CLOSE (0x1023) or GET (7) to CRIU's page server; prints its answer's
# length, or "closed" if it ended the session without one. Bounded.
ps_request() {
  timeout 30 python3 - "$port" "$@" <<'PY'
import socket, struct, sys
port, cmd = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port), timeout=20)
if cmd == "close":
    s.sendall(struct.pack("<IIQQ", 0x1023, 0, 0, 0))
else:
    vaddr = int(sys.argv[3], 16)
    s.sendall(struct.pack("<IIQQ", 7, 1, vaddr, 1))  # GET 1 page of virtual pid 1
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if cmd == "close" and len(data) >= 4:
            break
except socket.timeout:
    print("timeout")
    sys.exit(0)
print(len(data) if data else "closed")
PY
}

log "1. stock lazy dump: lazy pages parked in pipes"
start_local "$work/parked.out"
lazy_dump parked "$pid"
parked_pipes=$(pipes_of "$criu_pid")
[ "$(ps_request close)" = 4 ] || fail "stock CRIU did not answer CLOSE"
wait "$guard" || fail "the stock lazy dump failed: $(tail -n 5 "$dir/dump.log")"
parked_lazy=$(lazy_pages_in_log "$dir/dump.log")
log "stock: $parked_lazy lazy pages, $parked_pipes pipes held while serving"

log "2. --lazy-pagemap-only"
out="$work/pagemap.out"
start_local "$out"
region=""
while read -r range _; do
  if (((0x${range#*-}) - (0x${range%-*}) >= 64 * 1048576)); then region=${range%-*} && break; fi
done <"/proc/$pid/maps"
[ -n "$region" ] || fail "the workload's 64 MiB region is not in its maps"
lazy_dump pagemap "$pid" --lazy-pagemap-only
only_pipes=$(pipes_of "$criu_pid")
only_lazy=$(lazy_pages_in_log "$dir/dump.log")
log "pagemap only: $only_lazy lazy pages, $only_pipes pipes held while serving"
[ "$parked_lazy" -ge 16384 ] || fail "the stock dump marked only $parked_lazy pages lazy;
$(log_excerpt "$work/parked/dump.log")"
[ "$only_lazy" -ge 16384 ] || fail "the pagemap-only dump marked only $only_lazy pages lazy (workload $pid: $(comm_of "$pid"), CRIU $criu_pid: $(comm_of "$criu_pid")); $(log_excerpt "$dir/dump.log")"
[ "$only_lazy" -le $((parked_lazy + 64)) ] && [ "$parked_lazy" -le $((only_lazy + 64)) ] ||
  fail "the two pagemaps disagree: $parked_lazy and $only_lazy lazy pages"
[ $((parked_pipes - only_pipes)) -ge 8 ] ||
  fail "pagemap-only CRIU still holds $only_pipes pipes (stock: $parked_pipes): the pages are parked"
grep -q "Dumping pages" "$dir/dump.log" || fail "no page dump in the log"

# A GET has nothing to serve: CRIU must say so and end, not block.
answer=$(ps_request get "$region")
[ "$answer" = closed ] || fail "a GET to the pagemap-only page server got '$answer', not a refusal"
wait "$guard" && fail "the dump reported success after a refused GET"
grep -q "Lazy pages were not copied (--lazy-pagemap-only)" "$dir/dump.log" ||
  fail "CRIU's log does not say why the GET failed: $(tail -n 5 "$dir/dump.log")"
# The failed dump resumed the workload, memory intact.
mark=$(lines "$out")
kill -USR1 "$pid"
wait_for "$out" "verify ok parent pages=16384" 60 "$mark"

log "3. the option without --lazy-pages is refused"
if criu dump -t "$pid" -D "$work" --lazy-pagemap-only -o refused.log >/dev/null 2>&1; then
  fail "criu dump took --lazy-pagemap-only without --lazy-pages"
fi
grep -q "only makes sense with --lazy-pages" "$work/refused.log" || fail "the refusal does not say why"
running "$pid" || fail "the refused dump disturbed the workload"

log "4. a thread parked with a page-aligned stack pointer"
start_local "$work/aligned.out" --park-aligned-sp
lazy_dump aligned "$pid"
aligned_lazy=$(lazy_pages_in_log "$dir/dump.log")
log "aligned stack pointer: $aligned_lazy lazy pages"
[ "$(ps_request close)" = 4 ] || fail "CRIU did not answer CLOSE"
wait "$guard" || fail "the lazy dump failed: $(tail -n 5 "$dir/dump.log")"
[ "$aligned_lazy" -ge 16384 ] ||
  fail "with a page-aligned stack pointer the dump marked only $aligned_lazy pages lazy; $(log_excerpt "$dir/dump.log")"
log "PASS"
