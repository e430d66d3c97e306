#include "incoming_session.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_image.hpp"
#include "engine_request.hpp"
#include "pool/pool_layout.hpp"
#include "sys/proc.hpp"
#include "transport/fabric.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

namespace ferry::pagesrv {

namespace {

constexpr auto lazy_ready_timeout = std::chrono::seconds(30);

} // namespace

void lazy_child::take_uffds() {
    for (;;) {
        pollfd p{keeper.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
            return;
        try {
            held_uffds.push_back(net::recv_fd(keeper.get()));
        } catch (const std::exception&) {
            return; // the child closed its end
        }
    }
}

// Started while the source is still running, so that neither exec nor
// set-up falls inside the downtime; it waits for lazy_start.
void incoming_session::spawn_lazy_pages() {
    int report[2], keeper[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, report) ||
        ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, keeper))
        throw sys_error("socketpair");
    unique_fd report_ours(report[0]), report_theirs(report[1]);
    unique_fd keeper_ours(keeper[0]), keeper_theirs(keeper[1]);
    const auto& tools = _d.config().tools;
    if (tools.lazy_pages.empty())
        throw error("cannot find the lazy-pages binary (set FERRY_LAZY_PAGES)");
    const std::string& bin = tools.lazy_pages;
    std::vector<std::string> args = {bin,
                                     "--images",
                                     _dir.string(),
                                     "--source",
                                     _source,
                                     "--migration",
                                     _id,
                                     "--report-fd",
                                     std::to_string(report_theirs.get()),
                                     "--uffd-keeper-fd",
                                     std::to_string(keeper_theirs.get()),
                                     "--wait-start",
                                     "--fabric",
                                     _fabric,
                                     "--credentials",
                                     _d.config().credentials->dir().string()};
    if (!_pool.empty()) {
        args.push_back("--pool");
        args.push_back(_pool);
    }
    args.push_back("--deadline-scale");
    args.push_back(fmt::format("{}", _deadline_scale));
    if (_precopy)
        args.push_back("--precopy");
    // Extra options for tuning experiments, e.g. FERRY_LAZY_PAGES_ARGS="--window 16".
    args.insert(args.end(), tools.lazy_pages_args.begin(), tools.lazy_pages_args.end());
    child_process::options o;
    o.log = _dir / "lazy-pages.log";
    o.keep_fds = {report_theirs.get(), keeper_theirs.get()};
    _lazy.proc = child_process::spawn(args, o);
    _lazy.report = std::move(report_ours);
    _lazy.keeper = std::move(keeper_ours);
    report_theirs.reset();
    keeper_theirs.reset();
}

bool incoming_session::start_lazy_pages() {
    report_progress("starting lazy-pages");
    const uint64_t t0 = monotonic_ns();
    FerryControl__LazyStart go = FERRY_CONTROL__LAZY_START__INIT;
    try {
        control::send_message(_lazy.report.get(), go, net::after(control_timeout));
    } catch (const std::exception& ex) {
        send_restore_failure(fmt::format("lazy-pages is gone: {}", ex.what()));
        return false;
    }
    auto e = control::receive(_lazy.report.get(), net::after(lazy_ready_timeout));
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_READY) {
        _lazy_start_ns = monotonic_ns() - t0;
        return true;
    }
    std::string why = "lazy-pages exited before it was ready";
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS &&
        e->transfer_stats->error)
        why = fmt::format("lazy-pages failed: {}", e->transfer_stats->error);
    send_restore_failure(why);
    return false;
}

// CRIU is at post-restore: every task has registered its lazy areas, so
// lazy-pages may pull in the background while the migrator commits, not
// only after CRIU's "restore finished". Best effort: without it the pull
// starts there, as before.
void incoming_session::let_lazy_pages_pull_ahead() noexcept {
    if (!_lazy.report)
        return;
    FerryControl__LazyAreasReady ready = FERRY_CONTROL__LAZY_AREAS_READY__INIT;
    if (!control::try_send_message(_lazy.report.get(), ready, net::after(control_timeout)))
        _log->warn("cannot tell lazy-pages that the lazy areas are registered");
}

// The restored tasks run: lazy-pages may start its main pass (and ask the
// source for the large areas' holes), which until now would have taken the
// CPU from CRIU's last steps inside the downtime. Once; best effort, as
// lazy-pages starts anyway a while after CRIU's "restore finished". Not to
// a lazy-pages that has already sent its final report: it has exited.
void incoming_session::tell_lazy_pages_tasks_run() noexcept {
    if (!_lazy.report || _lazy.told_tasks_run || _lazy.early_final)
        return;
    _lazy.told_tasks_run = true;
    FerryControl__LazyTasksRun run = FERRY_CONTROL__LAZY_TASKS_RUN__INIT;
    if (!control::try_send_message(_lazy.report.get(), run, net::after(control_timeout)))
        _log->warn("cannot tell lazy-pages that the tasks run");
}

// The gate refused the resume: the restored tasks are killed before they
// run. lazy-pages tells the source, whose tasks are then the only copy: it
// resumes them even after its commit, when the migrator that would have
// said so is stopped or gone. Best effort: without it the source waits for
// its migrator.
void incoming_session::tell_lazy_pages_discarded(const std::string& why) noexcept {
    if (!_lazy.report || _lazy.early_final)
        return;
    FerryControl__LazyCopyDiscarded d = FERRY_CONTROL__LAZY_COPY_DISCARDED__INIT;
    d.reason = const_cast<char*>(why.c_str());
    if (!control::try_send_message(_lazy.report.get(), d, net::after(control_timeout)))
        _log->warn("cannot tell lazy-pages that the copy is discarded");
}

