#include "migration.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/criu_image.hpp"
#include "criu/criu_page_server.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/workload_release.hpp"
#include "pool/pool_client.hpp"
#include "sys/hw_breakpoints.hpp"
#include "sys/kept_logs.hpp"
#include "sys/proc.hpp"

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

// Before the commit (or after it, when the destination's restore failed
// before its tasks ran): the source tasks must run again. CRIU resumes them
// itself when it can; a CRIU that is stuck is not waited on again: it is
// killed and what it left is undone (release_source). Bounded throughout.
void migration::abort_source(const std::string& reason) {
    unsilence_source_links(); // the source may run on
    if (!_dump_started || (_dump->ended() && !_dump->stuck()))
        return; // CRIU never froze the tasks, or already resumed them after its own failure
    if (_dump->refuse_hold(hold_refuse_limit))
        return; // held before the freeze: the engine's checkpoint failed, nothing froze
    set_phase("aborting");
    // Each step is logged: should an abort take long, its log says where.
    const uint64_t t0 = monotonic_ns();
    _dump->ignore_interrupts(); // the abort itself must finish
    if (!_daemon_verdict.empty()) {
        // The source daemon gave up on this migrator and has done the abort
        // itself (through CRIU's page server, or by killing CRIU): what is
        // left here is to collect CRIU, and to check.
        (void)_dump->wait_end(abort_page_server_grace);
        _dump->after_criu_killed();
        if (criu::inspect_workload(_opt.pid).running()) {
            _r.recovery = "the source daemon resumed the source";
            _log->info("the source runs again: {}", _r.recovery);
            return;
        }
        _log->warn("the source does not run after the local daemon's abort: releasing it");
        release_source(false);
        return;
    }
    _log->info("aborting ({}): CRIU resumes the source tasks", reason);
    if (!_dump->stuck() && abort_gracefully(reason) && criu::inspect_workload(_opt.pid).running()) {
        _log->info("the source runs again, {:.0f} ms after the abort began",
                   ns_to_ms(monotonic_ns() - t0));
        return;
    }
    _log->warn("CRIU did not resume the source ({:.0f} ms into the abort): killing it and undoing "
               "what it left",
               ns_to_ms(monotonic_ns() - t0));
    release_source(false);
    tell_daemon_aborted(reason);
}

// CRIU's own way back: an abort through its page server (by way of the
// local daemon once it serves the migration). True if CRIU ended.
bool migration::abort_gracefully(const std::string& reason) {
    try {
        // A healthy CRIU is at most moments away from its page server (no
        // memory work is left after post-dump); one that is not is treated
        // as stuck rather than waited on for a full deadline.
        _dump->wait_page_server(
            std::min<std::chrono::milliseconds>(_deadlines.page_server, abort_page_server_grace));
        if (_registered && _src) {
            try {
                FerryControl__OutgoingAbort a = FERRY_CONTROL__OUTGOING_ABORT__INIT;
                a.reason = const_cast<char*>(reason.c_str());
                a.has_destination_never_ran = _r.committed;
                a.destination_never_ran = _r.committed;
                control::send_message(*_src, a, net::after(control_timeout));
                // The daemon waits for CRIU to end, and CRIU may first ask
                // this migrator something (its network-unlock).
                const auto until = net::after(_deadlines.abort + control_timeout);
                while (!_src->buffered() &&
                       !net::wait_readable(_src->fd(), std::min(until, net::after(abort_poll))) &&
                       std::chrono::steady_clock::now() < until)
                    _dump->answer_notifications();
                auto e = control::receive(*_src, until);
                // A pool push that ended as the abort went out: its answer
                // comes first, and the daemon takes the abort after it.
                if (_handoff_pending && e &&
                    e->body_case == FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_HANDED_OFF) {
                    _handoff_pending = false;
                    e = control::receive(*_src, until);
                }
                control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_ABORTED,
                                "local daemon");
                _daemon_told_abort = true;
            } catch (const std::exception& e) {
                _log->warn("the local daemon could not abort ({}); aborting CRIU directly",
                           e.what());
                criu::abort_lazy_dump(_criu_port, std::chrono::seconds(10));
            }
        } else {
            criu::abort_lazy_dump(_criu_port, std::chrono::seconds(10));
        }
        (void)_dump->wait_end(_deadlines.abort); // failed, by design: the tasks were resumed
        return _dump->ended() && !_dump->stuck();
    } catch (const std::exception& e) {
        _log->warn("CRIU did not take the abort: {}", e.what());
        return false;
    }
}

