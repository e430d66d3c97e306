#include "migration.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/criu_features.hpp"
#include "criu/criu_image.hpp"
#include "criu/criu_page_server.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/workload_release.hpp"
#include "netlink/links.hpp"
#include "netlink/moving_link_wire.hpp"
#include "netlink/netns.hpp"
#include "pool/pool_client.hpp"
#include "sys/hw_breakpoints.hpp"
#include "sys/net.hpp"
#include "sys/proc.hpp"
#include "tls/tls_stream.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <vector>

namespace ferry::migrator {

namespace {

std::atomic<bool> interrupted{false};

} // namespace

void check_interrupt() {
    if (interrupted.load())
        throw error("interrupted");
}

namespace {

std::string new_migration_id() {
    std::random_device rd;
    std::uniform_int_distribution<uint32_t> d;
    return fmt::format("{:08x}{:08x}{:08x}{:08x}", d(rd), d(rd), d(rd), d(rd));
}

// A named volume lives in the source engine's storage; the destination
// engine would mount an empty one of that name and the data would be lost.
void refuse_named_volumes(const std::vector<std::string>& volumes) {
    if (volumes.empty())
        return;
    std::string list;
    for (const auto& v : volumes)
        list += (list.empty() ? "" : ", ") + v;
    throw error(fmt::format("the container mounts named volumes ({}), which Ferry does not move "
                            "yet; use bind mounts of storage both hosts share",
                            list));
}

} // namespace

// A process counts as running if it exists, is not a zombie, and is not
// stopped by a tracer (CRIU's freeze).
bool process_running(pid_t pid) {
    const auto st = proc::state(pid);
    return st && *st != 'Z' && *st != 'X' && *st != 't' && *st != 'T';
}

bool process_gone(pid_t pid) {
    const auto st = proc::state(pid);
    return !st || *st == 'Z' || *st == 'X';
}

migration::migration(const migrate_options& opt) : _opt(opt), _log(make_logger("migrator")) {
    _r.id = new_migration_id();
    _r.mode = opt.mode;
    _r.park_name = opt.park_name;
    _r.source_pid = opt.pid;
    _r.fabric = opt.fabric.to_string();
    _r.engine = opt.engine;
    _r.container = opt.container;
    if (opt.pool)
        _r.pool = opt.pool->to_string();
    _deadlines = criu::deadlines::for_memory(0, opt.deadline_scale);
}

// The record `migrator status` reads. Failing to write it never fails the
// migration.
void migration::set_phase(const char* phase) {
    if (_rec.id.empty()) {
        _rec.id = _r.id;
        _rec.mode = to_string(_opt.mode);
        _rec.migrator_pid = ::getpid();
        _rec.migrator_start = proc::start_time(::getpid());
        _rec.container = _opt.container;
        _rec.engine = _opt.engine;
        _rec.destination = _opt.destination.to_string();
        _rec.local_daemon = _opt.local_daemon.to_string();
        _rec.started_unix_ms = records::now_unix_ms();
    }
    _rec.source_pid = _opt.pid;
    _rec.phase = phase;
    _rec.phase_since_unix_ms = records::now_unix_ms();
    _rec.committed = _r.committed || _committing;
    _rec.cgroup_was_frozen = _cgroup_was_frozen;
    _rec.work_dir = _dir.string();
    try {
        records::write(_rec);
    } catch (const std::exception& e) {
        _log->debug("cannot record the migration's phase: {}", e.what());
    }
}

void migration::check_source() {
    if (!_opt.engine.empty()) {
        _source = engines::find(_opt.engine).open_source(_opt.container, _opt.tools);
        _container = &_source->info();
    }
    if (_container) {
        if (!_container->running || _container->paused || _container->pid <= 0)
            throw error(fmt::format("container '{}' is not running", _opt.container));
        refuse_named_volumes(_container->named_volumes);
        _opt.pid = _container->pid;
    }
    _r.source_pid = _opt.pid;
    const auto pids = proc::ns_pids(_opt.pid);
    if (pids.empty())
        throw error(fmt::format("no process with pid {}", _opt.pid));
    if (pids.size() < 2 || pids.back() != 1)
        throw error(fmt::format(
            "pid {} is not the init of its own PID namespace; Ferry migrates a process tree "
            "in its own PID namespace (as containers run)",
            _opt.pid));
    if (!process_running(_opt.pid))
        throw error(fmt::format("pid {} is not running (stopped, traced or a zombie)", _opt.pid));
    if (_opt.mode == migrate_mode::migrate)
        decide_network();
    // A paused workload is not Ferry's to thaw, and CRIU would thaw it.
    _cgroup_was_frozen = criu::cgroup_frozen(_opt.pid);
    if (_cgroup_was_frozen)
        throw error(
            fmt::format("pid {} is in a frozen (paused) cgroup; resume it first", _opt.pid));
    for (const pid_t p : proc::tree(_opt.pid))
        _r.workload_bytes += proc::memory_bytes(p);
    _deadlines = criu::deadlines::for_memory(_r.workload_bytes, _opt.deadline_scale);
    // Whether CRIU may stop the tasks with hardware breakpoints: if they do
    // not trap here, CRIU would hang in its parasite's cure.
    const auto method = hw_breakpoints::decide(hw_breakpoints::probe(), _opt.no_hw_breakpoints,
                                               _opt.tools.criu_fault);
    _r.criu_stop_method = method.reason;
    if (!method.criu_env.empty())
        _criu_env.push_back(method.criu_env);
    _log->debug("CRIU stops tasks by {}", method.reason);
    // Ferry reads lazy pages from the frozen tasks, so CRIU need not park
    // them, nor scan which exist, nor walk page tables for VMA flags while
    // the tasks are frozen: then the freeze does not grow with memory.
    auto& f = _r.criu_features;
    f = criu::lazy_dump_features::probe(_opt.tools.criu);
    if (!f.pagemap_only || !f.whole_vmas || !f.smaps_before_freeze)
        _log->info("{} lacks some of Ferry's CRIU patches (examples/criu-patches 0004-0006): "
                   "the freeze grows with memory",
                   _opt.tools.criu);
    if (_opt.pool || _opt.mode != migrate_mode::migrate) {
        // The pool stores every lazy page and parks images for later: it
        // needs the exact pagemap, and parking has no commit to check at.
        f.whole_vmas = false;
        if (_opt.mode != migrate_mode::migrate)
            f.smaps_before_freeze = false;
    }
}

// A workload with a network namespace of its own on networks that span the
// hosts takes its addresses and MACs along, and with them its TCP
// connections: the destination's copy gets the same addresses and takes
// over the MACs when it resumes. Elsewhere nothing can move: in the host's
// namespace the addresses are the host's, and behind a host's NAT bridge
// they mean nothing on another host. Established connections there need
// --tcp-close. A container's networks are its engine's to say; a process
// tree's links are macvlan links on a host link (the destination makes them
// anew on its link of that name).
void migration::decide_network() {
    if (_opt.tcp_close) {
        _r.network = "connections closed (--tcp-close)";
        return;
    }
    if (!netlink::has_own_netns(_opt.pid)) {
        _r.network = "the host's: nothing moves (established connections need --tcp-close)";
        return;
    }
    if (_container) {
        std::string local;
        for (const auto& n : _container->networks)
            if (!n.can_move())
                local += fmt::format("{}{} ({})", local.empty() ? "" : ", ", n.name, n.driver);
        if (!local.empty()) {
            _r.network = fmt::format("{}: host-local, nothing moves (established connections "
                                     "need --tcp-close)",
                                     local);
            return;
        }
    }
    read_moving_links();
    _r.connections_move = true;
    _r.network = _r.moving_links.empty()
                     ? "its own, loopback only: connections move"
                     : "moves with its connections: " + netlink::describe(_r.moving_links);
    for (const auto& route : _r.moving_routes)
        _r.network += "; " + netlink::to_string(route);
}

std::chrono::milliseconds migration::scaled_silence(std::chrono::seconds silence) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        silence * std::max(1.0, _opt.deadline_scale));
}

