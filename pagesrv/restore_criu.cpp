#include "incoming_session.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_features.hpp"
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
#include <unistd.h>

#include <cstring>

#include <fstream>
#include <sstream>

namespace ferry::pagesrv {

// A process tree: `criu restore --lazy-pages` over CRIU's RPC. CRIU starts at
// the prepare. One that knows --restore-wait-fd (criu-patches/0015) gets the
// request then too: it does what needs no image (its options, log and
// kerndat probes, ~0.9 ms here) before the source freezes, then waits for
// the byte restore_with_criu() writes. CRIU's post-restore notification is
// the commit gate.
void incoming_session::start_criu_restore() {
    const auto& criu_path = _d.config().tools.criu;
    auto env = _criu_env;
    env.push_back("FERRY_MIGRATION_ID=" + _id); // the plugin tags its reports with it
    std::vector<int> inherited;
    if (_copy_netns)
        inherited.push_back(_copy_netns.get());
    unique_fd wait_end;
    if (criu::supports_restore_wait(criu_path)) {
        int ends[2];
        if (::pipe2(ends, O_CLOEXEC))
            throw sys_error("pipe2");
        wait_end.reset(ends[0]);
        _criu_go.reset(ends[1]);
        inherited.push_back(wait_end.get());
    }
    _criu.emplace(criu::service::start(criu_path, env, inherited));
    if (_criu_go)
        send_criu_restore_request(wait_end.get());
}

// `wait_fd`: CRIU's number of the pipe it waits on, or -1 (no wait).
void incoming_session::send_criu_restore_request(int wait_fd) {
    // CRIU opens the directory through this fd once it has the request.
    _criu_images_dir.reset(::open(_dir.c_str(), O_DIRECTORY | O_CLOEXEC));
    if (!_criu_images_dir)
        throw sys_error("open " + _dir.string());
    CriuOpts opts = CRIU_OPTS__INIT;
    opts.images_dir_fd = _criu_images_dir.get();
    opts.has_work_dir_fd = true;
    opts.work_dir_fd = _criu_images_dir.get();
    opts.log_file = const_cast<char*>("restore.log");
    opts.has_log_level = true;
    opts.log_level = _d.config().tools.criu_log_level;
    opts.has_lazy_pages = true;
    opts.lazy_pages = true;
    opts.has_notify_scripts = true;
    opts.notify_scripts = true;
    // A tree whose network moves goes into the namespace made for it
    // (moving_network.cpp), with its connections.
    const auto config =
        criu::write_config(_dir / "criu-restore.conf",
                           std::string(_connections_move ? criu::restore_established_options
                                                         : criu::restore_options) +
                               criu::restore_feature_lines(_d.config().tools.criu) +
                               (wait_fd >= 0 ? fmt::format("restore-wait-fd {}\n", wait_fd) : ""),
                           _d.config().tools.criu_plugin_dir)
            .string();
    opts.config_file = const_cast<char*>(config.c_str());
    InheritFd netns = INHERIT_FD__INIT;
    InheritFd* inherited[] = {&netns};
    if (_copy_netns) {
        netns.key = const_cast<char*>(criu::moving_netns_key);
        netns.fd = _copy_netns.get();
        opts.n_inherit_fd = 1;
        opts.inherit_fd = inherited;
    }
    CriuReq req = CRIU_REQ__INIT;
    req.type = CRIU_REQ_TYPE__RESTORE;
    req.opts = &opts;
    _criu->send(req);
}

bool incoming_session::restore_with_criu() {
    const uint64_t t0 = monotonic_ns();
    if (_criu_go) {
        // The images are here. A CRIU that already ended (a bad option, a
        // crash) has left its answer or its socket's end, read below.
        const char go = 1;
        if (::write(_criu_go.get(), &go, 1) != 1)
            _log->warn("could not tell the waiting criu to restore: {}", std::strerror(errno));
        _criu_go.reset();
    } else {
        send_criu_restore_request(-1);
    }
    criu::service& criu = *_criu;
    const std::string log_hint = (_dir / "restore.log").string();
    const auto until = net::after(_deadlines.restore);
    for (;;) {
        // Watch lazy-pages too: if it dies during restore, the restored
        // tasks would block on their first fault and CRIU with them.
        pollfd fds[2] = {{criu.fd(), POLLIN, 0}, {_lazy.report_to_watch(), POLLIN, 0}};
        report_progress("CRIU restores the tree");
        if (::poll(fds, 2, 1000) < 0 && errno != EINTR)
            throw sys_error("poll restore");
        _lazy.take_uffds();
        if (std::chrono::steady_clock::now() > until)
            return cancel_restore(criu, "restore did not finish in time");
        if (fds[1].revents) {
            auto e = lazy_report_before_resume();
            if (e)
                return cancel_restore(criu, *e);
        }
        if (!fds[0].revents)
            continue;
        auto r = criu.receive(net::after(_deadlines.notify));
        if (r->type != CRIU_REQ_TYPE__NOTIFY) {
            if (r->success) {
                // CRIU exits once it has answered. Reaped now, it leaves no
                // zombie under the daemon for the whole post-copy; one
                // slower to exit is reaped when the session ends.
                (void)criu.reap(std::chrono::milliseconds(100));
                return true;
            }
            send_restore_failure(criu::describe_failure(*r, log_hint));
            return false;
        }
        const std::string script = r->notify && r->notify->script ? r->notify->script : "";
        bool ok = true;
        if (script == "post-restore") {
            // The tasks are restored but have not run. This is the last
            // notification whose failure makes CRIU kill them (a failed
            // pre-resume is only logged), so it is the commit gate: ask the
            // migrator whether the source is ready to stay frozen for good.
            if (r->notify->has_pid)
                _root_pid = r->notify->pid;
            ok = ask_to_resume();
            if (ok)
                take_over_network(_root_pid);
        } else if (script == "post-resume") {
            tell_lazy_pages_tasks_run();
            report_resumed(monotonic_ns() - t0, std::nullopt);
        }
        criu.ack_notify(ok);
    }
}

// Stops a restore that cannot succeed: the tasks it created are killed, so
// none of them can run without its pages.
bool incoming_session::cancel_restore(criu::service& criu, const std::string& why) {
    proc::kill_descendants(criu.pid());
    criu.kill();
    if (_root_pid > 0)
        ::kill(_root_pid, SIGKILL);
    send_restore_failure(why);
    return false;
}

} // namespace ferry::pagesrv