// CRIU is killed (the kernel detaches its tracees), then the freezer and
// the network lock it left are undone, and the tasks are checked. With
// `end_workload` (after the commit) the tasks are killed first instead.
void migration::release_source(bool end_workload) {
    set_phase("releasing");
    _r.criu_stuck = _dump && _dump->stuck();
    criu::release_request req;
    req.root = _opt.pid;
    req.migration_id = _r.id;
    if (_dump)
        req.criu = _dump->criu_pids();
    req.end_workload = end_workload;
    req.was_frozen_before = _cgroup_was_frozen;
    req.bound = _deadlines.release;
    if (_dump)
        req.after_criu_killed = [this] { _dump->after_criu_killed(); };
    const auto res = criu::release_workload(req);
    _r.recovery = res.summary;
    _log->info("source released: {}", res.summary);
}

// The daemon serving the migration stops (it no longer tries CRIU's page
// server: CRIU is gone). Best effort, bounded.
void migration::tell_daemon_aborted(const std::string& reason) {
    if (!_registered || !_src || _daemon_told_abort)
        return;
    try {
        FerryControl__OutgoingAbort a = FERRY_CONTROL__OUTGOING_ABORT__INIT;
        a.reason = const_cast<char*>(reason.c_str());
        a.has_destination_never_ran = _r.committed;
        a.destination_never_ran = _r.committed;
        a.has_criu_gone = true;
        a.criu_gone = true;
        control::send_message(*_src, a, net::after(std::chrono::seconds(5)));
        (void)control::receive(*_src, net::after(std::chrono::seconds(10)));
        _daemon_told_abort = true;
    } catch (const std::exception& e) {
        _log->warn("could not tell the local daemon about the abort: {}", e.what());
    }
}

// A failed migration keeps CRIU's logs for the post-mortem, not its images
// (they can be as large as the workload's memory, and /dev/shm is memory).
void migration::cleanup() {
    if (_opt.keep_images || _dir.empty())
        return;
    std::error_code ec;
    // A lazy dump that left no page lazy (every page went into the images)
    // worked, but is not what was asked for: keep CRIU's logs to see why.
    // Stock CRIU did it when a thread stopped with a page-aligned stack
    // pointer (examples/criu-patches/0010 fixes that).
    const bool nothing_lazy = _r.ok && _opt.mode == migrate_mode::migrate &&
                              _r.source_pages_total == 0 && _r.images_bytes > (uint64_t(16) << 20);
    if (nothing_lazy)
        _log->warn("CRIU's lazy dump left no page lazy ({} MiB of images); its logs stay in {}",
                   _r.images_bytes >> 20, _dir.string());
    if (_r.ok && !nothing_lazy) {
        std::filesystem::remove_all(_dir, ec);
        return;
    }
    for (const auto& entry : std::filesystem::directory_iterator(_dir, ec))
        if (entry.path().extension() != ".log")
            std::filesystem::remove_all(entry.path(), ec);
    if (const size_t n = prune_kept_logs(_opt.work_root, kept_migration_logs))
        _log->info("removed the logs of {} older failed migrations from {} (the newest {} stay)", n,
                   _opt.work_root.string(), kept_migration_logs);
}

} // namespace ferry::migrator
