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

// The destination has restored the tasks and waits at post-restore. Make sure
// the source can stay frozen (CRIU's page server is up, so CLOSE will work),
// commit it, then let the destination resume.
void migration::handle_resume_request() {
    _r.t_ready_to_resume = monotonic_ns();
    if (fault_injected(fault::interrupt_before_commit))
        ::raise(SIGINT);
    check_interrupt(); // the last moment at which the source can still resume
    if (_opt.mode == migrate_mode::unpark) {
        _r.committed = true; // no source: nothing else can run this workload
        _r.t_committed = monotonic_ns();
    } else {
        try {
            check_source_daemon(); // it may have aborted while this process was stopped
            commit_source();
            if (fault_injected(fault::migrator_stop_after_commit))
                ::raise(SIGSTOP);
        } catch (const std::exception& e) {
            // The destination's copy must not run: say so now rather than
            // let its gate run out of time.
            FerryControl__ResumeDecision d = FERRY_CONTROL__RESUME_DECISION__INIT;
            d.resume = false;
            const std::string why = fmt::format("the source cannot commit: {}", e.what());
            d.reason = const_cast<char*>(why.c_str());
            (void)control::try_send_message(*_dest, d, net::after(std::chrono::seconds(5)));
            _destination_never_ran = true;
            throw;
        }
    }
    FerryControl__ResumeDecision d = FERRY_CONTROL__RESUME_DECISION__INIT;
    d.resume = true;
    control::send_message(*_dest, d, net::after(control_timeout));
    hand_over_packets(false); // what reached the frozen source, for the copy
    // The record has said committed since "committing"; the phase's name
    // waits until the destination has its answer, out of the downtime.
    if (_opt.mode != migrate_mode::unpark)
        set_phase("committed");
}

// From here on the source tasks must never run again.
void migration::commit_source() {
    _dump->wait_page_server(_deadlines.page_server);
    // The record says "committed" before the daemon hears it, so that an
    // operator's abort never resumes a source that might be committed.
    _committing = true;
    set_phase("committing");
    FerryControl__OutgoingCommit c = FERRY_CONTROL__OUTGOING_COMMIT__INIT;
    control::send_message(*_src, c, net::after(control_timeout));
    auto e = control::receive(*_src, net::after(control::commit_answer_wait));
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_COMMITTED, "local daemon");
    _r.committed = true;
    _r.t_committed = monotonic_ns();
    silence_source_links();
}

