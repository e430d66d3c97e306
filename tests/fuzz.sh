#!/usr/bin/env bash
# The sanitizer suite: builds Ferry once more with clang-14, AddressSanitizer,
# UndefinedBehaviorSanitizer and libFuzzer's instrumentation (in build-san/),
# runs the unit tests under the sanitizers, then each fuzzer
# (tests/fuzz/fuzz_*.cpp) for FERRY_FUZZ_SECONDS (default 20) from its corpus
# in tests/fuzz/corpus/NAME. Any sanitizer report, crash, leak or hang
# (an input that takes over 10 s) fails it; a crashing input is kept in
# build-san/fuzz-work/NAME/ for the log to name.
#   tests/fuzz.sh [NAME...]        (default: every target)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
san=${FERRY_SAN_BUILD:-$repo/build-san}
secs=${FERRY_FUZZ_SECONDS:-20}
# A unity build: fresh, as in CI, it compiles in about 3 minutes on 2 cores
# instead of 4 or more (file-local names that clash fail it, which keeps
# them apart in the sources too).
if [ ! -f "$san/build.ninja" ]; then
  CC=clang-14 CXX=clang++-14 meson setup "$san" "$repo" -Dfuzzers=true \
    -Db_sanitize=address,undefined -Db_lundef=false -Dunity=on >/dev/null
fi
# What the sanitizer suite runs: the unit tests (and memload, which they
# start) and the fuzzers; not the daemons.
# Quiet unless it fails: then the compiler's own words.
ninja -C "$san" tests/unit-tests examples/memload \
  $(cd "$san" && ninja -t targets all | grep -o '^tests/fuzz/fuzz-[a-z-]*:' | tr -d : | sort -u) \
  >"$san/build.log" 2>&1 || {
  grep -B2 -A12 -m3 "error" "$san/build.log" || tail -n 40 "$san/build.log"
  echo "the sanitizer build failed"
  exit 1
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== unit tests under ASan and UBSan"
FERRY_MEMLOAD="$san/examples/memload" "$san/tests/unit-tests"

targets=("$@")
if [ ${#targets[@]} = 0 ]; then
  for f in "$san"/tests/fuzz/fuzz-*; do
    [ -f "$f" ] && [ -x "$f" ] && targets+=("${f##*/fuzz-}")
  done
fi
for t in "${targets[@]}"; do
  work="$san/fuzz-work/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus"
  echo "== fuzz-$t for ${secs}s"
  # New inputs go to the scratch corpus; the repo's is only read.
  (cd "$work" && "$san/tests/fuzz/fuzz-$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work/corpus" "$repo/tests/fuzz/corpus/$t" >"$work/log" 2>&1) || {
    tail -n 40 "$work/log"
    echo "fuzz-$t FAILED (inputs in $work)"
    exit 1
  }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/log" | tr '\n' ' '
  echo
done
echo "sanitizers and fuzzers: OK"
