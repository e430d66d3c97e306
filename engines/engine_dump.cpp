#include "engine_dump.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_image.hpp"
#include "engine_request.hpp"
#include "line_socket.hpp"
#include "tar_writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ferry::engines {

namespace fs = std::filesystem;

std::vector<std::string> named_volumes(const nlohmann::json& mounts) {
    std::vector<std::string> out;
    if (!mounts.is_array())
        return out;
    for (const auto& m : mounts)
        if (m.value("Type", "") == "volume")
            out.push_back(m.value("Name", "?") + " at " + m.value("Destination", "?"));
    return out;
}

engine_dump::engine_dump(std::string engine, const container_info& c, fs::path dir,
                         std::string migration_id, criu::dump_settings settings, host_tools tools)
    : dump_driver(settings.interrupted), _engine(std::move(engine)), _id(c.id), _name(c.name),
      _dir(std::move(dir)), _migration_id(std::move(migration_id)), _settings(std::move(settings)),
      _tools(std::move(tools)), _log(make_logger("migrator")) {}

engine_dump::~engine_dump() {
    std::error_code ec;
    fs::remove(engines::checkpoint_request_path(_id), ec);
    if (_cmd.running()) {
        // Only reached when the migration could neither finish nor abort.
        _log->error("{}'s checkpoint of {} is still running; leaving it", _engine, _name);
        _cmd.detach();
    }
}

