// pagesrv's daemon: accepts connections and hands each to its role by the
// first control frame it carries.
//   outgoing_register  -> source role: a migrator's session for a migration
//   page_channel_open  -> source role: a destination's page channel
//   incoming_prepare   -> destination role: receive images, restore, serve
#pragma once

#include "core/unique_fd.hpp"
#include "criu_events.hpp"
#include "frozen_vmas.hpp"
#include "metrics.hpp"
#include "object_access.hpp"
#include "outgoing.hpp"
#include "pool_rdma.hpp"
#include "pool_store.hpp"
#include "precopy_source.hpp"
#include "sys/expedited_rcu.hpp"
#include "sys/host_tools.hpp"
#include "sys/hw_breakpoints.hpp"
#include "sys/idle_cpu_group.hpp"
#include "sys/net.hpp"
#include "tls/credentials.hpp"
#include "wire/control.hpp"

#include <spdlog/logger.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace ferry::pagesrv {

struct daemon_config {
    net::endpoint listen;
    // On disk: the engines' reservation records (state_dir/incoming/ID),
    // which must outlive a reboot, and a pool node's tier.
    std::filesystem::path state_dir;
    // On tmpfs: each incoming migration's images, CRIU's restore and the
    // logs (work_dir/ID). Its files are made inside the downtime, and on
    // ext4 each new inode cost ~0.1 ms here.
    std::filesystem::path work_dir;
    std::chrono::seconds drain_timeout{30};
    std::optional<pool_store_config> pool; // the pool role, if this host is a pool node
    bool pool_rdma = false;                // ... whose arena clients may READ over RDMA
    // CRIU restores step through syscalls even where hardware breakpoints
    // trap (lib/hw_breakpoints.hpp); a migrator can ask for it too.
    bool no_hw_breakpoints = false;
    host_tools tools; // the programs it runs (CRIU, lazy-pages, engines)
    // Who this daemon is, and whom it takes control from (lib/tls).
    tls::credentials_ptr credentials;
    tls::peer_policy peers;
    // Connections at once, authenticated or not; more are closed at once.
    size_t max_connections = 256;
    // IP:PORT for Prometheus' /metrics (empty: none).
    std::string metrics_listen;
    // The link a moving process tree's macvlan links sit on here (empty:
    // the same name as on the source host).
    std::string macvlan_parent;
    // Set favordynmods on a cgroup mount at start, so that a container's
    // restore does not wait for an RCU grace period to move its task into
    // its cgroups (lib/sys/cgroup_task_moves.hpp). Host-wide until the next
    // boot, so only when asked.
    bool favor_cgroup_moves = false;
    // Set this network namespace's child socket table sizes at start, so
    // that CRIU lists a container's sockets from its own small tables
    // (lib/sys/netns_socket_tables.hpp). Every namespace created here from
    // then on gets them, so only when asked.
    bool own_netns_socket_tables = false;
    // Refuse migrators' requests to keep this host's idle CPUs polling
    // through a restore (lib/sys/idle_poll.hpp).
    bool no_idle_poll = false;
    // Never make the host's RCU grace periods expedited while a moving
    // network's copy takes the source's MACs (lib/sys/expedited_rcu.hpp).
    bool no_expedited_rcu = false;
};

class daemon {
  public:
    explicit daemon(daemon_config cfg);
    ~daemon();

    // Serves until SIGTERM or SIGINT, then drains and returns.
    void run();

    [[nodiscard]] const daemon_config& config() const noexcept { return _cfg; }
    [[nodiscard]] const std::string& criu_version() const noexcept { return _criu_version; }
    // How the CRIU of a restore stops its tasks; `forced`: the migrator
    // asked for syscall stepping.
    [[nodiscard]] hw_breakpoints::criu_stop_method criu_stop_method(bool forced) const;
    // What the CRIU plugin and the runc shim report on this host.
    [[nodiscard]] criu_event_log& criu_events() noexcept { return _criu_events; }
    // Null unless --metrics was given.
    [[nodiscard]] daemon_metrics* metrics() noexcept { return _metrics.get(); }
    // /sys/kernel/rcu_expedited, with the value a hold found kept in the
    // state dir.
    [[nodiscard]] expedited_rcu::knob rcu_knob() const;

  private:
    struct connection {
        unique_fd accepted;                // until the thread takes it
        std::shared_ptr<net::stream> conn; // TLS over it, set under _mutex
        std::thread thread;
        bool done = false;
    };