void migration::wait_resumed() {
    set_phase("restoring");
    const auto until = net::after(_deadlines.restore + restore_margin);
    // A destination daemon that hangs, or is stopped, on a host whose
    // kernel still answers keeps the connection alive: its restore's
    // progress reports are what stop.
    const auto progress_silence = scaled_silence(control::restore_progress_silence);
    auto heard = std::chrono::steady_clock::now();
    std::string last_step = "none since the images were sent";
    for (;;) {
        // While waiting for the destination, answer CRIU's notifications
        // promptly so its page server comes up in parallel.
        const int dump_fd = _dump ? _dump->event_fd() : -1;
        pollfd fds[2] = {{_dest->fd(), POLLIN, 0}, {dump_fd, POLLIN, 0}};
        const int nfds = dump_fd < 0 ? 1 : 2;
        // A frame already decrypted is not seen by poll().
        const bool buffered = _dest->buffered();
        if (::poll(fds, nfds_t(nfds), buffered ? 0 : 100) < 0 && errno != EINTR)
            throw sys_error("poll");
        // First: a migrator that was stopped wakes to clocks that jumped,
        // and the source daemon's verdict is the reason.
        check_source_daemon();
        beat("the destination's restore");
        const auto looked = std::chrono::steady_clock::now();
        if (looked > until)
            throw error("the destination did not restore in time");
        // Silent only with nothing waiting to be read: this loop may itself
        // have been busy (CRIU's notifications, the commit).
        const bool waiting = fds[0].revents || buffered;
        if (_destination_reports_progress && !waiting && looked - heard > progress_silence)
            throw error(fmt::format(
                "the destination daemon reported no progress of its restore for {} s (hung or "
                "stopped; its host still answers); its last report: {}",
                std::chrono::duration_cast<std::chrono::seconds>(progress_silence).count(),
                last_step));
        check_interrupt();
        if (nfds == 2 && fds[1].revents)
            _dump->on_event();
        if (!waiting)
            continue;
        control::envelope_ptr e;
        try {
            e = control::receive(*_dest, net::after(control_timeout));
        } catch (const std::system_error& ex) {
            if (ex.code().value() != ETIMEDOUT)
                throw;
            throw error(fmt::format(
                "the destination host stopped answering during its restore (down, or the network "
                "to it is): its connection timed out after {} s of silence",
                std::chrono::duration_cast<std::chrono::seconds>(
                    scaled_silence(destination_host_silence))
                    .count()));
        }
        if (!e)
            throw error("the destination daemon closed the connection before resuming");
        heard = std::chrono::steady_clock::now();
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_RESTORE_PROGRESS) {
            const auto& p = *e->restore_progress;
            last_step = fmt::format("\"{}\", {} ms after the images came", p.step ? p.step : "",
                                    p.elapsed_ms);
            continue;
        }
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_RESUME_REQUEST) {
            handle_resume_request();
            heard = std::chrono::steady_clock::now(); // the commit was this side's time
            continue;
        }
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_RESTORE_RESULT, "destination");
        const auto& res = *e->restore_result;
        if (!res.ok) {
            // Sent only while the restored tasks have not run: CRIU killed them.
            _destination_never_ran = true;
            throw error(fmt::format("restore failed on the destination: {}",
                                    res.error ? res.error : "unknown"));
        }
        // An engine's restore returns a little after the tasks resumed; the
        // destination measured by how much (network latency not counted).
        // The result's moment is when it arrived: this process may have
        // been busy then (recording the commit, handing packets over).
        const uint64_t now = _dest->last_receipt_ns() ? _dest->last_receipt_ns() : monotonic_ns();
        _r.dest_engine_settle_ns = res.has_engine_settle_ns ? res.engine_settle_ns : 0;
        _r.t_resumed = now - _r.dest_engine_settle_ns;
        if (const auto* m = res.moments;
            m && m->has_resumed_ns && m->has_now_ns && m->now_ns >= m->resumed_ns) {
            // The plugin's resume, by its age when the destination replied
            // (this over-states the downtime by the reply's one-way trip).
            _r.t_plugin_resumed = now - (m->now_ns - m->resumed_ns);
            _r.t_resumed = _r.t_plugin_resumed;
        }
        _r.destination_pid = res.has_root_pid ? res.root_pid : -1;
        _r.dest_images_check_ns = res.images_check_ns;
        _r.dest_lazy_start_ns = res.lazy_start_ns;
        _r.dest_criu_restore_ns = res.criu_restore_ns;
        if (res.mounts_early)
            _r.mounts_early_destination = res.mounts_early;
        return;
    }
}

// Pool mode: ask the source to report when the pool holds every page.
void migration::request_handoff() {
    FerryControl__OutgoingHandoff h = FERRY_CONTROL__OUTGOING_HANDOFF__INIT;
    control::send_message(*_src, h, net::after(control_timeout));
}

void migration::cancel_handoff() {
    FerryControl__OutgoingHandoffCancel c = FERRY_CONTROL__OUTGOING_HANDOFF_CANCEL__INIT;
    control::send_message(*_src, c, net::after(control_timeout));
}

// The push is over. If it succeeded, the source's job is done: end CRIU's
// dump now, so the source tasks and their memory go, while the destination
// reads the rest from the pool.
void migration::handle_handoff(net::deadline until) {
    if (!receive_handoff(until)) {
        if (_r.handoff_cancelled)
            _log->info("the destination had every page before the pool push was over: the "
                       "push was cancelled and its pages dropped");
        else
            _log->warn("no hand-off to the pool ({}); the source serves until the destination "
                       "is done",
                       _r.handoff_error);
        return;
    }
    finish_source();
    _r.handed_off = true;
    _r.t_handed_off = monotonic_ns();
}

// The source daemon's answer to request_handoff: did the pool take every page?
bool migration::receive_handoff(net::deadline until) {
    control::envelope_ptr e;
    try {
        e = control::receive(*_src, until);
    } catch (const std::exception& ex) {
        throw error(
            fmt::format("the local daemon did not answer the pool hand-off: {}", ex.what()));
    }
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_HANDED_OFF, "local daemon");
    const auto& h = *e->outgoing_handed_off;
    _r.pool_push_ns = h.push_ns;
    _r.pool_bytes_stored = h.bytes_stored;
    _r.pool_pages_pushed = h.pages;
    if (!h.ok)
        _r.handoff_error = h.error ? h.error : "unknown";
    _r.handoff_cancelled = h.has_cancelled && h.cancelled;
    return h.ok;
}