void engine_dump::start(uint16_t port) {
    const auto fifo = _dir / "status.fifo";
    if (::mkfifo(fifo.c_str(), 0600))
        throw sys_error("mkfifo " + fifo.string());
    _status.reset(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (!_status)
        throw sys_error("open " + fifo.string());
    engines::checkpoint_request req;
    req.migration_id = _migration_id;
    req.migrator_pid = ::getpid();
    req.page_server_port = port;
    req.status_fifo = fifo.string();
    const std::string lock = _settings.network_lock_skip       ? "network-lock skip\n"
                             : _settings.network_lock_nftables ? "network-lock nftables\n"
                                                               : "";
    req.criu_config = criu::write_config(_dir / "criu-dump.conf", _settings.criu_options + lock,
                                         _settings.plugin_dir)
                          .string();
    req.criu_env = _settings.criu_env;
    req.criu_env.push_back(engines::criu_log_level_env(_settings.log_level));
    req.tcp_established = _settings.tcp_established;
    req.images_dir = redirected_images().string();
    if (_settings.warm_destination && holds_before_freeze()) {
        _hold_listen = listen_unix(_dir / "hold.socket");
        req.hold_socket = (_dir / "hold.socket").string();
    }
    engines::write_request(engines::checkpoint_request_path(_id), req);
    _t_start = monotonic_ns();
    _cmd = child_process::spawn(checkpoint_command(), _dir / (_engine + "-checkpoint.log"));
}

std::vector<criu::engine_file> engine_dump::wait_held(std::chrono::milliseconds bound) {
    if (!_hold_listen)
        return {};
    const auto until = std::chrono::steady_clock::now() + bound;
    while (!_hold_conn) {
        if (interrupted())
            throw error("interrupted");
        pollfd fds[2] = {{_hold_listen.get(), POLLIN, 0}, {_cmd.exit_fd(), POLLIN, 0}};
        if (::poll(fds, 2, 100) < 0 && errno != EINTR)
            throw sys_error("poll");
        if (fds[1].revents)
            on_event(); // throws: it ended before its runc started
        if (fds[0].revents) {
            unique_fd conn(::accept4(_hold_listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
            const std::string want = std::string(hold_request) + " ";
            const auto line = conn ? read_line(conn.get(), std::chrono::seconds(5)) : "";
            if (line.rfind(want, 0) == 0) {
                _hold_conn = std::move(conn);
                _held_descriptors = line.substr(want.size());
            }
        }
        if (!_hold_conn && std::chrono::steady_clock::now() > until)
            throw error(fmt::format("{}'s checkpoint of {} did not reach its runc within {} ms",
                                    _engine, _name, bound.count()));
    }
    auto files = configuration_before_freeze();
    files.push_back({"descriptors.json", {_held_descriptors.begin(), _held_descriptors.end()}});
    return files;
}

void engine_dump::release_hold() {
    if (!_hold_conn)
        return;
    write_line(_hold_conn.get(), go_answer);
    _hold_conn.reset();
    _hold_listen.reset();
    _t_start = monotonic_ns(); // the freeze comes now, not when the command started
}

bool engine_dump::refuse_hold(std::chrono::milliseconds bound) noexcept {
    if (!_hold_listen)
        return false;
    // The shim fails runc's checkpoint before it starts (a shim that has
    // not connected yet finds no socket): nothing froze.
    if (_hold_conn)
        write_line(_hold_conn.get(), "refuse the migration did not go ahead");
    _hold_conn.reset();
    _hold_listen.reset();
    _ended = true;
    try {
        if (_cmd.running() && !_cmd.wait_for(bound)) {
            _log->warn("{}'s checkpoint of {} did not end after its hold was refused; killing it",
                       _engine, _name);
            _cmd.signal(SIGKILL);
            (void)_cmd.wait_for(std::chrono::seconds(5));
        }
    } catch (const std::exception& e) {
        _log->warn("waiting for {}'s refused checkpoint: {}", _engine, e.what());
    }
    return true;
}

criu::dump_times engine_dump::wait_dumped() {
    // Until the daemon reports the exact moment (the engine's pause or
    // CRIU's freeze), the command's start stands for the freeze.
    criu::dump_times t;
    t.freeze = _t_start;
    wait_status(std::chrono::steady_clock::now() + _settings.limits.dump,
                "freeze it and write its images");
    t.dumped = monotonic_ns();
    return t;
}

int engine_dump::event_fd() const {
    return _cmd.running() ? _cmd.exit_fd() : -1;
}

void engine_dump::on_event() {
    if (auto st = _cmd.wait_for(std::chrono::milliseconds(0))) {
        _ended = true;
        _end_error = fmt::format("{}'s checkpoint ended early ({}): {}", _engine,
                                 describe_wait_status(*st), _cmd.log_tail());
        throw error(_end_error);
    }
}

// runc's status byte says both: every image is written and CRIU's page
// server listens.
void engine_dump::wait_page_server(std::chrono::milliseconds bound) {
    if (_stuck && !_status_ready)
        throw criu::criu_timeout("CRIU is stuck: not waiting for its page server again");
    wait_status(std::chrono::steady_clock::now() + bound, "start its page server");
}

bool engine_dump::wait_end(std::chrono::milliseconds bound) {
    if (!_cmd.running())
        return _succeeded;
    auto st = _cmd.wait_for(bound);
    if (!st) {
        _stuck = true;
        _end_error =
            fmt::format("{}'s checkpoint did not end within {} ms", _engine, bound.count());
        return false;
    }
    _ended = true;
    _succeeded = WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
    if (!_succeeded)
        _end_error = fmt::format("{} checkpoint: {}: {}", _engine, describe_wait_status(*st),
                                 _cmd.log_tail());
    return _succeeded;
}

// CRIU runs under runc under the engine: once it is killed, runc fails and
// the engine's command ends with it.
void engine_dump::after_criu_killed() noexcept {
    _ended = true;
    if (!_cmd.running())
        return;
    try {
        if (auto st = _cmd.wait_for(std::chrono::seconds(15))) {
            _log->info("{}'s checkpoint ended ({}) after CRIU was killed", _engine,
                       describe_wait_status(*st));
            resync_engine();
            return;
        }
    } catch (const std::exception& e) {
        _log->warn("waiting for {}'s checkpoint: {}", _engine, e.what());
    }
    _log->warn("{}'s checkpoint of {} still runs after CRIU was killed: see {}", _engine, _name,
               _cmd.log().string());
}

// Until runc's status byte (CRIU's page server listens, every image is
// written), the engine command's end, or `until`.
void engine_dump::wait_status(std::chrono::steady_clock::time_point until, const char* what) {
    if (_status_ready)
        return;
    for (;;) {
        if (!_cmd.running() || _ended)
            throw error(_end_error.empty() ? fmt::format("{}'s checkpoint is over", _engine)
                                           : _end_error);
        if (interrupted())
            throw error("interrupted");
        pollfd fds[2] = {{_status.get(), POLLIN, 0}, {_cmd.exit_fd(), POLLIN, 0}};
        if (::poll(fds, 2, 100) < 0 && errno != EINTR)
            throw sys_error("poll");
        if (fds[0].revents & POLLIN) {
            char b = 1;
            if (::read(_status.get(), &b, 1) == 1) {
                _status_ready = true;
                return;
            }
        }
        if (fds[1].revents)
            on_event(); // throws: the engine ended without a lazy dump
        if (std::chrono::steady_clock::now() > until) {
            _stuck = true;
            throw criu::criu_timeout(fmt::format("{}'s checkpoint of {} did not {} in time ({})",
                                                 _engine, _name, what, log_hint()));
        }
    }
}

bool engine_dump::remove_source() {
    try {
        remove_container();
        return true;
    } catch (const std::exception& e) {
        _log->warn("cannot remove the source container {}: {}", _name, e.what());
        return false;
    }
}

std::vector<criu::engine_file> engine_dump::writable_layer_files(const layer_diff& diff,
                                                                 const fs::path& shm) const {
    std::vector<criu::engine_file> files;
    std::vector<std::string> deleted;
    // interrupted() is what every wait of a dump polls: the migrator's
    // heartbeat goes from it. Its answer waits for the next wait.
    const std::function<void()> progress = [this] { (void)interrupted(); };
    diff(_dir / "rootfs-diff.tar", deleted, progress);
    files.push_back({"rootfs-diff.tar", criu::read_file(_dir / "rootfs-diff.tar")});
    const auto list = nlohmann::json(deleted).dump();
    files.push_back({"deleted.files", {list.begin(), list.end()}});
    // The container's own /dev/shm: a tmpfs the engine mounts for it, which
    // CRIU leaves alone as an external mount.
    if (!shm.empty() && fs::is_directory(shm)) {
        tar_writer t(_dir / "devshm-checkpoint.tar");
        t.on_progress(progress);
        t.add_tree("", shm);
        t.close();
        files.push_back({"devshm-checkpoint.tar", criu::read_file(_dir / "devshm-checkpoint.tar")});
    }
    return files;
}

} // namespace ferry::engines
