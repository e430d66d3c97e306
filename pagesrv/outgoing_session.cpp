#include "outgoing_session.hpp"

#include "core/error.hpp"
#include "sys/net.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>

namespace ferry::pagesrv {

namespace {

constexpr auto reply_timeout = std::chrono::seconds(10);
// How long a committed source waits for its destination to report every
// page installed when the migrator is gone.
constexpr auto orphaned_commit_wait = std::chrono::hours(1);
// How long FINISH's reply waits for CRIU's dump-end report after CLOSE.
constexpr auto dump_end_wait = std::chrono::seconds(2);
// How often a pending hand-off looks for the migrator's cancel.
constexpr auto handoff_poll = std::chrono::milliseconds(20);
// How often a committed session looks whether its migrator is late to
// finish a migration whose destination has every page.
constexpr auto late_finish_poll = std::chrono::seconds(1);
// How late a migrator that promised no heartbeats may be.
constexpr auto late_finish_default = std::chrono::seconds(60);

} // namespace

void outgoing_session::run() {
    for (;;) {
        // Until the commit a silent migrator's source is frozen for nothing.
        const bool bounded =
            _migrator_silence && _m.current_state() == outgoing_migration::state::registered;
        const auto until = bounded ? net::after(*_migrator_silence) : net::no_deadline;
        if (bounded && !_conn.buffered() && !net::wait_readable(_conn.fd(), until)) {
            on_migrator_silent();
            return;
        }
        if (_m.current_state() == outgoing_migration::state::committed && !_conn.buffered() &&
            !net::wait_readable(_conn.fd(), net::after(late_finish_poll))) {
            finish_without_migrator();
            continue;
        }
        control::envelope_ptr e;
        try {
            e = control::receive(_conn, until);
        } catch (const std::exception& ex) {
            log().warn("migrator connection: {}", ex.what());
        }
        if (!e) {
            on_migrator_gone();
            return;
        }
        next n = next::more;
        switch (e->body_case) {
        case FERRY_CONTROL__ENVELOPE__BODY_MIGRATOR_ALIVE:
            break;
        case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_COMMIT:
            n = on_commit();
            break;
        case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_FINISH:
            n = on_finish();
            break;
        case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_HANDOFF:
            n = on_handoff();
            break;
        case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_ABORT:
            n = on_abort(*e->outgoing_abort);
            break;
        case FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_HANDOFF_CANCEL:
            // Crossed the hand-off's answer, which the migrator takes as the
            // reply: the push was complete. Nothing more to say.
            break;
        default:
            control::send_error(_conn, fmt::format("unexpected {}", control::body_name(*e)),
                                net::after(reply_timeout));
        }
        if (n == next::done)
            return;
    }
}

outgoing_session::next outgoing_session::on_commit() {
    // CRIU read the VMA flags before the freeze: a madvise() or mlock() in
    // between would be lost on the destination. The source is still frozen
    // and whole: refuse, and the migrator resumes it.
    if (const auto problem = _m.vma_flags_problem(); !problem.empty()) {
        log().error("refusing the commit: the VMA flags changed as the tree was frozen: {}",
                    problem);
        control::send_error(_conn,
                            "the workload changed its memory mappings' flags as it was frozen (" +
                                problem + "); the source resumes, try again",
                            net::after(reply_timeout));
        return next::more;
    }
    if (_m.commit()) {
        FerryControl__OutgoingCommitted c = FERRY_CONTROL__OUTGOING_COMMITTED__INIT;
        control::send_message(_conn, c, net::after(reply_timeout));
    } else {
        control::send_error(_conn, "the migration was already aborted: the source is running",
                            net::after(reply_timeout));
    }
    return next::more;
}

// Every page reached the destination: CLOSE ends the dump and the source.
outgoing_session::next outgoing_session::on_finish() {
    try {
        if (!_finished_alone_error.empty())
            throw error(_finished_alone_error);
        const std::string recovery =
            _finished_alone_recovery ? *_finished_alone_recovery : _m.finish();
        FerryControl__OutgoingFinished f = FERRY_CONTROL__OUTGOING_FINISHED__INIT;
        f.recovery = recovery.empty() ? nullptr : const_cast<char*>(recovery.c_str());
        f.pages_served = _m.pages_served();
        f.bytes_sent = _m.bytes_sent();
        f.has_serve_cpu_ns = true;
        f.serve_cpu_ns = _m.serve_cpu_ns();
        // CRIU exits right after CLOSE; with the plugin loaded (it reported
        // the freeze), its dump-end is a moment away.
        auto moments = _events.moments(_m.id());
        if (moments.freeze_start && !moments.dump_end)
            moments = _events.wait_for(_m.id(), "dump-end", dump_end_wait);
        FerryControl__CriuMoments cm;
        moments.to_message(cm);
        f.moments = &cm;
        control::send_message(_conn, f, net::after(reply_timeout));
    } catch (const std::exception& ex) {
        control::send_error(_conn, ex.what(), net::after(reply_timeout));
    }
    return next::done;
}

// Pool mode: answered once the push is over, either way, or once the
// migrator cancels it (the destination had every page first).
outgoing_session::next outgoing_session::on_handoff() {
    std::optional<push_result> r;
    bool cancelled = false;
    while (!(r = _m.wait_pool_push(handoff_poll))) {
        if (!_conn.buffered() &&
            !net::wait_readable(_conn.fd(), net::after(std::chrono::seconds(0))))
            continue;
        control::envelope_ptr e;
        try {
            e = control::receive(_conn, net::after(reply_timeout));
        } catch (const std::exception& ex) {
            log().warn("migrator connection: {}", ex.what());
        }
        if (!e) {
            on_migrator_gone();
            return next::done;
        }
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_MIGRATOR_ALIVE)
            continue;
        // Parking, before the commit: the operator stopped the migrator.
        // The abort stops the push and drops what reached the pool.
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_ABORT)
            return on_abort(*e->outgoing_abort);
        if (e->body_case != FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_HANDOFF_CANCEL) {
            control::send_error(
                _conn, fmt::format("unexpected {} during the hand-off", control::body_name(*e)),
                net::after(reply_timeout));
            continue;
        }
        log().info("the destination has every page before the pool push is over: cancelling "
                   "the push and dropping its pages");
        _m.cancel_pool_push();
        r = push_result{.error = "cancelled: the destination had every page first"};
        cancelled = true;
        break;
    }
    FerryControl__OutgoingHandedOff h = FERRY_CONTROL__OUTGOING_HANDED_OFF__INIT;
    h.ok = r->ok;
    h.error = r->ok ? nullptr : const_cast<char*>(r->error.c_str());
    h.pages = r->pages;
    h.bytes_stored = r->bytes_stored;
    h.push_ns = r->push_ns;
    h.has_cancelled = true;
    h.cancelled = cancelled;
    control::send_message(_conn, h, net::after(reply_timeout));
    return next::more;
}

