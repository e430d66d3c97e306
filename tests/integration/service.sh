#!/usr/bin/env bash
# pagesrv as a systemd service: the unit passes `systemd-analyze verify`
# (pointed at this build's binary), and under systemd (JOURNAL_STREAM naming
# its stderr) the daemon's lines carry syslog priorities for the journal.
source "$(dirname "$0")/lib.sh"

unit="$work/ferry-pagesrv.service"
sed "s|/usr/local/bin/pagesrv|$FERRY_BUILD/pagesrv/pagesrv|" "$repo/examples/systemd/ferry-pagesrv.service" >"$unit"
log "case: systemd-analyze verify"
systemd-analyze verify "$unit" >"$work/verify.out" 2>&1 || { cat "$work/verify.out"; fail "the unit does not verify"; }
grep -q "^KillMode=process" "$unit" || fail "stopping the service would kill migrated workloads"

log "case: log lines for the journal"
python3 - "$FERRY_BUILD/pagesrv/pagesrv" "$work/journal.err" <<'PY'
import os, subprocess, sys
daemon, path = sys.argv[1], sys.argv[2]
with open(path, "w") as f:
    st = os.fstat(f.fileno())
    env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
    subprocess.run([daemon, "--listen", "127.0.0.1:1", "--credentials", "/nonexistent"],
                   stderr=f, env=env, timeout=30)
PY
cat "$work/journal.err" >&2
grep -q '^<3>pagesrv\[[0-9]*\] error: no ca.pem' "$work/journal.err" || fail "no syslog priority for the journal"
"$FERRY_BUILD/pagesrv/pagesrv" --listen 127.0.0.1:1 --credentials /nonexistent 2>"$work/plain.err" || true
grep -q '^[0-9:.]* pagesrv\[[0-9]*\] error: ' "$work/plain.err" || fail "a terminal lost its timestamps"
log "OK"
