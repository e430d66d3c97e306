// `migrator migrate`: post-copy migration of a container, or of a process tree in its
// own PID namespace, from this host to another host's pagesrv (dump_driver.hpp says
// who runs CRIU's dump).
//
//   freeze (criu dump --lazy-pages, tasks stay frozen)
//   -> register with the local pagesrv (it serves pages from the frozen tasks)
//   -> ship images to the destination, which restores with lazy-pages
//   -> destination reaches pre-resume -> commit the source -> resume
//   -> wait for every page -> CLOSE CRIU's dump (the source tasks end)
//
// Any failure before the commit aborts CRIU's dump, and CRIU resumes the
// source tasks.
#pragma once

#include "criu/criu_features.hpp"
#include "netlink/link_identity.hpp"

#include "pool/pool_layout.hpp"
#include "sys/host_tools.hpp"
#include "sys/net.hpp"
#include "tls/credentials.hpp"
#include "transport/fabric.hpp"
#include "wire/control.pb-c.h"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ferry::migrator {

// migrate: source -> destination. park: source -> pool only (`checkpoint
// --to-pool`); the tasks end once the pool holds them. unpark: pool ->
// destination (`restore --from-pool`), with no source at all.
enum class migrate_mode : uint8_t { migrate, park, unpark };
// As the CLI names them: "migrate", "checkpoint", "restore".
[[nodiscard]] const char* to_string(migrate_mode m) noexcept;

struct migrate_options {
    migrate_mode mode = migrate_mode::migrate;
    std::string park_name; // park, unpark: the parked workload's name
    // park: the hosts (certificate names) that may restore it, besides this one.
    std::vector<std::string> restorable_by;
    pid_t pid = 0;
    // A container instead of a bare tree: its engine ("podman") and name.
    std::string engine;
    std::string container;
    net::endpoint destination;
    net::endpoint local_daemon;
    std::optional<net::endpoint>
        advertised_source; // what the destination dials; default local_daemon
    std::filesystem::path work_root = "/dev/shm/ferry";
    fabric_spec fabric;
    std::optional<pool::pool_spec> pool; // pool mode: pages go through the memory pool
                                         // (unpark: just the nodes, to find the record)
    bool keep_images = false;
    bool tcp_close = false; // established TCP connections are closed, not migrated
    bool show_progress = false;
    // Multiplies every deadline on CRIU (criu::deadlines), which otherwise
    // grow with the workload's memory.
    double deadline_scale = 1.0;
    // CRIU steps through syscalls instead of using hardware breakpoints, on
    // both hosts, even where breakpoints work (lib/hw_breakpoints.hpp).
    bool no_hw_breakpoints = false;
    // Both hosts' idle CPUs poll, rather than halt, from before the freeze
    // to the resume (lib/sys/idle_poll.hpp).
    bool idle_poll = true;
    // Extra lines for CRIU's config file on the source (a user's options).
    std::string criu_config_extra;
    host_tools tools; // the programs it runs (CRIU, engines)
    // Who this host is to the daemons (lib/tls); loaded in main.
    tls::credentials_ptr credentials;
    // Page channels leave TLS after authenticating (a trusted network only).
    bool insecure_plaintext_pages = false;
    // Pre-copy: the source streams the running tree's memory to the
    // destination, round after round, before the freeze; the freeze waits
    // up to precopy_wait for the rounds to stop shrinking
    // (pagesrv/precopy_source.hpp).
    bool precopy = false;
    std::chrono::milliseconds precopy_wait{30'000};
};

// The source's pre-copy before the freeze, as it answered the prepare.
struct precopy_report {
    bool asked = false;
    std::string error; // why there was none
    uint32_t rounds = 0;
    uint64_t tracked_pages = 0, pages_sent = 0, last_round_pages = 0;
    bool converged = false;
    uint64_t wait_ns = 0; // from the prepare to its answer
};

// lazy-pages' final account, as the destination relayed it.
struct transfer_summary {
    bool present = false;
    std::string error;
    // A copy of the message's numbers; its pointers (`error`, unknown fields)
    // are cleared, as the envelope they pointed into is freed.
    FerryControl__TransferStats stats = FERRY_CONTROL__TRANSFER_STATS__INIT;
    // The message's strings, copied.
    std::string pool_lost_nodes, pool_members, pool_scrub_error, precopy_unused;
};

struct migration_result {
    migrate_mode mode = migrate_mode::migrate;
    std::string park_name;
    uint64_t park_record_bytes = 0; // the parked workload's record (its images) in the pool
    std::string id;
    std::string fabric;
    precopy_report precopy;
    bool ok = false;
    std::string error;
    bool committed = false;
    bool source_running = false; // after a failure: did the source survive?
    pid_t source_pid = 0;
    pid_t destination_pid = -1;
    std::string engine, container; // container migrations
    // How the destination's engine restored: "warm" (its restore started
    // before the freeze), or "cold" and why not warm.
    std::string engine_restore;
    // The container's mount namespace dumped before the freeze and sent
    // ahead (early_mounts.hpp): what became of it at each end; empty if not
    // asked for.
    std::string mounts_early_source, mounts_early_destination;
    uint64_t t_mounts_early_sent = 0; // CLOCK_MONOTONIC; 0: not sent
    // Where CRIU found the cgroup hierarchies at the dump (criu/cgroup_yard.hpp).
    std::string criu_cgroup_yard;
    // A workload whose network moves with it: its links (lib/netlink), which
    // the copy takes over at its resume; empty if nothing moves. A process
    // tree's routes too: the destination makes its namespace anew.
    std::vector<netlink::link_identity> moving_links;
    std::vector<netlink::ipv4_route> moving_routes;
    bool connections_move = false;      // its TCP connections come along (tcp-established)
    std::string network;                // how its network moved, or why it did not
    size_t held_packets = 0;            // arrived during the freeze, handed to the copy
    size_t held_packets_overflowed = 0; // let go: the hold's bounds were reached
    bool source_removed = false;        // the source container is gone (after the resume)
    uint64_t workload_bytes = 0;        // resident memory of the tree before the freeze
    std::string criu_stop_method;       // hardware breakpoints, or syscall stepping and why
    // Whether each host's idle CPUs polled through the downtime, or why not.
    std::string idle_poll_source, idle_poll_destination;
    criu::lazy_dump_features criu_features; // what the lazy dump asked CRIU for (criu-patches)
    // With --smaps-before-freeze: empty if no call could have changed the
    // VMA flags between CRIU's read and the freeze (proc::vma_flag_watch),
    // else why the source checks them at the commit.
    std::string vma_flags_checked_because;
    // When CRIU had to be killed: what was done and the workload's state.
    std::string recovery;
    bool criu_stuck = false;