    void serve_connection(connection& c);
    void serve_authenticated(net::stream& conn);
    void serve_page_channel(net::stream& conn, const FerryControl__PageChannelOpen& open);
    void serve_page_holes(net::stream& conn, outgoing_migration& m);
    void serve_precopy_channel(net::stream& conn, const FerryControl__PageChannelOpen& open);
    // True if the peer is the destination the migrator named for migration
    // `id`; else the refusal is logged and sent.
    static bool from_destination(net::stream& conn, spdlog::logger& log, const std::string& id,
                                 const std::string& destination);
    // A migration's pre-copy, findable by its destination's PRECOPY channel
    // for the lifetime of this mark; at its end the pre-copy stops.
    class precopy_mark {
      public:
        precopy_mark(daemon& d, std::shared_ptr<precopy_source> p);
        ~precopy_mark();
        precopy_mark(const precopy_mark&) = delete;
        precopy_mark& operator=(const precopy_mark&) = delete;
        [[nodiscard]] precopy_source& source() const noexcept { return *_p; }

      private:
        daemon& _d;
        std::shared_ptr<precopy_source> _p;
    };
    enum class hole_part { small, last };
    void send_holes(net::stream& conn, const outgoing_migration::holes_result& r, hole_part part);
    // Marks a migration as prepared but not yet registered, for its lifetime.
    class preparing_mark {
      public:
        preparing_mark(daemon& d, std::string id);
        ~preparing_mark();
        preparing_mark(const preparing_mark&) = delete;
        preparing_mark& operator=(const preparing_mark&) = delete;

      private:
        daemon& _d;
        std::string _id;
    };
    // The registration frame, and what the fabric did before the freeze.
    struct prepared_outgoing {
        control::envelope_ptr frame;
        std::unique_ptr<transport::source_state> fabric_state;
        std::unique_ptr<preparing_mark> preparing; // until registered
        // The migrator sends migrator_alive until its commit: its silence
        // for this long ends the migration (none: an older migrator).
        std::optional<std::chrono::milliseconds> migrator_silence;
        std::unique_ptr<precopy_mark> precopy; // --precopy: frozen at the registration
    };
    prepared_outgoing prepare_outgoing(net::stream& conn,
                                       const FerryControl__OutgoingPrepare& prep);
    // The migrator fell silent before it registered: whatever CRIU it
    // started is killed and the tree released, and the migrator told so
    // (should it wake). Throws to end the connection.
    [[noreturn]] void release_unregistered(net::stream& conn,
                                           const FerryControl__OutgoingPrepare& prep,
                                           bool frozen_before, std::chrono::milliseconds silence);
    std::unique_ptr<precopy_mark> start_precopy(const FerryControl__OutgoingPrepare& prep);
    void serve_outgoing(net::stream& conn, prepared_outgoing first);

    // The registered migration `id`. A destination opens its channels as
    // soon as it is prepared, before the freeze, so it may come first: wait
    // up to `wait` for the registration, and while the migration is being
    // prepared here (its dump is running), up to `while_preparing`.
    std::shared_ptr<outgoing_migration> find_outgoing(const std::string& id,
                                                      std::chrono::milliseconds wait,
                                                      std::chrono::milliseconds while_preparing);
    void make_cgroup_task_moves_fast();
    void give_netns_socket_tables();
    void reap_finished_connections();
    void drain();

    unique_fd _signals; // SIGTERM and SIGINT, blocked in every thread
    daemon_config _cfg;
    // Where background channels' threads run (lib/sys/idle_cpu_group.hpp).
    proc::idle_cpu_group _background_cpu;
    std::shared_ptr<spdlog::logger> _log;
    std::string _criu_version;
    hw_breakpoints::probe_outcome _breakpoints = hw_breakpoints::probe_outcome::probe_failed;
    unique_fd _listener;
    std::unique_ptr<pool_store> _pool;
    std::unique_ptr<pool_rdma_export> _pool_rdma; // after _pool: its MRs point into the arena
    object_access _pool_access;                   // which peers each pooled object belongs to
    std::unique_ptr<daemon_metrics> _metrics;
    criu_event_log _criu_events;

    std::mutex _mutex;
    std::condition_variable _registry_changed;
    std::map<std::string, std::shared_ptr<outgoing_migration>> _outgoing;
    std::multiset<std::string> _preparing; // prepared, registration awaited
    std::map<std::string, std::shared_ptr<precopy_source>> _precopies;
    std::list<connection> _connections;
    uint64_t _refused_connections = 0;
};

} // namespace ferry::pagesrv
