// One incoming migration on one connection from the migrator (incoming.hpp).
// Its steps, a file each:
//   incoming.cpp        the prepare, the images, run()
//   lazy_child.cpp      the lazy-pages child: start, reports, the post-copy relay
//   restore_criu.cpp    restoring a process tree through CRIU's RPC
//   restore_engine.cpp  restoring a container through its engine
//   commit_gate.cpp     asking the migrator whether the tasks may resume
//   moving_network.cpp  a workload whose addresses and connections move
// Internal to the daemon.
#pragma once

#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "core/unique_fd.hpp"
#include "criu/criu_deadlines.hpp"
#include "criu/criu_rpc.hpp"
#include "daemon.hpp"
#include "engine_restore.hpp"
#include "netlink/announce.hpp"
#include "netlink/ipv6_silence.hpp"
#include "netlink/link_identity.hpp"
#include "netlink/links.hpp"
#include "netlink/moving_link_wire.hpp"
#include "netlink/packet_inject.hpp"
#include "sys/idle_poll.hpp"
#include "sys/subprocess.hpp"
#include "wire/control.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ferry::pagesrv {

inline constexpr auto control_timeout = std::chrono::seconds(30);

// The lazy-pages child of a session and the sockets it reports on
// (lazy_child.cpp).
struct lazy_child {
    child_process proc;
    unique_fd report; // control frames from the child
    unique_fd keeper; // duplicates of the restored tasks' uffds
    std::vector<unique_fd> held_uffds;
    // Its final statistics, when every page went in before CRIU resumed
    // the tasks (a small workload, pulled from post-restore on): relayed
    // once they run, and the report socket is not watched after it.
    control::envelope_ptr early_final;
    bool told_tasks_run = false;
    [[nodiscard]] int report_to_watch() const noexcept { return early_final ? -1 : report.get(); }

    // Takes the uffd duplicates the child has sent so far.
    void take_uffds();
};

class incoming_session {
  public:
    incoming_session(daemon& d, net::stream& conn, const FerryControl__IncomingPrepare& prepare)
        : _d(d), _conn(conn), _id(prepare.migration_id),
          _source(prepare.source_addr ? prepare.source_addr : ""),
          _fabric(prepare.fabric && *prepare.fabric ? prepare.fabric : "tcp"),
          _pool(prepare.pool ? prepare.pool : ""), _engine(prepare.engine ? prepare.engine : ""),
          _container(prepare.container_name ? prepare.container_name : ""),
          _container_image(prepare.container_image ? prepare.container_image : ""),
          _container_config(prepare.has_container_config
                                ? std::vector<uint8_t>(prepare.container_config.data,
                                                       prepare.container_config.data +
                                                           prepare.container_config.len)
                                : std::vector<uint8_t>()),
          _moving_links(netlink::from_messages(prepare.moving_links, prepare.n_moving_links)),
          _connections_move(prepare.has_connections_move && prepare.connections_move),
          _moving_routes(netlink::from_messages(prepare.moving_routes, prepare.n_moving_routes)),
          _log(make_logger("pagesrv", _id)) {
        _idle_poll_asked = prepare.has_idle_poll && prepare.idle_poll;
        _progress_asked = prepare.has_restore_progress && prepare.restore_progress;
        _precopy = prepare.has_precopy && prepare.precopy;
        _deadline_scale =
            prepare.has_deadline_scale && prepare.deadline_scale > 0 ? prepare.deadline_scale : 1.0;
        _deadlines = criu::deadlines::for_memory(
            prepare.has_workload_bytes ? prepare.workload_bytes : 0, _deadline_scale);
        const auto method =
            d.criu_stop_method(prepare.has_no_hw_breakpoints && prepare.no_hw_breakpoints);
        if (!method.criu_env.empty())
            _criu_env.push_back(method.criu_env);
        // CRIU's own FI_POST_RESTORE (6): its restore fails with the tasks
        // made, just before post-restore. CRIU takes one fault at a time.
        else if (fault_injected(fault::criu_fail_before_post_restore))
            _criu_env.push_back("CRIU_FAULT=6");
    }