// `source_addr` is empty when there is no source (a parked workload).
void migration::connect_destination(const std::string& source_addr) {
    try {
        _dest = tls::connect(_opt.destination, _opt.credentials, connect_timeout);
        if (!net::fail_when_peer_silent(_dest->fd(), scaled_silence(destination_host_silence)))
            _log->warn("cannot set keepalive on the destination's connection: {}",
                       std::strerror(errno));
        // The restore's result is timed by its arrival, not by when this
        // process got to read it (resume.cpp).
        (void)_dest->time_receipts();
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot reach the destination daemon: {}", e.what()));
    }
    FerryControl__IncomingPrepare prep = FERRY_CONTROL__INCOMING_PREPARE__INIT;
    prep.migration_id = const_cast<char*>(_r.id.c_str());
    prep.source_addr = const_cast<char*>(source_addr.c_str());
    const std::string fabric = _opt.fabric.to_string();
    prep.fabric = const_cast<char*>(fabric.c_str());
    prep.pool = _r.pool.empty() ? nullptr : const_cast<char*>(_r.pool.c_str());
    prep.has_workload_bytes = true;
    prep.workload_bytes = _r.workload_bytes;
    prep.has_deadline_scale = true;
    prep.deadline_scale = _opt.deadline_scale;
    prep.has_no_hw_breakpoints = true;
    prep.no_hw_breakpoints = _opt.no_hw_breakpoints;
    prep.has_idle_poll = true;
    prep.idle_poll = _opt.idle_poll;
    prep.has_restore_progress = true;
    prep.restore_progress = true;
    _r.precopy.asked = _opt.precopy && _opt.mode == migrate_mode::migrate;
    prep.has_precopy = true;
    prep.precopy = _r.precopy.asked;
    netlink::moving_link_messages links(_r.moving_links);
    prep.n_moving_links = links.pointers.size();
    prep.moving_links = links.pointers.data();
    prep.has_connections_move = true;
    prep.connections_move = _r.connections_move;
    netlink::moving_route_messages routes(_r.moving_routes);
    prep.n_moving_routes = routes.pointers.size();
    prep.moving_routes = routes.pointers.data();
    if (_container) {
        prep.engine = const_cast<char*>(_opt.engine.c_str());
        prep.container_name = const_cast<char*>(_container->name.c_str());
        prep.container_image = const_cast<char*>(_container->image.c_str());
        _container_config = _source->config_for_prepare();
        if (!_container_config.empty()) {
            prep.has_container_config = true;
            prep.container_config.data = _container_config.data();
            prep.container_config.len = _container_config.size();
        }
    }
    control::send_message(*_dest, prep, net::after(control_timeout));
    auto ok = control::receive(*_dest, net::after(control_timeout));
    control::expect(ok.get(), FERRY_CONTROL__ENVELOPE__BODY_PREPARE_OK,
                    "destination " + _opt.destination.to_string());
    // Both CRIUs must know the lock's method: the images carry it. Only a
    // container's network namespace gains: for a process tree in the host's
    // namespace iptables mode runs nothing, while nftables mode sets up and
    // removes its table (3 ms at the dump, 10 ms before the resume here).
    const auto& p = *ok->prepare_ok;
    auto& f = _r.criu_features;
    _destination_starts_warm = p.has_starts_warm && p.starts_warm;
    _destination_builds_mounts = p.has_builds_mounts_early && p.builds_mounts_early;
    _destination_reports_progress = p.has_reports_restore_progress && p.reports_restore_progress;
    _r.idle_poll_destination =
        p.idle_poll ? p.idle_poll : "not asked for: the destination's daemon predates it";
    const bool own_netns = _container || _source_netns;
    _r.criu_features.network_lock_nftables =
        own_netns && p.has_restores_nftables_lock && p.restores_nftables_lock &&
        criu::supports_feature(_opt.tools.criu, "network_lock_nftables");
    // No lock where no connection moves: with --tcp-close, or with no TCP
    // socket at all in the workload's network namespace.
    if (_container && _opt.tcp_close) {
        f.network_lock_skip = true;
        f.network_lock_skip_because = "tcp-close: no connection moves";
    } else if (own_netns && proc::tcp_sockets(_opt.pid) == size_t(0)) {
        f.network_lock_skip = true;
        f.network_lock_skip_because = "no TCP socket in the workload's network namespace";
    }
}

