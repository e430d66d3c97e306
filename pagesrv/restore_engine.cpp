#include "incoming_session.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_image.hpp"
#include "engine_request.hpp"
#include "image_names.hpp"
#include "netlink/netns.hpp"
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

// The warm restore's engine command reaches its runc shim's wait for the
// images within a second or two (podman creates the container, its network
// namespace and mounts, and starts conmon and runc).
constexpr auto warm_shim_limit = std::chrono::seconds(60);
// A refused warm restore: the shim fails runc, and the engine's command ends.
constexpr auto warm_stop_limit = std::chrono::seconds(30);

} // namespace

// Before the freeze: the source's engine wrote the container's configuration
// (its checkpoint holds before its runc starts); the engine's restore starts
// from it now, and its shim waits at the gate for the images. If that does
// not work out, the restore stays cold: it starts once the images are in.
void incoming_session::start_warm_restore(const FerryControl__IncomingWarm& warm) {
    FerryControl__WarmReady ready = FERRY_CONTROL__WARM_READY__INIT;
    std::string why_cold;
    try {
        std::vector<criu::engine_file> files;
        for (size_t i = 0; i < warm.n_files; i++) {
            const auto& f = *warm.files[i];
            if (!acceptable_image_name(f.name) ||
                buffer_checksum(f.data.data, f.data.len) != f.xxh64)
                throw error(fmt::format("the source's {} is corrupt or misnamed", f.name));
            files.push_back({f.name, std::vector<uint8_t>(f.data.data, f.data.data + f.data.len)});
        }
        const auto command = _engine_restore->warm_command(_dir, _id, _criu_env, files);
        if (command.empty())
            throw error(fmt::format("{} restores only once the images are in", _engine));
        const uint64_t t0 = monotonic_ns();
        _gate = engines::listen_gate(_dir);
        _warm_cmd.emplace(child_process::spawn(command, _dir / (_engine + "-restore.log")));
        _engine_restore->warm_waiting(wait_for_warm_shim());
        if (fault_injected(fault::dest_die_warm)) {
            _log->warn("fault injection: dying while the warm restore waits");
            ::raise(SIGKILL);
        }
        if (fault_injected(fault::warm_start_fail))
            throw error("fault injection: the warm start is refused");
        _log->info("{}'s restore waits for the images ({:.1f} ms to start)", _engine,
                   ns_to_ms(monotonic_ns() - t0));
    } catch (const std::exception& ex) {
        why_cold = ex.what();
        _log->warn("no warm restore, the engine restores once the images are in: {}", why_cold);
        stop_warm_restore(why_cold);
        _engine_restore->remove(); // the name is free again for the cold restore
    }
    ready.warm = why_cold.empty();
    ready.reason = why_cold.empty() ? nullptr : const_cast<char*>(why_cold.c_str());
    control::send_message(_conn, ready, net::after(control_timeout));
}