outgoing_session::next outgoing_session::on_abort(const FerryControl__OutgoingAbort& a) {
    if (_m.abort(a.reason, a.has_destination_never_ran && a.destination_never_ran,
                 a.has_criu_gone && a.criu_gone)) {
        FerryControl__OutgoingAborted done = FERRY_CONTROL__OUTGOING_ABORTED__INIT;
        control::send_message(_conn, done, net::after(reply_timeout));
        return next::done;
    }
    control::send_error(_conn, "cannot abort: the migration is committed",
                        net::after(reply_timeout));
    return next::more;
}

// Before the commit the source resumes; after it, the destination runs the
// workload and still needs the source's pages: it ends once they are all
// there.
void outgoing_session::on_migrator_gone() {
    if (_m.abort("the migrator disconnected before the destination resumed"))
        return;
    if (_m.current_state() != outgoing_migration::state::committed)
        return;
    log().warn("the migrator left after commit; finishing when the destination is "
               "done");
    if (!_m.wait_destination_done(orphaned_commit_wait)) {
        if (_m.current_state() == outgoing_migration::state::aborted)
            return; // the destination killed its copy before it ran: the source runs
        log().error("{}; the source stays frozen",
                    _m.abandoned() ? "the daemon stops before the destination finished"
                                   : "the destination never finished");
        return;
    }
    try {
        (void)_m.finish();
    } catch (const std::exception& ex) {
        log().error("{}", ex.what());
    }
}

// After the commit the source is of no use once the destination has every
// page. A migrator that does not come to finish it (stopped, hung, with its
// connection open) must not keep the frozen tree and its memory here: the
// migration is finished without it, and its FINISH, should it come, is
// answered as if it had been first.
void outgoing_session::finish_without_migrator() {
    const auto done_at = _m.destination_done_at();
    const auto late = _migrator_silence.value_or(late_finish_default);
    if (!done_at || std::chrono::steady_clock::now() - *done_at < late)
        return;
    log().warn("the destination has had every page for {} s and the migrator has not finished "
               "the migration (stopped or hung; its host answers): finishing it here",
               std::chrono::duration_cast<std::chrono::seconds>(late).count());
    try {
        _finished_alone_recovery = _m.finish();
    } catch (const std::exception& ex) {
        log().error("{}", ex.what());
        _finished_alone_error = ex.what();
    }
}

// A migrator that is alive but silent (stopped, in a debugger, hung in the
// kernel) keeps its connection open: without this the source would stay
// frozen for as long as it does. The commit comes on this thread, so it
// cannot cross the abort: after it, commit() refuses.
void outgoing_session::on_migrator_silent() {
    const std::string why = fmt::format(
        "the migrator sent nothing for {} s before the commit (stopped or hung; its host answers)",
        std::chrono::duration_cast<std::chrono::seconds>(*_migrator_silence).count());
    if (!_m.abort(why))
        return;
    (void)control::try_send_error(
        _conn,
        fmt::format("the source daemon aborted the migration and resumed the source: {}", why),
        net::after(std::chrono::seconds(5)));
}

} // namespace ferry::pagesrv
