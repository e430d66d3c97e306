#!/usr/bin/env bash
# The Redis example at a reduced size (64 MiB of keys) on real engines:
# a Redis container on host a, loaded with known keys, migrated to b with
# Ferry while a client on host c reads and increments. Fails unless every
# key is intact, no reply carried a wrong value, no acknowledged write was
# lost, and the container runs on b with the source gone.
# FERRY_TEST_ENGINE picks the engine: podman (default) or docker.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export FERRY_BUILD=${FERRY_BUILD:-$repo/build}
name=fr$$
cleanup() { FERRY_TESTBED=$name "$repo/examples/testbed.sh" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
python3 "$repo/examples/redis/redis_lab.py" test --engine "${FERRY_TEST_ENGINE:-podman}" --mib 64 \
  --testbed "$name" --net "10.$((100 + $$ % 100)).$((($$ / 100) % 250)).0" >/dev/null
