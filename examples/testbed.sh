#!/usr/bin/env bash
# A testbed on one machine: hosts `a` and `b` (and pool hosts p1..pN) are
# network namespaces joined by a bridge that lives in a namespace of its own
# (NAME-sw), each running its own pagesrv; pool hosts run it as a pool node.
#
#   testbed.sh up [--pool N] [--engines] [--container-net] [--client]
#                               create the hosts and start their daemons
#                               (N pool hosts p1..pN, N <= 8); --client adds
#                               host c, which runs no daemon (a workload's
#                               clients live there); --engines also
#                               gives a and b container engines of their own:
#                               podman (own root, runroot, storage) and a
#                               dockerd (own data root, socket, containerd),
#                               and a container network "ferry" shared by
#                               a, b and c (see below); --container-net
#                               makes only that network's segment (a
#                               process tree's macvlan links sit on eth1)
#   testbed.sh up --vm          hosts a and b are virtual machines instead
#                               (examples/vm/host.sh: qemu TCG, Debian 12's
#                               kernel, this machine's root read-only at the
#                               same paths), each with a virtio NIC and a
#                               Soft-RoCE device rxe0 on it, the two NICs
#                               joined by a qemu UDP link on loopback
#   testbed.sh up --vm --pool N pool hosts p1..pN as pool-node daemons in
#                               the VMs (odd in a, even in b), on ports
#                               7141.. of the VM's address, offering
#                               one-sided reads over RDMA (--pool-rdma)
#   testbed.sh shared-dir       print a directory both hosts see read-write
#                               at the same path (VM hosts: on the share)
#   testbed.sh dir HOST         print HOST's directory: its credentials and
#                               daemon log (and, for namespace hosts, the
#                               daemon's --state-dir; a VM host's is
#                               /var/lib/ferry-testbed/HOST inside its VM)
#   testbed.sh down             stop everything the testbed started, remove the hosts
#   testbed.sh exec HOST CMD... run CMD inside HOST, with Ferry's binaries on PATH
#                               and FERRY_DAEMON set to that host's daemon; with
#                               engines, plain `podman` and `docker` talk to
#                               HOST's own instances (runc, ulimits, no network)
#   testbed.sh addr HOST        print HOST's daemon address, IP:PORT
#   testbed.sh ip HOST          print HOST's IP address
#   testbed.sh container-net    print the container network's subnet
#   testbed.sh stop HOST        SIGKILL HOST's daemon (to inject a failure)
#   testbed.sh start HOST       start HOST's daemon again
#   testbed.sh cut HOST         take HOST off the network (its link on the
#                               bridge goes down): to its peers it is a host
#                               that stopped answering (namespace hosts only)
#   testbed.sh mend HOST        put HOST back on the network
#
# The container network (up --engines or --container-net): a second bridge in NAME-sw, with an
# eth1 from a, b and c on it: one L2 segment, subnet CNET.0/24. In a and b,
# podman's and dockerd's network "ferry" is a macvlan on eth1, so a container
# run with `--network ferry --ip CNET.X` owns its address and MAC on the
# segment, the way it would on a real shared VLAN; c has CNET.253 on its eth1
# and reaches containers wherever they run. Each host keeps its own IPAM
# state and allocates from a pool of its own: a from CNET.64/26, b from
# CNET.128/26; podman takes `--ip` from either pool (host-local allocates
# next after the last address it gave, even one asked for: after a podman
# restore of CNET.70 on b, b's next is CNET.71).
#
# Every host gets TLS credentials from the testbed's own cluster CA (STATE/ca,
# made with `migrator credentials init`): STATE/HOST/credentials holds its
# certificate (name HOST, its address in the SAN), which its daemon and every
# command run through `exec` (FERRY_CREDENTIALS) present. Each daemon serves
# Prometheus metrics on 127.0.0.1:9140 inside its host.
#
# Environment: FERRY_TESTBED names the testbed (default "ferry"; namespaces are
# NAME-a, NAME-b, NAME-pK and NAME-sw), FERRY_TESTBED_NET picks the /24
# (default 10.77.0) and FERRY_TESTBED_CNET the container network's (default:
# the second number one up, 10.78.0), FERRY_BUILD points at the build dir (default
# <repo>/build), FERRY_POOL_CAPACITY (default 256M) and FERRY_POOL_EVICTION
# (default lru) configure the pool nodes, FERRY_DOCKER_STORAGE picks dockerd's
# storage driver (default overlay2; vfs works too, but copies the whole image
# for every container), FERRY_TESTBED_WORK the tmpfs directory of the
# daemons' work dirs (default /dev/shm/ferry-testbed; NAME/HOST in it), and
# FERRY_PAGESRV_ARGS more options for the namespace hosts' daemons started
# meanwhile (e.g. "--drain-timeout 1").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
name=${FERRY_TESTBED:-ferry}
net=${FERRY_TESTBED_NET:-10.77.0}
build=${FERRY_BUILD:-$repo/build}
base=${FERRY_TESTBED_DIR:-/tmp/ferry-testbed}
state=$base/$name
# Each namespace host's daemon works on tmpfs (pagesrv --work-dir), as on a
# real host; STATE/HOST/incoming points there, so a session's logs are at
# STATE/HOST/incoming/ID either way.
work_base=${FERRY_TESTBED_WORK:-/dev/shm/ferry-testbed}/$name
port=7140
hosts=(a b)
IFS=. read -r n1 n2 n3 <<<"$net"
cnet=${FERRY_TESTBED_CNET:-$n1.$((n2 + 1)).$n3}
# A VM testbed keeps its state on the VM share (the same path inside the
# VMs); $base/NAME.vm says where.
vm=0
if [ -f "$base/$name.vm" ]; then
  vm=1
  state=$(cat "$base/$name.vm")