void migration::connect_local_daemon() {
    const std::string fabric = _opt.fabric.to_string();
    try {
        _src = tls::connect(_opt.local_daemon, _opt.credentials, connect_timeout);
    } catch (const std::exception& e) {
        throw error(
            fmt::format("cannot reach the local daemon (the source pagesrv): {}", e.what()));
    }
    // Let the source daemon register memory for the fabric while the tree
    // still runs (for shm it allocates the region), not during the downtime.
    const uint64_t t0 = monotonic_ns();
    FerryControl__OutgoingPrepare prep_src = FERRY_CONTROL__OUTGOING_PREPARE__INIT;
    prep_src.migration_id = const_cast<char*>(_r.id.c_str());
    prep_src.root_pid = _opt.pid;
    prep_src.fabric = const_cast<char*>(fabric.c_str());
    if (_opt.mode == migrate_mode::migrate) {
        // Should this process stop or hang before the commit, the source
        // daemon resumes the source itself rather than leave it frozen.
        const auto silence = fault_injected(fault::short_heartbeat_silence)
                                 ? std::chrono::milliseconds(control::migrator_heartbeat_floor)
                                 : scaled_silence(control::migrator_heartbeat_silence);
        prep_src.has_heartbeat_silence_ms = true;
        prep_src.heartbeat_silence_ms = uint32_t(silence.count());
        prep_src.has_deadline_scale = true;
        prep_src.deadline_scale = _opt.deadline_scale;
        prep_src.has_workload_bytes = true;
        prep_src.workload_bytes = _r.workload_bytes;
    }
    const std::string reader = _dest ? _dest->peer_identity() : "";
    if (_r.precopy.asked) { // connect_destination decided
        prep_src.has_precopy = prep_src.has_precopy_wait_ms = true;
        prep_src.precopy = true;
        prep_src.precopy_wait_ms = uint32_t(_opt.precopy_wait.count());
        prep_src.destination_identity = const_cast<char*>(reader.c_str());
    }
    control::send_message(*_src, prep_src, net::after(control_timeout));
    auto prepared =
        control::receive(*_src, net::after(std::chrono::minutes(2) + _opt.precopy_wait));
    control::expect(prepared.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_PREPARED,
                    "local daemon");
    if (_r.precopy.asked) {
        const auto& p = *prepared->outgoing_prepared;
        auto& pc = _r.precopy;
        pc.wait_ns = monotonic_ns() - t0;
        pc.error = p.precopy_error        ? p.precopy_error
                   : p.has_precopy_rounds ? ""
                                          : "the source daemon predates the pre-copy";
        pc.rounds = p.precopy_rounds;
        pc.tracked_pages = p.precopy_tracked_pages;
        pc.pages_sent = p.precopy_pages_sent;
        pc.last_round_pages = p.precopy_last_round_pages;
        pc.converged = p.precopy_converged;
        if (!pc.error.empty())
            _log->warn("no pre-copy: {}", pc.error);
    }
    _source_watches = prepared->outgoing_prepared->has_watches_heartbeats &&
                      prepared->outgoing_prepared->watches_heartbeats;
    _r.prepare_ns = monotonic_ns() - t0;
}