std::filesystem::path incoming_session::wait_for_warm_shim() {
    const auto until = net::after(warm_shim_limit);
    for (;;) {
        pollfd fds[2] = {{_gate.get(), POLLIN, 0}, {_warm_cmd->exit_fd(), POLLIN, 0}};
        if (::poll(fds, 2, 1000) < 0 && errno != EINTR)
            throw sys_error("poll warm restore");
        if (fds[0].revents) {
            unique_fd conn(::accept4(_gate.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!conn)
                continue;
            const auto req = engines::read_gate_request(conn.get());
            if (req.images) {
                _warm_shim = std::move(conn);
                quiet_copy_network(req.bundle);
                return req.bundle;
            }
        }
        if (fds[1].revents && _warm_cmd->wait_for(std::chrono::milliseconds(0))) {
            const auto tail = _warm_cmd->log_tail();
            _warm_cmd.reset();
            throw error(
                fmt::format("{}'s restore ended before its runc started: {}", _engine, tail));
        }
        if (std::chrono::steady_clock::now() > until)
            throw error(fmt::format("{}'s restore did not reach its runc within {} s", _engine,
                                    warm_shim_limit.count()));
    }
}

// The shim fails runc's restore when refused (or when the gate closes), so
// the engine's command ends without restoring anything.
void incoming_session::stop_warm_restore(const std::string& why) noexcept {
    if (_warm_shim)
        engines::answer_images(_warm_shim.get(), false, why);
    _warm_shim.reset();
    _gate.reset();
    if (!_warm_cmd)
        return;
    try {
        if (_warm_cmd->running() && !_warm_cmd->wait_for(warm_stop_limit)) {
            _log->warn("{}'s warm restore did not end when refused; killing it", _engine);
            _warm_cmd->signal(SIGKILL);
            (void)_warm_cmd->wait_for(std::chrono::seconds(10));
        }
    } catch (const std::exception& e) {
        _log->warn("waiting for {}'s warm restore: {}", _engine, e.what());
    }
    _warm_cmd.reset();
}

// The engine restores (or, warm, goes on); CRIU inside it asks the gate (the
// shim, as CRIU's post-restore action script) before the tasks run, as in
// restore_criu.cpp.
bool incoming_session::restore_with_engine() {
    const uint64_t t0 = monotonic_ns();
    std::vector<std::string> command;
    try {
        command = _engine_restore->prepare(_dir, _id, _criu_env);
    } catch (const std::exception& ex) {
        stop_warm_restore(ex.what());
        return engine_restore_failed(ex.what(), false);
    }
    unique_fd gate = _gate ? std::move(_gate) : engines::listen_gate(_dir);
    child_process engine_cmd;
    if (_warm_cmd) {
        engine_cmd = std::move(*_warm_cmd);
        _warm_cmd.reset();
        engines::answer_images(_warm_shim.get(), true, "");
        _warm_shim.reset();
    } else {
        engine_cmd = child_process::spawn(command, _dir / (_engine + "-restore.log"));
    }
    bool gated = false, resume = false;
    uint64_t t_resume = 0;
    const auto until = net::after(_deadlines.restore);
    for (;;) {
        // Once answered, the gate is not watched; once the tasks resumed,
        // lazy-pages' reports wait for relay_transfer().
        // Once the copy may resume, the migrator sends what its source held
        // during the freeze (moving_network.cpp).
        const bool watch_migrator = resume && _connections_move && !_held_packets_done;
        pollfd fds[4] = {{gated ? -1 : gate.get(), POLLIN, 0},
                         {engine_cmd.exit_fd(), POLLIN, 0},
                         {resume ? -1 : _lazy.report_to_watch(), POLLIN, 0},
                         {watch_migrator ? _conn.fd() : -1, POLLIN, 0}};
        const bool buffered = watch_migrator && _conn.buffered();
        // Once the gate let the tasks go, look every 2 ms for the plugin's
        // "resumed" (it reaches the daemon's event socket, not a fd here):
        // lazy-pages waits for it to start its main pass.
        const bool await_tasks = resume && !_lazy.told_tasks_run;
        report_progress("the engine restores the container");
        if (::poll(fds, 4, buffered ? 0 : await_tasks ? 2 : 1000) < 0 && errno != EINTR)
            throw sys_error("poll engine restore");
        if (await_tasks && _d.criu_events().moments(_id).resumed)
            tell_lazy_pages_tasks_run();
        if (fds[3].revents || buffered)
            receive_held_packets();
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
            try {
                const auto req = engines::read_gate_request(conn.get());
                if ((req.images || req.setup_namespaces) && _connections_move && !gated) {
                    // A restore whose network moves: before its CRIU, or
                    // once CRIU made the namespaces (docker's).
                    std::string why;
                    try {
                        if (req.images)
                            quiet_copy_network(req.bundle);
                        else
                            quiet_netns(netlink::netns_of(req.pid));
                    } catch (const std::exception& ex) {
                        why = ex.what();
                        _log->error("the copy cannot take the source's addresses: {}", why);
                    }
                    if (req.images)
                        engines::answer_images(conn.get(), why.empty(), why);
                    else
                        engines::answer_gate(conn.get(), why.empty(), why);
                    continue;
                }
                gated = true;
                if (req.images)
                    throw error("the runc shim asked for images it has been given");
                _root_pid = req.pid;
                resume = ask_to_resume();
            } catch (const std::exception& ex) {
                gated = true;
                _log->warn("{}", ex.what());
            }
            if (resume)
                finish_taking_macs(true);
            engines::answer_gate(conn.get(), resume, resume ? "" : "not committed");
            t_resume = monotonic_ns();
            if (resume)
                take_over_network(_root_pid);
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
        tell_lazy_pages_tasks_run(); // if the plugin's report never came: the engine is done
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
