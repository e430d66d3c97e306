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

// The engine restores; CRIU inside it asks the gate (the shim, as CRIU's
// post-restore action script) before the tasks run, as in restore() above.
bool incoming_session::restore_with_engine() {
    const uint64_t t0 = monotonic_ns();
    std::vector<std::string> command;
    try {
        command = _engine_restore->prepare(_dir, _id, _criu_env);
    } catch (const std::exception& ex) {
        return engine_restore_failed(ex.what(), false);
    }
    unique_fd gate = engines::listen_gate(_dir);
    auto engine_cmd = child_process::spawn(command, _dir / (_engine + "-restore.log"));
    bool gated = false, resume = false;
    uint64_t t_resume = 0;
    const auto until = net::after(_deadlines.restore);
    for (;;) {
        // Once answered, the gate is not watched; once the tasks resumed,
        // lazy-pages' reports wait for relay_transfer().
        pollfd fds[3] = {{gated ? -1 : gate.get(), POLLIN, 0},
                         {engine_cmd.exit_fd(), POLLIN, 0},
                         {resume ? -1 : _lazy.report.get(), POLLIN, 0}};
        if (::poll(fds, 3, 1000) < 0 && errno != EINTR)
            throw sys_error("poll engine restore");
        _lazy.take_uffds();
        if (std::chrono::steady_clock::now() > until) {
            engine_cmd.signal(SIGKILL);
            (void)engine_cmd.wait_for(std::chrono::seconds(10));
            return engine_restore_failed("the engine did not restore in time", resume);
        }
        if (fds[2].revents) {
            if (auto e = lazy_report_before_resume()) {
                engine_cmd.signal(SIGKILL);
                (void)engine_cmd.wait_for(std::chrono::seconds(10));
                return engine_restore_failed(*e, false);
            }
        }
        if (fds[0].revents) {
            unique_fd conn(::accept4(gate.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!conn)
                continue;
            gated = true;
            try {
                _root_pid = engines::read_gate_request(conn.get());
                resume = ask_to_resume();
            } catch (const std::exception& ex) {
                _log->warn("{}", ex.what());
            }
            engines::answer_gate(conn.get(), resume, resume ? "" : "not committed");
            t_resume = monotonic_ns();
        }
        if (!fds[1].revents)
            continue;
        const auto status = engine_cmd.wait_for(std::chrono::milliseconds(0));
        if (!status)
            continue;
        const bool ok = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
        if (!ok)
            return engine_restore_failed(fmt::format("{}'s restore failed ({}): {}", _engine,
                                                     describe_wait_status(*status),
                                                     engine_cmd.log_tail()),
                                         resume);
        if (!resume)
            // Restored without asking the gate: the engine did not run Ferry's shim.
            return engine_restore_failed(
                fmt::format("{} restored without Ferry's runc shim (is its runtime ferry-runc?)",
                            _engine),
                true);
        if (const pid_t p = _engine_restore->container_pid(); p > 0)
            _root_pid = p;
        report_resumed(t_resume - t0, monotonic_ns() - t_resume);
        return true;
    }
}

// Before the migrator hears of a resume, the source can take over again, so
// nothing of the destination's copy may keep running.
bool incoming_session::engine_restore_failed(const std::string& why, bool tasks_ran) {
    if (tasks_ran && _root_pid > 0)
        ::kill(_root_pid, SIGKILL);
    _engine_restore->remove();
    send_restore_failure(why);
    return false;
}

} // namespace ferry::pagesrv