// From before the freeze: the dump's first steps are part of the downtime's
// chain of wake-ups too.
void migration::take_idle_poll() {
    if (!_opt.idle_poll) {
        _r.idle_poll_source = "off (--no-idle-poll)";
        return;
    }
    _idle_poll = std::make_unique<idle_poll::hold>(idle_poll::downtime_limit);
    if (!_idle_poll->held())
        _log->info("idle CPUs keep halting through the downtime: {}", _idle_poll->state());
}

void migration::release_idle_poll() noexcept {
    if (!_idle_poll)
        return;
    _r.idle_poll_source = _idle_poll->state();
    _idle_poll.reset();
}

migration_result migration::run() {
    _r.t_start = monotonic_ns();
    if (_opt.mode == migrate_mode::unpark) {
        run_unpark();
        return _r;
    }
    try {
        set_phase("preparing");
        check_source();
        set_phase("preparing");
        (void)criu::require_supported_criu(_opt.tools.criu);
        if (_opt.mode == migrate_mode::park) {
            reserve_park_name();
        } else {
            connect_destination(_opt.advertised_source.value_or(_opt.local_daemon).to_string());
        }
        connect_local_daemon();
        check_interrupt();
        hold_packets();
        take_idle_poll();
        start_dump();
        warm_destination();
        {
            const auto t = _dump->wait_dumped();
            _r.t_freeze = t.freeze;
            _r.t_dumped = t.dumped;
        }
        stop_mounts_early();
        settle_vma_flags();
        if (_opt.mode == migrate_mode::park) {
            park();
            release_idle_poll();
            _r.ok = true;
            cleanup();
            return _r;
        }
        // No record write here: the phase stays "freezing" until the images
        // are out ("restoring"). Each write is a file and a rename, 0.2-1 ms
        // where /run is on a disk, and this is the downtime.
        register_with_source();
        send_images(collect_images());
        wait_registered();
        wait_resumed();
        release_idle_poll();
        hand_over_packets(true);
    } catch (const std::exception& e) {
        _r.error = e.what();
        // A source daemon that gave up on this migrator (it was stopped,
        // say) is why any wait failed on waking: its clocks had jumped.
        if (daemon_gave_up() && _r.error != _daemon_verdict) {
            _log->info("after the local daemon gave up: {}", _r.error);
            _r.error = _daemon_verdict;
        }
        _log->warn("the migration failed ({}): {}", _rec.phase, _r.error);
        stop_mounts_early(); // its thread may be using _dest
        const bool may_abort = !_r.committed || _destination_never_ran;
        if (may_abort) {
            // Whatever the destination restored must not resume: without its
            // migrator it refuses, and kills the copy, at once.
            _dest.reset();
            try {
                abort_source(_r.error);
            } catch (const std::exception& ex) {
                // Never leave the source frozen because the abort itself failed.
                _log->error("the abort failed ({}): releasing the source", ex.what());
                release_source(false);
            }
        }
        // Committed, the source's daemon resumes it itself once the
        // destination says it killed its copy before it ran (this migrator
        // may have been stopped past the gate's patience).
        _r.source_running = criu::inspect_workload(_opt.pid).running();
        if (!may_abort && _r.source_running)
            _log->warn("the source runs again: the destination killed its copy before it ran");
        release_idle_poll();
        if (_record_stored && !_r.committed)
            drop_record(*_opt.pool, _opt.park_name);
        cleanup();
        return _r;
    }
    try {
        set_phase("post-copy");
        wait_transfer();
        if (_handoff_pending) {
            // The post-copy ended before the push: the pool copy is of no
            // use any more. The daemon stops the push, drops it and answers
            // the hand-off request (or has answered it: the push was over).
            _handoff_pending = false;
            cancel_handoff();
            handle_handoff(net::after(handoff_cancel_limit));
        }
        if (!_r.handed_off)
            finish_source();
        remove_source_links();
        _r.ok = true;
        if (_container)
            _r.source_removed = _dump->remove_source();
        if (!process_gone(_opt.pid))
            _log->warn("source pid {} is still present after the dump ended", _opt.pid);
    } catch (const std::exception& e) {
        _r.error = e.what();
    }
    cleanup();
    return _r;
}

