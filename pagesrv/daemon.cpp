#include "daemon.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "criu/criu_deadlines.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/workload_release.hpp"
#include "engine_restore.hpp"
#include "incoming.hpp"
#include "outgoing_session.hpp"
#include "pool_node.hpp"
#include "sys/cgroup_task_moves.hpp"
#include "sys/net.hpp"
#include "sys/netns_socket_tables.hpp"
#include "sys/private_dir.hpp"
#include "sys/sched_policy.hpp"
#include "tls/gcm_engine.hpp"
#include "tls/tls_stream.hpp"
#include "transport/backend.hpp"
#include "transport/request_loop.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>
#include <exception>
#include <functional>
#include <vector>

namespace ferry::pagesrv {

namespace {

// At the top of the cpu hierarchy, shared by the daemons of a host and
// left in place when they stop (an empty group costs nothing; removed,
// another daemon's open group would be gone under it).
constexpr std::string_view background_cpu_group = "ferry-background";

constexpr auto first_frame_timeout = std::chrono::seconds(10);
// How long a page channel waits for its migration's registration: a
// destination opens its channels before the freeze, so while the migration
// is prepared here (its dump runs) it may wait as long as a dump may take.
constexpr auto channel_registration_wait = std::chrono::seconds(10);
constexpr auto channel_registration_wait_while_preparing = std::chrono::minutes(10);
// A peer that has not authenticated by then is dropped.
constexpr auto handshake_timeout = std::chrono::seconds(5);
// A connection whose peer host stops answering (down, or cut off) fails
// after this: the thread serving it, and the migration it holds, are freed.
// Long enough for a software-emulated guest's stalls.
constexpr auto peer_host_silence = std::chrono::seconds(30);

unique_fd block_stop_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    // Every thread inherits this mask, so only the signalfd sees the signals.
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr))
        throw sys_error("pthread_sigmask");
    unique_fd fd(::signalfd(-1, &set, SFD_CLOEXEC));
    if (!fd)
        throw sys_error("signalfd");
    return fd;
}

} // namespace

// The stop signals are blocked first: every thread started from here on
// (the metrics server's among them) inherits the mask, so only the
// signalfd sees SIGTERM and the daemon drains instead of dying.
daemon::daemon(daemon_config cfg)
    : _signals(block_stop_signals()), _cfg(std::move(cfg)), _log(make_logger("pagesrv")) {
    std::filesystem::create_directories(_cfg.state_dir / "incoming");
    make_private_dir(_cfg.work_dir);
    engines::remove_stale_reservations(_cfg.state_dir / "incoming", _cfg.tools);
    _criu_version = criu::require_supported_criu(_cfg.tools.criu).to_string();
    _breakpoints = hw_breakpoints::probe();
    make_cgroup_task_moves_fast();
    give_netns_socket_tables();
    _background_cpu = proc::idle_cpu_group::open(background_cpu_group);
    if (const auto r = expedited_rcu::recover(rcu_knob()); !r.empty())
        _log->warn("{}", r);
    if (_cfg.pool) {
        _pool = std::make_unique<pool_store>(*_cfg.pool);
        _log->info("pool node: {} MiB arena in {}-byte chunks, {} eviction, disk tier {}",
                   _cfg.pool->capacity_bytes >> 20, _cfg.pool->chunk_size, _cfg.pool->eviction,
                   _pool->tier_file().string());
        if (_cfg.pool_rdma)
            _pool_rdma = std::make_unique<pool_rdma_export>(*_pool, _log);
    }
    if (!_cfg.metrics_listen.empty())
        _metrics = std::make_unique<daemon_metrics>(_cfg.metrics_listen, _pool.get());
    _listener = net::tcp_listen(_cfg.listen);
}

daemon::~daemon() {
    drain();
}

expedited_rcu::knob daemon::rcu_knob() const {
    expedited_rcu::knob k;
    k.saved = _cfg.state_dir / "rcu_expedited.saved";
    return k;
}