fi
vm_host() { "$here/vm/host.sh" "$@"; }
# In a VM testbed, pool host pN runs in VM a (N odd) or b (N even), on its
# own port of that VM's address.
vm_of() {
  case "$1" in
    p[1-8]) if [ $((${1#p} % 2)) = 1 ]; then echo a; else echo b; fi ;;
    *) echo "$1" ;;
  esac
}
vm_dir() { echo "$state/vm-$(vm_of "$1")"; }

die() { echo "testbed: $*" >&2; exit 1; }

# Container engines (up --engines): per-host configuration under $state/HOST.
engine_hosts=(a b)
# The design brief's limits: the hard RLIMIT_NOFILE cannot be raised here.
ulimits='"nofile=1024:1024", "nproc=1024:1024"'

host_index() {
  case "$1" in
    a) echo 1 ;;
    b) echo 2 ;;
    c) echo 3 ;;
    p[1-8]) echo $((10 + ${1#p})) ;;
    *) die "unknown host '$1' (hosts: a, b, c, p1..p8)" ;;
  esac
}
# Every host of this testbed, pool hosts included.
all_hosts() {
  local h
  printf '%s\n' a b
  if [ "$vm" = 1 ]; then
    cat "$state/pool-hosts" 2>/dev/null || true
    return
  fi
  for h in $(ip netns list | awk '{print $1}'); do
    case "$h" in "$name"-p[1-8] | "$name"-c) echo "${h#"$name"-}" ;; esac
  done
}
ns() { echo "$name-$1"; }
host_ip() {
  if [ "$vm" = 1 ]; then echo "$net.$(host_index "$(vm_of "$1")")"; else echo "$net.$(host_index "$1")"; fi
}
addr() {
  case "$vm:$1" in
    1:p[1-8]) echo "$(host_ip "$1"):$((port + ${1#p}))" ;;
    *) echo "$(host_ip "$1"):$port" ;;
  esac
}
# Enter only the host's network namespace. (`ip netns exec` would also make a
# fresh mount namespace per command, and CRIU would then have to dump it.)
in_host() {
  local h=$1; shift
  nsenter --net="/run/netns/$(ns "$h")" "$@"
}
bin_path() { echo "$build/migrator:$build/pagesrv:$build/lazy-pages:$build/examples"; }

daemon_pid() {
  local f="$state/$1/pagesrv.pid"
  [ -f "$f" ] && cat "$f"
}