const char* to_string(migrate_mode m) noexcept {
    switch (m) {
    case migrate_mode::park:
        return "checkpoint";
    case migrate_mode::unpark:
        return "restore";
    case migrate_mode::migrate:
        break;
    }
    return "migrate";
}

double migration_result::downtime_ms() const noexcept {
    switch (mode) {
    case migrate_mode::park: // frozen until the pool holds it all
        return t_freeze && t_handed_off ? ns_to_ms(t_handed_off - t_freeze) : 0;
    case migrate_mode::unpark: // from the command to the workload running
        return t_start && t_resumed ? ns_to_ms(t_resumed - t_start) : 0;
    case migrate_mode::migrate:
        break;
    }
    return t_freeze && t_resumed ? ns_to_ms(t_resumed - t_freeze) : 0;
}

double migration_result::total_ms() const noexcept {
    const uint64_t end = std::max(t_finished, t_transferred);
    return t_freeze && end ? ns_to_ms(end - t_freeze) : 0;
}

void request_interrupt() noexcept {
    interrupted.store(true);
}

bool interrupt_requested() noexcept {
    return interrupted.load();
}

migration_result migration::escaped(const std::string& what) noexcept {
    _log->error("the migration failed unexpectedly: {}", what);
    try {
        if (_r.error.empty())
            _r.error = what;
        else
            _r.error += fmt::format(" (then: {})", what);
        _r.ok = false;
        if (_opt.mode != migrate_mode::unpark)
            _r.source_running = criu::inspect_workload(_opt.pid).running();
    } catch (const std::exception& e) {
        _log->error("cannot look at the source: {}", e.what());
    }
    return _r;
}

migration_result migrate(const migrate_options& opt,
                         const std::function<void(const migration_result&)>& report) {
    auto m = std::make_unique<migration>(opt);
    // Every path inside run() ends the migration; one that throws anyway
    // must still report, not end the process with std::terminate.
    migration_result result;
    try {
        result = m->run();
    } catch (const std::exception& e) {
        result = m->escaped(e.what());
    }
    if (report)
        report(result);
    const uint64_t t0 = monotonic_ns();
    m.reset();
    if (const double s = ns_to_ms(monotonic_ns() - t0) / 1000; s > 2)
        make_logger("migrator")->warn("tearing the migration down took {:.1f} s", s);
    return result;
}

} // namespace ferry::migrator