void daemon::make_cgroup_task_moves_fast() {
    const auto p = cgroup_task_moves::plan_fast_moves(read_mountinfo("/proc/self/mountinfo"));
    if (p.already_fast) {
        _log->info("a cgroup mount has favordynmods: a container's restore moves its task into "
                   "its cgroups without waiting for an RCU grace period");
        return;
    }
    if (!_cfg.favor_cgroup_moves) {
        _log->info("no cgroup mount has favordynmods: a container's restore waits for an RCU "
                   "grace period (10-15 ms here) to move its task into its cgroups; "
                   "--favor-cgroup-moves sets it (README, Tuning)");
        return;
    }
    try {
        _log->info("{}", cgroup_task_moves::make_fast(p));
    } catch (const std::exception& e) {
        _log->warn("--favor-cgroup-moves: {}; a container's restore waits for an RCU grace "
                   "period to move its task into its cgroups",
                   e.what());
    }
}

void daemon::give_netns_socket_tables() {
    const std::filesystem::path proc_sys = "/proc/sys";
    try {
        const auto todo = netns_socket_tables::plan(proc_sys);
        if (todo.empty()) {
            _log->info("socket tables of network namespaces created here: {} (0 or absent: "
                       "the host's)",
                       netns_socket_tables::describe(proc_sys));
        } else if (!_cfg.own_netns_socket_tables) {
            _log->info("network namespaces created here share the host's socket tables ({}): "
                       "CRIU's dump of a container walks them (~2.7 ms per address family on a "
                       "24 GiB host); "
                       "--own-netns-socket-tables sets them (README, Tuning)",
                       netns_socket_tables::describe(proc_sys));
        } else {
            _log->info("network namespaces created from now on get socket tables of their own "
                       "({})",
                       netns_socket_tables::apply(proc_sys, todo));
        }
    } catch (const std::exception& e) {
        _log->warn("--own-netns-socket-tables: {}; a container's dump walks the host's socket "
                   "tables",
                   e.what());
    }
}