# In a VM host: the daemon in a session of its own (it outlives the agent's
# job), then a bounded wait until it accepts connections. Its state dir is
# the VM's own (vm_state_dir: unix sockets cannot live on the 9p share);
# its log, pid file and credentials are on the share.
vm_state_dir=/var/lib/ferry-testbed
start_daemon_vm() {
  local h=$1 dir="$state/$1"
  # The daemon's switches from this environment (the guest starts bare).
  local role=() metrics=9140 passenv=() v
  for v in FERRY_FAULT FERRY_LAZY_PAGES_ARGS FERRY_NO_HW_BREAKPOINTS FERRY_NO_IDLE_POLL FERRY_CRIU_LOG_LEVEL; do
    [ -n "${!v:-}" ] && passenv+=("$v=${!v}")
  done
  case "$h" in
    # Every VM has a Soft-RoCE device: pool nodes offer one-sided reads.
    p*) role=(--pool-node --pool-rdma --capacity "${FERRY_POOL_CAPACITY:-64M}"
      --tier-dir "$vm_state_dir/$h/tier" --eviction "${FERRY_POOL_EVICTION:-lru}")
      metrics=$((9140 + ${h#p})) ;;
  esac
  # Bounded: the guest's own wait is 30 s, TCG slows it, and a guest
  # whose agent is stuck must fail this, not hold it for an hour.
  FERRY_VM_EXEC_TIMEOUT=120 vm_host exec "$(vm_dir "$h")" bash -c '
    mkdir -p "$4"
    setsid env "${@:7}" "$1" --listen "$2" --state-dir "$4" --work-dir "$4/incoming" --credentials "$3/credentials" \
      --metrics "127.0.0.1:$5" $6 </dev/null >>"$3/pagesrv.log" 2>&1 &
    echo $! >"$3/pagesrv.pid"
    for i in $(seq 1 300); do
      (exec 3<>"/dev/tcp/${2%:*}/${2#*:}") 2>/dev/null && exit 0
      kill -0 "$(cat "$3/pagesrv.pid")" 2>/dev/null || exit 2
      sleep 0.1
    done
    exit 1' _ "$build/pagesrv/pagesrv" "$(addr "$h")" "$dir" "$vm_state_dir/$h" "$metrics" "${role[*]}" "${passenv[@]}" || {
    tail -n 20 "$dir/pagesrv.log" >&2
    die "pagesrv on VM host $h did not start listening"
  }
}

# Fails (status 255) if HOST's VM did not answer within BOUND s (60).
stop_daemon_vm() {
  local h=$1 sig=$2 bound=${3:-60} rc=0
  [ -f "$state/$h/pagesrv.pid" ] || return 0
  FERRY_VM_EXEC_TIMEOUT=$bound vm_host exec "$(vm_dir "$h")" bash -c '
    pid=$(cat "$1") || exit 0
    kill -"$2" "$pid" 2>/dev/null || exit 0
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null; exit 0' _ "$state/$h/pagesrv.pid" "$sig" || rc=$?
  rm -f "$state/$h/pagesrv.pid"
  [ "$rc" != 255 ]
}

start_daemon() {
  local h=$1 dir="$state/$1"
  mkdir -p "$dir"
  [ -x "$build/pagesrv/pagesrv" ] || die "no pagesrv in $build (build first: meson setup build && ninja -C build)"
  [ "$vm" = 1 ] && { start_daemon_vm "$h"; return; }
  # env, nsenter and setsid exec in turn, so $! is pagesrv's own pid.
  local role=()
  case "$h" in
    p*) role=(--pool-node --capacity "${FERRY_POOL_CAPACITY:-256M}" --tier-dir "$dir/tier"
      --eviction "${FERRY_POOL_EVICTION:-lru}") ;;
  esac
  # With engines, the daemon restores containers with the host's own podman.
  # --favor-cgroup-moves, --own-netns-socket-tables: this machine is a Ferry
  # host, tuned as the README says (favordynmods, host-wide until the next
  # boot; child socket tables, in the host's namespace).
  local work="$work_base/$h"
  mkdir -p "$work"
  if [ ! -L "$dir/incoming" ]; then
    rm -rf "$dir/incoming"
    ln -s "$work" "$dir/incoming"
  fi
  env $(engine_env "$h") nsenter --net="/run/netns/$(ns "$h")" setsid "$build/pagesrv/pagesrv" --listen "$(addr "$h")" --state-dir "$dir" \
    --work-dir "$work" --credentials "$dir/credentials" --metrics 127.0.0.1:9140 --favor-cgroup-moves \
    --own-netns-socket-tables "${role[@]}" ${FERRY_PAGESRV_ARGS:-} </dev/null >>"$dir/pagesrv.log" 2>&1 &
  echo $! >"$dir/pagesrv.pid"
  # Wait (bounded) until it accepts connections.
  local ip=${net}.$(host_index "$h") i
  for i in $(seq 1 200); do
    if in_host "$h" bash -c "exec 3<>/dev/tcp/$ip/$port" 2>/dev/null; then
      return 0
    fi
    kill -0 "$(daemon_pid "$h")" 2>/dev/null || { tail -n 20 "$dir/pagesrv.log" >&2; die "pagesrv on $h exited"; }
    sleep 0.05
  done
  die "pagesrv on $h did not start listening"
}