// A message from lazy-pages while restore runs. Returns a failure reason if
// lazy-pages failed or died; progress reports are dropped.
std::optional<std::string> incoming_session::lazy_report_before_resume() {
    control::envelope_ptr e;
    try {
        e = control::receive(_lazy.report.get(), net::after(control_timeout));
    } catch (const std::exception& ex) {
        return fmt::format("lazy-pages report channel: {}", ex.what());
    }
    if (!e)
        return std::string("lazy-pages died during restore");
    if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS) {
        if (e->transfer_stats->ok) {
            _lazy.early_final = std::move(e); // done already: relayed after the resume
            return std::nullopt;
        }
        return fmt::format("lazy-pages failed during restore: {}",
                           e->transfer_stats->error ? e->transfer_stats->error : "unknown error");
    }
    return std::nullopt;
}

// lazy-pages' final report, to the migrator: the failure it names, if any
// (the restored tasks are killed then).
std::optional<std::string> incoming_session::relay_final_stats(const control::envelope& e) {
    std::optional<std::string> failure;
    const bool ok = e.transfer_stats->ok;
    // It exits right after its final report.
    const auto status = _lazy.proc.wait_for(std::chrono::seconds(10));
    if (ok && !status) {
        // Every page is in: whatever holds up its exit must not cost the
        // copy that runs on them.
        _log->warn("lazy-pages reported success but had not exited 10 s later: killed it (every "
                   "page is in; the copy runs on)");
        _lazy.proc.signal(SIGKILL);
        if (!_lazy.proc.wait_for(std::chrono::seconds(5)))
            _log->warn("lazy-pages (pid {}) did not end 5 s after SIGKILL", _lazy.proc.pid());
    } else if (!ok) {
        failure = e.transfer_stats->error ? e.transfer_stats->error : "lazy-pages failed";
    } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
        failure =
            "lazy-pages reported success but then ended with " + describe_wait_status(*status);
    }
    if (failure)
        kill_restored(*failure);
    if (auto* metrics = _d.metrics())
        metrics->transfer_finished(*e.transfer_stats);
    if (failure && ok)
        send_transfer_failure(*failure); // its success no longer stands: the copy was killed
    else
        (void)control::try_send(_conn, e, net::after(control_timeout)); // migrator may be gone
    return failure;
}

void incoming_session::send_transfer_failure(const std::string& why) {
    FerryControl__TransferStats t = FERRY_CONTROL__TRANSFER_STATS__INIT;
    t.ok = false;
    t.error = const_cast<char*>(why.c_str());
    (void)control::try_send_message(_conn, t, net::after(control_timeout));
}

// Forwards lazy-pages' progress to the migrator until it reports its final
// statistics (relayed too), holding the uffd duplicates meanwhile; the
// failure, if any. The migrator sends only the packets its source held
// (moving_network.cpp).
std::optional<std::string> incoming_session::relay_until_final_stats() {
    for (;;) {
        const bool watch_migrator = _connections_move && !_held_packets_done;
        pollfd fds[3] = {{_lazy.report.get(), POLLIN, 0},
                         {_lazy.keeper.get(), POLLIN, 0},
                         {watch_migrator ? _conn.fd() : -1, POLLIN, 0}};
        const bool buffered = watch_migrator && _conn.buffered();
        if (::poll(fds, 3, buffered ? 0 : -1) < 0) {
            if (errno == EINTR)
                continue;
            throw sys_error("poll lazy-pages");
        }
        if (fds[1].revents)
            _lazy.take_uffds();
        if (fds[2].revents || buffered)
            receive_held_packets();
        if (!fds[0].revents)
            continue;
        control::envelope_ptr e;
        try {
            e = control::receive(_lazy.report.get(), net::after(control_timeout));
        } catch (const std::exception& ex) {
            return fmt::format("lazy-pages report channel: {}", ex.what());
        }
        if (!e)
            return "lazy-pages died without reporting";
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_PROGRESS)
            // Progress is informational; the transfer goes on without the migrator.
            (void)control::try_send(_conn, *e, net::after(control_timeout));
        else if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS)
            return relay_final_stats(*e);
    }
}

// After the resume: the transfer's end, relayed to the migrator (a final
// report that came during the restore is relayed at once).
void incoming_session::relay_transfer() {
    std::optional<std::string> failure;
    if (_lazy.early_final) {
        _lazy.take_uffds();
        failure = relay_final_stats(*_lazy.early_final);
    } else {
        failure = relay_until_final_stats();
    }
    if (failure && _lazy.proc.running()) {
        kill_restored(*failure);
        send_transfer_failure(*failure);
    }
    // The migrator's last batch of held packets follows the resume report
    // at once; wait for it, within a bound, before the session ends.
    const auto held_until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (_connections_move && !_held_packets_done && !failure &&
           std::chrono::steady_clock::now() < held_until) {
        pollfd p{_conn.fd(), POLLIN, 0};
        if (_conn.buffered() || ::poll(&p, 1, 100) > 0)
            receive_held_packets();
    }
    // Every page is in place (or the tree is dead): release the uffds, or
    // the tasks would block on their next non-cooperative event.
    _lazy.held_uffds.clear();
    release_idle_poll();
    _transferred = !failure;
    _log->info("transfer {}", failure ? "failed: " + *failure : "complete");
}

} // namespace ferry::pagesrv