void daemon::run() {
    ::signal(SIGPIPE, SIG_IGN);
    _log->info(
        "listening on {}, state in {}, CRIU {}; CRIU restores by {}; TLS records sealed by {}",
        _cfg.listen.to_string(), _cfg.state_dir.string(), _criu_version,
        criu_stop_method(false).reason, tls::gcm_engine::fastest_name());
    if (_background_cpu.usable())
        _log->info("background channels run in the idle cpu cgroup {}: they yield to every "
                   "group beside it (a container's, another session's)",
                   _background_cpu.dir().string());
    else
        _log->info("background channels are SCHED_IDLE, which yields only within this "
                   "daemon's own cpu group: no idle cpu cgroup ({})",
                   _background_cpu.why_not());
    if (_criu_events.fd() < 0)
        _log->warn("another daemon in this network namespace receives the CRIU plugin's reports");
    for (;;) {
        pollfd fds[3] = {{_listener.get(), POLLIN, 0},
                         {_signals.get(), POLLIN, 0},
                         {_criu_events.fd(), POLLIN, 0}};
        int r = ::poll(fds, 3, 1000);
        if (r < 0 && errno != EINTR)
            throw sys_error("poll");
        reap_finished_connections();
        if (r <= 0)
            continue;
        if (fds[1].revents) {
            signalfd_siginfo si;
            (void)!::read(_signals.get(), &si, sizeof si);
            _log->info("signal {}: stopping", si.ssi_signo);
            break;
        }
        if (fds[2].revents)
            for (const auto& [id, e] : _criu_events.receive())
                _log->debug("migration {}: CRIU {} (pid {}, ret {}) at {} ns", id, e.name, e.pid,
                            e.ret, e.monotonic_ns);
        if (fds[0].revents) {
            unique_fd fd(::accept4(_listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!fd)
                continue;
            if (!net::fail_when_peer_silent(fd.get(), peer_host_silence))
                _log->warn("cannot set keepalive on a connection: {}", std::strerror(errno));
            std::lock_guard lock(_mutex);
            if (_connections.size() >= _cfg.max_connections) {
                // A storm of connections costs a closed socket each, nothing more.
                if (_refused_connections++ % 100 == 0)
                    _log->warn("{} connections open: refusing more ({} so far)",
                               _connections.size(), _refused_connections);
                continue;
            }
            auto& c = _connections.emplace_back();
            c.accepted = std::move(fd);
            c.thread = std::thread([this, &c] { serve_connection(c); });
        }
    }
    _listener.reset();
    drain();
}

hw_breakpoints::criu_stop_method daemon::criu_stop_method(bool forced) const {
    return hw_breakpoints::decide(_breakpoints, forced || _cfg.no_hw_breakpoints,
                                  _cfg.tools.criu_fault);
}

void daemon::reap_finished_connections() {
    std::list<connection> finished;
    {
        std::lock_guard lock(_mutex);
        for (auto it = _connections.begin(); it != _connections.end();) {
            auto next = std::next(it);
            if (it->done)
                finished.splice(finished.end(), _connections, it);
            it = next;
        }
    }
    for (auto& c : finished)
        c.thread.join();
}

// Aborts what has not committed, waits for committed migrations to finish,
// then ends every remaining connection.
void daemon::drain() {
    std::vector<std::shared_ptr<outgoing_migration>> outgoing;
    {
        std::lock_guard lock(_mutex);
        for (auto& [id, m] : _outgoing)
            outgoing.push_back(m);
    }
    for (auto& m : outgoing) {
        try {
            m->abort("the daemon is stopping");
        } catch (const std::exception& e) {
            m->log().error("abort failed: {}", e.what());
        }
    }
    {
        std::unique_lock lock(_mutex);
        auto committed_left = [&] {
            for (auto& [id, m] : _outgoing)
                if (m->current_state() == outgoing_migration::state::committed)
                    return true;
            return false;
        };
        if (!_registry_changed.wait_for(lock, _cfg.drain_timeout,
                                        [&] { return !committed_left(); }))
            _log->warn("stopping with committed migrations unfinished: their destinations lose "
                       "their source");
        // Their sessions wait for the destination's report (up to an hour
        // once the migrator is gone), which cannot come once the channels
        // below are shut down.
        for (auto& [id, m] : _outgoing)
            m->abandon();
        for (auto& c : _connections)
            if (c.conn)
                c.conn->shutdown();
    }
    std::list<connection> all;
    {
        std::lock_guard lock(_mutex);
        all.splice(all.end(), _connections);
    }
    for (auto& c : all)
        c.thread.join();
}

// Nothing a peer sends is parsed before it has authenticated.
void daemon::serve_connection(connection& c) {
    try {
        auto s = std::make_shared<tls::tls_stream>(std::move(c.accepted), _cfg.credentials,
                                                   tls::tls_stream::role::server);
        {
            std::lock_guard lock(_mutex);
            c.conn = s;
        }
        tls::authenticate_client(*s, _cfg.peers, net::after(handshake_timeout));
        serve_authenticated(*s);
    } catch (const std::exception& e) {
        _log->warn("connection: {}", e.what());
    }
    std::lock_guard lock(_mutex);
    c.done = true;
}

void daemon::serve_authenticated(net::stream& conn) {
    {
        auto first = control::receive(conn, net::after(first_frame_timeout));
        if (first) {
            switch (first->body_case) {
            case FERRY_CONTROL__ENVELOPE__BODY_PAGE_CHANNEL_OPEN:
                serve_page_channel(conn, *first->page_channel_open);
                break;
            case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_PREPARE: {
                // Until serve_outgoing registers it (or refuses it), early
                // channels wait for this migration.
                auto mark =
                    std::make_unique<preparing_mark>(*this, first->outgoing_prepare->migration_id);
                auto prepared = prepare_outgoing(conn, *first->outgoing_prepare);
                prepared.preparing = std::move(mark);
                serve_outgoing(conn, std::move(prepared));
                break;
            }
            case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_REGISTER:
                serve_outgoing(conn, {std::move(first), nullptr, nullptr, std::nullopt, nullptr});
                break;
            case FERRY_CONTROL__ENVELOPE__BODY_POOL_OPEN:
                if (_pool)
                    serve_pool_connection(conn, *first->pool_open, *_pool, _pool_access,
                                          _pool_rdma.get(), *_log);
                else
                    control::send_error(
                        conn, "this daemon is not a pool node (start it with --pool-node)",
                        net::after(first_frame_timeout));
                break;
            case FERRY_CONTROL__ENVELOPE__BODY_INCOMING_PREPARE:
                serve_incoming(*this, conn, *first->incoming_prepare);
                break;
            default:
                control::send_error(
                    conn, fmt::format("unexpected first message {}", control::body_name(*first)),
                    net::after(first_frame_timeout));
            }
        }
    }
}

std::shared_ptr<outgoing_migration>
daemon::find_outgoing(const std::string& id, std::chrono::milliseconds wait,
                      std::chrono::milliseconds while_preparing) {
    const auto start = std::chrono::steady_clock::now();
    const auto short_end = start + wait, long_end = start + std::max(wait, while_preparing);
    std::unique_lock lock(_mutex);
    for (;;) {
        if (auto it = _outgoing.find(id); it != _outgoing.end())
            return it->second;
        const auto now = std::chrono::steady_clock::now();
        if (now >= long_end || (now >= short_end && !_preparing.contains(id)))
            return nullptr;
        _registry_changed.wait_until(lock, now >= short_end ? long_end : short_end);
    }
}

daemon::preparing_mark::preparing_mark(daemon& d, std::string id) : _d(d), _id(std::move(id)) {
    std::lock_guard lock(_d._mutex);
    _d._preparing.insert(_id);
}

daemon::preparing_mark::~preparing_mark() {
    {
        std::lock_guard lock(_d._mutex);
        _d._preparing.erase(_d._preparing.find(_id));
    }
    _d._registry_changed.notify_all();
}

// A destination opens a channel: the migration's fabric says what goes in
// the acceptance, then the connection carries page requests (all of them
// over tcp; only "done" over one-sided fabrics) until the destination
// closes it.
void daemon::serve_page_channel(net::stream& conn, const FerryControl__PageChannelOpen& open) {
    if (open.kind == FERRY_CONTROL__CHANNEL_KIND__PRECOPY) {
        serve_precopy_channel(conn, open);
        return;
    }
    auto m = find_outgoing(open.migration_id, channel_registration_wait,
                           channel_registration_wait_while_preparing);
    if (!m) {
        control::send_error(conn, fmt::format("unknown migration {}", open.migration_id),
                            net::after(first_frame_timeout));
        return;
    }
    // Only the destination the migrator chose reads the pages.
    if (!from_destination(conn, m->log(), open.migration_id, m->access().destination_identity))
        return;
    if (open.kind == FERRY_CONTROL__CHANNEL_KIND__HOLES) {
        const auto hold = m->hold_channel(conn.fd());
        if (!hold) {
            control::send_error(conn, fmt::format("migration {} was aborted", m->id()),
                                net::after(first_frame_timeout));
            return;
        }
        serve_page_holes(conn, *m);
        return;
    }
    const std::string fabric = open.fabric && *open.fabric ? open.fabric : "tcp";
    if (fabric != m->fabric().name()) {
        control::send_error(conn,
                            fmt::format("migration {} crosses the {} fabric, not {}", m->id(),
                                        m->fabric().name(), fabric),
                            net::after(first_frame_timeout));
        return;
    }
    FerryControl__PageChannelAccepted ok = FERRY_CONTROL__PAGE_CHANNEL_ACCEPTED__INIT;
    ok.page_size = uint32_t(page_size);
    ok.max_pages_per_request = wire::max_pages_per_request;
    const auto keep = m->fabric().accept(ok, m->fabric_state());
    ok.has_plaintext_pages = true;
    ok.plaintext_pages = m->access().plaintext_pages;
    control::send_message(conn, ok, net::after(first_frame_timeout));
    net::set_nodelay(conn.fd());
    std::unique_ptr<net::stream> plain;
    if (ok.plaintext_pages)
        plain = tls::leave_tls(conn, net::after(first_frame_timeout));
    if (open.kind == FERRY_CONTROL__CHANNEL_KIND__BACKGROUND) {
        // Background reads yield the CPU at once to any thread serving a
        // fault (or running the workload); they only soak up idle time.
        if (!proc::set_idle_policy(true))
            m->log().warn("cannot make the background channel SCHED_IDLE: {}",
                          std::strerror(errno));
        // And in the idle group: SCHED_IDLE yields only to this daemon's
        // threads, and where both hosts share a machine (the testbed) the
        // destination's are in another group. The thread ends with the
        // channel, in the group.
        if (_background_cpu.usable() && !_background_cpu.join())
            m->log().warn("cannot move the background channel into {}: {}",
                          _background_cpu.dir().string(), std::strerror(errno));
        m->log().info("background channel at SCHED_IDLE, in cpu cgroup {}",
                      proc::calling_thread_cpu_cgroup());
    }
    net::stream& channel = plain ? *plain : conn;
    const auto hold = m->hold_channel(channel.fd());
    if (!hold)
        return; // aborted as it was accepted: closing it is the answer
    transport::serve_requests(channel, *m);
}

// A PRECOPY channel: the destination's lazy-pages opens it at its start,
// ahead of the source's prepare, so the pre-copy is waited for while the
// migrator prepares (its attach takes tens of milliseconds).
void daemon::serve_precopy_channel(net::stream& conn, const FerryControl__PageChannelOpen& open) {
    std::shared_ptr<precopy_source> p;
    {
        std::unique_lock lock(_mutex);
        _registry_changed.wait_for(lock, channel_registration_wait,
                                   [&] { return _precopies.contains(open.migration_id); });
        if (auto it = _precopies.find(open.migration_id); it != _precopies.end())
            p = it->second;
    }
    if (!p) {
        control::send_error(conn, fmt::format("no pre-copy for migration {}", open.migration_id),
                            net::after(first_frame_timeout));
        return;
    }
    if (from_destination(conn, *make_logger("pagesrv", open.migration_id), open.migration_id,
                         p->destination_identity()))
        p->serve(conn);
}

bool daemon::from_destination(net::stream& conn, spdlog::logger& log, const std::string& id,
                              const std::string& destination) {
    if (conn.peer_identity() == destination)
        return true;
    log.warn("refused a page channel from {}: the migration's destination is {}",
             conn.peer_identity(), destination);
    control::send_error(conn,
                        fmt::format("{} is not part of migration {}", conn.peer_identity(), id),
                        net::after(first_frame_timeout));
    return false;
}

daemon::precopy_mark::precopy_mark(daemon& d, std::shared_ptr<precopy_source> p)
    : _d(d), _p(std::move(p)) {
    {
        std::lock_guard lock(_d._mutex);
        _d._precopies[_p->id()] = _p;
    }
    _d._registry_changed.notify_all();
}

daemon::precopy_mark::~precopy_mark() {
    {
        std::lock_guard lock(_d._mutex);
        _d._precopies.erase(_p->id());
    }
    _p->stop();
}

// A HOLES channel: the small areas' holes (scanned from the commit), in
// frames of at most `holes_per_frame` runs, the part's end marked
// rest_on_ask; then, once the destination asks (its restore has finished),
// the other areas' holes, the last frame marked last. Whatever the fabric:
// these are control frames.
void daemon::serve_page_holes(net::stream& conn, outgoing_migration& m) {
    constexpr auto scan_wait = std::chrono::minutes(2);
    // The destination asks once its restore has finished (or closes the
    // connection); a restore is bounded well within this.
    constexpr auto ask_wait = std::chrono::minutes(10);
    const auto small = m.wait_small_holes(scan_wait);
    const bool small_ok = small.done && small.unknown.empty();
    send_holes(conn, small, small_ok ? hole_part::small : hole_part::last);
    if (!small_ok)
        return;
    auto ask = control::receive(conn, net::after(ask_wait));
    if (!ask)
        return; // the destination gave up before its restore finished
    control::expect(ask.get(), FERRY_CONTROL__ENVELOPE__BODY_PAGE_HOLES_SCAN, "destination");
    outgoing_migration::holes_result rest;
    if (m.scan_holes_now())
        rest = m.wait_holes(scan_wait);
    else
        rest = {true, "the migration did not commit", {}, 0, 0};
    send_holes(conn, rest, hole_part::last);
}

void daemon::send_holes(net::stream& conn, const outgoing_migration::holes_result& r,
                        hole_part part) {
    constexpr size_t holes_per_frame = 16384;
    std::vector<uint32_t> pids;
    std::vector<uint64_t> starts, ends;
    size_t at = 0;
    do {
        const size_t n = std::min(holes_per_frame, r.holes.size() - at);
        pids.resize(n);
        starts.resize(n);
        ends.resize(n);
        for (size_t i = 0; i < n; i++) {
            const auto& h = r.holes[at + i];
            pids[i] = h.pid;
            starts[i] = h.start;
            ends[i] = h.end;
        }
        at += n;
        const bool end_of_part = at == r.holes.size();
        FerryControl__PageHoles f = FERRY_CONTROL__PAGE_HOLES__INIT;
        f.n_pid = f.n_start = f.n_end = n;
        f.pid = pids.data();
        f.start = starts.data();
        f.end = ends.data();
        f.last = end_of_part && part == hole_part::last;
        f.has_rest_on_ask = end_of_part && part == hole_part::small;
        f.rest_on_ask = f.has_rest_on_ask;
        const std::string unknown =
            !r.done ? "the source's scan did not finish in time" : r.unknown;
        f.error = unknown.empty() ? nullptr : const_cast<char*>(unknown.c_str());
        control::send_message(conn, f, net::after(first_frame_timeout));
    } while (at < r.holes.size());
}

// Before the freeze: the fabric does what it can while the tree still runs
// (shm allocates its region), then the registration proper is awaited.
// Returns that frame and what the fabric prepared.
daemon::prepared_outgoing daemon::prepare_outgoing(net::stream& conn,
                                                   const FerryControl__OutgoingPrepare& prep) {
    std::unique_ptr<transport::source_state> state;
    try {
        const auto& fabric = transport::find(fabric_spec::parse(prep.fabric).name);
        state = fabric.prepare(prep.root_pid, prep.migration_id);
    } catch (const std::exception& e) {
        // The migrator says why before the freeze (rdma: no device here).
        control::send_error(conn, fmt::format("the source cannot use that fabric: {}", e.what()),
                            net::after(first_frame_timeout));
        throw;
    }
    FerryControl__OutgoingPrepared ok = FERRY_CONTROL__OUTGOING_PREPARED__INIT;
    ok.region_bytes = 0;
    std::optional<std::chrono::milliseconds> silence;
    if (prep.has_heartbeat_silence_ms) {
        silence = std::max<std::chrono::milliseconds>(
            std::chrono::milliseconds(prep.heartbeat_silence_ms),
            control::migrator_heartbeat_floor);
        ok.has_watches_heartbeats = true;
        ok.watches_heartbeats = true;
    }
    // Paused by someone else before the migration: a release leaves it so.
    const bool frozen_before = silence && criu::cgroup_frozen(prep.root_pid);
    std::unique_ptr<precopy_mark> precopy;
    std::string precopy_error;
    if (prep.has_precopy && prep.precopy) {
        precopy = start_precopy(prep);
        const auto sum = precopy->source().wait_converged(
            std::chrono::milliseconds(prep.has_precopy_wait_ms ? prep.precopy_wait_ms : 30'000));
        precopy_error = !sum.error.empty() ? sum.error
                        : !sum.connected   ? "the destination's pre-copy channel did not come"
                                           : "";
        ok.precopy_error = precopy_error.empty() ? nullptr : precopy_error.data();
        ok.has_precopy_rounds = ok.has_precopy_pages_sent = ok.has_precopy_last_round_pages =
            ok.has_precopy_converged = ok.has_precopy_tracked_pages = true;
        ok.precopy_rounds = sum.rounds;
        ok.precopy_pages_sent = sum.pages_sent;
        ok.precopy_last_round_pages = sum.last_round_pages;
        ok.precopy_converged = sum.converged;
        ok.precopy_tracked_pages = sum.tracked_pages;
        precopy->source().freeze_near(); // the dump starts now: rounds end as the tree freezes
    }
    control::send_message(conn, ok, net::after(first_frame_timeout));
    // The dump runs meanwhile; registration follows once its images exist.
    for (;;) {
        const auto until = silence ? net::after(*silence) : net::no_deadline;
        if (silence && !conn.buffered() && !net::wait_readable(conn.fd(), until))
            release_unregistered(conn, prep, frozen_before, *silence);
        auto next = control::receive(conn, until);
        if (next && next->body_case == FERRY_CONTROL__ENVELOPE__BODY_MIGRATOR_ALIVE)
            continue;
        control::expect(next.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_REGISTER, "migrator");
        return {std::move(next), std::move(state), nullptr, silence, std::move(precopy)};
    }
}

std::unique_ptr<daemon::precopy_mark>
daemon::start_precopy(const FerryControl__OutgoingPrepare& prep) {
    // Each process is stopped for one injected system call.
    constexpr auto attach_bound = std::chrono::seconds(5);
    const std::string reader = prep.destination_identity ? prep.destination_identity : "";
    auto source = std::make_shared<precopy_source>(prep.migration_id, pid_t(prep.root_pid), reader,
                                                   attach_bound);
    return std::make_unique<precopy_mark>(*this, std::move(source));
}

void daemon::release_unregistered(net::stream& conn, const FerryControl__OutgoingPrepare& prep,
                                  bool frozen_before, std::chrono::milliseconds silence) {
    const std::string why = fmt::format(
        "the migrator sent nothing for {} s before it registered the migration (stopped or "
        "hung; its host answers)",
        std::chrono::duration_cast<std::chrono::seconds>(silence).count());
    _log->error("migration {}: {}: releasing the source", prep.migration_id, why);
    criu::release_request req;
    req.root = pid_t(prep.root_pid);
    req.migration_id = prep.migration_id;
    req.was_frozen_before = frozen_before;
    req.bound = criu::deadlines::for_memory(
                    prep.has_workload_bytes ? prep.workload_bytes : 0,
                    prep.has_deadline_scale && prep.deadline_scale > 0 ? prep.deadline_scale : 1.0)
                    .release;
    const auto res = criu::release_workload(req);
    (res.ok ? _log->warn("migration {}: {}", prep.migration_id, res.summary)
            : _log->error("migration {}: {}", prep.migration_id, res.summary));
    (void)control::try_send_error(
        conn, fmt::format("the source daemon released the source: {}: {}", why, res.summary),
        net::after(std::chrono::seconds(5)));
    throw error(why);
}

void daemon::serve_outgoing(net::stream& conn, prepared_outgoing first) {
    const FerryControl__OutgoingRegister& reg = *first.frame->outgoing_register;
    std::shared_ptr<outgoing_migration> m;
    try {
        const auto& fabric = transport::find(
            fabric_spec::parse(reg.fabric && *reg.fabric ? reg.fabric : "tcp").name);
        m = std::make_shared<outgoing_migration>(
            reg.migration_id, reg.images_dir, pid_t(reg.root_pid),
            uint16_t(reg.criu_page_server_port), fabric, std::move(first.fabric_state),
            reg.has_deadline_scale && reg.deadline_scale > 0 ? reg.deadline_scale : 1.0);
        if (!reg.destination_identity || !*reg.destination_identity)
            throw error("the migrator named no destination identity");
        m->grant({reg.destination_identity, reg.has_plaintext_pages && reg.plaintext_pages});
        if (reg.has_check_vma_flags && reg.check_vma_flags)
            m->check_vma_flags_with(std::make_unique<frozen_vma_reader>(pid_t(reg.root_pid)));
    } catch (const std::exception& e) {
        // Until registration succeeds the migrator owns the abort.
        control::send_error(
            conn, fmt::format("cannot serve migration {}: {}", reg.migration_id, e.what()),
            net::after(first_frame_timeout));
        return;
    }
    {
        std::lock_guard lock(_mutex);
        _outgoing[m->id()] = m;
    }
    first.preparing.reset();
    _registry_changed.notify_all();
    if (first.precopy)
        first.precopy->source().freeze(); // the tasks are frozen: the last scan goes
    if (_metrics)
        _metrics->migration_started(daemon_metrics::role::source);
    if (reg.pool && *reg.pool) {
        try {
            auto spec = pool::pool_spec::parse(reg.pool);
            spec.credentials = _cfg.credentials;
            m->start_pool_push(spec);
        } catch (const std::exception& e) {
            m->log().error("cannot push into the pool: {}", e.what());
        }
    }
    m->log().info("serving {} lazy pages of {} processes", m->pages_total(), m->processes());

    FerryControl__OutgoingRegistered ok = FERRY_CONTROL__OUTGOING_REGISTERED__INIT;
    ok.pages_total = m->pages_total();
    ok.processes = m->processes();
    FerryControl__CriuMoments freeze;
    _criu_events.moments(m->id()).to_message(freeze);
    ok.moments = &freeze;
    control::send_message(conn, ok, net::after(first_frame_timeout));

    std::exception_ptr failed;
    try {
        outgoing_session(conn, *m, _criu_events, first.migrator_silence).run();
    } catch (...) {
        failed = std::current_exception();
    }
    if (_metrics) {
        _metrics->served(m->pages_served(), m->bytes_sent());
        _metrics->migration_ended(daemon_metrics::role::source,
                                  !failed &&
                                      m->current_state() == outgoing_migration::state::finished);
    }
    // A session that failed on its own (a send to the migrator) leaves the
    // migration registered: committed destinations may still open channels.
    if (failed)
        std::rethrow_exception(failed);
    {
        std::lock_guard lock(_mutex);
        _outgoing.erase(m->id());
    }
    _criu_events.forget(m->id());
    _registry_changed.notify_all();
}

} // namespace ferry::pagesrv