stop_daemon() {
  local h=$1 sig=${2:-TERM} pid i
  [ "$vm" = 1 ] && { stop_daemon_vm "$h" "$sig"; return; }
  pid=$(daemon_pid "$h") || return 0
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -"$sig" "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$state/$h/pagesrv.pid"
}

# A cluster CA for the testbed, and HOST's certificate signed by it.
issue_credentials() {
  local h=$1
  [ -x "$build/migrator/migrator" ] || die "no migrator in $build (build first)"
  [ -f "$state/ca/ca.pem" ] || "$build/migrator/migrator" credentials init --credentials "$state/ca" >/dev/null
  "$build/migrator/migrator" credentials issue "$h" --address "$(host_ip "$h")" \
    --credentials "$state/ca" --out "$state/$h/credentials" >/dev/null
}

# The environment that points podman and docker at HOST's own instances.
engine_env() {
  local dir="$state/$1"
  [ -f "$dir/containers.conf" ] || return 0
  echo "CONTAINERS_CONF=$dir/containers.conf"
  echo "CONTAINERS_STORAGE_CONF=$dir/storage.conf"
  echo "DOCKER_HOST=unix://$dir/docker/docker.sock"
  echo "DOCKER_CONFIG=$dir/docker-cli"
}

write_engine_config() {
  local h=$1 dir="$state/$1"
  # As on a real host, the engines' runtime dirs (podman's runroot and
  # tmp_dir, dockerd's exec-root: /run there) are on tmpfs, their storage on
  # disk: a container's restore makes files in the former inside the
  # downtime.
  local run="$work_base/run/$h"
  mkdir -p "$dir/podman/root" "$run/podman" "$dir/docker/data" "$run/docker-exec" "$dir/docker-cli" \
    "$dir/cni/net.d" "$dir/cni/ipam"
  # runc: crun fails on this machine's cgroup setup. By default no network:
  # the testbed's hosts reach each other through their own namespace, and
  # most containers need none for migration. Those run with --network ferry
  # own an address on the container network.
  echo "{}" >"$dir/docker-cli/config.json"
  cat >"$dir/containers.conf" <<EOF
[containers]
default_ulimits = [ $ulimits ]
netns = "none"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$dir/podman/events.log"
static_dir = "$dir/podman/root/libpod"
tmp_dir = "$run/podman/libpod"
volume_path = "$dir/podman/root/volumes"
network_backend = "cni"
[network]
network_config_dir = "$dir/cni/net.d"
# Podman's "runc" is Ferry's shim, which passes everything to runc and makes
# checkpoint/restore lazy when Ferry asks (lib/engine_request.hpp).
[engine.runtimes]
runc = [ "$build/engines/ferry-runc" ]
EOF
  # The IPAM state lives under the host's own dir: a and b share this
  # machine's /var/lib/cni. Each host allocates from a pool of its own
  # (ipam_pool), as a segment's hosts must when their IPAM is per host: a
  # copy arriving on b gets a first address of its own, never its source's.
  # The other host's pool comes second: an address it gave may be asked for
  # here (podman's own restore of a container from there keeps it), but
  # this host allocates from its own first.
  local pool other
  pool=$(ipam_pool "$h")
  other=$(ipam_pool "$([ "$h" = a ] && echo b || echo a)")
  cat >"$dir/cni/net.d/ferry.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "ferry",
 "plugins": [{"type": "macvlan", "master": "eth1", "mode": "bridge",
   "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam",
     "ranges": [[{"subnet": "$cnet.0/24", "rangeStart": "$cnet.$pool", "rangeEnd": "$cnet.$((pool + 63))"},
                 {"subnet": "$cnet.0/24", "rangeStart": "$cnet.$other", "rangeEnd": "$cnet.$((other + 63))"}]]}}]}