    // Moments on this host's monotonic clock, ns; 0 when not reached.
    uint64_t t_start = 0, t_freeze = 0, t_dumped = 0, t_images_sent = 0, t_ready_to_resume = 0;
    uint64_t t_committed = 0, t_resumed = 0, t_transferred = 0, t_finished = 0;
    uint64_t prepare_ns = 0;      // before the freeze: registering memory for the fabric
    uint64_t engine_files_ns = 0; // during the freeze: the writable layer's diff and /dev/shm
    // Reported by Ferry's CRIU plugin and runc shim, placed on this host's
    // clock; 0 when not reported (no plugin). The freeze and resume above
    // come from them when they are there.
    uint64_t t_engine_pause = 0, t_criu_freeze = 0, t_frozen = 0, t_dump_end = 0;
    uint64_t t_plugin_resumed = 0;
    // Destination phases, on its clock.
    uint64_t dest_images_check_ns = 0, dest_lazy_start_ns = 0, dest_criu_restore_ns = 0;
    uint64_t dest_engine_settle_ns = 0; // engine restores: resume -> engine command done

    uint64_t images_bytes = 0;
    uint32_t image_files = 0;
    uint64_t source_pages_total = 0;
    uint64_t source_pages_served = 0;
    uint64_t source_bytes_sent = 0;
    uint64_t source_serve_cpu_ns = 0; // the source daemon's page-serving threads
    transfer_summary transfer;

    // Pool mode.
    std::string pool;
    bool handed_off = false; // the source ended once the pool held every page
    std::string handoff_error;
    bool handoff_cancelled = false; // the destination had every page before the push ended
    uint64_t t_handed_off = 0;
    uint64_t pool_push_ns = 0;
    uint64_t pool_bytes_stored = 0;
    uint64_t pool_pages_pushed = 0;

    [[nodiscard]] double downtime_ms() const noexcept;
    [[nodiscard]] double total_ms() const noexcept;
};

// Set by the CLI's SIGINT/SIGTERM handler. Before the commit the migration
// aborts (the source resumes); after it, the migration finishes regardless.
void request_interrupt() noexcept;
[[nodiscard]] bool interrupt_requested() noexcept;

// Runs one migration. Never throws for a migration failure: the result says
// what went wrong and whether the source still runs. `report` gets it before
// the migration's state is torn down (CRIU reaped, perf counters closed,
// connections closed), so that a slow teardown never hides the outcome.
migration_result migrate(const migrate_options& opt,
                         const std::function<void(const migration_result&)>& report = {});

} // namespace ferry::migrator