    // A container reserved here that never ran is removed; one that runs
    // is the engine's. The plugin's moments of this migration are done with.
    ~incoming_session() {
        stop_warm_restore("the migration ended before the images came");
        // A CRIU still waiting for the images ends at once, before ~service
        // waits for it to exit.
        _criu_go.reset();
        if (_engine_restore && _resumed)
            _engine_restore->release();
        else if (_engine_restore)
            _engine_restore->remove();
        // Empty unless the engine's record stands (a container that could
        // not be removed): the daemon's next start removes it then.
        std::error_code ec;
        if (!_record_dir.empty())
            std::filesystem::remove(_record_dir, ec);
        _d.criu_events().forget(_id);
    }

    void run();
    // Every page arrived and the restored tree runs on.
    [[nodiscard]] bool transferred() const noexcept { return _transferred; }
    // Once the session is over the images are of no use; the logs stay
    // (the newest sessions' only: kept_logs.hpp).
    void discard_images() noexcept;

  private:
    void prepare();
    void check_prepare();
    bool receive_images();
    bool start_lazy_pages();
    void let_lazy_pages_pull_ahead() noexcept;
    void tell_lazy_pages_tasks_run() noexcept;
    void tell_lazy_pages_discarded(const std::string& why) noexcept;
    std::optional<std::string> relay_final_stats(const control::envelope& e);
    bool restore();
    bool restore_with_engine();
    void start_warm_restore(const FerryControl__IncomingWarm& warm);
    // The mount tree built while the warm restore waits (mounts_early.cpp).
    [[nodiscard]] bool builds_mounts_early() const;
    void take_mounts_early(const FerryControl__IncomingMounts& mounts) noexcept;
    [[nodiscard]] std::string mounts_early_outcome() const;
    std::filesystem::path wait_for_warm_shim(); // returns runc's bundle
    void stop_warm_restore(const std::string& why) noexcept;
    bool engine_restore_failed(const std::string& why, bool tasks_ran);
    void report_resumed(uint64_t restore_ns, std::optional<uint64_t> engine_settle_ns);
    void spawn_lazy_pages();
    void relay_transfer();
    // A failed transfer_stats to the migrator (best effort: it may be gone).
    void send_transfer_failure(const std::string& why);
    std::optional<std::string> relay_until_final_stats();
    std::optional<std::string> lazy_report_before_resume();
    bool ask_to_resume();
    bool cancel_restore(criu::service& criu, const std::string& why);
    void start_criu_restore();
    void send_criu_restore_request(int wait_fd);
    bool restore_with_criu();
    void send_restore_failure(const std::string& why);
    // restore_progress to the migrator, if it asked, at most once per
    // restore_progress_interval: called from the restore's wait loops, so
    // that it stops when they do. Best effort (the migrator may be gone).
    void report_progress(const char* step) noexcept;
    void kill_restored(const std::string& why);
    void quiet_copy_network(const std::filesystem::path& bundle);
    void make_copy_netns();
    void quiet_netns(const std::filesystem::path& netns);
    void open_copy_sockets(const std::filesystem::path& netns);
    void begin_taking_macs() noexcept;
    void finish_taking_macs(bool before_resume) noexcept;
    void take_over_network(pid_t root) noexcept;
    void deliver_held_packets(const FerryControl__HeldPackets& held) noexcept;
    void receive_held_packets() noexcept;