EOF
  cat >"$dir/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$dir/podman/root"
runroot = "$run/podman"
EOF
  cat >"$dir/docker/daemon.json" <<EOF
{"experimental": true, "iptables": false, "ip-forward": false, "ip-masq": false,
 "bridge": "none", "storage-driver": "${FERRY_DOCKER_STORAGE:-overlay2}",
 "data-root": "$dir/docker/data", "exec-root": "$run/docker-exec",
 "pidfile": "$dir/docker/dockerd.pid", "hosts": ["unix://$dir/docker/docker.sock"],
 "runtimes": {"ferry-runc": {"path": "$build/engines/ferry-runc"}}, "default-runtime": "ferry-runc",
 "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 1024, "Soft": 1024},
                     "nproc": {"Name": "nproc", "Hard": 1024, "Soft": 1024}}}
EOF
}

# The first address of HOST's IPAM pool on the container network: 64
# addresses each (a: .64-.127, b: .128-.191).
ipam_pool() {
  case "$1" in a) echo 64 ;; b) echo 128 ;; *) echo 192 ;; esac
}

start_dockerd() {
  local h=$1 dir="$state/$1" i
  command -v dockerd >/dev/null || die "dockerd is not installed (examples/setup.sh installs it)"
  nsenter --net="/run/netns/$(ns "$h")" setsid dockerd --config-file "$dir/docker/daemon.json" \
    </dev/null >>"$dir/dockerd.log" 2>&1 &
  echo $! >"$dir/docker/dockerd.launcher"
  for i in $(seq 1 600); do
    if DOCKER_HOST="unix://$dir/docker/docker.sock" /usr/bin/docker version >/dev/null 2>&1; then
      DOCKER_HOST="unix://$dir/docker/docker.sock" /usr/bin/docker network create -d macvlan \
        --subnet "$cnet.0/24" --ip-range "$cnet.$(ipam_pool "$h")/26" -o parent=eth1 ferry >/dev/null ||
        die "dockerd on $h: cannot create the container network"
      return 0
    fi
    kill -0 "$(cat "$dir/docker/dockerd.launcher")" 2>/dev/null || { tail -n 20 "$dir/dockerd.log" >&2; die "dockerd on $h exited"; }
    sleep 0.1
  done
  die "dockerd on $h did not answer within 60 s"
}