void migration::wait_transfer() {
    if (_opt.pool && _opt.mode == migrate_mode::migrate) {
        request_handoff();
        _handoff_pending = true;
    }
    for (;;) {
        if (_handoff_pending) {
            // The destination reports every 200 ms: its silence is bounded
            // here as in the receive below.
            pollfd fds[2] = {{_dest->fd(), POLLIN, 0}, {_src->fd(), POLLIN, 0}};
            const bool buffered = _dest->buffered() || _src->buffered();
            const int n =
                buffered ? 1
                         : ::poll(fds, 2,
                                  int(std::chrono::milliseconds(transfer_silence_limit).count()));
            if (n < 0 && errno != EINTR)
                throw sys_error("poll");
            if (n == 0)
                throw error(fmt::format("the destination sent nothing for {} s after it resumed; "
                                        "the source stays frozen",
                                        transfer_silence_limit.count()));
            if (fds[1].revents || _src->buffered()) {
                _handoff_pending = false;
                handle_handoff(net::after(control_timeout)); // the answer is arriving
                continue;
            }
            if (!fds[0].revents && !_dest->buffered())
                continue;
        }
        control::envelope_ptr e;
        try {
            e = control::receive(*_dest, net::after(transfer_silence_limit));
        } catch (const std::exception& ex) {
            throw error(fmt::format(
                "lost the destination after it resumed ({}); the source stays frozen", ex.what()));
        }
        if (!e)
            throw error(
                "the destination closed the connection after it resumed; the source stays frozen");
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_PROGRESS) {
            if (_opt.show_progress) {
                const auto& p = *e->transfer_progress;
                std::fprintf(stderr, "\r  post-copy: %5.1f%%  %llu / %llu pages",
                             p.pages_total ? 100.0 * double(p.pages_done) / double(p.pages_total)
                                           : 100.0,
                             static_cast<unsigned long long>(p.pages_done),
                             static_cast<unsigned long long>(p.pages_total));
            }
            continue;
        }
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS, "destination");
        if (_opt.show_progress)
            std::fprintf(stderr, "\n");
        const auto& s = *e->transfer_stats;
        auto& t = _r.transfer;
        t.present = true;
        t.error = s.error ? s.error : "";
        t.stats = s;
        t.pool_lost_nodes = s.pool_lost_nodes ? s.pool_lost_nodes : "";
        t.pool_members = s.pool_members ? s.pool_members : "";
        t.pool_scrub_error = s.pool_scrub_error ? s.pool_scrub_error : "";
        t.precopy_unused = s.precopy_unused ? s.precopy_unused : "";
        t.stats.error = nullptr; // pointers into the envelope, which is freed
        t.stats.pool_lost_nodes = t.stats.pool_members = t.stats.pool_scrub_error = nullptr;
        t.stats.precopy_unused = nullptr;
        t.stats.base.n_unknown_fields = 0;
        t.stats.base.unknown_fields = nullptr;
        _r.t_transferred = monotonic_ns();
        if (!s.ok)
            throw error(fmt::format("the destination failed during post-copy: {}", t.error));
        return;
    }
}

// Every page is on the destination: end CRIU's dump, which kills the
// frozen source tasks. If CRIU cannot be ended, the tasks are killed anyway:
// the destination runs the workload, so the source must never run again.
void migration::finish_source() {
    set_phase("finishing");
    _source_arp_silence.clear(); // the source is gone
    try {
        FerryControl__OutgoingFinish f = FERRY_CONTROL__OUTGOING_FINISH__INIT;
        control::send_message(*_src, f, net::after(control_timeout));
        auto e = control::receive(*_src, net::after(_deadlines.close + control_timeout));
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_FINISHED, "local daemon");
        _r.source_pages_served = e->outgoing_finished->pages_served;
        _r.source_bytes_sent = e->outgoing_finished->bytes_sent;
        _r.source_serve_cpu_ns = e->outgoing_finished->serve_cpu_ns;
        if (const auto* m = e->outgoing_finished->moments; m && m->has_dump_end_ns)
            _r.t_dump_end = m->dump_end_ns;
        if (e->outgoing_finished->recovery && *e->outgoing_finished->recovery)
            _r.recovery = e->outgoing_finished->recovery;
        if (!_dump->wait_end(_deadlines.close)) {
            if (_dump->stuck())
                throw criu::criu_timeout(_dump->end_error());
            _log->warn("CRIU reported the dump as failed after CLOSE: {}", _dump->end_error());
        }
    } catch (const std::exception& e) {
        _log->error("cannot end the source's dump ({}); ending the source tasks directly",
                    e.what());
        release_source(true);
        if (!criu::inspect_workload(_opt.pid).gone())
            throw error(fmt::format("the source could not be ended after the destination took "
                                    "over: {}",
                                    _r.recovery));
    }
    _r.t_finished = monotonic_ns();
}

} // namespace ferry::migrator
