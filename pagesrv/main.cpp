// pagesrv: Ferry's per-host daemon (source and destination roles).
#include "core/error.hpp"
#include "core/log.hpp"
#include "daemon.hpp"

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <malloc.h>

#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    std::string listen;
    std::string state_dir = "/var/lib/ferry";
    int drain_seconds = 30;
    CLI::App app{
        "Ferry pagesrv: serves outgoing migrations' pages and accepts incoming migrations"};
    app.add_option("--listen", listen, "address to listen on, IP:PORT")->required();
    app.add_option("--state-dir", state_dir,
                   "where records that must outlive a reboot are kept (containers created for "
                   "incoming migrations; a pool node's tier)")
        ->capture_default_str();
    std::string work_dir = "/dev/shm/ferry-pagesrv";
    app.add_option("--work-dir", work_dir,
                   "where incoming migrations' images, CRIU's restores and their logs live "
                   "(tmpfs is best: they are written inside the downtime); the newest 32 "
                   "migrations' logs stay")
        ->capture_default_str();
    app.add_option("--drain-timeout", drain_seconds,
                   "seconds to let committed migrations finish on SIGTERM")
        ->capture_default_str();
    bool pool_node = false;
    std::string capacity = "256M", disk_capacity = "0", tier_dir, eviction = "lru";
    uint32_t chunk_size = 4096;
    app.add_flag("--pool-node", pool_node, "also store pool pages (the pool role)");
    bool pool_rdma = false;
    app.add_flag("--pool-rdma", pool_rdma,
                 "let pool clients READ the arena one-sided over RDMA (any authenticated "
                 "client may then read any object's chunks; needs an RDMA device)");
    app.add_option("--capacity", capacity, "the pool's memory arena, e.g. 256M or 2G")
        ->capture_default_str();
    app.add_option("--tier-dir", tier_dir,
                   "directory of the disk tier cold pages move to (default STATE_DIR/tier)");
    app.add_option("--eviction", eviction, "fifo, lru, lfu, clock or random")
        ->capture_default_str();
    app.add_option("--chunk-size", chunk_size, "largest stripe member stored, bytes")
        ->capture_default_str();
    app.add_option("--disk-capacity", disk_capacity, "disk tier limit (0: none)")
        ->capture_default_str();
    // The environment's default lets a testbed force it on every host.
    bool no_hw_breakpoints = ferry::switch_from_environment("FERRY_NO_HW_BREAKPOINTS");
    app.add_flag("--no-hw-breakpoints", no_hw_breakpoints,
                 "CRIU restores step through syscalls even where hardware breakpoints work "
                 "(default: only where they do not trap; $FERRY_NO_HW_BREAKPOINTS=1)");
    std::string credentials_dir;
    app.add_option("--credentials", credentials_dir,
                   "TLS credentials directory: ca.pem, cert.pem, key.pem (default "
                   "$FERRY_CREDENTIALS, then /etc/ferry/credentials)");
    std::vector<std::string> allowed_peers;
    app.add_option("--allow-peer", allowed_peers,
                   "accept only peers whose certificate has this name (repeatable; default: any "
                   "certificate the cluster CA signed)");
    std::string metrics;
    app.add_option("--metrics", metrics,
                   "serve Prometheus metrics at http://IP:PORT/metrics (a local address: they "
                   "are not authenticated)");
    std::string macvlan_parent;
    app.add_option("--macvlan-parent", macvlan_parent,
                   "the link that a migrated process tree's macvlan links sit on here (default: "
                   "the link of the same name as on the source host)");
    bool favor_cgroup_moves = false;
    app.add_flag("--favor-cgroup-moves", favor_cgroup_moves,
                 "set favordynmods on the cgroup mount (host-wide, until the next boot): a "
                 "container's restore then does not wait for an RCU grace period to move its "
                 "task into its cgroups; forks and exits cost a little more");
    bool own_netns_socket_tables = false;
    app.add_flag("--own-netns-socket-tables", own_netns_socket_tables,
                 "give network namespaces created from now on socket hash tables of their own "
                 "(net.ipv4.tcp_child_ehash_entries, udp_child_hash_entries in this daemon's "
                 "network namespace, until the next boot): CRIU's dump of a container then "
                 "lists its sockets without walking the host's tables, ~5 ms less freeze; a "
                 "container with more than ~16k TCP connections pays longer hash chains");
    bool no_idle_poll = ferry::switch_from_environment("FERRY_NO_IDLE_POLL");
    app.add_flag("--no-idle-poll", no_idle_poll,
                 "never keep this host's idle CPUs polling through a restore, even when a "
                 "migrator asks (by default they poll from the prepare to the resume, a "
                 "PM QoS CPU latency request of 0 that lapses after 10 s; "
                 "$FERRY_NO_IDLE_POLL=1)");
    bool no_expedited_rcu = ferry::switch_from_environment("FERRY_NO_EXPEDITED_RCU");
    app.add_flag("--no-expedited-rcu", no_expedited_rcu,
                 "never make this host's RCU grace periods expedited (by default "
                 "/sys/kernel/rcu_expedited is 1 while a moving network's copy takes the "
                 "source's MACs, which waits for a grace period, 4-20 ms otherwise; put back "
                 "after, at most 2 s later; $FERRY_NO_EXPEDITED_RCU=1)");
    CLI11_PARSE(app, argc, argv);

    // One thread per connection: without a cap, glibc gives threads arenas
    // of their own that keep their memory after a storm of connections.
    ::mallopt(M_ARENA_MAX, 4);
    ferry::configure_logging(ferry::log_level_from_environment());
    auto log = ferry::make_logger("pagesrv");
    try {
        ferry::pagesrv::daemon_config cfg;
        cfg.listen = ferry::net::parse_endpoint(listen);
        cfg.state_dir = state_dir;
        cfg.work_dir = work_dir;
        cfg.drain_timeout = std::chrono::seconds(drain_seconds);
        cfg.no_hw_breakpoints = no_hw_breakpoints;
        cfg.tools = ferry::host_tools::from_environment();
        cfg.credentials =
            ferry::tls::credentials::load(ferry::tls::credentials_dir(credentials_dir));
        cfg.peers.names = allowed_peers;
        cfg.metrics_listen = metrics;
        cfg.macvlan_parent = macvlan_parent;
        cfg.favor_cgroup_moves = favor_cgroup_moves;
        cfg.own_netns_socket_tables = own_netns_socket_tables;
        cfg.no_idle_poll = no_idle_poll;
        cfg.no_expedited_rcu = no_expedited_rcu;
        log->info("this host is {} (credentials in {}); {}", cfg.credentials->identity(),
                  cfg.credentials->dir().string(),
                  allowed_peers.empty()
                      ? std::string("any peer the cluster CA signed may connect")
                      : fmt::format("only {} may connect", fmt::join(allowed_peers, ", ")));
        if (pool_node) {
            ferry::pagesrv::pool_store_config p;
            p.capacity_bytes = ferry::pagesrv::parse_size(capacity);
            p.disk_capacity_bytes = ferry::pagesrv::parse_size(disk_capacity);
            p.chunk_size = chunk_size;
            p.eviction = eviction;
            p.tier_dir = tier_dir.empty() ? std::filesystem::path(state_dir) / "tier"
                                          : std::filesystem::path(tier_dir);
            cfg.pool = p;
            cfg.pool_rdma = pool_rdma;
        } else if (pool_rdma) {
            throw ferry::error("--pool-rdma needs --pool-node");
        }
        ferry::pagesrv::daemon d(std::move(cfg));
        d.run();
    } catch (const std::exception& e) {
        log->error("{}", e.what());
        return 1;
    }
    log->info("stopped");
    return 0;
}