# Removes HOST's containers (their processes live outside the host's network
# namespace), then stops its dockerd.
stop_engines() {
  local h=$1 dir="$state/$1" pid i
  [ -f "$dir/containers.conf" ] || return 0
  env $(engine_env "$h") /usr/bin/podman rm -a -f -t 0 >/dev/null 2>&1 || true
  if [ -S "$dir/docker/docker.sock" ]; then
    local ids
    ids=$(DOCKER_HOST="unix://$dir/docker/docker.sock" /usr/bin/docker ps -aq 2>/dev/null) || true
    [ -z "$ids" ] || DOCKER_HOST="unix://$dir/docker/docker.sock" /usr/bin/docker rm -f $ids >/dev/null 2>&1 || true
  fi
  pid=$(cat "$dir/docker/dockerd.pid" 2>/dev/null) || pid=""
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  # Podman's overlay mounts and dockerd's leftovers under the host's state
  # and its runtime dirs.
  { grep -oE " ($dir|$work_base/run/$h)/[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

up() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  local pools=0 engines=0 segment=0 client=0 i
  while [ $# -gt 0 ]; do
    case "$1" in
      --pool)
        pools=${2:-}
        [[ "$pools" =~ ^[0-8]$ ]] || die "--pool takes a count from 0 to 8"
        shift 2
        ;;
      --engines) engines=1; segment=1; shift ;;
      --container-net) segment=1; shift ;;
      --client) client=1; shift ;;
      *) die "unknown option to up: $1" ;;
    esac
  done
  for ((i = 1; i <= pools; i++)); do hosts+=("p$i"); done
  [ "$client" = 0 ] || hosts+=(c)
  for h in "${hosts[@]}" sw; do
    ip netns list | grep -qw "$(ns "$h")" && die "$(ns "$h") exists already: run '$0 down' first"
  done
  mkdir -p "$state"
  ip netns add "$(ns sw)"
  ip -n "$(ns sw)" link add br0 type bridge
  ip -n "$(ns sw)" link set br0 up
  for h in "${hosts[@]}"; do
    ip netns add "$(ns "$h")"
    ip -n "$(ns "$h")" link set lo up
    # One veth per host: eth0 inside the host, its peer on the bridge.
    ip -n "$(ns sw)" link add "v-$h" type veth peer name eth0 netns "$(ns "$h")"
    ip -n "$(ns sw)" link set "v-$h" master br0 up
    ip -n "$(ns "$h")" addr add "$net.$(host_index "$h")/24" dev eth0
    ip -n "$(ns "$h")" link set eth0 up
  done
  if [ "$segment" = 1 ]; then
    # The container network's segment: eth1 of a, b and c on br1.
    ip -n "$(ns sw)" link add br1 type bridge
    ip -n "$(ns sw)" link set br1 up
    for h in "${hosts[@]}"; do
      case "$h" in a | b | c) ;; *) continue ;; esac
      ip -n "$(ns sw)" link add "n-$h" type veth peer name eth1 netns "$(ns "$h")"
      ip -n "$(ns sw)" link set "n-$h" master br1 up
      ip -n "$(ns "$h")" link set eth1 up
    done
    [ "$client" = 0 ] || ip -n "$(ns c)" addr add "$cnet.253/24" dev eth1
  fi
  if [ "$engines" = 1 ]; then
    for h in "${engine_hosts[@]}"; do write_engine_config "$h"; done
  fi
  for h in "${hosts[@]}"; do issue_credentials "$h"; done
  for h in "${hosts[@]}"; do
    [ "$h" = c ] || start_daemon "$h"
  done
  if [ "$engines" = 1 ]; then
    for h in "${engine_hosts[@]}"; do start_dockerd "$h"; done
  fi
  local summary=""
  for h in "${hosts[@]}"; do
    if [ "$h" = c ]; then summary+=" c=$net.3"; else summary+=" $h=$(addr "$h")"; fi
  done
  [ "$segment" = 0 ] || summary+=", containers on $cnet.0/24"
  echo "testbed $name up:$summary"
}

# Hosts a and b as VMs on the VM share, each with a Soft-RoCE device.
up_vm() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  [ -f "$base/$name.vm" ] && die "VM testbed $name exists already: run '$0 down' first"
  local pools=0 share link i
  case "${1:-}" in
    "") ;;
    --pool)
      pools=${2:-}
      [[ "$pools" =~ ^[0-8]$ ]] || die "--pool takes a count from 0 to 8" ;;
    *) die "up --vm takes only --pool N" ;;
  esac
  share=${FERRY_VM_DIR:-/var/tmp/ferry-vm}/share
  state=$share/testbeds/$name
  vm=1
  rm -rf "$state"
  mkdir -p "$state/shared" "$base"
  echo "$state" >"$base/$name.vm"
  for ((i = 1; i <= pools; i++)); do echo "p$i"; done >"$state/pool-hosts"
  mapfile -t hosts < <(all_hosts)
  for h in "${hosts[@]}"; do mkdir -p "$state/$h"; issue_credentials "$h"; done
  # The link: a UDP datagram per frame between two loopback ports, each VM
  # sending to the other's. Stateless, so a VM booted again (host.sh boot
  # retries a stalled boot) is on the link at once; both boot at once.
  local ports port_a port_b
  ports=$(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  read -r port_a port_b <<<"$ports"
  vm_host boot "$(vm_dir a)" --ip "$net.1/24" --link "udp:$port_a:$port_b" --rdma &
  local boot_a=$!
  vm_host boot "$(vm_dir b)" --ip "$net.2/24" --link "udp:$port_b:$port_a" --rdma || die "VM host b did not boot"
  wait "$boot_a" || die "VM host a did not boot"
  local summary=""
  for h in "${hosts[@]}"; do
    start_daemon "$h"
    summary+=" $h=$(addr "$h")"
  done
  echo "testbed $name up (VMs):$summary, shared $state/shared"
}

