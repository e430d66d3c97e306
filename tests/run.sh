#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test
# (unit tests, then the integration tests on real CRIU and userfaultfd).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# --bench: matplotlib too, for the test of migrator bench's plots.
"$repo/examples/setup.sh" --bench
"$repo/examples/build.sh"
meson test -C "$repo/build" --print-errorlogs "$@"