    daemon& _d;
    net::stream& _conn;
    std::string _id;
    std::string _source;
    std::string _fabric;
    std::string _pool;               // pool mode: the pool_spec lazy-pages reads from
    std::string _engine, _container; // a container, restored through its engine
    std::string _container_image;
    std::vector<uint8_t> _container_config;
    std::unique_ptr<engines::engine_restore> _engine_restore;
    // A warm restore (restore_engine.cpp): the gate, the engine's command
    // started before the freeze, and its shim's wait for the images.
    unique_fd _gate;
    std::optional<child_process> _warm_cmd;
    unique_fd _warm_shim;
    bool _mounts_early_given = false;  // the waiting CRIU was told to build them
    std::string _mounts_early_refused; // why incoming_mounts were not used
    // A network that moves with the workload (moving_network.cpp): the
    // source's links, and the copy's arp_ignore before it was silenced.
    std::vector<netlink::link_identity> _moving_links;
    bool _connections_move = false;
    // A process tree's: the routes its namespace had, and the namespace
    // made for it here, which CRIU restores it into.
    std::vector<netlink::ipv4_route> _moving_routes;
    unique_fd _copy_netns;
    struct arp_settings {
        int ignore = 0;
        int notify = 0;
    };
    std::map<std::string, arp_settings> _arp_before; // the copy's, per link, before the quiet step
    bool _held_packets_done = false; // the migrator's last batch came (or never will)
    bool _copy_quiet = false;        // the copy has the source's addresses, unannounced
    // Sockets inside the copy's namespace, from the quiet step to the end.
    std::unique_ptr<netlink::link_control> _copy_links;
    std::unique_ptr<netlink::announcer> _copy_announcer;
    unique_fd _copy_injector; // netlink/packet_inject.hpp
    // Each moving link's IPv6, off while the copy is quiet; if it cannot be
    // turned off, the copy takes the MACs only at the takeover.
    std::vector<netlink::conf_override> _copy_ipv6;
    bool _ipv6_loud = false;
    // Gives the quiet copy the source's MACs while the migrator decides, on
    // a thread of its own (std::async: waited for before the gate's answer,
    // at the takeover, or here, before what it uses goes); get() rethrows
    // its failure.
    std::future<void> _taking_macs;
    uint64_t _mac_wait_ns = 0;   // how long the gate's answer waited for it
    std::string _mac_change_rcu; // the expedited grace periods' hold, as it ended
    std::shared_ptr<spdlog::logger> _log;
    // The session's directory on tmpfs (images, CRIU's and lazy-pages'
    // logs, sockets), and the one on disk for the engine's reservation
    // record, which must outlive a reboot.
    std::filesystem::path _dir;
    std::filesystem::path _record_dir;
    lazy_child _lazy;
    std::optional<criu::service> _criu; // started at prepare, used for the restore
    unique_fd _criu_images_dir;         // the restore request's images dir, for CRIU to open
    unique_fd _criu_go; // a byte lets the waiting CRIU restore; closing it calls CRIU off
    pid_t _root_pid = -1;
    bool _resumed = false;
    // Why the gate refused the resume, if it did: the restore's failure
    // that follows says so first.
    std::string _resume_refused;
    bool _transferred = false;
    criu::deadlines _deadlines;         // the restore's, grown with the workload
    double _deadline_scale = 1.0;       // the migration's --deadline-scale
    bool _precopy = false;              // lazy-pages stages the source's pre-copy
    std::vector<std::string> _criu_env; // CRIU_FAULT=130 where breakpoints do not trap
    uint64_t _images_check_ns = 0;
    uint64_t _lazy_start_ns = 0;
    // This host's idle CPUs poll from the prepare to the resume, and again
    // through the post-copy, if the migrator asked and this daemon allows it.
    bool _idle_poll_asked = false;
    std::unique_ptr<idle_poll::hold> _idle_poll;
    bool _idle_poll_post_copy = false; // _idle_poll is the post-copy's hold
    bool _progress_asked = false;      // the migrator wants restore_progress
    uint64_t _t_images_ns = 0;         // the first frame of images arrived
    uint64_t _last_progress_ns = 0;    // restore_progress last sent (or the images came)
    void release_idle_poll() noexcept;
    void renew_downtime_hold() noexcept;
    void hold_idle_poll_through_post_copy() noexcept;
};

} // namespace ferry::pagesrv