down_vm() {
  local h
  local -A unanswered=()
  mapfile -t hosts < <(all_hosts)
  for h in "${hosts[@]}"; do
    # A guest that did not answer once (its kernel locked up, say) is not
    # asked again: its qemu is killed below, and waiting on each of its
    # daemons in turn once outlasted the test's own bound, leaving qemu up.
    [ -n "${unanswered[$(vm_of "$h")]:-}" ] && continue
    stop_daemon_vm "$h" TERM 30 || {
      echo "testbed: VM $(vm_of "$h") did not answer; killing its qemu" >&2
      unanswered[$(vm_of "$h")]=1
    }
  done
  for h in a b; do
    if [ -n "${unanswered[$h]:-}" ]; then
      vm_host kill "$(vm_dir "$h")" # it would not take a poweroff either
    else
      vm_host halt "$(vm_dir "$h")"
    fi
  done
  rm -rf "$state"
  rm -f "$base/$name.vm"
}

down() {
  local h pid
  [ "$vm" = 1 ] && { down_vm; return; }
  mapfile -t hosts < <(all_hosts)
  for h in "${hosts[@]}"; do
    stop_engines "$h"
    stop_daemon "$h"
  done
  hosts+=(sw)
  for h in "${hosts[@]}"; do
    if ip netns list | grep -qw "$(ns "$h")"; then
      # Whatever still runs inside the host was started through this testbed.
      for pid in $(ip netns pids "$(ns "$h")" 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null || true
      done
      ip netns del "$(ns "$h")"
    fi
  done
  rm -rf "$state" "$work_base"
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) if [ "${1:-}" = --vm ]; then shift; up_vm "$@"; else up "$@"; fi ;;
  down) down ;;
  shared-dir) mkdir -p "$state/shared" && echo "$state/shared" ;;
  dir) [ $# = 1 ] || die "usage: $0 dir HOST"; echo "$state/$1" ;;
  addr) [ $# = 1 ] || die "usage: $0 addr HOST"; addr "$1" ;;
  ip) [ $# = 1 ] || die "usage: $0 ip HOST"; host_ip "$1" ;;
  container-net) echo "$cnet.0/24" ;;
  exec)
    [ $# -ge 2 ] || die "usage: $0 exec HOST CMD..."
    h=$1; shift
    if [ "$vm" = 1 ]; then
      exec "$here/vm/host.sh" exec "$(vm_dir "$h")" env PATH="$(bin_path):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        FERRY_DAEMON="$(addr "$h")" FERRY_CREDENTIALS="$state/$h/credentials" "$@"
    fi
    # /usr/bin first among the system's: the engines' own CLIs, not strays.
    exec nsenter --net="/run/netns/$(ns "$h")" env PATH="$(bin_path):/usr/sbin:/usr/bin:$PATH" \
      FERRY_DAEMON="$(addr "$h")" FERRY_CREDENTIALS="$state/$h/credentials" $(engine_env "$h") "$@"
    ;;
  stop) [ $# = 1 ] || die "usage: $0 stop HOST"; stop_daemon "$1" KILL ;;
  start) [ $# = 1 ] || die "usage: $0 start HOST"; start_daemon "$1" ;;
  cut | mend)
    [ $# = 1 ] || die "usage: $0 $cmd HOST"
    [ "$vm" = 1 ] && die "$cmd is for namespace hosts"
    ip -n "$(ns sw)" link set "v-$1" "$([ "$cmd" = cut ] && echo down || echo up)"
    ;;
  *) die "usage: $0 up [--pool N] [--engines] [--container-net] [--client]|up --vm [--pool N]|down|exec HOST CMD...|addr HOST|ip HOST|container-net|stop HOST|start HOST|cut HOST|mend HOST|shared-dir|dir HOST" ;;
esac
