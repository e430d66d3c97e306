#!/usr/bin/env bash
# The Redis example at a reduced size (64 MiB of keys) on real engines:
# a Redis container on host a, loaded with known keys, migrated to b with
# Ferry while a client on host c reads and increments. Fails unless every
# key is intact, no reply carried a wrong value, no acknowledged write was
# lost, and the container runs on b with the source gone.
# FERRY_TEST_ENGINE picks the engine: podman (default) or docker.
# Podman: the container has its own address on the container network and
# the client's one connection must move with it. Docker: the container
# shares its host's network and moves with --tcp-close, the client failing
# over (the --tcp-close path stays tested; live-network-docker moves a
# docker container's connections).
source "$(dirname "$0")/lib.sh"
engine=${FERRY_TEST_ENGINE:-podman}
network=()
[ "$engine" = docker ] && network=(--host-network)
# redis_lab.py brings up and tears down this test's own testbed (lib.sh's
# names); lib.sh's clean-up takes down whatever a failure leaves.
python3 "$repo/examples/redis/redis_lab.py" test --engine "$engine" --mib 64 "${network[@]}" \
  --testbed "$FERRY_TESTBED" --net "$FERRY_TESTBED_NET.0" >/dev/null
log "PASS"
