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

// The tasks run: tell the migrator, with the destination's phases.
void incoming_session::report_resumed(uint64_t restore_ns,
                                      std::optional<uint64_t> engine_settle_ns) {
    _resumed = true;
    FerryControl__RestoreResult res = FERRY_CONTROL__RESTORE_RESULT__INIT;
    res.ok = true;
    res.has_root_pid = true;
    res.root_pid = _root_pid;
    res.has_images_check_ns = true;
    res.images_check_ns = _images_check_ns;
    res.has_lazy_start_ns = true;
    res.lazy_start_ns = _lazy_start_ns;
    res.has_criu_restore_ns = true;
    res.criu_restore_ns = restore_ns;
    res.has_engine_settle_ns = engine_settle_ns.has_value();
    res.engine_settle_ns = engine_settle_ns.value_or(0);
    const std::string mounts_early = mounts_early_outcome();
    res.mounts_early = mounts_early.empty() ? nullptr : const_cast<char*>(mounts_early.c_str());
    FerryControl__CriuMoments moments;
    _d.criu_events().moments(_id).to_message(moments);
    res.moments = &moments;
    try {
        control::send_message(_conn, res, net::after(control_timeout));
    } catch (const std::exception& ex) {
        _log->warn("cannot report the resume: {}", ex.what());
    }
    hold_idle_poll_through_post_copy(); // the downtime is over
}

bool incoming_session::ask_to_resume() {
    // The kernel's MAC change on a macvlan waits for an RCU grace period
    // (4-16 ms here): it runs while the migrator decides.
    begin_taking_macs();
    let_lazy_pages_pull_ahead();
    std::string refusal = "the migrator went away";
    try {
        FerryControl__ResumeRequest ask = FERRY_CONTROL__RESUME_REQUEST__INIT;
        control::send_message(_conn, ask, net::after(control_timeout));
        auto d = control::receive(_conn, net::after(control_timeout));
        if (d && d->body_case == FERRY_CONTROL__ENVELOPE__BODY_RESUME_DECISION) {
            if (d->resume_decision->resume && !fault_injected(fault::dest_fail_after_commit))
                return true;
            refusal = d->resume_decision->reason ? d->resume_decision->reason : "refused";
        }
    } catch (const std::system_error& ex) {
        refusal =
            ex.code().value() == ETIMEDOUT
                ? fmt::format("the migrator did not answer within {} s", control_timeout.count())
                : ex.what();
    } catch (const std::exception& ex) {
        refusal = ex.what();
    }
    _log->warn("resume refused ({}); CRIU kills the restored tasks", refusal);
    _resume_refused = refusal;
    tell_lazy_pages_discarded(refusal);
    return false;
}

} // namespace ferry::pagesrv
